/*
 * cloudstream/src/front_h2_stream.c — the streams of an HTTP/2 connection on the stream port
 * (front_h2.c has the connection), each a request front (front.h): a "stream front".
 *
 * A stream's request head (HEADERS) is written as the HTTP/1.1 head it stands for into the
 * stream front's input and goes through front.c/request.c like any request: the same
 * authentication, authorization, routing, stream on the node's tunnel, errors, access log and
 * metrics. Its answer becomes HEADERS and DATA in front_h2_answer.c.
 *
 * nghttp2's callbacks here only record (a stream ready, a stream closed) and submit; requests
 * start in cs__h2s_process(), after nghttp2_session_mem_recv() returned.
 *
 * Not taken over HTTP/2: upgrades (CONNECT, extended CONNECT: exec, attach and port-forward
 * clients dial HTTP/1.1 for them) are answered 405 (an HTTP/1.1 upgrade's Connection/Upgrade
 * fields make nghttp2 reset the stream first), and request bodies 413 (no kubelet request
 * kube-apiserver sends over HTTP/2 carries one). A request that is not complete (no
 * END_STREAM) within --idle-timeout of its HEADERS is answered 408. Loop thread only.
 */
#include "front_h2_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stream/log.h>

static struct cs_front *stream_new(struct cs_h2conn *c, int32_t sid)
{
	struct cs_front *conn = c->conn;
	struct cs_server *srv = conn->srv;
	struct cs_front *f = calloc(1, sizeof *f);
	struct cs_h2req *r = calloc(1, sizeof *r);
	if (f == NULL || r == NULL) {
		free(f);
		free(r);
		return NULL;
	}
	cs__front_init(f, srv, conn->wsi); /* the same room as an HTTP/1.1 connection's */
	f->verified = true;
	f->h2 = c;
	f->h2r = r;
	r->sid = sid;
	cs_h2ans_init(&r->ans, false); /* our own early answers (431, 405, 413) go through it too */
	memcpy(f->orig_dst, conn->orig_dst, sizeof f->orig_dst);
	cs__authz_share_tls(f, conn);
	/* not counted as a connection */
	r->next = c->streams;
	if (c->streams)
		c->streams->h2r->prev = f;
	c->streams = f;
	c->n_streams++;
	srv->m.h2_streams_total++;
	return f;
}

void cs__h2s_free(struct cs_h2conn *c, struct cs_front *f)
{
	struct cs_h2req *r = f->h2r;
	cs__h2_head_end(c, f);
	cs__front_release(f); /* REMOVE to the edge; what it held is credited */
	if (r->prev)
		r->prev->h2r->next = r->next;
	else
		c->streams = r->next;
	if (r->next)
		r->next->h2r->prev = r->prev;
	c->n_streams--;
	cs_h2ans_cleanup(&r->ans);
	free(r->method);
	free(r->path);
	free(r->authority);
	free(r);
	free(f);
}

/* The HTTP/1.1 head the stream's HEADERS stand for, in the stream front's input, and the
 * request started as on an HTTP/1.1 connection. */
static void stream_start(struct cs_front *f)
{
	struct cs_h2req *r = f->h2r;
	r->started = true;
	if (r->too_big) {
		cs__request_fail(f, 431, CS_ERR_BAD_REQUEST, "request head too large");
		return;
	}
	if ((r->method && strcmp(r->method, "CONNECT") == 0) || r->upgrade) {
		cs__request_fail(f, 405, CS_ERR_BAD_REQUEST,
		                 "upgrade requests (exec, attach, port-forward) are taken over "
		                 "HTTP/1.1 only");
		return;
	}
	if (r->has_body) {
		cs__request_fail(f, 413, CS_ERR_BAD_REQUEST,
		                 "request bodies are not taken over HTTP/2: use HTTP/1.1");
		return;
	}
	if (r->method == NULL || r->path == NULL) {
		cs__request_fail(f, 400, CS_ERR_BAD_REQUEST, "malformed HTTP/2 request");
		return;
	}
	char line[ST_MAX_HTTP_HEAD_BYTES];
	int n = snprintf(line, sizeof line, "%s %s HTTP/1.1\r\n%s%s%s", r->method, r->path,
	                 r->authority ? "Host: " : "", r->authority ? r->authority : "",
	                 r->authority ? "\r\n" : "");
	if (n < 0 || (size_t)n >= sizeof line ||
	    cs__front_unread(f, (uint8_t *)line, (size_t)n) < 0 ||
	    cs__front_append(f, (const uint8_t *)"\r\n", 2) < 0) {
		cs__request_fail(f, 431, CS_ERR_BAD_REQUEST, "request head too large");
		return;
	}
	cs_h2ans_init(&r->ans, strcmp(r->method, "HEAD") == 0);
	cs__front_process(f);
}

