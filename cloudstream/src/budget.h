/*
 * cloudstream/src/budget.h — the policy over cloudstream's byte budgets (pure).
 *
 * The budgets are stream/budget.h's, each with one owner in the tunnel module: one per node,
 * owned by that node's tunnel, and one for the process, owned by the set of all tunnels. What
 * is charged depends on the edge:
 *   - with credit flow control (our edges) the session charges every stream's receive window
 *     (stream/session.h): a stream whose first window does not fit is refused (503), windows
 *     grow and shrink with the room left, and the tunnel is never paused, since that would hold
 *     up every other stream of the node; the bytes an endpoint queues toward its apiserver are
 *     inside its window and are not charged twice;
 *   - with a base-protocol edge (no credit) the bytes endpoints queue toward their apiservers
 *     are charged as they arrive (st_budget_force: they cannot be refused), and a budget over
 *     its limit, or a stream over its high mark, pauses the tunnel (the rule below); tunnels
 *     paused for the process budget resume together once half of it is free (hysteresis).
 *
 * No I/O, no clock, no logging. Thread-safety: none; the loop thread owns every budget.
 */
#ifndef CLOUDSTREAM_BUDGET_H
#define CLOUDSTREAM_BUDGET_H

#include <stdbool.h>

#include <stream/budget.h>

/*
 * cs_budget_pause_tunnel() - should a base-protocol tunnel whose node budget is @node stop
 * reading? Yes while @full_streams of its streams are over their high mark, while @node is over
 * its limit, and, while @process is over its limit, whenever the tunnel holds any byte.
 */
bool cs_budget_pause_tunnel(const struct st_budget *node, const struct st_budget *process,
                            unsigned full_streams);

#endif /* CLOUDSTREAM_BUDGET_H */
