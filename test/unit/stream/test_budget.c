/* Unit tests for byte budgets (stream/budget.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stream/budget.h>
#include <stream/err.h>

static void test_st_budget_charge__limit_at_minus_one_zero_plus_one(void **state)
{
	(void)state;
	struct st_budget b;
	st_budget_init(&b, 1000);
	assert_int_equal(st_budget_charge(&b, 999), 0);
	assert_true(st_budget_fits(&b, 1));
	assert_false(st_budget_fits(&b, 2));
	assert_int_equal(st_budget_charge(&b, 2), -ENOSPC); /* refused whole */
	assert_true(b.used_bytes == 999 && b.refused == 1);
	assert_int_equal(st_budget_charge(&b, 1), 0); /* exactly the limit */
	assert_int_equal(st_budget_charge(&b, 1), -ENOSPC);
	assert_true(b.used_bytes == 1000 && b.peak_bytes == 1000 && b.refused == 2);
	st_budget_credit(&b, 600);
	assert_true(b.used_bytes == 400 && b.peak_bytes == 1000);
	st_budget_credit(&b, 5000); /* a caller bug: clamped, never wraps */
	assert_true(b.used_bytes == 0);
}

static void test_st_budget_tight__three_quarters(void **state)
{
	(void)state;
	struct st_budget b;
	st_budget_init(&b, 1000);
	assert_int_equal(st_budget_charge(&b, 750), 0);
	assert_false(st_budget_tight(&b));
	assert_int_equal(st_budget_charge(&b, 1), 0);
	assert_true(st_budget_tight(&b));
}

static void test_st_budget__unlimited_and_null(void **state)
{
	(void)state;
	struct st_budget b;
	st_budget_init(&b, 0);
	assert_int_equal(st_budget_charge(&b, UINT64_MAX / 2), 0);
	assert_false(st_budget_tight(&b));
	assert_true(st_budget_fits(NULL, UINT64_MAX));
	assert_int_equal(st_budget_charge(NULL, 5), 0);
	st_budget_credit(NULL, 5);
	assert_false(st_budget_tight(NULL));
}

static void test_st_budget_force__past_the_limit(void **state)
{
	(void)state;
	struct st_budget b;
	st_budget_init(&b, 100);
	st_budget_force(&b, 60);
	assert_false(st_budget_over(&b));
	assert_false(st_budget_half_free(&b));
	st_budget_force(&b, 70); /* arrived already: never refused */
	assert_true(b.used_bytes == 130 && b.peak_bytes == 130 && st_budget_over(&b));
	assert_int_equal(st_budget_charge(&b, 1), -ENOSPC);
	st_budget_credit(&b, 80);
	assert_false(st_budget_over(&b));
	assert_true(st_budget_half_free(&b));
	assert_true(st_budget_half_free(NULL));
	assert_false(st_budget_over(NULL));
	st_budget_force(NULL, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_st_budget_charge__limit_at_minus_one_zero_plus_one),
	        cmocka_unit_test(test_st_budget_tight__three_quarters),
	        cmocka_unit_test(test_st_budget__unlimited_and_null),
	        cmocka_unit_test(test_st_budget_force__past_the_limit),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
