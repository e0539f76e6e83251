/*
 * cloudstream/src/front.c — the stream server on :10350: one apiserver connection (a "front")
 * as lws raw TLS glue.
 *
 * The connection reads request heads and the bytes after them into a bounded input buffer,
 * hands each head to request.c and what follows it to the request's stream, and writes what
 * the request queues toward the apiserver, one lws_write per WRITEABLE. Every byte queued or
 * written is reported to the connection's stream endpoint (tunnel.h), which keeps the budgets.
 *
 * Memory: the input buffer exists only while a head is incomplete or the stream cannot take
 * more; the output queue is bounded (flow control stops the edge, or pauses the tunnel for a
 * base-protocol edge). Loop thread only.
 */
#include "front.h"
#include "listen.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <certs/certs.h>
#include <stream/err.h>
#include <stream/log.h>
#include <stream/loop.h>
#include <stream/tunnelwrite.h>

#include "certshare.h"
#include "servecert.h"

/* The most one WRITEABLE round writes to an apiserver connection (srv->tx holds 1 MiB): 256 KiB
 * took the forwarding replica's CPU per forwarded GiB from ~0.80 to ~0.78 s and its context
 * switches down by an eighth (cloudstream/README.md, the window round); one send() still
 * (ST_CORKED_WRITE_BYTES). */
#define CS_FRONT_WRITE_BYTES ST_CORKED_WRITE_BYTES

/* Input kept while a head is incomplete or the stream is full: a whole head plus the one read
 * lws may still deliver after we pause. */
#define FRONT_IN_CAP (ST_MAX_HTTP_HEAD_BYTES + 64u * 1024u)

const char *cs__front_node(const struct cs_front *f)
{
	return f->node[0] ? f->node : NULL;
}

void cs__front_set_timeout(struct cs_front *f, enum pending_timeout reason, int secs)
{
	if (f->h2r == NULL)
		lws_set_timeout(f->wsi, reason, secs);
}

int cs__front_queue(struct cs_front *f, const void *p, size_t n)
{
	if (f->h2r)
		return cs__h2_queue(f, p, n); /* an HTTP/2 stream: translated (h2answer.h) */
	int rc = st_buf_append(&f->out, p, n);
	if (rc < 0)
		return rc;
	f->acc.to_client += n;
	cs_endpoint_queued(&f->ep, n);
	st_loop_write_soon(f->srv->loop, f->wsi); /* the answer goes in this round (loop.h) */
	return 0;
}

/* ---- input ----------------------------------------------------------------------------- */

static void in_consume(struct cs_front *f, size_t n)
{
	memmove(f->in, f->in + n, f->in_len - n);
	f->in_len -= n;
	if (f->in_len == 0) {
		free(f->in); /* idle connections hold no buffer */
		f->in = NULL;
	}
}

/* Room for @n more input bytes: the buffer taken when the first bytes come (idle connections
 * hold none). 0, -EMSGSIZE past FRONT_IN_CAP, -ENOMEM. */
static int in_reserve(struct cs_front *f, size_t n)
{
	if (n > FRONT_IN_CAP - f->in_len)
		return -EMSGSIZE;
	if (f->in == NULL) {
		f->in = malloc(FRONT_IN_CAP);
		if (f->in == NULL)
			return -ENOMEM;
	}
	return 0;
}

int cs__front_append(struct cs_front *f, const uint8_t *p, size_t n)
{
	int rc = in_reserve(f, n);
	if (rc < 0)
		return rc;
	memcpy(f->in + f->in_len, p, n);
	f->in_len += n;
	return 0;
}

int cs__front_unread(struct cs_front *f, const uint8_t *p, size_t n)
{
	int rc = in_reserve(f, n);
	if (rc < 0)
		return rc;
	memmove(f->in + n, f->in, f->in_len);
	memcpy(f->in, p, n);
	f->in_len += n;
	return 0;
}

