/* Unit tests for the process metrics' parsers (stream/procstat.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include <stream/err.h>
#include <stream/procstat.h>

#include "guard.h"

/* A real line (Linux 6.1), the command name made hostile: spaces and a ')' inside. */
static const char line[] =
        "4242 (cloud) stream (x)) S 1 4242 4242 0 -1 4194560 1490 0 0 0 37 12 0 0 20 0 3 0 "
        "987654 23420928 2711 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 1 0 0 0 0 0 "
        "0 0 0 0 0 0 0 0\n";

static void test_st_proc_stat_parse__fields(void **state)
{
	(void)state;
	struct st_proc_stat s;
	memset(&s, 0xff, sizeof s);
	assert_int_equal(st_proc_stat_parse(line, sizeof line - 1, &s), 0);
	assert_int_equal(s.utime_ticks, 37);
	assert_int_equal(s.stime_ticks, 12);
	assert_int_equal(s.start_ticks, 987654);
	assert_int_equal(s.rss_pages, 2711);
}

static void test_st_proc_stat_parse__prefixes_and_garbage(void **state)
{
	(void)state;
	struct st_proc_stat s;
	/* every prefix that stops before the rss field ends is refused, never over-read */
	const char *rss = strstr(line, " 2711 ");
	size_t need = (size_t)(rss - line) + 6; /* its separator included */
	for (size_t n = 0; n < need; n++) {
		struct guard_buf g;
		assert_int_equal(guard_new(&g, line, n), 0);
		assert_int_equal(st_proc_stat_parse((const char *)g.data, n, &s), -EBADMSG);
		guard_free(&g);
	}
	struct guard_buf g;
	assert_int_equal(guard_new(&g, line, need), 0);
	assert_int_equal(st_proc_stat_parse((const char *)g.data, need, &s), 0);
	assert_int_equal(s.rss_pages, 2711);
	guard_free(&g);
	const char bad[] = "1 (x) S 1 1 1 0 -1 0 0 0 0 0 1x 2 0 0 20 0 1 0 5 1 9\n";
	assert_int_equal(st_proc_stat_parse(bad, sizeof bad - 1, &s), -EBADMSG);
	const char noparen[] = "1 x S 1 1 1 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 5 1 9\n";
	assert_int_equal(st_proc_stat_parse(noparen, sizeof noparen - 1, &s), -EBADMSG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_st_proc_stat_parse__fields),
	        cmocka_unit_test(test_st_proc_stat_parse__prefixes_and_garbage),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
