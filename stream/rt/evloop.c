/*
 * The lws context on an epoll loop (stream/loop.h): libev through lws's event-lib plugin, with
 * a loop we own so one round is ev_run(EVRUN_ONCE) and stopping is the caller's flag.
 *
 * What lws does on libev (lib/event-libs/libev in 4.1.6): one ev_io per socket, started and
 * stopped as lws changes its poll events; one ev_timer for the head of its timer list, re-armed
 * by an ev_idle after every event; lws_cancel_service() is an eventfd lws adopted like any other
 * fd. So worker wake-ups, adopted signalfd/inotify fds and lws_sul timers work unchanged.
 *
 * Two flaws of that plugin in 4.1.6, and what a tick of ours every ST_LOOP_TICK_MS does:
 *  - it re-arms its timer with ev_timer_set + ev_timer_start on a watcher that may still be
 *    active, which libev ignores, so an lws timer scheduled sooner than the one armed fired only
 *    at the armed time (a 500 ms stall cut came after 2.7 s). The tick keeps the armed time
 *    near: lws re-arms at the true earliest timer each time it fires;
 *  - its "forced service" (rx buffered by lws while a connection was paused, TLS bytes OpenSSL
 *    decrypted ahead) runs from an idle watcher started only after a socket event, never after
 *    a timer callback: a connection resumed from a timer waited for some unrelated socket. The
 *    tick makes one (lws_cancel_service()), so that work waits at most a tick.
 * 50 wake-ups a second cost nothing measurable.
 *
 * Writes in the round that asked for them (st_loop_write_soon): lws asks for POLLOUT before
 * every write it makes, its PONG to an edge's PING included, and drops it after, so each PONG
 * cost two epoll_ctl and two more rounds. libev applies watcher changes to epoll only at the
 * start of the next round, so a write watcher started and stopped within one round costs no
 * system call: after the round's callbacks we feed EV_WRITE to the fds a small TLS record
 * arrived on (twice: lws writes the PONG on the first, and keeps POLLOUT on until the second
 * finds nothing left). A fd whose write watcher is not started ignores the feed; a socket
 * that turns out full makes lws keep the rest and wait for POLLOUT as before. The relays ask
 * the same way (st_loop_write_soon) for the writes a read calls for: a keep-alive GET crossed
 * four such rounds (the CONNECT toward the tunnel, the request toward the kubelet, the answer
 * toward the tunnel, then toward the client), each two epoll_ctl and an epoll_wait.
 */
#include <stream/err.h>
#include <stream/loop.h>

#include <ev.h>
#include <libwebsockets.h>
#include <openssl/ssl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ST_LOOP_TICK_MS         20
#define ST_LOOP_SOON_RECORD_MAX 512 /* bytes: a PING's record, not a bulk one */

struct st_loop {
	struct lws_context *ctx;
	struct ev_loop *ev; /* NULL on lws's poll loop */
	void *foreign[1];
	struct ev_timer bound;            /* st_loop_run's @timeout_ms on libev */
	lws_sorted_usec_list_t sul_bound; /* ... and on lws's poll loop */
	lws_sorted_usec_list_t sul_tick;  /* libev only: see the top of this file */
	int *soon;                        /* fds to feed EV_WRITE after this round (-1: gone) */
	size_t soon_n, soon_cap;
	uint8_t *soon_bits; /* one bit per fd: already in @soon */
	size_t soon_bits_n; /* bytes */
};

static void soon_add(struct st_loop *l, int fd)
{
	if (fd < 0)
		return;
	size_t byte = (size_t)fd / 8;
	if (byte >= l->soon_bits_n) {
		size_t n = byte + 1 > 2 * l->soon_bits_n ? byte + 1 : 2 * l->soon_bits_n;
		uint8_t *b = realloc(l->soon_bits, n);
		if (b == NULL)
			return; /* then it waits for POLLOUT, as without us */
		memset(b + l->soon_bits_n, 0, n - l->soon_bits_n);
		l->soon_bits = b;
		l->soon_bits_n = n;
	}
	uint8_t bit = (uint8_t)(1u << ((unsigned)fd % 8));
	if (l->soon_bits[byte] & bit)
		return;
	if (l->soon_n == l->soon_cap) {
		size_t cap = l->soon_cap ? 2 * l->soon_cap : 64;
		int *s = realloc(l->soon, cap * sizeof *s);
		if (s == NULL)
			return;
		l->soon = s;
		l->soon_cap = cap;
	}
	l->soon_bits[byte] |= bit;
	l->soon[l->soon_n++] = fd;
}

