/*
 * stream/loop.h — event-loop helpers the daemons share: the lws context on an epoll loop,
 * signals through signalfd on the lws loop, the ready file, and the port a listener really
 * bound.
 *
 * Thread rules: st_loop_block_signals() runs in main() before any thread starts; everything
 * else runs on the loop thread.
 */
#ifndef STREAM_LOOP_H
#define STREAM_LOOP_H

#include <stdbool.h>
#include <stddef.h>

struct lws;
struct lws_vhost;
struct lws_context;
struct lws_context_creation_info;
struct ev_loop;

/*
 * The loop under lws. lws 4.1.6's own loop poll()s every fd on every round, O(open sockets)
 * per event: 5,000 idle tunnels cost a transfer 92 % of its speed (libwebsockets-notes §8).
 * ST_LOOP_EPOLL runs lws on libev (epoll) through Debian's event-lib plugin
 * (libwebsockets-evlib-ev, loaded by lws at context creation) with a loop we own, so a round
 * costs O(ready fds). ST_LOOP_POLL is lws's default, kept to measure against.
 */
enum st_loop_kind {
	ST_LOOP_EPOLL = 0,
	ST_LOOP_POLL = 1,
};

struct st_loop;

/*
 * st_loop_context_new() - lws_create_context(@info) on a loop of @kind. @info->options and
 * @info->foreign_loops are filled here. When the event-lib plugin cannot be loaded (package
 * missing), falls back to lws's poll loop; *@kind_used says which one runs. Returns 0 with
 * *@out and *@ctx, or -ENOMEM / -ENOENT (no context at all; lws logged why).
 */
int st_loop_context_new(struct st_loop **out, struct lws_context **ctx,
                        struct lws_context_creation_info *info, enum st_loop_kind kind,
                        enum st_loop_kind *kind_used);

/* st_loop_kind_name() - "epoll (libev)" or "poll (lws default)", for logs and metrics. */
const char *st_loop_kind_name(enum st_loop_kind kind);

/*
 * st_loop_run() - one round of the loop: waits for at least one event (a socket, an lws timer,
 * lws_cancel_service()) but no longer than @timeout_ms (-1: no bound, 0: only what is ready),
 * and runs the callbacks. The daemon's loop is while (!stop && st_loop_run(loop, -1) >= 0).
 * Returns 0, or < 0 when lws stopped.
 *
 * lws on an event library arms its timer only after an event it handled: an lws_sul scheduled
 * outside any lws callback waits for the next event (a lws_cancel_service() makes one).
 */
int st_loop_run(struct st_loop *l, int timeout_ms);

/*
 * st_loop_write_soon_watch() - on the epoll loop, when a small TLS record (a PING's) is read
 * on @wsi (a TLS connection), POLLOUT lws asked for meanwhile is served in the same round, with
 * no epoll_ctl: lws's PONG goes out without the two system calls and two rounds of a POLLOUT
 * round trip (rt/evloop.c). Call once the connection is established;
 * st_loop_write_soon_forget() before it is closed (its CLOSED callback). No-op on lws's poll
 * loop or a connection without TLS. st_loop_write_soon_forget() also drops @wsi from this
 * round's writes (st_loop_write_soon), for any connection.
 */
void st_loop_write_soon_watch(struct st_loop *l, struct lws *wsi);
void st_loop_write_soon_forget(struct st_loop *l, struct lws *wsi);

/*
 * st_loop_write_soon() - lws_callback_on_writable(@wsi), served in this round on the epoll
 * loop when called from a callback of it (a timer's included): @wsi's WRITEABLE runs after the
 * round's callbacks, before the loop waits again, with no epoll_ctl and no round of its own.
 * For a write asked for off the socket's own events: a liveness sweep's PING, a request's
 * CONNECT toward the tunnel, an answer toward its client, a request toward a backend (each
 * hop of a keep-alive GET was one more round and two epoll_ctl). The callback is the usual
 * WRITEABLE, so its rules hold: what is queued before goes first, and a socket that turns out
 * full keeps the rest and waits for POLLOUT as before. Any connection lws owns (a raw socket
 * by its fd, a TLS one by its SSL's); lws's poll loop gets plain lws_callback_on_writable().
 * A connection that used it calls st_loop_write_soon_forget() in its close callback, so a
 * socket opened later in the same round on the same fd number is not fed.
 */
