/*
 * edgestream/src/stream.c — one cloud request served by a backend (lws glue).
 *
 * The cloud opens a stream with a connect message; route.h picks the backend (the kubelet or an
 * allow-listed local port) or refuses it with a reason, and nothing is dialled for a refusal.
 * The backend leg is a plain lws raw client socket; for the kubelet, TLS runs over memory BIOs
 * (tls.h) because lws 4.1.6 cannot do raw TLS client connections. Bytes then flow both ways:
 *
 *   cloud DATA → to_backend queue → backend socket; with flow control the credit goes back to
 *   the cloud only once the bytes reached the socket, so a slow backend holds up only its own
 *   stream. Toward a base-protocol cloud (no credit) a full queue pauses the whole tunnel.
 *
 *   backend bytes → the session's per-stream queue; what it cannot take waits in to_cloud and
 *   the backend socket is paused until the session drains (on_writable).
 *
 * Every connect gets an answer: the backend's, or an error (ERROR with a code and a reason when
 * negotiated; for a base-protocol cloud an HTTP error response on upgrades, REMOVE otherwise).
 * Loop thread only.
 */
#include "es.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <stream/err.h>
#include <stream/ext.h>
#include <stream/frame.h>
#include <stream/log.h>
#include <stream/status.h>
#include <stream/workq.h>

#include <cri/client.h>

#include "cri_plan.h"

#define RELAY_WRITE_MAX (64u * 1024u)
#define BASE_QUEUE_HIGH (1024u * 1024u) /* base protocol: pause the tunnel above this */
#define BASE_QUEUE_LOW  (256u * 1024u)
#define BASE_QUEUE_CAP  (8u * 1024u * 1024u)
#define TO_CLOUD_HIGH   (64u * 1024u)
#define TO_CLOUD_LOW    (16u * 1024u)
#define TO_CLOUD_CAP    (256u * 1024u)

static bool is_upgrade_type(uint64_t type)
{
	return type == ST_MSG_EXEC_CONNECT || type == ST_MSG_ATTACH_CONNECT;
}

static const char *backend_name(const struct es_stream *st, char *buf, size_t cap)
{
	if (st->target.kind == ES_TARGET_KUBELET)
		snprintf(buf, cap, "kubelet %.100s:%d", st->es->kubelet_host, st->es->kubelet_port);
	else if (st->target.kind == ES_TARGET_CRI)
		snprintf(buf, cap, "the runtime's streaming server %.100s:%d", st->dial_host,
		         st->dial_port);
	else
		snprintf(buf, cap, "local port %s (127.0.0.1:%u)", st->target.local_name,
		         st->target.port);
	return buf;
}

/* ---- teardown -------------------------------------------------------------------------- */

static void unblock_tunnel(struct es_stream *st)
{
	lws_sul_cancel(&st->sul_stall);
	if (!st->blocking)
		return;
	st->blocking = false;
	st->es->blocking_streams--;
	es_tunnel_update_rx(st->es);
}

