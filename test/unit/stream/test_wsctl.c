/* Unit tests for a tunnel's control frames (stream/wsctl.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include <stream/wsctl.h>

#define HOLD 15000u

/* Every case starts from a tunnel that came up at 0 (setup). */
static struct st_wsctl c;
static struct st_liveness l;

static int setup(void **state)
{
	(void)state;
	st_liveness_init(&l, 0);
	st_wsctl_init(&c, "cloudstream", 0);
	return 0;
}

/* The peer's frame @op with the text @s as its payload, at @now, with the hold @hold. */
static enum st_wsctl_action recv_text(enum st_ws_opcode op, const char *s, uint64_t now,
                                      uint64_t hold)
{
	return st_wsctl_recv(&c, &l, op, (const uint8_t *)s, s ? strlen(s) : 0, now, hold);
}

/* Takes the next frame @c owes and checks it is @op with the @n bytes at @want. */
static void take_expect(enum st_ws_opcode op, const void *want, size_t n)
{
	enum st_ws_opcode got;
	const uint8_t *p = NULL;
	size_t len = 99;
	assert_true(st_wsctl_take(&c, &got, &p, &len));
	assert_int_equal(got, op);
	assert_int_equal(len, n);
	if (n)
		assert_memory_equal(p, want, n);
}

static void take_none(void)
{
	enum st_ws_opcode got;
	const uint8_t *p;
	size_t len;
	assert_false(st_wsctl_take(&c, &got, &p, &len));
	assert_false(st_wsctl_want_write(&c));
}

static void test_st_wsctl_recv__ping_answered_at_once_without_hold(void **state)
{
	(void)state;
	st_wsctl_init(&c, "cloudstream", 1000);
	take_none();
	static const uint8_t ping[] = {0x70, 0x69, 0x6e, 0x67, 0x00, 0xff};
	assert_int_equal(st_wsctl_recv(&c, &l, ST_WS_PING, ping, sizeof ping, 5000, 0),
	                 ST_WSCTL_WRITE);
	assert_true(l.last_rx_ms == 5000); /* a PING is life */
	assert_true(st_wsctl_want_write(&c));
	assert_false(c.pong_held);
	take_expect(ST_WS_PONG, ping, sizeof ping); /* the same bytes back */
	take_none();
}

static void test_st_wsctl_recv__empty_and_longest_ping(void **state)
{
	(void)state;
	st_wsctl_init(&c, "x", 0);
	assert_int_equal(recv_text(ST_WS_PING, NULL, 1, 0), ST_WSCTL_WRITE);
	take_expect(ST_WS_PONG, NULL, 0);
	uint8_t big[ST_WS_MAX_CONTROL_BYTES];
	for (size_t i = 0; i < sizeof big; i++)
		big[i] = (uint8_t)i;
	assert_int_equal(st_wsctl_recv(&c, &l, ST_WS_PING, big, sizeof big, 2, 0), ST_WSCTL_WRITE);
	take_expect(ST_WS_PONG, big, sizeof big);
}

static void test_st_wsctl_take__pong_before_ping(void **state)
{
	(void)state;
	st_wsctl_init(&c, "ping you", 0);
	c.want_ping = true; /* the liveness sweep */
	assert_true(st_wsctl_want_write(&c));
	assert_int_equal(recv_text(ST_WS_PING, "ab", 10, 0), ST_WSCTL_WRITE);
	take_expect(ST_WS_PONG, "ab", 2);
	take_expect(ST_WS_PING, "ping you", 8);
	take_none();
}

static void test_st_wsctl_recv__pong_held_within_the_offer(void **state)
{
	(void)state;
	st_wsctl_init(&c, "cloudstream", 1000);
	/* Our last frame went at 1000: the PONG may wait until 1000 + HOLD. */
	assert_int_equal(recv_text(ST_WS_PING, "p1", 5000, HOLD), ST_WSCTL_LATER);
	assert_true(c.pong_held);
	assert_true(c.pong_due_ms == 1000 + HOLD);
	assert_false(st_wsctl_want_write(&c));
	/* A later PING replaces the payload; the time stays (it is counted from our last frame). */
	assert_int_equal(recv_text(ST_WS_PING, "p22", 10000, HOLD), ST_WSCTL_LATER);
	assert_true(c.pong_due_ms == 1000 + HOLD);
	assert_true(l.last_rx_ms == 10000);
	/* The sweep: not before its time, then once. */
	assert_false(st_wsctl_due(&c, 1000 + HOLD - 1));
	assert_false(st_wsctl_want_write(&c));
	assert_true(st_wsctl_due(&c, 1000 + HOLD));
	assert_false(c.pong_held);
	assert_false(st_wsctl_due(&c, 1000 + HOLD + 1));
	take_expect(ST_WS_PONG, "p22", 3); /* the latest PING's */
	take_none();
}

