/*
 * edgestream/src/backoff.h — reconnect delays: exponential, capped, with jitter (pure).
 *
 * The n-th retry waits a random time in [base/2, base], base = min(max, initial * 2^n): the
 * "equal jitter" of the AWS architecture note, so a thousand edges cut off by the same cloud
 * restart do not redial in lockstep, and each still backs off. The caller resets the sequence
 * once a tunnel stayed up for a stable period. KubeEdge's edge redials every 2 s, fixed.
 */
#ifndef EDGESTREAM_BACKOFF_H
#define EDGESTREAM_BACKOFF_H

#include <stdint.h>

struct es_backoff {
	uint64_t initial_ms, max_ms;
	unsigned attempt; /* retries since the last reset */
	uint64_t rng;     /* xorshift64* state, never 0 */
};

/* es_backoff_init() - @initial_ms >= 1, @max_ms >= @initial_ms; @seed any value. */
void es_backoff_init(struct es_backoff *b, uint64_t initial_ms, uint64_t max_ms, uint64_t seed);

/* es_backoff_next() - the delay before the next attempt, and count it. */
uint64_t es_backoff_next(struct es_backoff *b);

/*
 * es_backoff_after_up() - the delay before the first redial after a tunnel that was up for
 * @up_ms went down: 0 (failover to another replica is not a backoff window; the cloud's
 * handshake gate, not the edge, spreads a fleet that redials at once), unless the tunnel was up
 * for less than initial_ms or ES_BACKOFF_FLAP_MS, whichever is less (a tunnel that flaps gets
 * es_backoff_next(), as a failed dial). A
 * failure of that redial backs off where the sequence stands: from initial_ms when it is fresh
 * (a balancer that still handed the dial to the replica that just died costs [initial/2,
 * initial], not more).
 */
#define ES_BACKOFF_FLAP_MS 1000u
uint64_t es_backoff_after_up(struct es_backoff *b, uint64_t up_ms);

/* es_backoff_reset() - the tunnel was stable: start again from initial_ms. */
void es_backoff_reset(struct es_backoff *b);

#endif /* EDGESTREAM_BACKOFF_H */
