/* Unit tests for the bounded byte queue (stream/buf.h), including a flat reference model. */
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
#include "guard.h"

#define BLK ST_BUF_BLOCK_BYTES

/* A pattern that differs at every offset of a few blocks, so misplaced bytes show up. */
static uint8_t pattern[4 * BLK + 64];

static int setup_pattern(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof pattern; i++)
		pattern[i] = (uint8_t)(i * 131u + (i >> 8));
	return 0;
}

/* Drains @b with peek/consume and checks it holds exactly @want; returns the peek sizes seen. */
static size_t drain_expect(struct st_buf *b, const uint8_t *want, size_t len, size_t *peeks,
                           size_t max_peeks)
{
	size_t got = 0, np = 0;
	while (st_buf_len(b) > 0) {
		const uint8_t *p;
		size_t n = st_buf_peek(b, &p);
		assert_true(n > 0 && n <= BLK);
		assert_true(got + n <= len);
		assert_memory_equal(p, want + got, n);
		if (np < max_peeks)
			peeks[np] = n;
		np++;
		got += n;
		st_buf_consume(b, n);
	}
	assert_int_equal(got, len);
	assert_null(b->head); /* drained queue holds no block */
	assert_null(b->tail);
	return np;
}

/* True when appending one byte needs a new block, i.e. the tail is full or absent. Observed by
 * failing the next allocation: this is how the tests see which blocks exist. When it returns
 * false, the byte 'z' was appended. */
static bool next_append_allocates(struct st_buf *b)
{
	failmalloc_fail_after(0);
	int rc = st_buf_append(b, "z", 1);
	int failed = failmalloc_failures();
	failmalloc_off();
	if (rc == 0) {
		assert_int_equal(failed, 0);
		return false;
	}
	assert_int_equal(rc, -ENOMEM);
	assert_int_equal(failed, 1);
	return true;
}

static void test_st_buf_init__allocates_nothing(void **state)
{
	(void)state;
	struct st_buf b;
	st_buf_init(&b, 1000);
	assert_null(b.head);
	assert_int_equal(st_buf_len(&b), 0);
	assert_int_equal(st_buf_space(&b), 1000);
	assert_int_equal(b.high, 500);
	assert_int_equal(b.low, 250);
	const uint8_t *p = (const uint8_t *)"x";
	assert_int_equal(st_buf_peek(&b, &p), 0);
	assert_null(p);
	assert_int_equal(st_buf_append(&b, NULL, 0), 0);
	assert_null(b.head); /* an empty append allocates nothing either */
	st_buf_cleanup(&b);
	st_buf_cleanup(&b); /* twice is fine */
}

static void test_st_buf_lower_cap__only_above_what_it_holds_and_its_mark(void **state)
{
	(void)state;
	struct st_buf b;
	st_buf_init(&b, 1000); /* high 500 */
	st_buf_raise_cap(&b, 3000);
	char data[800];
	memset(data, 'x', sizeof data);
	assert_int_equal(st_buf_append(&b, data, sizeof data), 0);
	assert_int_equal(st_buf_lower_cap(&b, 799), -EBUSY); /* holds more */
	assert_int_equal(b.cap, 3000);
	assert_int_equal(st_buf_lower_cap(&b, 1200), 0);
	assert_int_equal(b.cap, 1200);
	assert_int_equal(st_buf_append(&b, data, 401), -EMSGSIZE);
	st_buf_consume(&b, 800);
	assert_int_equal(st_buf_lower_cap(&b, 499), -EBUSY); /* below the high mark */
	assert_int_equal(st_buf_lower_cap(&b, 2000), 0);     /* not a raise */
	assert_int_equal(b.cap, 1200);
	st_buf_cleanup(&b);
}

