/* Unit tests for an HTTP/1.1 answer as an HTTP/2 stream's answer (cloudstream/src/h2answer.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "failmalloc.h"
#include "guard.h"
#include "h2answer.h"

/* What the events said, flattened: "status|name: value|...|has_body" and the body. */
struct seen {
	int heads;
	int status;
	bool has_body;
	char head[ST_MAX_HTTP_HEAD_BYTES + 1024];
	size_t head_len;
	uint8_t body[8192];
	size_t body_len;
	int fail_head; /* on_head returns this */
};

static int on_head(void *user, int status, const struct st_http_header *h, size_t n, bool has_body)
{
	struct seen *s = user;
	s->heads++;
	s->status = status;
	s->has_body = has_body;
	for (size_t i = 0; i < n; i++) {
		int k = snprintf(s->head + s->head_len, sizeof s->head - s->head_len, "%.*s: %.*s|",
		                 (int)h[i].name_len, h[i].name, (int)h[i].value_len, h[i].value);
		assert_true(k > 0 && (size_t)k < sizeof s->head - s->head_len);
		s->head_len += (size_t)k;
	}
	return s->fail_head;
}

static int on_body(void *user, const uint8_t *p, size_t n)
{
	struct seen *s = user;
	assert_true(n > 0);
	assert_true(s->body_len + n <= sizeof s->body);
	memcpy(s->body + s->body_len, p, n);
	s->body_len += n;
	return 0;
}

static const struct cs_h2ans_cbs cbs = {.on_head = on_head, .on_body = on_body};

/* Feed @in in pieces of @piece bytes (each in a guard buffer); returns the total consumed, or
 * the first error. */
static ssize_t feed(struct cs_h2ans *a, const char *in, size_t len, size_t piece, struct seen *s)
{
	size_t pos = 0;
	while (pos < len) {
		size_t n = len - pos < piece ? len - pos : piece;
		struct guard_buf g;
		assert_int_equal(guard_new(&g, in + pos, n), 0);
		ssize_t r = cs_h2ans_feed(a, g.data, g.len, &cbs, s);
		guard_free(&g);
		if (r < 0)
			return r;
		pos += (size_t)r;
		if ((size_t)r < n)
			break; /* the answer ended */
	}
	return (ssize_t)pos;
}

#define CHUNKED                                                                                    \
	"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n"            \
	"Connection: keep-alive\r\nKeep-Alive: timeout=5\r\nX-Log: A\r\n\r\n"                      \
	"7\r\nline 1\n\r\n7\r\nline 2\n\r\n0\r\n\r\n"

static void test_cs_h2ans_feed__chunked_every_split(void **state)
{
	(void)state;
	for (size_t piece = 1; piece <= sizeof CHUNKED; piece++) {
		struct cs_h2ans a;
		struct seen s = {0};
		cs_h2ans_init(&a, false);
		ssize_t r = feed(&a, CHUNKED, strlen(CHUNKED), piece, &s);
		assert_int_equal(r, (ssize_t)strlen(CHUNKED));
		assert_int_equal(s.heads, 1);
		assert_int_equal(s.status, 200);
		assert_true(s.has_body);
		/* names lower case; connection, keep-alive and transfer-encoding gone */
		assert_string_equal(s.head, "content-type: text/plain|x-log: A|");
		assert_int_equal(s.body_len, 14);
		assert_memory_equal(s.body, "line 1\nline 2\n", 14);
		assert_true(cs_h2ans_done(&a));
		assert_true(cs_h2ans_end_ok(&a));
		assert_null(a.buf); /* no head buffer kept */
		cs_h2ans_cleanup(&a);
	}
}

