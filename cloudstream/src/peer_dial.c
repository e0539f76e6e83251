/*
 * cloudstream/src/peer_dial.c — the links this replica dials (peer_int.h): one per member of
 * the peer set, to the other replica's tunnel port at CS_PEER_PATH with the peer certificate,
 * redialled with a backoff when it fails or drops; our offer must come back with the peer
 * capability and the other's replica id (our own id: the address is this replica, never dialled
 * again). On such a link this replica is the edge role: the in_link's st_session announces our
 * nodes (peer_directory.c) and carries the streams the other replica opens to them
 * (peer_forward.c); its bytes, PINGs (stream/wsctl.h) and close are handled here, as is the
 * liveness sweep over every link. lws glue. Loop thread only.
 */
#include "peer_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stream/err.h>
#include <stream/ext.h>
#include <stream/liveness.h>
#include <stream/log.h>
#include <stream/reasm.h>
#include <stream/tunnelread.h>
#include <stream/tunnelwrite.h>

static int cb_peer_client(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                          size_t len);

const struct lws_protocols cs__peer_client_protocols[] = {
        {
                .name = "cloudstream-peer",
                .callback = cb_peer_client,
                .rx_buffer_size = 16384,
                .tx_packet_size = ST_TUNNEL_WRITE_MAX_BYTES,
        },
        {0},
};

/*
 * A partition that drops packets closes nothing: like the edges' tunnels, every link is
 * pinged when quiet (a third of --peer-dead-timeout) and dropped after --peer-dead-timeout of
 * silence, both ways, so the directory forgets a peer it cannot reach and the link is dialled again.
 */
void cs__peers_live_sweep(lws_sorted_usec_list_t *sul)
{
	struct cs_peers *p = lws_container_of(sul, struct cs_peers, sul_live);
	struct cs_server *srv = p->srv;
	uint64_t now = st_now_ms(), dead = srv->cfg.peer_dead_timeout_ms, ping = dead / 3;
	for (struct accepted_link *a = p->acc; a; a = a->next)
		cs_tunnel_link_liveness(a->t, now, ping, dead); /* a tunnel: the tunnel module's */
	for (struct in_link *l = p->in; l; l = l->next)
		if (l->wsi && st_tunnel_liveness(&l->live, &l->ctl, l->wsi, now, ping, dead) ==
		                      ST_LIVENESS_DEAD)
			st_warn("peers: link to %s silent for %llu ms (--peer-dead-timeout): "
			        "dropped",
			        l->replica, (unsigned long long)(now - l->live.last_rx_ms));
	lws_sul_schedule(srv->ctx, 0, &p->sul_live, cs__peers_live_sweep,
	                 (lws_usec_t)st_liveness_sweep_interval_ms(ping) * LWS_US_PER_MS);
}

/* ---- the edge-role side of a link we dialled ----------------------------------------------- */

void cs__peer_in_kick(struct in_link *l)
{
	if (l->wsi && (l->sync_pending || l->in_sync || st_session_want_write(l->sess)))
		lws_callback_on_writable(l->wsi);
}

/* The edge-role side of a link we dialled: it announces our nodes and relays the streams the
 * other replica opens to our nodes' tunnels. NULL without memory. */
static struct in_link *edge_side_new(struct cs_server *srv, struct lws *wsi,
                                     const struct st_ext_offer *echo)
{
	struct cs_peers *p = peers_of(srv);
	struct in_link *l = calloc(1, sizeof *l);
	if (l == NULL)
		return NULL;
	struct st_session_config sc = {
	        .role = ST_SESSION_EDGE,
	        .caps = echo->caps,
	        .send_window_bytes =
	                echo->window_bytes ? echo->window_bytes : ST_DEFAULT_STREAM_WINDOW_BYTES,
	        .recv_window_bytes = cs_tunnel_first_window(srv),
	        .recv_window_max_bytes = cs_tunnel_link_window_max(srv),
	        .process_budget = &srv->tun.budget,
	        .max_streams = srv->cfg.max_streams,
	        .stream_out_bytes = srv->cfg.stream_queue_bytes,
	        .max_data_payload = cs_tunnel_link_data_payload(srv),
	        .totals = &srv->m.sessions,
	};
	if (st_session_new(&l->sess, &sc, &cs__peer_relay_cbs, l) < 0) {
		free(l);
		return NULL;
	}
	l->srv = srv;
	l->wsi = wsi;
	l->ordinal = ++srv->next_ordinal;
	snprintf(l->replica, sizeof l->replica, "%s", echo->replica_id);
	l->sync_pending = true;
	st_liveness_init(&l->live, st_now_ms());
	st_wsctl_init(&l->ctl, "cloudstream-peer", st_now_ms());
	st_session_hello(l->sess, srv->replica);
	l->next = p->in;
	if (p->in)
		p->in->prev = l;
	p->in = l;
	return l;
}

