/*
 * edgestream/src/conn.h — a backend connection: the socket side of the relay, for the
 * backends that talk to a server (kubelet, local port, CRI stream).
 *
 * A plain lws raw client socket; TLS, when asked, runs over memory BIOs (tls.h), because lws
 * 4.1.6 cannot make raw TLS client connections. The HTTP request head goes first (kept apart
 * from the cloud's bytes, sized to the head and freed once it went and no retry can need it),
 * then the stream's to_backend queue; what comes back goes to the stream (relay.h), as is, or
 * the body only for a base-protocol cloud's logs and metrics. When the connection may serve
 * another request, the response's framing is followed (answer.h) to find where it ends.
 *
 * Ownership (STYLE B5.5): a connection serving a stream belongs to it (st->conn, c->st); it
 * is freed with the stream (es_conn_free, from the backend's close) or handed to an idle pool
 * (the kubelet's) in between requests: then c->st is NULL, c->state ES_CONN_IDLE, and it holds
 * no head, no framing state and no TLS buffers. The lws wsi points back at the connection
 * (opaque user data) until the connection lets it go; lws frees the wsi, never us.
 * Loop thread only.
 */
#ifndef EDGESTREAM_CONN_H
#define EDGESTREAM_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libwebsockets.h>
#include <openssl/ssl.h>

#include <stream/connect.h>

#include "answer.h"
#include "es.h"
#include "tls.h"

struct es_stream;

enum es_conn_state {
	ES_CONN_DIALING = 0, /* TCP connect under way; the connect deadline runs */
	ES_CONN_HANDSHAKE,   /* TLS handshake under way; the handshake deadline runs */
	ES_CONN_OPEN,        /* serving c->st: bytes flow both ways */
	ES_CONN_IDLE,        /* in a pool: no stream, no head, no buffers; the idle timer runs */
};

struct es_conn {
	struct edgestream *es;
	struct es_stream *st; /* the stream it serves; NULL while idle */
	struct lws *wsi;      /* NULL until the connect is under way, and once closed */
	enum es_conn_state state;
	char *host; /* where it dials, an exact copy: an address, or the kubelet's name */
	int port;
	/* The kubelet's host name (es->kubelet_dns) when host is one: the connect goes to its
	 * address, resolved on a worker (resolve.h); NULL: host is an address. */
	struct es_name *name;
	struct es_name_wait name_wait; /* attached while the dial waits for the address */
	uint32_t name_gen;             /* the answer dialled (es_name_dial_failed's ticket) */
	SSL_CTX *tls_ctx;              /* NULL: plain TCP (borrowed, outlives the connection) */
	const char *tls_name;          /* the name the peer's certificate must carry (borrowed) */
	struct es_tls tls;             /* while tls_ctx and connected */
	uint8_t *head; /* the request head, exactly sized; NULL once no longer needed */
	size_t head_len, head_off;
	bool keep_alive; /* the response's framing is followed: the connection may be kept */
	bool body_only;  /* base-protocol LOGS/METRIC: only the response body goes on */
	struct es_body_only bo;
	bool reused;                /* it came from a pool (it may have been closed under us) */
	bool paused;                /* lws_rx_flow_control(wsi, 0): the stream's to_cloud is full */
	bool shut_wr_sent;          /* TCP half-close passed on */
	lws_sorted_usec_list_t sul; /* connect or handshake deadline; idle timeout in a pool */
	struct es_conn *next, *prev; /* the pool, while idle */
	/* While idle: the peer closed it, spoke unasked or it timed out. The pool unlinks and
	 * frees it (es_conn_free). */
	void (*on_idle_end)(struct es_conn *c);
};

extern const struct lws_protocols es_backend_protocol;

/*
 * es_conn_new() - a connection for @st to @host:@port, TLS with @tls_ctx (NULL: plain) checking
 * the name @tls_name; not dialled yet. Sets st->conn. 0 or -ENOMEM.
 */
int es_conn_new(struct es_conn **out, struct es_stream *st, const char *host, int port,
                SSL_CTX *tls_ctx, const char *tls_name);

/*
 * es_conn_set_head() - the HTTP/1.1 request head for @req (answer.h es_request_head: sent to
 * @path, @path_len bytes, on @host_header, with the query when @keep_query, without
 * "Connection: close" when @keep_alive), and how the answer is relayed: the framing followed
 * when the connection may be kept, the body only for a base-protocol cloud's LOGS/METRIC.
 * Returns 0, or -1 when the head cannot be written (too large, not HTTP/1.1: a bad request,
 * counted as refused; out of memory): the stream was failed (and freed, with @c).
 */
int es_conn_set_head(struct es_conn *c, const struct st_connect_req *req, const char *path,
                     size_t path_len, const char *host_header, bool keep_query, bool keep_alive);

/*
 * es_conn_dial() - start the connection (connect deadline --backend-dial-timeout, which
 * covers resolving the kubelet's name when the dial waits for it). Returns 0, or -1 when it
 * failed at once: the stream was failed (and freed, with @c).
 */
int es_conn_dial(struct es_conn *c);

/*
 * es_conn_restart() - the request goes again from its first byte on a new connection: the old
 * socket is let go (its callbacks no longer find @c) and @c dials anew with the same head.
 * The caller checked that nothing of the cloud's bytes went and nothing came back. Returns
 * as es_conn_dial().
 */
int es_conn_restart(struct es_conn *c);

/* es_conn_adopt() - @c (new, not dialled) takes over the socket and TLS session of @idle,
 * a connection from a pool, which is freed: no connect, no handshake. */
void es_conn_adopt(struct es_conn *c, struct es_conn *idle);

/*
 * es_conn_make_idle() - the stream is done with @c and a pool takes it: it no longer points
 * at the stream (st->conn NULL), drops its head, framing state and TLS buffers, keeps
 * reading (to see the peer close) and calls @on_idle_end when it ends, at the latest after
 * @idle_ms. Returns 0, or -1 when it cannot be kept (not open, TLS bytes unsent): nothing
 * changed.
 */
int es_conn_make_idle(struct es_conn *c, uint64_t idle_ms, void (*on_idle_end)(struct es_conn *c));

/* es_conn_free() - lets the socket go (lws closes it) and frees @c. NULL is a no-op. */
void es_conn_free(struct es_conn *c);

/* What a connection hands the relay past to_cloud's high mark before its pause takes: the
 * plaintext of what lws had read (one read of ES_READ_BYTES, a record it completed, and what a
 * backend adds in translation), with room to spare: overflowing it fails the stream. */
#define ES_CONN_TO_CLOUD_BURST (ES_READ_BYTES + 48u * 1024u)

/* The ops every connection backend shares (backend.h): write, on_writable, close. */
void es_conn_op_write(struct es_stream *st);
void es_conn_op_on_writable(struct es_stream *st);
void es_conn_op_close(struct es_stream *st);

#endif /* EDGESTREAM_CONN_H */
