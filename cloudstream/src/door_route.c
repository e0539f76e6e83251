/*
 * cloudstream/src/door_route.c — which edge node a front-door CONNECT goes to (door_int.h): a
 * connected node's IP or name here, the replica that holds it (peer.h), a pod IP through the
 * pod cache and the apiserver (--front-door-pod-ips), or a wait for a node between tunnels
 * (--node-reconnect-grace, sharing request_reconnect.c's cap and tick). A CONNECT that waited
 * goes back to door_conn.c's start as if it had just come. Loop thread only.
 */
#include "peer.h"
#include "door_int.h"
#include "recent.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <stream/err.h>
#include <stream/log.h>

#include "apiserver.h"

/* cs__door_fail() with the reason formatted from @fmt (at most CS_DOOR_MAX_REASON_BYTES);
 * NULL, which the resolvers return after failing the connection. */
static struct cs_tunnel *refuse(struct door *d, int status, enum door_result r, const char *fmt,
                                ...) __attribute__((format(printf, 4, 5)));
static struct cs_tunnel *refuse(struct door *d, int status, enum door_result r, const char *fmt,
                                ...)
{
	char why[CS_DOOR_MAX_REASON_BYTES];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	cs__door_fail(d, status, r, why);
	return NULL;
}

/* d->ip is no connected node's: with --front-door-pod-ips, the node of the pod that has it
 * (the pod cache, else a lookup through the apiserver: NULL with the door in DOOR_LOOKUP).
 * NULL after failing the connection. Sets d->pod when it found one. */
static struct cs_tunnel *resolve_pod(struct door *d)
{
	struct cs_server *srv = d->srv;
	const char *ns = CS_DOOR_POD_IP_NS;
	if (!srv->cfg.front_door_pod_ips || srv->pods == NULL)
		return refuse(
		        d, 502, DOOR_R_NO_ROUTE,
		        "no edge node connected to this cloudstream has IP %s (not a node address "
		        "cloudstream knows)",
		        d->ip);
	if (strchr(d->ip, ':') != NULL)
		return refuse(
		        d, 502, DOOR_R_NO_ROUTE,
		        "IP %s is no connected edge node's, and pods are reached over IPv4 only",
		        d->ip);
	const char *node = NULL;
	size_t node_len = 0;
	int rc = cs_podcache_get(srv->pods, ns, strlen(ns), d->ip, strlen(d->ip), st_now_ms(),
	                         &node, &node_len);
	if (rc == 0 && !d->looked_up) {
		d->looked_up = true;
		if (cs_pod_ip_lookup_start(srv, d->ordinal, d->ip) == 0) {
			d->state = DOOR_LOOKUP;
			return NULL;
		}
		d->lookup_ok = false;
	}
	if (rc == 0)
		return refuse(
		        d, 502, DOOR_R_NO_ROUTE,
		        "IP %s is no connected edge node's, and cloudstream could not ask the "
		        "apiserver which pod has it",
		        d->ip);
	if (rc < 0)
		return refuse(
		        d, 502, DOOR_R_NO_ROUTE,
		        "no edge node connected to this cloudstream and no running pod has IP %s",
		        d->ip);
	snprintf(d->node, sizeof d->node, "%.*s", (int)node_len, node);
	struct cs_tunnel *t = cs_registry_get(srv->reg, node, node_len);
	if (t == NULL)
		return refuse(
		        d, 503, DOOR_R_NO_SESSION,
		        "pod IP %s is on node %s, which is not connected to this cloudstream (no "
		        "tunnel session)",
		        d->ip, d->node);
	d->pod = true;
	return t;
}

/* The CONNECT's node (@key: its name, or the IP it was asked by) is connected nowhere: does it
 * wait for the node's redial (DOOR_RECONNECT)? false: answer now, @note saying it waited or
 * could not (else ""). */
static bool door_park(struct door *d, const char *key, char *note, size_t cap)
{
	if (!cs_reconnect_should_wait(d->srv, key, &d->rc_since_ms, d->rc_waited_ms, note, cap))
		return false;
	d->rc_parked_ms = st_now_ms();
	d->state = DOOR_RECONNECT;
	return true;
}

/* Which connected node the CONNECT names; NULL after failing the connection, or while the
 * apiserver is asked about a pod IP (DOOR_LOOKUP). When another replica holds the node's
 * tunnel (peer.h): the peer link to it, with *@fwd set and the node's caps in *@fwd_caps. */
