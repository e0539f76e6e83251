/*
 * edgestream/src/tunnel.c — the websocket to the cloud (lws glue): dial with mutual TLS and the
 * cloud's certificate verified, KubeEdge's upgrade headers plus our extension offer, the
 * session (edge role), pings and dead-peer detection, redial with backoff and jitter, and
 * certificate files re-read when they change. Loop thread only.
 */
#include "es.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <openssl/err.h>

#include <stream/err.h>
#include <stream/ext.h>
#include <stream/log.h>
#include <stream/loop.h>

/* ---- session callbacks ----------------------------------------------------------------- */

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
};

/* ---- helpers --------------------------------------------------------------------------- */

void es_tunnel_kick(struct edgestream *es)
{
	if (es->wsi && es->connected &&
	    (es->want_ping || (es->sess && st_session_want_write(es->sess))))
		lws_callback_on_writable(es->wsi);
}

void es_tunnel_update_rx(struct edgestream *es)
{
	bool pause = es->blocking_streams > 0;
	if (es->wsi == NULL || !es->connected || pause == es->rx_paused)
		return;
	es->rx_paused = pause;
	st_liveness_pause(&es->live, pause, es_now_ms());
	if (pause) {
		es->m.tunnel_pauses++;
		st_log(es->m.tunnel_pauses == 1 ? ST_LOG_WARN : ST_LOG_DEBUG, es->node, 0,
		       "tunnel reading paused: a backend is slower than the cloud and the base "
		       "protocol has no per-stream flow control (counted in "
		       "edgestream_tunnel_pauses_total)");
	}
	lws_rx_flow_control(es->wsi, pause ? 0 : 1);
}

