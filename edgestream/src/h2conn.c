/*
 * edgestream/src/h2conn.c — kubelet requests as HTTP/2 streams (h2conn.h): lws raw socket, TLS
 * over memory BIOs with ALPN, an nghttp2 client session fed with what TLS decrypted and
 * drained into TLS when the socket is writable. Loop thread only.
 *
 * nghttp2 is never re-entered: its send side runs only in the socket's WRITEABLE callback;
 * stream ops called from inside its receive callbacks (a relay call that freed the stream)
 * only submit (RST_STREAM, WINDOW_UPDATE) and ask for WRITEABLE.
 */
#include "h2conn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nghttp2/nghttp2.h>

#include <stream/ext.h>
#include <stream/frame.h>
#include <stream/limits.h>
#include <stream/log.h>

#include "backend.h"
#include "es.h"
#include "h2msg.h"
#include "relay.h"
#include "tls.h"
#include "tunnel.h"

#define RX_BYTES        16384u        /* the most lws hands us per read callback */
#define PLAIN_READ_MAX  (64u * 1024u) /* plaintext per TLS read */
#define TLS_OUT_MAX     (64u * 1024u) /* ciphertext queued per WRITEABLE before sending */
#define PENDING_STREAMS 100u          /* streams a connection takes before its SETTINGS came */

enum h2c_state { H2C_DIALING = 0, H2C_HANDSHAKE, H2C_OPEN };

struct h2s;

struct h2c {
	struct edgestream *es;
	struct lws *wsi;
	enum h2c_state state;
	struct es_tls tls;
	nghttp2_session *sess; /* once open */
	struct h2s *streams;   /* riding it, or waiting for it to open */
	unsigned nstreams;
	bool goaway;     /* no new streams (GOAWAY either way, or an error) */
	bool was_idle;   /* it had no stream at some point: a close may have raced a request */
	bool in_connect; /* inside lws_client_connect_via_info() */
	bool connect_failed;
	bool resume_retried;
	char connect_error[300];
	lws_sorted_usec_list_t sul; /* connect / handshake deadline; idle deadline once open */
	struct h2c *next, *prev;    /* es->h2conns */
};

struct h2s {
	struct es_stream *st;
	struct h2c *c; /* NULL once detached */
	int32_t id;    /* the HTTP/2 stream id; 0 until submitted */
	struct h2s *next, *prev;
	struct st_connect_req req; /* kept until the answer's head came (resend, HTTP/1.1) */
	const char *path;          /* into req */
	size_t path_len;
	bool have_req;
	bool body_only, no_body, chunked;
	bool head_done, ended, retried;
	struct es_h2_head head;
	struct es_h2_flow flow;
};

/* ---- the instance's connections ----------------------------------------------------------- */

static void c_link(struct h2c *c)
{
	struct edgestream *es = c->es;
	c->next = es->h2conns;
	if (es->h2conns)
		es->h2conns->prev = c;
	es->h2conns = c;
}

static void c_unlink(struct h2c *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		c->es->h2conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->next = c->prev = NULL;
}

unsigned es_h2_connections(const struct edgestream *es)
{
	unsigned n = 0;
	for (const struct h2c *c = es->h2conns; c; c = c->next)
		n++;
	return n;
}

static void on_deadline(lws_sorted_usec_list_t *sul);

static void arm(struct h2c *c, uint64_t ms)
{
	lws_sul_schedule(c->es->ctx, 0, &c->sul, on_deadline, (lws_usec_t)ms * LWS_US_PER_MS);
}

static void kick(struct h2c *c)
{
	if (c->wsi && c->state != H2C_DIALING)
		lws_callback_on_writable(c->wsi);
}

/* ---- streams on a connection -------------------------------------------------------------- */

static void s_attach(struct h2s *s, struct h2c *c)
{
	s->c = c;
	s->next = c->streams;
	s->prev = NULL;
	if (c->streams)
		c->streams->prev = s;
	c->streams = s;
	c->nstreams++;
	lws_sul_cancel(&c->sul);
	if (c->state == H2C_OPEN)
		lws_sul_cancel(&c->sul); /* no idle deadline while it serves */
}

