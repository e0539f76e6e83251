/* Unit tests for reading a CRI log file with the kubelet's options (cri/logfile.h), on real
 * files in a temporary directory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

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

static const char *read_with(const char *query, off_t *end)
{
	static struct sink s;
	struct cri_log_opts o;
	char why[128];
	memset(&s, 0, sizeof s);
	assert_int_equal(cri_log_opts_parse(query, strlen(query), 0, &o, why, sizeof why), 0);
	struct cri_log_writer w;
	cri_log_writer_init(&w, &o);
	assert_int_equal(cri_log_read_file(path, &w, collect, &s, end), 0);
	return s.buf;
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
	off_t end;
	assert_string_equal(read_with("", &end), "one\npartial\nthree\nunterminated\n");
	assert_int_equal(end, (off_t)(strlen(FILE_TEXT) - strlen("2024-05-01T10:00:02Z stdout F "
	                                                         "unterminated")));
	/* tailLines counts complete physical records (the garbage line too, as the kubelet's
	 * newline count does), then writes at most N records */
	assert_string_equal(read_with("tailLines=2", NULL), "tial\nthree\n");
	assert_string_equal(read_with("tailLines=0", NULL), "");
	assert_string_equal(read_with("tailLines=100", NULL),
	                    "one\npartial\nthree\nunterminated\n");
	assert_string_equal(read_with("sinceTime=2024-05-01T10:00:01Z", NULL),
	                    "three\nunterminated\n");
	assert_string_equal(read_with("timestamps=true&stream=Stderr", NULL),
	                    "2024-05-01T10:00:00.200000000Z partial\n");
	assert_string_equal(read_with("limitBytes=7", NULL), "one\npar");
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
	assert_string_equal(read_with("tailLines=3", NULL), "line 19999\nlast\n");
	const char *all = read_with("", NULL);
	assert_int_equal(strncmp(all, "line 0\nline 1\n", 14), 0);
	char nope[300];
	snprintf(nope, sizeof nope, "%s/none.log", dir);
	struct cri_log_opts o = {.streams = CRI_LOG_ALL};
	struct cri_log_writer w;
	cri_log_writer_init(&w, &o);
	struct sink *s = calloc(1, sizeof *s);
	assert_int_equal(cri_log_read_file(nope, &w, collect, s, NULL), -ENOENT);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_cri_log_read_file__options),
	        cmocka_unit_test(test_cri_log_read_file__big_file_tail_and_errors),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
