/*
 * cloudstream/src/tunnel.c — the tunnel server: edge nodes' websockets on :10004 (lws glue).
 *
 * Admission happens before the 101 (LWS_CALLBACK_HTTP_CONFIRM_UPGRADE) so a refusal is a real
 * HTTP answer with the reason: the node name comes from the verified client certificate, a
 * SessionHostNameOverride that disagrees is refused, a SessionInternalIP must be one of the
 * certificate's IPs (unless the policy trusts the header). Each accepted websocket gets an
 * st_session; messages are reassembled and fed to it, and whatever it packs is written back,
 * one message per WRITEABLE. One liveness sweep serves every tunnel. What the session's streams
 * carry, and for whom, is tunnel_stream.c's (stream endpoints, tunnel.h). Loop thread only.
 */
#include "tunnel_int.h"
#include "join_srv.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/bn.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <certs/certs.h>
#include <stream/err.h>
#include <stream/frame.h>
#include <stream/log.h>
#include <stream/loop.h>
#include <stream/reasm.h>
#include <stream/status.h>

#include "denylist.h"
#include "identity.h"
#include "listen.h"
#include "peer.h"
#include "servecert.h"

static struct cs_server *server_of(struct lws *wsi)
{
	return lws_context_user(lws_get_context(wsi));
}

/* Our offer, and what is agreed with the edge's. */
uint64_t cs__tunnel_first_window(const struct cs_server *srv)
{
	return srv->cfg.stream_first_window_bytes < srv->cfg.stream_window_bytes
	               ? srv->cfg.stream_first_window_bytes
	               : srv->cfg.stream_window_bytes;
}

static void agreed_offer(const struct cs_server *srv, const struct cs_admission *a,
                         struct st_ext_offer *agreed)
{
	struct st_ext_offer ours = {.version = ST_EXT_VERSION,
	                            .caps = srv->our_caps,
	                            .window_bytes = (uint32_t)cs__tunnel_first_window(srv)};
	snprintf(ours.replica_id, sizeof ours.replica_id, "%s", srv->replica);
	st_ext_negotiate(&ours, &a->offer, agreed);
}

/* ---- liveness ------------------------------------------------------------------------- */

/*
 * lws 4.1.6 answers an edge's PING itself and tells us nothing, so a tunnel whose edge only
 * pings looks quiet. Before pinging it, ask TCP when the peer last sent anything (TCP_INFO,
 * one getsockopt per quiet tunnel per ping interval): an edge that pings gets no redundant PING
 * from us, which at 19,000 tunnels was a third of the idle loop's writes. Returns true when the
 * peer did speak since our last sign of life, which is then recorded.
 */
static bool peer_spoke(struct cs_tunnel *t, uint64_t now)
{
	struct tcp_info ti;
	socklen_t len = sizeof ti;
	int fd = lws_get_socket_fd(t->wsi);
	if (fd < 0 || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
	    len < offsetof(struct tcp_info, tcpi_last_data_recv) + sizeof ti.tcpi_last_data_recv)
		return false;
	uint64_t ago = ti.tcpi_last_data_recv; /* ms */
	if (ago >= now - t->live.last_rx_ms)
		return false;
	st_liveness_rx(&t->live, now - ago);
	return true;
}

