/* Allocation wrappers for fail-the-Nth-allocation tests; see failmalloc.h. Tests run their cases
 * on one thread; the counters are still atomic so a stray worker thread cannot corrupt them. */
#include "failmalloc.h"

#include <stdatomic.h>
#include <stddef.h>

void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);
void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t size);

static atomic_int countdown = -1; /* -1: off */
static atomic_int failures;

void failmalloc_fail_after(int n)
{
	atomic_store(&failures, 0);
	atomic_store(&countdown, n);
}

void failmalloc_off(void)
{
	atomic_store(&countdown, -1);
}

int failmalloc_failures(void)
{
	return atomic_load(&failures);
}

/* True when this allocation should fail. */
static int should_fail(void)
{
	int c = atomic_load(&countdown);
	while (c >= 0) {
		if (atomic_compare_exchange_weak(&countdown, &c, c - 1)) {
			if (c == 0) {
				atomic_fetch_add(&failures, 1);
				return 1;
			}
			return 0;
		}
	}
	return 0;
}

void *__wrap_malloc(size_t size)
{
	return should_fail() ? NULL : __real_malloc(size);
}

void *__wrap_calloc(size_t n, size_t size)
{
	return should_fail() ? NULL : __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t size)
{
	return should_fail() ? NULL : __real_realloc(p, size);
}
