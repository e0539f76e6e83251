/*
 * cloudstream/src/front_h2.c — an apiserver connection on the stream port that chose HTTP/2
 * (ALPN h2): an nghttp2 server session, and each of its streams as a request front (front.h).
 *
 * A stream's request head (HEADERS) is written as the HTTP/1.1 head it stands for into the
 * stream front's input and goes through front.c/request.c like any request: the same
 * authentication, authorization, routing, stream on the node's tunnel, errors, access log and
 * metrics. Its answer, queued as HTTP/1.1 bytes, becomes HEADERS and DATA through h2answer.c
 * (pure). The body waits in the stream front's output queue, bounded like an HTTP/1.1
 * connection's, and is handed to nghttp2 only as the stream's HTTP/2 window allows; each byte
 * handed over is reported delivered to the tunnel stream, whose credit is all the edge may
 * send, so a client that stops reading stops its edge stream and nothing else.
 *
 * nghttp2 is never re-entered: its callbacks only record (a stream ready, a stream closed) and
 * submit; requests start after nghttp2_session_mem_recv() returns, closed streams are freed
 * after it or after nghttp2_session_mem_send(), and the send side runs only in WRITEABLE.
 *
 * Not taken over HTTP/2: upgrades (CONNECT, extended CONNECT: exec, attach and port-forward
 * clients dial HTTP/1.1 for them) are answered 405 (an HTTP/1.1 upgrade's Connection/Upgrade
 * fields make nghttp2 reset the stream first), and request bodies 413 (no kubelet request
 * kube-apiserver sends over HTTP/2 carries one). Loop thread only.
 */
#include "front.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nghttp2/nghttp2.h>
#include <openssl/ssl.h>

#include <stream/log.h>
#include <stream/tunnelwrite.h>

/* One HTTP/2 connection's session. */
struct cs_h2conn {
	nghttp2_session *ng;
	struct cs_front *conn;    /* the connection's front */
	struct cs_front *streams; /* its stream fronts (h2r->next) */
	unsigned n_streams;
	bool goaway;           /* GOAWAY submitted (drain) */
	bool logged_malformed; /* a malformed request was logged (once per connection) */
};

/* One HTTP/2 stream's state in its stream front. */
struct cs_h2req {
	int32_t sid;
	struct cs_h2ans ans; /* the answer's HTTP/1.1 bytes → HEADERS and DATA */
	char *method;        /* :method, :path, :authority (owned; NULL until seen) */
	char *path;
	char *authority;
	size_t head_bytes;   /* of the request head so far (bounded by ST_MAX_HTTP_HEAD_BYTES) */
	size_t body_taken;   /* answer body bytes queued by the current cs__h2_queue() */
	bool ready;          /* the request is complete: start it (after mem_recv) */
	bool started;        /* it was started */
	bool too_big;        /* its head went over the limit: 431 */
	bool has_body;       /* DATA came: 413 */
	bool upgrade;        /* an Upgrade field (an HTTP/1.1 upgrade sent over HTTP/2): 405 */
	bool head_submitted; /* the answer's HEADERS were submitted */
	bool deferred;       /* the data provider waits for bytes (NGHTTP2_ERR_DEFERRED) */
	bool answer_end;     /* the answer is complete or cut: END_STREAM / RST once drained */
	bool cut;            /* ... cut short: RST_STREAM after what was queued */
	bool broken;         /* the answer's bytes did not translate */
	bool closed;         /* nghttp2 closed the stream: freed outside the session */
	struct cs_front *next, *prev; /* in the connection's streams */
};

/* ---- ALPN ------------------------------------------------------------------------------ */

/* lws 4.1.6 turns a raw TLS connection whose ALPN is h2 into its own HTTP/2 role right after
 * the handshake (tls.c lws_tls_server_conn_alpn → rops_alpn_negotiated_h2), and the raw
 * callbacks never come again. Our select callback marks the SSLs it chose h2 for, and
 * SSL_get0_alpn_selected, which lws calls through the dynamic linker (this executable's
 * definition comes first), reports no ALPN for them: lws keeps the connection raw, and the
 * client still got h2 in its ServerHello. */
static int alpn_idx = -1;

typedef void (*alpn_selected_fn)(const SSL *, const unsigned char **, unsigned int *);
static alpn_selected_fn real_alpn_selected; /* OpenSSL's */

void SSL_get0_alpn_selected(const SSL *ssl, const unsigned char **data, unsigned int *len)
{
	alpn_selected_fn real = real_alpn_selected;
	if (alpn_idx >= 0 && SSL_get_ex_data(ssl, alpn_idx) != NULL) {
		*data = NULL;
		*len = 0;
		return;
	}
	if (real == NULL) /* before cs__h2_alpn_install (a program that never installs it) */
		real = (alpn_selected_fn)dlsym(RTLD_NEXT, "SSL_get0_alpn_selected");
	if (real == NULL) {
		*data = NULL;
		*len = 0;
		return;
	}
	real(ssl, data, len);
}

