/* Unit tests for the YAML config file and apiVersion/kind (stream/src/config_yaml.c), and the
 * SIGHUP helpers st_config_diff / st_config_copy_opt (stream/src/config.c). */
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

#include "config_fixture.h"
#include "failmalloc.h"
#include "guard.h"

static char err[512];

#define HDR "apiVersion: cloudstream.io/v1alpha1\nkind: TestConfig\n"

static int parse(struct cfg *c, const char *text)
{
	err[0] = '\0';
	return st_config_parse(&spec, c, text, strlen(text), "t.yaml", err, sizeof err);
}

static void test_st_config_parse_yaml__types(void **state)
{
	(void)state;
	struct cfg c = {0};
	assert_int_equal(st_config_defaults(&spec, &c, err, sizeof err), 0);
	const char *y = "# a comment first\n"
	                "---\n" HDR "listen: 127.0.0.1:1   # trailing comment\n"
	                "n: 7\n"
	                "timeout: 5s\n"
	                "bytes: \"2KiB\"\n"
	                "on: true\n"
	                "mode: trust-header\n"
	                "subjects:\n"
	                "  - x\n"
	                "  - 'O=y'\n"
	                "...\n";
	assert_int_equal(parse(&c, y), 0);
	assert_string_equal(c.listen, "127.0.0.1:1");
	assert_int_equal(c.n, 7);
	assert_int_equal(c.timeout_ms, 5000);
	assert_int_equal(c.bytes, 2048);
	assert_true(c.on);
	assert_int_equal(c.mode, 1);
	assert_int_equal(c.subjects.n, 2); /* replaced the default, not appended */
	assert_string_equal(c.subjects.v[0], "x");
	assert_string_equal(c.subjects.v[1], "O=y");
	/* Flow style, an empty quoted string, an empty list. */
	const char *flow = "{apiVersion: cloudstream.io/v1alpha1, kind: TestConfig, "
	                   "listen: '', subjects: []}";
	assert_int_equal(
	        st_config_parse_yaml(&spec, &c, flow, strlen(flow), "t.yaml", err, sizeof err), 0);
	assert_string_equal(c.listen, "");
	assert_int_equal(c.subjects.n, 0);
	st_config_cleanup(&spec, &c);
}

/* Each bad input: refused with -EINVAL and a message holding every one of @want. */
struct bad {
	const char *text;
	const char *want[3];
};

static void test_st_config_parse_yaml__refused(void **state)
{
	(void)state;
	static const struct bad bad[] = {
	        {HDR "n: 1\nlisten: a\nn: 2\n", {"t.yaml:5:", "key \"n\" appears more than once"}},
	        {HDR "n: 1\nlisen: a\n", {"t.yaml:4:", "unknown key \"lisen\""}},
	        {HDR "n: 0\n", {"t.yaml:3:", "key \"n\"", "out of range"}},
	        {HDR "n: 101\n", {"t.yaml:3:", "out of range"}},
	        {HDR "on: yes\n", {"t.yaml:3:", "expected true or false"}}, /* no YAML 1.1 bools */
	        {HDR "timeout: 1.5s\n", {"t.yaml:3:", "not a duration"}},
	        {HDR "mode: none\n", {"t.yaml:3:", "trust-header"}},
	        {HDR "n:\n", {"t.yaml:3:", "key \"n\": no value"}},
	        {HDR "n: ~\n", {"key \"n\": no value"}},
	        {HDR "listen: null\n", {"key \"listen\": no value"}},
	        {HDR "subjects: x\n", {"t.yaml:3:", "expected a list"}},
	        {HDR "n: [1]\n", {"t.yaml:3:", "expected a single value"}},
	        {HDR "subjects: [a, [b]]\n", {"t.yaml:3:", "list of strings"}},
	        {HDR "subjects: {a: b}\n", {"expected a list of strings"}},
	        {HDR "listen: {a: b}\n", {"expected a single value"}},
	        {HDR "listen: \"a\\0b\"\n", {"NUL"}},
	        /* anchors, aliases, tags: nothing is ever expanded */
	        {HDR "listen: &a x\nn: *a\n", {"t.yaml:3:", "anchors"}},
	        {HDR "n: *a\n", {"aliases"}},
	        {HDR "listen: !!str x\n", {"t.yaml:3:", "tags"}},
	        {HDR "subjects: !!seq [a]\n", {"tags"}},
	        {HDR "? [a]\n: b\n", {"t.yaml:3:", "option name"}},
	        {HDR "&m listen: x\n", {"anchors"}},
	        {"--- !!map\n" HDR, {"tags"}},
	        /* the header */
	        {"kind: TestConfig\nn: 1\n", {"t.yaml", "no \"apiVersion\" key"}},
	        {"apiVersion: cloudstream.io/v1alpha1\nn: 1\n", {"no \"kind\" key"}},
	        {"apiVersion: cloudstream.io/v1\nkind: TestConfig\n",
	         {"t.yaml:1:", "key \"apiVersion\"", "cloudstream.io/v1alpha1"}},
	        {"apiVersion: cloudstream.io/v1alpha1\nkind: EdgeStreamConfig\n",
	         {"t.yaml:2:", "key \"kind\"", "expected \"TestConfig\""}},
	        {HDR "kind: TestConfig\n", {"t.yaml:3:", "kind\" appears more than once"}},
	        {"apiVersion: [a]\nkind: TestConfig\n", {"t.yaml:1:", "expected a string"}},
	        /* the shape */
	        {"", {"t.yaml", "empty"}},
	        {"# only a comment\n", {"empty"}},
	        {"- a\n- b\n", {"t.yaml:1:", "expected a mapping"}},
	        {"just text\n", {"expected a mapping"}},
	        {HDR "---\n" HDR, {"t.yaml:3:", "second document"}},
	        {HDR "n: 1\nm 2\n", {"t.yaml:", "not valid YAML"}},
	        {HDR "listen: \"unterminated\n", {"not valid YAML"}},
	        {HDR "\tn: 1\n", {"not valid YAML"}},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct cfg c = {0};
		assert_int_equal(st_config_defaults(&spec, &c, err, sizeof err), 0);
		int rc = parse(&c, bad[i].text);
		if (rc != -EINVAL)
			fail_msg("input %zu: rc %d (want -EINVAL): %s", i, rc, bad[i].text);
		for (size_t k = 0; k < 3 && bad[i].want[k]; k++)
			if (strstr(err, bad[i].want[k]) == NULL)
				fail_msg("input %zu: \"%s\" not in \"%s\"", i, bad[i].want[k], err);
		st_config_cleanup(&spec, &c);
	}
}

