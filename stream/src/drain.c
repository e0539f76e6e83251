/* Graceful stop (stream/drain.h). */
#include <stream/drain.h>

enum st_drain_state st_drain_request(struct st_drain *d, uint64_t now_ms, uint64_t timeout_ms)
{
	if (d->state == ST_DRAIN_RUNNING && timeout_ms > 0) {
		d->state = ST_DRAIN_DRAINING;
		/* Saturating: a huge timeout must not wrap to a deadline in the past. */
		d->deadline_ms =
		        now_ms > UINT64_MAX - timeout_ms ? UINT64_MAX : now_ms + timeout_ms;
	} else {
		d->state = ST_DRAIN_STOPPING;
	}
	return d->state;
}

enum st_drain_state st_drain_check(struct st_drain *d, size_t in_flight, uint64_t now_ms)
{
	if (d->state == ST_DRAIN_DRAINING && (in_flight == 0 || now_ms >= d->deadline_ms))
		d->state = ST_DRAIN_STOPPING;
	return d->state;
}