static void test_st_buf_append__cap_minus_one_zero_plus_one(void **state)
{
	(void)state;
	const size_t cap = 2 * BLK + 5;
	struct st_buf b;
	st_buf_init(&b, cap);
	/* cap + 1 is refused whole and leaves the queue untouched */
	assert_int_equal(st_buf_append(&b, pattern, cap + 1), -EMSGSIZE);
	assert_int_equal(st_buf_len(&b), 0);
	assert_null(b.head);
	/* cap - 1, then the last byte: exactly cap */
	assert_int_equal(st_buf_append(&b, pattern, cap - 1), 0);
	assert_int_equal(st_buf_space(&b), 1);
	assert_int_equal(st_buf_append(&b, pattern + cap - 1, 2), -EMSGSIZE);
	assert_int_equal(st_buf_append(&b, pattern + cap - 1, 1), 0);
	assert_int_equal(st_buf_len(&b), cap);
	assert_int_equal(st_buf_space(&b), 0);
	assert_int_equal(st_buf_append(&b, pattern, 1), -EMSGSIZE);
	assert_int_equal(st_buf_append(&b, pattern, 0), 0);
	uint8_t *w = NULL;
	assert_int_equal(st_buf_reserve(&b, &w), 0); /* full */
	size_t peeks[8];
	assert_int_equal(drain_expect(&b, pattern, cap, peeks, 8), 3);
	assert_int_equal(peeks[0], BLK);
	assert_int_equal(peeks[1], BLK);
	assert_int_equal(peeks[2], 5);
	/* the whole cap in one append works too */
	assert_int_equal(st_buf_append(&b, pattern, cap), 0);
	assert_int_equal(drain_expect(&b, pattern, cap, peeks, 8), 3);
	st_buf_cleanup(&b);
}

static void test_st_buf_append__cap_zero(void **state)
{
	(void)state;
	struct st_buf b;
	st_buf_init(&b, 0);
	assert_int_equal(st_buf_append(&b, pattern, 0), 0);
	assert_int_equal(st_buf_append(&b, pattern, 1), -EMSGSIZE);
	uint8_t *w;
	assert_int_equal(st_buf_reserve(&b, &w), 0);
	assert_null(b.head);
	assert_int_equal(st_buf_set_watermarks(&b, 0, 0), 0);
	assert_false(st_buf_above_high(&b));
	assert_true(st_buf_below_low(&b));
	st_buf_cleanup(&b);
}

static void test_st_buf_append__block_boundaries(void **state)
{
	(void)state;
	/* Appends of BLK-1, BLK and BLK+1 bytes, in sequence, split at exact block edges. */
	static const size_t sizes[] = {BLK - 1, BLK, BLK + 1, 1, 2 * BLK};
	static uint8_t flat[6 * BLK];
	struct st_buf b;
	st_buf_init(&b, sizeof flat);
	size_t total = 0;
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		memcpy(flat + total, pattern + i, sizes[i]);
		assert_int_equal(st_buf_append(&b, pattern + i, sizes[i]), 0);
		total += sizes[i];
		assert_int_equal(st_buf_len(&b), total);
	}
	/* 5*BLK + 1 bytes packed into blocks of BLK: peeks are BLK x5 then 1 */
	size_t peeks[8];
	assert_int_equal(drain_expect(&b, flat, total, peeks, 8), 6);
	for (int i = 0; i < 5; i++)
		assert_int_equal(peeks[i], BLK);
	assert_int_equal(peeks[5], 1);
	st_buf_cleanup(&b);
}

static void test_st_buf_append__small_blocks_grow_with_the_queue(void **state)
{
	(void)state;
	/* A quiet stream's line gets a 256-byte block, not a whole one; a queue that keeps
	 * filling gets blocks as large as what it holds (doubling), up to BLK. */
	static uint8_t flat[4 * BLK];
	struct st_buf b;
	st_buf_init(&b, sizeof flat);
	assert_int_equal(st_buf_append(&b, pattern, 100), 0);
	assert_int_equal(st_buf_append(&b, pattern + 100, 155), 0);
	assert_false(next_append_allocates(&b)); /* the 256th byte ('z') still fits */
	assert_true(next_append_allocates(&b));  /* the 257th does not: the block was 256 */
	memcpy(flat, pattern, 255);
	flat[255] = 'z';
	size_t total = 256;
	const size_t appends[][2] = {{1, 1}, {7, 1000}, {9, BLK + 3}};
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(st_buf_append(&b, pattern + appends[i][0], appends[i][1]), 0);
		memcpy(flat + total, pattern + appends[i][0], appends[i][1]);
		total += appends[i][1];
	}
	/* 1 byte onto 256 queued: a block of 512. 1000 more: 511 fill it, 489 open a block of
	 * pow2(257 + 511 + 489) = 2048. BLK + 3 more: 1559 fill that, the other 14,830 open a
	 * full-size block (2816 + 14,830 >= BLK). */
	size_t peeks[8];
	assert_int_equal(drain_expect(&b, flat, total, peeks, 8), 4);
	assert_int_equal(peeks[0], 256);
	assert_int_equal(peeks[1], 512);
	assert_int_equal(peeks[2], 2048);
	assert_int_equal(peeks[3], total - 256 - 512 - 2048);
	st_buf_cleanup(&b);
}