static void s_detach(struct h2s *s)
{
	struct h2c *c = s->c;
	if (c == NULL)
		return;
	if (s->prev)
		s->prev->next = s->next;
	else
		c->streams = s->next;
	if (s->next)
		s->next->prev = s->prev;
	s->next = s->prev = NULL;
	s->c = NULL;
	c->nstreams--;
	if (c->sess && s->id > 0)
		nghttp2_session_set_stream_user_data(c->sess, s->id, NULL);
	if (c->nstreams == 0 && c->state == H2C_OPEN) {
		/* Idle: kept for the next request, closed after --kubelet-idle-timeout (or at once
		 * when no more may ride it). */
		c->was_idle = true;
		arm(c, c->goaway ? 0 : c->es->cfg.kubelet_idle_timeout_ms);
	}
}

static void s_free(struct h2s *s)
{
	s_detach(s);
	st_connect_req_cleanup(&s->req);
	es_h2_head_cleanup(&s->head);
	free(s);
}

/* ---- submitting -------------------------------------------------------------------------- */

static int attach_to_some(struct h2s *s);

/* Sends @s's request on its (open) connection. 0, or -1 when @s's stream was failed. */
static int submit(struct h2s *s)
{
	struct h2c *c = s->c;
	struct es_stream *st = s->st;
	struct edgestream *es = c->es;
	struct es_h2_field f[ES_H2_MAX_FIELDS];
	ssize_t n = es_h2_request_fields(f, (char *)es->scratch, ST_MAX_HTTP_HEAD_BYTES, &s->req,
	                                 s->path, s->path_len, es->kubelet_host_header);
	if (n < 0) {
		es->m.streams_refused++;
		es_stream_fail(st, ST_EXT_ERR_BAD_REQUEST,
		               n == -EMSGSIZE ? "request head too large for the backend"
		                              : "request cannot be sent as HTTP/2");
		return -1;
	}
	nghttp2_nv nv[ES_H2_MAX_FIELDS];
	for (ssize_t i = 0; i < n; i++)
		nv[i] = (nghttp2_nv){.name = (uint8_t *)(uintptr_t)f[i].name,
		                     .value = (uint8_t *)(uintptr_t)f[i].value,
		                     .namelen = f[i].name_len,
		                     .valuelen = f[i].value_len,
		                     .flags = NGHTTP2_NV_FLAG_NONE};
	int32_t id = nghttp2_submit_request(c->sess, NULL, nv, (size_t)n, NULL, s);
	if (id < 0) {
		es_stream_fail(st, ST_EXT_ERR_INTERNAL, nghttp2_strerror(id));
		return -1;
	}
	s->id = id;
	char name[160];
	st_dbg_ns(es->node, st->id, "%s → %s, HTTP/2 stream %d", st_msg_type_name(st->type),
	          es_stream_describe(st, name, sizeof name), (int)id);
	kick(c);
	return 0;
}

/* ---- the connection ends ------------------------------------------------------------------ */

/* The socket no longer reaches @c; lws closes it. */
static void let_go(struct h2c *c)
{
	if (c->wsi == NULL)
		return;
	lws_set_opaque_user_data(c->wsi, NULL);
	lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
	c->wsi = NULL;
}

static void c_free(struct h2c *c)
{
	lws_sul_cancel(&c->sul);
	let_go(c);
	while (c->streams)
		s_detach(c->streams); /* none should be left: the callers ended them */
	nghttp2_session_del(c->sess);
	es_tls_free(&c->tls);
	c_unlink(c);
	free(c);
}

/*
 * @c failed before it could carry requests (connect, handshake): every stream waiting on it
 * fails with @code and @why, as an HTTP/1.1 connection's would. Frees @c.
 */
