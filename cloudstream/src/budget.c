/*
 * cloudstream/src/budget.c — byte budgets and the pause/refusal policy (pure; see budget.h).
 */
#include "budget.h"

#include <assert.h>
#include <stddef.h>

void cs_budget_init(struct cs_budget *b, uint64_t limit_bytes)
{
	b->limit_bytes = limit_bytes;
	b->used_bytes = 0;
	b->peak_bytes = 0;
}

void cs_budget_charge(struct cs_budget *b, uint64_t n)
{
	b->used_bytes += n;
	if (b->used_bytes > b->peak_bytes)
		b->peak_bytes = b->used_bytes;
}

void cs_budget_credit(struct cs_budget *b, uint64_t n)
{
	assert(n <= b->used_bytes);
	b->used_bytes -= n <= b->used_bytes ? n : b->used_bytes;
}

bool cs_budget_full(const struct cs_budget *b)
{
	return b->used_bytes >= b->limit_bytes;
}

bool cs_budget_over(const struct cs_budget *b)
{
	return b->used_bytes > b->limit_bytes;
}

bool cs_budget_half_free(const struct cs_budget *b)
{
	return b->used_bytes <= b->limit_bytes / 2;
}

const struct cs_budget *cs_budget_refusing(const struct cs_budget *node,
                                           const struct cs_budget *process)
{
	if (cs_budget_full(node))
		return node;
	if (cs_budget_full(process))
		return process;
	return NULL;
}

bool cs_budget_pause_tunnel(const struct cs_budget *node, const struct cs_budget *process,
                            unsigned full_streams)
{
	return full_streams > 0 || cs_budget_over(node) ||
	       (cs_budget_over(process) && node->used_bytes > 0);
}
