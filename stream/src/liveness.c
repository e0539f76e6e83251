/* Tunnel liveness (stream/liveness.h): pure, no clock of its own. */
#include <stream/liveness.h>

void st_liveness_init(struct st_liveness *l, uint64_t now_ms)
{
	l->last_rx_ms = now_ms;
	l->last_ping_ms = now_ms;
	l->paused = false;
}

void st_liveness_rx(struct st_liveness *l, uint64_t now_ms)
{
	if (now_ms > l->last_rx_ms)
		l->last_rx_ms = now_ms;
}

void st_liveness_pause(struct st_liveness *l, bool paused, uint64_t now_ms)
{
	if (l->paused && !paused) {
		/* What the peer sent while we did not read is waiting in the socket: the quiet
		 * time starts now. */
		st_liveness_rx(l, now_ms);
		l->last_ping_ms = now_ms;
	}
	l->paused = paused;
}

uint64_t st_liveness_sweep_interval_ms(uint64_t ping_interval_ms)
{
	uint64_t ms = ping_interval_ms / 4;
	return ms < 100 ? 100 : ms > 1000 ? 1000 : ms;
}

enum st_liveness_verdict st_liveness_check(struct st_liveness *l, uint64_t now_ms,
                                           uint64_t ping_interval_ms, uint64_t dead_ms)
{
	if (l->paused) {
		st_liveness_rx(l, now_ms); /* the silence is ours */
		return ST_LIVENESS_OK;
	}
	uint64_t quiet = now_ms > l->last_rx_ms ? now_ms - l->last_rx_ms : 0;
	if (dead_ms > 0 && quiet >= dead_ms)
		return ST_LIVENESS_DEAD;
	if (ping_interval_ms == 0 || quiet < ping_interval_ms)
		return ST_LIVENESS_OK;
	uint64_t since_ping = now_ms > l->last_ping_ms ? now_ms - l->last_ping_ms : 0;
	if (l->last_ping_ms > l->last_rx_ms && since_ping < ping_interval_ms)
		return ST_LIVENESS_OK; /* asked already; the answer has until dead_ms */
	l->last_ping_ms = now_ms;
	return ST_LIVENESS_PING;
}

uint64_t st_liveness_next_check_ms(const struct st_liveness *l, uint64_t now_ms,
                                   uint64_t ping_interval_ms, uint64_t dead_ms)
{
	uint64_t due = UINT64_MAX;
	if (l->paused) {
		/* Resuming restarts the clock at the moment of resuming, which is later. */
		if (dead_ms > 0)
			due = now_ms + dead_ms;
		if (ping_interval_ms > 0 && now_ms + ping_interval_ms < due)
			due = now_ms + ping_interval_ms;
		return due;
	}
	if (dead_ms > 0)
		due = l->last_rx_ms + dead_ms;
	if (ping_interval_ms > 0) {
		uint64_t ping = l->last_rx_ms + ping_interval_ms;
		if (l->last_ping_ms > l->last_rx_ms && l->last_ping_ms + ping_interval_ms > ping)
			ping = l->last_ping_ms + ping_interval_ms; /* asked already: the next ask */
		if (ping < due)
			due = ping;
	}
	return due;
}
