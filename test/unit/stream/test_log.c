/* Unit tests for logging (stream/log.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include <json-c/json.h>

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

/* A scope's own sink and level: lines of the thread inside it go there at its level, the
 * process-wide settings stay for everyone else; scopes nest and give way on leaving. */
static char scoped_last[2048];
static int scoped_lines;

static void scoped_sink(enum st_log_level level, const char *line, void *user)
{
	(void)level;
	strncpy(scoped_last, line, sizeof scoped_last - 1);
	scoped_lines += *(int *)user;
}

static void test_scope(void **state)
{
	(void)state;
	int weight = 1;
	struct st_log_scope scope = {.sink = scoped_sink, .user = &weight};
	st_log_scope_set(&scope, ST_LOG_DEBUG, ST_LOG_FORMAT_JSON);
	st_log_set_sink(sink, NULL);
	st_log_set_level(ST_LOG_WARN);
	lines = scoped_lines = 0;
	assert_null(st_log_current());
	const struct st_log_scope *prev = st_log_enter(&scope);
	assert_null(prev);
	assert_ptr_equal(st_log_current(), &scope);
	assert_int_equal(st_log_get_level(), ST_LOG_DEBUG);
	st_dbg("inside %d", 1);
	assert_int_equal(scoped_lines, 1);
	assert_int_equal(lines, 0);
	assert_non_null(strstr(scoped_last, "\"level\":\"debug\""));
	assert_non_null(strstr(scoped_last, "\"msg\":\"inside 1\""));
	/* a scope without a sink: its level and format, the process-wide sink */
	struct st_log_scope quiet = {.sink = NULL};
	st_log_scope_set(&quiet, ST_LOG_ERROR, ST_LOG_FORMAT_TEXT);
	const struct st_log_scope *outer = st_log_enter(&quiet);
	assert_ptr_equal(outer, &scope);
	st_warn("dropped at error");
	assert_int_equal(lines, 0);
	st_err("kept");
	assert_int_equal(lines, 1);
	assert_non_null(strstr(last, " error kept\n"));
	st_log_enter(outer);
	st_info("back inside");
	assert_int_equal(scoped_lines, 2);
	/* the level changes while a thread is inside */
	st_log_scope_set(&scope, ST_LOG_WARN, ST_LOG_FORMAT_TEXT);
	st_info("dropped now");
	assert_int_equal(scoped_lines, 2);
	st_log_enter(prev);
	assert_null(st_log_current());
	st_warn("process-wide");
	assert_int_equal(lines, 2);
	assert_int_equal(scoped_lines, 2);
	st_log_set_level(ST_LOG_INFO);
	st_log_set_sink(NULL, NULL);
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

/* One JSON object, parsed back: @key's string value, or NULL. */
static const char *json_str(struct json_object *o, const char *key)
{
	struct json_object *v;
	return json_object_object_get_ex(o, key, &v) ? json_object_get_string(v) : NULL;
}

static struct json_object *parse_last(void)
{
	size_t n = strlen(last);
	assert_true(n > 0 && n <= 1024);
	assert_int_equal(last[n - 1], '\n');
	assert_ptr_equal(strchr(last, '\n'), last + n - 1); /* one line */
	struct json_tokener *tok = json_tokener_new();
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
	struct json_object *o = json_tokener_parse_ex(tok, last, (int)(n - 1));
	assert_int_equal(json_tokener_get_error(tok), json_tokener_success);
	json_tokener_free(tok);
	assert_non_null(o);
	return o;
}

static void test_json_format(void **state)
{
	(void)state;
	st_log_set_sink(sink, NULL);
	st_log_set_level(ST_LOG_DEBUG);
	st_log_set_format(ST_LOG_FORMAT_JSON);
	assert_int_equal(st_log_get_format(), ST_LOG_FORMAT_JSON);
	st_err_ns("edge-1", 300, "stream reset: %s", "protocol violation");
	assert_int_equal(strncmp(last, "{\"time\":\"", 9), 0);
	struct json_object *o = parse_last();
	assert_string_equal(json_str(o, "level"), "error");
	assert_string_equal(json_str(o, "node"), "edge-1");
	assert_string_equal(json_str(o, "msg"), "stream reset: protocol violation");
	struct json_object *sid;
	assert_true(json_object_object_get_ex(o, "stream", &sid));
	assert_int_equal(json_object_get_int64(sid), 300);
	const char *t = json_str(o, "time"); /* 2026-11-22T13:00:00.123Z */
	assert_int_equal(strlen(t), 24);
	assert_int_equal(t[10], 'T');
	assert_int_equal(t[23], 'Z');
	json_object_put(o);
	/* No node, no stream: the keys are left out. Quotes, backslashes, control bytes. */
	st_warn("a \"quoted\" \\ path\nnext\tline\x01 end");
	o = parse_last();
	assert_string_equal(json_str(o, "level"), "warn");
	assert_null(json_str(o, "node"));
	assert_false(json_object_object_get_ex(o, "stream", NULL));
	assert_string_equal(json_str(o, "msg"), "a \"quoted\" \\ path\nnext\tline\x01 end");
	json_object_put(o);
	st_info_ns("we\"ird\n", 1, "x");
	o = parse_last();
	assert_string_equal(json_str(o, "node"), "we\"ird\n");
	json_object_put(o);
	/* Cut at 1 KiB, still one object; also when every byte needs a 6-byte escape. */
	char big[3000];
	memset(big, 'x', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	st_info_ns("n", 7, "%s", big);
	o = parse_last();
	assert_true(strlen(json_str(o, "msg")) > 900);
	json_object_put(o);
	memset(big, '\x02', sizeof big - 1);
	st_info("%s", big);
	o = parse_last();
	json_object_put(o);
	memset(big, '"', sizeof big - 1);
	st_info_ns(big, 5, "%s", big);
	o = parse_last();
	json_object_put(o);
	st_log_set_format(ST_LOG_FORMAT_TEXT);
	st_info("back to text");
	assert_non_null(strstr(last, "Z info  back to text\n"));
	st_log_set_level(ST_LOG_INFO);
	st_log_set_sink(NULL, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_levels),
	        cmocka_unit_test(test_scope),
	        cmocka_unit_test(test_format),
	        cmocka_unit_test(test_json_format),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
