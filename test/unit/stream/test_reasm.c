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
#include "guard.h"
#include "testutil.h"

/* A tunnel message: ConnectID 300, type DATA, "hello world" (PROTOCOL.md's example header). */
#define MSG_HEX "ac 02 03 68 65 6c 6c 6f 20 77 6f 72 6c 64"
#define MSG_LEN 14u

/* 256 KiB: four of them are exactly ST_MAX_MESSAGE_BYTES. */
#define QUARTER (ST_MAX_MESSAGE_BYTES / 4u)
static uint8_t quarter[QUARTER];

static void msg_bytes(uint8_t out[MSG_LEN])
{
	assert_int_equal(hex_decode(MSG_HEX, out, MSG_LEN), MSG_LEN);
}

static void test_st_reasm_feed__one_piece_is_not_copied(void **state)
{
	(void)state;
	struct st_reasm r = {0};
	uint8_t m[MSG_LEN];
	msg_bytes(m);
	const uint8_t *out;
	size_t n;
	assert_int_equal(st_reasm_feed(&r, m, MSG_LEN, true, true, &out, &n), 1);
	assert_ptr_equal(out, m);
	assert_int_equal(n, MSG_LEN);
	assert_null(r.buf);
	st_reasm_cleanup(&r);
}

static void test_st_reasm_feed__three_fragments_exact_bytes(void **state)
{
	(void)state;
	struct st_reasm r = {0};
	uint8_t m[MSG_LEN];
	msg_bytes(m);
	const uint8_t *out;
	size_t n;
	assert_int_equal(st_reasm_feed(&r, m, 3, true, false, &out, &n), 0);
	assert_int_equal(st_reasm_feed(&r, m + 3, 5, false, false, &out, &n), 0);
	assert_int_equal(st_reasm_feed(&r, m + 8, MSG_LEN - 8, false, true, &out, &n), 1);
	assert_int_equal(n, MSG_LEN);
	uint8_t want[MSG_LEN];
	assert_int_equal(hex_decode("ac 02 03 68 65 6c 6c 6f 20 77 6f 72 6c 64", want, sizeof want),
	                 MSG_LEN);
	assert_memory_equal(out, want, MSG_LEN);
	st_reasm_cleanup(&r);
}

/* Every proper prefix as a first fragment is incomplete (0); the rest completes the message. */
static void test_st_reasm_feed__every_proper_prefix(void **state)
{
	(void)state;
	uint8_t m[MSG_LEN];
	msg_bytes(m);
	const uint8_t *out;
	size_t n;
	struct st_reasm r = {0};
	for (size_t k = 0; k < MSG_LEN; k++) {
		assert_int_equal(st_reasm_feed(&r, m, k, true, false, &out, &n), 0);
		assert_int_equal(st_reasm_feed(&r, m + k, MSG_LEN - k, false, true, &out, &n), 1);
		assert_int_equal(n, MSG_LEN);
		assert_memory_equal(out, m, MSG_LEN);
	}
	/* And every split into three. */
	for (size_t a = 0; a <= MSG_LEN; a++)
		for (size_t b = a; b <= MSG_LEN; b++) {
			assert_int_equal(st_reasm_feed(&r, m, a, true, false, &out, &n), 0);
			assert_int_equal(st_reasm_feed(&r, m + a, b - a, false, false, &out, &n),
			                 0);
			assert_int_equal(
			        st_reasm_feed(&r, m + b, MSG_LEN - b, false, true, &out, &n), 1);
			assert_int_equal(n, MSG_LEN);
			assert_memory_equal(out, m, MSG_LEN);
		}
	st_reasm_cleanup(&r);
}

