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
 * es_backoff_after_up() - the delay before the first redial after a tunnel that was up went
 * down: drawn uniformly in [0, @spread_ms] while the sequence is fresh (the tunnel was stable,
 * or never failed), so a fleet cut off by one cloud restart spreads its redials over the window
 * instead of all landing in [initial/2, initial], and some edges redial at once (failover to
 * another replica is not a backoff window). The next failure continues at 2 * initial. A tunnel
 * that flaps (dropped again before es_backoff_reset()) gets es_backoff_next() instead.
 */
uint64_t es_backoff_after_up(struct es_backoff *b, uint64_t spread_ms);

/* es_backoff_reset() - the tunnel was stable: start again from initial_ms. */
void es_backoff_reset(struct es_backoff *b);

#endif /* EDGESTREAM_BACKOFF_H */
