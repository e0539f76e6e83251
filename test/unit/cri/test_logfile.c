/* Unit tests for reading a CRI log file with the kubelet's options (cri/logfile.h), on real
 * files in a temporary directory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cri/logfile.h>

#include "testutil.h"

static char dir[256], path[300];

struct sink {
	char buf[1 << 20];
	size_t len;
	int calls;
};

static int collect(const char *p, size_t n, void *user)
{
	struct sink *s = user;
	assert_true(s->len + n < sizeof s->buf);
	memcpy(s->buf + s->len, p, n);
	s->len += n;
	s->buf[s->len] = '\0';
	s->calls++;
	return 0;
}

static void write_file(const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void opts(const char *query, struct cri_log_opts *o)
{
	char why[128];
	assert_int_equal(cri_log_opts_parse(query, strlen(query), 0, o, why, sizeof why), 0);
}

static const char *read_with(const char *query)
{
	static struct sink s;
	struct cri_log_opts o;
	memset(&s, 0, sizeof s);
	opts(query, &o);
	assert_int_equal(cri_log_read_file(path, &o, collect, &s), 0);
	return s.buf;
}

static void append(const char *p, const char *text)
{
	FILE *f = fopen(p, "a");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* Everything a cursor gives now (not final), appended to @s; returns at_eof. */
static bool drain(struct cri_log_cursor *c, struct sink *s, char *out, size_t cap)
{
	bool eof = false;
	while (!eof) {
		ssize_t n = cri_log_cursor_read(c, out, cap, false, &eof);
		assert_true(n >= 0);
		if (n > 0)
			collect(out, (size_t)n, s);
	}
	return eof;
}

static int setup(void **state)
{
	(void)state;
	if (test_mkdtemp(dir, sizeof dir, "logfile") < 0)
		return -1;
	snprintf(path, sizeof path, "%s/0.log", dir);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	rmtree(dir);
	return 0;
}

#define FILE_TEXT                                                                                  \
	"2024-05-01T10:00:00.1Z stdout F one\n"                                                    \
	"garbage that is not a record\n"                                                           \
	"2024-05-01T10:00:00.2Z stderr P par\n"                                                    \
	"2024-05-01T10:00:00.3Z stderr F tial\n"                                                   \
	"2024-05-01T10:00:01Z stdout F three\n"                                                    \
	"2024-05-01T10:00:02Z stdout F unterminated"

static void test_cri_log_read_file__options(void **state)
{
	(void)state;
	write_file(FILE_TEXT);
	assert_string_equal(read_with(""), "one\npartial\nthree\nunterminated\n");
	/* tailLines counts complete physical records (the garbage line too, as the kubelet's
	 * newline count does), then writes at most N records */
	assert_string_equal(read_with("tailLines=2"), "tial\nthree\n");
	assert_string_equal(read_with("tailLines=0"), "");
	assert_string_equal(read_with("tailLines=100"), "one\npartial\nthree\nunterminated\n");
	assert_string_equal(read_with("sinceTime=2024-05-01T10:00:01Z"), "three\nunterminated\n");
	assert_string_equal(read_with("timestamps=true&stream=Stderr"),
	                    "2024-05-01T10:00:00.200000000Z partial\n");
	assert_string_equal(read_with("limitBytes=7"), "one\npar");
}

