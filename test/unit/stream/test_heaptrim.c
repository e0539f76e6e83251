/* Unit tests for handing free heap pages back (stream/heaptrim.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>

#include <stream/heaptrim.h>

#define MiB (1024u * 1024u)

static void wanted_needs_enough_free(void **state)
{
	(void)state;
	/* Under the floor: never, however small the heap in use. */
	assert_false(st_heap_trim_wanted(ST_HEAP_TRIM_MIN_FREE_BYTES - 1, 0, 0));
	assert_true(st_heap_trim_wanted(ST_HEAP_TRIM_MIN_FREE_BYTES, 0, 0));
	/* At least 10 % of what is in use: 2 MiB free beside 20 MiB yes, beside 21 MiB no. */
	assert_true(st_heap_trim_wanted(2 * MiB, 20 * MiB, 0));
	assert_false(st_heap_trim_wanted(2 * MiB, 21 * MiB, 0));
	/* No overflow at the top of size_t. */
	assert_true(st_heap_trim_wanted(SIZE_MAX, SIZE_MAX, 0));
	assert_false(st_heap_trim_wanted(SIZE_MAX / 20, SIZE_MAX, 0));
}

static void wanted_needs_growth_since_the_low_mark(void **state)
{
	(void)state;
	/* Free bytes that stayed put since the last trim were handed back already. */
	assert_false(st_heap_trim_wanted(8 * MiB, 8 * MiB, 8 * MiB));
	assert_false(
	        st_heap_trim_wanted(8 * MiB, 8 * MiB, 8 * MiB - ST_HEAP_TRIM_MIN_FREE_BYTES + 1));
	assert_true(st_heap_trim_wanted(8 * MiB, 8 * MiB, 8 * MiB - ST_HEAP_TRIM_MIN_FREE_BYTES));
	/* A low mark above what is free now (inconsistent caller): no. */
	assert_false(st_heap_trim_wanted(2 * MiB, 0, 3 * MiB));
}

static void step_trims_once_per_burst(void **state)
{
	(void)state;
	size_t low = 0;
	/* A burst left 5 MiB free beside 20 MiB: trim once... */
	assert_true(st_heap_trim_step(&low, 5 * MiB, 20 * MiB));
	assert_int_equal(low, 5 * MiB);
	/* ...not again while the free bytes stay put or wobble a little... */
	assert_false(st_heap_trim_step(&low, 5 * MiB - 4096, 20 * MiB));
	assert_false(st_heap_trim_step(&low, 5 * MiB + 4096, 20 * MiB));
	assert_int_equal(low, 5 * MiB - 4096);
	/* ...until they were reused (pages touched again) and freed by a new burst. */
	assert_false(st_heap_trim_step(&low, 1 * MiB, 24 * MiB));
	assert_int_equal(low, 1 * MiB);
	assert_true(st_heap_trim_step(&low, 5 * MiB, 20 * MiB));
	assert_int_equal(low, 5 * MiB);
	/* Growth alone is not enough when the heap in use dwarfs it. */
	assert_false(st_heap_trim_step(&low, 7 * MiB, 200 * MiB));
}

static void tick_reports_and_trims(void **state)
{
	(void)state;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
	/* The sanitizers' allocators are not glibc's: mallinfo2() sees none of their heap. */
	skip();
#else
	/* Many small blocks, then every one freed but the last (which pins the heap's top):
	 * megabytes free inside the heap, the case the trim is for. */
	enum { N = 8192 };
	static void *blocks[N];
	for (size_t i = 0; i < N; i++) {
		blocks[i] = malloc(1000);
		assert_non_null(blocks[i]);
	}
	for (size_t i = 0; i + 1 < N; i++)
		free(blocks[i]);
	size_t low = 0;
	struct st_heap_trim_result r;
	assert_true(st_heap_trim_tick(&low, &r));
	assert_true(r.trimmed);
	assert_true(r.free_bytes >= ST_HEAP_TRIM_MIN_FREE_BYTES);
	assert_true(r.elapsed_ms >= 0.0);
	/* Nothing new freed since: the next look does nothing. */
	assert_false(st_heap_trim_tick(&low, &r));
	assert_false(r.trimmed);
	free(blocks[N - 1]);
#endif
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(wanted_needs_enough_free),
	        cmocka_unit_test(wanted_needs_growth_since_the_low_mark),
	        cmocka_unit_test(step_trims_once_per_burst),
	        cmocka_unit_test(tick_reports_and_trims),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