static void c_fail_all(struct h2c *c, uint64_t code, const char *why)
{
	char reason[400];
	snprintf(reason, sizeof reason, "%s", why); /* @why may live in @c */
	struct edgestream *es = c->es;
	let_go(c);
	while (c->streams) {
		struct h2s *s = c->streams;
		s_detach(s);
		es->m.backend_failures++;
		es_stream_fail(s->st, code, reason); /* frees @s */
	}
	c_free(c);
}

/*
 * @c is lost while open (the socket closed, a TLS or HTTP/2 error): a stream with an answer
 * under way ends there, as over HTTP/1.1; one without an answer goes again on another
 * connection when nothing says the kubelet saw it (the connection had been idle: a close
 * racing the request), else it ends unanswered. Frees @c.
 */
static void c_lost(struct h2c *c, const char *why)
{
	struct edgestream *es = c->es;
	st_dbg_ns(es->node, 0, "HTTP/2 connection to the kubelet lost: %s", why);
	let_go(c);
	c->goaway = true;
	bool raced = c->was_idle;
	while (c->streams) {
		struct h2s *s = c->streams;
		s_detach(s);
		s->id = 0;
		if (!s->head_done && raced && s->have_req && !s->retried) {
			s->retried = true;
			if (attach_to_some(s) < 0)
				continue; /* failed: gone */
			continue;
		}
		es_stream_backend_done(s->st); /* frees @s (or soon: its queue drains first) */
	}
	c_free(c);
}

/* ---- dialling ------------------------------------------------------------------------------ */

static int dial(struct h2c *c);

/* Where a stream can ride: an open or opening connection with room (the kubelet's
 * SETTINGS_MAX_CONCURRENT_STREAMS, or PENDING_STREAMS before its SETTINGS), else a new one.
 * 0, or -1 when the stream was failed (@s freed). */
static int attach_to_some(struct h2s *s)
{
	struct edgestream *es = s->st->es;
	struct h2c *c;
	for (c = es->h2conns; c; c = c->next) {
		if (c->goaway || c->wsi == NULL)
			continue;
		uint32_t max = c->sess ? nghttp2_session_get_remote_settings(
		                                 c->sess, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS)
		                       : PENDING_STREAMS;
		if (c->nstreams < max)
			break;
	}
	if (c) {
		s_attach(s, c);
		return c->state == H2C_OPEN ? submit(s) : 0;
	}
	c = calloc(1, sizeof *c);
	if (c == NULL) {
		es_stream_fail(s->st, ST_EXT_ERR_INTERNAL, "out of memory");
		return -1;
	}
	c->es = es;
	c_link(c);
	s_attach(s, c);
	return dial(c);
}

static int dial(struct h2c *c)
{
	struct edgestream *es = c->es;
	struct lws_client_connect_info i;
	memset(&i, 0, sizeof i);
	i.context = es->ctx;
	i.vhost = es->vh_client;
	i.address = es->kubelet_host;
	i.port = es->kubelet_port;
	i.host = i.address;
	i.method = "RAW";
	i.local_protocol_name = es_h2_protocol.name;
	i.opaque_user_data = c;
	c->state = H2C_DIALING;
	c->connect_failed = false;
	arm(c, es->cfg.backend_dial_timeout_ms);
	c->in_connect = true;
	struct lws *wsi = lws_client_connect_via_info(&i);
	c->in_connect = false;
	if (wsi && !c->connect_failed) {
		c->wsi = wsi;
		return 0;
	}
	let_go(c);
	char why[400];
	if (c->connect_failed)
		snprintf(why, sizeof why, "%s", c->connect_error);
	else
		snprintf(why, sizeof why, "kubelet %.100s:%d unreachable", es->kubelet_host,
		         es->kubelet_port);
	c_fail_all(c, ST_EXT_ERR_UNREACHABLE, why);
	return -1;
}

/* A failure before the connection opened (inside the connect call only noted). */
static void c_fail_early(struct h2c *c, uint64_t code, const char *why)
{
	if (c->in_connect) {
		if (!c->connect_failed) {
			c->connect_failed = true;
			snprintf(c->connect_error, sizeof c->connect_error, "%s", why);
		}
		return;
	}
	c_fail_all(c, code, why);
}

