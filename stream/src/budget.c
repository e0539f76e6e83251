/* Byte budgets with one owner (stream/budget.h). */
#include <stream/budget.h>
#include <stream/err.h>

#include <stddef.h>

void st_budget_init(struct st_budget *b, uint64_t limit_bytes)
{
	b->limit_bytes = limit_bytes;
	b->used_bytes = 0;
	b->peak_bytes = 0;
	b->refused = 0;
}

bool st_budget_fits(const struct st_budget *b, uint64_t n)
{
	if (b == NULL || b->limit_bytes == 0)
		return true;
	return b->used_bytes <= b->limit_bytes && n <= b->limit_bytes - b->used_bytes;
}

uint64_t st_budget_room(const struct st_budget *b)
{
	if (b == NULL || b->limit_bytes == 0)
		return UINT64_MAX;
	return b->used_bytes < b->limit_bytes ? b->limit_bytes - b->used_bytes : 0;
}

int st_budget_charge(struct st_budget *b, uint64_t n)
{
	if (b == NULL)
		return 0;
	if (!st_budget_fits(b, n)) {
		b->refused++;
		return -ENOSPC;
	}
	b->used_bytes += n;
	if (b->used_bytes > b->peak_bytes)
		b->peak_bytes = b->used_bytes;
	return 0;
}

void st_budget_force(struct st_budget *b, uint64_t n)
{
	if (b == NULL)
		return;
	b->used_bytes += n;
	if (b->used_bytes > b->peak_bytes)
		b->peak_bytes = b->used_bytes;
}

bool st_budget_over(const struct st_budget *b)
{
	return b != NULL && b->limit_bytes != 0 && b->used_bytes > b->limit_bytes;
}

bool st_budget_half_free(const struct st_budget *b)
{
	return b == NULL || b->limit_bytes == 0 || b->used_bytes <= b->limit_bytes / 2;
}

void st_budget_credit(struct st_budget *b, uint64_t n)
{
	if (b == NULL)
		return;
	/* Crediting more than was charged is a caller bug; clamp rather than wrap. */
	b->used_bytes = n > b->used_bytes ? 0 : b->used_bytes - n;
}

bool st_budget_tight(const struct st_budget *b)
{
	if (b == NULL || b->limit_bytes == 0)
		return false;
	return b->used_bytes > b->limit_bytes - b->limit_bytes / 4;
}