static void test_st_buf_append__guard_page_source(void **state)
{
	(void)state;
	/* The source ends at an inaccessible page: an over-read of the caller's bytes faults. */
	struct guard_buf g;
	assert_int_equal(guard_new(&g, pattern, BLK + 3), 0);
	struct st_buf b;
	st_buf_init(&b, 4 * BLK);
	assert_int_equal(st_buf_append(&b, "ab", 2), 0);
	assert_int_equal(st_buf_append(&b, g.data, g.len), 0);
	uint8_t out[BLK + 5];
	assert_int_equal(st_buf_read(&b, out, sizeof out), BLK + 5);
	assert_memory_equal(out, "ab", 2);
	assert_memory_equal(out + 2, pattern, BLK + 3);
	guard_free(&g);
	st_buf_cleanup(&b);
}

static void test_st_buf_append__failmalloc_all_or_nothing(void **state)
{
	(void)state;
	/* "ab" then 3*BLK bytes: the second append needs exactly 3 new blocks (the first block's
	 * remaining BLK-2 bytes plus 2*BLK+2 more). Failing each of them leaves the queue as it
	 * was; LeakSanitizer checks nothing leaks. */
	int fails = 0;
	for (int n = 0;; n++) {
		struct st_buf b;
		st_buf_init(&b, 3 * BLK + 10);
		assert_int_equal(st_buf_append(&b, "ab", 2), 0);
		failmalloc_fail_after(n);
		int rc = st_buf_append(&b, pattern, 3 * BLK);
		int failed = failmalloc_failures();
		failmalloc_off();
		if (failed == 0) {
			assert_int_equal(rc, 0);
			assert_int_equal(st_buf_len(&b), 3 * BLK + 2);
			uint8_t two[2];
			assert_int_equal(st_buf_read(&b, two, 2), 2);
			assert_memory_equal(two, "ab", 2);
			size_t peeks[8];
			drain_expect(&b, pattern, 3 * BLK, peeks, 8);
			st_buf_cleanup(&b);
			break;
		}
		fails++;
		assert_int_equal(rc, -ENOMEM);
		assert_int_equal(st_buf_len(&b), 2);
		const uint8_t *p;
		assert_int_equal(st_buf_peek(&b, &p), 2);
		assert_memory_equal(p, "ab", 2);
		/* and the queue still works afterwards */
		assert_int_equal(st_buf_append(&b, "cd", 2), 0);
		assert_int_equal(st_buf_peek(&b, &p), 4);
		assert_memory_equal(p, "abcd", 4);
		st_buf_cleanup(&b);
	}
	assert_int_equal(fails, 3);
}

static void test_st_buf_reserve__commit(void **state)
{
	(void)state;
	struct st_buf b;
	st_buf_init(&b, 100);
	uint8_t *w;
	ssize_t n = st_buf_reserve(&b, &w);
	assert_int_equal(n, 100); /* limited by the cap, not the block */
	memcpy(w, "hello", 5);
	st_buf_commit(&b, 5);
	assert_int_equal(st_buf_len(&b), 5);
	n = st_buf_reserve(&b, &w);
	assert_int_equal(n, 95);
	st_buf_commit(&b, 0); /* the read got nothing this time */
	const uint8_t *p;
	assert_int_equal(st_buf_peek(&b, &p), 5);
	assert_memory_equal(p, "hello", 5);
	st_buf_consume(&b, 2);
	assert_int_equal(st_buf_peek(&b, &p), 3);
	assert_memory_equal(p, "llo", 3);
	/* reserve continues right after the last byte of the tail block */
	n = st_buf_reserve(&b, &w);
	assert_int_equal(n, 97);
	memcpy(w, "!!", 2);
	st_buf_commit(&b, 2);
	assert_int_equal(st_buf_peek(&b, &p), 5);
	assert_memory_equal(p, "llo!!", 5);
	st_buf_cleanup(&b);
	assert_int_equal(st_buf_len(&b), 0);
	assert_null(b.head);
}