static void test_cri_log_read_file__big_file_tail_and_errors(void **state)
{
	(void)state;
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	for (int i = 0; i < 20000; i++)
		fprintf(f, "2024-05-01T10:00:00.%09dZ stdout F line %d\n", i, i);
	/* a record over the line limit is skipped, not cut */
	fputs("2024-05-01T10:00:01Z stdout F ", f);
	for (int i = 0; i < 70000; i++)
		fputc('x', f);
	fputs("\n2024-05-01T10:00:02Z stdout F last\n", f);
	fclose(f);
	assert_string_equal(read_with("tailLines=3"), "line 19999\nlast\n");
	const char *all = read_with("");
	assert_int_equal(strncmp(all, "line 0\nline 1\n", 14), 0);
	char nope[300];
	snprintf(nope, sizeof nope, "%s/none.log", dir);
	struct cri_log_opts o = {.streams = CRI_LOG_ALL};
	struct sink *s = calloc(1, sizeof *s);
	assert_int_equal(cri_log_read_file(nope, &o, collect, s), -ENOENT);
	free(s);
	/* tail offset straight on a descriptor */
	int fd = open(path, O_RDONLY);
	off_t size = lseek(fd, 0, SEEK_END);
	assert_int_equal(cri_log_tail_offset(fd, size, 0), size);
	assert_true(cri_log_tail_offset(fd, size, 1) ==
	            size - (off_t)strlen("2024-05-01T10:00:02Z stdout F last\n"));
	assert_int_equal(cri_log_tail_offset(fd, size, 1000000), 0);
	close(fd);
}

/* A follower's cursor: records are consumed only once their '\n' is there; output buffers of
 * the minimum size still carry everything; tailLines picks the start and does not limit. */
static void test_cri_log_cursor__follow(void **state)
{
	(void)state;
	write_file("2024-05-01T10:00:00Z stdout F old-1\n"
	           "2024-05-01T10:00:01Z stdout F old-2\n"
	           "2024-05-01T10:00:02Z stdout F hal");
	struct cri_log_opts o;
	opts("follow=true&tailLines=1&timestamps=true", &o);
	struct cri_log_cursor c;
	assert_int_equal(cri_log_cursor_open(&c, path, &o), 0);
	struct sink *s = calloc(1, sizeof *s);
	char *out = malloc(CRI_LOGFILE_MIN_OUT);
	assert_true(drain(&c, s, out, CRI_LOGFILE_MIN_OUT));
	assert_string_equal(s->buf, "2024-05-01T10:00:01.000000000Z old-2\n");
	append(path, "f-done\n2024-05-01T10:00:03Z stderr P a\n");
	assert_true(drain(&c, s, out, CRI_LOGFILE_MIN_OUT));
	assert_string_equal(s->buf, "2024-05-01T10:00:01.000000000Z old-2\n"
	                            "2024-05-01T10:00:02.000000000Z half-done\n"
	                            "2024-05-01T10:00:03.000000000Z a");
	append(path, "2024-05-01T10:00:04Z stderr F b\n");
	drain(&c, s, out, CRI_LOGFILE_MIN_OUT);
	assert_string_equal(s->buf + strlen(s->buf) - 3, "ab\n");
	/* many records through a minimum-size buffer: all of them, in order */
	memset(s, 0, sizeof *s);
	FILE *f = fopen(path, "a");
	for (int i = 0; i < 5000; i++)
		fprintf(f, "2024-05-01T10:00:05Z stdout F n%d\n", i);
	fclose(f);
	drain(&c, s, out, CRI_LOGFILE_MIN_OUT);
	/* ~170 KB of records fill each 64 KiB buffer: a handful of calls, not one per record
	 * (one per record was 3 MB/s through the chain, a worker job and a pread each). */
	assert_true(s->calls >= 1 && s->calls <= 4);
	assert_int_equal(strncmp(s->buf, "2024-05-01T10:00:05.000000000Z n0\n", 34), 0);
	assert_non_null(strstr(s->buf, " n4999\n"));
	assert_int_equal(s->len, 5000 * 33 + 10 * 1 + 90 * 2 + 900 * 3 + 4000 * 4);
	/* rotation: the old file renamed, a new one at the path */
	char old[320];
	snprintf(old, sizeof old, "%s.1", path);
	assert_int_equal(cri_log_cursor_rotated(&c, path), 0);
	assert_int_equal(rename(path, old), 0);
	assert_int_equal(cri_log_cursor_rotated(&c, path), 0); /* no new file yet */
	append(old, "2024-05-01T10:00:06Z stdout F last-in-old\n");
	write_file("2024-05-01T10:00:07Z stdout F first-in-new\n");
	assert_int_equal(cri_log_cursor_rotated(&c, path), 1);
	memset(s, 0, sizeof *s);
	drain(&c, s, out, CRI_LOGFILE_MIN_OUT); /* the old file to its end first */
	assert_int_equal(cri_log_cursor_reopen(&c, path), 0);
	assert_int_equal(cri_log_cursor_rotated(&c, path), 0);
	drain(&c, s, out, CRI_LOGFILE_MIN_OUT);
	assert_string_equal(s->buf, "2024-05-01T10:00:06.000000000Z last-in-old\n"
	                            "2024-05-01T10:00:07.000000000Z first-in-new\n");
	cri_log_cursor_close(&c);
	unlink(old);
	free(out);
	free(s);
}