static bool soon_has(const struct st_loop *l, int fd)
{
	return (size_t)fd / 8 < l->soon_bits_n &&
	       (l->soon_bits[(size_t)fd / 8] & (uint8_t)(1u << ((unsigned)fd % 8)));
}

static void soon_forget(struct st_loop *l, int fd)
{
	if (fd < 0 || (size_t)fd / 8 >= l->soon_bits_n)
		return;
	uint8_t bit = (uint8_t)(1u << ((unsigned)fd % 8));
	if (!(l->soon_bits[(size_t)fd / 8] & bit))
		return;
	l->soon_bits[(size_t)fd / 8] &= (uint8_t)~bit;
	for (size_t i = 0; i < l->soon_n; i++)
		if (l->soon[i] == fd)
			l->soon[i] = -1; /* closed: its number may be reused in this round */
}

/* libev's invoke-pending hook: the round's callbacks, then the writes they asked for. */
static void invoke_pending(struct ev_loop *ev)
{
	struct st_loop *l = ev_userdata(ev);
	ev_invoke_pending(ev);
	for (int pass = 0; pass < 2 && l->soon_n > 0; pass++) {
		for (size_t i = 0; i < l->soon_n; i++)
			if (l->soon[i] >= 0)
				ev_feed_fd_event(ev, l->soon[i], EV_WRITE);
		ev_invoke_pending(ev);
	}
	for (size_t i = 0; i < l->soon_n; i++)
		if (l->soon[i] >= 0)
			l->soon_bits[(size_t)l->soon[i] / 8] = 0;
	l->soon_n = 0;
}

/* OpenSSL's message callback: a small record read on a watched connection. */
static void on_tls_msg(int write_p, int version, int content_type, const void *buf, size_t len,
                       SSL *ssl, void *arg)
{
	(void)version;
	if (write_p || content_type != SSL3_RT_HEADER || len < SSL3_RT_HEADER_LENGTH)
		return;
	const uint8_t *h = buf;
	if (((size_t)h[3] << 8 | h[4]) <= ST_LOOP_SOON_RECORD_MAX)
		soon_add(arg, SSL_get_fd(ssl));
}

void st_loop_write_soon_watch(struct st_loop *l, struct lws *wsi)
{
	SSL *ssl = l->ev ? lws_get_ssl(wsi) : NULL;
	if (ssl == NULL)
		return;
	SSL_set_msg_callback_arg(ssl, l);
	SSL_set_msg_callback(ssl, on_tls_msg);
}

/* The fd the soon list knows @wsi by: its SSL's for lws's TLS connections (what the PING watch
 * sees), else lws's socket (the edge's backends, which do TLS of their own). */
static int soon_fd(struct lws *wsi)
{
	SSL *ssl = lws_get_ssl(wsi);
	return ssl ? SSL_get_fd(ssl) : (int)lws_get_socket_fd(wsi);
}

void st_loop_write_soon(struct st_loop *l, struct lws *wsi)
{
	lws_callback_on_writable(wsi);
	/* Only a socket that would report POLLOUT now (a poll(), which also says no while lws
	 * holds unsent bytes of its own): what epoll would have said, one system call instead of
	 * two epoll_ctl and a round. A full one waits for POLLOUT as before. (Fed without that
	 * check, a stalled reader's queue on the cloud rarely reached its high mark, so its
	 * tunnel was paused less often: integration.cloudstream_stall.) Once per round: the
	 * several kicks of one request or answer cost one poll. */
	if (l->ev == NULL)
		return;
	int fd = soon_fd(wsi);
	if (fd >= 0 && !soon_has(l, fd) && !lws_send_pipe_choked(wsi))
		soon_add(l, fd);
}

void st_loop_write_soon_forget(struct st_loop *l, struct lws *wsi)
{
	if (l->ev == NULL)
		return;
	SSL *ssl = lws_get_ssl(wsi);
	if (ssl != NULL)
		SSL_set_msg_callback(ssl, NULL);
	soon_forget(l, soon_fd(wsi));
}

