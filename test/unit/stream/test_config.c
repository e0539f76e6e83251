/* Unit tests for table-driven configuration (stream/config.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stream/config.h>
#include <stream/log.h>

#include "config_fixture.h"
#include "testutil.h"

static char err[512];

static void test_st_config_defaults__applied(void **state)
{
	(void)state;
	struct cfg c = {0};
	assert_int_equal(st_config_defaults(&spec, &c, err, sizeof err), 0);
	assert_string_equal(c.listen, "0.0.0.0:10004");
	assert_int_equal(c.n, 5);
	assert_int_equal(c.timeout_ms, 30000);
	assert_int_equal(c.bytes, 1u << 20);
	assert_int_equal(c.mode, 0);
	assert_false(c.on);
	st_config_cleanup(&spec, &c);
	assert_null(c.listen);
}

static void expect_set(struct cfg *c, const char *name, const char *v, int want)
{
	err[0] = '\0';
	assert_int_equal(st_config_set(&spec, c, name, v, err, sizeof err), want);
	if (want < 0)
		assert_non_null(strstr(err, name)); /* the message names the option */
}

static void test_st_config_set__values_and_limits(void **state)
{
	(void)state;
	struct cfg c = {0};
	expect_set(&c, "n", "1", 0);
	expect_set(&c, "n", "0", -EINVAL);   /* min - 1 */
	expect_set(&c, "n", "100", 0);       /* max */
	expect_set(&c, "n", "101", -EINVAL); /* max + 1 */
	expect_set(&c, "n", "-1", -EINVAL);
	expect_set(&c, "n", "", -EINVAL);
	expect_set(&c, "n", "99999999999999999999999", -EINVAL);
	expect_set(&c, "timeout", "250ms", 0);
	assert_int_equal(c.timeout_ms, 250);
	expect_set(&c, "timeout", "2m", 0);
	assert_int_equal(c.timeout_ms, 120000);
	expect_set(&c, "timeout", "1h", 0);
	expect_set(&c, "timeout", "99ms", -EINVAL);
	expect_set(&c, "timeout", "1.5s", -EINVAL);
	expect_set(&c, "timeout", "5x", -EINVAL);
	expect_set(&c, "timeout", "18446744073709551615h", -EINVAL); /* overflow in the unit */
	expect_set(&c, "bytes", "64KiB", 0);
	assert_int_equal(c.bytes, 65536);
	expect_set(&c, "bytes", "1GiB", 0);
	expect_set(&c, "bytes", "2GiB", -EINVAL);
	expect_set(&c, "bytes", "1023", -EINVAL);
	expect_set(&c, "bytes", "1MB", -EINVAL); /* only binary units: no guessing */
	expect_set(&c, "on", "true", 0);
	assert_true(c.on);
	expect_set(&c, "on", "yes", -EINVAL);
	expect_set(&c, "mode", "ignore", 0);
	assert_int_equal(c.mode, 2);
	expect_set(&c, "mode", "none", -EINVAL);
	assert_non_null(strstr(err, "trust-header")); /* lists the valid values */
	expect_set(&c, "subjects", "a,b,,c", 0);
	expect_set(&c, "subjects", "d", 0);
	assert_int_equal(c.subjects.n, 4);
	assert_string_equal(c.subjects.v[3], "d");
	assert_int_equal(st_config_set(&spec, &c, "nope", "1", err, sizeof err), -ENOENT);
	st_config_cleanup(&spec, &c);
}

