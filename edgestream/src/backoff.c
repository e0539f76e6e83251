/*
 * edgestream/src/backoff.c — reconnect delays (backoff.h). Pure.
 */
#include "backoff.h"

void es_backoff_init(struct es_backoff *b, uint64_t initial_ms, uint64_t max_ms, uint64_t seed)
{
	b->initial_ms = initial_ms ? initial_ms : 1;
	b->max_ms = max_ms < b->initial_ms ? b->initial_ms : max_ms;
	b->attempt = 0;
	b->rng = seed ? seed : 0x9e3779b97f4a7c15ull;
}

static uint64_t next_random(struct es_backoff *b)
{
	uint64_t x = b->rng;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	b->rng = x;
	return x * 0x2545f4914f6cdd1dull;
}

uint64_t es_backoff_next(struct es_backoff *b)
{
	uint64_t base = b->initial_ms;
	for (unsigned i = 0; i < b->attempt && base < b->max_ms; i++)
		base *= 2;
	if (base > b->max_ms)
		base = b->max_ms;
	if (b->attempt < 64)
		b->attempt++;
	uint64_t half = base / 2;
	return base - half + next_random(b) % (half + 1);
}

uint64_t es_backoff_after_up(struct es_backoff *b, uint64_t up_ms)
{
	uint64_t flap_ms = b->initial_ms < ES_BACKOFF_FLAP_MS ? b->initial_ms : ES_BACKOFF_FLAP_MS;
	if (up_ms < flap_ms)
		return es_backoff_next(b); /* it flapped: back off as after a failed dial */
	return 0; /* the sequence stays where it was: a failure of this redial backs off from it */
}

void es_backoff_reset(struct es_backoff *b)
{
	b->attempt = 0;
}
