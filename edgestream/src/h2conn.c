/*
 * edgestream/src/h2conn.c — kubelet requests as HTTP/2 streams (h2conn.h): lws raw socket, TLS
 * over memory BIOs with ALPN, an nghttp2 client session fed with what TLS decrypted and
 * drained into TLS when the socket is writable. Loop thread only.
 *
 * nghttp2 is never re-entered: its send side runs only in the socket's WRITEABLE callback;
 * stream ops called from inside its receive callbacks (a relay call that freed the stream)
 * only submit (RST_STREAM, WINDOW_UPDATE) and ask for WRITEABLE. The streams' side (nghttp2's
 * callbacks, the ops) is h2stream.c; what both share, h2int.h.
 */
#include "h2conn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stream/ext.h>
#include <stream/frame.h>
#include <stream/limits.h>
#include <stream/log.h>
#include <stream/loop.h>

#include "backend.h"
#include "es.h"
#include "h2int.h"
#include "h2msg.h"
#include "rawsock.h"
#include "relay.h"
#include "tls.h"
#include "tunnel.h"

#define RX_BYTES       ES_READ_BYTES /* the most lws hands us per read callback */
#define PLAIN_READ_MAX (64u * 1024u) /* plaintext per TLS read */
#define TLS_OUT_MAX    (64u * 1024u) /* ciphertext queued per WRITEABLE before sending */

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

void es__h2_arm(struct h2c *c, uint64_t ms)
{
	lws_sul_schedule(c->es->ctx, 0, &c->sul, on_deadline, (lws_usec_t)ms * LWS_US_PER_MS);
}

void es__h2_kick(struct h2c *c)
{
	if (c->wsi && c->state != H2C_DIALING)
		st_loop_write_soon(c->es->loop, c->wsi); /* in this round (stream/loop.h) */
}

/* ---- the connection ends ------------------------------------------------------------------ */