static void update_rx(struct cs_front *f)
{
	if (f->h2r)
		return; /* a stream front: its connection reads for all its streams */
	/* Read while a head is incomplete; stop while input waits for the stream or the next
	 * request waits for this answer, and once we are closing. */
	bool pause = f->state == CS_FRONT_CLOSING || (f->state != CS_FRONT_HEAD && f->in_len > 0);
	if (pause == f->rx_paused)
		return;
	f->rx_paused = pause;
	lws_rx_flow_control(f->wsi, pause ? 0 : 1);
}

void cs__front_process(struct cs_front *f)
{
	while (f->in_len > 0) {
		if (f->state == CS_FRONT_HEAD) {
			struct st_http_request req;
			ssize_t n = st_http_parse_request(f->in, f->in_len, &req);
			if (n == 0 && f->in_len < ST_MAX_HTTP_HEAD_BYTES)
				break;
			if (n <= 0) {
				const char *msg;
				int status = cs_relay_head_error(n, &msg);
				cs__request_fail(f, status, CS_ERR_BAD_REQUEST, msg);
				break;
			}
			if (!cs__request_start(f, &req))
				break; /* waiting for the apiserver: the head stays in f->in */
			f->pod_looked_up = false;
			f->rc_since_ms = 0;
			f->fwd_refused_by = NULL;
			if (f->forwarded && f->state == CS_FRONT_WAIT &&
			    f->srv->cfg.node_reconnect_grace_ms && cs_relay_request_done(&f->rl)) {
				free(f->retry_head); /* kept for a retry (front.h) */
				f->retry_head = malloc((size_t)n);
				if (f->retry_head)
					memcpy(f->retry_head, f->in, (size_t)n);
				f->retry_len = f->retry_head ? (size_t)n : 0;
			}
			cs__authz_request_done(f);
			in_consume(f, (size_t)n); /* the request copied what it keeps */
			continue;
		}
		if (f->state != CS_FRONT_WAIT && f->state != CS_FRONT_RESPONSE)
			break;
		ssize_t used = cs__request_forward(f, f->in, f->in_len);
		if (used <= 0)
			break;
		in_consume(f, (size_t)used);
	}
	if (f->state == CS_FRONT_CLOSING && f->in_len > 0)
		in_consume(f, f->in_len); /* nothing more will be read */
	update_rx(f);
}

static int front_rx(struct cs_front *f, const uint8_t *p, size_t len)
{
	if (f->state == CS_FRONT_CLOSING)
		return 0;
	if (f->in_len == 0 && f->state != CS_FRONT_HEAD) {
		/* Relaying: straight into the stream, keeping only what does not fit. */
		ssize_t used = cs__request_forward(f, p, len);
		if (used < 0)
			return 0;
		p += used;
		len -= (size_t)used;
	}
	if (len == 0)
		return 0;
	if (cs__front_append(f, p, len) < 0) {
		cs__request_fail(f, 431, CS_ERR_BAD_REQUEST, "request head too large");
		update_rx(f);
		return 0;
	}
	cs__front_process(f);
	return 0;
}

/* ---- connection ------------------------------------------------------------------------ */

void cs__front_init(struct cs_front *f, struct cs_server *srv, struct lws *wsi)
{
	cs_endpoint_init(&f->ep, &cs__front_endpoint_ops, srv);
	cs_relay_init(&f->rl);
	f->srv = srv;
	f->wsi = wsi;
	f->ordinal = ++srv->next_ordinal;
	f->state = CS_FRONT_HEAD;
	/* Room for a whole window (flow control) or the high mark plus one tunnel message (base
	 * protocol, which pauses the tunnel above the high mark). */
	st_buf_init(&f->out, (size_t)cs_tunnel_window_cap(srv) + ST_RELAY_HIGH_WATER_BYTES +
	                             ST_MAX_MESSAGE_BYTES + 4096);
	st_buf_set_watermarks(&f->out, ST_RELAY_HIGH_WATER_BYTES, ST_RELAY_LOW_WATER_BYTES);
	/* In the server's fronts: pod lookups and reviews find their requests there. */
	f->anext = srv->fronts;
	if (srv->fronts)
		srv->fronts->aprev = f;
	srv->fronts = f;
}