static int in_receive(struct in_link *l, const uint8_t *in, size_t len, bool first, bool final)
{
	const uint8_t *msg;
	size_t msg_len;
	st_liveness_rx(&l->live, st_now_ms());
	int rc = st_reasm_feed(&l->rx, in, len, first, final, &msg, &msg_len);
	if (rc == 0)
		return 0;
	if (rc > 0)
		rc = st_session_recv(l->sess, msg, msg_len);
	if (rc < 0) {
		st_warn("peers: link from %s dropped: %s", l->replica, st_strerror(rc));
		return -1;
	}
	cs__peer_in_kick(l);
	return 0;
}

static void in_pong(struct in_link *l)
{
	st_liveness_rx(&l->live, st_now_ms());
}

/* ---- our own reading of the link (stream/tunnelread.h) ------------------------------------ */

static int own_message(void *user, const uint8_t *msg, size_t len)
{
	struct in_link *l = user;
	st_liveness_rx(&l->live, st_now_ms());
	int rc = st_session_recv(l->sess, msg, len);
	if (rc < 0) {
		st_warn("peers: link from %s dropped: %s", l->replica, st_strerror(rc));
		return -1; /* own_end closes */
	}
	cs__peer_in_kick(l);
	return 0;
}

/* The other replica's PING, PONG or CLOSE (stream/wsctl.h): a PONG is owed at once. */
static void own_control(void *user, enum st_ws_opcode op, const uint8_t *payload, size_t len)
{
	struct in_link *l = user;
	if (st_wsctl_recv(&l->ctl, &l->live, op, payload, len, st_now_ms(), 0) == ST_WSCTL_WRITE &&
	    l->wsi)
		lws_callback_on_writable(l->wsi);
}

