/* Unit tests for the pure part of list and watch (cloudstream/src/kwatch.h): a watch event
 * line parsed, a watch stream split into bounded lines. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include <json-c/json.h>

#include "guard.h"
#include "kwatch.h"

/* ---- cs_kwatch_event_parse ---------------------------------------------------------------- */

struct parsed {
	bool ok;
	struct cs_kwatch_event ev;
	char type_name[16], rv[32], name[32];
};

static struct parsed parse(const char *line, size_t len)
{
	struct parsed p = {0};
	struct json_object *root = cs_kwatch_event_parse(line, len, &p.ev), *meta, *name;
	if (root == NULL)
		return p;
	p.ok = true;
	snprintf(p.type_name, sizeof p.type_name, "%s", p.ev.type_name);
	snprintf(p.rv, sizeof p.rv, "%s", p.ev.rv ? p.ev.rv : "(none)");
	if (json_object_object_get_ex(p.ev.object, "metadata", &meta) &&
	    json_object_object_get_ex(meta, "name", &name))
		snprintf(p.name, sizeof p.name, "%s", json_object_get_string(name));
	json_object_put(root);
	return p;
}

static struct parsed parse_str(const char *line)
{
	return parse(line, strlen(line));
}

static void test_cs_kwatch_event_parse__every_type(void **state)
{
	(void)state;
	static const struct {
		const char *name;
		enum cs_kwatch_type type;
	} types[] = {{"ADDED", CS_KWATCH_ADDED},     {"MODIFIED", CS_KWATCH_MODIFIED},
	             {"DELETED", CS_KWATCH_DELETED}, {"BOOKMARK", CS_KWATCH_BOOKMARK},
	             {"ERROR", CS_KWATCH_ERROR},     {"SOMETHING", CS_KWATCH_OTHER},
	             {"added", CS_KWATCH_OTHER}};
	for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
		char line[256];
		snprintf(line, sizeof line,
		         "{\"type\":\"%s\",\"object\":{\"kind\":\"Node\",\"metadata\":"
		         "{\"name\":\"edge-1\",\"resourceVersion\":\"4711\"}}}",
		         types[i].name);
		struct parsed p = parse_str(line);
		assert_true(p.ok);
		assert_int_equal(p.ev.type, types[i].type);
		assert_string_equal(p.type_name, types[i].name);
		assert_string_equal(p.rv, "4711");
		assert_string_equal(p.name, "edge-1");
		assert_int_equal(p.ev.code, 0);
		assert_int_equal(cs_kwatch_type_of(types[i].name), types[i].type);
	}
}

static void test_cs_kwatch_event_parse__error_410(void **state)
{
	(void)state;
	struct parsed p =
	        parse_str("{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":"
	                  "\"v1\",\"status\":\"Failure\",\"message\":\"too old resource "
	                  "version: 1 (5)\",\"reason\":\"Expired\",\"code\":410}}");
	assert_true(p.ok);
	assert_int_equal(p.ev.type, CS_KWATCH_ERROR);
	assert_int_equal(p.ev.code, 410);
	assert_string_equal(p.rv, "(none)");
	/* a code on another type is not read */
	p = parse_str("{\"type\":\"ADDED\",\"object\":{\"code\":410}}");
	assert_true(p.ok);
	assert_int_equal(p.ev.code, 0);
}

static void test_cs_kwatch_event_parse__bookmark_and_odd_rv(void **state)
{
	(void)state;
	struct parsed p =
	        parse_str("{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"Node\",\"metadata\":"
	                  "{\"resourceVersion\":\"12345\"}}}");
	assert_true(p.ok);
	assert_int_equal(p.ev.type, CS_KWATCH_BOOKMARK);
	assert_string_equal(p.rv, "12345");
	/* a resourceVersion that is not a string is none */
	p = parse_str("{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"resourceVersion\":5}}}");
	assert_true(p.ok);
	assert_string_equal(p.rv, "(none)");
	p = parse_str("{\"type\":\"ADDED\",\"object\":{\"metadata\":7}}");
	assert_true(p.ok);
	assert_string_equal(p.rv, "(none)");
}

static void test_cs_kwatch_event_parse__not_events(void **state)
{
	(void)state;
	static const char *const bad[] = {
	        "",
	        "{",
	        "not json",
	        "[]",
	        "{}",
	        "{\"type\":\"ADDED\"}",
	        "{\"object\":{}}",
	        "{\"type\":7,\"object\":{}}",
	        "{\"type\":\"ADDED\",\"object\":[]}",
	        "{\"type\":\"ADDED\",\"object\":\"x\"}",
	        "{\"type\":\"ADDED\",\"object\":null}",
	        "{\"kind\":\"Status\",\"code\":410}", /* a Status answer, not an event */
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct cs_kwatch_event ev = {.type = CS_KWATCH_BOOKMARK, .code = -1};
		struct json_object *root = cs_kwatch_event_parse(bad[i], strlen(bad[i]), &ev);
		assert_null(root);
		assert_int_equal(ev.type, CS_KWATCH_BOOKMARK); /* untouched */
		assert_int_equal(ev.code, -1);
	}
}

/* Every proper prefix of an event is not one; the whole line at the end of a guard page is
 * read without a byte past it. */
