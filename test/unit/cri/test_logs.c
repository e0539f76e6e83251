/* Unit tests for CRI log records and the kubelet's log options (cri/logs.h), following
 * spec/kubelet-http.md §5 and §8. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include <cri/logs.h>

#define NS 1000000000ll

static void test_cri_parse_rfc3339(void **state)
{
	(void)state;
	int64_t t;
	assert_int_equal(cri_parse_rfc3339("1970-01-01T00:00:00Z", 20, &t), 0);
	assert_true(t == 0);
	assert_int_equal(cri_parse_rfc3339("2024-05-01T10:00:00.123456789Z", 30, &t), 0);
	assert_true(t == 1714557600ll * NS + 123456789);
	assert_int_equal(cri_parse_rfc3339("2024-05-01T10:00:00.2Z", 22, &t),
	                 0); /* trailing 0s dropped */
	assert_true(t == 1714557600ll * NS + 200000000);
	assert_int_equal(cri_parse_rfc3339("2024-05-01T12:00:00+02:00", 25, &t), 0);
	assert_true(t == 1714557600ll * NS);
	const char *bad[] = {"1012-05-22T10:00:40.129Z",
	                     "2024-05-01 10:00:00Z",
	                     "2024-13-01T10:00:00Z",
	                     "2024-05-01T10:00:00",
	                     "2024-05-01T10:00:00.Z",
	                     "2024-05-01T10:00:00Zx",
	                     "x"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		assert_int_equal(cri_parse_rfc3339(bad[i], strlen(bad[i]), &t), -EBADMSG);
}