/* limitBytes ends the output for good, even when the file grows. */
static void test_cri_log_cursor__complete(void **state)
{
	(void)state;
	write_file("2024-05-01T10:00:00Z stdout F 0123456789\n");
	struct cri_log_opts o;
	opts("follow=true&limitBytes=15", &o);
	struct cri_log_cursor c;
	assert_int_equal(cri_log_cursor_open(&c, path, &o), 0);
	struct sink *s = calloc(1, sizeof *s);
	char *out = malloc(CRI_LOGFILE_MIN_OUT);
	drain(&c, s, out, CRI_LOGFILE_MIN_OUT);
	assert_false(c.complete);
	append(path, "2024-05-01T10:00:01Z stdout F abcdefgh\n");
	drain(&c, s, out, CRI_LOGFILE_MIN_OUT);
	assert_true(c.complete);
	assert_string_equal(s->buf, "0123456789\nabcd");
	append(path, "2024-05-01T10:00:02Z stdout F more\n");
	drain(&c, s, out, CRI_LOGFILE_MIN_OUT);
	assert_string_equal(s->buf, "0123456789\nabcd");
	cri_log_cursor_close(&c);
	assert_int_equal(cri_log_cursor_open(&c, "/nonexistent/0.log", &o), -ENOENT);
	free(out);
	free(s);
}

/* Records as long as the buffer allows: a buffer fills with whole records, and a record that
 * does not fit what is left (the unterminated last one of a final read too) comes first in the
 * next call, never cut or lost. */
static void test_cri_log_cursor__fills_whole_records(void **state)
{
	(void)state;
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs("2024-05-01T10:00:00Z stdout F ", f);
	for (int i = 0; i < 60000; i++)
		fputc('a', f);
	fputs("\n2024-05-01T10:00:01Z stdout F ", f);
	for (int i = 0; i < 10000; i++)
		fputc('b', f);
	fclose(f); /* the second record is unterminated */
	struct cri_log_opts o;
	opts("", &o);
	struct cri_log_cursor c;
	assert_int_equal(cri_log_cursor_open(&c, path, &o), 0);
	char *out = malloc(CRI_LOGFILE_MIN_OUT);
	bool eof = false;
	ssize_t n = cri_log_cursor_read(&c, out, CRI_LOGFILE_MIN_OUT, true, &eof);
	assert_int_equal(n, 60001);
	assert_false(eof); /* the rest did not fit: not at the end yet */
	assert_true(out[0] == 'a' && out[59999] == 'a' && out[60000] == '\n');
	n = cri_log_cursor_read(&c, out, CRI_LOGFILE_MIN_OUT, true, &eof);
	assert_int_equal(n, 10001);
	assert_true(eof);
	assert_true(out[0] == 'b' && out[9999] == 'b' && out[10000] == '\n');
	n = cri_log_cursor_read(&c, out, CRI_LOGFILE_MIN_OUT, true, &eof);
	assert_int_equal(n, 0);
	assert_true(eof);
	cri_log_cursor_close(&c);
	free(out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_cri_log_read_file__options),
	        cmocka_unit_test(test_cri_log_read_file__big_file_tail_and_errors),
	        cmocka_unit_test(test_cri_log_cursor__follow),
	        cmocka_unit_test(test_cri_log_cursor__complete),
	        cmocka_unit_test(test_cri_log_cursor__fills_whole_records),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
