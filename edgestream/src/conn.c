/*
 * edgestream/src/conn.c — backend connections (conn.h), lws glue: the raw client socket, TLS
 * over memory BIOs, the request head, the answer relayed to the stream or only followed to
 * find its end, the TCP half-close, connect and handshake deadlines. Loop thread only.
 *
 * A call into the relay that can end the stream (es_stream_to_cloud, es_stream_fail,
 * es_stream_backend_done) can free the connection with it: after one, the code here returns
 * at once without touching @c (the socket's callbacks no longer find it).
 */
#include "conn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <stream/err.h>
#include <stream/ext.h>
#include <stream/frame.h>
#include <stream/limits.h>
#include <stream/log.h>
#include <stream/loop.h>
#include <stream/tunnelwrite.h>

#include "rawsock.h"
#include "relay.h"
#include "tunnel.h"

#define RELAY_WRITE_MAX  (64u * 1024u) /* plaintext per lws_write, and per TLS read */
#define BACKEND_RX_BYTES ES_READ_BYTES /* the most lws hands us per read callback */

/* ---- life cycle ------------------------------------------------------------------------ */

static void on_deadline(lws_sorted_usec_list_t *sul);

static void arm(struct es_conn *c, uint64_t ms)
{
	lws_sul_schedule(c->es->ctx, 0, &c->sul, on_deadline, (lws_usec_t)ms * LWS_US_PER_MS);
}

static void head_free(struct es_conn *c)
{
	free(c->head);
	c->head = NULL;
	c->head_len = c->head_off = 0;
}

int es_conn_new(struct es_conn **out, struct es_stream *st, const char *host, int port,
                SSL_CTX *tls_ctx, const char *tls_name)
{
	struct es_conn *c = calloc(1, sizeof *c);
	if (c == NULL)
		return -ENOMEM;
	c->host = strdup(host);
	if (c->host == NULL) {
		free(c);
		return -ENOMEM;
	}
	c->es = st->es;
	c->st = st;
	c->port = port;
	/* The kubelet's host name: dialled at its address (resolve.h), never through lws. */
	if (st->es->kubelet_port && !st->es->kubelet_dns.literal &&
	    strcmp(host, st->es->kubelet_host) == 0)
		c->name = &st->es->kubelet_dns;
	c->tls_ctx = tls_ctx;
	c->tls_name = tls_name;
	es_body_only_init(&c->bo);
	st->conn = c;
	*out = c;
	return 0;
}

void es_conn_free(struct es_conn *c)
{
	if (c == NULL)
		return;
	lws_sul_cancel(&c->sul);
	es_name_cancel(&c->name_wait);
	es_rawsock_let_go(&c->wsi);
	es_tls_free(&c->tls);
	head_free(c);
	es_body_only_cleanup(&c->bo);
	if (c->st && c->st->conn == c)
		c->st->conn = NULL;
	free(c->host);
	free(c);
}

/* A failure of the connection before or instead of the answer: the stream fails with @code
 * and @why (counted as a backend failure when @backend). Inside the connect call the verdict
 * waits for its return (es_conn_dial), so nothing is freed under lws's feet. */
static void conn_fail(struct es_conn *c, uint64_t code, bool backend, const char *why)
{
	char reason[400];
	snprintf(reason, sizeof reason, "%s", why); /* @why may live in @c */
	if (es_rawsock_noted(c->es, c, reason))
		return;
	if (c->name && c->state == ES_CONN_DIALING) {
		/* The connect to the name's address failed (or timed out waiting for it): the
		 * next dial takes another address, or resolves again. */
		if (es_name_waiting(&c->name_wait))
			es_name_cancel(&c->name_wait);
		else
			es_name_dial_failed(c->name, c->name_gen);
	}
	if (backend)
		c->es->m.backend_failures++;
	es_stream_fail(c->st, code, reason); /* frees @c */
}

