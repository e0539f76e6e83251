/*
 * cloudstream/src/tunnel.c — the tunnel server: edge nodes' websockets on :10004 (lws glue),
 * a tunnel's lifecycle.
 *
 * Admission happens before the 101 (LWS_CALLBACK_HTTP_CONFIRM_UPGRADE) so a refusal is a real
 * HTTP answer with the reason: the node name comes from the verified client certificate, a
 * SessionHostNameOverride that disagrees is refused, a SessionInternalIP must be one of the
 * certificate's IPs (unless the policy trusts the header). Each accepted websocket gets an
 * st_session (tunnel up), and everything it held goes at CLOSED (tunnel down). The protocol
 * callback hands each event to the part that owns it: the session I/O and the liveness sweep
 * are tunnel_io.c's, draining tunnel_drain.c's, what the session's streams carry, and for
 * whom, tunnel_stream.c's (stream endpoints, tunnel.h). Loop thread only.
 */
#include "tunnel_int.h"
#include "join_srv.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

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
#include <stream/tunnelread.h>

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
uint64_t cs_tunnel_first_window(const struct cs_server *srv)
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
	                            .window_bytes = (uint32_t)cs_tunnel_first_window(srv)};
	snprintf(ours.replica_id, sizeof ours.replica_id, "%s", srv->replica);
	st_ext_negotiate(&ours, &a->offer, agreed);
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

bool cs_tunnel_holds_node(const struct cs_tunnel *t)
{
	return t->registered && t->wsi != NULL && t->link_ops == NULL;
}

uint64_t cs_tunnel_generation(const struct cs_tunnel *t)
{
	return t->gen_ms;
}

const char *cs_tunnel_ips(const struct cs_tunnel *t)
{
	return t->ips;
}

bool cs_tunnel_is_up(const struct cs_tunnel *t)
{
	return t->wsi != NULL;
}

static uint64_t wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
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
	/* Our own decision, counted by its reason (cloudstream_tunnels_closed_total): info, not a
	 * warning, and within the tunnel lines' budget, since one event can close thousands (a
	 * draining replica's edges reconnecting here close their stale tunnels there; a deny-list
	 * reload). */
	if (cs__tunnel_warn_allowed())
		st_info_ns(t->node, 0, "tunnel closed: %s", why);
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

/*
 * The certificates an edge sends beside its own (its CA's: OpenSSL's clients add the chain
 * they can build) stay parsed in the TLS session for the tunnel's life, 4.4 KiB a tunnel with
 * their EC keys, though only admission reads them and admission is over.
 * SSL_get_peer_cert_chain() hands out the session's own stack (its references are the
 * session's, not counted for the caller): emptying it frees them, and OpenSSL frees the empty
 * stack with the session. The edge's own certificate stays (SSL_get_peer_certificate); the
 * verification result is kept apart (SSL_get_verify_result).
 */
static void drop_peer_chain(struct lws *wsi)
{
	SSL *ssl = lws_get_ssl(wsi);
	STACK_OF(X509) *chain = ssl ? SSL_get_peer_cert_chain(ssl) : NULL;
	X509 *x;
	while (chain != NULL && (x = sk_X509_pop(chain)) != NULL)
		X509_free(x);
}

