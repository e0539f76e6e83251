/* Unit tests for per-stream credit accounting (stream/window.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stream/err.h>
#include <stream/window.h>

static void test_send_side(void **state)
{
	(void)state;
	struct st_window w;
	st_window_init(&w, 1000, 2000);
	assert_int_equal(st_window_sendable(&w, 600), 600);
	assert_int_equal(st_window_on_sent(&w, 600), 0);
	assert_int_equal(st_window_sendable(&w, 600), 400);
	assert_int_equal(st_window_on_sent(&w, 401), -EINVAL);
	assert_int_equal(st_window_on_sent(&w, 400), 0);
	assert_int_equal(st_window_sendable(&w, 1), 0); /* blocked */
	assert_int_equal(st_window_on_grant(&w, 0), -EPROTO);
	assert_int_equal(st_window_on_grant(&w, 500), 0);
	assert_int_equal(st_window_sendable(&w, 10000), 500);
	/* Credit may reach the maximum but not pass it. */
	assert_int_equal(st_window_on_grant(&w, ST_MAX_STREAM_WINDOW_BYTES - 500), 0);
	assert_int_equal(st_window_on_grant(&w, 1), -EPROTO);
	assert_int_equal(st_window_on_grant(&w, UINT64_MAX), -EPROTO);
}

static void test_recv_side(void **state)
{
	(void)state;
	struct st_window w;
	st_window_init(&w, 0, 1000);
	assert_int_equal(st_window_on_received(&w, 1000), 0);
	assert_int_equal(st_window_on_received(&w, 1), -EPROTO); /* overrun */
	/* Consumed bytes go back in batches of at least half the window. */
	assert_true(st_window_on_consumed(&w, 300) == 0);
	assert_true(st_window_on_consumed(&w, 199) == 0);
	assert_true(st_window_on_consumed(&w, 1) == 500);
	assert_true(w.recv_outstanding == 500);
	assert_int_equal(st_window_on_received(&w, 500), 0);
	assert_true(st_window_on_consumed(&w, 500) == 500);
	/* A consumer claiming more than arrived cannot inflate the window. */
	assert_true(st_window_on_consumed(&w, 5000) == 500);
	assert_true(w.recv_outstanding == 1000);
	assert_true(st_window_on_consumed(&w, 1) == 0);
}

static void test_stream_fill_and_drain(void **state)
{
	(void)state;
	/* A sender and a receiver: whatever the consumer does, in-flight bytes never exceed the
	 * window and everything sent is eventually delivered. */
	struct st_window tx, rx;
	const uint64_t window = 65536;
	st_window_init(&tx, window, 0);
	st_window_init(&rx, 0, window);
	uint64_t sent = 0, consumed = 0, in_flight = 0;
	const uint64_t total = 10 * 1000 * 1000;
	unsigned seed = 7;
	while (consumed < total) {
		size_t want = (size_t)(total - sent < 16384 ? total - sent : 16384);
		size_t n = st_window_sendable(&tx, want);
		if (n > 0) {
			assert_int_equal(st_window_on_sent(&tx, n), 0);
			assert_int_equal(st_window_on_received(&rx, n), 0);
			sent += n;
			in_flight += n;
		}
		assert_true(in_flight <= window);
		seed = seed * 1103515245 + 12345;
		size_t take = (size_t)((seed >> 16) % 20000);
		if (take > in_flight)
			take = (size_t)in_flight;
		in_flight -= take;
		consumed += take;
		uint64_t inc = st_window_on_consumed(&rx, take);
		if (inc)
			assert_int_equal(st_window_on_grant(&tx, inc), 0);
	}
	assert_true(sent == total);
}

static void test_st_window_grow_shrink__keep_the_accounting(void **state)
{
	(void)state;
	struct st_window w;
	st_window_init(&w, 0, 1000);
	assert_int_equal(st_window_on_received(&w, 600), 0);
	uint64_t inc = st_window_on_consumed(&w, 600);
	assert_true(inc == 600);
	/* Doubling: the peer gets its 600 back and 1000 more. */
	inc = st_window_grow(&w, inc, 1000);
	assert_true(inc == 1600 && w.recv_window == 2000 && w.recv_outstanding == 2000);
	assert_int_equal(st_window_on_received(&w, 2000), 0);
	assert_int_equal(st_window_on_received(&w, 1), -EPROTO); /* not one byte more */
	/* Shrinking gives back part of a grant the peer never had. */
	inc = st_window_on_consumed(&w, 1200);
	assert_true(inc == 1200);
	inc = st_window_shrink(&w, inc, 1000);
	assert_true(inc == 200 && w.recv_window == 1000 && w.recv_outstanding == 200);
	/* Never more than the grant, never to nothing. */
	inc = st_window_on_consumed(&w, 800);
	assert_true(inc == 800);
	inc = st_window_shrink(&w, inc, 5000);
	assert_true(inc == 0 && w.recv_window == 200);
	assert_true(st_window_shrink(&w, 5000, 5000) == 4801 && w.recv_window == 1);
	/* Growth stops at the protocol's maximum. */
	st_window_init(&w, 0, ST_MAX_STREAM_WINDOW_BYTES - 10);
	assert_true(st_window_grow(&w, 0, 100) == 10);
	assert_true(w.recv_window == ST_MAX_STREAM_WINDOW_BYTES);
	assert_true(st_window_grow(&w, 7, 100) == 7);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_send_side),
	        cmocka_unit_test(test_recv_side),
	        cmocka_unit_test(test_stream_fill_and_drain),
	        cmocka_unit_test(test_st_window_grow_shrink__keep_the_accounting),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