int es_conn_set_head(struct es_conn *c, const struct st_connect_req *req, const char *path,
                     size_t path_len, const char *host_header, bool keep_query, bool keep_alive)
{
	struct es_stream *st = c->st;
	bool upgrade = false;
	/* Written in the loop's scratch, then kept at its size (about 200 bytes, not the 64 KiB a
	 * head may reach). */
	ssize_t n = path_len == 0 ? -EBADMSG
	                          : es_request_head((char *)c->es->scratch, ST_MAX_HTTP_HEAD_BYTES,
	                                            req, path, path_len, host_header, keep_query,
	                                            keep_alive, &upgrade);
	uint8_t *head = n > 0 ? malloc((size_t)n) : NULL;
	if (head == NULL) {
		if (n > 0) {
			es_stream_fail(st, ST_EXT_ERR_INTERNAL, "out of memory");
			return -1;
		}
		c->es->m.streams_refused++;
		es_stream_fail(st, ST_EXT_ERR_BAD_REQUEST,
		               n == -EMSGSIZE ? "request head too large for the backend"
		                              : "request cannot be sent as HTTP/1.1");
		return -1;
	}
	memcpy(head, c->es->scratch, (size_t)n);
	head_free(c);
	c->head = head;
	c->head_len = (size_t)n;
	c->keep_alive = keep_alive && !upgrade;
	c->body_only = !(es_tunnel_caps(st->t) & ST_CAP_RAW_RESPONSE) && !upgrade &&
	               (st->type == ST_MSG_LOGS_CONNECT || st->type == ST_MSG_METRIC_CONNECT);
	return 0;
}

/* The connect itself, to @addr (an address). 0, or -1 when it failed at once (the stream was
 * failed, @c freed). */
static int connect_to(struct es_conn *c, const char *addr)
{
	struct es_stream *st = c->st;
	struct edgestream *es = c->es;
	char name[160], why[400];
	if (es_rawsock_connect(es, &c->wsi, addr, c->port, es_backend_protocol.name, c, why,
	                       sizeof why) == 0)
		return 0;
	if (why[0] == '\0')
		snprintf(why, sizeof why, "%.150s unreachable",
		         es_stream_describe(st, name, sizeof name));
	if (c->name)
		es_name_dial_failed(c->name, c->name_gen);
	es->m.backend_failures++;
	es_stream_fail(st, ST_EXT_ERR_UNREACHABLE, why);
	return -1;
}

/* The name's resolution the dial waited on is over (resolve.h). */
static void on_resolved(struct es_name_wait *w, int rc, const char *addr, uint32_t gen,
                        const char *why)
{
	struct es_conn *c = lws_container_of(w, struct es_conn, name_wait);
	if (rc == -ECANCELED)
		return; /* the instance is going: the stream ends with it */
	if (rc < 0) {
		char name[160], reason[400];
		snprintf(reason, sizeof reason, "%.150s unreachable: %.200s",
		         es_stream_describe(c->st, name, sizeof name), why);
		conn_fail(c, ST_EXT_ERR_UNREACHABLE, true, reason);
		return;
	}
	c->name_gen = gen;
	(void)connect_to(c, addr);
}

int es_conn_dial(struct es_conn *c)
{
	struct es_stream *st = c->st;
	struct edgestream *es = c->es;
	char name[160];
	st_dbg_ns(es->node, st->id, "%s → %s", st_msg_type_name(st->type),
	          es_stream_describe(st, name, sizeof name));
	c->state = ES_CONN_DIALING;
	arm(c, es->cfg.backend_dial_timeout_ms);
	if (c->name == NULL)
		return connect_to(c, c->host);
	const char *addr = NULL, *why = NULL;
	int rc = es_name_get(c->name, &c->name_wait, on_resolved, &addr, &c->name_gen, &why);
	if (rc == 0)
		return connect_to(c, addr);
	if (rc == 1)
		return 0; /* on_resolved goes on; the connect deadline runs meanwhile */
	char reason[400];
	snprintf(reason, sizeof reason, "%.150s unreachable: %.200s",
	         es_stream_describe(st, name, sizeof name), why);
	es->m.backend_failures++;
	es_stream_fail(st, ST_EXT_ERR_UNREACHABLE, reason);
	return -1;
}