static void test_cri_log_parse_record(void **state)
{
	(void)state;
	struct cri_log_record r;
	const char *l = "2026-11-22T10:59:17.252880962Z stdout F line 1 10:59:17";
	assert_int_equal(cri_log_parse_record(l, strlen(l), &r), 0);
	assert_int_equal(r.stream, CRI_LOG_STDOUT);
	assert_false(r.partial);
	assert_int_equal(r.content_len, 15);
	assert_memory_equal(r.content, "line 1 10:59:17", 15);
	l = "2026-11-22T11:03:41.57417262Z stderr P:tag part";
	assert_int_equal(cri_log_parse_record(l, strlen(l), &r), 0);
	assert_true(r.partial);
	assert_int_equal(r.stream, CRI_LOG_STDERR);
	assert_int_equal(r.content_len, 4);
	l = "2026-11-22T11:03:41Z stdout F"; /* an empty line */
	assert_int_equal(cri_log_parse_record(l, strlen(l), &r), 0);
	assert_int_equal(r.content_len, 0);
	const char *bad[] = {"garbage", "2026-11-22T11:03:41Z stdin F x",
	                     "2026-11-22T11:03:41Z stdout X x", "2026-11-22T11:03:41Z stdout FX x",
	                     "{\"log\":\"docker\"}"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		assert_int_equal(cri_log_parse_record(bad[i], strlen(bad[i]), &r), -EBADMSG);
}

static int opts(const char *q, struct cri_log_opts *o, char *why)
{
	return cri_log_opts_parse(q, strlen(q), 1000 * NS, o, why, 128);
}

static void test_cri_log_opts_parse(void **state)
{
	(void)state;
	struct cri_log_opts o;
	char why[128];
	assert_int_equal(opts("follow=true&timestamps=1&tailLines=10&limitBytes=500", &o, why), 0);
	assert_true(o.follow && o.timestamps && !o.previous);
	assert_true(o.has_tail && o.tail_lines == 10 && o.has_limit && o.limit_bytes == 500);
	assert_int_equal(o.streams, CRI_LOG_ALL);
	assert_int_equal(opts("sinceSeconds=10", &o, why), 0);
	assert_true(o.has_since && o.since_ns == 990 * NS);
	assert_int_equal(opts("sinceTime=1970-01-01T00:15:00Z", &o, why), 0);
	assert_true(o.since_ns == 900 * NS);
	assert_int_equal(opts("tail=all", &o, why), 0);
	assert_false(o.has_tail);
	assert_int_equal(opts("stream=Stderr&previous=", &o, why), 0);
	assert_true(o.previous); /* a bare or empty bool is true */
	assert_int_equal(o.streams, CRI_LOG_STDERR);
	/* the kubelet's refusals */
	assert_int_equal(opts("sinceSeconds=0", &o, why), 422);
	assert_int_equal(opts("sinceSeconds=5&sinceTime=2024-05-01T10:00:00Z", &o, why), 422);
	assert_int_equal(opts("tailLines=-1", &o, why), 422);
	assert_int_equal(opts("limitBytes=0", &o, why), 422);
	assert_int_equal(opts("stream=both", &o, why), 422);
	assert_int_equal(opts("stream=Stdout&tailLines=3", &o, why), 422);
	assert_int_equal(opts("tailLines=x", &o, why), 400);
	assert_string_equal(why, "Unable to decode query.");
	assert_int_equal(opts("sinceTime=yesterday", &o, why), 400);
	assert_int_equal(opts("sinceSeconds=%zz", &o, why), 400);
}

static size_t run(struct cri_log_writer *w, const char *const *lines, size_t n, char *out)
{
	size_t total = 0;
	for (size_t i = 0; i < n; i++) {
		struct cri_log_record r;
		assert_int_equal(cri_log_parse_record(lines[i], strlen(lines[i]), &r), 0);
		total += cri_log_format(w, &r, out + total);
	}
	out[total] = '\0';
	return total;
}

static const char *const sample[] = {
        "2024-05-01T10:00:00.1Z stdout F hello",
        "2024-05-01T10:00:00.2Z stderr P part-one",
        "2024-05-01T10:00:01.5Z stdout F world",
        "2024-05-01T10:00:02.2Z stderr F part-two",
};

static void test_cri_log_format(void **state)
{
	(void)state;
	struct cri_log_opts o = {.streams = CRI_LOG_ALL};
	struct cri_log_writer w;
	char out[1024];
	cri_log_writer_init(&w, &o);
	run(&w, sample, 4, out);
	assert_string_equal(out, "hello\npart-oneworld\npart-two\n"); /* file order, P merged */
	o.timestamps = true;
	cri_log_writer_init(&w, &o);
	run(&w, sample, 4, out);
	assert_string_equal(out, "2024-05-01T10:00:00.100000000Z hello\n"
	                         "2024-05-01T10:00:00.200000000Z part-one"
	                         "2024-05-01T10:00:01.500000000Z world\n"
	                         "part-two\n"); /* one timestamp per logical line */
	o.timestamps = false;
	o.streams = CRI_LOG_STDERR;
	cri_log_writer_init(&w, &o);
	run(&w, sample, 4, out);
	assert_string_equal(out, "part-onepart-two\n");
	o.streams = CRI_LOG_ALL;
	o.has_since = true;
	cri_parse_rfc3339("2024-05-01T10:00:01Z", 20, &o.since_ns);
	cri_log_writer_init(&w, &o);
	run(&w, sample, 4, out);
	assert_string_equal(out, "world\npart-two\n");
	/* limitBytes counts prefixes and cuts the crossing record, even inside a prefix */
	o.has_since = false;
	o.has_limit = true;
	o.limit_bytes = 8;
	cri_log_writer_init(&w, &o);
	assert_int_equal(run(&w, sample, 4, out), 8);
	assert_string_equal(out, "hello\npa");
	o.timestamps = true;
	o.limit_bytes = 10;
	cri_log_writer_init(&w, &o);
	assert_int_equal(run(&w, sample, 4, out), 10);
	assert_string_equal(out, "2024-05-01");
}

static void test_cri_log_tail_start(void **state)
{
	(void)state;
	const char buf[] = "a\nbb\nccc\ndd"; /* "dd" is unterminated: not counted */
	size_t len = sizeof buf - 1;
	assert_int_equal(cri_log_tail_start(buf, len, 0), len);
	assert_int_equal(cri_log_tail_start(buf, len, 1), 5);  /* ccc\ndd */
	assert_int_equal(cri_log_tail_start(buf, len, 2), 2);  /* bb\n... */
	assert_int_equal(cri_log_tail_start(buf, len, 3), 0);  /* all */
	assert_int_equal(cri_log_tail_start(buf, len, 99), 0); /* more than there are */
	assert_int_equal(cri_log_tail_start("", 0, 5), 0);
	assert_int_equal(cri_log_tail_start("x\n", 2, 1), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_cri_parse_rfc3339),
	        cmocka_unit_test(test_cri_log_parse_record),
	        cmocka_unit_test(test_cri_log_opts_parse),
	        cmocka_unit_test(test_cri_log_format),
	        cmocka_unit_test(test_cri_log_tail_start),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