/* The billion laughs: aliases of aliases would expand to 10^9 items. Refused at the first
 * anchor, in constant work, allocating nothing of ours. */
static void test_st_config_parse_yaml__billion_laughs(void **state)
{
	(void)state;
	const char *y = HDR "subjects: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n"
	                    "b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
	                    "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
	                    "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n";
	struct cfg c = {0};
	assert_int_equal(parse(&c, y), -EINVAL);
	assert_non_null(strstr(err, "t.yaml:3: key \"subjects\": anchors (&a) are not accepted"));
	assert_int_equal(c.subjects.n, 0);
	st_config_cleanup(&spec, &c);
}

static void test_st_config_parse_yaml__limits(void **state)
{
	(void)state;
	/* ST_CONFIG_MAX_LIST items: accepted; one more: refused. */
	char y[4096];
	for (unsigned extra = 0; extra < 2; extra++) {
		size_t n = (size_t)snprintf(y, sizeof y, HDR "subjects:\n");
		for (unsigned i = 0; i < ST_CONFIG_MAX_LIST + extra; i++)
			n += (size_t)snprintf(y + n, sizeof y - n, "  - s%u\n", i);
		struct cfg c = {0};
		int rc = parse(&c, y);
		assert_int_equal(rc, extra ? -EINVAL : 0);
		if (extra)
			assert_non_null(strstr(err, "more than 64 values"));
		else
			assert_int_equal(c.subjects.n, ST_CONFIG_MAX_LIST);
		st_config_cleanup(&spec, &c);
	}
	/* A value of ST_CONFIG_MAX_VALUE_BYTES: accepted; one byte more: refused. */
	size_t cap = ST_CONFIG_MAX_VALUE_BYTES + 128;
	char *big = malloc(cap);
	assert_non_null(big);
	for (unsigned extra = 0; extra < 2; extra++) {
		int h = snprintf(big, cap, HDR "listen: ");
		size_t vlen = ST_CONFIG_MAX_VALUE_BYTES + extra;
		memset(big + h, 'a', vlen);
		big[(size_t)h + vlen] = '\0';
		struct cfg c = {0};
		assert_int_equal(parse(&c, big), extra ? -EINVAL : 0);
		st_config_cleanup(&spec, &c);
	}
	free(big);
	/* No bytes at all (a NULL pointer): empty, not a crash in libyaml. */
	struct cfg e = {0};
	assert_int_equal(st_config_parse_yaml(&spec, &e, NULL, 0, "t.yaml", err, sizeof err),
	                 -EINVAL);
	assert_non_null(strstr(err, "empty"));
	/* The file's size: one byte over is refused before parsing. */
	struct cfg c = {0};
	assert_int_equal(st_config_parse_yaml(&spec, &c, "", ST_CONFIG_MAX_FILE_BYTES + 1u,
	                                      "t.yaml", err, sizeof err),
	                 -EMSGSIZE);
}