int es_conn_restart(struct es_conn *c)
{
	es_name_cancel(&c->name_wait);
	es_rawsock_let_go(&c->wsi);
	lws_sul_cancel(&c->sul);
	es_tls_free(&c->tls);
	c->reused = false;
	c->paused = false;
	c->shut_wr_sent = false;
	c->head_off = 0;
	es_body_only_cleanup(&c->bo);
	es_body_only_init(&c->bo);
	return es_conn_dial(c);
}

void es_conn_adopt(struct es_conn *c, struct es_conn *idle)
{
	lws_sul_cancel(&idle->sul);
	c->wsi = idle->wsi;
	idle->wsi = NULL;
	c->tls = idle->tls;
	memset(&idle->tls, 0, sizeof idle->tls);
	es_conn_free(idle);
	lws_set_opaque_user_data(c->wsi, c);
	c->state = ES_CONN_OPEN;
	c->reused = true;
	st_loop_write_soon(c->es->loop, c->wsi); /* the request goes in this round (loop.h) */
}

int es_conn_make_idle(struct es_conn *c, uint64_t idle_ms, void (*on_idle_end)(struct es_conn *c))
{
	if (c->wsi == NULL || c->state != ES_CONN_OPEN || es_tls_pending(&c->tls) > 0)
		return -1;
	if (c->st && c->st->conn == c)
		c->st->conn = NULL;
	c->st = NULL;
	c->state = ES_CONN_IDLE;
	head_free(c);
	es_body_only_cleanup(&c->bo);
	es_body_only_init(&c->bo);
	c->keep_alive = c->body_only = c->shut_wr_sent = false;
	es_tls_trim(&c->tls);
	if (c->paused) { /* an idle connection must still see the peer close */
		c->paused = false;
		lws_rx_flow_control(c->wsi, 1);
	}
	c->on_idle_end = on_idle_end;
	arm(c, idle_ms);
	return 0;
}

/* ---- deadlines ------------------------------------------------------------------------- */

static void on_deadline(lws_sorted_usec_list_t *sul)
{
	struct es_conn *c = lws_container_of(sul, struct es_conn, sul);
	if (c->state == ES_CONN_IDLE) {
		c->on_idle_end(c); /* the pool frees it, the socket closes */
		return;
	}
	char name[160], why[256];
	snprintf(why, sizeof why, "%.150s: %s timed out",
	         es_stream_describe(c->st, name, sizeof name),
	         c->state != ES_CONN_DIALING      ? "TLS handshake"
	         : es_name_waiting(&c->name_wait) ? "resolving its name"
	                                          : "connect");
	conn_fail(c, ST_EXT_ERR_TIMEOUT, true, why);
}

/* ---- the answer ------------------------------------------------------------------------ */

/* Bytes for the cloud; the socket pauses while the stream's queue toward it is full. 0, or -1
 * when the stream (and @c) is gone. */
static int relay(struct es_conn *c, const uint8_t *p, size_t n)
{
	if (es_stream_to_cloud(c->st, p, n) < 0)
		return -1;
	if (es_stream_cloud_full(c->st) && !c->paused && c->wsi) {
		c->paused = true;
		st_dbg_ns(c->es->node, c->st->id,
		          "backend paused: the cloud is not taking its bytes");
		lws_rx_flow_control(c->wsi, 0);
	}
	return 0;
}

/*
 * Plaintext from the backend: the body only for a base-protocol LOGS/METRIC, else as is. On a
 * kept-alive connection the response's framing says when it is over. Returns 0; -1 when the
 * stream is gone (close the socket); 1 when the answer is complete and the connection went to
 * a pool (stop reading it, keep the socket).
 */
