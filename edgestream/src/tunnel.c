/*
 * edgestream/src/tunnel.c — a tunnel to the cloud (tunnel.h), lws glue: the websocket's
 * callback (the upgrade, messages in, writes out), the session (edge role) and its callbacks
 * toward the streams, the tunnel coming up, pings (stream/wsctl.h) and dead-peer detection
 * (stream/liveness.h), the base protocol's pause, and the streams' access to the session. Loop
 * thread only.
 *
 * The seam: this file is what happens on a websocket that exists. Getting one (dialling the
 * --cloud-url list, DNS on a worker, down and redial) and the tunnel's allocation are in
 * tunnel_dial.c; moving to another replica on a draining cloud's RECONNECT (make before break)
 * in tunnel_move.c; the upgrade's headers in tunnel_hs.c.
 */
#include "tunnel.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stream/err.h>
#include <stream/ext.h>
#include <stream/log.h>
#include <stream/loop.h>
#include <stream/tunnelread.h>
#include <stream/workq.h>

#include "relay.h"

/* ---- session callbacks: the cloud's stream events go to the stream objects -------------- */

static int on_open(struct st_session *s, uint64_t id, uint64_t type, const uint8_t *payload,
                   size_t len, void *user)
{
	(void)s;
	return es_stream_open(user, id, type, payload, len);
}

static int on_data(struct st_session *s, uint64_t id, const uint8_t *data, size_t len, void *user)
{
	(void)user;
	struct es_stream *st = st_session_stream_user(s, id);
	return st ? es_stream_on_data(st, data, len) : 0;
}

static void on_half_close(struct st_session *s, uint64_t id, void *user)
{
	(void)user;
	struct es_stream *st = st_session_stream_user(s, id);
	if (st)
		es_stream_on_half_close(st);
}

static void on_close(struct st_session *s, uint64_t id, void *stream_user, uint64_t code,
                     const char *reason, size_t reason_len, void *user)
{
	(void)s;
	(void)id;
	(void)user;
	if (stream_user)
		es_stream_on_cloud_close(stream_user, code, reason, reason_len);
}

static void on_writable(struct st_session *s, uint64_t id, void *user)
{
	(void)user;
	struct es_stream *st = st_session_stream_user(s, id);
	if (st)
		es_stream_on_writable(st);
}

static void on_tunnel_close(struct st_session *s, const char *text, size_t len, void *user)
{
	(void)s;
	char why[300];
	snprintf(why, sizeof why, "the cloud asked to redial: %.*s", (int)(len > 200 ? 200 : len),
	         text);
	es_tunnel_close(user, -ECONNRESET, why);
}

static const struct st_session_callbacks session_cbs = {
        .on_open = on_open,
        .on_data = on_data,
        .on_half_close = on_half_close,
        .on_close = on_close,
        .on_writable = on_writable,
        .on_tunnel_close = on_tunnel_close,
        .on_reconnect = es__tunnel_on_reconnect,
};

/* ---- the streams' side ----------------------------------------------------------------- */

void es_tunnel_kick(struct es_tunnel *t)
{
	/* Written at the end of this loop round, not the next (stream/loop.h): an answer leaves
	 * in the round its backend bytes came in, without an epoll_ctl and a round of its own. */
	if (t->wsi && t->connected &&
	    (st_wsctl_want_write(&t->ctl) || (t->sess && st_session_want_write(t->sess))))
		st_loop_write_soon(t->es->loop, t->wsi);
}

uint32_t es_tunnel_caps(const struct es_tunnel *t)
{
	return t->sess ? t->caps : 0;
}

ssize_t es_tunnel_write(struct es_tunnel *t, uint64_t id, const uint8_t *p, size_t n)
{
	if (t->sess == NULL)
		return -ENOTCONN;
	ssize_t w = st_session_write(t->sess, id, p, n);
	es_tunnel_kick(t);
	return w;
}

void es_tunnel_end_stream(struct es_tunnel *t, uint64_t id, uint64_t code, const char *reason)
{
	if (t->sess == NULL)
		return;
	st_session_close(t->sess, id, code, reason);
	es_tunnel_kick(t);
}