static void on_deadline(lws_sorted_usec_list_t *sul)
{
	struct h2c *c = lws_container_of(sul, struct h2c, sul);
	struct edgestream *es = c->es;
	if (c->state == H2C_OPEN) {
		if (c->nstreams == 0)
			c_free(c); /* idle for --kubelet-idle-timeout */
		return;
	}
	char why[300];
	snprintf(why, sizeof why, "kubelet %.100s:%d: %s timed out", es->kubelet_host,
	         es->kubelet_port, c->state == H2C_DIALING ? "connect" : "TLS handshake");
	c_fail_all(c, ST_EXT_ERR_TIMEOUT, why);
}

/* ---- nghttp2 callbacks -------------------------------------------------------------------- */

static struct h2s *stream_of(nghttp2_session *sess, int32_t id)
{
	return nghttp2_session_get_stream_user_data(sess, id);
}

/* Bytes for the cloud. 0, or -1 when the stream is gone (@s freed). */
static int to_cloud(struct h2s *s, const void *p, size_t n)
{
	return es_stream_to_cloud(s->st, p, n);
}

static int on_begin_headers(nghttp2_session *sess, const nghttp2_frame *frame, void *user)
{
	(void)user;
	struct h2s *s = stream_of(sess, frame->hd.stream_id);
	if (s && frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_RESPONSE)
		es_h2_head_cleanup(&s->head);
	return 0;
}

static int on_header(nghttp2_session *sess, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *user)
{
	(void)flags, (void)user;
	struct h2s *s = stream_of(sess, frame->hd.stream_id);
	if (s == NULL || s->head_done || frame->hd.type != NGHTTP2_HEADERS)
		return 0; /* trailers: HTTP/1.1 chunked could carry them; the kubelet sends none */
	if (es_h2_head_field(&s->head, name, namelen, value, valuelen) < 0)
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* the stream is reset */
	return 0;
}

/* The answer's head is complete: to the cloud as HTTP/1.1 (or not at all, body only). 0, or -1
 * when the stream is gone. */
static int head_done(struct h2s *s)
{
	struct es_stream *st = s->st;
	char *out = (char *)st->es->scratch;
	ssize_t n =
	        es_h2_head_write(&s->head, s->no_body, out, ST_MAX_HTTP_HEAD_BYTES, &s->chunked);
	es_h2_head_cleanup(&s->head);
	if (n < 0) {
		es_stream_fail(st, ST_EXT_ERR_PROTOCOL, "malformed response head from the kubelet");
		return -1;
	}
	s->head_done = true;
	/* An answer came: no resend can need the request any more. */
	st_connect_req_cleanup(&s->req);
	s->have_req = false;
	s->path = NULL;
	if (s->body_only) {
		s->chunked = false;
		return 0;
	}
	return to_cloud(s, out, (size_t)n);
}