static void test_cs_h2ans_feed__length_and_what_follows(void **state)
{
	(void)state;
	const char in[] = "HTTP/1.1 404 Not Found\r\nContent-Length: 5\r\nUpgrade: h2c\r\n"
	                  "TE: trailers\r\nProxy-Connection: x\r\n\r\nhelloNEXT";
	struct cs_h2ans a;
	struct seen s = {0};
	cs_h2ans_init(&a, false);
	ssize_t r = cs_h2ans_feed(&a, (const uint8_t *)in, sizeof in - 1, &cbs, &s);
	assert_int_equal(r, (ssize_t)(sizeof in - 1 - 4)); /* NEXT is not the answer's */
	assert_int_equal(s.status, 404);
	assert_string_equal(s.head, "content-length: 5|");
	assert_int_equal(s.body_len, 5);
	assert_memory_equal(s.body, "hello", 5);
	assert_true(cs_h2ans_done(&a));
	/* done: nothing more is taken */
	assert_int_equal(cs_h2ans_feed(&a, (const uint8_t *)"x", 1, &cbs, &s), 0);
	cs_h2ans_cleanup(&a);
}

static void test_cs_h2ans_feed__no_body(void **state)
{
	(void)state;
	const char *cases[] = {"HTTP/1.1 204 No Content\r\n\r\n",
	                       "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
	                       "HTTP/1.1 304 Not Modified\r\nETag: x\r\n\r\n"};
	for (size_t i = 0; i < 3; i++) {
		struct cs_h2ans a;
		struct seen s = {0};
		cs_h2ans_init(&a, false);
		assert_int_equal(
		        cs_h2ans_feed(&a, (const uint8_t *)cases[i], strlen(cases[i]), &cbs, &s),
		        (ssize_t)strlen(cases[i]));
		assert_int_equal(s.heads, 1);
		assert_false(s.has_body);
		assert_true(cs_h2ans_done(&a));
		cs_h2ans_cleanup(&a);
	}
	/* A HEAD request's answer has no body whatever its head says. */
	const char head[] = "HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n";
	struct cs_h2ans a;
	struct seen s = {0};
	cs_h2ans_init(&a, true);
	assert_int_equal(cs_h2ans_feed(&a, (const uint8_t *)head, sizeof head - 1, &cbs, &s),
	                 (ssize_t)(sizeof head - 1));
	assert_false(s.has_body);
	assert_string_equal(s.head, "content-length: 99|");
	cs_h2ans_cleanup(&a);
}

static void test_cs_h2ans_feed__interim_skipped(void **state)
{
	(void)state;
	const char in[] = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: x\r\n\r\n"
	                  "HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok";
	for (size_t piece = 1; piece <= sizeof in; piece++) {
		struct cs_h2ans a;
		struct seen s = {0};
		cs_h2ans_init(&a, false);
		assert_int_equal(feed(&a, in, sizeof in - 1, piece, &s), (ssize_t)(sizeof in - 1));
		assert_int_equal(s.heads, 1);
		assert_int_equal(s.status, 201);
		assert_memory_equal(s.body, "ok", 2);
		cs_h2ans_cleanup(&a);
	}
}

static void test_cs_h2ans_feed__until_end(void **state)
{
	(void)state;
	const char in[] = "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nabc";
	struct cs_h2ans a;
	struct seen s = {0};
	cs_h2ans_init(&a, false);
	assert_int_equal(cs_h2ans_feed(&a, (const uint8_t *)in, sizeof in - 1, &cbs, &s),
	                 (ssize_t)(sizeof in - 1));
	assert_true(s.has_body);
	assert_false(cs_h2ans_done(&a));
	assert_true(cs_h2ans_end_ok(&a)); /* its end is the stream's end */
	assert_int_equal(s.body_len, 3);
	cs_h2ans_cleanup(&a);
}

static void test_cs_h2ans_end_ok__cut_short(void **state)
{
	(void)state;
	const char *cases[] = {"HTTP/1.1 200 OK\r\nContent-Le", /* in the head */
	                       "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc",
	                       "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n"};
	for (size_t i = 0; i < 3; i++) {
		struct cs_h2ans a;
		struct seen s = {0};
		cs_h2ans_init(&a, false);
		assert_int_equal(
		        cs_h2ans_feed(&a, (const uint8_t *)cases[i], strlen(cases[i]), &cbs, &s),
		        (ssize_t)strlen(cases[i]));
		assert_false(cs_h2ans_end_ok(&a));
		cs_h2ans_cleanup(&a);
	}
}