void es_tunnel_consumed(struct es_tunnel *t, uint64_t id, size_t n)
{
	if (t->sess == NULL)
		return;
	st_session_consumed(t->sess, id, n);
	es_tunnel_kick(t);
}

void es_tunnel_opened(struct es_tunnel *t, uint64_t id)
{
	if (t->sess == NULL || !(t->caps & ST_CAP_OPENED))
		return;
	st_session_opened(t->sess, id);
	es_tunnel_kick(t);
}

void es_tunnel_attach(struct es_tunnel *t, uint64_t id, struct es_stream *st)
{
	if (t->sess)
		st_session_set_stream_user(t->sess, id, st);
}

void es_tunnel_detach(struct es_tunnel *t, uint64_t id, const struct es_stream *st)
{
	if (t->sess && st_session_stream_user(t->sess, id) == st)
		st_session_set_stream_user(t->sess, id, NULL);
}

/* Reading follows the blocking streams: paused while any is over its mark. */
static void update_rx(struct es_tunnel *t)
{
	struct edgestream *es = t->es;
	bool pause = t->blocking_streams > 0;
	if (t->wsi == NULL || !t->connected || pause == t->rx_paused)
		return;
	t->rx_paused = pause;
	st_liveness_pause(&t->live, pause, st_now_ms());
	if (pause) {
		es->m.tunnel_pauses++;
		st_log(es->m.tunnel_pauses == 1 ? ST_LOG_WARN : ST_LOG_DEBUG, es->node, 0,
		       "tunnel reading paused: a backend is slower than the cloud and the base "
		       "protocol has no per-stream flow control (counted in "
		       "edgestream_tunnel_pauses_total)");
	}
	if (t->reader)
		st_tunnel_reader_pause(t->reader, pause);
	else
		lws_rx_flow_control(t->wsi, pause ? 0 : 1);
}

void es_tunnel_block(struct es_tunnel *t, bool on)
{
	if (on)
		t->blocking_streams++;
	else if (t->blocking_streams > 0)
		t->blocking_streams--;
	update_rx(t);
}