/* One pass over every tunnel, O(1) each: ping the quiet ones, close the dead ones. */
static void on_liveness_sweep(lws_sorted_usec_list_t *sul)
{
	struct cs_server *srv = lws_container_of(sul, struct cs_server, tun.sul_liveness);
	uint64_t now = cs_now_ms();
	for (struct cs_tunnel *t = srv->tun.all; t; t = t->all_next) {
		if (t->wsi == NULL)
			continue;
		switch (st_liveness_check(&t->live, now, srv->cfg.ping_interval_ms,
		                          srv->cfg.dead_peer_timeout_ms)) {
		case ST_LIVENESS_PING:
			if (peer_spoke(t, now))
				break;
			t->want_ping = true;
			lws_callback_on_writable(t->wsi);
			break;
		case ST_LIVENESS_DEAD:
			if (peer_spoke(t, now))
				break;
			st_log(ST_LOG_WARN, t->node, 0,
			       "tunnel dropped: nothing received for %llu ms (--dead-peer-timeout)",
			       (unsigned long long)(now - t->live.last_rx_ms));
			lws_set_timeout(t->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
			break;
		case ST_LIVENESS_OK:
			break;
		}
	}
	lws_sul_schedule(srv->ctx, 0, &srv->tun.sul_liveness, on_liveness_sweep,
	                 (lws_usec_t)st_liveness_sweep_interval_ms(srv->cfg.ping_interval_ms) *
	                         LWS_US_PER_MS);
}

void cs_tunnels_stop(struct cs_server *srv)
{
	lws_sul_cancel(&srv->tun.sul_liveness);
}

void cs_tunnel_liveness_start(struct cs_server *srv)
{
	lws_sul_schedule(srv->ctx, 0, &srv->tun.sul_liveness, on_liveness_sweep,
	                 (lws_usec_t)st_liveness_sweep_interval_ms(srv->cfg.ping_interval_ms) *
	                         LWS_US_PER_MS);
}

/* ---- lifecycle ------------------------------------------------------------------------- */

const char *cs_tunnel_serial(const struct cs_tunnel *t)
{
	return t->serial;
}

uint64_t cs_tunnel_ordinal(const struct cs_tunnel *t)
{
	return t->ordinal;
}

struct cs_tunnel *cs_tunnel_next(struct cs_server *srv, struct cs_tunnel *t)
{
	return t ? t->all_next : srv->tun.all;
}

void cs_tunnel_get_info(struct cs_tunnel *t, struct cs_tunnel_info *out)
{
	memset(out, 0, sizeof *out);
	out->node = t->node;
	out->replica = t->replica ? t->replica : "";
	out->extended = t->caps != 0;
	if (t->wsi)
		lws_get_peer_simple(t->wsi, out->remote, sizeof out->remote);
	out->connected_ms = t->connected_ms;
	out->last_rx_ms = t->live.last_rx_ms;
	for (struct cs_endpoint *ep = t->eps; ep; ep = ep->tnext)
		out->streams++;
	out->bytes_in = t->bytes_in;
	out->bytes_out = t->bytes_out;
	struct tcp_info tcp;
	socklen_t tlen = sizeof tcp;
	int fd = t->wsi ? lws_get_socket_fd(t->wsi) : -1;
	if (fd >= 0 && getsockopt(fd, IPPROTO_TCP, TCP_INFO, &tcp, &tlen) == 0 &&
	    tlen >= offsetof(struct tcp_info, tcpi_rtt) + sizeof tcp.tcpi_rtt)
		out->rtt_us = tcp.tcpi_rtt;
}

struct cs_endpoint *cs_tunnel_endpoint_next(struct cs_tunnel *t, struct cs_endpoint *ep)
{
	return ep ? ep->tnext : t->eps;
}

void cs_tunnel_revoke(struct cs_tunnel *t, const char *why)
{
	t->revoked = true;
	cs_tunnel_close(t, why);
}

void cs_tunnel_close(struct cs_tunnel *t, const char *why)
{
	if (t->wsi == NULL || !t->registered)
		return; /* closing already, or replaced (and closing) */
	st_log(ST_LOG_WARN, t->node, 0, "tunnel closed: %s", why);
	t->registered = false;
	cs_registry_remove_if(t->srv->reg, t->node, strlen(t->node), t);
	cs__tunnel_end_streams(t, why);
	/* Closed from its WRITEABLE: a close asked from a worker completion
	 * (EVENT_WAIT_CANCELLED) by lws_set_timeout alone waited for the loop's next wake-up
	 * under the libev loop (200 ms measured); the timeout stays as the backstop. */
	t->kill = true;
	lws_callback_on_writable(t->wsi);
	lws_set_timeout(t->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
}

static void tunnel_established(struct lws *wsi, struct cs_server *srv, struct cs_tunnel **slot)
{
	struct cs_admission a;
	/* the same answer as at CONFIRM_UPGRADE: the inputs are unchanged */
	cs__tunnel_admit(wsi, srv, &a);
	if (a.status != 0)
		return;
	struct cs_tunnel *t = calloc(1, sizeof *t);
	if (t == NULL)
		return;
	struct st_ext_offer agreed = {0};
	if (a.has_offer)
		agreed_offer(srv, &a, &agreed);
	struct st_session_config sc = {
	        .role = ST_SESSION_CLOUD,
	        .caps = a.has_offer ? agreed.caps : 0,
	        .send_window_bytes = a.has_offer && a.offer.window_bytes
	                                     ? a.offer.window_bytes
	                                     : ST_DEFAULT_STREAM_WINDOW_BYTES,
	        .recv_window_bytes = cs__tunnel_first_window(srv),
	        .recv_window_max_bytes = srv->cfg.stream_window_bytes,
	        .node_budget_bytes = srv->cfg.session_buffer_bytes,
	        .process_budget = &srv->tun.budget,
	        .max_streams = srv->cfg.max_streams_per_node,
	        .stream_out_bytes = srv->cfg.stream_queue_bytes,
	        .max_data_payload = srv->cfg.data_payload_bytes,
	        .totals = &srv->m.sessions,
	};
	if (st_session_new(&t->sess, &sc, &cs__tunnel_session_cbs, t) < 0) {
		free(t);
		return;
	}
	t->srv = srv;
	t->wsi = wsi;
	st_loop_write_soon_watch(srv->loop, wsi); /* PONGs without a POLLOUT round trip */
	t->caps = sc.caps;
	t->ordinal = ++srv->next_ordinal;
	t->next_stream_id = 1;
	st_budget_init(&t->budget, srv->cfg.session_buffer_bytes);
	t->connected_ms = cs_now_ms();
	memcpy(t->node, a.node, sizeof t->node);
	memcpy(t->serial, a.serial, sizeof t->serial);
	/* For the admin listing; without memory it is only not shown. */
	t->replica = a.has_offer && a.offer.replica_id[0] ? strdup(a.offer.replica_id) : NULL;
	if (t->caps)
		st_session_hello(t->sess, srv->replica);
	void *old = NULL;
	int rc = cs_registry_put_claims(srv->reg, t->node, strlen(t->node), a.ips, a.claims,
	                                a.n_ips, t, &old);
	if (rc < 0) {
		st_log(ST_LOG_ERROR, t->node, 0, "tunnel not registered: %s", st_strerror(rc));
		st_session_free(t->sess);
		free(t->replica);
		free(t);
		return;
	}
	t->registered = true;
	st_liveness_init(&t->live, t->connected_ms);
	t->all_next = srv->tun.all;
	if (srv->tun.all)
		srv->tun.all->all_prev = t;
	srv->tun.all = t;
	*slot = t;
	srv->tun.n++;
	srv->m.sessions_total[t->caps ? 1 : 0]++;
	char peer[64] = "";
	lws_get_peer_simple(wsi, peer, sizeof peer);
	bool named = a.has_offer && a.offer.replica_id[0];
	st_log(ST_LOG_INFO, t->node, 0, "tunnel up from %s (%s protocol%s%s, %zu IPs)", peer,
	       t->caps ? "extended" : "base", named ? ", edge replica " : "",
	       named ? a.offer.replica_id : "", a.n_ips);
	cs_node_events_tunnel_up(srv, t->node);
	if (old != NULL) {
		/* A reconnect replaces the old session: its streams end now, clearly. */
		struct cs_tunnel *o = old;
		o->registered = false;
		srv->m.sessions_replaced++;
		st_log(ST_LOG_WARN, o->node, 0, "tunnel replaced by a newer connection from %s",
		       peer);
		cs__tunnel_end_streams(o, "the edge node reconnected");
		lws_set_timeout(o->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
	}
	for (size_t i = 0; i < a.n_ips; i++) {
		const char *names[2];
		if (cs_registry_ip_owners(srv->reg, a.ips[i], strlen(a.ips[i]), names, 2) > 1)
			cs_identity_note_shared(srv, a.ips[i], t->node);
	}
	if (a.verify_header_ip) {
		int vrc = cs_identity_verify_ip(srv, t->node, t->ordinal, a.header_ip);
		if (vrc < 0)
			st_log(ST_LOG_WARN, t->node, 0,
			       "SessionInternalIP %s not verified (%s): not routed by it",
			       a.header_ip, st_strerror(vrc));
	}
	cs_servecert_node_up(srv, t->node);
	cs_advertise_node_up(srv, t->node);
	if (srv->peers || srv->cfg.node_reconnect_grace_ms) {
		/* What NODE_UP says of the node's IPs (peer.c), and which IPs a request waiting
		 * for the node's redial may name it by (request.c). */
		char ips[CS_REGISTRY_MAX_IPS * (CS_IP_TEXT_MAX_BYTES + 1)] = "";
		size_t off = 0;
		for (size_t i = 0; i < a.n_ips && off < sizeof ips; i++)
			off += (size_t)snprintf(ips + off, sizeof ips - off, "%s%s", i ? "," : "",
			                        a.ips[i]);
		t->ips = a.n_ips ? strdup(ips) : NULL;
	}
	cs_peers_node_up(srv, t);
	cs__tunnel_kick(t);
	cs_front_node_back(srv, t->node, strlen(t->node)); /* requests waiting for its redial */
}

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

static void move_over(struct cs_tunnel *t)
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
		if (t->wsi == NULL || !t->registered || t->moving || t->peer)
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
	uint64_t since = cs_now_ms() - (srv->drain.deadline_ms - srv->cfg.drain_timeout_ms);
	if (t == NULL || !t->moving || ++t->move_refusals < CS_MOVE_REFUSALS_MAX ||
	    (srv->peers != NULL && since < CS_MOVE_PATIENCE_MS))
		return;
	st_log(ST_LOG_INFO, t->node, 0,
	       "draining: the edge's new tunnels came back here %u times (no other replica "
	       "behind its load balancer?): its move is not waited for",
	       t->move_refusals);
	move_over(t);
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

static void tunnel_closed(struct cs_server *srv, struct cs_tunnel *t)
{
	if (t->peer) {
		cs__peer_link_closed(t); /* another replica's link, not an edge's tunnel */
		return;
	}
	t->wsi = NULL; /* lws is closing it: no more writes or flow control */
	lws_sul_cancel(&t->sul_move);
	move_over(t);
	cs_peers_node_down(srv, t);
	cs__tunnel_end_streams(t, "the edge node disconnected");
	if (t->registered)
		cs_registry_remove_if(srv->reg, t->node, strlen(t->node), t);
	if (t->node[0] && !t->revoked &&
	    cs_registry_get(srv->reg, t->node, strlen(t->node)) == NULL)
		cs_front_node_gone_csv(srv, t->node, t->ips); /* its redial is waited for */
	cs__tunnel_paused_remove(t);
	if (t->all_prev)
		t->all_prev->all_next = t->all_next;
	else
		srv->tun.all = t->all_next;
	if (t->all_next)
		t->all_next->all_prev = t->all_prev;
	struct st_session_stats st;
	st_session_get_stats(t->sess, &st);
	st_log(ST_LOG_INFO, t->node, 0,
	       "tunnel down after %llu s: %llu streams, %llu bytes in, %llu bytes out",
	       (unsigned long long)((cs_now_ms() - t->connected_ms) / 1000),
	       (unsigned long long)st.streams_total, (unsigned long long)st.data_bytes_in,
	       (unsigned long long)st.data_bytes_out);
	st_session_free(t->sess);
	st_reasm_cleanup(&t->rx);
	srv->tun.n--;
	free(t->ips);
	free(t->replica);
	free(t);
	cs_maybe_finish_drain(srv);
}

/* Feeds one whole message to the session. Returns 0, or -1 to drop the tunnel. */
static int tunnel_message(struct cs_tunnel *t, const uint8_t *msg, size_t len)
{
	int rc = st_session_recv(t->sess, msg, len);
	if (rc < 0) {
		st_log(ST_LOG_WARN, t->node, 0, "tunnel dropped: %s from the edge",
		       st_strerror(rc));
		return -1;
	}
	cs__tunnel_kick(t);
	return 0;
}

int cs__tunnel_receive(struct cs_tunnel *t, const uint8_t *in, size_t len, bool first, bool final)
{
	const uint8_t *msg;
	size_t msg_len;
	int rc = st_reasm_feed(&t->rx, in, len, first, final, &msg, &msg_len);
	if (rc == 0)
		return 0;
	if (rc < 0) {
		st_log(ST_LOG_WARN, t->node, 0, "tunnel dropped: %s",
		       rc == -EMSGSIZE ? "a message over 1 MiB" : "out of memory");
		return -1;
	}
	return tunnel_message(t, msg, msg_len);
}

int cs__tunnel_writeable(struct cs_tunnel *t)
{
	struct cs_server *srv = t->srv;
	if (t->kill)
		return -1;
	if (t->want_ping) {
		/* Its PONG, like any frame, counts as life (st_liveness_rx). Not empty: lws 4.1.6
		 * gives no RECEIVE_PONG for an empty PONG (ops-ws.c, "goto already_done"). */
		static const char ping[] = "cloudstream";
		t->want_ping = false;
		memcpy(srv->tx + LWS_PRE, ping, sizeof ping - 1);
		if (lws_write(t->wsi, srv->tx + LWS_PRE, sizeof ping - 1, LWS_WRITE_PING) < 0)
			return -1;
		cs__tunnel_kick(t);
		return 0;
	}
	if (!st_session_want_write(t->sess))
		return 0; /* lws's own frame went out (a PONG), or the loop's second feed (evloop.c) */
	ssize_t n = st_tunnel_write(&srv->tunnel_writer, t->wsi, t->sess);
	if (n == -EIO)
		return -1;
	if (n < 0) {
		st_log(ST_LOG_ERROR, t->node, 0, "tunnel dropped: %s packing a message",
		       st_strerror((int)n));
		return -1;
	}
	t->bytes_out += (uint64_t)n;
	cs__tunnel_kick(t);
	return 0;
}

/* The per-connection data lws keeps for us on the tunnel port: a tunnel once the upgrade is
 * done, or a join/renewal request on a plain HTTPS request (join_srv.h). */
struct cs_tunnel_pss {
	struct cs_tunnel *t;
	struct cs_join_req *join;
};

static int cb_tunnel(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                     size_t len)
{
	if (reason == LWS_CALLBACK_OPENSSL_PERFORM_CLIENT_CERT_VERIFICATION)
		/* lws ignores OpenSSL's verdict unless we return it (libwebsockets-notes §1):
		 * without this a certificate from any CA would be accepted. wsi is NULL here. */
		return !len;
	if (reason == LWS_CALLBACK_OPENSSL_LOAD_EXTRA_SERVER_VERIFY_CERTS) {
		struct lws_vhost *vh = in;
		cs_certs_note_ctx(lws_get_vhost_user(vh), lws_get_vhost_name(vh), user);
		cs_peer_trust_ca(lws_get_vhost_user(vh), user);
		return 0;
	}
	struct cs_server *srv = server_of(wsi);
	cs_listener_note(srv, wsi, (int)reason); /* the handshake gate (listen.h) */
	struct cs_tunnel_pss *pss = user;
	struct cs_tunnel **slot = pss ? &pss->t : NULL;
	struct cs_admission a;
	switch (reason) {
	case LWS_CALLBACK_HTTP: {
		/* Not an upgrade: a join, renewal or CA request (join_srv.c), or refused. */
		int j = cs_join_http(wsi, srv, &pss->join, in);
		if (j != 0)
			return j < 0 ? -1 : 0;
		memset(&a, 0, sizeof a);
		a.status = 400;
		a.reason = CS_REFUSE_PATH;
		snprintf(a.detail, sizeof a.detail,
		         "this port serves the edge tunnel: websocket upgrade to %s",
		         CS_TUNNEL_PATH);
		cs__tunnel_refuse(wsi, srv, &a);
		return -1;
	}
	case LWS_CALLBACK_HTTP_BODY:
		return pss->join ? cs_join_body(pss->join, in, len) : -1;
	case LWS_CALLBACK_HTTP_BODY_COMPLETION:
		return pss->join ? cs_join_body_done(pss->join) : -1;
	case LWS_CALLBACK_HTTP_WRITEABLE:
		return pss->join ? cs_join_writeable(pss->join) : -1;
	case LWS_CALLBACK_CLOSED_HTTP:
	case LWS_CALLBACK_WSI_DESTROY:
		if (pss && pss->join) {
			cs_join_closed(pss->join);
			pss->join = NULL;
		}
		return 0;
	case LWS_CALLBACK_HTTP_CONFIRM_UPGRADE:
		if (strcmp((const char *)in, "websocket") != 0)
			return -1;
		/* no pss yet: the path says which kind of upgrade this is, each time */
		if (cs_peer_is_peer_upgrade(wsi))
			return cs_peer_in_confirm(wsi, srv);
		cs__tunnel_admit(wsi, srv, &a);
		return a.status ? cs__tunnel_refuse(wsi, srv, &a) : 0;
	case LWS_CALLBACK_ADD_HEADERS: {
		if (cs_peer_is_peer_upgrade(wsi))
			return cs_peer_in_headers(wsi, srv, in);
		cs__tunnel_admit(wsi, srv, &a);
		if (a.status != 0 || !a.has_offer)
			return 0; /* no offer: a KubeEdge edge, which gets no echo */
		struct st_ext_offer agreed;
		agreed_offer(srv, &a, &agreed);
		char v[ST_EXT_HEADER_MAX_BYTES];
		ssize_t n = st_ext_offer_format(v, sizeof v, &agreed);
		struct lws_process_html_args *args = in;
		if (n > 0 && lws_add_http_header_by_name(
		                     wsi, (const unsigned char *)ST_EXT_HEADER ":",
		                     (const unsigned char *)v, (int)n, (unsigned char **)&args->p,
		                     (unsigned char *)args->p + args->max_len))
			return 1;
		return 0;
	}
	case LWS_CALLBACK_ESTABLISHED:
		*slot = NULL;
		if (cs_peer_is_peer_upgrade(wsi))
			return cs_peer_in_established(wsi, srv, slot);
		tunnel_established(wsi, srv, slot);
		return *slot ? 0 : -1;
	case LWS_CALLBACK_RECEIVE:
		if (*slot == NULL)
			return -1;
		st_liveness_rx(&(*slot)->live, cs_now_ms());
		(*slot)->bytes_in += len;
		return cs__tunnel_receive(*slot, in, len, lws_is_first_fragment(wsi),
		                          lws_is_final_fragment(wsi));
	case LWS_CALLBACK_RECEIVE_PONG:
		if (*slot)
			st_liveness_rx(&(*slot)->live, cs_now_ms());
		return 0;
	case LWS_CALLBACK_SERVER_WRITEABLE:
		return *slot ? cs__tunnel_writeable(*slot) : -1;
	case LWS_CALLBACK_CLOSED:
		st_loop_write_soon_forget(srv->loop, wsi);
		if (*slot) {
			tunnel_closed(srv, *slot);
			*slot = NULL;
		}
		return 0;
	default:
		return 0;
	}
}

const struct lws_protocols cs_tunnel_protocols[2] = {
        {
                .name = "kubeedge-tunnel",
                .callback = cb_tunnel,
                .per_session_data_size = sizeof(struct cs_tunnel_pss),
                .rx_buffer_size = 2048, /* lws keeps this much per tunnel: README "Memory" */
                .tx_packet_size = ST_TUNNEL_BATCH_BYTES, /* one batch per write */
        },
        {0}, /* terminator */
};