static int on_frame_recv(nghttp2_session *sess, const nghttp2_frame *frame, void *user)
{
	struct h2c *c = user;
	if (frame->hd.type == NGHTTP2_GOAWAY) {
		/* No new streams here; the ones it did not take come back as REFUSED_STREAM. */
		c->goaway = true;
		st_dbg_ns(c->es->node, 0, "the kubelet sent GOAWAY (last stream %d, %s)",
		          (int)frame->goaway.last_stream_id,
		          nghttp2_http2_strerror(frame->goaway.error_code));
		return 0;
	}
	struct h2s *s = stream_of(sess, frame->hd.stream_id);
	if (s == NULL)
		return 0;
	if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_RESPONSE &&
	    !s->head_done) {
		if (s->head.status >= 100 && s->head.status < 200) {
			es_h2_head_cleanup(&s->head); /* interim: the final answer follows */
			return 0;
		}
		if (head_done(s) < 0)
			return 0; /* the stream is gone (its close reset it) */
	}
	if ((frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) &&
	    (frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
		s->ended = true;
	return 0;
}

static int on_data_chunk(nghttp2_session *sess, uint8_t flags, int32_t id, const uint8_t *data,
                         size_t len, void *user)
{
	(void)flags;
	struct h2c *c = user;
	nghttp2_session_consume_connection(sess, len); /* never holds up another stream */
	struct h2s *s = stream_of(sess, id);
	if (s == NULL || len == 0)
		return 0;
	if (!s->head_done || s->no_body)
		return 0;
	struct es_stream *st = s->st;
	if (s->chunked) {
		char line[ES_H2_CHUNK_START_MAX];
		size_t k = es_h2_chunk_start(line, len);
		if (to_cloud(s, line, k) < 0 || to_cloud(s, data, len) < 0 ||
		    to_cloud(s, "\r\n", 2) < 0)
			return 0; /* gone: its close reset the HTTP/2 stream */
	} else if (to_cloud(s, data, len) < 0) {
		return 0;
	}
	size_t due = es_h2_flow_received(&s->flow, len, es_stream_cloud_full(st));
	if (due)
		nghttp2_session_consume_stream(sess, id, due);
	else
		st_dbg_ns(c->es->node, st->id,
		          "HTTP/2 stream %d: credit withheld, the cloud is not taking its bytes",
		          (int)id);
	return 0;
}

static int on_stream_close(nghttp2_session *sess, int32_t id, uint32_t error_code, void *user)
{
	(void)user;
	struct h2s *s = stream_of(sess, id);
	if (s == NULL)
		return 0;
	struct es_stream *st = s->st;
	struct edgestream *es = st->es;
	s_detach(s);
	s->id = 0;
	if (error_code == NGHTTP2_NO_ERROR && s->ended) {
		if (s->chunked && to_cloud(s, "0\r\n\r\n", 5) < 0)
			return 0;
		es_stream_backend_done(st);
		return 0;
	}
	if (error_code == NGHTTP2_REFUSED_STREAM && !s->head_done && s->have_req && !s->retried) {
		/* The kubelet did not process it (GOAWAY, or over its limit): safe to send again. */
		s->retried = true;
		st_dbg_ns(es->node, st->id, "HTTP/2 stream %d refused: sending it again", (int)id);
		attach_to_some(s);
		return 0;
	}
	if (!s->head_done) {
		char why[200];
		snprintf(why, sizeof why, "kubelet %.100s:%d reset the request (%s)",
		         es->kubelet_host, es->kubelet_port, nghttp2_http2_strerror(error_code));
		es->m.backend_failures++;
		es_stream_fail(st, ST_EXT_ERR_UNREACHABLE, why);
		return 0;
	}
	/* Cut mid-answer: it ends there, as a connection closed mid-answer does. */
	st_dbg_ns(es->node, st->id, "HTTP/2 stream %d reset by the kubelet (%s)", (int)id,
	          nghttp2_http2_strerror(error_code));
	es_stream_backend_done(st);
	return 0;
}

static int new_session(struct h2c *c)
{
	nghttp2_session_callbacks *cbs;
	if (nghttp2_session_callbacks_new(&cbs) != 0)
		return -ENOMEM;
	nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
	nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
	nghttp2_option *opt;
	if (nghttp2_option_new(&opt) != 0) {
		nghttp2_session_callbacks_del(cbs);
		return -ENOMEM;
	}
	/* Credit goes back when the cloud took the bytes (es_h2_flow), not when they arrived. */
	nghttp2_option_set_no_auto_window_update(opt, 1);
	nghttp2_option_set_no_closed_streams(opt, 1); /* no priority tree of closed streams */
	int rc = nghttp2_session_client_new2(&c->sess, cbs, c, opt);
	nghttp2_option_del(opt);
	nghttp2_session_callbacks_del(cbs);
	if (rc != 0)
		return -ENOMEM;
	nghttp2_settings_entry set[] = {
	        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
	        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, ES_H2_STREAM_WINDOW},
	};
	if (nghttp2_submit_settings(c->sess, NGHTTP2_FLAG_NONE, set, 2) != 0)
		return -ENOMEM;
	/* The connection's window: large, and given back at once (on_data_chunk). */
	nghttp2_session_set_local_window_size(c->sess, NGHTTP2_FLAG_NONE, 0, 16 * 1024 * 1024);
	return 0;
}