void cs__front_release(struct cs_front *f)
{
	struct cs_server *srv = f->srv;
	cs__request_cleanup(f); /* first: it reports what `out` held as dropped */
	cs__authz_front_free(f);
	st_buf_cleanup(&f->out);
	free(f->in);
	if (f->aprev)
		f->aprev->anext = f->anext;
	else
		srv->fronts = f->anext;
	if (f->anext)
		f->anext->aprev = f->aprev;
}

static void front_closed(struct cs_front *f)
{
	struct cs_server *srv = f->srv;
	if (f->h2)
		cs__h2_free(f); /* its streams first */
	cs__front_release(f);
	srv->n_fronts--;
	free(f);
	cs_maybe_finish_drain(srv);
}

static int front_writeable(struct cs_front *f)
{
	struct cs_server *srv = f->srv;
	if (f->h2)
		return cs__h2_writeable(f);
	if (st_lws_write_pending(f->wsi))
		return 0; /* the last write is still going out (stream/tunnelwrite.h) */
	if (f->in_len > 0 && f->state != CS_FRONT_CLOSING)
		cs__front_process(f);
	update_rx(f);
	/* Up to one batch from several queue blocks in one TLS write: a few records per loop
	 * round instead of one, and no record cut at a block's edge. */
	size_t n = st_buf_read(&f->out, srv->tx + LWS_PRE, CS_FRONT_WRITE_BYTES);
	if (n > 0) {
		if (st_lws_write_corked(f->wsi, srv->tx + LWS_PRE, n, LWS_WRITE_RAW) < 0)
			return -1;
		cs_endpoint_delivered(&f->ep, n);
	}
	if (st_buf_len(&f->out) > 0) {
		lws_callback_on_writable(f->wsi);
		return 0;
	}
	if (f->state == CS_FRONT_CLOSING && st_lws_write_pending(f->wsi))
		return 0; /* the answer's end first, then the close_notify */
	if (f->state == CS_FRONT_CLOSING) {
		SSL *ssl = lws_get_ssl(f->wsi);
		if (ssl)
			SSL_shutdown(ssl); /* close_notify, so the apiserver reads a clean end */
		return -1;
	}
	return 0;
}

void cs_front_drain_idle(struct cs_server *srv)
{
	for (struct cs_front *f = srv->fronts; f; f = f->anext)
		if (f->h2 && f->h2r == NULL)
			cs__h2_drain(f); /* GOAWAY: its streams finish */
		else if (f->h2 == NULL && f->state == CS_FRONT_HEAD && f->in_len == 0 &&
		         f->served) {
			f->state = CS_FRONT_CLOSING;
			lws_callback_on_writable(f->wsi);
		}
}

void cs_front_pod_resolved(struct cs_server *srv, uint64_t ordinal, bool ok)
{
	for (struct cs_front *f = srv->fronts; f; f = f->anext)
		if (f->ordinal == ordinal) {
			cs__request_pod_resolved(f, ok);
			return;
		}
}

static struct cs_front *front_new(struct cs_server *srv, struct lws *wsi)
{
	struct cs_front *f = calloc(1, sizeof *f);
	if (f == NULL)
		return NULL;
	cs__front_init(f, srv, wsi);
	srv->n_fronts++;
	srv->m.fronts_total++;
	return f;
}

