/*
 * cloudstream/src/tunnel_drain.c — draining (SIGTERM): every edge is asked to move to another
 * replica, RECONNECT or CLOSE_CONNECT (PROTOCOL.md §5.6), and its tunnel is kept serving until
 * it moved. Split from tunnel.c, whose CLOSED ends a move (cs__tunnel_move_over) and cancels
 * its timer: the moves have their own timers and rules. Loop thread only.
 */
#include "tunnel_int.h"

#include <stdio.h>
#include <string.h>

#include <stream/log.h>

/* ---- draining: the edges move to another replica (PROTOCOL.md §5.6) ------------------- */

/* How many of a moving edge's new tunnels this draining replica refuses before it stops
 * waiting for the move (a load balancer with no other replica behind it, an edge that dials
 * this replica's own address); with peers, not before this long after SIGTERM either. */
#define CS_MOVE_REFUSALS_MAX 3u
#define CS_MOVE_PATIENCE_MS  5000u
/* A moved tunnel (the node's newer tunnel is up on a peer) closes once it carried no stream
 * for this long: a peer whose directory is a few ms behind may still forward a request here,
 * and it is served on this tunnel rather than refused. */
#define CS_MOVED_LINGER_MS 500u

void cs__tunnel_move_over(struct cs_tunnel *t)
{
	if (!t->moving)
		return;
	t->moving = false;
	t->srv->tun.moving--;
}

/* An edge without RECONNECT, once its tunnel carries no stream: CLOSE_CONNECT, the base
 * protocol's "drop this tunnel and redial" (a KubeEdge edge redials, through the load
 * balancer, to another replica); the websocket closes a second later if the edge has not. */
static void on_move_check(lws_sorted_usec_list_t *sul)
{
	struct cs_tunnel *t = lws_container_of(sul, struct cs_tunnel, sul_move);
	struct cs_server *srv = t->srv;
	if (t->moved && t->wsi && t->eps == NULL && !t->kill) {
		st_log(ST_LOG_INFO, t->node, 0,
		       "draining: the moved tunnel closes (no stream for %u ms; the node's tunnel "
		       "is up on a peer)",
		       CS_MOVED_LINGER_MS);
		t->kill = true;
		lws_callback_on_writable(t->wsi);
		lws_set_timeout(t->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
		return;
	}
	if (!t->moving || t->close_sent || t->wsi == NULL || t->eps != NULL ||
	    (t->caps & ST_CAP_RECONNECT))
		return;
	char text[200];
	snprintf(text, sizeof text, "cloudstream %.128s is draining", srv->replica);
	t->close_sent = st_session_close_tunnel(t->sess, text) == 0;
	srv->m.drain_moves[0] += t->close_sent;
	st_log(ST_LOG_INFO, t->node, 0, "draining: CLOSE_CONNECT sent, the edge redials elsewhere");
	if (t->close_sent && t->registered) {
		/* No new stream on a tunnel its edge drops: requests for the node wait for its
		 * redial (a peer's NODE_UP names the new holder), or are forwarded once known. */
		t->registered = false;
		cs_registry_remove_if(srv->reg, t->node, strlen(t->node), t);
		cs_front_node_gone_csv(srv, t->node, t->ips);
	}
	cs__tunnel_kick(t);
	lws_set_timeout(t->wsi, PENDING_TIMEOUT_USER_OK, 1);
}

void cs__tunnel_stream_ended(struct cs_tunnel *t)
{
	if (t->moved && t->eps == NULL && t->wsi)
		lws_sul_schedule(t->srv->ctx, 0, &t->sul_move, on_move_check,
		                 (lws_usec_t)CS_MOVED_LINGER_MS * LWS_US_PER_MS);
	else if (t->moving && t->eps == NULL && t->wsi && !(t->caps & ST_CAP_RECONNECT))
		lws_sul_schedule(t->srv->ctx, 0, &t->sul_move, on_move_check, 1);
}

struct cs_tunnel *cs_tunnel_find_moved(struct cs_server *srv, const char *node, size_t len)
{
	/* Only while draining, only on a directory miss: a scan is cheap enough. */
	if (srv->tun.moving == 0)
		return NULL;
	for (struct cs_tunnel *t = srv->tun.all; t; t = t->all_next)
		if (t->moved && t->wsi && !t->kill && strlen(t->node) == len &&
		    memcmp(t->node, node, len) == 0)
			return t;
	return NULL;
}

void cs_tunnels_drain(struct cs_server *srv)
{
	size_t asked = 0, base = 0;
	for (struct cs_tunnel *t = srv->tun.all; t; t = t->all_next) {
		if (t->wsi == NULL || !t->registered || t->moving || t->link_ops)
			continue;
		t->moving = true;
		srv->tun.moving++;
		if ((t->caps & ST_CAP_RECONNECT) &&
		    st_session_reconnect(t->sess, srv->cfg.drain_timeout_ms) == 0) {
			asked++;
			srv->m.drain_moves[1]++;
			cs__tunnel_kick(t);
		} else {
			t->caps &= ~(uint32_t)ST_CAP_RECONNECT; /* the base way, then */
			base++;
			lws_sul_schedule(srv->ctx, 0, &t->sul_move, on_move_check, 1);
		}
	}
	st_info("draining: %zu edges asked to reconnect elsewhere (RECONNECT), %zu told to "
	        "redial once their streams ended (CLOSE_CONNECT)",
	        asked, base);
}

void cs_tunnel_move_refused(struct cs_server *srv, const char *node)
{
	struct cs_tunnel *t = cs_registry_get(srv->reg, node, strlen(node));
	/* With peers, another replica exists, and the balancer may not have seen /readyz fail
	 * yet (a probe period, then the endpoints' propagation): patience for a while. An edge
	 * that dials this replica by its own address never gets anywhere else, though. */
	if (!srv->draining)
		return;
	uint64_t since = st_now_ms() - (srv->drain.deadline_ms - srv->cfg.drain_timeout_ms);
	if (t == NULL || !t->moving || ++t->move_refusals < CS_MOVE_REFUSALS_MAX ||
	    (srv->peers != NULL && since < CS_MOVE_PATIENCE_MS))
		return;
	st_log(ST_LOG_INFO, t->node, 0,
	       "draining: the edge's new tunnels came back here %u times (no other replica "
	       "behind its load balancer?): its move is not waited for",
	       t->move_refusals);
	cs__tunnel_move_over(t);
	cs_maybe_finish_drain(srv);
}

bool cs_tunnel_moved(struct cs_tunnel *t)
{
	if (!t->moving || !t->registered)
		return false;
	t->registered = false;
	t->moved = true;
	cs_registry_remove_if(t->srv->reg, t->node, strlen(t->node), t);
	st_log(ST_LOG_INFO, t->node, 0,
	       "draining: the edge's new tunnel is up on another replica; new requests go there, "
	       "this tunnel closes once it carried no stream for %u ms",
	       CS_MOVED_LINGER_MS);
	cs__tunnel_stream_ended(t);
	return true;
}
