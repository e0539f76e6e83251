/*
 * cloudstream/src/listen.h — the tunnel and stream ports' listening sockets, ours rather than
 * lws's.
 *
 * lws 4.1.6's listener accepts whatever comes, builds ~45 KB of OpenSSL state before the peer
 * sends a byte, bounds none of it, and spins on accept() at EMFILE writing thousands of log
 * lines a second (libwebsockets-notes §8). Ours:
 *   - TCP_DEFER_ACCEPT: a connection reaches us only once it sent its first bytes (the
 *     ClientHello), so a connection that never sends one costs a kernel request socket, not
 *     an fd nor OpenSSL state; the kernel drops it after the handshake deadline;
 *   - the handshake gate (hsgate.h): at most --tunnel-handshakes-max TLS handshakes in flight
 *     (the listener stops accepting meanwhile: the rest wait in the kernel's queue), at most
 *     --tunnel-handshakes-per-source of them from one address, each with a
 *     --tunnel-handshake-timeout deadline;
 *   - EMFILE/ENFILE: accepting pauses for 250 ms instead of spinning; one log line per 10 s.
 * Accepted sockets are handed to the tunnel vhost (created without a listener) with
 * lws_adopt_socket_vhost(), where TLS and the websocket upgrade run as before.
 *
 * The stream port (apiserver connections, one per request) has the same listener with its own
 * gate: at most CS_STREAM_HANDSHAKES_MAX handshakes in flight, no per-source share (every
 * connection comes from the apiserver), CS_STREAM_HANDSHAKE_TIMEOUT_MS each; it keeps
 * accepting while the gate is shut, up to CS_STREAM_ACCEPTED_WAITING_MAX sockets that wait for
 * a slot (an fd each, nothing else), since the kernel's queue (SOMAXCONN, 4,096) overflows
 * under a burst and the overflow is retried by the client's SYN backoff (seconds). A burst of
 * 10,000 `logs -f` otherwise runs 10,000 handshakes at once: ~60 KB of OpenSSL state each while
 * in flight (VmHWM 0.5 GB), a heap left fragmented for good, and handshakes that miss their
 * deadline while the loop works through the others. Sockets go to the stream vhost's raw
 * protocol ("cs-stream"). Loop thread only.
 */
#ifndef CLOUDSTREAM_LISTEN_H
#define CLOUDSTREAM_LISTEN_H

#include <stdint.h>

struct cs_server;
struct lws;

#define CS_STREAM_HANDSHAKES_MAX       128
#define CS_STREAM_HANDSHAKE_TIMEOUT_MS 10000
/* Stream port: accepted connections waiting for a handshake slot (an fd each, no TLS state) */
#define CS_STREAM_ACCEPTED_WAITING_MAX 8192

struct cs_listener_stats {
	uint64_t accepted, refused_per_source, emfile_pauses;
	uint32_t handshakes_inflight;
};

/* cs_listener_new() - bind --tunnel-listen and start accepting into srv->vh_tunnel (which must
 * exist); the accept wake-ups come to "cs-aux" on srv->vh_aux. Returns 0 or -errno (logged). */
int cs_listener_new(struct cs_server *srv);

/* cs_listener_port() - the port bound (the real one for :0), or -ENOENT. */
int cs_listener_port(const struct cs_server *srv);

/* cs_stream_listener_new() - bind --stream-listen and accept into srv->vh_stream (created
 * without a listener) through the stream gate. Returns 0 or -errno (logged). */
int cs_stream_listener_new(struct cs_server *srv);

/* cs_stream_listener_port() - the stream port bound, or -ENOENT. */
int cs_stream_listener_port(const struct cs_server *srv);

/* cs_stream_listener_note() - call from the stream protocol's callback when a connection's
 * TLS handshake is over: its first bytes (RAW_RX), RAW_CLOSE, WSI_DESTROY. Idempotent. */
void cs_stream_listener_note(struct cs_server *srv, struct lws *wsi);

/* cs_listener_aux() - call first in the aux protocol's callback: returns 1 when the event was
 * the listener's (the callback then returns 0), 0 otherwise. */
int cs_listener_aux(struct cs_server *srv, struct lws *wsi, int reason);

/* cs_listener_note() - call from the tunnel protocol's callback for every reason (wsi not
 * NULL): ends a connection's handshake in the gate at its upgrade request or its close. */
void cs_listener_note(struct cs_server *srv, struct lws *wsi, int reason);

void cs_listener_stats(const struct cs_server *srv, struct cs_listener_stats *out);

/* cs_listener_free() - both listeners; before lws_context_destroy(), which closes the
 * listening sockets. */
void cs_listener_free(struct cs_server *srv);

/* cs_lws_log_allowed() - the lws log budget: at most 20 lines per 10 s; *@dropped is set when
 * lines were dropped in the previous window (write it as one line). */
int cs_lws_log_allowed(uint32_t *dropped);

/* cs_socket_orig_dst() - the original destination address of accepted socket @fd when
 * netfilter DNAT'd it (SO_ORIGINAL_DST, IPv4 or IPv6) to another address than the one it
 * reached, as text into @out (@cap bytes, INET6_ADDRSTRLEN is enough); "" when it was not DNAT'd
 * or @fd < 0. Any thread. */
void cs_socket_orig_dst(int fd, char *out, size_t cap);

#endif /* CLOUDSTREAM_LISTEN_H */
