/* Unit tests for cloudstream's budget policy (cloudstream/src/budget.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "budget.h"

static void test_cs_budget_pause_tunnel__each_reason(void **state)
{
	(void)state;
	struct st_budget node, proc;
	st_budget_init(&node, 10);
	st_budget_init(&proc, 100);
	assert_false(cs_budget_pause_tunnel(&node, &proc, 0));
	assert_true(cs_budget_pause_tunnel(&node, &proc, 1)); /* a full stream */
	st_budget_force(&node, 10);
	assert_false(cs_budget_pause_tunnel(&node, &proc, 0)); /* at the limit: not over */
	st_budget_force(&node, 1);
	assert_true(cs_budget_pause_tunnel(&node, &proc, 0)); /* node over */
	st_budget_credit(&node, 11);
	st_budget_force(&proc, 101);
	/* Process over: only tunnels that hold bytes stop reading. */
	assert_false(cs_budget_pause_tunnel(&node, &proc, 0));
	st_budget_force(&node, 1);
	assert_true(cs_budget_pause_tunnel(&node, &proc, 0));
	st_budget_credit(&proc, 51);
	assert_false(cs_budget_pause_tunnel(&node, &proc, 0));
	assert_true(st_budget_half_free(&proc));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_cs_budget_pause_tunnel__each_reason),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
