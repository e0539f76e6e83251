/*
 * edgestream/src/es_route.h — which backend serves a request from the cloud (pure).
 *
 * The edge owns its backends: the cloud names a kubelet API path (or, with TCP_CONNECT, a port),
 * never a host. A path maps onto the kubelet, or onto an allow-listed local port through
 * /ports/<name>/<rest>; a TCP_CONNECT maps onto an allow-listed local port. Anything else is
 * refused with a reason, and nothing is dialled. Local ports are denied unless configured.
 */
#ifndef EDGESTREAM_ROUTE_H
#define EDGESTREAM_ROUTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ES_MAX_LOCAL_PORTS 64u
#define ES_MAX_POD_PORTS   32u
#define ES_MAX_POD_CIDRS   16u
/* The TCP_CONNECT target naming the kubelet's own endpoint on the node (--kubelet-url). */
#define ES_TCP_TARGET_KUBELET  "kubelet"
#define ES_LOCAL_PORT_NAME_MAX 63u
/* The path prefix that reaches a local port: /ports/<name or number>/<rest>. */
#define ES_PORTS_PREFIX "/ports/"

struct es_local_port {
	char name[ES_LOCAL_PORT_NAME_MAX + 1]; /* [a-z0-9.-], as in TCP_CONNECT targets */
	uint16_t port;
};

struct es_allow {
	struct es_local_port v[ES_MAX_LOCAL_PORTS];
	size_t n;
	/* Pod IPs (TCP_CONNECT to a dotted IPv4 target): off while n_pod_ports is 0. */
	uint16_t pod_ports[ES_MAX_POD_PORTS];
	size_t n_pod_ports;
	struct {
		uint32_t net, mask; /* host byte order */
	} pod_cidrs[ES_MAX_POD_CIDRS];
	size_t n_pod_cidrs;
};

/* es_allow_add_pod_port() - "8443": a port pods may be reached on. 0, -EINVAL (message in
 * @err), -EEXIST, -ENOSPC. */
int es_allow_add_pod_port(struct es_allow *a, const char *entry, char *err, size_t errlen);

/* es_allow_add_pod_cidr() - "10.244.3.0/24": where pod IPs must lie. 0, -EINVAL, -ENOSPC. */
int es_allow_add_pod_cidr(struct es_allow *a, const char *entry, char *err, size_t errlen);

/*
 * es_allow_add() - add an entry "name=port" (e.g. "node-exporter=9100"). Returns 0, -EINVAL
 * (malformed: the message is in @err), -EEXIST (name or port listed twice), -ENOSPC.
 */
int es_allow_add(struct es_allow *a, const char *entry, char *err, size_t errlen);

enum es_target_kind {
	ES_TARGET_REFUSE = 0,
	ES_TARGET_KUBELET,
	ES_TARGET_LOCAL_PORT,
	ES_TARGET_CRI, /* exec/attach/portForward through the runtime, containerLogs from its files */
	ES_TARGET_KUBELET_TCP, /* TCP_CONNECT "kubelet": raw TCP to the kubelet's own endpoint */
	ES_TARGET_POD,         /* TCP_CONNECT to a pod IP (host) on an allowed port */
};

struct es_target {
	enum es_target_kind kind;
	uint16_t port;          /* ES_TARGET_LOCAL_PORT */
	const char *path;       /* path to send to the backend: a view into the input path */
	size_t path_len;        /* (for /ports/<name>/x it is /x) */
	const char *local_name; /* ES_TARGET_LOCAL_PORT: the entry's name */
	char host[16];          /* ES_TARGET_POD: the pod IP, dotted */
	uint64_t refuse_code;   /* ES_TARGET_REFUSE: enum st_ext_error_code */
	char reason[160];       /* ES_TARGET_REFUSE: why, for the ERROR message and the log */
};

/*
 * es_route_request() - the backend for a JSON connect request with @path (decoded, starts with
 * '/'). Paths under /ports/ go to the named allow-listed port (or are refused); exec, attach,
 * portForward and containerLogs go to the container runtime when @cri_enabled; any other path
 * goes to the kubelet when @kubelet_enabled. Returns 0 (see out->kind).
 */
int es_route_request(const struct es_allow *a, bool kubelet_enabled, bool cri_enabled,
                     const char *path, size_t path_len, struct es_target *out);

/*
 * es_route_tcp() - the backend for TCP_CONNECT to @port with an optional @target:
 *   "kubelet"     the kubelet's own endpoint (when @kubelet_enabled; @port is not used: the
 *                 cloud's number never chooses where the edge dials);
 *   a dotted IPv4 a pod IP, only when pod ports are configured, @port is one of them and the
 *                 IP lies in a pod CIDR;
 *   a name        the allow-list entry of that name, which must have @port;
 *   empty         the allow-list entry with @port.
 * Anything else is refused with a reason naming the flag. Returns 0 (see out->kind).
 */
int es_route_tcp(const struct es_allow *a, bool kubelet_enabled, uint64_t port, const char *target,
                 size_t target_len, struct es_target *out);

/*
 * es_parse_url() - split "scheme://host[:port][/path]" where scheme is @scheme ("wss",
 * "https"); [v6] hosts allowed; @default_port when none. Path defaults to "/". Returns 0 or
 * -EINVAL (wrong scheme, empty host, bad port, a field over its buffer).
 */
int es_parse_url(const char *url, const char *scheme, int default_port, char *host, size_t host_cap,
                 int *port, char *path, size_t path_cap);

#endif /* EDGESTREAM_ROUTE_H */
