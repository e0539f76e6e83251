/*
 * stream/window.h — per-stream credit flow control (negotiated ST_CAP_FLOW).
 *
 * Each side grants its peer a window of bytes per stream (announced in the negotiation header
 * and HELLO). A sender may send DATA payload only while it has credit; the receiver returns
 * credit with WINDOW messages as its consumer drains the bytes. So one stalled consumer stops
 * only its own stream, and the bytes buffered for a stream never exceed the window.
 *
 * Pure accounting, no I/O; one struct per stream, owned by the loop thread.
 */
#ifndef STREAM_WINDOW_H
#define STREAM_WINDOW_H

#include <stddef.h>
#include <stdint.h>

#include <stream/limits.h>

struct st_window {
	uint64_t send_credit;      /* bytes we may still send (read-only) */
	uint64_t recv_window;      /* the window we granted (read-only) */
	uint64_t recv_outstanding; /* bytes the peer may still send us (read-only) */
	uint64_t recv_unacked;     /* consumed by us, not yet granted back (read-only) */
};

/* st_window_init() - @send_window: what the peer granted us; @recv_window: what we grant. */
void st_window_init(struct st_window *w, uint64_t send_window, uint64_t recv_window);

/* st_window_sendable() - how many of @want bytes may be sent now (0 when blocked). */
size_t st_window_sendable(const struct st_window *w, size_t want);

/* st_window_on_sent() - @n DATA payload bytes were sent. -EINVAL if that exceeded the credit. */
int st_window_on_sent(struct st_window *w, size_t n);

/* st_window_on_grant() - the peer granted @increment more. Returns 0, or -EPROTO for a zero
 * increment or credit beyond ST_MAX_STREAM_WINDOW_BYTES (the peer is broken). */
int st_window_on_grant(struct st_window *w, uint64_t increment);

/* st_window_on_received() - @n DATA payload bytes arrived. -EPROTO when the peer overran the
 * window it was given. */
int st_window_on_received(struct st_window *w, size_t n);

/*
 * st_window_on_consumed() - our consumer took @n bytes. Returns the increment to send in a
 * WINDOW message now, or 0 to wait: credit goes back in batches of at least half the window,
 * so WINDOW messages stay rare (one per half window of DATA).
 */
uint64_t st_window_on_consumed(struct st_window *w, size_t n);

/*
 * st_window_grow() / st_window_shrink() - with the increment @inc that st_window_on_consumed
 * just returned, make the window @n bytes larger (the peer gets @inc + @n) or smaller (the
 * peer gets @inc - @n; @n is cut to @inc and to what keeps the window at least 1 byte).
 * Return the increment to send instead (0: send nothing). Growth beyond
 * ST_MAX_STREAM_WINDOW_BYTES is cut too.
 */
uint64_t st_window_grow(struct st_window *w, uint64_t inc, uint64_t n);
uint64_t st_window_shrink(struct st_window *w, uint64_t inc, uint64_t n);

#endif /* STREAM_WINDOW_H */