static void c_free(struct h2c *c)
{
	lws_sul_cancel(&c->sul);
	lws_sul_cancel(&c->sul_flow);
	es_name_cancel(&c->name_wait);
	es_rawsock_let_go(&c->wsi);
	while (c->streams)
		es__h2_detach(c->streams); /* none should be left: the callers ended them */
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
	if (c->state == H2C_DIALING) {
		/* The connect to the kubelet's address failed (or timed out waiting for it): the
		 * next dial takes another address, or resolves its name again (resolve.h). */
		if (es_name_waiting(&c->name_wait))
			es_name_cancel(&c->name_wait);
		else
			es_name_dial_failed(&es->kubelet_dns, c->name_gen);
	}
	es_rawsock_let_go(&c->wsi);
	while (c->streams) {
		struct h2s *s = c->streams;
		es__h2_detach(s);
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
	es_rawsock_let_go(&c->wsi);
	c->goaway = true;
	bool raced = c->was_idle;
	while (c->streams) {
		struct h2s *s = c->streams;
		es__h2_detach(s);
		s->id = 0;
		if (!s->head_done && raced && s->have_req && !s->retried) {
			s->retried = true;
			if (es__h2_place(s) < 0)
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
uint32_t es__h2_max_streams(const struct h2c *c)
{
	return c->settled ? nghttp2_session_get_remote_settings(
	                            c->sess, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS)
	                  : PENDING_STREAMS;
}

int es__h2_place(struct h2s *s)
{
	struct edgestream *es = s->st->es;
	struct h2c *c;
	for (c = es->h2conns; c; c = c->next) {
		if (c->goaway || (c->wsi == NULL && !es_name_waiting(&c->name_wait)))
			continue;
		if (c->nstreams < es__h2_max_streams(c))
			break;
	}
	if (c) {
		es__h2_attach(s, c);
		return c->settled ? es__h2_submit(s) : 0;
	}
	c = calloc(1, sizeof *c);
	if (c == NULL) {
		es_stream_fail(s->st, ST_EXT_ERR_INTERNAL, "out of memory");
		return -1;
	}
	c->es = es;
	c_link(c);
	es__h2_attach(s, c);
	return dial(c);
}

/* The connect itself, to @addr (the kubelet's address). 0, or -1 when it failed (every
 * stream on @c failed, @c freed). */
static int connect_to(struct h2c *c, const char *addr)
{
	struct edgestream *es = c->es;
	char why[400];
	if (es_rawsock_connect(es, &c->wsi, addr, es->kubelet_port, es_h2_protocol.name, c, why,
	                       sizeof why) == 0)
		return 0;
	if (why[0] == '\0')
		snprintf(why, sizeof why, "kubelet %.100s:%d unreachable", es->kubelet_host,
		         es->kubelet_port);
	c_fail_all(c, ST_EXT_ERR_UNREACHABLE, why);
	return -1;
}

/* The kubelet's name resolved (or not) while @c waited (resolve.h). */
static void on_resolved(struct es_name_wait *w, int rc, const char *addr, uint32_t gen,
                        const char *why)
{
	struct h2c *c = lws_container_of(w, struct h2c, name_wait);
	if (rc == -ECANCELED)
		return; /* the instance is going */
	if (rc < 0) {
		char reason[400];
		snprintf(reason, sizeof reason, "kubelet %.100s:%d unreachable: %.200s",
		         c->es->kubelet_host, c->es->kubelet_port, why);
		c_fail_all(c, ST_EXT_ERR_UNREACHABLE, reason);
		return;
	}
	c->name_gen = gen;
	(void)connect_to(c, addr);
}

static int dial(struct h2c *c)
{
	struct edgestream *es = c->es;
	c->state = H2C_DIALING;
	es__h2_arm(c, es->cfg.backend_dial_timeout_ms);
	const char *addr = NULL, *why = NULL;
	int rc = es_name_get(&es->kubelet_dns, &c->name_wait, on_resolved, &addr, &c->name_gen,
	                     &why);
	if (rc == 0)
		return connect_to(c, addr);
	if (rc == 1)
		return 0; /* on_resolved goes on; the connect deadline runs meanwhile */
	char reason[400];
	snprintf(reason, sizeof reason, "kubelet %.100s:%d unreachable: %.200s", es->kubelet_host,
	         es->kubelet_port, why);
	c_fail_all(c, ST_EXT_ERR_UNREACHABLE, reason);
	return -1;
}

/* A failure before the connection opened (inside the connect call only noted). */
static void c_fail_early(struct h2c *c, uint64_t code, const char *why)
{
	if (!es_rawsock_noted(c->es, c, why))
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
	         es->kubelet_port,
	         c->state != H2C_DIALING          ? "TLS handshake"
	         : es_name_waiting(&c->name_wait) ? "resolving its name"
	                                          : "connect");
	c_fail_all(c, ST_EXT_ERR_TIMEOUT, why);
}

/* ---- ALPN: h2 or not ------------------------------------------------------------------------ */

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
	es_rawsock_let_go(&c->wsi);
	while (c->streams) {
		struct h2s *s = c->streams;
		es__h2_detach(s);
		struct es_stream *st = s->st;
		struct st_connect_req req = s->req;
		const char *path = s->path;
		size_t path_len = s->path_len;
		memset(&s->req, 0, sizeof s->req);
		s->have_req = false;
		st->be = NULL;
		es__h2_stream_free(s);
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
			es_rawsock_let_go(&c->wsi);
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
		if (es__h2_new_session(c) < 0) {
			c_fail_all(c, ST_EXT_ERR_INTERNAL, "out of memory");
			return -1;
		}
		c->state = H2C_OPEN;
		/* The waiting requests go once the kubelet's SETTINGS say how many may
		 * (es__h2_settled). */
		if (c->nstreams == 0) {
			c->was_idle = true;
			es__h2_arm(c, es->cfg.kubelet_idle_timeout_ms);
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
	es__h2_arm(c, c->es->cfg.backend_handshake_timeout_ms);
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
		st_loop_write_soon_forget(
		        ((struct edgestream *)lws_context_user(lws_get_context(wsi)))->loop,
		        wsi); /* its fd number may be reused now */
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

void es_h2_free_all(struct edgestream *es)
{
	while (es->h2conns) {
		struct h2c *c = es->h2conns;
		while (c->streams) {
			struct h2s *s = c->streams;
			es__h2_detach(s); /* the stream stays with its relay, which frees it */
		}
		c_free(c);
	}
}
