/*
 * cloudstream/src/route.h — which edge node a kubelet-API request is for (DESIGN D5). Pure:
 * lookups go through callbacks into the registry and the pod cache.
 */
#ifndef CLOUDSTREAM_ROUTE_H
#define CLOUDSTREAM_ROUTE_H

#include <stdbool.h>
#include <stddef.h>

#include "registry.h"

/* What the glue knows about a request. Views; NULL when absent. */
struct cs_route_input {
	const char *orig_dst_ip; /* SO_ORIGINAL_DST when the connection was DNAT'd */
	size_t orig_dst_ip_len;
	const char *host; /* Host header: "10.0.0.5:10350", "[fd00::5]:10350", "edge-1" */
	size_t host_len;
	const char *forwarded_uri; /* X-Forwarded-Uri: "/api/v1/nodes/edge-1/proxy/metrics" */
	size_t forwarded_uri_len;
	const char *pod_namespace; /* from the kubelet path, for the pod lookup */
	size_t pod_namespace_len;
	const char *pod_name;
	size_t pod_name_len;
};

enum cs_route_source {
	CS_ROUTE_NONE = 0,
	CS_ROUTE_ORIG_DST,
	CS_ROUTE_HOST_IP,
	CS_ROUTE_HOST_NAME,
	CS_ROUTE_FORWARDED_URI,
	CS_ROUTE_POD,
};

struct cs_route_lookup {
	/* Session of the node with this IP, or NULL; *node = its name. */
	void *(*by_ip)(const char *ip, size_t len, const char **node, void *user);
	/* Session of the node with this name, or NULL. */
	void *(*by_name)(const char *name, size_t len, void *user);
	/* How many connected nodes hold this IP (2+: really shared); the first @cap names into
	 * @names. NULL: no IP is ever shared. */
	size_t (*ip_owners)(const char *ip, size_t len, const char **names, size_t cap, void *user);
	/* Pod → node: 1 and *node set when known, -ENOENT when known absent, 0 when not cached.
	 * NULL: the pod lookup is off. */
	int (*pod_node)(const char *ns, size_t ns_len, const char *pod, size_t pod_len,
	                const char **node, size_t *node_len, void *user);
	void *user;
};

struct cs_route_result {
	enum cs_route_source source; /* what decided */
	void *session;               /* NULL when the node named has no session */
	char node[CS_NODE_NAME_MAX_BYTES +
	          1];         /* the node (or node IP) the request names; "" if none */
	bool need_pod_lookup; /* nothing named a node, but the pod's node is not cached yet */
	/* The request's IP (DNAT'd destination or Host) is held by two or more connected nodes.
	 * When nothing else named a node, node is that IP and session NULL: the caller refuses
	 * naming both (never one of them silently). */
	bool shared;
	char shared_ip[CS_IP_TEXT_MAX_BYTES + 1];
	char shared_by[2][CS_NODE_NAME_MAX_BYTES + 1];
};

/*
 * cs_route_resolve() - in order: the DNAT'd original destination; a Host that is a node IP
 * (loopback and unspecified addresses never are: the apiserver forwards the client's Host on
 * upgrades) or the name of a node with a session; the node in X-Forwarded-Uri
 * (/api/v1/nodes/<name>[:port]/proxy/...); the pod's node. The first that names a node wins,
 * even without a session (then session is NULL: the caller answers 503 naming it). An IP two
 * connected nodes share names neither: the later rules are tried, and if none names a node the
 * result is shared (see struct cs_route_result).
 * Returns 0, or -EBADMSG when X-Forwarded-Uri names an invalid node name.
 */
int cs_route_resolve(const struct cs_route_input *in, const struct cs_route_lookup *lk,
                     struct cs_route_result *out);

#endif /* CLOUDSTREAM_ROUTE_H */
