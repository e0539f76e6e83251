/* Unit tests for logging (stream/log.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include <stream/err.h>
#include <stream/log.h>

static char last[2048];
static int lines;

static void sink(enum st_log_level level, const char *line, void *user)
{
	(void)level;
	(void)user;
	strncpy(last, line, sizeof last - 1);
	lines++;
}

static void test_levels(void **state)
{
	(void)state;
	enum st_log_level l;
	assert_int_equal(st_log_level_parse("debug", &l), 0);
	assert_int_equal(l, ST_LOG_DEBUG);
	assert_int_equal(st_log_level_parse("WARN", &l), 0);
	assert_int_equal(l, ST_LOG_WARN);
	assert_int_equal(st_log_level_parse("verbose", &l), -EINVAL);
	st_log_set_sink(sink, NULL);
	st_log_set_level(ST_LOG_WARN);
	lines = 0;
	st_info("dropped");
	st_dbg("dropped too");
	assert_int_equal(lines, 0);
	st_warn("kept %d", 42);
	assert_int_equal(lines, 1);
	assert_non_null(strstr(last, " warn  kept 42\n"));
	st_log_set_level(ST_LOG_INFO);
	st_log_set_sink(NULL, NULL);
}

static void test_format(void **state)
{
	(void)state;
	st_log_set_sink(sink, NULL);
	st_log_set_level(ST_LOG_DEBUG);
	st_err_ns("edge-1", 300, "stream reset: %s", "protocol violation");
	/* 2026-11-22T13:00:00.123Z error node=edge-1 stream=300 stream reset: ... */
	assert_int_equal(last[4], '-');
	assert_int_equal(last[10], 'T');
	assert_int_equal(last[23], 'Z');
	assert_non_null(strstr(last, "Z error node=edge-1 stream=300 stream reset: protocol "
	                             "violation\n"));
	st_info_ns(NULL, 0, "plain");
	assert_null(strstr(last, "node="));
	assert_null(strstr(last, "stream="));
	/* Long messages are cut at 1 KiB and still end in one newline. */
	char big[3000];
	memset(big, 'x', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	st_info("%s", big);
	size_t n = strlen(last);
	assert_true(n <= 1024);
	assert_int_equal(last[n - 1], '\n');
	assert_null(strchr(last, '\n') == last + n - 1 ? NULL : "two newlines");
	st_log_set_level(ST_LOG_INFO);
	st_log_set_sink(NULL, NULL);
	st_info("to stderr: %s", "ok"); /* the default sink works */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_levels),
	        cmocka_unit_test(test_format),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