void es_tunnel_close(struct es_tunnel *t, int err, const char *why)
{
	if (t->wsi == NULL)
		return;
	if (t->close_reason[0] == '\0') {
		snprintf(t->close_reason, sizeof t->close_reason, "%.250s", why);
		t->close_err = err;
	}
	lws_set_timeout(t->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
}

static void on_stable(lws_sorted_usec_list_t *sul)
{
	struct es_tunnel *t = lws_container_of(sul, struct es_tunnel, sul_stable);
	es_backoff_reset(&t->backoff);
}

static void on_ping_timer(lws_sorted_usec_list_t *sul)
{
	struct es_tunnel *t = lws_container_of(sul, struct es_tunnel, sul_ping);
	struct edgestream *es = t->es;
	if (t->wsi == NULL || !t->connected)
		return;
	uint64_t now = st_now_ms();
	if (st_tunnel_liveness(&t->live, &t->ctl, t->wsi, now, es->cfg.ping_interval_ms,
	                       es->cfg.dead_peer_timeout_ms) == ST_LIVENESS_DEAD) {
		char why[128]; /* closing already: the reason for the log and the callback */
		snprintf(why, sizeof why, "nothing from the cloud for %llu ms (dead peer)",
		         (unsigned long long)(now - t->live.last_rx_ms));
		es_tunnel_close(t, -ETIMEDOUT, why);
		return;
	}
	lws_sul_schedule(es->ctx, 0, &t->sul_ping, on_ping_timer,
	                 (lws_usec_t)st_liveness_sweep_interval_ms(es->cfg.ping_interval_ms) *
	                         LWS_US_PER_MS);
}

/* ---- the tunnel is up ----------------------------------------------------------------- */

/* The ready file, once the first tunnel is up: written (and fsync'ed) on a worker, never on
 * the loop (STYLE B7.2: no file work on the loop after start-up). The job carries copies of
 * the path and the contents; the instance outlives it (its pool is freed first). */
struct ready_job {
	struct edgestream *es;
	char *path;
	char buf[400];
	size_t len;
	int rc;
};

static void ready_work(void *arg)
{
	struct ready_job *j = arg;
	j->rc = st_loop_write_ready_file(j->path, j->buf, j->len);
}

static void ready_done(void *arg, int status)
{
	struct ready_job *j = arg;
	if (status == 0 && j->rc < 0)
		st_err("--ready-file %s: %s", j->path, strerror(-j->rc));
	if (status < 0 || j->rc < 0)
		j->es->ready_written = false; /* the next tunnel up tries again */
	free(j->path);
	free(j);
}

static void write_ready(struct edgestream *es)
{
	if (es->ready_written || es->cfg.ready_file == NULL || es->cfg.ready_file[0] == '\0')
		return;
	struct ready_job *j = calloc(1, sizeof *j);
	if (j == NULL || (j->path = strdup(es->cfg.ready_file)) == NULL) {
		free(j);
		return;
	}
	j->es = es;
	int n = snprintf(j->buf, sizeof j->buf, "admin=%d\nnode=%s\n",
	                 es->vh_admin ? st_loop_listen_port(es->vh_admin) : 0, es->node);
	j->len = n > 0 && (size_t)n < sizeof j->buf ? (size_t)n : 0;
	if (st_workq_submit(es->wq, ready_work, ready_done, j) < 0) {
		free(j->path);
		free(j); /* a busy pool: the next tunnel up tries again */
		return;
	}
	es->ready_written = true; /* under way */
}

/* The credit window each stream starts with (a quiet one for logs and metrics, what the
 * cloud was told): the budget sizes it from there. */
static int established(struct es_tunnel *t, const struct st_ext_offer *agreed)
{
	struct edgestream *es = t->es;
	struct st_session_config sc = {
	        .role = ST_SESSION_EDGE,
	        .caps = agreed->version ? agreed->caps : 0,
	        .send_window_bytes = agreed->window_bytes ? agreed->window_bytes
	                                                  : ST_DEFAULT_STREAM_WINDOW_BYTES,
	        .recv_window_bytes = es__tunnel_first_window(es),
	        .recv_window_quiet_bytes = es__tunnel_announced_window(es),
	        .recv_window_max_bytes = es->cfg.stream_window_bytes,
	        .process_budget = &es->budget,
	        .max_streams = es->cfg.max_streams,
	        .stream_out_bytes = es->cfg.stream_queue_bytes,
	        .max_data_payload = es->cfg.data_payload_bytes,
	        .totals = &es->session_totals,
	};
	if (st_session_new(&t->sess, &sc, &session_cbs, t) < 0)
		return -ENOMEM;
	t->caps = sc.caps;
	t->extended = sc.caps != 0;
	t->connected = true;
	t->dialing = false;
	t->round_fails = 0;
	t->move_fails = 0;
	t->rx_paused = false;
	t->connected_ms = st_now_ms();
	t->bytes_in = t->bytes_out = 0;
	snprintf(t->replica, sizeof t->replica, "%s", agreed->replica_id);
	st_liveness_init(&t->live, t->connected_ms);
	st_wsctl_init(&t->ctl, "ping you", t->connected_ms); /* what KubeEdge's edge sends */
	es->m.connects_total++;
	if (t->caps)
		st_session_hello(t->sess, es->node);
	st_info("tunnel up to %s:%d (%s) as node %s (%s protocol%s%s)", t->cloud_host,
	        t->cloud_port, t->addr, es->node, t->extended ? "extended" : "base",
	        agreed->replica_id[0] ? ", cloud replica " : "", agreed->replica_id);
	/* Make before break: a tunnel this one replaces closes once it carries no stream. */
	for (struct es_tunnel *o = es->tunnels; o; o = o->next)
		if (o != t && o->retiring)
			es_tunnel_stream_ended(o);
	lws_sul_schedule(es->ctx, 0, &t->sul_ping, on_ping_timer,
	                 (lws_usec_t)st_liveness_sweep_interval_ms(es->cfg.ping_interval_ms) *
	                         LWS_US_PER_MS);
	lws_sul_schedule(es->ctx, 0, &t->sul_stable, on_stable,
	                 (lws_usec_t)es->cfg.backoff_reset_ms * LWS_US_PER_MS);
	write_ready(es);
	es_publish_stats(es);
	if (es->cb.connected)
		es->cb.connected(es, es->node, t->extended, es->user);
	es_tunnel_kick(t);
	return 0;
}

void es_tunnel_note_refusal(struct es_tunnel *t, const char *why)
{
	if (t->refusal_logged)
		return;
	/* Said once per tunnel, then only the counters move. */
	st_log(ST_LOG_WARN, t->es->node, 0,
	       "a stream from the cloud refused: %s (counted in "
	       "edgestream_streams_refused_by_session_total{reason}; further refusals are only "
	       "counted)",
	       why);
	t->refusal_logged = true;
}

static int tunnel_message(struct es_tunnel *t, const uint8_t *msg, size_t len)
{
	const struct st_session_totals *tot = &t->es->session_totals;
	uint64_t refused_limit = tot->refused_limit, refused_budget = tot->refused_budget;
	int rc = st_session_recv(t->sess, msg, len);
	/* The session refused a stream itself (before any backend). */
	if (tot->refused_budget != refused_budget)
		es_tunnel_note_refusal(t, "its first window does not fit --process-buffer-bytes");
	else if (tot->refused_limit != refused_limit)
		es_tunnel_note_refusal(t, "--max-streams streams are open");
	if (rc < 0) {
		char why[128];
		snprintf(why, sizeof why, "%s from the cloud", st_strerror(rc));
		es_tunnel_close(t, rc, why);
		return -1;
	}
	es_tunnel_kick(t);
	return 0;
}

static int tunnel_receive(struct es_tunnel *t, const uint8_t *in, size_t len, bool first,
                          bool final)
{
	const uint8_t *msg;
	size_t msg_len;
	int rc = st_reasm_feed(&t->rx, in, len, first, final, &msg, &msg_len);
	if (rc == 0)
		return 0;
	if (rc < 0) {
		es_tunnel_close(t, rc,
		                rc == -EMSGSIZE ? "a message over 1 MiB from the cloud"
		                                : "out of memory");
		return -1;
	}
	return tunnel_message(t, msg, msg_len);
}

/* ---- our own reading of the cloud's frames (stream/tunnelread.h) ------------------------ */

static int own_message(void *user, const uint8_t *msg, size_t len)
{
	struct es_tunnel *t = user;
	st_liveness_rx(&t->live, st_now_ms());
	t->bytes_in += len;
	return t->sess ? tunnel_message(t, msg, len) : -1; /* it closes on an error */
}

/* The cloud's PING, PONG or CLOSE (stream/wsctl.h): a PONG is owed at once. */
static void own_control(void *user, enum st_ws_opcode op, const uint8_t *payload, size_t len)
{
	struct es_tunnel *t = user;
	if (op == ST_WS_CLOSE && t->close_reason[0] == '\0')
		snprintf(t->close_reason, sizeof t->close_reason, "the cloud closed the websocket");
	if (st_wsctl_recv(&t->ctl, &t->live, op, payload, len, st_now_ms(), 0) == ST_WSCTL_WRITE &&
	    t->wsi)
		lws_callback_on_writable(t->wsi);
}

static void own_end(void *user, const char *why)
{
	struct es_tunnel *t = user;
	char reason[200];
	snprintf(reason, sizeof reason, "reading the tunnel: %s", why);
	es_tunnel_close(t, -ECONNRESET, reason); /* keeps a reason given before */
}

static const struct st_tunnel_reader_cbs own_cbs = {
        .on_message = own_message,
        .on_control = own_control,
        .on_end = own_end,
};

static int tunnel_writeable(struct es_tunnel *t)
{
	/* The PONG and PING owed head the batch (stream/wsctl.h). */
	ssize_t n = st_tunnel_write(&t->es->tunnel_writer, t->wsi, t->sess, &t->ctl, st_now_ms());
	if (n == -EIO)
		return -1;
	if (n < 0) {
		es_tunnel_close(t, (int)n, "cannot pack a message");
		return -1;
	}
	t->bytes_out += (uint64_t)n;
	if (st_wsctl_want_write(&t->ctl) || st_session_want_write(t->sess))
		lws_callback_on_writable(t->wsi); /* more than a batch: the socket's next POLLOUT */
	return 0;
}

static int cb_tunnel(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                     size_t len)
{
	if (reason == LWS_CALLBACK_OPENSSL_LOAD_EXTRA_CLIENT_VERIFY_CERTS) {
		/* @user is the client vhost's SSL_CTX, shared by every tunnel of the instance:
		 * keep it to load rotated files into (reload.c). */
		struct edgestream *es = lws_context_user(lws_get_context(wsi));
		if (es && user)
			es->tunnel_ctx = user;
		return 0;
	}
	struct es_tunnel *t = lws_get_opaque_user_data(wsi);
	if (t == NULL)
		return 0;
	switch (reason) {
	case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER: {
		unsigned char **p = in;
		es__tunnel_append_headers(t->es, wsi, p, *p + len);
		return 0;
	}
	case LWS_CALLBACK_CLIENT_FILTER_PRE_ESTABLISH: {
		struct st_ext_offer agreed;
		if (es__tunnel_read_echo(t, wsi, &agreed) < 0) {
			t->close_err = -EPROTO;
			return -1;
		}
		t->wsi = wsi;
		return established(t, &agreed) < 0 ? -1 : 0;
	}
	case LWS_CALLBACK_CLIENT_ESTABLISHED:
		/* From here we read the cloud's frames (big reads, no RECEIVE chunks parsed byte by
		 * byte by lws's client). None can have reached lws yet: the 101 came in a TLS record
		 * of its own and SSL_read returns one record at a time. -ENOTSUP (lws's poll loop),
		 * -ENOMEM: lws reads, as before. */
		if (t->sess && t->reader == NULL &&
		    st_tunnel_reader_new(&t->reader, t->es->loop, wsi, false, &own_cbs, t) < 0)
			t->reader = NULL;
		es_tunnel_kick(t);
		return 0;
	case LWS_CALLBACK_CLIENT_CONNECTION_ERROR: {
		char why[400];
		es__tunnel_note_answer(t, wsi);
		snprintf(why, sizeof why, "%.100s:%d: %.280s", t->cloud_host, t->cloud_port,
		         t->close_reason[0] ? t->close_reason
		         : in               ? (const char *)in
		                            : "connection failed");
		t->close_reason[0] = '\0';
		es__tunnel_down(t, t->close_err ? t->close_err : -ECONNREFUSED, why);
		return 0;
	}
	case LWS_CALLBACK_CLIENT_RECEIVE:
		st_liveness_rx(&t->live, st_now_ms());
		if (t->sess == NULL)
			return -1;
		t->bytes_in += len;
		return tunnel_receive(t, in, len, lws_is_first_fragment(wsi),
		                      lws_is_final_fragment(wsi));
	case LWS_CALLBACK_CLIENT_RECEIVE_PONG:
		st_liveness_rx(&t->live, st_now_ms());
		return 0;
	case LWS_CALLBACK_CLIENT_WRITEABLE:
		return t->sess ? tunnel_writeable(t) : 0;
	case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
		if (t->close_reason[0] == '\0')
			snprintf(t->close_reason, sizeof t->close_reason,
			         "the cloud closed the websocket");
		return 0;
	case LWS_CALLBACK_CLIENT_CLOSED:
		st_loop_write_soon_forget(t->es->loop, wsi); /* its fd number may be reused now */
		es__tunnel_down(t, -ECONNRESET, "connection closed");
		return 0;
	default:
		return 0;
	}
}

const struct lws_protocols es_tunnel_protocol = {
        .name = "es-tunnel",
        .callback = cb_tunnel,
        .rx_buffer_size = 16384,
        .tx_packet_size =
                ST_TUNNEL_WRITE_MAX_BYTES, /* one batch per write (stream/tunnelwrite.h) */
};