static int from_backend(struct es_conn *c, const uint8_t *p, size_t n)
{
	struct es_stream *st = c->st;
	if (c->head && c->head_off == c->head_len)
		head_free(c); /* an answer came: no retry can need the head again */
	if (!c->body_only && !c->keep_alive)
		return relay(c, p, n);
	if (!c->body_only) {
		/* Relayed as is; the framing is only followed (nothing copied). An unclear end
		 * means the connection closes at the end instead. */
		if (es_body_only_feed(&c->bo, p, n, NULL, SIZE_MAX) < 0)
			c->keep_alive = false;
		if (relay(c, p, n) < 0)
			return -1;
	} else {
		uint8_t *body = c->es->scratch + RELAY_WRITE_MAX;
		while (n > 0 && !c->bo.done) {
			size_t piece = n > RELAY_WRITE_MAX ? RELAY_WRITE_MAX : n;
			ssize_t b = es_body_only_feed(&c->bo, p, piece, body, RELAY_WRITE_MAX);
			if (b < 0) {
				char why[128];
				snprintf(why, sizeof why, "malformed response from the backend: %s",
				         st_strerror((int)b));
				conn_fail(c, ST_EXT_ERR_PROTOCOL, false, why);
				return -1;
			}
			if (b > 0 && relay(c, body, (size_t)b) < 0)
				return -1;
			p += piece;
			n -= piece;
		}
	}
	if (!c->keep_alive || !c->bo.done)
		return 0;
	/* The answer is complete. The connection serves the next request when the answer let it
	 * (not "Connection: close") and the backend keeps it; else it closes. */
	bool kept = c->bo.keep_alive && st->ops->keep && st->ops->keep(st);
	es_stream_backend_done(st); /* may free @st, and @c unless it was kept */
	return kept ? 1 : -1;
}

/* The connection ended before any of the answer came back (the head is kept until then),
 * and nothing of the cloud's bytes went: the backend may send the request again on a new
 * one. True when it did (@c may be gone: do not touch it). */
static bool retry(struct es_conn *c, enum es_retry_why why)
{
	struct es_stream *st = c->st;
	if (c->head == NULL || st->answered || st->body_sent || st->ops->retry == NULL)
		return false;
	if (why == ES_RETRY_KEPT_CLOSED && !c->reused)
		return false;
	return st->ops->retry(st, why);
}

static int rx_tls(struct es_conn *c, const uint8_t *in, size_t len)
{
	struct edgestream *es = c->es;
	if (es_tls_feed(&c->tls, in, len) < 0) {
		conn_fail(c, ST_EXT_ERR_INTERNAL, false, "out of memory");
		return -1;
	}
	if (c->state == ES_CONN_HANDSHAKE) {
		int hs = es_tls_handshake(&c->tls);
		if (hs < 0 && es_tls_resumption_refused(&c->tls) && retry(c, ES_RETRY_TLS_REFUSED))
			return -1; /* the old socket closes; the stream went on with a new one */
		if (hs < 0) {
			char name[160], why[400];
			snprintf(why, sizeof why, "%.150s: %.200s",
			         es_stream_describe(c->st, name, sizeof name),
			         es_tls_error(&c->tls));
			conn_fail(c, ST_EXT_ERR_UNREACHABLE, true, why);
			return -1;
		}
		lws_callback_on_writable(c->wsi);
		if (hs == 0)
			return 0;
		c->state = ES_CONN_OPEN;
		lws_sul_cancel(&c->sul);
	}
	for (;;) {
		ssize_t n = es_tls_read(&c->tls, es->scratch, RELAY_WRITE_MAX);
		if (n == 0)
			break;
		if (n < 0 && retry(c, ES_RETRY_KEPT_CLOSED))
			return -1; /* the old socket closes; the stream went on with a new one */
		if (n == -EPIPE) { /* close_notify: the backend finished */
			st_dbg_ns(es->node, c->st->id, "close_notify from the backend");
			es_stream_backend_done(c->st);
			return -1;
		}
		if (n < 0) {
			st_warn_ns(es->node, c->st->id, "backend: %s", es_tls_error(&c->tls));
			es_stream_backend_done(c->st);
			return -1;
		}
		int r = from_backend(c, es->scratch, (size_t)n);
		if (r < 0)
			return -1; /* gone */
		if (r > 0)         /* kept for the next request: what came after the answer stays */
			return es_tls_keep(&c->tls) < 0 ? -1 : 0;
	}
	/* Read to the end of what came. Between bursts hold no buffer (a quiet follower): a read
	 * that did not fill lws's buffer drained the socket, so the burst is over for now. Not
	 * after every read: each trim frees (and OpenSSL wipes) the buffers the next read of a
	 * bulk transfer would allocate again. */
	if (len < BACKEND_RX_BYTES)
		es_tls_trim(&c->tls);
	if (es_tls_pending(&c->tls) > 0)
		lws_callback_on_writable(c->wsi);
	return 0;
}

