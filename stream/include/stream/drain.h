/*
 * stream/drain.h — a graceful stop, the same in both daemons (pure: the caller brings the clock
 * and the count of streams in flight).
 *
 * The first stop request (SIGTERM, edgestream_stop()) starts a drain when a drain timeout is
 * set: no new streams (they are refused with a reason), those in flight may finish. The
 * process stops once none is left, when the deadline passes, or at a second request.
 */
#ifndef STREAM_DRAIN_H
#define STREAM_DRAIN_H

#include <stddef.h>
#include <stdint.h>

enum st_drain_state {
	ST_DRAIN_RUNNING,  /* serving */
	ST_DRAIN_DRAINING, /* no new streams; waiting for those in flight, until deadline_ms */
	ST_DRAIN_STOPPING, /* stop now */
};

struct st_drain {
	enum st_drain_state state;
	uint64_t deadline_ms; /* while DRAINING */
};

/*
 * st_drain_request() - a stop was asked for at @now_ms. The first request drains for
 * @timeout_ms (0: no drain, stop at once); a request while draining stops at once. Returns the
 * new state.
 */
enum st_drain_state st_drain_request(struct st_drain *d, uint64_t now_ms, uint64_t timeout_ms);

/*
 * st_drain_check() - @in_flight streams are left at @now_ms: while draining, STOPPING once none
 * is left or the deadline passed. Returns the (new) state; RUNNING stays RUNNING.
 */
enum st_drain_state st_drain_check(struct st_drain *d, size_t in_flight, uint64_t now_ms);

#endif /* STREAM_DRAIN_H */