/* ---- ALPN: h2 or not ------------------------------------------------------------------------ */

int es_kubelet_open_h1(struct es_stream *st, struct st_connect_req *req, const char *path,
                       size_t path_len);

/* The kubelet did not pick h2: every waiting request goes the HTTP/1.1 way, and so do later
 * ones (es->kubelet_h2). Frees @c. */
static void fall_back(struct h2c *c, const char *proto, size_t len)
{
	struct edgestream *es = c->es;
	if (es->kubelet_h2 >= 0)
		st_info("kubelet %s:%d answered ALPN with %.*s, not h2: its requests go over "
		        "HTTP/1.1 connections",
		        es->kubelet_host, es->kubelet_port, len ? (int)len : 6,
		        len ? proto : "(none)");
	es->kubelet_h2 = -1;
	let_go(c);
	while (c->streams) {
		struct h2s *s = c->streams;
		s_detach(s);
		struct es_stream *st = s->st;
		struct st_connect_req req = s->req;
		const char *path = s->path;
		size_t path_len = s->path_len;
		memset(&s->req, 0, sizeof s->req);
		s->have_req = false;
		st->be = NULL;
		s_free(s);
		es_kubelet_open_h1(st, &req, path, path_len);
		st_connect_req_cleanup(&req);
	}
	c_free(c);
}

/* ---- the socket --------------------------------------------------------------------------- */

/* Decrypted bytes into nghttp2. 0, or -1 when @c is gone. */
static int rx_plain(struct h2c *c)
{
	struct edgestream *es = c->es;
	for (;;) {
		ssize_t n =
		        es_tls_read(&c->tls, es->scratch + ST_MAX_HTTP_HEAD_BYTES, PLAIN_READ_MAX);
		if (n == 0)
			break;
		if (n < 0) {
			c_lost(c, n == -EPIPE ? "close_notify" : es_tls_error(&c->tls));
			return -1;
		}
		ssize_t r = nghttp2_session_mem_recv(c->sess, es->scratch + ST_MAX_HTTP_HEAD_BYTES,
		                                     (size_t)n);
		if (r < 0) {
			c_lost(c, nghttp2_strerror((int)r));
			return -1;
		}
	}
	return 0;
}