static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                       const unsigned char *in, unsigned int inlen, void *arg)
{
	static const unsigned char ours[] = "\x02h2\x08http/1.1";
	(void)arg;
	unsigned char *sel = NULL;
	unsigned char sel_len = 0;
	if (SSL_select_next_proto(&sel, &sel_len, ours, sizeof ours - 1, in, inlen) !=
	    OPENSSL_NPN_NEGOTIATED)
		return SSL_TLSEXT_ERR_NOACK; /* neither offered: HTTP/1.1 without ALPN */
	if (sel_len == 2 && memcmp(sel, "h2", 2) == 0)
		SSL_set_ex_data(ssl, alpn_idx, (void *)1);
	*out = sel;
	*outlen = sel_len;
	return SSL_TLSEXT_ERR_OK;
}

void cs__h2_alpn_install(void *ssl_ctx)
{
	if (alpn_idx < 0)
		alpn_idx = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
	/* resolved at start-up, before the sandbox */
	real_alpn_selected = (alpn_selected_fn)dlsym(RTLD_NEXT, "SSL_get0_alpn_selected");
	SSL_CTX_set_alpn_select_cb(ssl_ctx, alpn_select, NULL);
}

bool cs__h2_negotiated(const struct cs_front *f)
{
	SSL *ssl = lws_get_ssl(f->wsi);
	return ssl && alpn_idx >= 0 && SSL_get_ex_data(ssl, alpn_idx) != NULL;
}

/* ---- stream fronts ------------------------------------------------------------------------ */

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
	cs_endpoint_init(&f->ep, &cs__front_endpoint_ops, srv);
	cs_relay_init(&f->rl);
	f->srv = srv;
	f->wsi = conn->wsi;
	f->ordinal = ++srv->next_ordinal;
	f->state = CS_FRONT_HEAD;
	f->verified = true;
	f->h2 = c;
	f->h2r = r;
	r->sid = sid;
	cs_h2ans_init(&r->ans, false); /* our own early answers (431, 405, 413) go through it too */
	memcpy(f->orig_dst, conn->orig_dst, sizeof f->orig_dst);
	cs__authz_share_tls(f, conn);
	/* The same room as an HTTP/1.1 connection's output: a window, or the high mark and one
	 * tunnel message for a base edge (front.c front_new). */
	st_buf_init(&f->out, (size_t)cs_tunnel_window_cap(srv) + ST_RELAY_HIGH_WATER_BYTES +
	                             ST_MAX_MESSAGE_BYTES + 4096);
	st_buf_set_watermarks(&f->out, ST_RELAY_HIGH_WATER_BYTES, ST_RELAY_LOW_WATER_BYTES);
	/* In the server's fronts (pod lookups and reviews find their requests there), not counted
	 * as a connection. */
	f->anext = srv->fronts;
	if (srv->fronts)
		srv->fronts->aprev = f;
	srv->fronts = f;
	r->next = c->streams;
	if (c->streams)
		c->streams->h2r->prev = f;
	c->streams = f;
	c->n_streams++;
	srv->m.h2_streams_total++;
	return f;
}