static void test_cs_kwatch_event_parse__prefixes_and_guard(void **state)
{
	(void)state;
	const char *line = "{\"type\":\"DELETED\",\"object\":{\"metadata\":{\"name\":\"n\","
	                   "\"resourceVersion\":\"9\"}}}";
	size_t len = strlen(line);
	for (size_t n = 0; n < len; n++) {
		struct guard_buf g;
		assert_int_equal(guard_new(&g, line, n), 0);
		struct cs_kwatch_event ev;
		struct json_object *root = cs_kwatch_event_parse((const char *)g.data, n, &ev);
		assert_null(root);
		guard_free(&g);
	}
	struct guard_buf g;
	assert_int_equal(guard_new(&g, line, len), 0);
	struct parsed p = parse((const char *)g.data, len);
	assert_true(p.ok);
	assert_int_equal(p.ev.type, CS_KWATCH_DELETED);
	assert_string_equal(p.rv, "9");
	assert_string_equal(p.name, "n");
	guard_free(&g);
}

/* ---- cs_kwatch_lines ---------------------------------------------------------------------- */

struct seen {
	char text[1024]; /* the lines joined with '|' */
	size_t n;
};

static void on_line(void *user, const char *line, size_t len)
{
	struct seen *s = user;
	assert_true(len > 0);
	assert_null(memchr(line, '\n', len));
	size_t used = strlen(s->text);
	snprintf(s->text + used, sizeof s->text - used, "%s%.*s", s->n ? "|" : "", (int)len, line);
	s->n++;
}

/* Feeds @in in pieces of @piece bytes (0: all at once), then ends the stream. */
static struct seen split(const char *in, size_t piece, size_t cap, size_t *over)
{
	struct seen s = {0};
	char buf[64];
	struct cs_kwatch_lines l;
	cs_kwatch_lines_init(&l, buf, cap);
	size_t len = strlen(in);
	for (size_t i = 0; i < len;) {
		size_t n = piece && piece < len - i ? piece : len - i;
		cs_kwatch_lines_feed(&l, in + i, n, on_line, &s);
		i += n;
	}
	cs_kwatch_lines_end(&l, on_line, &s);
	*over = l.over;
	return s;
}

static void test_cs_kwatch_lines__any_split_same_lines(void **state)
{
	(void)state;
	const char *in = "{\"a\":1}\n\n{\"b\":22}\n{\"c\":333}\n";
	for (size_t piece = 0; piece <= strlen(in); piece++) {
		size_t over;
		struct seen s = split(in, piece, 64, &over);
		assert_string_equal(s.text, "{\"a\":1}|{\"b\":22}|{\"c\":333}");
		assert_int_equal(s.n, 3);
		assert_int_equal(over, 0);
	}
}

static void test_cs_kwatch_lines__last_line_without_newline(void **state)
{
	(void)state;
	for (size_t piece = 0; piece <= 5; piece++) {
		size_t over;
		struct seen s = split("one\ntwo", piece, 64, &over);
		assert_string_equal(s.text, "one|two");
		assert_int_equal(over, 0);
	}
}

/* A line of cap-1, cap and cap+1 bytes, split or whole: the last is dropped and counted, the
 * lines around it kept. */
static void test_cs_kwatch_lines__cap_limits(void **state)
{
	(void)state;
	const size_t cap = 8;
	char in[64];
	snprintf(in, sizeof in, "a\n%s\n%s\n%s\nz\n", "1234567", "12345678", "123456789");
	for (size_t piece = 0; piece <= strlen(in); piece++) {
		size_t over;
		struct seen s = split(in, piece, cap, &over);
		assert_string_equal(s.text, "a|1234567|12345678|z");
		assert_int_equal(over, 1);
	}
	/* an over-long last line without '\n' is not handed over at the end either */
	for (size_t piece = 1; piece <= 4; piece++) {
		size_t over;
		struct seen s = split("ok\n123456789", piece, cap, &over);
		assert_string_equal(s.text, "ok");
		assert_int_equal(over, 1);
	}
}

/* Without a buffer nothing fits: every line is counted as over, none handed over. */
static void test_cs_kwatch_lines__no_buffer(void **state)
{
	(void)state;
	struct seen s = {0};
	struct cs_kwatch_lines l;
	cs_kwatch_lines_init(&l, NULL, 100);
	cs_kwatch_lines_feed(&l, "ab\ncd\nef", 8, on_line, &s);
	cs_kwatch_lines_feed(&l, "gh\n", 3, on_line, &s);
	cs_kwatch_lines_end(&l, on_line, &s);
	assert_int_equal(s.n, 0);
	assert_int_equal(l.over, 3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_cs_kwatch_event_parse__every_type),
	        cmocka_unit_test(test_cs_kwatch_event_parse__error_410),
	        cmocka_unit_test(test_cs_kwatch_event_parse__bookmark_and_odd_rv),
	        cmocka_unit_test(test_cs_kwatch_event_parse__not_events),
	        cmocka_unit_test(test_cs_kwatch_event_parse__prefixes_and_guard),
	        cmocka_unit_test(test_cs_kwatch_lines__any_split_same_lines),
	        cmocka_unit_test(test_cs_kwatch_lines__last_line_without_newline),
	        cmocka_unit_test(test_cs_kwatch_lines__cap_limits),
	        cmocka_unit_test(test_cs_kwatch_lines__no_buffer),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
