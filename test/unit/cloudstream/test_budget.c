/* Unit tests for the byte budgets and their pause/refusal policy (cloudstream/src/budget.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "budget.h"

static void test_cs_budget_charge__credit_and_peak(void **state)
{
	(void)state;
	struct cs_budget b;
	cs_budget_init(&b, 100);
	assert_int_equal(b.used_bytes, 0);
	cs_budget_charge(&b, 60);
	cs_budget_charge(&b, 70); /* never refused: the bytes have arrived */
	assert_int_equal(b.used_bytes, 130);
	assert_int_equal(b.peak_bytes, 130);
	cs_budget_credit(&b, 100);
	assert_int_equal(b.used_bytes, 30);
	assert_int_equal(b.peak_bytes, 130);
	cs_budget_credit(&b, 30);
	assert_int_equal(b.used_bytes, 0);
}

/* Each limit at -1 / 0 / +1. */
static void test_cs_budget_full__over_half_free_at_the_limit(void **state)
{
	(void)state;
	struct cs_budget b;
	cs_budget_init(&b, 100);
	cs_budget_charge(&b, 99);
	assert_false(cs_budget_full(&b));
	assert_false(cs_budget_over(&b));
	cs_budget_charge(&b, 1); /* 100 */
	assert_true(cs_budget_full(&b));
	assert_false(cs_budget_over(&b));
	cs_budget_charge(&b, 1); /* 101 */
	assert_true(cs_budget_over(&b));
	cs_budget_credit(&b, 50); /* 51 */
	assert_false(cs_budget_half_free(&b));
	cs_budget_credit(&b, 1); /* 50 */
	assert_true(cs_budget_half_free(&b));
	cs_budget_credit(&b, 1); /* 49 */
	assert_true(cs_budget_half_free(&b));
}

static void test_cs_budget_refusing__node_first(void **state)
{
	(void)state;
	struct cs_budget node, proc;
	cs_budget_init(&node, 10);
	cs_budget_init(&proc, 100);
	assert_null(cs_budget_refusing(&node, &proc));
	cs_budget_charge(&proc, 100);
	assert_ptr_equal(cs_budget_refusing(&node, &proc), &proc);
	cs_budget_charge(&node, 10);
	assert_ptr_equal(cs_budget_refusing(&node, &proc), &node);
	cs_budget_credit(&proc, 100);
	assert_ptr_equal(cs_budget_refusing(&node, &proc), &node);
	cs_budget_credit(&node, 1);
	assert_null(cs_budget_refusing(&node, &proc));
}

static void test_cs_budget_pause_tunnel__each_reason(void **state)
{
	(void)state;
	struct cs_budget node, proc;
	cs_budget_init(&node, 10);
	cs_budget_init(&proc, 100);
	assert_false(cs_budget_pause_tunnel(&node, &proc, 0));
	assert_true(cs_budget_pause_tunnel(&node, &proc, 1)); /* a full stream */
	cs_budget_charge(&node, 10);
	assert_false(cs_budget_pause_tunnel(&node, &proc, 0)); /* at the limit: not over */
	cs_budget_charge(&node, 1);
	assert_true(cs_budget_pause_tunnel(&node, &proc, 0)); /* node over */
	cs_budget_credit(&node, 11);
	cs_budget_charge(&proc, 101);
	/* Process over: only tunnels that hold bytes stop reading. */
	assert_false(cs_budget_pause_tunnel(&node, &proc, 0));
	cs_budget_charge(&node, 1);
	assert_true(cs_budget_pause_tunnel(&node, &proc, 0));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_cs_budget_charge__credit_and_peak),
	        cmocka_unit_test(test_cs_budget_full__over_half_free_at_the_limit),
	        cmocka_unit_test(test_cs_budget_refusing__node_first),
	        cmocka_unit_test(test_cs_budget_pause_tunnel__each_reason),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