static void test_st_reasm_feed__byte_by_byte(void **state)
{
	(void)state;
	uint8_t m[MSG_LEN];
	msg_bytes(m);
	const uint8_t *out;
	size_t n;
	struct st_reasm r = {0};
	for (size_t i = 0; i + 1 < MSG_LEN; i++)
		assert_int_equal(st_reasm_feed(&r, m + i, 1, i == 0, false, &out, &n), 0);
	assert_int_equal(st_reasm_feed(&r, m + MSG_LEN - 1, 1, false, true, &out, &n), 1);
	assert_int_equal(n, MSG_LEN);
	assert_memory_equal(out, m, MSG_LEN);
	/* python-websockets ends with an empty final continuation */
	for (size_t i = 0; i < MSG_LEN; i++)
		assert_int_equal(st_reasm_feed(&r, m + i, 1, i == 0, false, &out, &n), 0);
	assert_int_equal(st_reasm_feed(&r, NULL, 0, false, true, &out, &n), 1);
	assert_int_equal(n, MSG_LEN);
	assert_memory_equal(out, m, MSG_LEN);
	st_reasm_cleanup(&r);
}

static void test_st_reasm_feed__big_message_in_pieces(void **state)
{
	(void)state;
	struct st_reasm r = {0};
	const uint8_t *out;
	size_t n;
	static uint8_t big[200000];
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

/* A first fragment while a message is unfinished starts over: the old bytes are dropped. */
static void test_st_reasm_feed__first_drops_unfinished(void **state)
{
	(void)state;
	struct st_reasm r = {0};
	const uint8_t *out;
	size_t n;
	assert_int_equal(st_reasm_feed(&r, (const uint8_t *)"stale", 5, true, false, &out, &n), 0);
	assert_int_equal(st_reasm_feed(&r, (const uint8_t *)"ab", 2, true, false, &out, &n), 0);
	assert_int_equal(st_reasm_feed(&r, (const uint8_t *)"c", 1, false, true, &out, &n), 1);
	assert_int_equal(n, 3);
	assert_memory_equal(out, "abc", 3);
	st_reasm_cleanup(&r);
}

/* Feeds @total bytes in fragments of at most QUARTER, the last one final; returns the last rc. */
static int feed_total(struct st_reasm *r, size_t total, const uint8_t **out, size_t *n)
{
	size_t off = 0;
	int rc;
	do {
		size_t k = total - off < QUARTER ? total - off : QUARTER;
		rc = st_reasm_feed(r, quarter, k, off == 0, off + k == total, out, n);
		off += k;
		if (off < total)
			assert_int_equal(rc, 0);
	} while (off < total);
	return rc;
}

/* Each limit at -1/0/+1, in fragments and in one piece. */
static void test_st_reasm_feed__limit(void **state)
{
	(void)state;
	struct st_reasm r = {0};
	const uint8_t *out;
	size_t n;
	assert_int_equal(feed_total(&r, ST_MAX_MESSAGE_BYTES - 1, &out, &n), 1);
	assert_int_equal(n, ST_MAX_MESSAGE_BYTES - 1);
	assert_int_equal(feed_total(&r, ST_MAX_MESSAGE_BYTES, &out, &n), 1);
	assert_int_equal(n, ST_MAX_MESSAGE_BYTES);
	assert_true(r.cap <= ST_MAX_MESSAGE_BYTES);
	assert_int_equal(feed_total(&r, ST_MAX_MESSAGE_BYTES + 1, &out, &n), -EMSGSIZE);
	assert_true(r.cap <= ST_MAX_MESSAGE_BYTES);

	static uint8_t huge[ST_MAX_MESSAGE_BYTES + 1];
	assert_int_equal(st_reasm_feed(&r, huge, ST_MAX_MESSAGE_BYTES - 1, true, true, &out, &n),
	                 1);
	assert_int_equal(st_reasm_feed(&r, huge, ST_MAX_MESSAGE_BYTES, true, true, &out, &n), 1);
	assert_ptr_equal(out, huge);
	assert_int_equal(st_reasm_feed(&r, huge, ST_MAX_MESSAGE_BYTES + 1, true, true, &out, &n),
	                 -EMSGSIZE);
	st_reasm_cleanup(&r);
}

/*
 * A fragmented message that never ends is refused by the fragment that takes it past the limit,
 * not when (if ever) its last fragment arrives; nothing is held after that, the rest of the
 * message is dropped without a second report, and the next message is whole.
 */
static void test_st_reasm_feed__cut_when_the_limit_is_crossed(void **state)
{
	(void)state;
	struct st_reasm r = {0};
	const uint8_t *out;
	size_t n;
	for (int i = 0; i < 4; i++) /* exactly 1 MiB, not final */
		assert_int_equal(st_reasm_feed(&r, quarter, QUARTER, i == 0, false, &out, &n), 0);
	assert_int_equal(r.len, ST_MAX_MESSAGE_BYTES);
	assert_int_equal(st_reasm_feed(&r, quarter, 1, false, false, &out, &n), -EMSGSIZE);
	assert_null(r.buf);
	assert_int_equal(r.cap, 0);
	assert_int_equal(r.len, 0);
	/* the rest of that message: dropped, reported once, nothing held */
	for (int i = 0; i < 8; i++) {
		assert_int_equal(st_reasm_feed(&r, quarter, QUARTER, false, false, &out, &n), 0);
		assert_null(r.buf);
	}
	assert_int_equal(st_reasm_feed(&r, quarter, 7, false, true, &out, &n), 0);
	assert_null(r.buf);
	/* the next message */
	assert_int_equal(st_reasm_feed(&r, (const uint8_t *)"ab", 2, true, false, &out, &n), 0);
	assert_int_equal(st_reasm_feed(&r, (const uint8_t *)"c", 1, false, true, &out, &n), 1);
	assert_int_equal(n, 3);
	assert_memory_equal(out, "abc", 3);

	/* one big fragment crossing the limit at once */
	assert_int_equal(st_reasm_feed(&r, quarter, 10, true, false, &out, &n), 0);
	static uint8_t huge[ST_MAX_MESSAGE_BYTES];
	assert_int_equal(st_reasm_feed(&r, huge, ST_MAX_MESSAGE_BYTES - 9, false, false, &out, &n),
	                 -EMSGSIZE);
	assert_null(r.buf);
	/* a first fragment alone over the limit */
	assert_int_equal(st_reasm_feed(&r, huge, ST_MAX_MESSAGE_BYTES, true, false, &out, &n), 0);
	static uint8_t huge1[ST_MAX_MESSAGE_BYTES + 1];
	assert_int_equal(st_reasm_feed(&r, huge1, sizeof huge1, true, false, &out, &n), -EMSGSIZE);
	assert_null(r.buf);
	st_reasm_cleanup(&r);
}

/* Byte by byte up to the limit: the byte after it is refused at once. */
static void test_st_reasm_feed__cut_byte_by_byte(void **state)
{
	(void)state;
	struct st_reasm r = {0};
	const uint8_t *out;
	size_t n;
	for (size_t i = 0; i < ST_MAX_MESSAGE_BYTES; i++) {
		int rc = st_reasm_feed(&r, quarter + (i % QUARTER), 1, i == 0, false, &out, &n);
		if (rc != 0)
			fail_msg("byte %zu: %d", i, rc);
	}
	assert_true(r.cap <= ST_MAX_MESSAGE_BYTES);
	assert_int_equal(st_reasm_feed(&r, quarter, 1, false, false, &out, &n), -EMSGSIZE);
	assert_null(r.buf);
	st_reasm_cleanup(&r);
}

/* After a message over the keep size, the next one gets a small buffer again. */
static void test_st_reasm_feed__big_buffer_given_back(void **state)
{
	(void)state;
	struct st_reasm r = {0};
	const uint8_t *out;
	size_t n;
	assert_int_equal(feed_total(&r, ST_MAX_MESSAGE_BYTES, &out, &n), 1);
	assert_int_equal(r.cap, ST_MAX_MESSAGE_BYTES);
	assert_int_equal(st_reasm_feed(&r, (const uint8_t *)"ab", 2, true, false, &out, &n), 0);
	assert_true(r.cap <= 256u * 1024u);
	assert_int_equal(st_reasm_feed(&r, (const uint8_t *)"c", 1, false, true, &out, &n), 1);
	assert_memory_equal(out, "abc", 3);
	st_reasm_cleanup(&r);
	assert_null(r.buf);
	st_reasm_cleanup(&r); /* twice is fine */
}

/* Fragments that end exactly at a guard page: nothing reads past what it was given. */
static void test_st_reasm_feed__guard_page(void **state)
{
	(void)state;
	uint8_t m[MSG_LEN];
	msg_bytes(m);
	struct st_reasm r = {0};
	const uint8_t *out;
	size_t n;
	static const size_t cuts[] = {0, 1, 4, 9, MSG_LEN};
	for (size_t i = 0; i + 1 < sizeof cuts / sizeof cuts[0]; i++) {
		struct guard_buf g;
		assert_int_equal(guard_new(&g, m + cuts[i], cuts[i + 1] - cuts[i]), 0);
		bool final = cuts[i + 1] == MSG_LEN;
		int rc = st_reasm_feed(&r, g.data, g.len, i == 0, final, &out, &n);
		guard_free(&g);
		assert_int_equal(rc, final ? 1 : 0);
	}
	assert_int_equal(n, MSG_LEN);
	assert_memory_equal(out, m, MSG_LEN);
	/* whole, in one guarded piece: passed through */
	struct guard_buf g;
	assert_int_equal(guard_new(&g, m, MSG_LEN), 0);
	assert_int_equal(st_reasm_feed(&r, g.data, g.len, true, true, &out, &n), 1);
	assert_ptr_equal(out, g.data);
	guard_free(&g);
	st_reasm_cleanup(&r);
}

/*
 * Fail each allocation in turn while a 600 KiB message grows through several buffer sizes:
 * -ENOMEM, the rest of that message is dropped, the next one is whole, and nothing leaks
 * (LeakSanitizer).
 */
static void test_st_reasm_feed__failmalloc(void **state)
{
	(void)state;
	const uint8_t *out;
	size_t n;
	for (int k = 0;; k++) {
		struct st_reasm r = {0};
		int rc = 0, enomem = 0;
		failmalloc_fail_after(k);
		for (size_t off = 0; off < 600u * 1024u; off += 4096) {
			rc = st_reasm_feed(&r, quarter, 4096, off == 0, false, &out, &n);
			if (rc == -ENOMEM)
				enomem++;
			else
				assert_int_equal(rc, 0);
		}
		rc = st_reasm_feed(&r, quarter, 1, false, true, &out, &n);
		int failed = failmalloc_failures();
		failmalloc_off();
		assert_int_equal(enomem, failed);
		if (failed == 0) {
			assert_int_equal(rc, 1);
			assert_int_equal(n, 600u * 1024u + 1);
			st_reasm_cleanup(&r);
			assert_true(k > 2); /* the buffer grew at least three times */
			break;
		}
		assert_int_equal(rc, 0); /* the failed message was dropped */
		assert_int_equal(st_reasm_feed(&r, (const uint8_t *)"ab", 2, true, false, &out, &n),
		                 0);
		assert_int_equal(st_reasm_feed(&r, (const uint8_t *)"c", 1, false, true, &out, &n),
		                 1);
		assert_memory_equal(out, "abc", 3);
		st_reasm_cleanup(&r);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_st_reasm_feed__one_piece_is_not_copied),
	        cmocka_unit_test(test_st_reasm_feed__three_fragments_exact_bytes),
	        cmocka_unit_test(test_st_reasm_feed__every_proper_prefix),
	        cmocka_unit_test(test_st_reasm_feed__byte_by_byte),
	        cmocka_unit_test(test_st_reasm_feed__big_message_in_pieces),
	        cmocka_unit_test(test_st_reasm_feed__first_drops_unfinished),
	        cmocka_unit_test(test_st_reasm_feed__limit),
	        cmocka_unit_test(test_st_reasm_feed__cut_when_the_limit_is_crossed),
	        cmocka_unit_test(test_st_reasm_feed__cut_byte_by_byte),
	        cmocka_unit_test(test_st_reasm_feed__big_buffer_given_back),
	        cmocka_unit_test(test_st_reasm_feed__guard_page),
	        cmocka_unit_test(test_st_reasm_feed__failmalloc),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
