/* Unit tests for chunked transfer coding (stream/chunked.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stream/chunked.h>
#include <stream/err.h>

#include "guard.h"

/* Feeds @in in pieces of @step bytes (0: all at once). Collects the body into @body and returns
 * the bytes that belonged to the message, or the first negative error. */
static ssize_t feed(const char *in, size_t len, size_t step, char *body, size_t body_cap,
                    size_t *body_len, bool *done)
{
	struct st_chunked_decoder d;
	st_chunked_init(&d);
	size_t pos = 0;
	*body_len = 0;
	while (pos < len && !st_chunked_done(&d)) {
		size_t piece = step ? step : len - pos;
		if (piece > len - pos)
			piece = len - pos;
		/* Each piece goes through a guard page: no read past what was given. */
		struct guard_buf g;
		assert_int_equal(guard_new(&g, in + pos, piece), 0);
		size_t off = 0;
		while (off < piece) {
			const uint8_t *data;
			size_t data_len;
			ssize_t n =
			        st_chunked_decode(&d, g.data + off, piece - off, &data, &data_len);
			if (n < 0) {
				guard_free(&g);
				return n;
			}
			if (n == 0)
				break; /* done */
			if (data_len > 0) {
				assert_true(data >= g.data + off &&
				            data + data_len <= g.data + off + (size_t)n);
				assert_true(*body_len + data_len <= body_cap);
				memcpy(body + *body_len, data, data_len);
				*body_len += data_len;
			}
			off += (size_t)n;
		}
		guard_free(&g);
		pos += off;
		if (off < piece)
			break;
	}
	*done = st_chunked_done(&d);
	assert_true(d.body_bytes == *body_len);
	return (ssize_t)pos;
}

struct good_case {
	const char *in;
	const char *body;
	size_t consumed; /* bytes of the message (the rest is the next message) */
};

static const struct good_case good[] = {
        {"5\r\nhello\r\n0\r\n\r\n", "hello", 15},
        {"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\nNEXT", "hello world", 26},
        {"A\r\n0123456789\r\n0\r\n\r\n", "0123456789", 20},
        {"a;name=value\r\n0123456789\r\n0;x\r\n\r\n", "0123456789", 33},
        {"5 \r\nhello\r\n0\r\n\r\n", "hello", 16},
        {"5\nhello\n0\n\n", "hello", 11}, /* bare LF */
        {"0\r\n\r\n", "", 5},
        {"0\r\nExpires: never\r\nX-Trailer: 1\r\n\r\nGET", "", 35},
        {"00000005\r\nhello\r\n0\r\n\r\n", "hello", 22},
        {"1\r\n\x00\r\n0\r\n\r\n", "\x00", 11}, /* data is opaque, NUL included */
};

static void test_good_all_splits(void **state)
{
	(void)state;
	for (size_t c = 0; c < sizeof good / sizeof good[0]; c++) {
		size_t len = good[c].consumed;
		/* Inputs with a NUL need their length spelled out. */
		size_t in_len = strlen(good[c].in);
		if (in_len < len)
			in_len = len;
		size_t want_body =
		        good[c].in[0] == '1' ? 1 : strlen(good[c].body); /* the NUL case */
		for (size_t step = 0; step <= in_len; step++) {
			char body[64];
			size_t body_len;
			bool done;
			ssize_t n =
			        feed(good[c].in, in_len, step, body, sizeof body, &body_len, &done);
			if (n != (ssize_t)len || !done)
				fail_msg("case %zu step %zu: n %zd done %d", c, step, n, done);
			assert_int_equal(body_len, want_body);
			assert_memory_equal(body, good[c].body, body_len);
		}
		/* Every proper prefix: no error, not done. */
		for (size_t k = 0; k < len; k++) {
			char body[64];
			size_t body_len;
			bool done;
			ssize_t n = feed(good[c].in, k, 0, body, sizeof body, &body_len, &done);
			assert_int_equal(n, (ssize_t)k);
			assert_false(done);
		}
	}
}

static void test_bad(void **state)
{
	(void)state;
	static const char *const bad[] = {
	        "\r\n",   /* no size */
	        ";x\r\n", /* extension without a size */
	        "g\r\n",  /* not hex */
	        "-5\r\n",
	        "5\r\nhelloX\r\n", /* data not followed by CRLF */
	        "5\r\nhello\rX",
	        "5\rX",                 /* CR not followed by LF */
	        "5;a\x01\r\n",          /* control byte in an extension */
	        "0\r\nX: \x01\r\n\r\n", /* control byte in a trailer */
	        "0\r\nX: y\rZ",
	        "0\r\n\rZ",
	        "5 5\r\n", /* digits after whitespace */
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char body[64];
		size_t body_len;
		bool done;
		ssize_t n = feed(bad[i], strlen(bad[i]), 0, body, sizeof body, &body_len, &done);
		if (n != -EBADMSG)
			fail_msg("bad %zu: %zd", i, n);
		/* Same result byte by byte. */
		assert_int_equal(
		        feed(bad[i], strlen(bad[i]), 1, body, sizeof body, &body_len, &done),
		        -EBADMSG);
	}
}