static void test_cs_h2ans_feed__errors(void **state)
{
	(void)state;
	const struct {
		const char *in;
		ssize_t rc;
	} cases[] = {
	        {"HTTP/1.1 101 Switching Protocols\r\nUpgrade: SPDY/3.1\r\n\r\n", -EBADMSG},
	        {"HTTP/1.1 200 OK\r\nbad header\r\n\r\n", -EBADMSG},
	        {"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", -EBADMSG},
	        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", -EBADMSG},
	        {"NOT HTTP\r\n\r\n", -EBADMSG},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct cs_h2ans a;
		struct seen s = {0};
		cs_h2ans_init(&a, false);
		assert_int_equal(cs_h2ans_feed(&a, (const uint8_t *)cases[i].in,
		                               strlen(cases[i].in), &cbs, &s),
		                 cases[i].rc);
		cs_h2ans_cleanup(&a);
	}
	/* A callback's code stops the feed. */
	struct cs_h2ans a;
	struct seen s = {.fail_head = -ENOSPC};
	cs_h2ans_init(&a, false);
	assert_int_equal(cs_h2ans_feed(&a, (const uint8_t *)CHUNKED, strlen(CHUNKED), &cbs, &s),
	                 -ENOSPC);
	cs_h2ans_cleanup(&a);
}

static void test_cs_h2ans_feed__head_limit(void **state)
{
	(void)state;
	/* A head of exactly ST_MAX_HTTP_HEAD_BYTES passes; one more byte of it does not. */
	size_t cap = ST_MAX_HTTP_HEAD_BYTES + 64;
	for (int extra = -1; extra <= 1; extra++) {
		char *in = malloc(cap);
		assert_non_null(in);
		const char *start = "HTTP/1.1 200 OK\r\nX: ";
		const char *end = "\r\nContent-Length: 0\r\n\r\n";
		size_t fill = ST_MAX_HTTP_HEAD_BYTES - strlen(start) - strlen(end) + (size_t)extra;
		size_t n = 0;
		memcpy(in, start, strlen(start));
		n += strlen(start);
		memset(in + n, 'a', fill);
		n += fill;
		memcpy(in + n, end, strlen(end));
		n += strlen(end);
		struct cs_h2ans a;
		struct seen s = {0};
		cs_h2ans_init(&a, false);
		ssize_t r = feed(&a, in, n, 4096, &s);
		if (extra <= 0)
			assert_int_equal(r, (ssize_t)n);
		else
			assert_int_equal(r, -EMSGSIZE);
		cs_h2ans_cleanup(&a);
		free(in);
	}
}

static void test_cs_h2ans_feed__failmalloc(void **state)
{
	(void)state;
	for (int n = 0;; n++) {
		struct cs_h2ans a;
		struct seen s = {0};
		cs_h2ans_init(&a, false);
		failmalloc_fail_after(n);
		ssize_t r = cs_h2ans_feed(&a, (const uint8_t *)CHUNKED, 20, &cbs, &s);
		failmalloc_off();
		cs_h2ans_cleanup(&a); /* LeakSanitizer checks nothing stays */
		if (r >= 0) {
			assert_int_equal(r, 20);
			break;
		}
		assert_int_equal(r, -ENOMEM);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_cs_h2ans_feed__chunked_every_split),
	        cmocka_unit_test(test_cs_h2ans_feed__length_and_what_follows),
	        cmocka_unit_test(test_cs_h2ans_feed__no_body),
	        cmocka_unit_test(test_cs_h2ans_feed__interim_skipped),
	        cmocka_unit_test(test_cs_h2ans_feed__until_end),
	        cmocka_unit_test(test_cs_h2ans_end_ok__cut_short),
	        cmocka_unit_test(test_cs_h2ans_feed__errors),
	        cmocka_unit_test(test_cs_h2ans_feed__head_limit),
	        cmocka_unit_test(test_cs_h2ans_feed__failmalloc),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