static void test_st_buf_reserve__block_edges(void **state)
{
	(void)state;
	struct st_buf b;
	st_buf_init(&b, 3 * BLK);
	assert_int_equal(st_buf_append(&b, pattern, BLK - 3), 0);
	uint8_t *w;
	/* the tail's last 3 bytes, not a new block */
	assert_int_equal(st_buf_reserve(&b, &w), 3);
	memcpy(w, pattern + BLK - 3, 3);
	st_buf_commit(&b, 3);
	/* tail full: a new block, limited by the block size */
	assert_int_equal(st_buf_reserve(&b, &w), BLK);
	memcpy(w, pattern + BLK, BLK);
	st_buf_commit(&b, BLK);
	/* last block limited by the cap */
	assert_int_equal(st_buf_reserve(&b, &w), BLK);
	st_buf_commit(&b, 0); /* an empty tail behind data */
	assert_int_equal(st_buf_len(&b), 2 * BLK);
	/* an append fills that empty tail instead of allocating */
	assert_false(next_append_allocates(&b));
	size_t peeks[4];
	static uint8_t want[2 * BLK + 1];
	memcpy(want, pattern, 2 * BLK);
	want[2 * BLK] = 'z';
	assert_int_equal(drain_expect(&b, want, 2 * BLK + 1, peeks, 4), 3);
	st_buf_cleanup(&b);
}

static void test_st_buf_reserve__empty_commit_frees(void **state)
{
	(void)state;
	struct st_buf b;
	st_buf_init(&b, 10);
	uint8_t *w;
	assert_int_equal(st_buf_reserve(&b, &w), 10);
	assert_non_null(b.head);
	st_buf_commit(&b, 0);
	assert_null(b.head); /* an idle queue holds no block */
	/* allocation failure: -ENOMEM, queue unchanged */
	failmalloc_fail_after(0);
	assert_int_equal(st_buf_reserve(&b, &w), -ENOMEM);
	failmalloc_off();
	assert_null(b.head);
	assert_int_equal(st_buf_append(&b, "abcdefghij", 10), 0);
	assert_int_equal(st_buf_reserve(&b, &w), 0); /* full */
	st_buf_cleanup(&b);
	/* tail full and the allocation fails: -ENOMEM, data intact */
	st_buf_init(&b, 2 * BLK);
	assert_int_equal(st_buf_append(&b, pattern, BLK), 0);
	failmalloc_fail_after(0);
	assert_int_equal(st_buf_reserve(&b, &w), -ENOMEM);
	failmalloc_off();
	size_t peeks[2];
	drain_expect(&b, pattern, BLK, peeks, 2);
	st_buf_cleanup(&b);
}

static void test_st_buf_consume__frees_as_it_drains(void **state)
{
	(void)state;
	struct st_buf b;
	st_buf_init(&b, 4 * BLK);
	/* Partly drained: the tail keeps its room, no allocation for the next byte. */
	assert_int_equal(st_buf_append(&b, pattern, 10), 0);
	st_buf_consume(&b, 5);
	assert_false(next_append_allocates(&b));
	assert_int_equal(st_buf_len(&b), 6);
	/* Fully drained: the block is gone, so the next byte needs a new one. */
	st_buf_consume(&b, 6);
	assert_null(b.head);
	assert_true(next_append_allocates(&b));
	/* Draining the first of two blocks frees it while the second stays. */
	assert_int_equal(st_buf_append(&b, pattern, BLK + 7), 0);
	st_buf_consume(&b, BLK);
	const uint8_t *p;
	assert_int_equal(st_buf_peek(&b, &p), 7);
	assert_memory_equal(p, pattern + BLK, 7);
	assert_ptr_equal(b.head, b.tail);
	st_buf_consume(&b, 0); /* no-op */
	assert_int_equal(st_buf_len(&b), 7);
	st_buf_consume(&b, 7);
	assert_null(b.head);
	assert_null(b.tail);
	st_buf_cleanup(&b);
}