struct ev_loop *st_loop_ev(struct st_loop *l)
{
	return l ? l->ev : NULL;
}

static void on_tick(lws_sorted_usec_list_t *sul)
{
	struct st_loop *l = lws_container_of(sul, struct st_loop, sul_tick);
	lws_sul_schedule(l->ctx, 0, &l->sul_tick, on_tick, ST_LOOP_TICK_MS * LWS_US_PER_MS);
	lws_cancel_service(l->ctx); /* a socket event: lws's idle work runs after it */
}

static void on_bound_ev(struct ev_loop *loop, struct ev_timer *w, int revents)
{
	(void)loop;
	(void)w;
	(void)revents; /* firing is the point: ev_run returns */
}

static void on_bound_sul(lws_sorted_usec_list_t *sul)
{
	(void)sul; /* firing is the point: the wait in lws_service ends */
}

const char *st_loop_kind_name(enum st_loop_kind kind)
{
	return kind == ST_LOOP_EPOLL ? "epoll (libev)" : "poll (lws default)";
}

int st_loop_context_new(struct st_loop **out, struct lws_context **ctx,
                        struct lws_context_creation_info *info, enum st_loop_kind kind,
                        enum st_loop_kind *kind_used)
{
	struct st_loop *l = calloc(1, sizeof *l);
	if (l == NULL)
		return -ENOMEM;
	if (kind == ST_LOOP_EPOLL) {
		/* epoll only: libev's select/poll backends would bring the O(N) round back. */
		l->ev = ev_loop_new(EVBACKEND_EPOLL | EVFLAG_NOSIGMASK);
		if (l->ev != NULL) {
			ev_set_userdata(l->ev, l);
			ev_set_invoke_pending_cb(l->ev, invoke_pending);
			l->foreign[0] = l->ev;
			info->foreign_loops = l->foreign;
			info->options |= LWS_SERVER_OPTION_LIBEV;
			l->ctx = lws_create_context(info);
			info->options &= ~(uint64_t)LWS_SERVER_OPTION_LIBEV;
			info->foreign_loops = NULL;
			if (l->ctx == NULL) {
				ev_loop_destroy(l->ev);
				l->ev = NULL;
			}
		}
	}
	if (l->ctx == NULL)
		l->ctx = lws_create_context(info); /* lws's poll loop */
	if (l->ctx == NULL) {
		free(l);
		return -ENOENT;
	}
	if (l->ev != NULL)
		/* Its lws_cancel_service() is the first event: lws arms its timer only after one,
		 * so timers scheduled before the loop starts run even if no socket wakes it. */
		on_tick(&l->sul_tick);
	*kind_used = l->ev ? ST_LOOP_EPOLL : ST_LOOP_POLL;
	*ctx = l->ctx;
	*out = l;
	return 0;
}

int st_loop_run(struct st_loop *l, int timeout_ms)
{
	if (l->ev == NULL) {
		/* lws 4.1 waits until its next timer or event: a timer bounds the wait. */
		if (timeout_ms > 0)
			lws_sul_schedule(l->ctx, 0, &l->sul_bound, on_bound_sul,
			                 (lws_usec_t)timeout_ms * LWS_US_PER_MS);
		int rc = lws_service(l->ctx, timeout_ms == 0 ? -1 : 0);
		lws_sul_cancel(&l->sul_bound);
		return rc < 0 ? -ECANCELED : 0;
	}
	if (timeout_ms == 0) {
		ev_run(l->ev, EVRUN_NOWAIT);
		return 0;
	}
	if (timeout_ms > 0) {
		ev_timer_init(&l->bound, on_bound_ev, (ev_tstamp)timeout_ms / 1000.0, 0.);
		ev_timer_start(l->ev, &l->bound);
	}
	ev_run(l->ev, EVRUN_ONCE);
	if (timeout_ms > 0)
		ev_timer_stop(l->ev, &l->bound);
	return 0;
}

void st_loop_destroy(struct st_loop *l)
{
	if (l == NULL)
		return;
	lws_sul_cancel(&l->sul_tick);
	lws_context_destroy(l->ctx);
	if (l->ev != NULL)
		ev_loop_destroy(l->ev);
	free(l->soon);
	free(l->soon_bits);
	free(l);
}
