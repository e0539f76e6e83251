/*
 * stream/budget.h — a byte budget with one owner: whoever holds bytes charges them here first
 * and credits them back when they are gone, so "how much may this node / this process hold"
 * is answered in one place instead of by counters updated from several files.
 *
 * Charges never exceed the limit: a charge that does not fit is refused whole (nothing is
 * charged) and counted. What a refusal means is the caller's policy: a session refuses a new
 * stream (its receive window cannot be reserved), a relay stops reading its source.
 *
 * Pure accounting, no I/O. Thread-safety: none; one thread (the loop) owns each budget.
 */
#ifndef STREAM_BUDGET_H
#define STREAM_BUDGET_H

#include <stdbool.h>
#include <stdint.h>

struct st_budget {
	uint64_t limit_bytes; /* 0 = no limit (read-only after st_budget_init) */
	uint64_t used_bytes;  /* read-only: charged and not yet credited */
	uint64_t peak_bytes;  /* read-only: the most used_bytes ever was */
	uint64_t refused;     /* read-only: charges that did not fit */
};

/* st_budget_init() - an empty budget of @limit_bytes (0: unlimited). */
void st_budget_init(struct st_budget *b, uint64_t limit_bytes);

/* st_budget_fits() - would a charge of @n bytes fit now? (A NULL budget always fits.) */
bool st_budget_fits(const struct st_budget *b, uint64_t n);

/* st_budget_charge() - take @n bytes: 0, or -ENOSPC when they do not fit (nothing taken,
 * counted in refused). A NULL budget takes anything. */
int st_budget_charge(struct st_budget *b, uint64_t n);

/* st_budget_room() - how many bytes a charge may take now: UINT64_MAX for a NULL or unlimited
 * budget, 0 when used is at or past the limit. */
uint64_t st_budget_room(const struct st_budget *b);

/* st_budget_force() - charge @n bytes that are here already and cannot be refused (bytes that
 * arrived without credit, from a peer without flow control): used may pass the limit, which
 * the holder's policy then acts on (st_budget_over). NULL is a no-op. */
void st_budget_force(struct st_budget *b, uint64_t n);

/* st_budget_credit() - give back @n bytes charged earlier. NULL is a no-op. */
void st_budget_credit(struct st_budget *b, uint64_t n);

/* st_budget_over() - more used than the limit (only forced charges get there). */
bool st_budget_over(const struct st_budget *b);

/* st_budget_half_free() - at most half used: holders paused for this budget may resume
 * (hysteresis). True for an unlimited or NULL budget. */
bool st_budget_half_free(const struct st_budget *b);

/* st_budget_tight() - more than three quarters used: holders should stop growing and give back
 * what they can. Never true for an unlimited or NULL budget. */
bool st_budget_tight(const struct st_budget *b);

#endif /* STREAM_BUDGET_H */