static void test_st_buf_read__across_blocks(void **state)
{
	(void)state;
	struct st_buf b;
	st_buf_init(&b, 3 * BLK);
	assert_int_equal(st_buf_append(&b, pattern, 2 * BLK + 9), 0);
	static uint8_t out[3 * BLK];
	assert_int_equal(st_buf_read(&b, out, 0), 0);
	assert_int_equal(st_buf_read(&b, NULL, 0), 0);
	assert_int_equal(st_buf_read(&b, out, BLK + 1), BLK + 1);
	assert_memory_equal(out, pattern, BLK + 1);
	assert_int_equal(st_buf_len(&b), BLK + 8);
	/* asking for more than queued copies what is there */
	assert_int_equal(st_buf_read(&b, out, sizeof out), BLK + 8);
	assert_memory_equal(out, pattern + BLK + 1, BLK + 8);
	assert_null(b.head);
	assert_int_equal(st_buf_read(&b, out, 10), 0);
	st_buf_cleanup(&b);
}

static void test_st_buf_set_watermarks__limits(void **state)
{
	(void)state;
	struct st_buf b;
	st_buf_init(&b, 1000);
	assert_int_equal(st_buf_set_watermarks(&b, 1001, 10), -EINVAL); /* high = cap + 1 */
	assert_int_equal(st_buf_set_watermarks(&b, 100, 101), -EINVAL); /* low = high + 1 */
	assert_int_equal(b.high, 500);                                  /* unchanged */
	assert_int_equal(b.low, 250);
	assert_int_equal(st_buf_set_watermarks(&b, 1000, 1000), 0); /* high = cap, low = high */
	assert_int_equal(st_buf_set_watermarks(&b, 256, 128), 0);
	/* above_high: len > 256; below_low: len <= 128 */
	assert_int_equal(st_buf_append(&b, pattern, 128), 0);
	assert_true(st_buf_below_low(&b));
	assert_false(st_buf_above_high(&b));
	assert_int_equal(st_buf_append(&b, pattern, 1), 0); /* 129 */
	assert_false(st_buf_below_low(&b));
	assert_int_equal(st_buf_append(&b, pattern, 127), 0); /* 256 */
	assert_false(st_buf_above_high(&b));
	assert_int_equal(st_buf_append(&b, pattern, 1), 0); /* 257 */
	assert_true(st_buf_above_high(&b));
	st_buf_consume(&b, 257 - 129); /* 129 */
	assert_false(st_buf_below_low(&b));
	st_buf_consume(&b, 1); /* 128 */
	assert_true(st_buf_below_low(&b));
	/* low 0: resume only once empty */
	assert_int_equal(st_buf_set_watermarks(&b, 10, 0), 0);
	assert_false(st_buf_below_low(&b));
	st_buf_consume(&b, 128);
	assert_true(st_buf_below_low(&b));
	st_buf_cleanup(&b);
}

/* ---- interleaved random operations against a flat model ------------------------------------ */

static uint32_t rng_state;

static uint32_t rng(void)
{
	/* xorshift32: deterministic, so a failure reproduces */
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 17;
	rng_state ^= rng_state << 5;
	return rng_state;
}

