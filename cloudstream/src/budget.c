/*
 * cloudstream/src/budget.c — when a base-protocol tunnel stops reading (pure; see budget.h).
 */
#include "budget.h"

bool cs_budget_pause_tunnel(const struct st_budget *node, const struct st_budget *process,
                            unsigned full_streams)
{
	return full_streams > 0 || st_budget_over(node) ||
	       (st_budget_over(process) && node->used_bytes > 0);
}
