/*
 * stream/liveness.h — is the peer of a tunnel alive? One rule for both daemons, sans-I/O.
 *
 * Any frame received is a sign of life (DATA, control, a PONG), not only the PONG to our own
 * PING, which is all libwebsockets 4.1.6's validity timer counts. And while we ourselves stopped
 * reading the tunnel (back-pressure), its silence is ours, not the peer's: the clock stands
 * still until we read again, so a tunnel we throttle is never declared dead by us.
 *
 * The caller keeps one struct st_liveness per tunnel, reports what it reads and when it pauses,
 * and asks st_liveness_check() from one periodic sweep over all its tunnels (O(1) each, no
 * timer per tunnel). Thread-safety: none; the loop thread owns it.
 */
#ifndef STREAM_LIVENESS_H
#define STREAM_LIVENESS_H

#include <stdbool.h>
#include <stdint.h>

struct st_liveness {
	uint64_t last_rx_ms;   /* read-only: when the peer last showed life (or we resumed) */
	uint64_t last_ping_ms; /* read-only: when we last asked for a PING */
	bool paused;           /* read-only: we are not reading the tunnel */
};

enum st_liveness_verdict {
	ST_LIVENESS_OK = 0,   /* nothing to do */
	ST_LIVENESS_PING = 1, /* quiet for a ping interval: send a PING now */
	ST_LIVENESS_DEAD = 2, /* quiet for the dead-peer timeout while we were reading: close */
};

/* st_liveness_init() - a tunnel that just came up at @now_ms. */
void st_liveness_init(struct st_liveness *l, uint64_t now_ms);

/* st_liveness_rx() - something arrived from the peer (any frame) at @now_ms. */
void st_liveness_rx(struct st_liveness *l, uint64_t now_ms);

/* st_liveness_pause() - we stopped (@paused) or started again reading the tunnel at @now_ms;
 * resuming restarts the clock. */
void st_liveness_pause(struct st_liveness *l, bool paused, uint64_t now_ms);

/*
 * st_liveness_check() - the verdict at @now_ms: DEAD after @dead_ms without a sign of life
 * while we were reading; PING once per @ping_interval_ms of quiet (0 = never ping); OK
 * otherwise. PING records the ping as sent.
 */
enum st_liveness_verdict st_liveness_check(struct st_liveness *l, uint64_t now_ms,
                                           uint64_t ping_interval_ms, uint64_t dead_ms);

/*
 * st_liveness_next_check_ms() - the earliest time at which st_liveness_check(@l, ...) with
 * the same @ping_interval_ms and @dead_ms can return anything but OK, if nothing changes @l
 * meanwhile; UINT64_MAX when never. What can change it (st_liveness_rx, st_liveness_pause,
 * st_liveness_check itself) only makes that time later, so a sweep may skip a tunnel until
 * this time without reading its record: at 19,000 tunnels, walking every record once a second
 * was 7 % of the idle loop's CPU, nearly all of it cache misses. @now_ms is the time of the
 * call (a paused tunnel gets nothing before now + the shorter of the two).
 */
uint64_t st_liveness_next_check_ms(const struct st_liveness *l, uint64_t now_ms,
                                   uint64_t ping_interval_ms, uint64_t dead_ms);

/* st_liveness_sweep_interval_ms() - how often to call st_liveness_check for @ping_interval_ms:
 * a quarter of it, within [100 ms, 1 s], so a ping or a verdict is at most that late. */
uint64_t st_liveness_sweep_interval_ms(uint64_t ping_interval_ms);

#endif /* STREAM_LIVENESS_H */