/* Start the requests that became complete, and go on with those whose kept head waits
 * (a retry, the end of a wait for the node). */
void cs__h2s_process(struct cs_h2conn *c)
{
	for (struct cs_front *f = c->streams; f; f = f->h2r->next) {
		struct cs_h2req *r = f->h2r;
		if (r->closed)
			continue;
		if (r->ready && !r->started)
			stream_start(f);
		else if (r->started && f->state == CS_FRONT_HEAD && f->in_len > 0)
			cs__front_process(f);
	}
}

/* ---- nghttp2's callbacks (record and submit only) ---------------------------------------- */

static struct cs_front *stream_of(nghttp2_session *ng, int32_t sid)
{
	return nghttp2_session_get_stream_user_data(ng, sid);
}

static int on_begin_headers(nghttp2_session *ng, const nghttp2_frame *fr, void *user)
{
	struct cs_h2conn *c = user;
	if (fr->hd.type != NGHTTP2_HEADERS || fr->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	struct cs_server *srv = c->conn->srv;
	struct cs_front *f = NULL;
	if (c->n_streams < CS_H2_MAX_STREAMS && !c->goaway)
		f = stream_new(c, fr->hd.stream_id);
	if (f == NULL) {
		srv->m.h2_streams_refused++;
		nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, fr->hd.stream_id,
		                          NGHTTP2_REFUSED_STREAM);
		return 0;
	}
	nghttp2_session_set_stream_user_data(ng, fr->hd.stream_id, f);
	cs__h2_head_begin(c, f); /* its request is late after --idle-timeout */
	return 0;
}

/* The stream's request is complete (END_STREAM), or has a body (413): it starts after
 * mem_recv, and has no head deadline any more. */
static void stream_ready(struct cs_front *f)
{
	f->h2r->ready = true;
	cs__h2_head_end(f->h2, f);
}

static char *dup_view(const uint8_t *p, size_t n)
{
	char *s = malloc(n + 1);
	if (s) {
		memcpy(s, p, n);
		s[n] = '\0';
	}
	return s;
}

