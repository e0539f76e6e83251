/* Unit tests for the tunnel port's handshake gate and the log budget (cloudstream/src/hsgate.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "hsgate.h"

static void addr_of(uint8_t a[16], uint8_t last)
{
	memset(a, 0, 16);
	a[10] = a[11] = 0xff; /* ::ffff:10.0.0.<last> */
	a[12] = 10;
	a[15] = last;
}

static void test_cs_hsgate__shuts_at_max_inflight_and_reopens(void **state)
{
	(void)state;
	struct cs_hsgate g;
	assert_int_equal(cs_hsgate_init(&g, 4, 4), 0);
	uint8_t a[16];
	int slots[4];
	for (int i = 0; i < 4; i++) {
		assert_true(cs_hsgate_open(&g));
		addr_of(a, (uint8_t)i);
		slots[i] = cs_hsgate_enter(&g, a);
		assert_true(slots[i] >= 0);
	}
	assert_false(cs_hsgate_open(&g));
	addr_of(a, 9);
	assert_int_equal(cs_hsgate_enter(&g, a), -EAGAIN);
	cs_hsgate_leave(&g, slots[2]);
	assert_true(cs_hsgate_open(&g));
	assert_true(cs_hsgate_enter(&g, a) >= 0); /* the freed entry is reused */
	assert_int_equal(g.inflight, 4);
	cs_hsgate_free(&g);
}

static void test_cs_hsgate__one_source_gets_its_share_only(void **state)
{
	(void)state;
	struct cs_hsgate g;
	assert_int_equal(cs_hsgate_init(&g, 16, 3), 0);
	uint8_t a[16], b[16];
	addr_of(a, 1);
	addr_of(b, 2);
	int s = -1;
	for (int i = 0; i < 3; i++) {
		int k = cs_hsgate_enter(&g, a);
		assert_true(k >= 0);
		assert_true(s < 0 || k == s); /* one entry per source */
		s = k;
	}
	assert_int_equal(cs_hsgate_enter(&g, a), -EUSERS);
	assert_int_equal(g.refused_per_source, 1);
	assert_true(cs_hsgate_enter(&g, b) >= 0); /* another source still gets in */
	cs_hsgate_leave(&g, s);
	assert_int_equal(cs_hsgate_enter(&g, a), s);
	assert_int_equal(g.inflight, 4);
	cs_hsgate_free(&g);
}

static void test_cs_hsgate__leave_is_robust(void **state)
{
	(void)state;
	struct cs_hsgate g;
	assert_int_equal(cs_hsgate_init(&g, 2, 1), 0);
	cs_hsgate_leave(&g, -1);
	cs_hsgate_leave(&g, 7);
	cs_hsgate_leave(&g, 0); /* not in use: no underflow */
	assert_int_equal(g.inflight, 0);
	cs_hsgate_free(&g);
	assert_int_equal(cs_hsgate_init(&g, 0, 1), -EINVAL);
	assert_int_equal(cs_hsgate_init(&g, 1, 0), -EINVAL);
}

static void test_cs_logbudget__drops_past_the_budget_and_reports_once(void **state)
{
	(void)state;
	struct cs_logbudget b = {0};
	uint32_t dropped;
	int written = 0;
	for (int i = 0; i < 7500; i++) /* the EMFILE spin: 7,500 lines in one second */
		written += cs_logbudget_take(&b, 1000 + (uint64_t)i / 8, 20, 10000, &dropped);
	assert_int_equal(written, 20);
	assert_true(cs_logbudget_take(&b, 11000, 20, 10000, &dropped));
	assert_int_equal(dropped, 7480);
	assert_true(cs_logbudget_take(&b, 11001, 20, 10000, &dropped));
	assert_int_equal(dropped, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_cs_hsgate__shuts_at_max_inflight_and_reopens),
	        cmocka_unit_test(test_cs_hsgate__one_source_gets_its_share_only),
	        cmocka_unit_test(test_cs_hsgate__leave_is_robust),
	        cmocka_unit_test(test_cs_logbudget__drops_past_the_budget_and_reports_once),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
