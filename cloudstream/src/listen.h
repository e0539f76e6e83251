/*
 * cloudstream/src/listen.h — the tunnel port's listening socket, ours rather than lws's.
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
 * lws_adopt_socket_vhost(), where TLS and the websocket upgrade run as before. Loop thread only.
 */
#ifndef CLOUDSTREAM_LISTEN_H
#define CLOUDSTREAM_LISTEN_H

#include <stdint.h>

struct cs_server;
struct lws;

struct cs_listener_stats {
	uint64_t accepted, refused_per_source, emfile_pauses;
	uint32_t handshakes_inflight;
};

/* cs_listener_new() - bind --tunnel-listen and start accepting into srv->vh_tunnel (which must
 * exist); the accept wake-ups come to "cs-aux" on srv->vh_aux. Returns 0 or -errno (logged). */
int cs_listener_new(struct cs_server *srv);

/* cs_listener_port() - the port bound (the real one for :0), or -ENOENT. */
int cs_listener_port(const struct cs_server *srv);

/* cs_listener_aux() - call first in the aux protocol's callback: returns 1 when the event was
 * the listener's (the callback then returns 0), 0 otherwise. */
int cs_listener_aux(struct cs_server *srv, struct lws *wsi, int reason);

/* cs_listener_note() - call from the tunnel protocol's callback for every reason (wsi not
 * NULL): ends a connection's handshake in the gate at its upgrade request or its close. */
void cs_listener_note(struct cs_server *srv, struct lws *wsi, int reason);

void cs_listener_stats(const struct cs_server *srv, struct cs_listener_stats *out);

/* cs_listener_free() - before lws_context_destroy(), which closes the listening socket. */
void cs_listener_free(struct cs_server *srv);

/* cs_lws_log_allowed() - the lws log budget: at most 20 lines per 10 s; *@dropped is set when
 * lines were dropped in the previous window (write it as one line). */
int cs_lws_log_allowed(uint32_t *dropped);

#endif /* CLOUDSTREAM_LISTEN_H */
