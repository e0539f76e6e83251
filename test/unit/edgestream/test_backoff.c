/* Unit tests for redial delays (edgestream/src/backoff.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "backoff.h"

static void test_es_backoff__doubles_with_jitter_up_to_the_cap(void **state)
{
	(void)state;
	struct es_backoff b;
	es_backoff_init(&b, 1000, 60000, 42);
	uint64_t base = 1000;
	for (int i = 0; i < 12; i++) {
		uint64_t d = es_backoff_next(&b);
		assert_true(d >= base / 2 && d <= base); /* equal jitter: [base/2, base] */
		base = base * 2 > 60000 ? 60000 : base * 2;
	}
	/* Stays at the cap. */
	for (int i = 0; i < 100; i++) {
		uint64_t d = es_backoff_next(&b);
		assert_true(d >= 30000 && d <= 60000);
	}
	es_backoff_reset(&b);
	uint64_t d = es_backoff_next(&b);
	assert_true(d >= 500 && d <= 1000);
}

static void test_es_backoff__edges_do_not_redial_in_lockstep(void **state)
{
	(void)state;
	/* Two edges with different seeds draw different delays for the same attempt. */
	int same = 0;
	for (uint64_t seed = 1; seed < 50; seed++) {
		struct es_backoff a, b;
		es_backoff_init(&a, 8000, 8000, seed);
		es_backoff_init(&b, 8000, 8000, seed + 1000);
		if (es_backoff_next(&a) == es_backoff_next(&b))
			same++;
	}
	assert_true(same < 5);
}

static void test_es_backoff__degenerate_settings(void **state)
{
	(void)state;
	struct es_backoff b;
	es_backoff_init(&b, 0, 0, 0); /* 1 ms, cap raised to the initial, a fixed seed */
	for (int i = 0; i < 100; i++)
		assert_true(es_backoff_next(&b) <= 1);
	es_backoff_init(&b, 5, 1u << 30, 7);
	for (int i = 0; i < 200; i++) /* no overflow past the cap after many failures */
		assert_true(es_backoff_next(&b) <= (1u << 30));
}

static void test_es_backoff_after_up__first_redial_at_once(void **state)
{
	(void)state;
	for (uint64_t seed = 1; seed <= 1000; seed++) {
		struct es_backoff b;
		es_backoff_init(&b, 1000, 60000, seed);
		assert_true(es_backoff_after_up(&b, 1000) == 0);
		/* The redial failed: the sequence from its start. */
		uint64_t n = es_backoff_next(&b);
		assert_true(n >= 500 && n <= 1000);
		n = es_backoff_next(&b);
		assert_true(n >= 1000 && n <= 2000);
	}
	/* Also after earlier failures: the first redial after a tunnel that stayed up is at once,
	 * the next failure continues where the sequence stood. */
	struct es_backoff b;
	es_backoff_init(&b, 1000, 60000, 5);
	(void)es_backoff_next(&b);
	(void)es_backoff_next(&b);
	assert_true(es_backoff_after_up(&b, 30000) == 0);
	uint64_t n = es_backoff_next(&b);
	assert_true(n >= 2000 && n <= 4000);
}

static void test_es_backoff_after_up__a_flapping_tunnel_backs_off(void **state)
{
	(void)state;
	struct es_backoff b;
	es_backoff_init(&b, 1000, 60000, 9);
	/* Up for less than --backoff-initial: as a failed dial, at [initial/2, initial] first. */
	uint64_t d = es_backoff_after_up(&b, 999);
	assert_true(d >= 500 && d <= 1000);
	d = es_backoff_after_up(&b, 0);
	assert_true(d >= 1000 && d <= 2000);
	es_backoff_reset(&b);
	assert_true(es_backoff_after_up(&b, 1000) == 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_es_backoff__doubles_with_jitter_up_to_the_cap),
	        cmocka_unit_test(test_es_backoff__edges_do_not_redial_in_lockstep),
	        cmocka_unit_test(test_es_backoff__degenerate_settings),
	        cmocka_unit_test(test_es_backoff_after_up__first_redial_at_once),
	        cmocka_unit_test(test_es_backoff_after_up__a_flapping_tunnel_backs_off),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
