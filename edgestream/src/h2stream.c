/*
 * edgestream/src/h2stream.c — a kubelet request as an HTTP/2 stream (h2conn.h): its place on a
 * connection, the request submitted, nghttp2's callbacks turning the answer into the HTTP/1.1
 * bytes for the cloud (h2msg.h), per-stream credit following the cloud, every way a stream
 * ends, and the kubelet backend's ops for it. Loop thread only.
 *
 * A relay call (es_stream_to_cloud, _fail, _backend_done) can free the stream from inside a
 * callback: its close op resets the HTTP/2 stream and clears nghttp2's pointer to it, so the
 * callbacks that follow find nothing; the connection is never freed from here.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stream/ext.h>
#include <stream/frame.h>
#include <stream/limits.h>
#include <stream/log.h>

#include "backend.h"
#include "es.h"
#include "h2conn.h"
#include "h2int.h"
#include "h2msg.h"
#include "relay.h"
#include "tunnel.h"

/* ---- streams on a connection -------------------------------------------------------------- */

void es__h2_attach(struct h2s *s, struct h2c *c)
{
	s->c = c;
	s->next = c->streams;
	s->prev = NULL;
	if (c->streams)
		c->streams->prev = s;
	c->streams = s;
	c->nstreams++;
	c->grown += s->flow.window - ES_H2_STREAM_WINDOW;
	if (c->state == H2C_OPEN)
		lws_sul_cancel(&c->sul); /* no idle deadline while it serves */
}

void es__h2_detach(struct h2s *s)
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
	c->grown -= s->flow.window - ES_H2_STREAM_WINDOW;
	if (c->sess && s->id > 0)
		nghttp2_session_set_stream_user_data(c->sess, s->id, NULL);
	if (c->nstreams == 0 && c->state == H2C_OPEN) {
		/* Idle: kept for the next request, closed after --kubelet-idle-timeout (or at once
		 * when no more may ride it). */
		c->was_idle = true;
		es__h2_arm(c, c->goaway ? 0 : c->es->cfg.kubelet_idle_timeout_ms);
	}
}

void es__h2_stream_free(struct h2s *s)
{
	es__h2_detach(s);
	s->st->es->h2_window_grown_now -= s->flow.window - ES_H2_STREAM_WINDOW;
	s->st->es->h2_window_reserved_now -= s->reserved; /* the relay gives it back */
	st_connect_req_cleanup(&s->req);
	es_h2_head_cleanup(&s->head);
	free(s);
}

/* ---- submitting -------------------------------------------------------------------------- */

/* Sends @s's request on its (open) connection. 0, or -1 when @s's stream was failed. */
int es__h2_submit(struct h2s *s)
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
	es__h2_kick(c);
	return 0;
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
	if (frame->hd.type == NGHTTP2_SETTINGS && !(frame->hd.flags & NGHTTP2_FLAG_ACK) &&
	    !c->settled) {
		/* The kubelet's first SETTINGS: the requests that waited for the connection go, as
		 * many as it allows; the others find room elsewhere (a new connection at worst)
		 * rather than queue behind streams that may never end (follows). */
		c->settled = true;
		uint32_t max = es__h2_max_streams(c), sent = 0;
		for (struct h2s *w = c->streams, *next; w; w = next) {
			next = w->next;
			if (w->id > 0)
				continue;
			if (sent < max) {
				sent++;
				es__h2_submit(w); /* one that fails leaves the list */
			} else {
				es__h2_detach(w);
				es__h2_place(w);
			}
		}
		return 0;
	}
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

/*
 * The connection's window is kept at least what its streams may all have in flight together
 * (their windows), so no stream's bytes wait for another's credit; it only grows.
 */
static void conn_window_fits(struct h2c *c)
{
	uint64_t need = (uint64_t)c->nstreams * ES_H2_STREAM_WINDOW + c->grown;
	if (need <= c->conn_window || need > INT32_MAX)
		return;
	if (nghttp2_session_set_local_window_size(c->sess, NGHTTP2_FLAG_NONE, 0, (int32_t)need) ==
	    0)
		c->conn_window = need;
}

/* A bulk stream (es_h2_flow_grow): its larger window charged to the budget, the connection's
 * window widened to match, then offered to the kubelet (WINDOW_UPDATE). */