static void test_limits(void **state)
{
	(void)state;
	char line[ST_MAX_CHUNK_LINE_BYTES + 8];
	char body[8];
	size_t body_len;
	bool done;
	/* A size line of exactly the cap (CRLF included) is fine; one more byte is refused. */
	for (int extra = -1; extra <= 1; extra++) {
		size_t total = ST_MAX_CHUNK_LINE_BYTES + (size_t)(long)extra;
		memset(line, ' ', total);
		line[0] = '0';
		line[total - 2] = '\r';
		line[total - 1] = '\n';
		ssize_t n = feed(line, total, 0, body, sizeof body, &body_len, &done);
		assert_int_equal(n, extra <= 0 ? (ssize_t)total : -EMSGSIZE);
	}
	/* Trailer section: cap bytes of trailer lines accepted, one more refused. */
	size_t cap = ST_MAX_CHUNK_TRAILER_BYTES;
	char *t = malloc(cap + 16);
	assert_non_null(t);
	for (int extra = 0; extra <= 1; extra++) {
		size_t o = 0;
		memcpy(t, "0\r\n", 3);
		o = 3;
		size_t tlen = cap + (size_t)extra; /* trailer bytes including its CRLF */
		t[o] = 'X';
		memset(t + o + 1, 'v', tlen - 3);
		o += tlen - 2;
		memcpy(t + o, "\r\n\r\n", 4);
		o += 4;
		ssize_t n = feed(t, o, 0, body, sizeof body, &body_len, &done);
		assert_int_equal(n, extra == 0 ? (ssize_t)o : -EMSGSIZE);
	}
	free(t);
	/* Chunk size: 2^62 - 1 accepted as a size, 2^62 refused. */
	struct st_chunked_decoder d;
	const uint8_t *data;
	size_t data_len;
	st_chunked_init(&d);
	assert_int_equal(st_chunked_decode(&d, (const uint8_t *)"3fffffffffffffff\r\n", 18, &data,
	                                   &data_len),
	                 18);
	st_chunked_init(&d);
	assert_int_equal(st_chunked_decode(&d, (const uint8_t *)"4000000000000000\r\n", 18, &data,
	                                   &data_len),
	                 -EMSGSIZE);
	st_chunked_init(&d);
	assert_int_equal(st_chunked_decode(&d, (const uint8_t *)"ffffffffffffffffff\r\n", 20, &data,
	                                   &data_len),
	                 -EMSGSIZE);
}

static void test_done_stops(void **state)
{
	(void)state;
	struct st_chunked_decoder d;
	const uint8_t *data;
	size_t data_len;
	st_chunked_init(&d);
	const char *in = "0\r\n\r\n5\r\nhello";
	assert_int_equal(st_chunked_decode(&d, (const uint8_t *)in, strlen(in), &data, &data_len),
	                 5);
	assert_true(st_chunked_done(&d));
	assert_int_equal(st_chunked_decode(&d, (const uint8_t *)in + 5, 3, &data, &data_len), 0);
	assert_int_equal(st_chunked_decode(&d, (const uint8_t *)"", 0, &data, &data_len), 0);
}

static void test_encode_roundtrip(void **state)
{
	(void)state;
	const size_t sizes[] = {1, 9, 10, 15, 16, 255, 4096, 65536, 1u << 20, SIZE_MAX};
	const char *want[] = {"1",  "9",    "a",     "f",      "10",
	                      "ff", "1000", "10000", "100000", "ffffffffffffffff"};
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		char out[ST_CHUNK_HEADER_MAX_BYTES];
		ssize_t n = st_chunked_encode_header(out, sizeof out, sizes[i]);
		assert_int_equal(n, (ssize_t)strlen(want[i]) + 2);
		assert_memory_equal(out, want[i], strlen(want[i]));
		assert_memory_equal(out + n - 2, "\r\n", 2);
		/* One byte short fails. */
		assert_int_equal(st_chunked_encode_header(out, (size_t)n - 1, sizes[i]), -EMSGSIZE);
	}
	assert_int_equal(st_chunked_encode_header(NULL, 0, 0), -EINVAL);

	/* Encode a body in chunks of several sizes, decode it back byte by byte. */
	char msg[512], body[256];
	size_t o = 0;
	const char *parts[] = {"a", "bcdefghijklmnopq", "rstuvwxyz0123456789"};
	for (size_t i = 0; i < 3; i++) {
		o += (size_t)st_chunked_encode_header(msg + o, sizeof msg - o, strlen(parts[i]));
		memcpy(msg + o, parts[i], strlen(parts[i]));
		o += strlen(parts[i]);
		memcpy(msg + o, ST_CHUNK_TRAILER, 2);
		o += 2;
	}
	memcpy(msg + o, ST_CHUNK_LAST, 5);
	o += 5;
	size_t body_len;
	bool done;
	assert_int_equal(feed(msg, o, 1, body, sizeof body, &body_len, &done), (ssize_t)o);
	assert_true(done);
	assert_int_equal(body_len, 36);
	assert_memory_equal(body, "abcdefghijklmnopqrstuvwxyz0123456789", 36);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_good_all_splits),  cmocka_unit_test(test_bad),
	        cmocka_unit_test(test_limits),           cmocka_unit_test(test_done_stops),
	        cmocka_unit_test(test_encode_roundtrip),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
