/* Unit tests for websocket message reassembly (stream/reasm.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <stream/limits.h>
#include <stream/reasm.h>

#include "failmalloc.h"

static void test_st_reasm__one_piece_is_not_copied(void **state)
{
	(void)state;
	struct st_reasm r = {0};
	const uint8_t m[] = "whole";
	const uint8_t *out;
	size_t n;
	assert_int_equal(st_reasm_feed(&r, m, 5, true, true, &out, &n), 1);
	assert_ptr_equal(out, m);
	assert_int_equal(n, 5);
	assert_null(r.buf);
	st_reasm_cleanup(&r);
}

static void test_st_reasm__pieces_and_empty_final(void **state)
{
	(void)state;
	struct st_reasm r = {0};
	const uint8_t *out;
	size_t n;
	uint8_t big[200000];
	for (size_t i = 0; i < sizeof big; i++)
		big[i] = (uint8_t)(i * 13);
	size_t off = 0;
	bool first = true;
	while (off < sizeof big) {
		size_t k = sizeof big - off < 4082 ? sizeof big - off : 4082;
		assert_int_equal(st_reasm_feed(&r, big + off, k, first, false, &out, &n), 0);
		first = false;
		off += k;
	}
	/* python-websockets ends with an empty final continuation */
	assert_int_equal(st_reasm_feed(&r, NULL, 0, false, true, &out, &n), 1);
	assert_int_equal(n, sizeof big);
	assert_memory_equal(out, big, sizeof big);
	/* the next message starts clean */
	assert_int_equal(st_reasm_feed(&r, big, 3, true, false, &out, &n), 0);
	assert_int_equal(st_reasm_feed(&r, big + 3, 2, false, true, &out, &n), 1);
	assert_int_equal(n, 5);
	assert_memory_equal(out, big, 5);
	st_reasm_cleanup(&r);
}

static void test_st_reasm__over_the_limit_is_refused_not_cut(void **state)
{
	(void)state;
	struct st_reasm r = {0};
	const uint8_t *out;
	size_t n;
	static uint8_t chunk[256 * 1024];
	int rc = 0;
	for (int i = 0; i < 5; i++) /* 1.25 MiB */
		assert_int_equal(st_reasm_feed(&r, chunk, sizeof chunk, i == 0, false, &out, &n),
		                 0);
	rc = st_reasm_feed(&r, chunk, 1, false, true, &out, &n);
	assert_int_equal(rc, -EMSGSIZE);
	assert_true(r.cap <= ST_MAX_MESSAGE_BYTES);
	/* exactly the limit is fine */
	for (int i = 0; i < 4; i++)
		assert_int_equal(st_reasm_feed(&r, chunk, sizeof chunk, i == 0, i == 3, &out, &n),
		                 i == 3 ? 1 : 0);
	assert_int_equal(n, ST_MAX_MESSAGE_BYTES);
	/* a whole over-limit message in one piece */
	static uint8_t huge[ST_MAX_MESSAGE_BYTES + 1];
	assert_int_equal(st_reasm_feed(&r, huge, sizeof huge, true, true, &out, &n), -EMSGSIZE);
	st_reasm_cleanup(&r);
}

static void test_st_reasm__failmalloc(void **state)
{
	(void)state;
	const uint8_t *out;
	size_t n;
	for (int fail = 0; fail < 3; fail++) {
		struct st_reasm r = {0};
		failmalloc_fail_after(fail);
		int rc = st_reasm_feed(&r, (const uint8_t *)"abc", 3, true, false, &out, &n);
		failmalloc_off();
		assert_true(rc == 0 || rc == -ENOMEM);
		st_reasm_cleanup(&r);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_st_reasm__one_piece_is_not_copied),
	        cmocka_unit_test(test_st_reasm__pieces_and_empty_final),
	        cmocka_unit_test(test_st_reasm__over_the_limit_is_refused_not_cut),
	        cmocka_unit_test(test_st_reasm__failmalloc),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