static int rx(struct h2c *c, const uint8_t *in, size_t len)
{
	struct edgestream *es = c->es;
	if (es_tls_feed(&c->tls, in, len) < 0) {
		c_lost(c, "out of memory");
		return -1;
	}
	if (c->state == H2C_HANDSHAKE) {
		int hs = es_tls_handshake(&c->tls);
		if (hs < 0 && es_tls_resumption_refused(&c->tls) && !c->resume_retried) {
			es->m.kubelet_resumption_refused++;
			if (es_tls_stop_resuming(es->kubelet_ctx))
				st_warn("kubelet %s:%d refused to resume a TLS session (%s): a "
				        "full "
				        "handshake again, and no more resumption with it",
				        es->kubelet_host, es->kubelet_port, es_tls_error(&c->tls));
			c->resume_retried = true;
			let_go(c);
			es_tls_free(&c->tls);
			dial(c); /* fails its streams (and frees @c) when it cannot */
			return -1;
		}
		if (hs < 0) {
			char why[400];
			snprintf(why, sizeof why, "kubelet %.100s:%d: %.200s", es->kubelet_host,
			         es->kubelet_port, es_tls_error(&c->tls));
			c_fail_all(c, ST_EXT_ERR_UNREACHABLE, why);
			return -1;
		}
		lws_callback_on_writable(c->wsi);
		if (hs == 0)
			return 0;
		const unsigned char *proto = NULL;
		unsigned plen = 0;
		SSL_get0_alpn_selected(c->tls.ssl, &proto, &plen);
		if (plen != 2 || memcmp(proto, "h2", 2) != 0) {
			fall_back(c, (const char *)proto, plen);
			return -1;
		}
		es->kubelet_h2 = 1;
		lws_sul_cancel(&c->sul);
		if (new_session(c) < 0) {
			c_fail_all(c, ST_EXT_ERR_INTERNAL, "out of memory");
			return -1;
		}
		c->state = H2C_OPEN;
		/* The waiting requests go; one that fails leaves the list. */
		for (struct h2s *s = c->streams, *next; s; s = next) {
			next = s->next;
			submit(s);
		}
		if (c->nstreams == 0) {
			c->was_idle = true;
			arm(c, es->cfg.kubelet_idle_timeout_ms);
		}
	}
	if (rx_plain(c) < 0)
		return -1;
	if (len < RX_BYTES)
		es_tls_trim(&c->tls); /* between bursts hold no record buffers (quiet followers) */
	if (nghttp2_session_want_write(c->sess) || es_tls_pending(&c->tls) > 0)
		lws_callback_on_writable(c->wsi);
	if (!nghttp2_session_want_read(c->sess) && !nghttp2_session_want_write(c->sess) &&
	    es_tls_pending(&c->tls) == 0) {
		c_lost(c, "the session ended (GOAWAY)");
		return -1;
	}
	return 0;
}

static int writeable(struct h2c *c)
{
	uint8_t *out = c->es->tx + LWS_PRE;
	if (c->state == H2C_OPEN) {
		while (es_tls_pending(&c->tls) < TLS_OUT_MAX) {
			const uint8_t *data;
			ssize_t n = nghttp2_session_mem_send(c->sess, &data);
			if (n < 0) {
				c_lost(c, nghttp2_strerror((int)n));
				return -1;
			}
			if (n == 0)
				break;
			if (es_tls_write(&c->tls, data, (size_t)n) < 0) {
				c_lost(c, es_tls_error(&c->tls));
				return -1;
			}
		}
	}
	size_t n = es_tls_take(&c->tls, out, ST_MAX_MESSAGE_BYTES);
	if (n > 0 && lws_write(c->wsi, out, n, LWS_WRITE_RAW) < 0)
		return -1;
	if (es_tls_pending(&c->tls) > 0 || (c->sess && nghttp2_session_want_write(c->sess)))
		lws_callback_on_writable(c->wsi);
	else if (c->state == H2C_OPEN)
		es_tls_trim(&c->tls);
	return 0;
}

static int connected(struct h2c *c, struct lws *wsi)
{
	c->wsi = wsi;
	c->state = H2C_HANDSHAKE;
	if (es_tls_start(&c->tls, c->es->kubelet_ctx, c->es->kubelet_name) < 0 ||
	    SSL_set_alpn_protos(c->tls.ssl, (const unsigned char *)"\x02h2\x08http/1.1", 12) != 0) {
		c_fail_early(c, ST_EXT_ERR_INTERNAL, "cannot start TLS");
		return -1;
	}
	arm(c, c->es->cfg.backend_handshake_timeout_ms);
	es_tls_handshake(&c->tls); /* the ClientHello */
	lws_callback_on_writable(wsi);
	return 0;
}

