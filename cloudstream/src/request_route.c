/*
 * cloudstream/src/request_route.c — which tunnel a request goes to: its node from the DNAT'd
 * destination, Host, X-Forwarded-Uri or the pod (route.c decides, pure; this file gives it the
 * registry, the peer directory and the pod cache to look in), then authorization, then this
 * replica's tunnel, a peer link to the replica that holds the node, or a wait for the node's
 * redial (request_reconnect.c). Loop thread only.
 */
#include "peer.h"
#include "front.h"

#include <stdio.h>
#include <string.h>

#include <stream/err.h>
#include <stream/log.h>

#include "apiserver.h"
#include "route.h"

/* What route.c gets for a node another replica holds (the directory's, peer.h): not a tunnel
 * here, but a session somewhere; route() turns it into the peer link. */
static char remote_node;

static void *lookup_by_ip(const char *ip, size_t len, const char **node, void *user)
{
	struct cs_server *srv = user;
	void *t = cs_registry_get_by_ip(srv->reg, ip, len, node);
	uint32_t caps;
	if (t == NULL && srv->peers && cs_peer_lookup_ip(srv, ip, len, node, &caps))
		return &remote_node;
	return t;
}

static size_t lookup_ip_owners(const char *ip, size_t len, const char **names, size_t cap,
                               void *user)
{
	return cs_registry_ip_owners(((struct cs_server *)user)->reg, ip, len, names, cap);
}

static void *lookup_by_name(const char *name, size_t len, void *user)
{
	struct cs_server *srv = user;
	void *t = cs_registry_get(srv->reg, name, len);
	uint32_t caps;
	if (t == NULL && srv->peers && cs_peer_lookup(srv, name, len, &caps, NULL))
		return &remote_node;
	return t;
}

static void header_view(const struct st_http_request *req, const char *name, const char **p,
                        size_t *len)
{
	ssize_t i = st_http_header_find(req->headers, req->num_headers, name, 0);
	*p = i >= 0 ? req->headers[i].value : NULL;
	*len = i >= 0 ? req->headers[i].value_len : 0;
}

static int lookup_pod(const char *ns, size_t ns_len, const char *pod, size_t pod_len,
                      const char **node, size_t *node_len, void *user)
{
	struct cs_server *srv = user;
	return cs_podcache_get(srv->pods, ns, ns_len, pod, pod_len, st_now_ms(), node, node_len);
}

/* Which tunnel @req is for; NULL after failing the request, or when it waits for a pod lookup
 * or the node's redial (*@wait set). */
struct cs_tunnel *cs__request_route(struct cs_front *f, const struct st_http_request *req,
                                    bool *wait)
{
	struct cs_server *srv = f->srv;
	const struct cs_plan *plan = &f->rl.plan;
	struct cs_route_input in = {0};
	*wait = false;
	if (f->orig_dst[0]) {
		in.orig_dst_ip = f->orig_dst;
		in.orig_dst_ip_len = strlen(f->orig_dst);
	}
	header_view(req, "Host", &in.host, &in.host_len);
	header_view(req, "X-Forwarded-Uri", &in.forwarded_uri, &in.forwarded_uri_len);
	if (plan->path.kind != ST_KUBELET_OTHER) {
		in.pod_namespace = plan->path.namespace_.p;
		in.pod_namespace_len = plan->path.namespace_.len;
		in.pod_name = plan->path.pod.p;
		in.pod_name_len = plan->path.pod.len;
	}
	struct cs_route_lookup lk = {.by_ip = lookup_by_ip,
	                             .by_name = lookup_by_name,
	                             .ip_owners = lookup_ip_owners,
	                             .pod_node = srv->pods ? lookup_pod : NULL,
	                             .user = srv};
	struct cs_route_result r;
	if (cs_route_resolve(&in, &lk, &r) < 0) {
		cs__request_fail(f, 400, CS_ERR_BAD_REQUEST,
		                 "malformed routing header (Host or X-Forwarded-Uri)");
		return NULL;
	}
	snprintf(f->node, sizeof f->node, "%s", r.node);
	char msg[768];
	if (r.need_pod_lookup && !f->pod_looked_up) {
		f->pod_looked_up = true;
		int rc = cs_pod_lookup_start(srv, f->ordinal, in.pod_namespace,
		                             in.pod_namespace_len, in.pod_name, in.pod_name_len);
		if (rc == 0) {
			f->state = CS_FRONT_ROUTING;
			*wait = true;
			return NULL;
		}
		f->pod_lookup_ok = false;
	}
	if (r.node[0] == '\0') {
		if (f->pod_looked_up && !f->pod_lookup_ok) {
			snprintf(msg, sizeof msg,
			         "cloudstream could not ask the apiserver which node runs pod "
			         "%.*s/%.*s",
			         (int)in.pod_namespace_len, in.pod_namespace, (int)in.pod_name_len,
			         in.pod_name);
			cs__request_fail(f, 0, CS_ERR_NO_ROUTE, msg);
			return NULL;
		}
		cs__request_fail(f, 0, CS_ERR_NO_ROUTE,
		                 "cloudstream cannot tell which edge node this request is for (no "
		                 "DNAT'd destination, node Host or X-Forwarded-Uri)");
		return NULL;
	}
	if (r.shared) {
		/* Two connected nodes really hold this IP: naming one would be a guess. */
		srv->m.shared_ip_refusals++;
		snprintf(msg, sizeof msg,
		         "IP %s is shared by edge nodes %.100s and %.100s; cloudstream cannot tell "
		         "which one this request is for (address the node by name)",
		         r.shared_ip, r.shared_by[0], r.shared_by[1]);
		cs__request_fail(f, 409, CS_ERR_NO_ROUTE, msg);
		return NULL;
	}
	/* The node is known: authorize before saying anything about it (the kubelet's order). */
	int az = cs__authz_authorize(f, req);
	if (az <= 0) {
		*wait = az == 0;
		return NULL;
	}
	f->forwarded = false;
	if (r.session == &remote_node) {
		/* Another replica holds the node's tunnel: its peer link carries the stream. */
		struct cs_tunnel *link =
		        cs_peer_lookup(srv, r.node, strlen(r.node), &f->fwd_caps, NULL);
		if (link != NULL && link == f->fwd_refused_by)
			link = NULL; /* it refused the node a moment ago: wait for an announcement */
		if (link != NULL) {
			f->forwarded = true;
			f->fwd_link = link;
			return link;
		}
		r.session = NULL; /* the link went between the two lookups */
	}
	if (r.session == NULL) {
		char note[200];
		bool by_ip = r.source == CS_ROUTE_ORIG_DST || r.source == CS_ROUTE_HOST_IP;
		if (cs__request_park(f, r.node, by_ip, note, sizeof note)) {
			*wait = true;
			return NULL;
		}
		snprintf(msg, sizeof msg,
		         "edge node %s is not connected to this cloudstream (no tunnel session%s)",
		         r.node, note);
		cs__request_fail(f, 0, CS_ERR_NO_SESSION, msg);
		return NULL;
	}
	return r.session;
}
