/* Unit tests for the recently-gone nodes and the reconnect wait (cloudstream/src/recent.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "recent.h"

static int mark(struct cs_recent *r, const char *node, uint64_t at)
{
	return cs_recent_mark(r, node, strlen(node), at);
}

static uint64_t get(struct cs_recent *r, const char *node)
{
	return cs_recent_get(r, node, strlen(node));
}

static void test_cs_recent_mark__get_and_expire_in_order(void **state)
{
	(void)state;
	struct cs_recent *r;
	assert_int_equal(cs_recent_new(&r, 10, 7), 0);
	assert_int_equal(get(r, "edge-1"), 0); /* never seen */
	assert_int_equal(mark(r, "edge-1", 1000), 0);
	assert_int_equal(mark(r, "edge-2", 2000), 0);
	assert_int_equal(get(r, "edge-1"), 1000);
	assert_int_equal(get(r, "edge-2"), 2000);
	assert_int_equal(cs_recent_count(r), 2);
	/* Grace 5 s: nothing expires before 6000, edge-1 at 6000, edge-2 at 7000. */
	assert_int_equal(cs_recent_expire(r, 5999, 5000), 0);
	assert_int_equal(cs_recent_expire(r, 6000, 5000), 1);
	assert_int_equal(get(r, "edge-1"), 0);
	assert_int_equal(get(r, "edge-2"), 2000);
	assert_int_equal(cs_recent_expire(r, 7000, 5000), 1);
	assert_int_equal(cs_recent_count(r), 0);
	assert_int_equal(cs_recent_expire(r, 99999, 5000), 0);
	cs_recent_free(r);
}

static void test_cs_recent_mark__again_keeps_the_newest(void **state)
{
	(void)state;
	struct cs_recent *r;
	assert_int_equal(cs_recent_new(&r, 10, 7), 0);
	assert_int_equal(mark(r, "edge-1", 1000), 0);
	assert_int_equal(mark(r, "edge-1", 4000), 0); /* it came back and went again */
	assert_int_equal(get(r, "edge-1"), 4000);
	assert_int_equal(cs_recent_count(r), 1);
	/* The first mark's expiry does not forget the second. */
	assert_int_equal(cs_recent_expire(r, 6000, 5000), 0);
	assert_int_equal(get(r, "edge-1"), 4000);
	assert_int_equal(cs_recent_expire(r, 9000, 5000), 1);
	assert_int_equal(get(r, "edge-1"), 0);
	cs_recent_free(r);
}

static void test_cs_recent_mark__limits(void **state)
{
	(void)state;
	struct cs_recent *r;
	assert_int_equal(cs_recent_new(&r, 2, 7), 0);
	assert_int_equal(mark(r, "a", 1), 0);
	assert_int_equal(mark(r, "b", 1), 0);
	assert_int_equal(mark(r, "c", 1), -ENOSPC); /* full: c's requests are answered at once */
	assert_int_equal(get(r, "c"), 0);
	assert_int_equal(mark(r, "a", 2), 0); /* a node marked already is marked again */
	assert_int_equal(cs_recent_mark(r, "", 0, 1), -EINVAL);
	char longname[300];
	memset(longname, 'x', sizeof longname);
	assert_int_equal(cs_recent_mark(r, longname, sizeof longname, 1), -EINVAL);
	assert_int_equal(cs_recent_get(r, longname, sizeof longname), 0);
	/* A mark at time 0 is still a mark. */
	assert_int_equal(cs_recent_expire(r, 1000, 10), 2);
	assert_int_equal(mark(r, "z", 0), 0);
	assert_int_not_equal(get(r, "z"), 0);
	cs_recent_free(r);
	assert_int_equal(cs_recent_new(&r, 0, 7), -EINVAL);
	cs_recent_free(NULL);
}

static void test_cs_reconnect_decide__table(void **state)
{
	(void)state;
	/* down_ms, waiting_since, now, grace, waiting, cap → verdict */
	static const struct {
		uint64_t down, since, now, grace;
		size_t waiting, cap;
		enum cs_reconnect_verdict want;
	} t[] = {
	        {0, 0, 1000, 5000, 0, 10, CS_RECONNECT_NO},            /* never seen: 503 now */
	        {1000, 0, 1500, 0, 0, 10, CS_RECONNECT_NO},            /* grace 0: off */
	        {1000, 0, 1500, 5000, 0, 10, CS_RECONNECT_WAIT},       /* went 0.5 s ago */
	        {1000, 0, 5999, 5000, 0, 10, CS_RECONNECT_WAIT},       /* last ms of the grace */
	        {1000, 0, 6000, 5000, 0, 10, CS_RECONNECT_NO},         /* came after the grace */
	        {1000, 0, 1500, 5000, 10, 10, CS_RECONNECT_FULL},      /* cap reached */
	        {1000, 0, 1500, 5000, 9, 10, CS_RECONNECT_WAIT},       /* one place left */
	        {1000, 0, 1500, 5000, 0, 0, CS_RECONNECT_FULL},        /* cap 0: never waits */
	        {1000, 1500, 3000, 5000, 10, 10, CS_RECONNECT_WAIT},   /* waits already: no cap */
	        {1000, 1500, 6000, 5000, 0, 10, CS_RECONNECT_EXPIRED}, /* waited to the end */
	        {0, 1500, 3000, 5000, 0, 10, CS_RECONNECT_EXPIRED},    /* mark forgotten */
	        {4000, 1500, 6000, 5000, 0, 10, CS_RECONNECT_WAIT},    /* marked again: longer */
	        {1000, 1500, 3000, 0, 0, 10, CS_RECONNECT_NO},         /* grace 0 while waiting */
	};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		enum cs_reconnect_verdict v = cs_reconnect_decide(
		        t[i].down, t[i].since, t[i].now, t[i].grace, t[i].waiting, t[i].cap);
		if (v != t[i].want)
			fail_msg("row %zu: %d, want %d", i, v, t[i].want);
	}
	assert_int_equal(cs_reconnect_deadline_ms(1000, 5000), 6000);
}

static void test_cs_recent_expire__many(void **state)
{
	(void)state;
	struct cs_recent *r;
	assert_int_equal(cs_recent_new(&r, 100000, 1), 0);
	char name[32];
	for (unsigned i = 0; i < 20000; i++) {
		snprintf(name, sizeof name, "edge-%u", i);
		assert_int_equal(mark(r, name, 1000 + i / 10), 0);
	}
	assert_int_equal(cs_recent_count(r), 20000);
	assert_int_equal(cs_recent_expire(r, 1000 + 1000 + 5000 - 1, 5000), 10000);
	assert_int_equal(get(r, "edge-9999"), 0);
	assert_int_equal(get(r, "edge-10000"), 2000);
	cs_recent_free(r); /* the rest is freed with it (ASan) */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_cs_recent_mark__get_and_expire_in_order),
	        cmocka_unit_test(test_cs_recent_mark__again_keeps_the_newest),
	        cmocka_unit_test(test_cs_recent_mark__limits),
	        cmocka_unit_test(test_cs_reconnect_decide__table),
	        cmocka_unit_test(test_cs_recent_expire__many),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