/* ---- toward the backend ---------------------------------------------------------------- */

/* One lws_write of whatever is due: TLS records, or plaintext (the head first, then the
 * cloud's bytes). Returns 0 or -1 (close). */
static int writeable(struct es_conn *c)
{
	struct es_stream *st = c->st;
	uint8_t *out = c->es->tx + LWS_PRE;
	bool tls = c->tls_ctx != NULL;
	size_t n = 0, took = 0;
	bool from_head = false;
	if (c->state == ES_CONN_OPEN) {
		const uint8_t *p;
		if (c->head && c->head_off < c->head_len) {
			p = c->head + c->head_off;
			took = c->head_len - c->head_off;
			from_head = true;
		} else {
			took = st_buf_peek(&st->to_backend, &p);
		}
		if (took > RELAY_WRITE_MAX)
			took = RELAY_WRITE_MAX;
		if (took && tls) {
			if (es_tls_write(&c->tls, p, took) < 0) {
				conn_fail(c, ST_EXT_ERR_UNREACHABLE, false, es_tls_error(&c->tls));
				return -1;
			}
		} else if (took) {
			memcpy(out, p, took);
			n = took;
		}
	}
	if (tls)
		n = es_tls_take(&c->tls, out, ST_MAX_MESSAGE_BYTES);
	if (took && from_head) {
		c->head_off += took;
		/* Sent: only a kept connection may still need it (a retry before any answer). */
		if (c->head_off == c->head_len && !c->reused)
			head_free(c);
	} else if (took) {
		es_stream_sent(st, took); /* the cloud's bytes reached the socket: credit back */
	}
	if (n > 0 && st_lws_write_corked(c->wsi, out, n, LWS_WRITE_RAW) < 0)
		return -1;
	if (tls && c->state == ES_CONN_OPEN && es_tls_pending(&c->tls) == 0)
		es_tls_trim(&c->tls); /* everything went: the write buffers go too */
	if ((c->head && c->head_off < c->head_len) || st_buf_len(&st->to_backend) > 0 ||
	    (tls && es_tls_pending(&c->tls) > 0)) {
		lws_callback_on_writable(c->wsi);
	} else if (st->cloud_half_closed && !c->shut_wr_sent && c->state == ES_CONN_OPEN) {
		/* The cloud sent its last byte: half-close toward the backend too. */
		c->shut_wr_sent = true;
		if (tls) {
			es_tls_close_notify(&c->tls);
			lws_callback_on_writable(c->wsi); /* the alert goes out, then SHUT_WR */
		} else {
			shutdown(lws_get_socket_fd(c->wsi), SHUT_WR);
		}
	} else if (c->shut_wr_sent && tls) {
		shutdown(lws_get_socket_fd(c->wsi), SHUT_WR);
	}
	return 0;
}

static int connected(struct es_conn *c, struct lws *wsi)
{
	c->wsi = wsi;
	if (c->tls_ctx) {
		c->state = ES_CONN_HANDSHAKE;
		if (es_tls_start(&c->tls, c->tls_ctx, c->tls_name) < 0) {
			conn_fail(c, ST_EXT_ERR_INTERNAL, false, "cannot start TLS");
			return -1;
		}
		arm(c, c->es->cfg.backend_handshake_timeout_ms);
		es_tls_handshake(&c->tls); /* produces the ClientHello */
	} else {
		c->state = ES_CONN_OPEN;
		lws_sul_cancel(&c->sul);
		/* A raw TCP stream: the cloud answers its client once it hears the dial worked. */
		if (c->st->type == ST_MSG_TCP_CONNECT)
			es_tunnel_opened(c->st->t, c->st->id);
	}
	lws_callback_on_writable(wsi);
	return 0;
}