static void test_st_config_parse_json__types(void **state)
{
	(void)state;
	struct cfg c = {0};
	assert_int_equal(st_config_defaults(&spec, &c, err, sizeof err), 0);
	const char *j = "{\"listen\":\"127.0.0.1:1\",\"n\":7,\"timeout\":\"5s\",\"bytes\":2048,"
	                "\"on\":true,\"mode\":\"trust-header\",\"subjects\":[\"x\",\"O=y\"]}";
	assert_int_equal(st_config_parse_json(&spec, &c, j, strlen(j), "f.json", err, sizeof err),
	                 0);
	assert_string_equal(c.listen, "127.0.0.1:1");
	assert_int_equal(c.n, 7);
	assert_int_equal(c.timeout_ms, 5000);
	assert_int_equal(c.bytes, 2048);
	assert_true(c.on);
	assert_int_equal(c.mode, 1);
	assert_int_equal(c.subjects.n, 2);
	static const char *const bad[] = {
	        "{\"lisen\":\"x\"}",    /* unknown key: a typo is an error */
	        "{\"n\":\"seven\"}",    /* bad value */
	        "{\"n\":true}",         /* wrong type */
	        "{\"subjects\":\"x\"}", /* a list needs an array */
	        "{\"subjects\":[1]}",   /* of strings */
	        "[1,2]",                /* not an object */
	        "{\"n\":7} {\"n\":8}",  /* trailing document */
	        "{\"n\":",              /* truncated */
	        "",                     /* empty */
	        "{\"n\":-3}",           /* negative */
	        "{\"n\":7,}",           /* a trailing comma */
	        "{\"n\":7,\"n\":8}",    /* a key twice: json-c would keep the last */
	        "{'n':7}",              /* single quotes */
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		err[0] = '\0';
		assert_int_equal(st_config_parse_json(&spec, &c, bad[i], strlen(bad[i]), "f.json",
		                                      err, sizeof err),
		                 -EINVAL);
		assert_non_null(strstr(err, "f.json"));
	}
	/* Quotes, commas, braces and a repeated word inside values are not keys. */
	const char *tricky =
	        "{\"listen\":\"a\\\",\\\"n\\\":{\",\"subjects\":[\"listen\",\"n\"],\"n\":3}";
	assert_int_equal(
	        st_config_parse_json(&spec, &c, tricky, strlen(tricky), "f.json", err, sizeof err),
	        0);
	assert_int_equal(c.n, 3);
	const char *dup = "{\"n\":1,\"subjects\":[],\"n\":2}";
	assert_int_equal(
	        st_config_parse_json(&spec, &c, dup, strlen(dup), "f.json", err, sizeof err),
	        -EINVAL);
	assert_non_null(strstr(err, "key \"n\" appears more than once"));
	st_config_cleanup(&spec, &c);
}

static void test_st_config_load__file_then_flags(void **state)
{
	(void)state;
	char dir[256], path[300];
	assert_int_equal(test_mkdtemp(dir, sizeof dir, "config"), 0);
	snprintf(path, sizeof path, "%s/c.json", dir);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs("{\"n\": 9, \"listen\": \"file:1\"}\n", f);
	fclose(f);
	struct cfg c = {0};
	enum st_config_action act;
	/* The flag before --config still wins over the file. */
	char *argv[] = {(char *)"t",    (char *)"--n=3",  (char *)"--config", path,
	                (char *)"--on", (char *)"--mode", (char *)"ignore",   NULL};
	assert_int_equal(st_config_load(&spec, &c, 7, argv, &act, err, sizeof err), 0);
	assert_int_equal(act, ST_CONFIG_RUN);
	assert_int_equal(c.n, 3);
	assert_string_equal(c.listen, "file:1");
	assert_true(c.on);
	assert_int_equal(c.mode, 2);
	st_config_cleanup(&spec, &c);
	char *bad1[] = {(char *)"t", (char *)"--bogus", (char *)"1", NULL};
	assert_int_equal(st_config_load(&spec, &c, 3, bad1, &act, err, sizeof err), -EINVAL);
	assert_non_null(strstr(err, "--help"));
	st_config_cleanup(&spec, &c);
	char *bad2[] = {(char *)"t", (char *)"--n", NULL};
	assert_int_equal(st_config_load(&spec, &c, 2, bad2, &act, err, sizeof err), -EINVAL);
	st_config_cleanup(&spec, &c);
	char *bad3[] = {(char *)"t", (char *)"--config", (char *)"/nonexistent/c.json", NULL};
	assert_int_equal(st_config_load(&spec, &c, 3, bad3, &act, err, sizeof err), -ENOENT);
	assert_non_null(strstr(err, "/nonexistent/c.json"));
	st_config_cleanup(&spec, &c);
	char *help[] = {(char *)"t", (char *)"--help", NULL};
	assert_int_equal(st_config_load(&spec, &c, 2, help, &act, err, sizeof err), 0);
	assert_int_equal(act, ST_CONFIG_HELP);
	st_config_cleanup(&spec, &c);
	rmtree(dir);
}