void st_loop_write_soon(struct st_loop *l, struct lws *wsi);

/* st_loop_ev() - the libev loop under lws, or NULL on lws's poll loop: for a watcher of our
 * own beside lws's (stream/tunnelread.h). */
struct ev_loop *st_loop_ev(struct st_loop *l);

/* st_loop_destroy() - lws_context_destroy() (every connection's callbacks run), then the
 * loop itself. NULL is fine. */
void st_loop_destroy(struct st_loop *l);

/* The signals a daemon handles on its loop: SIGTERM/SIGINT (drain and stop), SIGHUP (reload). */
#define ST_LOOP_SIGNALS_DESC "SIGTERM SIGINT SIGHUP"

/*
 * st_loop_block_signals() - block SIGTERM, SIGINT and SIGHUP in the calling thread (and so in
 * every thread it starts later) and ignore SIGPIPE (a peer closing mid-write is an error code,
 * not a death). Returns 0 or -errno.
 */
int st_loop_block_signals(void);

/* Called on the loop thread for each signal received. */
typedef void (*st_loop_signal_cb)(int signo, void *user);

struct st_loop_signals;

/*
 * st_loop_signals_new() - open a signalfd for the blocked signals and adopt it into @vhost's
 * loop under @protocol_name, whose callback must forward LWS_CALLBACK_RAW_RX_FILE and
 * LWS_CALLBACK_RAW_CLOSE_FILE to st_loop_signals_dispatch(). @cb runs for each signal.
 * Returns 0, -errno, or -ENOMEM.
 */
int st_loop_signals_new(struct st_loop_signals **out, struct lws_vhost *vhost,
                        const char *protocol_name, st_loop_signal_cb cb, void *user);

/* st_loop_signals_dispatch() - call from that protocol's callback for every reason (the wsi
 * carries the st_loop_signals as its opaque user data); returns what the callback should
 * return (0). */
int st_loop_signals_dispatch(struct lws *wsi, int reason);

/* st_loop_signals_free() - free the state; call after lws_context_destroy(), which closes the
 * signalfd with its wsi. NULL is fine. */
void st_loop_signals_free(struct st_loop_signals *s);

/*
 * st_loop_write_ready_file() - write @content to @path atomically (a temporary file in the same
 * directory, fsync, rename), so a reader sees all of it or nothing. Tests wait for it instead of
 * sleeping. Returns 0 or -errno.
 */
int st_loop_write_ready_file(const char *path, const char *content, size_t len);

/* st_loop_listen_port() - the TCP port @vhost listens on (the real one when it asked for 0),
 * or -ENOENT when it has no listener. */
int st_loop_listen_port(struct lws_vhost *vhost);

/*
 * st_loop_set_listen() - fill the listener fields of @info (port, iface, IPv4-only option) from
 * "host:port", "[v6]:port" or ":port" (every address). @host (@cap bytes) keeps the host text
 * that info->iface points at. An IP literal (or every address) is tried with a bind first, so
 * an address the host does not have, or a port in use, is an error now instead of a daemon
 * that runs without its listener. Returns 0, -EINVAL (not an address), or the bind's -errno
 * (-EADDRNOTAVAIL, -EADDRINUSE, -EACCES).
 */
int st_loop_set_listen(struct lws_context_creation_info *info, const char *addr, char *host,
                       size_t cap);

/*
 * st_loop_check_listen() - for --check-config: is @addr ("host:port", "[v6]:port", ":port") an
 * address of this host? Parsed as st_loop_set_listen() does, then bound on port 0 (so a running
 * daemon holding the port does not make the check fail), then on its port. Returns 0 (sets
 * *@port_free: false when that port is taken now, by the running daemon or another process;
 * true also for an interface name, which is not probed), -EINVAL (not an address), or the
 * port-0 bind's -errno (-EADDRNOTAVAIL: not one of this host's addresses).
 */
int st_loop_check_listen(const char *addr, bool *port_free);

#endif /* STREAM_LOOP_H */