static void own_end(void *user, const char *why)
{
	struct in_link *l = user;
	st_info("peers: link from %s: %s", l->replica, why);
	l->kill = true;
	if (l->wsi)
		lws_set_timeout(l->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
}

static const struct st_tunnel_reader_cbs own_cbs = {
        .on_message = own_message,
        .on_control = own_control,
        .on_end = own_end,
};

static int in_writeable(struct in_link *l)
{
	if (l->kill)
		return -1;
	cs__peer_in_fill(l);
	/* The PONG and PING owed head the batch, masked with the key 0 like the rest. */
	ssize_t n =
	        st_tunnel_write(&peers_of(l->srv)->writer, l->wsi, l->sess, &l->ctl, st_now_ms());
	if (n < 0)
		return -1;
	cs__peer_in_kick(l);
	return 0;
}

static void in_closed(struct in_link *l)
{
	struct cs_peers *p = peers_of(l->srv);
	l->wsi = NULL;
	cs__peer_relay_link_lost(l);
	if (l->prev)
		l->prev->next = l->next;
	else if (p)
		p->in = l->next;
	if (l->next)
		l->next->prev = l->prev;
	st_info("peers: link from %s closed", l->replica);
	st_tunnel_reader_free(l->reader);
	st_session_free(l->sess);
	st_reasm_cleanup(&l->rx);
	free(l);
}

/* ---- links we dial ------------------------------------------------------------------------ */

static void schedule_dial(struct out_link *l)
{
	if (l->stopping || l->self)
		return;
	/* The first redial after a link that was up goes at once; then 100 ms doubling to
	 * --peer-redial-max, with up to a quarter of jitter. */
	uint64_t ms = 0;
	if (l->fails > 0) {
		ms = 100ull << (l->fails > 10 ? 10 : l->fails - 1);
		if (ms > l->srv->cfg.peer_redial_max_ms)
			ms = l->srv->cfg.peer_redial_max_ms;
		ms += (uint64_t)(rand() % (int)(ms / 4 + 1));
	}
	lws_sul_schedule(l->srv->ctx, 0, &l->sul_dial, cs__peer_dial, (lws_usec_t)(ms * 1000 + 1));
}

/*
 * How long a dial may take to become a link: a third of --peer-dead-timeout (the ping interval),
 * at least 1 s. Without a bound of its own a dial into a partition (its SYNs dropped) waited
 * for lws's 10 s while the kernel retransmitted its SYN 1, 3 and 7 s in: once the partition
 * healed, the link came back only at the next retransmission or at the 10 s, up to ~4 s late.
 */
static uint64_t dial_budget_ms(const struct cs_server *srv)
{
	uint64_t ms = srv->cfg.peer_dead_timeout_ms / 3;
	return ms < 1000 ? 1000 : ms;
}

/* The dial did not become a link in time: closed (CONNECTION_ERROR, then out_closed redials). */
static void dial_deadline(lws_sorted_usec_list_t *sul)
{
	struct out_link *l = lws_container_of(sul, struct out_link, sul_dial);
	if (l->wsi != NULL && l->e == NULL)
		lws_set_timeout(l->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
}

void cs__peer_dial(lws_sorted_usec_list_t *sul)
{
	struct out_link *l = lws_container_of(sul, struct out_link, sul_dial);
	struct cs_server *srv = l->srv;
	if (l->wsi || l->stopping || l->self)
		return;
	struct lws_client_connect_info i;
	memset(&i, 0, sizeof i);
	i.context = srv->ctx;
	i.vhost = peers_of(srv)->vh;
	i.address = l->addr;
	i.port = l->port;
	i.path = CS_PEER_PATH;
	i.host = srv->cfg.peer_server_name && srv->cfg.peer_server_name[0]
	                 ? srv->cfg.peer_server_name
	                 : l->host;
	i.ssl_connection = LCCSCF_USE_SSL;
	i.local_protocol_name = cs__peer_client_protocols[0].name;
	i.pwsi = &l->wsi;
	i.opaque_user_data = l;
	if (lws_client_connect_via_info(&i) == NULL) {
		l->fails++;
		schedule_dial(l);
		return;
	}
	/* While it dials, the dial timer is free: it bounds the dial (dial_deadline). */
	if (l->wsi != NULL && l->e == NULL)
		lws_sul_schedule(srv->ctx, 0, &l->sul_dial, dial_deadline,
		                 (lws_usec_t)dial_budget_ms(srv) * LWS_US_PER_MS);
}

static void append_offer(struct cs_server *srv, struct lws *wsi, unsigned char **p,
                         unsigned char *end)
{
	struct st_ext_offer offer = {.version = ST_EXT_VERSION,
	                             .caps = srv->our_caps | ST_CAP_PEER,
	                             .window_bytes = (uint32_t)cs_tunnel_first_window(srv)};
	snprintf(offer.replica_id, sizeof offer.replica_id, "%s", srv->replica);
	char v[ST_EXT_HEADER_MAX_BYTES];
	ssize_t n = st_ext_offer_format(v, sizeof v, &offer);
	if (n > 0 && lws_add_http_header_by_name(wsi, (const unsigned char *)ST_EXT_HEADER ":",
	                                         (const unsigned char *)v, (int)n, p, end))
		st_warn("peers: the offer did not fit the upgrade request");
}

/* The 101 arrived: check the echo; on this link we are the edge role (PROTOCOL.md §7). */
static int out_established(struct out_link *l, struct lws *wsi)
{
	struct cs_server *srv = l->srv;
	char v[ST_EXT_HEADER_MAX_BYTES + 1];
	struct st_ext_offer ours = {.version = ST_EXT_VERSION, .caps = srv->our_caps | ST_CAP_PEER};
	struct st_ext_offer echo;
	int n = lws_hdr_custom_copy(wsi, v, sizeof v, ST_EXT_HEADER_LWS,
	                            (int)strlen(ST_EXT_HEADER_LWS));
	if (n <= 0 || st_ext_offer_parse(v, (size_t)n, &echo) < 0 ||
	    st_ext_check_echo(&ours, &echo) < 0 || !(echo.caps & ST_CAP_PEER) ||
	    !(echo.caps & ST_CAP_FLOW) || echo.replica_id[0] == '\0') {
		st_warn("peer %s:%d answered without the peer capability and a replica id: not a "
		        "cloudstream peer link",
		        l->host, l->port);
		return -1;
	}
	if (strcmp(echo.replica_id, srv->replica) == 0) {
		/* Ourselves (a static list names every replica): never by address. */
		l->self = true;
		st_info("peers: %s:%d is this replica (%s)", l->host, l->port, srv->replica);
		return -1;
	}
	struct in_link *e = edge_side_new(srv, wsi, &echo);
	if (e == NULL)
		return -1;
	l->e = e;
	l->fails = 0;
	snprintf(l->replica, sizeof l->replica, "%s", echo.replica_id);
	st_info("peers: link up to %s (%s:%d)", l->replica, l->host, l->port);
	cs__peer_in_kick(e);
	return 0;
}

static void out_closed(struct out_link *l, const char *why)
{
	l->wsi = NULL;
	if (l->stopping && l->source != SRC_STATIC) {
		if (l->e != NULL) {
			in_closed(l->e);
			l->e = NULL;
		}
		l->used = false; /* it left the membership: the slot is free again */
		return;
	}
	if (l->e != NULL) {
		in_closed(l->e);
		l->e = NULL;
		st_warn("peers: link to %s lost (%s)", l->replica, why);
		l->fails = 0; /* the first redial goes at once */
	} else if (!l->self) {
		l->fails++;
		if (l->fails == 1 || l->fails % 32 == 0)
			st_warn("peers: cannot reach %s:%d (%s); retrying", l->host, l->port, why);
	}
	schedule_dial(l);
}

static int cb_peer_client(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                          size_t len)
{
	(void)user;
	struct out_link *l = lws_get_opaque_user_data(wsi);
	if (l == NULL)
		return 0;
	switch (reason) {
	case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER: {
		unsigned char **pp = in;
		append_offer(l->srv, wsi, pp, *pp + len);
		return 0;
	}
	case LWS_CALLBACK_CLIENT_FILTER_PRE_ESTABLISH:
		return out_established(l, wsi);
	case LWS_CALLBACK_CLIENT_ESTABLISHED:
		/* From here we read the other replica's frames (big reads; lws's client parses
		 * every byte). None can have reached lws yet: the 101 came in a TLS record of its
		 * own and SSL_read returns one record at a time. Else lws reads, as before. */
		if (l->e && l->e->reader == NULL &&
		    st_tunnel_reader_new(&l->e->reader, l->srv->loop, wsi, false, &own_cbs, l->e) <
		            0)
			l->e->reader = NULL;
		if (l->e)
			cs__peer_in_kick(l->e);
		return 0;
	case LWS_CALLBACK_CLIENT_RECEIVE:
		if (l->e == NULL)
			return -1;
		return in_receive(l->e, in, len, lws_is_first_fragment(wsi),
		                  lws_is_final_fragment(wsi));
	case LWS_CALLBACK_CLIENT_RECEIVE_PONG:
		if (l->e)
			in_pong(l->e);
		return 0;
	case LWS_CALLBACK_CLIENT_WRITEABLE:
		return l->e ? in_writeable(l->e) : -1;
	case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
		out_closed(l, in ? (const char *)in : "connection error");
		return 0;
	case LWS_CALLBACK_CLIENT_CLOSED:
		out_closed(l, "closed");
		return 0;
	default:
		return 0;
	}
}