/* JSON keeps working; apiVersion/kind are optional there and right when given. */
static void test_st_config_parse__json_header(void **state)
{
	(void)state;
	struct cfg c = {0};
	assert_int_equal(parse(&c, "  {\"n\": 9}"), 0); /* a file from before the version */
	assert_int_equal(c.n, 9);
	assert_int_equal(parse(&c, "{\"apiVersion\": \"cloudstream.io/v1alpha1\", \"kind\": "
	                           "\"TestConfig\", \"n\": 8}"),
	                 0);
	assert_int_equal(c.n, 8);
	assert_int_equal(parse(&c, "{\"n\": 1,\n \"kind\": \"EdgeStreamConfig\"}"), -EINVAL);
	assert_non_null(strstr(err, "t.yaml:2: key \"kind\""));
	assert_int_equal(parse(&c, "{\"apiVersion\": 1}"), -EINVAL);
	assert_non_null(strstr(err, "expected a string"));
	/* The line and key of JSON errors too. */
	assert_int_equal(parse(&c, "{\n  \"n\": 1,\n  \"lisen\": \"x\"\n}"), -EINVAL);
	assert_non_null(strstr(err, "t.yaml:3: unknown key \"lisen\""));
	assert_int_equal(parse(&c, "{\n  \"n\": 1,\n\n  \"n\": 2\n}"), -EINVAL);
	assert_non_null(strstr(err, "t.yaml:4: key \"n\" appears more than once"));
	assert_int_equal(parse(&c, "{\n  \"timeout\": \"5x\"\n}"), -EINVAL);
	assert_non_null(strstr(err, "t.yaml:2: key \"timeout\": --timeout \"5x\""));
	st_config_cleanup(&spec, &c);
	/* Without a kind in the spec, the two keys are unknown like any other. */
	struct st_config_spec plain = spec;
	plain.kind = NULL;
	const char *y = "apiVersion: x\n";
	assert_int_equal(st_config_parse(&plain, &c, y, strlen(y), "p", err, sizeof err), -EINVAL);
	assert_non_null(strstr(err, "unknown key \"apiVersion\""));
	y = "n: 3\n";
	assert_int_equal(st_config_parse(&plain, &c, y, strlen(y), "p", err, sizeof err), 0);
	st_config_cleanup(&spec, &c);
}

/* Every proper prefix of a good file: an error or a (partial) success, never past the input —
 * the bytes end at a PROT_NONE page. */
static void test_st_config_parse_yaml__prefixes_guarded(void **state)
{
	(void)state;
	const char *y = HDR "listen: \"127.0.0.1:1\"\nsubjects: [a, 'b']\nn: 7\n";
	size_t len = strlen(y);
	for (size_t i = 0; i <= len; i++) {
		struct guard_buf g;
		assert_int_equal(guard_new(&g, y, i), 0);
		struct cfg c = {0};
		int rc = st_config_parse_yaml(&spec, &c, (const char *)g.data, i, "g", err,
		                              sizeof err);
		assert_true(rc == 0 || rc == -EINVAL);
		if (i == len)
			assert_int_equal(rc, 0);
		st_config_cleanup(&spec, &c);
		guard_free(&g);
	}
}

static void test_st_config_parse_yaml__alloc_failure(void **state)
{
	(void)state;
	fixture_parse_alloc_failures(st_config_parse_yaml, HDR "listen: a\nsubjects: [x, y, z]\n",
	                             40);
}

struct diffs {
	const char *names[8];
	size_t n;
};

static void on_diff(const struct st_opt *o, void *user)
{
	struct diffs *d = user;
	if (d->n < 8)
		d->names[d->n++] = o->name;
}

static void test_st_config_diff__and_copy(void **state)
{
	(void)state;
	struct cfg a = {0}, b = {0};
	assert_int_equal(st_config_defaults(&spec, &a, err, sizeof err), 0);
	assert_int_equal(st_config_defaults(&spec, &b, err, sizeof err), 0);
	assert_int_equal(st_config_diff(&spec, &a, &b, on_diff, NULL), 0);
	assert_int_equal(parse(&b, HDR "listen: other\nmode: ignore\nsubjects: [dflt, more]\n"), 0);
	struct diffs d = {0};
	assert_int_equal(st_config_diff(&spec, &a, &b, on_diff, &d), 3);
	assert_string_equal(d.names[0], "listen");
	assert_string_equal(d.names[1], "mode");
	assert_string_equal(d.names[2], "subjects");
	for (size_t i = 0; i < spec.num_opts; i++)
		assert_int_equal(st_config_copy_opt(&opts[i], &a, &b), 0);
	assert_int_equal(st_config_diff(&spec, &a, &b, NULL, NULL), 0);
	assert_string_equal(a.subjects.v[1], "more");
	assert_ptr_not_equal(a.listen, b.listen); /* a deep copy */
	/* A failed copy keeps the old value. */
	assert_int_equal(parse(&b, HDR "listen: third\n"), 0);
	failmalloc_fail_after(0);
	int rc = st_config_copy_opt(&opts[0], &a, &b);
	failmalloc_off();
	assert_int_equal(rc, -ENOMEM);
	assert_string_equal(a.listen, "other");
	st_config_cleanup(&spec, &a);
	st_config_cleanup(&spec, &b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_st_config_parse_yaml__types),
	        cmocka_unit_test(test_st_config_parse_yaml__refused),
	        cmocka_unit_test(test_st_config_parse_yaml__billion_laughs),
	        cmocka_unit_test(test_st_config_parse_yaml__limits),
	        cmocka_unit_test(test_st_config_parse__json_header),
	        cmocka_unit_test(test_st_config_parse_yaml__prefixes_guarded),
	        cmocka_unit_test(test_st_config_parse_yaml__alloc_failure),
	        cmocka_unit_test(test_st_config_diff__and_copy),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