static void stream_free(struct cs_h2conn *c, struct cs_front *f)
{
	struct cs_server *srv = f->srv;
	struct cs_h2req *r = f->h2r;
	cs__request_cleanup(f); /* REMOVE to the edge; what it held is credited */
	cs__authz_front_free(f);
	st_buf_cleanup(&f->out); /* cs__request_cleanup reported what it held as dropped */
	free(f->in);
	if (f->aprev)
		f->aprev->anext = f->anext;
	else
		srv->fronts = f->anext;
	if (f->anext)
		f->anext->aprev = f->aprev;
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

/* Free the stream fronts whose stream nghttp2 closed (outside the session). */
static void reap(struct cs_h2conn *c)
{
	struct cs_front *next;
	for (struct cs_front *f = c->streams; f; f = next) {
		next = f->h2r->next;
		if (f->h2r->closed)
			stream_free(c, f);
	}
	/* An idle HTTP/2 connection has the idle deadline; one with streams has none. */
	if (c->n_streams == 0)
		lws_set_timeout(c->conn->wsi, PENDING_TIMEOUT_HTTP_KEEPALIVE_IDLE,
		                (int)(c->conn->srv->cfg.idle_timeout_ms / 1000));
	else
		lws_set_timeout(c->conn->wsi, NO_PENDING_TIMEOUT, 0);
}

static void wake(struct cs_h2conn *c)
{
	lws_callback_on_writable(c->conn->wsi);
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
 * (a retry, the end of a wait for the node). Outside the session. */
static void process(struct cs_h2conn *c)
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
	return 0;
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
	if (f == NULL || f->h2r->too_big)
		return 0;
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
		f->h2r->ready = true;
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
		f->h2r->ready = true;
	return 0;
}

/* nghttp2 reset a stream for a malformed request (RFC 9113 §8.1.1): fields HTTP/2 forbids
 * (Connection, Upgrade: an HTTP/1.1 upgrade sent over HTTP/2), a bad pseudo-header, a
 * Content-Length that the DATA contradict. Said once per connection. */
static int on_invalid_frame(nghttp2_session *ng, const nghttp2_frame *fr, int err, void *user)
{
	(void)ng;
	struct cs_h2conn *c = user;
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
	f->h2r->closed = true; /* freed by reap(), outside the session */
	return 0;
}

/* The answer body for nghttp2's DATA frames: what the stream front queued, as the window
 * allows; each byte taken is delivered (the edge gets its credit back). */
static ssize_t read_body(nghttp2_session *ng, int32_t sid, uint8_t *buf, size_t length,
                         uint32_t *data_flags, nghttp2_data_source *src, void *user)
{
	(void)ng;
	(void)sid;
	(void)user;
	struct cs_front *f = src->ptr;
	struct cs_h2req *r = f->h2r;
	size_t n = st_buf_read(&f->out, buf, length);
	if (n > 0)
		cs_endpoint_delivered(&f->ep, n);
	if (st_buf_len(&f->out) == 0 && r->answer_end) {
		if (r->cut)
			return n > 0 ? (ssize_t)n : NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* RST */
		*data_flags |= NGHTTP2_DATA_FLAG_EOF;
		return (ssize_t)n;
	}
	if (n == 0) {
		r->deferred = true;
		return NGHTTP2_ERR_DEFERRED;
	}
	return (ssize_t)n;
}

/* ---- the answer: HTTP/1.1 bytes → HEADERS and DATA ---------------------------------------- */

static int ans_head(void *user, int status, const struct st_http_header *h, size_t n, bool has_body)
{
	struct cs_front *f = user;
	struct cs_h2req *r = f->h2r;
	nghttp2_nv nv[ST_MAX_HTTP_HEADERS + 1];
	char st[12];
	snprintf(st, sizeof st, "%03u", (unsigned)status % 1000u);
	nv[0] = (nghttp2_nv){(uint8_t *)":status", (uint8_t *)st, 7, 3, NGHTTP2_NV_FLAG_NONE};
	for (size_t i = 0; i < n; i++)
		nv[i + 1] = (nghttp2_nv){(uint8_t *)(uintptr_t)h[i].name,
		                         (uint8_t *)(uintptr_t)h[i].value, h[i].name_len,
		                         h[i].value_len, NGHTTP2_NV_FLAG_NONE};
	nghttp2_data_provider prd = {.source = {.ptr = f}, .read_callback = read_body};
	if (nghttp2_submit_response(f->h2->ng, r->sid, nv, n + 1, has_body ? &prd : NULL) != 0)
		return -EBADMSG;
	r->head_submitted = true;
	return 0;
}

static int ans_body(void *user, const uint8_t *p, size_t n)
{
	struct cs_front *f = user;
	struct cs_h2req *r = f->h2r;
	int rc = st_buf_append(&f->out, p, n);
	if (rc < 0)
		return rc;
	r->body_taken += n;
	if (r->deferred) {
		r->deferred = false;
		nghttp2_session_resume_data(f->h2->ng, r->sid);
	}
	return 0;
}

static const struct cs_h2ans_cbs ans_cbs = {.on_head = ans_head, .on_body = ans_body};

int cs__h2_queue(struct cs_front *f, const void *p, size_t n)
{
	struct cs_h2req *r = f->h2r;
	if (r->broken || r->answer_end)
		return -EBADMSG;
	f->acc.to_client += n;
	cs_endpoint_queued(&f->ep, n);
	r->body_taken = 0;
	ssize_t used = cs_h2ans_feed(&r->ans, p, n, &ans_cbs, f);
	/* The framing (head, chunk sizes) is gone once translated: only the body waits. */
	size_t gone = n - r->body_taken;
	if (gone)
		cs_endpoint_delivered(&f->ep, gone);
	wake(f->h2);
	if (used < 0) {
		r->broken = true;
		return (int)used;
	}
	return 0;
}

void cs__h2_answer_end(struct cs_front *f, bool cut)
{
	struct cs_h2req *r = f->h2r;
	f->state = CS_FRONT_CLOSING;
	if (r->answer_end || r->closed)
		return;
	r->answer_end = true;
	r->cut = cut || r->broken || !cs_h2ans_end_ok(&r->ans);
	if (!r->head_submitted)
		nghttp2_submit_rst_stream(f->h2->ng, NGHTTP2_FLAG_NONE, r->sid,
		                          NGHTTP2_INTERNAL_ERROR);
	else if (r->deferred) {
		r->deferred = false;
		nghttp2_session_resume_data(f->h2->ng, r->sid);
	}
	wake(f->h2);
}

void cs__h2_cut(struct cs_front *f)
{
	struct cs_h2req *r = f->h2r;
	f->state = CS_FRONT_CLOSING;
	r->answer_end = true;
	r->cut = true;
	if (!r->closed)
		nghttp2_submit_rst_stream(f->h2->ng, NGHTTP2_FLAG_NONE, r->sid,
		                          NGHTTP2_INTERNAL_ERROR);
	wake(f->h2);
}

/* ---- the connection ----------------------------------------------------------------------- */

int cs__h2_start(struct cs_front *conn)
{
	struct cs_h2conn *c = calloc(1, sizeof *c);
	if (c == NULL)
		return -ENOMEM;
	nghttp2_session_callbacks *cbs;
	if (nghttp2_session_callbacks_new(&cbs) != 0) {
		free(c);
		return -ENOMEM;
	}
	nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
	nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
	nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(cbs, on_invalid_frame);
	int rc = nghttp2_session_server_new(&c->ng, cbs, c);
	nghttp2_session_callbacks_del(cbs);
	if (rc != 0) {
		free(c);
		return -ENOMEM;
	}
	nghttp2_settings_entry iv[] = {
	        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, CS_H2_MAX_STREAMS},
	        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, ST_MAX_HTTP_HEAD_BYTES},
	};
	if (nghttp2_submit_settings(c->ng, NGHTTP2_FLAG_NONE, iv, sizeof iv / sizeof iv[0]) != 0) {
		nghttp2_session_del(c->ng);
		free(c);
		return -ENOMEM;
	}
	c->conn = conn;
	conn->h2 = c;
	conn->srv->m.h2_connections_total++;
	lws_callback_on_writable(conn->wsi);
	return 0;
}