static void stream_free(struct es_stream *st)
{
	struct edgestream *es = st->es;
	if (st->prev)
		st->prev->next = st->next;
	else
		es->streams = st->next;
	if (st->next)
		st->next->prev = st->prev;
	if (es->sess && st_session_stream_user(es->sess, st->id) == st)
		st_session_set_stream_user(es->sess, st->id, NULL);
	unblock_tunnel(st);
	es_logs_stream_gone(st);
	lws_sul_cancel(&st->sul_timeout);
	if (st->wsi) {
		lws_set_opaque_user_data(st->wsi, NULL);
		lws_set_timeout(st->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
		st->wsi = NULL;
	}
	if (st->use_tls)
		es_tls_free(&st->tls);
	st_buf_cleanup(&st->to_backend);
	st_buf_cleanup(&st->to_cloud);
	free(st->head);
	st_connect_req_cleanup(&st->req);
	es_body_only_cleanup(&st->bo);
	es->m.streams_open--;
	free(st);
	es_publish_stats(es);
}

/* The stream ends from our side: the queued bytes go first, then REMOVE. */
static void stream_finish(struct es_stream *st)
{
	if (st->es->sess)
		st_session_close(st->es->sess, st->id, 0, NULL);
	es_tunnel_kick(st->es);
	stream_free(st);
}

/*
 * Fails a stream before (or instead of) the backend's answer. With ERROR negotiated the cloud
 * gets @code and @reason; a base-protocol cloud gets an HTTP error response on upgrades (what
 * kubectl shows) and a bare REMOVE otherwise (a KubeEdge cloud has no way to carry more).
 */
static void stream_fail(struct es_stream *st, uint64_t code, const char *reason)
{
	struct edgestream *es = st->es;
	st_warn_ns(es->node, st->id, "%s %s", st_msg_type_name(st->type), reason);
	if (st->answered || es->sess == NULL) {
		stream_finish(st);
		return;
	}
	if (es->caps & ST_CAP_ERROR) {
		st_session_close(es->sess, st->id, code, reason);
		es_tunnel_kick(es);
		stream_free(st);
		return;
	}
	if (is_upgrade_type(st->type) || (es->caps & ST_CAP_RAW_RESPONSE)) {
		char resp[ST_MAX_STATUS_JSON_BYTES + 512];
		ssize_t n = st_http_error_response(resp, sizeof resp,
		                                   st_ext_error_http_status(code), reason);
		if (n > 0)
			st_session_write(es->sess, st->id, (const uint8_t *)resp, (size_t)n);
	}
	stream_finish(st);
}

/* ---- toward the cloud ------------------------------------------------------------------ */

/* Moves what the session can take from to_cloud; ends the stream once the backend is done. */
static void flush_to_cloud(struct es_stream *st)
{
	struct edgestream *es = st->es;
	while (st_buf_len(&st->to_cloud) > 0 && es->sess) {
		const uint8_t *p;
		size_t n = st_buf_peek(&st->to_cloud, &p);
		ssize_t w = st_session_write(es->sess, st->id, p, n);
		if (w < 0) {
			stream_free(st); /* the session forgot the stream: nothing more to say */
			return;
		}
		st_buf_consume(&st->to_cloud, (size_t)w);
		es->m.bytes_to_cloud += (uint64_t)w;
		if ((size_t)w < n)
			break;
	}
	es_tunnel_kick(es);
	if (st->backend_paused && st_buf_below_low(&st->to_cloud) && st->wsi) {
		st->backend_paused = false;
		st_dbg_ns(es->node, st->id, "backend resumed");
		lws_rx_flow_control(st->wsi, 1);
	}
	if (st->state == ES_STREAM_BACKEND_DONE) {
		if (st_buf_len(&st->to_cloud) == 0)
			stream_finish(st);
	} else if (st->logs) {
		es_logs_on_drained(st);
	}
}

/* Backend bytes for the cloud. Returns 0, or -1 when the stream is gone. */
static int to_cloud(struct es_stream *st, const uint8_t *p, size_t n)
{
	struct edgestream *es = st->es;
	if (n == 0)
		return 0;
	st->answered = true;
	size_t w = 0;
	if (st_buf_len(&st->to_cloud) == 0 && es->sess) {
		ssize_t r = st_session_write(es->sess, st->id, p, n);
		if (r < 0) {
			stream_free(st);
			return -1;
		}
		w = (size_t)r;
		es->m.bytes_to_cloud += w;
	}
	if (w < n && st_buf_append(&st->to_cloud, p + w, n - w) < 0) {
		stream_fail(st, ST_EXT_ERR_LIMIT, "backend output over the stream queue limit");
		return -1;
	}
	if (st_buf_above_high(&st->to_cloud) && !st->backend_paused && st->wsi) {
		st->backend_paused = true;
		st_dbg_ns(es->node, st->id, "backend paused: the cloud is not taking its bytes");
		lws_rx_flow_control(st->wsi, 0);
	}
	es_tunnel_kick(es);
	return 0;
}

static void backend_done(struct es_stream *st);
static void start_dial(struct es_stream *st);

/* ---- kept kubelet connections ---------------------------------------------------------- */

static void idle_drop(struct es_idle_conn *c, bool close_wsi)
{
	struct edgestream *es = c->es;
	if (c->prev)
		c->prev->next = c->next;
	else
		es->idle = c->next;
	if (c->next)
		c->next->prev = c->prev;
	es->idle_count--;
	lws_sul_cancel(&c->sul_idle);
	es_tls_free(&c->tls);
	if (close_wsi && c->wsi)
		lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
	free(c);
}

static struct es_idle_conn *idle_find(struct lws *wsi)
{
	struct edgestream *es = lws_context_user(lws_get_context(wsi));
	for (struct es_idle_conn *c = es ? es->idle : NULL; c; c = c->next)
		if (c->wsi == wsi)
			return c;
	return NULL;
}

static void on_idle_timeout(lws_sorted_usec_list_t *sul)
{
	idle_drop(lws_container_of(sul, struct es_idle_conn, sul_idle), true);
}

void es_idle_free_all(struct edgestream *es)
{
	while (es->idle)
		idle_drop(es->idle, false); /* the context closes the sockets */
}

/* The response on @st's kubelet connection is complete: keep the connection for the next
 * request. Returns 0, or -1 when it cannot be kept (the response said "Connection: close" or
 * was HTTP/1.0 without keep-alive, the pool is full, TLS bytes unsent). */
static int pool_put(struct es_stream *st)
{
	struct edgestream *es = st->es;
	if (st->wsi == NULL || !st->use_tls || st->state != ES_STREAM_RELAYING ||
	    !st->bo.keep_alive || es->idle_count >= es->cfg.kubelet_idle_connections ||
	    es_tls_pending(&st->tls) > 0)
		return -1;
	struct es_idle_conn *c = calloc(1, sizeof *c);
	if (c == NULL)
		return -1;
	c->es = es;
	c->wsi = st->wsi;
	c->tls = st->tls;
	memset(&st->tls, 0, sizeof st->tls);
	st->use_tls = false;
	st->wsi = NULL;
	lws_set_opaque_user_data(c->wsi, NULL);
	if (st->backend_paused) { /* an idle connection must still see the kubelet close */
		st->backend_paused = false;
		lws_rx_flow_control(c->wsi, 1);
	}
	c->next = es->idle;
	if (es->idle)
		es->idle->prev = c;
	es->idle = c;
	es->idle_count++;
	lws_sul_schedule(es->ctx, 0, &c->sul_idle, on_idle_timeout,
	                 (lws_usec_t)es->cfg.kubelet_idle_timeout_ms * LWS_US_PER_MS);
	return 0;
}

/* The newest kept connection serves @st: no connect, no handshake. */
static bool pool_take(struct es_stream *st)
{
	struct es_idle_conn *c = st->es->idle;
	if (c == NULL)
		return false;
	struct lws *wsi = c->wsi;
	st->tls = c->tls;
	memset(&c->tls, 0, sizeof c->tls);
	c->wsi = NULL;
	idle_drop(c, false);
	st->wsi = wsi;
	st->use_tls = true;
	st->reused = true;
	st->state = ES_STREAM_RELAYING;
	lws_set_opaque_user_data(wsi, st);
	st_dbg_ns(st->es->node, st->id, "%s → the kubelet on a kept connection",
	          st_msg_type_name(st->type));
	lws_callback_on_writable(wsi);
	return true;
}

/* @st's request goes again from its first byte on a new kubelet connection: the old socket is
 * closed (its callbacks no longer find @st) and the request head is sent again once the new
 * one is up. The callers check that nothing of the cloud's bytes went and nothing came back, so
 * the kubelet saw at most a head it never answered. */
static void redial(struct es_stream *st)
{
	if (st->wsi) {
		lws_set_opaque_user_data(st->wsi, NULL);
		lws_set_timeout(st->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
		st->wsi = NULL;
	}
	es_tls_free(&st->tls);
	st->reused = false;
	st->head_off = 0;
	st->state = ES_STREAM_DIALING;
	es_body_only_cleanup(&st->bo);
	es_body_only_init(&st->bo);
	start_dial(st);
}

/* A kept connection the kubelet closed before answering (it may time idle connections out
 * first): the request goes again on a new connection, as HTTP clients do for idempotent
 * requests. Only when nothing of the cloud's reached it and nothing came back. */
static bool retry_on_new_connection(struct es_stream *st)
{
	if (!st->reused || st->answered || st->body_sent)
		return false;
	st_dbg_ns(st->es->node, st->id, "the kept kubelet connection was closed: dialling anew");
	redial(st);
	return true;
}

/*
 * The kubelet (or the TLS front before it) ended a handshake that offered a kept session with
 * a fatal alert, where a server that cannot resume should fall back to a full handshake: the
 * request goes again, once, on a new connection with a full handshake, and no session is
 * offered to the kubelet again (until the process restarts: the kubelet's TLS context is never
 * reloaded). Nothing of the request went yet: the head waits for the end of the handshake.
 */
static bool retry_full_handshake(struct es_stream *st)
{
	struct edgestream *es = st->es;
	if (st->full_handshake || st->answered || st->body_sent ||
	    !es_tls_resumption_refused(&st->tls))
		return false;
	es->m.kubelet_resumption_refused++;
	char name[160];
	st_log(es_tls_stop_resuming(es->kubelet_ctx) ? ST_LOG_WARN : ST_LOG_DEBUG, es->node, st->id,
	       "%s refused to resume a TLS session (%s): sending the request again with a full "
	       "handshake, and resuming no more sessions with it (counted in "
	       "edgestream_kubelet_tls_resumption_refused_total)",
	       backend_name(st, name, sizeof name), st->tls.error);
	st->full_handshake = true;
	redial(st);
	es_publish_stats(es);
	return true;
}

/*
 * Plaintext from the backend: the body only for a base-protocol LOGS/METRIC, else as is. On a
 * kept-alive connection the response's framing says when it is over. Returns 0; -1 when the
 * stream is gone (close the backend); 1 when the response is complete and the connection went
 * back to the pool (stop reading it, keep the socket).
 */
static int from_backend(struct es_stream *st, const uint8_t *p, size_t n)
{
	uint8_t *body = st->es->scratch + RELAY_WRITE_MAX;
	if (!st->body_only && !st->keep_alive)
		return to_cloud(st, p, n);
	if (!st->body_only) {
		/* Relay as is; the framing is only followed (nothing copied). An unclear end
		 * means the connection closes at the end instead. */
		if (es_body_only_feed(&st->bo, p, n, NULL, SIZE_MAX) < 0)
			st->keep_alive = false;
		if (to_cloud(st, p, n) < 0)
			return -1;
	} else {
		while (n > 0 && !st->bo.done) {
			size_t piece = n > RELAY_WRITE_MAX ? RELAY_WRITE_MAX : n;
			ssize_t b = es_body_only_feed(&st->bo, p, piece, body, RELAY_WRITE_MAX);
			if (b < 0) {
				char why[128];
				snprintf(why, sizeof why, "malformed response from the backend: %s",
				         st_strerror((int)b));
				stream_fail(st, ST_EXT_ERR_PROTOCOL, why);
				return -1;
			}
			if (b > 0 && to_cloud(st, body, (size_t)b) < 0)
				return -1;
			p += piece;
			n -= piece;
		}
	}
	if (!st->keep_alive || !st->bo.done)
		return 0;
	int kept = pool_put(st);
	backend_done(st); /* may free @st */
	return kept == 0 ? 1 : -1;
}

static void backend_done(struct es_stream *st)
{
	st_dbg_ns(st->es->node, st->id,
	          "backend finished after %llu ms (%s, %zu bytes still queued)",
	          (unsigned long long)(es_now_ms() - st->started_ms),
	          st->answered ? "answered" : "no answer", st_buf_len(&st->to_cloud));
	st->state = ES_STREAM_BACKEND_DONE;
	lws_sul_cancel(&st->sul_timeout);
	flush_to_cloud(st); /* ends the stream once everything went out */
}

/* ---- timeouts -------------------------------------------------------------------------- */

static void on_timeout(lws_sorted_usec_list_t *sul)
{
	struct es_stream *st = lws_container_of(sul, struct es_stream, sul_timeout);
	char name[160], why[256];
	backend_name(st, name, sizeof name);
	snprintf(why, sizeof why, "%.150s: %s timed out", name,
	         st->state == ES_STREAM_DIALING ? "connect" : "TLS handshake");
	st->es->m.backend_failures++;
	stream_fail(st, ST_EXT_ERR_TIMEOUT, why);
}

static void arm_timeout(struct es_stream *st, uint64_t ms)
{
	lws_sul_schedule(st->es->ctx, 0, &st->sul_timeout, on_timeout,
	                 (lws_usec_t)ms * LWS_US_PER_MS);
}

/* ---- opening --------------------------------------------------------------------------- */

static int dial(struct es_stream *st)
{
	struct edgestream *es = st->es;
	struct lws_client_connect_info i;
	memset(&i, 0, sizeof i);
	i.context = es->ctx;
	i.vhost = es->vh_client;
	i.address = st->dial_host;
	i.port = st->dial_port;
	i.host = i.address;
	i.method = "RAW";
	i.local_protocol_name = es_backend_protocol.name;
	i.opaque_user_data = st;
	i.pwsi = &st->wsi;
	arm_timeout(st, es->cfg.backend_dial_timeout_ms);
	if (lws_client_connect_via_info(&i) == NULL) {
		/* lws may already have reported the failure through CONNECTION_ERROR, which
		 * found no stream (opaque data cleared below) or failed it already. */
		st->wsi = NULL;
		return -ECONNREFUSED;
	}
	return 0;
}

/* The backend request head for @req sent to @path on @host_header (kept apart from the cloud's
 * bytes so it goes first whenever they arrive). Fails the stream and returns -1 when it cannot
 * be written as HTTP/1.1. */
static int make_head(struct es_stream *st, const struct st_connect_req *req, const char *path,
                     size_t path_len, const char *host_header, bool keep_query, bool keep_alive)
{
	struct edgestream *es = st->es;
	char *head = malloc(ST_MAX_HTTP_HEAD_BYTES);
	char *p = malloc(path_len + 1);
	ssize_t n = -ENOMEM;
	bool upgrade = false;
	if (head && p && path_len > 0) {
		memcpy(p, path, path_len); /* @path may be a view into @req */
		n = es_request_head(head, ST_MAX_HTTP_HEAD_BYTES, req, p, path_len, host_header,
		                    keep_query, keep_alive, &upgrade);
	}
	free(p);
	if (n <= 0) {
		free(head);
		es->m.streams_refused++;
		stream_fail(st, ST_EXT_ERR_BAD_REQUEST,
		            n == -EMSGSIZE ? "request head too large for the backend"
		                           : "request cannot be sent as HTTP/1.1");
		return -1;
	}
	st->head = (uint8_t *)head;
	st->head_len = (size_t)n;
	st->keep_alive = keep_alive && !upgrade;
	st->body_only = !(es->caps & ST_CAP_RAW_RESPONSE) && !upgrade &&
	                (st->type == ST_MSG_LOGS_CONNECT || st->type == ST_MSG_METRIC_CONNECT);
	return 0;
}

static void start_dial(struct es_stream *st)
{
	struct edgestream *es = st->es;
	char name[160];
	st_dbg_ns(es->node, st->id, "%s → %s", st_msg_type_name(st->type),
	          backend_name(st, name, sizeof name));
	uint64_t id = st->id;
	if (dial(st) < 0 && es->sess && st_session_stream_user(es->sess, id) == st) {
		char why[256];
		snprintf(why, sizeof why, "%.150s unreachable",
		         backend_name(st, name, sizeof name));
		es->m.backend_failures++;
		stream_fail(st, ST_EXT_ERR_UNREACHABLE, why);
	}
}

/* ---- the CRI backend: ask the runtime on a worker, then dial its streaming server ------- */

struct cri_job {
	struct edgestream *es;
	struct es_stream *st;
	uint64_t id, serial;
	char socket[ES_CRI_SOCKET_MAX];
	uint64_t timeout_ms;
	struct es_cri_plan plan;
	int rc;
	char url[CRI_URL_MAX];
	char err[512];
};

int es_cri_find_sandbox(struct cri_client *c, const struct es_cri_plan *p, bool ready_only,
                        char *id, size_t cap, char *err, size_t errlen)
{
	struct cri_label l[3] = {{CRI_LABEL_POD_NAMESPACE, p->namespace_},
	                         {CRI_LABEL_POD_NAME, p->pod},
	                         {CRI_LABEL_POD_UID, p->uid}};
	struct cri_sandbox sb[16]; /* a worker's stack */
	size_t n;
	int rc = cri_list_sandboxes(c, l, p->uid[0] ? 3 : 2, ready_only ? CRI_SANDBOX_READY : -1,
	                            sb, 16, &n, err, errlen);
	if (rc < 0)
		return rc;
	size_t best = n;
	for (size_t i = 0; i < n; i++)
		if (best == n || sb[i].created_at > sb[best].created_at)
			best = i;
	if (best == n) {
		snprintf(err, errlen, "pod %.120s/%.120s has no %ssandbox on this node",
		         p->namespace_, p->pod, ready_only ? "ready " : "");
		return -ENOENT;
	}
	snprintf(id, cap, "%s", sb[best].id);
	return 0;
}

static void cri_work(void *arg)
{
	struct cri_job *j = arg;
	struct es_cri_plan *p = &j->plan;
	struct cri_client *c;
	char sandbox[CRI_ID_MAX + 1];
	j->rc = cri_client_new(&c, j->socket, j->timeout_ms);
	if (j->rc < 0) {
		snprintf(j->err, sizeof j->err, "cannot set up a CRI client");
		return;
	}
	j->rc = es_cri_find_sandbox(c, p, true, sandbox, sizeof sandbox, j->err, sizeof j->err);
	if (j->rc == 0 && p->kind == ST_KUBELET_PORT_FORWARD) {
		j->rc = cri_port_forward_url(c, sandbox, p->ports, p->nports, j->url, sizeof j->url,
		                             j->err, sizeof j->err);
	} else if (j->rc == 0) {
		struct cri_label l = {CRI_LABEL_CONTAINER_NAME, p->container};
		struct cri_container ct[4];
		size_t n = 0;
		j->rc = cri_list_containers(c, sandbox, &l, 1, CRI_CONTAINER_RUNNING, ct, 4, &n,
		                            j->err, sizeof j->err);
		if (j->rc == 0 && n == 0) {
			snprintf(j->err, sizeof j->err,
			         "container %.120s is not running in pod %.120s/%.120s",
			         p->container, p->namespace_, p->pod);
			j->rc = -ENOENT;
		}
		if (j->rc == 0 && p->kind == ST_KUBELET_EXEC)
			j->rc = cri_exec_url(c, ct[0].id, p->cmd, p->ncmd, p->tty, p->in, p->out,
			                     p->err, j->url, sizeof j->url, j->err, sizeof j->err);
		else if (j->rc == 0)
			j->rc = cri_attach_url(c, ct[0].id, p->in, p->tty, p->out, p->err, j->url,
			                       sizeof j->url, j->err, sizeof j->err);
	}
	cri_client_free(c);
}

static uint64_t cri_error_code(int rc)
{
	switch (rc) {
	case -ENOENT:
		return ST_EXT_ERR_NOT_FOUND;
	case -ETIMEDOUT:
		return ST_EXT_ERR_TIMEOUT;
	case -EINVAL:
		return ST_EXT_ERR_BAD_REQUEST;
	case -EAGAIN:
		return ST_EXT_ERR_LIMIT;
	default:
		return ST_EXT_ERR_UNREACHABLE;
	}
}

static void cri_done(void *arg, int status)
{
	struct cri_job *j = arg;
	struct edgestream *es = j->es;
	struct es_stream *st = es->sess ? st_session_stream_user(es->sess, j->id) : NULL;
	if (status < 0 || st != j->st || st->serial != j->serial) {
		free(j); /* the stream ended meanwhile */
		return;
	}
	st->cri_pending = false;
	if (j->rc < 0) {
		es->m.backend_failures++;
		stream_fail(st, cri_error_code(j->rc), j->err);
		free(j);
		return;
	}
	char path[CRI_URL_MAX];
	if (es_parse_url(j->url, "http", 80, st->dial_host, sizeof st->dial_host, &st->dial_port,
	                 path, sizeof path) < 0) {
		char why[CRI_URL_MAX + 64];
		snprintf(why, sizeof why,
		         "the runtime's streaming URL %.200s is not plain http "
		         "(enable_tls_streaming is not supported)",
		         j->url);
		stream_fail(st, ST_EXT_ERR_UNREACHABLE, why);
		free(j);
		return;
	}
	free(j);
	char host_header[300];
	snprintf(host_header, sizeof host_header, "%.255s:%d", st->dial_host, st->dial_port);
	/* The options travel in the CRI request; the URL's path names them by token. */
	if (make_head(st, &st->req, path, strlen(path), host_header, false, false) < 0)
		return;
	st_connect_req_cleanup(&st->req);
	start_dial(st);
}

static void cri_start(struct es_stream *st)
{
	struct edgestream *es = st->es;
	struct cri_job *j = calloc(1, sizeof *j);
	struct st_kubelet_path kp;
	char why[256] = "";
	int rc = -ENOMEM;
	if (j != NULL && st_kubelet_path_parse(st->req.path, strlen(st->req.path), &kp) == 0)
		rc = es_cri_plan_make(&j->plan, &kp, st->req.raw_query, strlen(st->req.raw_query),
		                      why, sizeof why);
	else if (j != NULL)
		rc = -EINVAL;
	if (rc < 0) {
		free(j);
		es->m.streams_refused++;
		stream_fail(st, rc == -ENOMEM ? ST_EXT_ERR_INTERNAL : ST_EXT_ERR_BAD_REQUEST,
		            why[0]            ? why
		            : rc == -EMSGSIZE ? "request over the CRI limits"
		                              : "not a streaming request");
		return;
	}
	if (j->plan.kind == ST_KUBELET_CONTAINER_LOGS) { /* answered from the runtime's files */
		es_logs_start(st, &j->plan);
		free(j);
		return;
	}
	j->es = es;
	j->st = st;
	j->id = st->id;
	j->serial = st->serial;
	j->timeout_ms = es->cfg.cri_timeout_ms;
	snprintf(j->socket, sizeof j->socket, "%s", es->cfg.cri_socket);
	st->cri_pending = true;
	st_dbg_ns(es->node, st->id, "%s → the container runtime (%s)", st_msg_type_name(st->type),
	          j->socket);
	rc = st_workq_submit(es->wq, cri_work, cri_done, j);
	if (rc < 0) {
		free(j);
		st->cri_pending = false;
		stream_fail(st, ST_EXT_ERR_LIMIT, "too many runtime calls waiting");
	}
}

int es_stream_open(struct edgestream *es, uint64_t id, uint64_t type, const uint8_t *payload,
                   size_t len)
{
	struct es_stream *st = calloc(1, sizeof *st);
	if (st == NULL)
		return -ENOMEM;
	st->es = es;
	st->id = id;
	st->type = type;
	st->started_ms = es_now_ms();
	st->serial = ++es->next_stream_serial;
	st_buf_init(&st->to_cloud, TO_CLOUD_CAP);
	st_buf_set_watermarks(&st->to_cloud, TO_CLOUD_HIGH, TO_CLOUD_LOW);
	/* With credit the cloud never sends more than the window; without, bound it hard. */
	bool flow = es->caps & ST_CAP_FLOW;
	st_buf_init(&st->to_backend, flow ? (size_t)es->cfg.stream_window_bytes : BASE_QUEUE_CAP);
	if (!flow)
		st_buf_set_watermarks(&st->to_backend, BASE_QUEUE_HIGH, BASE_QUEUE_LOW);
	es_body_only_init(&st->bo);
	st->next = es->streams;
	if (es->streams)
		es->streams->prev = st;
	es->streams = st;
	es->m.streams_open++;
	es->m.streams_total++;
	st_session_set_stream_user(es->sess, id, st);

	struct st_connect_req req = {0};
	if (type == ST_MSG_TCP_CONNECT) {
		struct st_ext_tcp_connect tc;
		if (st_ext_tcp_connect_decode(payload, len, &tc) < 0) {
			es->m.streams_refused++;
			stream_fail(st, ST_EXT_ERR_BAD_REQUEST, "malformed TCP_CONNECT");
			return 0;
		}
		es_route_tcp(&es->allow, tc.port, tc.target, tc.target_len, &st->target);
	} else {
		int rc = st_connect_req_decode(payload, len, &req);
		if (rc < 0) {
			char why[128];
			snprintf(why, sizeof why, "malformed connect request: %s", st_strerror(rc));
			es->m.streams_refused++;
			stream_fail(st, ST_EXT_ERR_BAD_REQUEST, why);
			return 0;
		}
		es_route_request(&es->allow, es->kubelet_port > 0, es->cri_enabled, req.path,
		                 strlen(req.path), &st->target);
	}
	if (st->target.kind == ES_TARGET_REFUSE) {
		es->m.streams_refused++;
		st_connect_req_cleanup(&req);
		stream_fail(st, st->target.refuse_code, st->target.reason);
		return 0;
	}
	if (st->target.kind == ES_TARGET_CRI) {
		st->req = req; /* the head is written once the runtime gave its URL */
		cri_start(st);
		return 0;
	}
	if (type != ST_MSG_TCP_CONNECT) {
		char local_host[32];
		const char *host_header = es->kubelet_host_header;
		if (st->target.kind == ES_TARGET_LOCAL_PORT) {
			snprintf(local_host, sizeof local_host, "127.0.0.1:%u", st->target.port);
			host_header = local_host;
		}
		/* A plain GET to the kubelet may leave its connection for the next request. */
		bool keep = st->target.kind == ES_TARGET_KUBELET &&
		            es->cfg.kubelet_idle_connections > 0 && strcmp(req.method, "GET") == 0;
		int rc = make_head(st, &req, st->target.path, st->target.path_len, host_header,
		                   true, keep);
		st_connect_req_cleanup(&req);
		st->target.path = NULL;
		if (rc < 0)
			return 0;
	}
	if (st->target.kind == ES_TARGET_KUBELET) {
		snprintf(st->dial_host, sizeof st->dial_host, "%s", es->kubelet_host);
		st->dial_port = es->kubelet_port;
		st->use_tls = true;
		if (st->keep_alive && pool_take(st))
			return 0;
	} else {
		snprintf(st->dial_host, sizeof st->dial_host, "127.0.0.1");
		st->dial_port = st->target.port;
	}
	start_dial(st);
	return 0;
}

int es_stream_to_cloud(struct es_stream *st, const uint8_t *p, size_t n)
{
	return to_cloud(st, p, n);
}

void es_stream_fail(struct es_stream *st, uint64_t code, const char *reason)
{
	stream_fail(st, code, reason);
}

void es_stream_backend_done(struct es_stream *st)
{
	backend_done(st);
}

/* ---- from the cloud -------------------------------------------------------------------- */

static void on_stall_check(lws_sorted_usec_list_t *sul);

static void arm_stall_check(struct es_stream *st)
{
	lws_sul_schedule(st->es->ctx, 0, &st->sul_stall, on_stall_check,
	                 (lws_usec_t)st->es->cfg.stall_timeout_ms * LWS_US_PER_MS);
}

/* Base protocol: this stream's full queue toward its backend has had the tunnel paused (no
 * per-stream credit) for --stall-timeout without draining to its low mark, and every other
 * stream waited with it: cut it. A backend that drains its queue within the stall time is
 * never cut, however often it fills it. */
static void on_stall_check(lws_sorted_usec_list_t *sul)
{
	struct es_stream *st = lws_container_of(sul, struct es_stream, sul_stall);
	struct edgestream *es = st->es;
	if (!st->blocking)
		return;
	es->m.stall_cuts++;
	char why[160];
	snprintf(why, sizeof why,
	         "the tunnel was paused for its backend for %llu ms and the backend did not drain "
	         "it (--stall-timeout)",
	         (unsigned long long)es->cfg.stall_timeout_ms);
	stream_fail(st, ST_EXT_ERR_TIMEOUT, why);
}

int es_stream_on_data(struct es_stream *st, const uint8_t *p, size_t len)
{
	struct edgestream *es = st->es;
	es->m.bytes_from_cloud += len;
	if (st_buf_append(&st->to_backend, p, len) < 0) {
		st_warn_ns(es->node, st->id, "the cloud sent more than the stream queue holds");
		return -EMSGSIZE; /* the session resets the stream */
	}
	if (!(es->caps & ST_CAP_FLOW) && st_buf_above_high(&st->to_backend) && !st->blocking) {
		st->blocking = true;
		es->blocking_streams++;
		arm_stall_check(st);
		es_tunnel_update_rx(es);
	}
	if (st->wsi && st->state != ES_STREAM_DIALING)
		lws_callback_on_writable(st->wsi);
	return 0;
}

void es_stream_on_half_close(struct es_stream *st)
{
	/* Only a raw TCP stream passes the end of the cloud's bytes on as a TCP half-close. For
	 * HTTP it only means "the request is complete": an HTTP server that sees EOF after the
	 * request drops the answer (Go's cancels the request context, Python's loses the
	 * connection), so the backend connection stays open both ways. */
	if (st->type != ST_MSG_TCP_CONNECT)
		return;
	st->cloud_half_closed = true;
	if (st->wsi && st->state != ES_STREAM_DIALING)
		lws_callback_on_writable(st->wsi);
}

void es_stream_on_cloud_close(struct es_stream *st, uint64_t code, const char *reason,
                              size_t reason_len)
{
	if (code)
		st_dbg_ns(st->es->node, st->id, "the cloud ended the stream: %s %.*s",
		          st_ext_error_name(code), (int)reason_len, reason);
	stream_free(st);
}

void es_stream_on_writable(struct es_stream *st)
{
	flush_to_cloud(st);
}

void es_stream_tunnel_gone(struct es_stream *st)
{
	stream_free(st);
}

/* ---- the backend socket ---------------------------------------------------------------- */

/* One lws_write of whatever is due: TLS records, or plaintext. Returns 0 or -1 (close). */
static int backend_writeable(struct es_stream *st)
{
	struct edgestream *es = st->es;
	uint8_t *out = es->tx + LWS_PRE;
	size_t n = 0;
	size_t took = 0;
	bool from_head = false;
	if (st->state == ES_STREAM_RELAYING || st->state == ES_STREAM_BACKEND_DONE ||
	    !st->use_tls) {
		const uint8_t *p;
		if (st->head_off < st->head_len) { /* the request head goes first */
			p = st->head + st->head_off;
			took = st->head_len - st->head_off;
			from_head = true;
		} else {
			took = st_buf_peek(&st->to_backend, &p);
		}
		if (took > RELAY_WRITE_MAX)
			took = RELAY_WRITE_MAX;
		if (took && st->use_tls) {
			if (es_tls_write(&st->tls, p, took) < 0) {
				stream_fail(st, ST_EXT_ERR_UNREACHABLE, st->tls.error);
				return -1;
			}
		} else if (took) {
			memcpy(out, p, took);
			n = took;
		}
	}
	if (st->use_tls)
		n = es_tls_take(&st->tls, out, ST_MAX_MESSAGE_BYTES);
	if (took && from_head) {
		st->head_off += took;
	} else if (took) {
		/* The cloud's bytes reached the socket: their credit goes back. */
		st->body_sent = true;
		st_buf_consume(&st->to_backend, took);
		st_session_consumed(es->sess, st->id, took);
		es_tunnel_kick(es);
		if (st->blocking && st_buf_below_low(&st->to_backend))
			unblock_tunnel(st);
	}
	if (n > 0 && lws_write(st->wsi, out, n, LWS_WRITE_RAW) < 0)
		return -1;
	if (st->head_off < st->head_len || st_buf_len(&st->to_backend) > 0 ||
	    (st->use_tls && es_tls_pending(&st->tls) > 0)) {
		lws_callback_on_writable(st->wsi);
	} else if (st->cloud_half_closed && !st->shut_wr_sent && st->state == ES_STREAM_RELAYING) {
		/* The cloud sent its last byte: half-close toward the backend too. */
		st->shut_wr_sent = true;
		if (st->use_tls) {
			es_tls_close_notify(&st->tls);
			lws_callback_on_writable(st->wsi); /* the alert goes out, then SHUT_WR */
		} else {
			shutdown(lws_get_socket_fd(st->wsi), SHUT_WR);
		}
	} else if (st->shut_wr_sent && st->use_tls) {
		shutdown(lws_get_socket_fd(st->wsi), SHUT_WR);
	}
	return 0;
}

static int backend_rx_tls(struct es_stream *st, const uint8_t *in, size_t len)
{
	if (es_tls_feed(&st->tls, in, len) < 0) {
		stream_fail(st, ST_EXT_ERR_INTERNAL, "out of memory");
		return -1;
	}
	if (st->state == ES_STREAM_HANDSHAKE) {
		int hs = es_tls_handshake(&st->tls);
		if (hs < 0 && retry_full_handshake(st))
			return -1; /* closes the old socket; @st went on with a new one */
		if (hs < 0) {
			char name[160], why[400];
			snprintf(why, sizeof why, "%.150s: %.200s",
			         backend_name(st, name, sizeof name), st->tls.error);
			st->es->m.backend_failures++;
			stream_fail(st, ST_EXT_ERR_UNREACHABLE, why);
			return -1;
		}
		lws_callback_on_writable(st->wsi);
		if (hs == 0)
			return 0;
		st->state = ES_STREAM_RELAYING;
		lws_sul_cancel(&st->sul_timeout);
	}
	for (;;) {
		ssize_t n = es_tls_read(&st->tls, st->es->scratch, RELAY_WRITE_MAX);
		if (n == 0)
			break;
		if (n < 0 && retry_on_new_connection(st))
			return -1; /* closes the old socket; @st went on with a new one */
		if (n == -EPIPE) { /* close_notify: the backend finished */
			st_dbg_ns(st->es->node, st->id, "close_notify from the backend");
			backend_done(st);
			return -1;
		}
		if (n < 0) {
			st_warn_ns(st->es->node, st->id, "backend: %s", st->tls.error);
			backend_done(st);
			return -1;
		}
		int r = from_backend(st, st->es->scratch, (size_t)n);
		if (r != 0)
			return r < 0 ? -1 : 0; /* gone, or kept for the next request */
	}
	if (es_tls_pending(&st->tls) > 0)
		lws_callback_on_writable(st->wsi);
	return 0;
}

static int cb_backend(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                      size_t len)
{
	(void)user;
	struct es_stream *st = lws_get_opaque_user_data(wsi);
	switch (reason) {
	case LWS_CALLBACK_CLIENT_CONNECTION_ERROR: {
		if (st == NULL)
			return 0;
		st->wsi = NULL;
		char name[160], why[400];
		snprintf(why, sizeof why, "%.150s unreachable: %.200s",
		         backend_name(st, name, sizeof name),
		         in ? (const char *)in : "connection failed");
		st->es->m.backend_failures++;
		stream_fail(st, ST_EXT_ERR_UNREACHABLE, why);
		return 0;
	}
	case LWS_CALLBACK_RAW_CONNECTED:
		if (st == NULL)
			return -1;
		st->wsi = wsi;
		if (st->use_tls) {
			st->state = ES_STREAM_HANDSHAKE;
			if (es_tls_start(&st->tls, st->es->kubelet_ctx, st->es->kubelet_name) < 0) {
				st->use_tls = false;
				stream_fail(st, ST_EXT_ERR_INTERNAL, "cannot start TLS");
				return -1;
			}
			arm_timeout(st, st->es->cfg.backend_handshake_timeout_ms);
			es_tls_handshake(&st->tls); /* produces the ClientHello */
		} else {
			st->state = ES_STREAM_RELAYING;
			lws_sul_cancel(&st->sul_timeout);
		}
		lws_callback_on_writable(wsi);
		return 0;
	case LWS_CALLBACK_RAW_RX:
		if (st == NULL) {
			/* Unasked bytes on a kept connection: a close_notify, most likely. */
			struct es_idle_conn *c = idle_find(wsi);
			if (c) {
				c->wsi = NULL;
				idle_drop(c, false);
			}
			return -1;
		}
		if (st->use_tls)
			return backend_rx_tls(st, in, len);
		return from_backend(st, in, len) < 0 ? -1 : 0;
	case LWS_CALLBACK_RAW_WRITEABLE:
		if (st == NULL)
			return idle_find(wsi) ? 0 : -1;
		return backend_writeable(st);
	case LWS_CALLBACK_RAW_CLOSE:
		if (st == NULL) {
			struct es_idle_conn *c = idle_find(wsi);
			if (c) {
				c->wsi = NULL;
				idle_drop(c, false);
			}
			return 0;
		}
		st->wsi = NULL;
		if (st->state == ES_STREAM_RELAYING && retry_on_new_connection(st))
			return 0;
		if (st->state == ES_STREAM_DIALING || st->state == ES_STREAM_HANDSHAKE) {
			char name[160], why[300];
			snprintf(why, sizeof why, "%.150s closed the connection during the %s",
			         backend_name(st, name, sizeof name),
			         st->state == ES_STREAM_DIALING ? "connect" : "TLS handshake");
			st->es->m.backend_failures++;
			stream_fail(st, ST_EXT_ERR_UNREACHABLE, why);
		} else if (st->state != ES_STREAM_BACKEND_DONE) {
			st_dbg_ns(st->es->node, st->id, "backend connection closed");
			backend_done(st);
		}
		return 0;
	default:
		return 0;
	}
}

const struct lws_protocols es_backend_protocol = {
        .name = "es-backend",
        .callback = cb_backend,
        .rx_buffer_size = 16384,
        .tx_packet_size = 65536,
};
