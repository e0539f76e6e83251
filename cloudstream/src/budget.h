/*
 * cloudstream/src/budget.h — byte budgets for what cloudstream queues toward the consumers of
 * its streams (the apiserver connections), and the policy that reads them (pure).
 *
 * There are two budgets, each with one owner: one per node, owned by that node's tunnel, and
 * one for the process, owned by the set of all tunnels (both in the tunnel module:
 * tunnel_stream.c is the only code that charges or credits them). Every byte an endpoint holds
 * toward its consumer is charged to the process budget, and to its node's budget while the
 * endpoint has a stream on that node; it is credited when written out or dropped.
 *
 * Unlike a credit reservation, a charge is never refused: the bytes have arrived already. The
 * budgets decide what happens next:
 *   - with credit flow control (our edges) a full budget refuses new streams (503), since each
 *     stream is bounded by its window and pausing the tunnel would hold up every other stream
 *     of the node;
 *   - with a base-protocol edge (no credit) a budget over its limit, or a stream over its high
 *     mark, pauses the tunnel; tunnels paused for the process budget resume together once half
 *     of it is free (hysteresis).
 *
 * No I/O, no clock, no logging. Thread-safety: none; the loop thread owns every budget.
 */
#ifndef CLOUDSTREAM_BUDGET_H
#define CLOUDSTREAM_BUDGET_H

#include <stdbool.h>
#include <stdint.h>

struct cs_budget {
	uint64_t limit_bytes; /* read-only after cs_budget_init */
	uint64_t used_bytes;  /* read-only: charged and not yet credited */
	uint64_t peak_bytes;  /* read-only: the most used_bytes ever was */
};

/* cs_budget_init() - an empty budget of @limit_bytes. */
void cs_budget_init(struct cs_budget *b, uint64_t limit_bytes);

/* cs_budget_charge() - @n more bytes are held. Never refused (see above). */
void cs_budget_charge(struct cs_budget *b, uint64_t n);

/* cs_budget_credit() - @n bytes charged earlier are gone (written or dropped). Crediting more
 * than is charged is a bug of ours (asserted). */
void cs_budget_credit(struct cs_budget *b, uint64_t n);

/* cs_budget_full() - used >= limit: streams with credit flow control are refused. */
bool cs_budget_full(const struct cs_budget *b);

/* cs_budget_over() - used > limit: base-protocol tunnels holding bytes are paused. */
bool cs_budget_over(const struct cs_budget *b);

/* cs_budget_half_free() - used <= limit / 2: tunnels paused for this budget may resume. */
bool cs_budget_half_free(const struct cs_budget *b);

/*
 * cs_budget_refusing() - which budget refuses a new stream with credit flow control: @node when
 * it is full, else @process when it is full, else NULL (admitted).
 */
const struct cs_budget *cs_budget_refusing(const struct cs_budget *node,
                                           const struct cs_budget *process);

/*
 * cs_budget_pause_tunnel() - should a base-protocol tunnel whose node budget is @node stop
 * reading? Yes while @full_streams of its streams are over their high mark, while @node is over
 * its limit, and, while @process is over its limit, whenever the tunnel holds any byte.
 */
bool cs_budget_pause_tunnel(const struct cs_budget *node, const struct cs_budget *process,
                            unsigned full_streams);

#endif /* CLOUDSTREAM_BUDGET_H */
