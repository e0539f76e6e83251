/* Unit tests for the bounded byte queue (stream/buf.h), against a flat reference model. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include <stream/buf.h>
#include <stream/err.h>

#include "failmalloc.h"

static void test_cap_limits(void **state)
{
	(void)state;
	struct st_buf b;
	static uint8_t data[3 * ST_BUF_BLOCK_BYTES + 10];
	for (size_t i = 0; i < sizeof data; i++)
		data[i] = (uint8_t)(i * 7);
	size_t cap = 2 * ST_BUF_BLOCK_BYTES + 5;
	st_buf_init(&b, cap);
	assert_null(b.head); /* allocates nothing until used */
	/* cap + 1 refused whole; cap - 1 then 1 more fits; then 1 more is refused. */
	assert_int_equal(st_buf_append(&b, data, cap + 1), -EMSGSIZE);
	assert_int_equal(st_buf_len(&b), 0);
	assert_int_equal(st_buf_append(&b, data, cap - 1), 0);
	assert_int_equal(st_buf_space(&b), 1);
	assert_int_equal(st_buf_append(&b, data + cap - 1, 1), 0);
	assert_int_equal(st_buf_append(&b, data, 1), -EMSGSIZE);
	uint8_t *w;
	assert_int_equal(st_buf_reserve(&b, &w), 0); /* full */
	/* Read it all back in peeks. */
	size_t got = 0;
	while (st_buf_len(&b) > 0) {
		const uint8_t *p;
		size_t n = st_buf_peek(&b, &p);
		assert_true(n > 0 && n <= ST_BUF_BLOCK_BYTES);
		assert_memory_equal(p, data + got, n);
		got += n;
		st_buf_consume(&b, n);
	}
	assert_int_equal(got, cap);
	assert_null(b.head); /* drained blocks are freed */
	const uint8_t *p;
	assert_int_equal(st_buf_peek(&b, &p), 0);
	st_buf_cleanup(&b);
}

static void test_reserve_commit(void **state)
{
	(void)state;
	struct st_buf b;
	st_buf_init(&b, 100);
	uint8_t *w;
	ssize_t n = st_buf_reserve(&b, &w);
	assert_int_equal(n, 100); /* limited by the cap, not the block */
	memcpy(w, "hello", 5);
	st_buf_commit(&b, 5);
	n = st_buf_reserve(&b, &w);
	assert_int_equal(n, 95);
	st_buf_commit(&b, 0); /* nothing read this time */
	const uint8_t *p;
	assert_int_equal(st_buf_peek(&b, &p), 5);
	assert_memory_equal(p, "hello", 5);
	st_buf_consume(&b, 2);
	assert_int_equal(st_buf_peek(&b, &p), 3);
	assert_memory_equal(p, "llo", 3);
	assert_true(st_buf_above(&b, 2));
	assert_false(st_buf_above(&b, 3));
	assert_true(st_buf_at_or_below(&b, 3));
	assert_false(st_buf_at_or_below(&b, 2));
	st_buf_cleanup(&b);
	assert_int_equal(st_buf_len(&b), 0);
	st_buf_cleanup(&b);
}

static void test_random_against_model(void **state)
{
	(void)state;
	/* Random appends, reserves and consumes; the queue must always equal a flat model. */
	const size_t cap = 5 * ST_BUF_BLOCK_BYTES + 123;
	uint8_t *model = malloc(cap);
	uint8_t *tmp = malloc(cap);
	assert_non_null(model);
	assert_non_null(tmp);
	size_t mlen = 0;
	struct st_buf b;
	st_buf_init(&b, cap);
	unsigned seed = 12345;
	uint8_t next = 0;
	for (int op = 0; op < 20000; op++) {
		seed = seed * 1103515245 + 12345;
		unsigned r = (seed >> 8) % 3;
		size_t amount = (seed >> 12) % (ST_BUF_BLOCK_BYTES + 500);
		if (r == 0) {
			for (size_t i = 0; i < amount; i++)
				tmp[i % cap] = next++;
			int rc = st_buf_append(&b, tmp, amount);
			if (amount > cap - mlen) {
				assert_int_equal(rc, -EMSGSIZE);
				next = (uint8_t)(next - amount); /* not written */
			} else {
				assert_int_equal(rc, 0);
				memcpy(model + mlen, tmp, amount);
				mlen += amount;
			}
		} else if (r == 1) {
			uint8_t *w;
			ssize_t n = st_buf_reserve(&b, &w);
			assert_true(n >= 0 && (size_t)n <= cap - mlen);
			size_t put = n > 0 ? amount % ((size_t)n + 1) : 0;
			for (size_t i = 0; i < put; i++)
				w[i] = model[mlen + i] = next++;
			if (n > 0 || put == 0) {
				if (b.tail)
					st_buf_commit(&b, put);
			}
			mlen += put;
		} else {
			size_t take = amount < mlen ? amount : mlen;
			size_t checked = 0;
			while (checked < take) {
				const uint8_t *p;
				size_t n = st_buf_peek(&b, &p);
				assert_true(n > 0);
				if (n > take - checked)
					n = take - checked;
				assert_memory_equal(p, model + checked, n);
				checked += n;
				st_buf_consume(&b, n);
			}
			memmove(model, model + take, mlen - take);
			mlen -= take;
		}
		assert_int_equal(st_buf_len(&b), mlen);
	}
	st_buf_cleanup(&b);
	free(model);
	free(tmp);
}

static void test_failmalloc(void **state)
{
	(void)state;
	/* An append needing three blocks fails cleanly at each allocation, leaving the queue as it
	 * was (same length, same bytes), and leaks nothing. */
	static uint8_t data[3 * ST_BUF_BLOCK_BYTES];
	memset(data, 'x', sizeof data);
	for (int n = 0;; n++) {
		struct st_buf b;
		st_buf_init(&b, sizeof data + 10);
		assert_int_equal(st_buf_append(&b, "ab", 2), 0);
		failmalloc_fail_after(n);
		int rc = st_buf_append(&b, data, sizeof data);
		int failed = failmalloc_failures();
		failmalloc_off();
		if (!failed) {
			assert_int_equal(rc, 0);
			assert_int_equal(st_buf_len(&b), sizeof data + 2);
			st_buf_cleanup(&b);
			break;
		}
		assert_int_equal(rc, -ENOMEM);
		assert_int_equal(st_buf_len(&b), 2);
		const uint8_t *p;
		assert_int_equal(st_buf_peek(&b, &p), 2);
		assert_memory_equal(p, "ab", 2);
		/* and it still works */
		assert_int_equal(st_buf_append(&b, "cd", 2), 0);
		assert_int_equal(st_buf_peek(&b, &p), 4);
		assert_memory_equal(p, "abcd", 4);
		st_buf_cleanup(&b);
	}
	/* reserve on an empty queue with the allocation failing */
	struct st_buf b;
	st_buf_init(&b, 10);
	uint8_t *w;
	failmalloc_fail_after(0);
	assert_int_equal(st_buf_reserve(&b, &w), -ENOMEM);
	failmalloc_off();
	st_buf_cleanup(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_cap_limits),
	        cmocka_unit_test(test_reserve_commit),
	        cmocka_unit_test(test_random_against_model),
	        cmocka_unit_test(test_failmalloc),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