/* The socket closed (the peer, or an error). */
static void closed(struct es_conn *c)
{
	struct es_stream *st = c->st;
	if (st->done)
		return; /* the answer ended already; the queue is on its way */
	if (c->state == ES_CONN_OPEN && retry(c, ES_RETRY_KEPT_CLOSED))
		return;
	if (c->state == ES_CONN_DIALING || c->state == ES_CONN_HANDSHAKE) {
		char name[160], why[300];
		snprintf(why, sizeof why, "%.150s closed the connection during the %s",
		         es_stream_describe(st, name, sizeof name),
		         c->state == ES_CONN_DIALING ? "connect" : "TLS handshake");
		conn_fail(c, ST_EXT_ERR_UNREACHABLE, true, why);
		return;
	}
	st_dbg_ns(c->es->node, st->id, "backend connection closed");
	es_stream_backend_done(st);
}

static int cb_backend(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                      size_t len)
{
	(void)user;
	struct es_conn *c = lws_get_opaque_user_data(wsi);
	switch (reason) {
	case LWS_CALLBACK_CLIENT_CONNECTION_ERROR: {
		if (c == NULL)
			return 0;
		c->wsi = NULL;
		char name[160], why[400];
		snprintf(why, sizeof why, "%.150s unreachable: %.200s",
		         es_stream_describe(c->st, name, sizeof name),
		         in ? (const char *)in : "connection failed");
		conn_fail(c, ST_EXT_ERR_UNREACHABLE, true, why);
		return 0;
	}
	case LWS_CALLBACK_RAW_CONNECTED:
		return c ? connected(c, wsi) : -1;
	case LWS_CALLBACK_RAW_RX:
		if (c == NULL)
			return -1;
		if (c->state == ES_CONN_IDLE) {
			/* Unasked bytes on a kept connection: a close_notify, most likely. */
			lws_set_opaque_user_data(wsi, NULL);
			c->wsi = NULL;
			c->on_idle_end(c);
			return -1;
		}
		if (c->tls_ctx)
			return rx_tls(c, in, len);
		return from_backend(c, in, len) < 0 ? -1 : 0;
	case LWS_CALLBACK_RAW_WRITEABLE:
		if (c == NULL)
			return -1;
		return c->state == ES_CONN_IDLE ? 0 : writeable(c);
	case LWS_CALLBACK_RAW_CLOSE:
		st_loop_write_soon_forget(
		        ((struct edgestream *)lws_context_user(lws_get_context(wsi)))->loop,
		        wsi); /* its fd number may be reused now */
		if (c == NULL)
			return 0;
		c->wsi = NULL;
		if (c->state == ES_CONN_IDLE)
			c->on_idle_end(c);
		else
			closed(c);
		return 0;
	default:
		return 0;
	}
}

const struct lws_protocols es_backend_protocol = {
        .name = "es-backend",
        .callback = cb_backend,
        .rx_buffer_size = BACKEND_RX_BYTES,
        .tx_packet_size = 65536,
};

/* ---- the ops every connection backend shares ------------------------------------------- */

void es_conn_op_write(struct es_stream *st)
{
	struct es_conn *c = st->conn;
	if (c && c->wsi && c->state != ES_CONN_DIALING)
		st_loop_write_soon(c->es->loop, c->wsi); /* in this round (stream/loop.h) */
}

void es_conn_op_on_writable(struct es_stream *st)
{
	struct es_conn *c = st->conn;
	if (c && c->paused && c->wsi) {
		c->paused = false;
		st_dbg_ns(c->es->node, st->id, "backend resumed");
		lws_rx_flow_control(c->wsi, 1);
	}
}

void es_conn_op_close(struct es_stream *st)
{
	es_conn_free(st->conn);
}
