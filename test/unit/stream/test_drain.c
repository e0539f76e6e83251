/* Unit tests for the graceful stop (stream/drain.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stream/drain.h>

static void drains_until_none_left(void **state)
{
	(void)state;
	struct st_drain d = {0};
	assert_int_equal(st_drain_check(&d, 5, 1000), ST_DRAIN_RUNNING); /* nothing asked */
	assert_int_equal(st_drain_request(&d, 1000, 30000), ST_DRAIN_DRAINING);
	assert_int_equal(d.deadline_ms, 31000);
	assert_int_equal(st_drain_check(&d, 3, 2000), ST_DRAIN_DRAINING);
	assert_int_equal(st_drain_check(&d, 1, 30999), ST_DRAIN_DRAINING);
	assert_int_equal(st_drain_check(&d, 0, 5000), ST_DRAIN_STOPPING);
	assert_int_equal(st_drain_check(&d, 7, 5001), ST_DRAIN_STOPPING); /* sticky */
}

static void stops_at_the_deadline(void **state)
{
	(void)state;
	struct st_drain d = {0};
	st_drain_request(&d, 0, 10);
	assert_int_equal(st_drain_check(&d, 1, 9), ST_DRAIN_DRAINING);
	assert_int_equal(st_drain_check(&d, 1, 10), ST_DRAIN_STOPPING);
}

static void second_request_or_no_timeout_stops_at_once(void **state)
{
	(void)state;
	struct st_drain d = {0};
	st_drain_request(&d, 0, 1000);
	assert_int_equal(st_drain_request(&d, 1, 1000), ST_DRAIN_STOPPING);
	struct st_drain e = {0};
	assert_int_equal(st_drain_request(&e, 0, 0), ST_DRAIN_STOPPING);
	/* A deadline past the end of time saturates instead of wrapping into the past. */
	struct st_drain f = {0};
	st_drain_request(&f, UINT64_MAX - 5, 100);
	assert_true(f.deadline_ms == UINT64_MAX);
	assert_int_equal(st_drain_check(&f, 1, UINT64_MAX - 1), ST_DRAIN_DRAINING);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(drains_until_none_left),
	        cmocka_unit_test(stops_at_the_deadline),
	        cmocka_unit_test(second_request_or_no_timeout_stops_at_once),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