static int cb_h2(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                 size_t len)
{
	(void)user;
	struct h2c *c = lws_get_opaque_user_data(wsi);
	switch (reason) {
	case LWS_CALLBACK_CLIENT_CONNECTION_ERROR: {
		if (c == NULL)
			return 0;
		c->wsi = NULL;
		char why[400];
		snprintf(why, sizeof why, "kubelet %.100s:%d unreachable: %.200s",
		         c->es->kubelet_host, c->es->kubelet_port,
		         in ? (const char *)in : "connection failed");
		c_fail_early(c, ST_EXT_ERR_UNREACHABLE, why);
		return 0;
	}
	case LWS_CALLBACK_RAW_CONNECTED:
		return c ? connected(c, wsi) : -1;
	case LWS_CALLBACK_RAW_RX:
		if (c == NULL)
			return -1;
		return rx(c, in, len) < 0 ? -1 : 0;
	case LWS_CALLBACK_RAW_WRITEABLE:
		if (c == NULL)
			return -1;
		return writeable(c);
	case LWS_CALLBACK_RAW_CLOSE:
		if (c == NULL)
			return 0;
		c->wsi = NULL;
		if (c->state != H2C_OPEN) {
			char why[300];
			snprintf(why, sizeof why,
			         "kubelet %.100s:%d closed the connection during the %s",
			         c->es->kubelet_host, c->es->kubelet_port,
			         c->state == H2C_DIALING ? "connect" : "TLS handshake");
			c_fail_early(c, ST_EXT_ERR_UNREACHABLE, why);
		} else {
			c_lost(c, "the connection closed");
		}
		return 0;
	default:
		return 0;
	}
}

const struct lws_protocols es_h2_protocol = {
        .name = "es-kubelet-h2",
        .callback = cb_h2,
        .rx_buffer_size = RX_BYTES,
        .tx_packet_size = 65536,
};

/* ---- the stream ops ------------------------------------------------------------------------- */

void es_h2_op_write(struct es_stream *st)
{
	/* A GET or HEAD has no body: whatever the cloud sends is dropped (its credit goes back). */
	size_t n = st_buf_len(&st->to_backend);
	if (n)
		es_stream_sent(st, n);
}

void es_h2_op_on_writable(struct es_stream *st)
{
	struct h2s *s = st->be;
	if (s == NULL || s->c == NULL || s->c->sess == NULL || s->id <= 0)
		return;
	size_t due = es_h2_flow_drained(&s->flow);
	if (due) {
		nghttp2_session_consume_stream(s->c->sess, s->id, due);
		kick(s->c);
	}
}

void es_h2_op_close(struct es_stream *st)
{
	struct h2s *s = st->be;
	if (s == NULL)
		return;
	struct h2c *c = s->c;
	if (c && c->sess && s->id > 0) {
		/* The cloud ended it (or it failed) before the kubelet did: stop the kubelet's side
		 * of this stream only. */
		nghttp2_submit_rst_stream(c->sess, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_CANCEL);
		kick(c);
	}
	st->be = NULL;
	s_free(s);
}

int es_h2_open(struct es_stream *st, struct st_connect_req *req, const char *path, size_t path_len)
{
	struct edgestream *es = st->es;
	if (es->cfg.kubelet_http2 == ES_KUBELET_HTTP2_OFF || es->kubelet_ctx == NULL ||
	    es->kubelet_h2 < 0 || !es_h2_request_fits(req))
		return 0;
	struct h2s *s = calloc(1, sizeof *s);
	if (s == NULL) {
		es_stream_fail(st, ST_EXT_ERR_INTERNAL, "out of memory");
		return 1;
	}
	s->st = st;
	s->req = *req;
	memset(req, 0, sizeof *req); /* ours now; @path points into its storage */
	s->path = path;
	s->path_len = path_len;
	s->have_req = true;
	s->no_body = strcmp(s->req.method, "HEAD") == 0;
	s->body_only = !(es_tunnel_caps(st->t) & ST_CAP_RAW_RESPONSE) &&
	               (st->type == ST_MSG_LOGS_CONNECT || st->type == ST_MSG_METRIC_CONNECT);
	es_h2_head_init(&s->head);
	st->be = s;
	attach_to_some(s);
	return 1;
}

void es_h2_free_all(struct edgestream *es)
{
	while (es->h2conns) {
		struct h2c *c = es->h2conns;
		while (c->streams) {
			struct h2s *s = c->streams;
			s_detach(s); /* the stream stays with its relay, which frees it */
		}
		c_free(c);
	}
}