static void tunnel_established(struct lws *wsi, struct cs_server *srv, struct cs_tunnel **slot)
{
	struct cs_admission a;
	/* the same answer as at CONFIRM_UPGRADE: the inputs are unchanged */
	cs__tunnel_admit(wsi, srv, &a);
	if (a.status != 0)
		return;
	size_t node_len = strlen(a.node);
	struct cs_tunnel *t = calloc(1, sizeof *t + node_len + 1);
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
	        .recv_window_bytes = cs_tunnel_first_window(srv),
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
	t->connected_ms = st_now_ms();
	st_wsctl_init(&t->ctl, CS_TUNNEL_PING, t->connected_ms);
	t->pong_within_ms = a.has_offer ? a.offer.pong_within_ms : 0;
	memcpy(t->node, a.node, node_len + 1);
	memcpy(t->serial, a.serial, sizeof t->serial);
	/* For the admin listing; without memory it is only not shown. */
	t->replica = a.has_offer && a.offer.replica_id[0] ? strdup(a.offer.replica_id) : NULL;
	if (t->caps)
		st_session_hello(t->sess, srv->replica);
	void *old = NULL;
	st_liveness_init(&t->live, t->connected_ms);
	int rc = cs__tunnel_live_add(t);
	if (rc == 0) {
		rc = cs_registry_put_claims(srv->reg, t->node, strlen(t->node), a.ips, a.claims,
		                            a.n_ips, t, &old);
		if (rc < 0)
			cs__tunnel_live_remove(t);
	}
	if (rc < 0) {
		st_log(ST_LOG_ERROR, t->node, 0, "tunnel not registered: %s", st_strerror(rc));
		st_session_free(t->sess);
		free(t->replica);
		free(t);
		return;
	}
	t->registered = true;
	t->all_next = srv->tun.all;
	if (srv->tun.all)
		srv->tun.all->all_prev = t;
	srv->tun.all = t;
	*slot = t;
	srv->tun.n++;
	cs__tunnel_read_own(t); /* big reads, no lws RECEIVE chunks (stream/tunnelread.h) */
	srv->m.sessions_total[t->caps ? 1 : 0]++;
	drop_peer_chain(wsi);
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
		if (cs__tunnel_warn_allowed()) /* a fleet redialling after a blip: not 19,000 */
			st_log(ST_LOG_WARN, o->node, 0,
			       "tunnel replaced by a newer connection from %s", peer);
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
		/* What NODE_UP says of the node's IPs (peer_directory.c), and which IPs a request
		 * waiting for the node's redial may name it by (request.c). */
		char ips[CS_REGISTRY_MAX_IPS * (CS_IP_TEXT_MAX_BYTES + 1)] = "";
		size_t off = 0;
		for (size_t i = 0; i < a.n_ips && off < sizeof ips; i++)
			off += (size_t)snprintf(ips + off, sizeof ips - off, "%s%s", i ? "," : "",
			                        a.ips[i]);
		t->ips = a.n_ips ? strdup(ips) : NULL;
	}
	/* The node's generation is the wall clock, not st_now_ms(): the replicas compare theirs. */
	t->gen_ms = wall_ms();
	cs_peers_node_up(srv, t);
	cs__tunnel_kick(t);
	cs_front_node_back(srv, t->node, strlen(t->node)); /* requests waiting for its redial */
}

static void tunnel_closed(struct cs_server *srv, struct cs_tunnel *t)
{
	if (t->link_ops) {
		cs__tunnel_link_closed(t); /* another replica's link, not an edge's tunnel */
		return;
	}
	t->wsi = NULL; /* lws is closing it: no more writes or flow control */
	lws_sul_cancel(&t->sul_move);
	cs__tunnel_move_over(t);
	cs_peers_node_down(srv, t);
	cs__tunnel_end_streams(t, "the edge node disconnected");
	if (t->registered)
		cs_registry_remove_if(srv->reg, t->node, strlen(t->node), t);
	if (t->node[0] && !t->revoked &&
	    cs_registry_get(srv->reg, t->node, strlen(t->node)) == NULL)
		cs_front_node_gone_csv(srv, t->node, t->ips); /* its redial is waited for */
	cs__tunnel_paused_remove(t);
	cs__tunnel_live_remove(t);
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
	       (unsigned long long)((st_now_ms() - t->connected_ms) / 1000),
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

/* A peer link's upgrade (peer.h): admitted, or refused the way an edge's tunnel is. */
static int peer_link_confirm(struct lws *wsi, struct cs_server *srv)
{
	struct cs_admission a;
	memset(&a, 0, sizeof a);
	a.status = cs_peer_link_admit(wsi, srv, a.detail, sizeof a.detail);
	if (a.status == 0)
		return 0;
	a.reason = a.status == 403 ? CS_REFUSE_CERT : CS_REFUSE_PATH;
	return cs__tunnel_refuse(wsi, srv, &a);
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
			return peer_link_confirm(wsi, srv);
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
		st_liveness_rx(&(*slot)->live, st_now_ms());
		(*slot)->bytes_in += len;
		return cs__tunnel_receive(*slot, in, len, lws_is_first_fragment(wsi),
		                          lws_is_final_fragment(wsi));
	case LWS_CALLBACK_RECEIVE_PONG:
		if (*slot)
			st_liveness_rx(&(*slot)->live, st_now_ms());
		return 0;
	case LWS_CALLBACK_SERVER_WRITEABLE:
		return *slot ? cs__tunnel_writeable(*slot) : -1;
	case LWS_CALLBACK_CLOSED:
		st_loop_write_soon_forget(srv->loop, wsi);
		if (*slot) {
			st_tunnel_reader_free((*slot)->reader);
			(*slot)->reader = NULL;
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
                /* lws keeps this much per tunnel (README "Memory"); on the epoll loop we
                 * read the frames ourselves (tunnelread.h) and it only carries what lws read
                 * with the upgrade request; lws's poll loop delivers RECEIVE in pieces of it */
                .rx_buffer_size = 512,
                .tx_packet_size = ST_TUNNEL_WRITE_MAX_BYTES, /* one batch per write */
        },
        {0}, /* terminator */
};
