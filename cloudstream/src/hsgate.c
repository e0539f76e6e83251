/*
 * cloudstream/src/hsgate.c — the tunnel port's handshake gate and the log budget (hsgate.h).
 * Pure. Sources are found by a linear search: at most max_inflight entries are in use, and a
 * search happens once per accepted connection.
 */
#include "hsgate.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int cs_hsgate_init(struct cs_hsgate *g, uint32_t max_inflight, uint32_t max_per_source)
{
	memset(g, 0, sizeof *g);
	if (max_inflight == 0 || max_per_source == 0)
		return -EINVAL;
	g->srcs = calloc(max_inflight, sizeof *g->srcs);
	if (g->srcs == NULL)
		return -ENOMEM;
	g->max_inflight = max_inflight;
	g->max_per_source = max_per_source;
	return 0;
}

void cs_hsgate_free(struct cs_hsgate *g)
{
	free(g->srcs);
	g->srcs = NULL;
}

bool cs_hsgate_open(const struct cs_hsgate *g)
{
	return g->inflight < g->max_inflight;
}

int cs_hsgate_enter(struct cs_hsgate *g, const uint8_t addr[16])
{
	if (!cs_hsgate_open(g))
		return -EAGAIN;
	int free_slot = -1;
	for (uint32_t i = 0; i < g->max_inflight; i++) {
		struct cs_hsgate_src *s = &g->srcs[i];
		if (s->n == 0) {
			if (free_slot < 0)
				free_slot = (int)i;
			continue;
		}
		if (memcmp(s->addr, addr, sizeof s->addr) != 0)
			continue;
		if (s->n >= g->max_per_source) {
			g->refused_per_source++;
			return -EUSERS;
		}
		s->n++;
		g->inflight++;
		return (int)i;
	}
	/* inflight < max_inflight, and each entry in use holds >= 1: a free one exists. */
	if (free_slot < 0)
		return -EAGAIN;
	struct cs_hsgate_src *s = &g->srcs[free_slot];
	memcpy(s->addr, addr, sizeof s->addr);
	s->n = 1;
	g->inflight++;
	return free_slot;
}

void cs_hsgate_leave(struct cs_hsgate *g, int slot)
{
	if (slot < 0 || (uint32_t)slot >= g->max_inflight || g->srcs[slot].n == 0)
		return;
	g->srcs[slot].n--;
	g->inflight--;
}

bool cs_logbudget_take(struct cs_logbudget *b, uint64_t now_ms, uint32_t per_window,
                       uint64_t window_ms, uint32_t *dropped)
{
	*dropped = 0;
	if (now_ms < b->window_start_ms || now_ms - b->window_start_ms >= window_ms) {
		*dropped = b->dropped;
		b->window_start_ms = now_ms;
		b->used = 0;
		b->dropped = 0;
	}
	if (b->used < per_window) {
		b->used++;
		return true;
	}
	b->dropped++;
	return false;
}