void es_tunnel_close(struct edgestream *es, int err, const char *why)
{
	if (es->wsi == NULL)
		return;
	if (es->close_reason[0] == '\0') {
		snprintf(es->close_reason, sizeof es->close_reason, "%.250s", why);
		es->close_err = err;
	}
	lws_set_timeout(es->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
}

/* ---- certificate files ----------------------------------------------------------------- */

static void stamp_of(const char *path, struct es_file_stamp *out)
{
	struct stat sb;
	memset(out, 0, sizeof *out);
	if (path && stat(path, &sb) == 0) {
		out->mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
		out->size = (int64_t)sb.st_size;
		out->ino = (uint64_t)sb.st_ino;
	}
}

/* The stamps of the tunnel certificate, key and CA now. */
static void stamps_now(const struct edgestream *es, struct es_file_stamp out[3])
{
	stamp_of(es->cfg.tunnel_cert, &out[0]);
	stamp_of(es->cfg.tunnel_key, &out[1]);
	stamp_of(es->cfg.tunnel_ca, &out[2]);
}

void es_certs_check(struct edgestream *es, bool log_unchanged)
{
	struct es_file_stamp now[3];
	stamps_now(es, now);
	if (memcmp(now, es->stamps, sizeof now) == 0) {
		if (log_unchanged)
			st_info("certificate files unchanged");
		return;
	}
	if (es->tunnel_ctx == NULL) {
		st_warn("certificate files changed but the TLS context is unknown: they are used "
		        "after a restart");
		memcpy(es->stamps, now, sizeof now);
		return;
	}
	/* Load into the live client context: the next handshake uses them, the tunnel up now
	 * keeps its session. A half-written file fails to load and is retried next time. */
	SSL_CTX *ctx = es->tunnel_ctx;
	X509_STORE *store = X509_STORE_new();
	if (store == NULL || X509_STORE_load_file(store, es->cfg.tunnel_ca) != 1 ||
	    SSL_CTX_use_certificate_chain_file(ctx, es->cfg.tunnel_cert) != 1 ||
	    SSL_CTX_use_PrivateKey_file(ctx, es->cfg.tunnel_key, SSL_FILETYPE_PEM) != 1 ||
	    SSL_CTX_check_private_key(ctx) != 1) {
		char e[200] = "";
		ERR_error_string_n(ERR_get_error(), e, sizeof e);
		ERR_clear_error();
		X509_STORE_free(store);
		st_warn("certificate files changed but do not load yet (%s); retrying", e);
		return;
	}
	SSL_CTX_set_cert_store(ctx, store); /* takes ownership, frees the old store */
	memcpy(es->stamps, now, sizeof now);
	es->m.cert_reloads++;
	st_info("reloaded the tunnel certificate, key and CA (used from the next handshake)");
}

static void on_certs_timer(lws_sorted_usec_list_t *sul)
{
	struct edgestream *es = lws_container_of(sul, struct edgestream, sul_certs);
	es_certs_check(es, false);
	lws_sul_schedule(es->ctx, 0, &es->sul_certs, on_certs_timer,
	                 (lws_usec_t)es->cfg.cert_check_interval_ms * LWS_US_PER_MS);
}

/* ---- dialling -------------------------------------------------------------------------- */

static void dial_now(lws_sorted_usec_list_t *sul)
{
	struct edgestream *es = lws_container_of(sul, struct edgestream, sul_dial);
	if (es->stopped || es->wsi || es->dialing)
		return;
	struct lws_client_connect_info i;
	memset(&i, 0, sizeof i);
	i.context = es->ctx;
	i.vhost = es->vh_client;
	i.address = es->cloud_host;
	i.port = es->cloud_port;
	i.path = es->cloud_path;
	i.host = es->cloud_name; /* SNI and the certificate name check */
	i.origin = NULL;         /* the Go server refuses a foreign Origin */
	i.ssl_connection = LCCSCF_USE_SSL;
	i.local_protocol_name = es_tunnel_protocol.name;
	i.pwsi = &es->wsi;
	i.opaque_user_data = es;
	es->dialing = true;
	es->close_reason[0] = '\0';
	es->close_err = 0;
	es->m.dials_total++;
	st_dbg("dialling wss://%s:%d%s", es->cloud_host, es->cloud_port, es->cloud_path);
	if (lws_client_connect_via_info(&i) == NULL && es->dialing) {
		es->dialing = false;
		es->wsi = NULL;
		uint64_t d = es_backoff_next(&es->backoff);
		st_warn("cannot dial %s:%d; retrying in %llu ms", es->cloud_host, es->cloud_port,
		        (unsigned long long)d);
		if (es->cb.disconnected)
			es->cb.disconnected(es, -ECONNREFUSED, "dial failed", d, es->user);
		es_tunnel_schedule_dial(es, d);
	}
}

void es_tunnel_schedule_dial(struct edgestream *es, uint64_t delay_ms)
{
	if (es->stopped)
		return;
	lws_sul_schedule(es->ctx, 0, &es->sul_dial, dial_now, (lws_usec_t)delay_ms * LWS_US_PER_MS);
}

static void on_stable(lws_sorted_usec_list_t *sul)
{
	struct edgestream *es = lws_container_of(sul, struct edgestream, sul_stable);
	es_backoff_reset(&es->backoff);
}

static void on_ping_timer(lws_sorted_usec_list_t *sul)
{
	struct edgestream *es = lws_container_of(sul, struct edgestream, sul_ping);
	if (es->wsi == NULL || !es->connected)
		return;
	uint64_t now = es_now_ms();
	switch (st_liveness_check(&es->live, now, es->cfg.ping_interval_ms,
	                          es->cfg.dead_peer_timeout_ms)) {
	case ST_LIVENESS_DEAD: {
		char why[128];
		snprintf(why, sizeof why, "nothing from the cloud for %llu ms (dead peer)",
		         (unsigned long long)(now - es->live.last_rx_ms));
		es_tunnel_close(es, -ETIMEDOUT, why);
		return;
	}
	case ST_LIVENESS_PING:
		es->want_ping = true;
		es_tunnel_kick(es);
		break;
	case ST_LIVENESS_OK:
		break;
	}
	lws_sul_schedule(es->ctx, 0, &es->sul_ping, on_ping_timer,
	                 (lws_usec_t)st_liveness_sweep_interval_ms(es->cfg.ping_interval_ms) *
	                         LWS_US_PER_MS);
}

/* ---- life cycle ------------------------------------------------------------------------ */

static int write_ready(struct edgestream *es)
{
	if (es->ready_written || es->cfg.ready_file == NULL || es->cfg.ready_file[0] == '\0')
		return 0;
	char buf[400];
	int n = snprintf(buf, sizeof buf, "admin=%d\nnode=%s\n",
	                 es->vh_admin ? st_loop_listen_port(es->vh_admin) : 0, es->node);
	int rc = st_loop_write_ready_file(es->cfg.ready_file, buf, (size_t)n);
	if (rc < 0)
		st_err("--ready-file %s: %s", es->cfg.ready_file, strerror(-rc));
	es->ready_written = rc == 0;
	return rc;
}

static void append_headers(struct edgestream *es, unsigned char **p, unsigned char *end)
{
	/* A header that does not fit fails the handshake in lws; nothing to add here. */
	if (lws_add_http_header_by_name(es->wsi, (const unsigned char *)"SessionHostNameOverride:",
	                                (const unsigned char *)es->node, (int)strlen(es->node), p,
	                                end))
		return;
	if (es->internal_ip[0] &&
	    lws_add_http_header_by_name(es->wsi, (const unsigned char *)"SessionInternalIP:",
	                                (const unsigned char *)es->internal_ip,
	                                (int)strlen(es->internal_ip), p, end))
		return;
	if (!es->cfg.extensions)
		return;
	struct st_ext_offer offer = {.version = ST_EXT_VERSION,
	                             .caps = ST_CAP_ALL,
	                             .window_bytes = (uint32_t)es->cfg.stream_window_bytes};
	snprintf(offer.replica_id, sizeof offer.replica_id, "%.128s", es->node);
	char v[ST_EXT_HEADER_MAX_BYTES];
	ssize_t n = st_ext_offer_format(v, sizeof v, &offer);
	if (n > 0 && lws_add_http_header_by_name(es->wsi, (const unsigned char *)ST_EXT_HEADER ":",
	                                         (const unsigned char *)v, (int)n, p, end))
		st_warn("the extension offer did not fit the upgrade request");
}

/* The 101's echo: our extensions, the base protocol, or a broken cloud. 0 or -EPROTO. */
static int read_echo(struct edgestream *es, struct lws *wsi, struct st_ext_offer *agreed)
{
	memset(agreed, 0, sizeof *agreed);
	if (!es->cfg.extensions)
		return 0;
	char v[ST_EXT_HEADER_MAX_BYTES + 1];
	int n = lws_hdr_custom_copy(wsi, v, sizeof v, ST_EXT_HEADER_LWS,
	                            (int)strlen(ST_EXT_HEADER_LWS));
	if (n <= 0)
		return 0; /* no echo: a KubeEdge cloud, base protocol */
	struct st_ext_offer ours = {.version = ST_EXT_VERSION, .caps = ST_CAP_ALL};
	if (st_ext_offer_parse(v, (size_t)n, agreed) < 0 || st_ext_check_echo(&ours, agreed) < 0) {
		snprintf(es->close_reason, sizeof es->close_reason,
		         "the cloud's extension echo \"%.100s\" is not a subset of our offer", v);
		return -EPROTO;
	}
	return 0;
}

static int established(struct edgestream *es, const struct st_ext_offer *agreed)
{
	struct st_session_config sc = {
	        .role = ST_SESSION_EDGE,
	        .caps = agreed->version ? agreed->caps : 0,
	        .send_window_bytes = agreed->window_bytes ? agreed->window_bytes
	                                                  : ST_DEFAULT_STREAM_WINDOW_BYTES,
	        .recv_window_bytes = es->cfg.stream_window_bytes,
	        .max_streams = es->cfg.max_streams,
	        .stream_out_bytes = es->cfg.stream_queue_bytes,
	        .max_data_payload = es->cfg.data_payload_bytes,
	        .totals = &es->session_totals,
	};
	if (st_session_new(&es->sess, &sc, &session_cbs, es) < 0)
		return -ENOMEM;
	es->caps = sc.caps;
	es->extended = sc.caps != 0;
	es->connected = true;
	es->dialing = false;
	es->rx_paused = false;
	es->connected_ms = es_now_ms();
	st_liveness_init(&es->live, es->connected_ms);
	es->m.connects_total++;
	if (es->caps)
		st_session_hello(es->sess, es->node);
	st_info("tunnel up to %s:%d as node %s (%s protocol%s%s)", es->cloud_host, es->cloud_port,
	        es->node, es->extended ? "extended" : "base",
	        agreed->replica_id[0] ? ", cloud replica " : "", agreed->replica_id);
	lws_sul_schedule(es->ctx, 0, &es->sul_ping, on_ping_timer,
	                 (lws_usec_t)st_liveness_sweep_interval_ms(es->cfg.ping_interval_ms) *
	                         LWS_US_PER_MS);
	lws_sul_schedule(es->ctx, 0, &es->sul_stable, on_stable,
	                 (lws_usec_t)es->cfg.backoff_reset_ms * LWS_US_PER_MS);
	write_ready(es);
	es_publish_stats(es);
	if (es->cb.connected)
		es->cb.connected(es, es->node, es->extended, es->user);
	es_tunnel_kick(es);
	return 0;
}

/* The tunnel or the dial ended: streams end, a redial is scheduled. */
static void down(struct edgestream *es, int err, const char *why)
{
	bool was_up = es->connected;
	es->wsi = NULL;
	es->connected = false;
	es->dialing = false;
	es->want_ping = false;
	lws_sul_cancel(&es->sul_ping);
	lws_sul_cancel(&es->sul_stable);
	while (es->streams)
		es_stream_tunnel_gone(es->streams);
	es->blocking_streams = 0;
	if (es->sess) {
		st_session_free(es->sess);
		es->sess = NULL;
	}
	st_reasm_cleanup(&es->rx);
	if (es->close_reason[0]) {
		why = es->close_reason;
		err = es->close_err ? es->close_err : err;
	}
	uint64_t retry = es->stopped ? 0 : es_backoff_next(&es->backoff);
	if (was_up) {
		es->m.disconnects_total++;
		st_warn("tunnel down after %llu s: %s%s",
		        (unsigned long long)((es_now_ms() - es->connected_ms) / 1000), why,
		        es->stopped ? "" : "; redialling");
	}
	if (!es->stopped)
		st_log(was_up ? ST_LOG_INFO : ST_LOG_WARN, NULL, 0, "%s%s; next dial in %llu ms",
		       was_up ? "" : "cannot reach the cloud: ", was_up ? "tunnel down" : why,
		       (unsigned long long)retry);
	es_publish_stats(es);
	if (es->cb.disconnected)
		es->cb.disconnected(es, err, why, retry, es->user);
	es_tunnel_schedule_dial(es, retry);
	if (es->stopped)
		lws_cancel_service(es->ctx); /* the loop may have nothing else to wake it */
}

static int tunnel_message(struct edgestream *es, const uint8_t *msg, size_t len)
{
	int rc = st_session_recv(es->sess, msg, len);
	if (rc < 0) {
		char why[128];
		snprintf(why, sizeof why, "%s from the cloud", st_strerror(rc));
		es_tunnel_close(es, rc, why);
		return -1;
	}
	es_tunnel_kick(es);
	return 0;
}

static int tunnel_receive(struct edgestream *es, const uint8_t *in, size_t len, bool first,
                          bool final)
{
	const uint8_t *msg;
	size_t msg_len;
	int rc = st_reasm_feed(&es->rx, in, len, first, final, &msg, &msg_len);
	if (rc == 0)
		return 0;
	if (rc < 0) {
		es_tunnel_close(es, rc,
		                rc == -EMSGSIZE ? "a message over 1 MiB from the cloud"
		                                : "out of memory");
		return -1;
	}
	return tunnel_message(es, msg, msg_len);
}

static int tunnel_writeable(struct edgestream *es)
{
	if (es->want_ping) {
		es->want_ping = false;
		static const char ping[] = "ping you"; /* what KubeEdge's edge sends */
		memcpy(es->tx + LWS_PRE, ping, sizeof ping - 1);
		if (lws_write(es->wsi, es->tx + LWS_PRE, sizeof ping - 1, LWS_WRITE_PING) < 0)
			return -1;
		es_tunnel_kick(es);
		return 0;
	}
	bool binary;
	ssize_t n = st_session_pack(es->sess, es->tx + LWS_PRE, ST_MAX_MESSAGE_BYTES, &binary);
	if (n < 0) {
		es_tunnel_close(es, (int)n, "cannot pack a message");
		return -1;
	}
	if (n > 0 && lws_write(es->wsi, es->tx + LWS_PRE, (size_t)n,
	                       binary ? LWS_WRITE_BINARY : LWS_WRITE_TEXT) < 0)
		return -1;
	es_tunnel_kick(es);
	return 0;
}

static int cb_tunnel(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                     size_t len)
{
	(void)user;
	if (reason == LWS_CALLBACK_OPENSSL_LOAD_EXTRA_CLIENT_VERIFY_CERTS) {
		/* @user is the client vhost's SSL_CTX: keep it to load rotated files into. */
		struct edgestream *es = lws_context_user(lws_get_context(wsi));
		if (es && user)
			es->tunnel_ctx = user;
		return 0;
	}
	struct edgestream *es = lws_context_user(lws_get_context(wsi));
	if (es == NULL)
		return 0;
	switch (reason) {
	case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER: {
		unsigned char **p = in;
		append_headers(es, p, *p + len);
		return 0;
	}
	case LWS_CALLBACK_CLIENT_FILTER_PRE_ESTABLISH: {
		struct st_ext_offer agreed;
		if (read_echo(es, wsi, &agreed) < 0) {
			es->close_err = -EPROTO;
			return -1;
		}
		es->wsi = wsi;
		return established(es, &agreed) < 0 ? -1 : 0;
	}
	case LWS_CALLBACK_CLIENT_ESTABLISHED:
		es_tunnel_kick(es);
		return 0;
	case LWS_CALLBACK_CLIENT_CONNECTION_ERROR: {
		char why[300];
		snprintf(why, sizeof why, "%.100s:%d: %.180s", es->cloud_host, es->cloud_port,
		         es->close_reason[0] ? es->close_reason
		         : in                ? (const char *)in
		                             : "connection failed");
		es->close_reason[0] = '\0';
		down(es, es->close_err ? es->close_err : -ECONNREFUSED, why);
		return 0;
	}
	case LWS_CALLBACK_CLIENT_RECEIVE:
		st_liveness_rx(&es->live, es_now_ms());
		if (es->sess == NULL)
			return -1;
		return tunnel_receive(es, in, len, lws_is_first_fragment(wsi),
		                      lws_is_final_fragment(wsi));
	case LWS_CALLBACK_CLIENT_RECEIVE_PONG:
		st_liveness_rx(&es->live, es_now_ms());
		return 0;
	case LWS_CALLBACK_CLIENT_WRITEABLE:
		return es->sess ? tunnel_writeable(es) : 0;
	case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
		if (es->close_reason[0] == '\0')
			snprintf(es->close_reason, sizeof es->close_reason,
			         "the cloud closed the websocket");
		return 0;
	case LWS_CALLBACK_CLIENT_CLOSED:
		down(es, -ECONNRESET, "connection closed");
		return 0;
	default:
		return 0;
	}
}

const struct lws_protocols es_tunnel_protocol = {
        .name = "es-tunnel",
        .callback = cb_tunnel,
        .rx_buffer_size = 16384,
        .tx_packet_size = 65536,
};

void es_tunnel_start_timers(struct edgestream *es)
{
	stamps_now(es, es->stamps);
	lws_sul_schedule(es->ctx, 0, &es->sul_certs, on_certs_timer,
	                 (lws_usec_t)es->cfg.cert_check_interval_ms * LWS_US_PER_MS);
	es_tunnel_schedule_dial(es, 0);
}