static void test_st_config_print__help_markdown_json(void **state)
{
	(void)state;
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	st_config_print_help(&spec, f);
	fclose(f);
	for (size_t i = 0; i < spec.num_opts; i++) {
		char flag[64];
		snprintf(flag, sizeof flag, "--%s", opts[i].name);
		assert_non_null(strstr(buf, flag));
	}
	free(buf);
	f = open_memstream(&buf, &len);
	st_config_print_markdown(&spec, f);
	fclose(f);
	assert_non_null(strstr(buf, "## --subjects"));
	assert_non_null(strstr(buf, "re-read on SIGHUP"));
	free(buf);
	struct cfg c = {0};
	assert_int_equal(st_config_defaults(&spec, &c, err, sizeof err), 0);
	expect_set(&c, "token", "s3cr3t", 0);
	f = open_memstream(&buf, &len);
	st_config_print_json(&spec, &c, f);
	fclose(f);
	assert_null(strstr(buf, "s3cr3t"));
	assert_non_null(strstr(buf, "<redacted>"));
	free(buf);
	st_config_cleanup(&spec, &c);
}

static void test_st_config_parse_json__alloc_failure(void **state)
{
	(void)state;
	fixture_parse_alloc_failures(st_config_parse_json,
	                             "{\"listen\":\"a\",\"subjects\":[\"x\",\"y\"]}", 60);
}

static char logged[4096];

static void log_sink(enum st_log_level level, const char *line, void *user)
{
	(void)level;
	(void)user;
	size_t n = strlen(logged);
	snprintf(logged + n, sizeof logged - n, "%s", line);
}

/* SIGHUP: the live option changes, the others are named as needing a restart and keep their
 * running values, a secret's value is never logged. */
static void test_st_config_apply_reload__live_and_restart(void **state)
{
	(void)state;
	struct cfg run = {0}, fresh = {0};
	assert_int_equal(st_config_defaults(&spec, &run, err, sizeof err), 0);
	assert_int_equal(st_config_defaults(&spec, &fresh, err, sizeof err), 0);
	st_log_set_sink(log_sink, NULL);
	logged[0] = '\0';
	assert_int_equal(st_config_apply_reload(&spec, &run, &fresh), 0);
	assert_non_null(strstr(logged, "configuration reloaded: nothing changed"));
	expect_set(&fresh, "timeout", "5s", 0);
	expect_set(&fresh, "listen", "127.0.0.1:1", 0);
	expect_set(&fresh, "token", "s3cr3t", 0);
	logged[0] = '\0';
	assert_int_equal(st_config_apply_reload(&spec, &run, &fresh), 1);
	st_log_set_sink(NULL, NULL);
	assert_int_equal(run.timeout_ms, 5000);           /* applied */
	assert_string_equal(run.listen, "0.0.0.0:10004"); /* kept */
	assert_null(run.token);                           /* kept */
	assert_non_null(strstr(logged, "configuration reloaded: timeout 5000 ms (was 30000 ms)"));
	assert_non_null(strstr(logged, "needs a restart: listen (runs with \"0.0.0.0:10004\", "
	                               "the file says \"127.0.0.1:1\")"));
	assert_non_null(strstr(logged, "needs a restart: token (runs with <redacted>"));
	assert_null(strstr(logged, "s3cr3t"));
	st_config_cleanup(&spec, &run);
	st_config_cleanup(&spec, &fresh);
}

/* --check-config is an action; the other flags still apply. */
static void test_st_config_load__check_config(void **state)
{
	(void)state;
	struct cfg c = {0};
	enum st_config_action act;
	char *argv[] = {(char *)"t", (char *)"--check-config", (char *)"--n", (char *)"4", NULL};
	assert_int_equal(st_config_load(&spec, &c, 4, argv, &act, err, sizeof err), 0);
	assert_int_equal(act, ST_CONFIG_CHECK);
	assert_int_equal(c.n, 4);
	st_config_cleanup(&spec, &c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_st_config_defaults__applied),
	        cmocka_unit_test(test_st_config_set__values_and_limits),
	        cmocka_unit_test(test_st_config_parse_json__types),
	        cmocka_unit_test(test_st_config_load__file_then_flags),
	        cmocka_unit_test(test_st_config_print__help_markdown_json),
	        cmocka_unit_test(test_st_config_parse_json__alloc_failure),
	        cmocka_unit_test(test_st_config_apply_reload__live_and_restart),
	        cmocka_unit_test(test_st_config_load__check_config),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
