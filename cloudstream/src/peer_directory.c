/*
 * cloudstream/src/peer_directory.c — the peer directory over the links (peer_int.h; PROTOCOL.md
 * §7): on each link we dialled our nodes are announced (a full list between SYNC and SYNC_END
 * when the link comes up or a queue overflowed, then NODE_UP / NODE_DOWN as tunnels come and
 * go), and on each link we accepted the other replica's arrive into the directory, the pure
 * table and codec of peerdir.c. What the directory learns acts here: a newer tunnel of a node
 * we hold closes ours (or lets a draining one finish), a node announced or gone wakes or parks
 * the requests waiting for it. Readiness (/readyz) waits for every peer's full list. Loop
 * thread only.
 */
#include "peer_int.h"

#include <string.h>

#include <stream/ext.h>
#include <stream/frame.h>
#include <stream/log.h>

/* ---- the directory ------------------------------------------------------------------------ */

/* A peer announced a newer tunnel of a node we hold: ours is stale (PROTOCOL.md §7). */
static void on_dir_up(const char *node, size_t len, uint64_t gen, const char *replica, void *user)
{
	struct cs_server *srv = user;
	struct cs_tunnel *t = cs_registry_get(srv->reg, node, len);
	if (t == NULL ||
	    cs_peerdir_gen_cmp(cs_tunnel_generation(t), srv->replica, gen, replica) >= 0)
		return;
	if (cs_tunnel_moved(t))
		return; /* draining: its streams finish here, new requests go to @replica */
	peers_of(srv)->stale_closed++;
	st_log(ST_LOG_INFO, cs_tunnel_node(t), 0,
	       "tunnel superseded: the edge node reconnected to replica %s (%llu ms later)",
	       replica, (unsigned long long)(gen - cs_tunnel_generation(t)));
	cs_tunnel_close(t, "the edge node reconnected to another cloudstream replica");
}

/* A peer announced a node: requests waiting for its redial go there. */
static void on_dir_up_wake(const char *node, size_t len, uint64_t gen, const char *replica,
                           void *user)
{
	on_dir_up(node, len, gen, replica, user);
	cs_front_node_back(user, node, len);
}

/* A peer's entry went: unless the node is connected here, it may be between tunnels. */
static void on_dir_down(const struct cs_peerdir_entry *e, void *user)
{
	struct cs_server *srv = user;
	if (cs_registry_get(srv->reg, e->node, e->node_len) == NULL)
		cs_front_node_gone(srv, e->node, e->node_len, e->ips, e->ip_lens, e->n_ips);
}

const struct cs_peerdir_cbs cs__peer_dir_cbs = {.on_up = on_dir_up_wake, .on_down = on_dir_down};

/* A directory message on a link we accepted (the link's dir_msg op, from its session). */
int cs__peer_dir_msg(void *user, uint64_t type, const uint8_t *payload, size_t len)
{
	struct accepted_link *a = user;
	struct cs_peers *p = a->p;
	const char *replica = cs_tunnel_node(a->t); /* a link is named by its replica */
	if (p->slot_owner[a->slot] != a)
		return 0; /* a link replaced by a newer one from the same replica: ignored */
	bool was = cs_peerdir_peer_synced(p->dir, a->slot);
	int rc = cs_peerdir_recv(p->dir, a->slot, type, payload, len, &cs__peer_dir_cbs, p->srv);
	if (rc < 0) {
		st_log(ST_LOG_WARN, replica, 0, "peer link dropped: malformed %s from replica %s",
		       st_msg_type_name(type), replica);
		return rc;
	}
	if (!was && cs_peerdir_peer_synced(p->dir, a->slot)) {
		struct cs_peerdir_stats st;
		cs_peerdir_get_stats(p->dir, &st);
		st_log(ST_LOG_INFO, replica, 0, "peer %s synced (%zu nodes held by peers)", replica,
		       st.entries);
	}
	return 0;
}

bool cs_peers_ready(struct cs_server *srv, const char **why)
{
	struct cs_peers *p = peers_of(srv);
	if (p == NULL || p->dir == NULL)
		return true;
	const char *missing = p->dns_name[0] && !p->dns_known ? p->dns_name : NULL;
	if (missing == NULL && srv->cfg.peer_service && srv->cfg.peer_service[0] &&
	    !p->service_known)
		missing = srv->cfg.peer_service;
	for (size_t i = 0; missing == NULL && i < p->n_out; i++) {
		struct out_link *l = &p->out[i];
		if (!l->used || l->stopping || l->self)
			continue;
		/* Its node list comes on the link it dialled to us; it names itself on ours. */
		int slot = l->e ? cs_peerdir_peer_find(p->dir, l->replica) : -1;
		if (slot < 0 || !cs_peerdir_peer_synced(p->dir, slot) ||
		    p->slot_owner[slot] == NULL) {
			missing = l->host;
			break;
		}
	}
	if (missing == NULL) {
		if (!p->ready_logged)
			st_info("peers: synced with every peer: ready");
		p->ready_logged = true;
		return true;
	}
	if (p->ready_logged || st_now_ms() - p->started_ms >= srv->cfg.peer_sync_timeout_ms) {
		if (!p->ready_logged && !p->timeout_logged)
			st_warn("peers: not synced with %s after --peer-sync-timeout: ready anyway",
			        missing);
		p->timeout_logged = true;
		return true;
	}
	*why = "not synced with every peer yet (--peer-sync-timeout)";
	return false;
}