static int on_header(nghttp2_session *ng, const nghttp2_frame *fr, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *user)
{
	(void)flags;
	(void)user;
	if (fr->hd.type != NGHTTP2_HEADERS || fr->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0; /* trailers: ignored */
	struct cs_front *f = stream_of(ng, fr->hd.stream_id);
	if (f == NULL || f->h2r->too_big || f->h2r->started)
		return 0; /* refused, over the limit, or answered 408 already */
	struct cs_h2req *r = f->h2r;
	r->head_bytes += namelen + valuelen + 4;
	if (r->head_bytes > ST_MAX_HTTP_HEAD_BYTES - 1024) {
		r->too_big = true;
		return 0;
	}
	char **pseudo = NULL;
	if (namelen == 7 && memcmp(name, ":method", 7) == 0)
		pseudo = &r->method;
	else if (namelen == 5 && memcmp(name, ":path", 5) == 0)
		pseudo = &r->path;
	else if (namelen == 10 && memcmp(name, ":authority", 10) == 0)
		pseudo = &r->authority;
	if (pseudo) {
		free(*pseudo);
		*pseudo = dup_view(value, valuelen);
		if (*pseudo == NULL)
			return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
		return 0;
	}
	if (namelen > 0 && name[0] == ':')
		return 0; /* :scheme */
	if (namelen == 4 && memcmp(name, "host", 4) == 0 && r->authority)
		return 0; /* :authority is the Host (RFC 9113 §8.3.1) */
	if (namelen == 7 && memcmp(name, "upgrade", 7) == 0)
		r->upgrade =
		        true; /* nghttp2 lets it through; the kubelet would see half an upgrade */
	if (cs__front_append(f, name, namelen) < 0 ||
	    cs__front_append(f, (const uint8_t *)": ", 2) < 0 ||
	    cs__front_append(f, value, valuelen) < 0 ||
	    cs__front_append(f, (const uint8_t *)"\r\n", 2) < 0)
		r->too_big = true;
	return 0;
}

static int on_data_chunk(nghttp2_session *ng, uint8_t flags, int32_t sid, const uint8_t *data,
                         size_t len, void *user)
{
	(void)flags;
	(void)data;
	(void)user;
	struct cs_front *f = stream_of(ng, sid);
	if (f && len > 0 && !f->h2r->started) {
		f->h2r->has_body = true;
		stream_ready(f);
	}
	return 0;
}

static int on_frame_recv(nghttp2_session *ng, const nghttp2_frame *fr, void *user)
{
	(void)user;
	if (fr->hd.type != NGHTTP2_HEADERS && fr->hd.type != NGHTTP2_DATA)
		return 0;
	struct cs_front *f = stream_of(ng, fr->hd.stream_id);
	if (f && (fr->hd.flags & NGHTTP2_FLAG_END_STREAM))
		stream_ready(f);
	return 0;
}

/* nghttp2 reset a stream for a malformed request (RFC 9113 §8.1.1): fields HTTP/2 forbids
 * (Connection, Upgrade: an HTTP/1.1 upgrade sent over HTTP/2), a bad pseudo-header, a
 * Content-Length that the DATA contradict. Said once per connection. */
static int on_invalid_frame(nghttp2_session *ng, const nghttp2_frame *fr, int err, void *user)
{
	(void)ng;
	struct cs_h2conn *c = user;
	if (err == NGHTTP2_ERR_REFUSED_STREAM) {
		/* nghttp2 refused it itself: over the SETTINGS_MAX_CONCURRENT_STREAMS it
		 * advertised (before on_begin_headers), or after our GOAWAY. */
		c->conn->srv->m.h2_streams_refused++;
		return 0;
	}
	c->conn->srv->m.request_errors[CS_ERR_BAD_REQUEST]++;
	if (!c->logged_malformed) {
		c->logged_malformed = true;
		st_log(ST_LOG_WARN, NULL, 0,
		       "HTTP/2 connection [front|%llu]: stream %d reset, a malformed request (%s; "
		       "an "
		       "upgrade needs HTTP/1.1); further ones on this connection are only counted",
		       (unsigned long long)c->conn->ordinal, (int)fr->hd.stream_id,
		       nghttp2_strerror(err));
	}
	return 0;
}

static int on_stream_close(nghttp2_session *ng, int32_t sid, uint32_t error_code, void *user)
{
	(void)user;
	struct cs_front *f = stream_of(ng, sid);
	if (f == NULL)
		return 0;
	if (error_code != NGHTTP2_NO_ERROR && !f->h2r->answer_end)
		st_log(ST_LOG_DEBUG, cs__front_node(f), f->ep.sid, "HTTP/2 stream %d reset: %s",
		       (int)sid, nghttp2_http2_strerror(error_code));
	f->h2r->closed = true; /* freed outside the session (front_h2.c reap) */
	return 0;
}

void cs__h2s_late(struct cs_front *f)
{
	struct cs_h2req *r = f->h2r;
	if (r->started || r->closed)
		return;
	r->started = true; /* answered here: an END_STREAM that comes later starts nothing */
	cs__request_fail(f, 408, CS_ERR_BAD_REQUEST,
	                 "the HTTP/2 request was not complete (no END_STREAM) within "
	                 "--idle-timeout of its HEADERS");
}

void cs__h2s_callbacks(nghttp2_session_callbacks *cbs)
{
	nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
	nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
	nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(cbs, on_invalid_frame);
}