int cs__h2_rx(struct cs_front *conn, const uint8_t *p, size_t len)
{
	struct cs_h2conn *c = conn->h2;
	ssize_t n = nghttp2_session_mem_recv(c->ng, p, len);
	if (n < 0) {
		st_log(ST_LOG_INFO, NULL, 0, "HTTP/2 connection [front|%llu] closed: %s",
		       (unsigned long long)conn->ordinal, nghttp2_strerror((int)n));
		return -1;
	}
	process(c);
	reap(c);
	wake(c);
	return 0;
}

int cs__h2_writeable(struct cs_front *conn)
{
	struct cs_h2conn *c = conn->h2;
	struct cs_server *srv = conn->srv;
	if (st_lws_write_pending(conn->wsi))
		return 0; /* the last write is still going out (stream/tunnelwrite.h) */
	process(c);
	/* One batch of frames: nghttp2 pulls each stream's body as its window allows. */
	while (st_buf_len(&conn->out) < ST_CORKED_WRITE_BYTES) {
		const uint8_t *d;
		ssize_t n = nghttp2_session_mem_send(c->ng, &d);
		if (n < 0)
			return -1;
		if (n == 0)
			break;
		if (st_buf_append(&conn->out, d, (size_t)n) < 0)
			return -1;
	}
	reap(c);
	size_t n = st_buf_read(&conn->out, srv->tx + LWS_PRE, ST_CORKED_WRITE_BYTES);
	if (n > 0 && st_lws_write_corked(conn->wsi, srv->tx + LWS_PRE, n, LWS_WRITE_RAW) < 0)
		return -1;
	if (st_buf_len(&conn->out) > 0 || nghttp2_session_want_write(c->ng)) {
		lws_callback_on_writable(conn->wsi);
		return 0;
	}
	if (!nghttp2_session_want_read(c->ng)) {
		if (st_lws_write_pending(conn->wsi))
			return 0; /* the GOAWAY first */
		SSL *ssl = lws_get_ssl(conn->wsi);
		if (ssl)
			SSL_shutdown(ssl);
		return -1;
	}
	return 0;
}

void cs__h2_drain(struct cs_front *conn)
{
	struct cs_h2conn *c = conn->h2;
	if (c->goaway)
		return;
	c->goaway = true;
	nghttp2_submit_goaway(c->ng, NGHTTP2_FLAG_NONE,
	                      nghttp2_session_get_last_proc_stream_id(c->ng), NGHTTP2_NO_ERROR,
	                      NULL, 0);
	wake(c);
}

void cs__h2_free(struct cs_front *conn)
{
	struct cs_h2conn *c = conn->h2;
	while (c->streams)
		stream_free(c, c->streams);
	nghttp2_session_del(c->ng);
	free(c);
	conn->h2 = NULL;
}