struct cs_tunnel *cs__door_resolve(struct door *d, bool *fwd, uint32_t *fwd_caps)
{
	*fwd = false;
	struct cs_server *srv = d->srv;
	if (d->ip[0]) {
		const char *node = NULL;
		struct cs_tunnel *t = cs_registry_get_by_ip(srv->reg, d->ip, strlen(d->ip), &node);
		if (t != NULL)
			return t;
		t = cs_peer_lookup_ip(srv, d->ip, strlen(d->ip), &node, fwd_caps);
		if (t != NULL) {
			snprintf(d->node, sizeof d->node, "%s", node);
			*fwd = true;
			return t;
		}
		/* A node's IP between its tunnels: wait for its redial. */
		char note[200];
		if (door_park(d, d->ip, note, sizeof note))
			return NULL;
		if (note[0])
			return refuse(
			        d, 503, DOOR_R_NO_SESSION,
			        "IP %s is an edge node's that is not connected to this cloudstream "
			        "(no tunnel session%s)",
			        d->ip, note);
		const char *owners[2];
		if (cs_registry_ip_owners(srv->reg, d->ip, strlen(d->ip), owners, 2) >= 2) {
			return refuse(
			        d, 502, DOOR_R_NO_ROUTE,
			        "IP %s is shared by edge nodes %.100s and %.100s; cloudstream "
			        "cannot "
			        "tell which one (address the node by name)",
			        d->ip, owners[0], owners[1]);
		}
		return resolve_pod(d);
	}
	struct cs_tunnel *t = cs_registry_get(srv->reg, d->node, strlen(d->node));
	if (t == NULL) {
		t = cs_peer_lookup(srv, d->node, strlen(d->node), fwd_caps, NULL);
		*fwd = t != NULL;
	}
	if (t == NULL) {
		char note[200];
		if (door_park(d, d->node, note, sizeof note))
			return NULL;
		return refuse(
		        d, 503, DOOR_R_NO_SESSION,
		        "edge node %s is not connected to this cloudstream (no tunnel session%s)",
		        d->node, note);
	}
	return t;
}

void cs_door_pod_resolved(struct cs_server *srv, uint64_t ordinal, bool ok)
{
	struct door_set *ds = cs__door_set(srv);
	for (struct door *d = ds ? ds->all : NULL; d; d = d->next)
		if (d->ordinal == ordinal) {
			if (d->state != DOOR_LOOKUP)
				return;
			d->state = DOOR_HEAD; /* cs__door_start() moves it on */
			d->lookup_ok = ok;
			cs__door_start(d);
			cs__door_update_rx(d);
			return;
		}
}

/* A waiting CONNECT goes on: routed again from a timer of its own (not inside the tunnel's or
 * the peer link's callback that said the node is back), exactly as if it had just come. */
static void on_door_resume(lws_sorted_usec_list_t *sul)
{
	struct door *d = lws_container_of(sul, struct door, sul_dial);
	if (d->state != DOOR_HEAD)
		return;
	cs__door_start(d);
	cs__door_update_rx(d);
}

void cs__door_unpark(struct door *d, int outcome)
{
	if (d->state != DOOR_RECONNECT)
		return;
	struct cs_server *srv = d->srv;
	srv->n_reconnect_waiting--;
	uint64_t now = st_now_ms();
	d->rc_waited_ms += now > d->rc_parked_ms ? now - d->rc_parked_ms : 0;
	d->state = DOOR_HEAD;                /* cs__door_start() moves it on */
	if (outcome != CS_RECONNECT_GAVE_UP) /* that one is counted with its 503 */
		srv->m.reconnect_waits[outcome]++;
	if (outcome != CS_RECONNECT_CLIENT_GONE)
		lws_sul_schedule(srv->ctx, 0, &d->sul_dial, on_door_resume, 1);
}

void cs_door_node_back(struct cs_server *srv, const char *node, size_t len)
{
	struct door_set *ds = cs__door_set(srv);
	for (struct door *d = ds ? ds->all : NULL; d; d = d->next) {
		if (d->state != DOOR_RECONNECT)
			continue;
		const char *owner;
		uint32_t caps;
		bool back = d->ip[0]
		                    ? cs_registry_get_by_ip(srv->reg, d->ip, strlen(d->ip), NULL) ||
		                              (srv->peers &&
		                               cs_peer_lookup_ip(srv, d->ip, strlen(d->ip), &owner,
		                                                 &caps))
		                    : strlen(d->node) == len && memcmp(d->node, node, len) == 0;
		if (back)
			cs__door_unpark(d, cs_registry_get(srv->reg, node, len)
			                           ? CS_RECONNECT_BACK_LOCAL
			                           : CS_RECONNECT_BACK_PEER);
	}
}

void cs_door_reconnect_tick(struct cs_server *srv, uint64_t now_ms)
{
	struct door_set *ds = cs__door_set(srv);
	uint64_t grace = srv->cfg.node_reconnect_grace_ms;
	for (struct door *d = ds ? ds->all : NULL; d; d = d->next) {
		if (d->state != DOOR_RECONNECT)
			continue;
		const char *key = d->ip[0] ? d->ip : d->node;
		uint64_t down = cs_recent_get(srv->recent, key, strlen(key));
		if (cs_reconnect_decide(down, d->rc_since_ms, now_ms, grace, 0, 1) !=
		    CS_RECONNECT_WAIT)
			cs__door_unpark(d, CS_RECONNECT_GAVE_UP);
	}
}