/* ---- links we dialled: announcing our nodes ---------------------------------------------- */

static ssize_t encode_up(const struct cs_tunnel *t, uint8_t *out, size_t cap)
{
	const char *node = cs_tunnel_node(t);
	struct cs_peerdir_entry e = {.node = node,
	                             .node_len = strlen(node),
	                             .gen_ms = cs_tunnel_generation(t),
	                             .caps = cs_tunnel_caps(t)};
	for (const char *s = cs_tunnel_ips(t); s && *s && e.n_ips < CS_REGISTRY_MAX_IPS;) {
		const char *comma = strchr(s, ',');
		size_t len = comma ? (size_t)(comma - s) : strlen(s);
		e.ips[e.n_ips] = s;
		e.ip_lens[e.n_ips++] = len;
		s += len + (comma != NULL);
	}
	return cs_peerdir_entry_encode(out, cap, true, &e);
}

/* Queues as much of the full list as the link's peer queue takes. */
void cs__peer_in_fill(struct in_link *l)
{
	uint8_t buf[ST_MAX_EXT_PAYLOAD_BYTES];
	if (l->sync_pending) {
		if (st_session_send_peer(l->sess, ST_MSG_SYNC, NULL, 0) < 0)
			return;
		l->sync_pending = false;
		l->in_sync = true;
		l->cursor = cs_tunnel_next(l->srv, NULL);
	}
	while (l->in_sync) {
		size_t room = st_session_peer_space(l->sess);
		if (room == 0)
			return;
		size_t pos = 0;
		while (l->cursor) {
			if (!cs_tunnel_holds_node(l->cursor)) {
				l->cursor = cs_tunnel_next(l->srv, l->cursor);
				continue;
			}
			ssize_t n = encode_up(l->cursor, buf + pos, room - pos);
			if (n < 0)
				break;
			pos += (size_t)n;
			l->cursor = cs_tunnel_next(l->srv, l->cursor);
		}
		if (pos > 0) {
			if (st_session_send_peer(l->sess, ST_MSG_NODE_UP, buf, pos) < 0)
				return; /* cannot happen: sized by the room */
			continue;
		}
		if (l->cursor != NULL)
			return; /* one entry did not fit the room left: after the next write */
		if (st_session_send_peer(l->sess, ST_MSG_SYNC_END, NULL, 0) < 0)
			return;
		l->in_sync = false;
	}
}

/* An edge's tunnel came up or goes (tunnel.c calls this for those only, up before down). */
static void announce(struct cs_server *srv, struct cs_tunnel *t, bool up)
{
	struct cs_peers *p = peers_of(srv);
	if (p == NULL)
		return;
	uint8_t buf[ST_MAX_EXT_PAYLOAD_BYTES];
	for (struct in_link *l = p->in; l; l = l->next) {
		if (l->cursor == t)
			l->cursor = cs_tunnel_next(srv, t); /* the list goes on without it */
		if (l->sync_pending)
			continue; /* the list to come says it */
		ssize_t n;
		if (up) {
			n = encode_up(t, buf, sizeof buf);
		} else {
			const char *node = cs_tunnel_node(t);
			struct cs_peerdir_entry e = {.node = node,
			                             .node_len = strlen(node),
			                             .gen_ms = cs_tunnel_generation(t)};
			n = cs_peerdir_entry_encode(buf, sizeof buf, false, &e);
		}
		if (n < 0 || st_session_send_peer(l->sess, up ? ST_MSG_NODE_UP : ST_MSG_NODE_DOWN,
		                                  buf, (size_t)n) < 0)
			l->sync_pending = true; /* the queue is full: a full list says it all */
		cs__peer_in_kick(l);
	}
}

void cs_peers_node_up(struct cs_server *srv, struct cs_tunnel *t)
{
	announce(srv, t, true);
}

void cs_peers_node_down(struct cs_server *srv, struct cs_tunnel *t)
{
	announce(srv, t, false);
}