static int cb_front(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                    size_t len)
{
	if (reason == LWS_CALLBACK_OPENSSL_PERFORM_CLIENT_CERT_VERIFICATION)
		return !len; /* fail closed (libwebsockets-notes §1); wsi is NULL here */
	if (reason == LWS_CALLBACK_OPENSSL_LOAD_EXTRA_SERVER_VERIFY_CERTS) {
		struct lws_vhost *vh = in;
		struct cs_server *vsrv = lws_get_vhost_user(vh);
		if (vsrv->cfg.authentication_token_webhook) {
			/* Bearer tokens: a client certificate is asked for but not required (lws
			 * requires one); one that is sent must still verify (cb returns !len). */
			SSL_CTX_set_verify(user, SSL_VERIFY_PEER,
			                   SSL_CTX_get_verify_callback(user));
		}
		/* Memory per connection (README "Many quiet streams"): no record buffer kept
		 * while idle (lws sets this per SSL too; said here so it does not depend on
		 * it), and no resumption: the apiserver's Go transport keeps no session cache,
		 * so the two TLS 1.3 tickets OpenSSL would seal per handshake (a session copy
		 * and its encryption each) are never used, and a TLS 1.2 session would sit in
		 * the cache with the client's certificate for 300 s after its connection. */
		SSL_CTX_set_mode(user, SSL_MODE_RELEASE_BUFFERS);
		SSL_CTX_set_session_cache_mode(user, SSL_SESS_CACHE_OFF);
		SSL_CTX_set_num_tickets(user, 0);
		/* ... and one parsed copy of a certificate every connection presents. */
		if (vsrv->certshare || cs_certshare_new(&vsrv->certshare) == 0)
			cs_certshare_install(vsrv->certshare, user);
		cs_certs_note_ctx(vsrv, lws_get_vhost_name(vh), user);
		cs_servecert_install(vsrv, user); /* per-node serving certificates */
		return 0;
	}
	struct cs_server *srv = lws_context_user(lws_get_context(wsi));
	struct cs_front **slot = user;
	struct cs_front *f = slot ? *slot : NULL;
	switch (reason) {
	case LWS_CALLBACK_RAW_ADOPT:
		*slot = front_new(srv, wsi);
		return *slot ? 0 : -1;
	case LWS_CALLBACK_RAW_RX:
		if (f == NULL)
			return -1;
		if (!f->verified) {
			cs_stream_listener_note(srv, wsi); /* its handshake is over (listen.h) */
			if (!cs__authz_on_tls(f)) {
				srv->m.fronts_refused_tls++;
				return -1;
			}
			f->verified = true;
			cs_socket_orig_dst(lws_get_socket_fd(wsi), f->orig_dst, sizeof f->orig_dst);
			/* lws arms a 5 s timer at the handshake; ours is the idle/head timeout. */
			lws_set_timeout(wsi, PENDING_TIMEOUT_HTTP_KEEPALIVE_IDLE,
			                (int)(srv->cfg.idle_timeout_ms / 1000));
			if (cs__h2_negotiated(f) && cs__h2_start(f) < 0)
				return -1;
		}
		if (f->h2)
			return cs__h2_rx(f, in, len);
		return front_rx(f, in, len);
	case LWS_CALLBACK_RAW_WRITEABLE:
		return f ? front_writeable(f) : -1;
	case LWS_CALLBACK_RAW_CLOSE:
		st_loop_write_soon_forget(srv->loop, wsi); /* its fd number may be reused now */
		cs_stream_listener_note(srv, wsi);
		if (f) {
			front_closed(f);
			*slot = NULL;
		}
		return 0;
	case LWS_CALLBACK_WSI_DESTROY: /* died before RAW_ADOPT (inside the adoption) */
		cs_stream_listener_note(srv, wsi);
		return 0;
	default:
		return 0;
	}
}

const struct lws_protocols cs_front_protocols[2] = {
        {
                .name = "cs-stream",
                .callback = cb_front,
                .per_session_data_size = sizeof(struct cs_front *),
                .rx_buffer_size = 16384,
                .tx_packet_size = CS_FRONT_WRITE_BYTES, /* one write goes out whole */
        },
        {0}, /* terminator */
};
