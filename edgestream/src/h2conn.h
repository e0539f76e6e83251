/*
 * edgestream/src/h2conn.h — the kubelet's HTTP/2 path: plain (non-upgrade) kubelet requests as
 * streams on one shared TLS connection per kubelet, nghttp2 driven sans-I/O over the backend
 * TLS code (tls.h) on an lws raw socket, as conn.h does for HTTP/1.1.
 *
 * A connection offers ALPN h2 and http/1.1. When the kubelet picks h2, every GET and HEAD the
 * kubelet backend is given (logs, follow too, metrics, stats, pods...) becomes a stream on it; a
 * new connection opens only when the kubelet's SETTINGS_MAX_CONCURRENT_STREAMS is reached. The
 * answer goes to the cloud as the HTTP/1.1 bytes it got before (h2msg.h). When the kubelet
 * picks http/1.1 (or nothing), the waiting requests go the HTTP/1.1 way and so does every later
 * one (sticky for the instance). Upgrades never come here.
 *
 * Ownership (STYLE B5.5): the instance owns its connections (es->h2conns); a stream's state
 * (st->be) belongs to the stream and points at its connection while it rides one. A
 * connection is freed only by its own events (socket closed, errors, its idle deadline),
 * never from a stream's close, so no relay call can free it under a callback. Loop thread only.
 */
#ifndef EDGESTREAM_H2CONN_H
#define EDGESTREAM_H2CONN_H

#include <stdbool.h>
#include <stddef.h>

#include <libwebsockets.h>

#include <stream/connect.h>

struct es_stream;
struct edgestream;

extern const struct lws_protocols es_h2_protocol;

/*
 * es_h2_open() - serve @st (a kubelet request) over HTTP/2 when it can go so (--kubelet-http2
 * auto, a TLS kubelet not known to refuse h2, a GET or HEAD without body): takes @req's
 * contents. Returns 1 when it did (the stream goes on, or was failed), 0 when the request
 * should go HTTP/1.1 (nothing taken).
 */
int es_h2_open(struct es_stream *st, struct st_connect_req *req, const char *path, size_t path_len);

/* The kubelet ops for a stream on the HTTP/2 path (st->be set); kubelet.c dispatches. */
void es_h2_op_write(struct es_stream *st);
void es_h2_op_on_writable(struct es_stream *st);
void es_h2_op_close(struct es_stream *st);

/* es_h2_free_all() - the instance is going: every connection closes (no stream is left). */
void es_h2_free_all(struct edgestream *es);

/* es_h2_connections() - how many HTTP/2 connections the instance has (for stats, tests). */
unsigned es_h2_connections(const struct edgestream *es);

#endif /* EDGESTREAM_H2CONN_H */