static void random_run(uint32_t seed, size_t cap, int ops)
{
	uint8_t *model = malloc(cap + 1);
	uint8_t *tmp = malloc(2 * BLK + 1);
	assert_non_null(model);
	assert_non_null(tmp);
	size_t mlen = 0;
	uint8_t next = 0;
	struct st_buf b;
	st_buf_init(&b, cap);
	rng_state = seed;
	for (int op = 0; op < ops; op++) {
		uint32_t r = rng();
		size_t amount = (r >> 8) % (2 * BLK + 1);
		if (r % 4 == 0)
			amount %= 40; /* plenty of small ones too */
		switch (r % 7) {
		case 0:
		case 1: { /* append, sometimes with the allocation failing */
			for (size_t i = 0; i < amount; i++)
				tmp[i] = (uint8_t)(next + i);
			bool inject = (r >> 4) % 8 == 0;
			if (inject)
				failmalloc_fail_after(0);
			int rc = st_buf_append(&b, tmp, amount);
			int failed = failmalloc_failures();
			failmalloc_off();
			if (amount > cap - mlen) {
				assert_int_equal(rc, -EMSGSIZE);
			} else if (inject && failed) {
				assert_int_equal(rc, -ENOMEM);
			} else {
				assert_int_equal(rc, 0);
				memcpy(model + mlen, tmp, amount);
				mlen += amount;
				next = (uint8_t)(next + amount);
			}
			break;
		}
		case 2: { /* reserve, write part of it, commit */
			uint8_t *w;
			ssize_t n = st_buf_reserve(&b, &w);
			assert_true(n >= 0);
			assert_true((size_t)n <= cap - mlen && (size_t)n <= BLK);
			assert_true(n > 0 || mlen == cap);
			if (n == 0)
				break;
			size_t put = amount % ((size_t)n + 1);
			for (size_t i = 0; i < put; i++)
				w[i] = model[mlen + i] = next++;
			st_buf_commit(&b, put);
			mlen += put;
			break;
		}
		case 3:
		case 4: { /* peek and consume part of the front */
			const uint8_t *p;
			size_t n = st_buf_peek(&b, &p);
			assert_true(n <= mlen && (n > 0) == (mlen > 0));
			assert_memory_equal(p, model, n);
			size_t take = n ? amount % (n + 1) : 0;
			st_buf_consume(&b, take);
			memmove(model, model + take, mlen - take);
			mlen -= take;
			break;
		}
		case 5: { /* read a copy across blocks */
			size_t got = st_buf_read(&b, tmp, amount);
			assert_int_equal(got, amount < mlen ? amount : mlen);
			assert_memory_equal(tmp, model, got);
			memmove(model, model + got, mlen - got);
			mlen -= got;
			break;
		}
		default: /* rarely: throw everything away */
			if ((r >> 4) % 16 == 0) {
				st_buf_cleanup(&b);
				mlen = 0;
			}
			break;
		}
		assert_int_equal(st_buf_len(&b), mlen);
		assert_int_equal(st_buf_space(&b), cap - mlen);
		assert_true((mlen == 0) == (b.head == NULL));
	}
	st_buf_cleanup(&b);
	free(model);
	free(tmp);
}

static void test_st_buf__random_against_model(void **state)
{
	(void)state;
	random_run(0x12345678u, 5 * BLK + 123, 20000);
	random_run(0x9e3779b9u, BLK, 5000);     /* cap of one block */
	random_run(0x0badf00du, 100, 5000);     /* tiny cap: mostly -EMSGSIZE paths */
	random_run(0xdeadbeefu, 2 * BLK, 5000); /* cap on a block edge */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_st_buf_init__allocates_nothing),
	        cmocka_unit_test(test_st_buf_append__cap_minus_one_zero_plus_one),
	        cmocka_unit_test(test_st_buf_append__cap_zero),
	        cmocka_unit_test(test_st_buf_append__block_boundaries),
	        cmocka_unit_test(test_st_buf_append__small_blocks_grow_with_the_queue),
	        cmocka_unit_test(test_st_buf_append__guard_page_source),
	        cmocka_unit_test(test_st_buf_append__failmalloc_all_or_nothing),
	        cmocka_unit_test(test_st_buf_reserve__commit),
	        cmocka_unit_test(test_st_buf_reserve__block_edges),
	        cmocka_unit_test(test_st_buf_reserve__empty_commit_frees),
	        cmocka_unit_test(test_st_buf_consume__frees_as_it_drains),
	        cmocka_unit_test(test_st_buf_read__across_blocks),
	        cmocka_unit_test(test_st_buf_set_watermarks__limits),
	        cmocka_unit_test(test_st_buf__random_against_model),
	        cmocka_unit_test(test_st_buf_lower_cap__only_above_what_it_holds_and_its_mark),
	};
	return cmocka_run_group_tests(tests, setup_pattern, NULL);
}