static void test_st_wsctl_recv__ping_at_the_due_time_answered_at_once(void **state)
{
	(void)state;
	assert_int_equal(recv_text(ST_WS_PING, "a", HOLD - 1, HOLD), ST_WSCTL_LATER);
	/* The next PING, once the time has come, takes the held PONG along. */
	assert_int_equal(recv_text(ST_WS_PING, "b", HOLD, HOLD), ST_WSCTL_WRITE);
	assert_false(c.pong_held);
	take_expect(ST_WS_PONG, "b", 1);
	take_none();
}

static void test_st_wsctl_sent__moves_the_hold(void **state)
{
	(void)state;
	st_wsctl_sent(&c, 40000);
	assert_true(c.last_tx_ms == 40000);
	st_wsctl_sent(&c, 30000); /* a clock that goes back does not move it back */
	assert_true(c.last_tx_ms == 40000);
	assert_int_equal(recv_text(ST_WS_PING, NULL, 41000, HOLD), ST_WSCTL_LATER);
	assert_true(c.pong_due_ms == 40000 + HOLD);
	/* A quiet tunnel (our last frame long ago): answered at once. */
	st_wsctl_init(&c, "cloudstream", 0);
	assert_int_equal(recv_text(ST_WS_PING, NULL, HOLD + 5, HOLD), ST_WSCTL_WRITE);
}

static void test_st_wsctl_take__pong_ends_a_hold(void **state)
{
	(void)state;
	assert_int_equal(recv_text(ST_WS_PING, NULL, 10, HOLD), ST_WSCTL_LATER);
	assert_true(st_wsctl_due(&c, HOLD));
	take_expect(ST_WS_PONG, NULL, 0);
	assert_false(c.pong_held);
	assert_false(st_wsctl_due(&c, 2 * HOLD));
	take_none();
}

static void test_st_wsctl_recv__pong_is_life_only(void **state)
{
	(void)state;
	assert_int_equal(recv_text(ST_WS_PONG, "cloudstream", 777, 0), ST_WSCTL_NONE);
	assert_true(l.last_rx_ms == 777);
	assert_false(c.closed);
	take_none();
}

static void test_st_wsctl_recv__close_keeps_the_status_code(void **state)
{
	(void)state;
	static const uint8_t frame[] = {0x03, 0xe8, 'b', 'y', 'e'}; /* 1000 "bye" */
	assert_int_equal(st_wsctl_recv(&c, &l, ST_WS_CLOSE, frame, sizeof frame, 50, 0),
	                 ST_WSCTL_NONE);
	assert_true(c.closed);
	assert_int_equal(c.close_len, 2);
	assert_memory_equal(c.close, frame, 2);
	assert_true(l.last_rx_ms == 50);
	take_none(); /* the echo is the caller's, as it closes */
	/* No status code: an empty echo. */
	st_wsctl_init(&c, "cloudstream", 0);
	assert_int_equal(recv_text(ST_WS_CLOSE, NULL, 60, 0), ST_WSCTL_NONE);
	assert_true(c.closed);
	assert_int_equal(c.close_len, 0);
	/* One byte (malformed): echoed as sent. */
	st_wsctl_init(&c, "cloudstream", 0);
	assert_int_equal(st_wsctl_recv(&c, &l, ST_WS_CLOSE, frame, 1, 70, 0), ST_WSCTL_NONE);
	assert_int_equal(c.close_len, 1);
	assert_int_equal(c.close[0], 0x03);
}

static void test_st_wsctl_recv__ping_after_close_still_owed(void **state)
{
	(void)state;
	/* The PING's payload and the CLOSE's code are kept apart: neither overwrites the other. */
	assert_int_equal(recv_text(ST_WS_PING, "xyz", 1, 0), ST_WSCTL_WRITE);
	assert_int_equal(recv_text(ST_WS_CLOSE, "\x03\xe9", 2, 0), ST_WSCTL_NONE);
	take_expect(ST_WS_PONG, "xyz", 3);
	assert_memory_equal(c.close, "\x03\xe9", 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup(test_st_wsctl_recv__ping_answered_at_once_without_hold,
	                               setup),
	        cmocka_unit_test_setup(test_st_wsctl_recv__empty_and_longest_ping, setup),
	        cmocka_unit_test_setup(test_st_wsctl_take__pong_before_ping, setup),
	        cmocka_unit_test_setup(test_st_wsctl_recv__pong_held_within_the_offer, setup),
	        cmocka_unit_test_setup(test_st_wsctl_recv__ping_at_the_due_time_answered_at_once,
	                               setup),
	        cmocka_unit_test_setup(test_st_wsctl_sent__moves_the_hold, setup),
	        cmocka_unit_test_setup(test_st_wsctl_take__pong_ends_a_hold, setup),
	        cmocka_unit_test_setup(test_st_wsctl_recv__pong_is_life_only, setup),
	        cmocka_unit_test_setup(test_st_wsctl_recv__close_keeps_the_status_code, setup),
	        cmocka_unit_test_setup(test_st_wsctl_recv__ping_after_close_still_owed, setup),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