static void grow(struct h2s *s)
{
	struct h2c *c = s->c;
	struct es_stream *st = s->st;
	struct edgestream *es = st->es;
	size_t old = s->flow.window;
	size_t next = es_h2_flow_grow(&s->flow, st_budget_tight(&es->budget));
	if (next == old || c == NULL)
		return;
	size_t extra = es_h2_flow_grow_extra(&s->flow, next, s->chunked);
	if (extra > 0 && es_stream_grow_to_cloud(st, extra) < 0)
		return; /* no room: it stays as it is, and may try again after another window */
	s->reserved += extra;
	es->h2_window_reserved_now += extra;
	c->grown += next - old;
	conn_window_fits(c);
	if (nghttp2_session_set_local_window_size(c->sess, NGHTTP2_FLAG_NONE, s->id,
	                                          (int32_t)next) != 0) {
		c->grown -= next - old; /* the reservation stays charged until it shrinks */
		return;
	}
	es_h2_flow_grown(&s->flow, next);
	es->h2_windows_grown++;
	es->h2_window_grown_now += next - old;
	st_dbg_ns(es->node, st->id, "HTTP/2 stream %d: a bulk stream, its window %zu KiB",
	          (int)s->id, next / 1024);
	es__h2_flow_arm(c);
	es__h2_kick(c);
}

/*
 * A period of a grown stream (es_h2_flow_period_end): a stream no longer bulk gets a smaller
 * window (nghttp2 sends no WINDOW_UPDATE past it), and the queue's cap and reservation follow
 * what the kubelet may still send (es_h2_flow_release). True while something is still grown.
 */
static bool flow_period(struct h2s *s)
{
	struct h2c *c = s->c;
	struct es_stream *st = s->st;
	struct edgestream *es = st->es;
	if (s->id <= 0 || c->sess == NULL ||
	    (s->flow.window <= ES_H2_STREAM_WINDOW && s->flow.capw <= ES_H2_STREAM_WINDOW))
		return false;
	bool silent;
	size_t old = s->flow.window;
	size_t next = es_h2_flow_period_end(&s->flow, &silent);
	if (next < old && nghttp2_session_set_local_window_size(c->sess, NGHTTP2_FLAG_NONE, s->id,
	                                                        (int32_t)next) == 0) {
		es_h2_flow_grown(&s->flow, next);
		c->grown -= old - next;
		es->h2_window_grown_now -= old - next;
		es->h2_windows_shrunk++;
		st_dbg_ns(es->node, st->id, "HTTP/2 stream %d: no longer bulk, its window %zu KiB",
		          (int)s->id, next / 1024);
		es__h2_kick(c);
	}
	int32_t credit = nghttp2_session_get_stream_local_window_size(c->sess, s->id);
	if (credit >= 0) {
		struct es_h2_flow_keep k =
		        es_h2_flow_release(&s->flow, (size_t)credit,
		                           silent && st_buf_len(&st->to_cloud) == 0, s->chunked);
		if ((k.capw != s->flow.capw || k.held != s->flow.held) &&
		    es_stream_shrink_to_cloud(st, k.cap_extra, k.charged_extra) == 0) {
			es_h2_flow_released(&s->flow, &k);
			uint64_t now = st->to_cloud_grown_charged;
			es->h2_window_reserved_now -= s->reserved - now;
			s->reserved = now;
		}
	}
	return s->flow.window > ES_H2_STREAM_WINDOW || s->flow.capw > ES_H2_STREAM_WINDOW;
}

static void on_flow_period(lws_sorted_usec_list_t *sul)
{
	struct h2c *c = lws_container_of(sul, struct h2c, sul_flow);
	c->flow_armed = false;
	bool again = false;
	for (struct h2s *s = c->streams; s; s = s->next)
		again |= flow_period(s);
	if (again)
		es__h2_flow_arm(c);
}

void es__h2_flow_arm(struct h2c *c)
{
	if (c->flow_armed)
		return;
	c->flow_armed = true;
	lws_sul_schedule(c->es->ctx, 0, &c->sul_flow, on_flow_period,
	                 (lws_usec_t)ES_H2_FLOW_PERIOD_MS * LWS_US_PER_MS);
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
	size_t again = es_h2_flow_touch(&s->flow, s->chunked);
	if (again) { /* its old credit, released while silent: charged again first */
		es_stream_recharge_grown(st, again);
		uint64_t now = st->to_cloud_grown_charged;
		st->es->h2_window_reserved_now += now - s->reserved;
		s->reserved = now;
	}
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
	if (due) {
		nghttp2_session_consume_stream(sess, id, due);
		grow(s);
	} else
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
	es__h2_detach(s);
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
		es__h2_place(s);
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

int es__h2_new_session(struct h2c *c)
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
	/* The connection's window: large, and given back at once (on_data_chunk); wider when
	 * its streams' windows grow past it (conn_window_fits). */
	c->conn_window = 16u * 1024u * 1024u;
	nghttp2_session_set_local_window_size(c->sess, NGHTTP2_FLAG_NONE, 0,
	                                      (int32_t)c->conn_window);
	return 0;
}

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
		es__h2_kick(s->c);
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
		es__h2_kick(c);
	}
	st->be = NULL;
	es__h2_stream_free(s);
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
	es_h2_flow_init(&s->flow);
	st->be = s;
	es__h2_place(s);
	return 1;
}
