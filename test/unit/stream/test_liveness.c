/* Unit tests for tunnel liveness (stream/liveness.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stream/liveness.h>

#define PING 5000u
#define DEAD 30000u

static void test_st_liveness_check__quiet_peer_pinged_then_dead(void **state)
{
	(void)state;
	struct st_liveness l;
	st_liveness_init(&l, 1000);
	assert_int_equal(st_liveness_check(&l, 1000 + PING - 1, PING, DEAD), ST_LIVENESS_OK);
	assert_int_equal(st_liveness_check(&l, 1000 + PING, PING, DEAD), ST_LIVENESS_PING);
	/* One ping per interval, not one per check. */
	assert_int_equal(st_liveness_check(&l, 1000 + PING + 1, PING, DEAD), ST_LIVENESS_OK);
	assert_int_equal(st_liveness_check(&l, 1000 + 2 * PING - 1, PING, DEAD), ST_LIVENESS_OK);
	assert_int_equal(st_liveness_check(&l, 1000 + 2 * PING, PING, DEAD), ST_LIVENESS_PING);
	assert_int_equal(st_liveness_check(&l, 1000 + DEAD - 1, PING, DEAD), ST_LIVENESS_PING);
	assert_int_equal(st_liveness_check(&l, 1000 + DEAD, PING, DEAD), ST_LIVENESS_DEAD);
}

static void test_st_liveness_rx__any_frame_counts(void **state)
{
	(void)state;
	struct st_liveness l;
	st_liveness_init(&l, 0);
	for (uint64_t t = 1000; t <= 100000; t += 1000) {
		st_liveness_rx(&l, t); /* DATA every second, never a PONG */
		assert_int_equal(st_liveness_check(&l, t + 999, PING, DEAD), ST_LIVENESS_OK);
	}
	/* A clock that goes backwards does not move the mark back. */
	st_liveness_rx(&l, 50);
	assert_true(l.last_rx_ms == 100000);
}

static void test_st_liveness_pause__our_silence_never_kills(void **state)
{
	(void)state;
	struct st_liveness l;
	st_liveness_init(&l, 0);
	st_liveness_pause(&l, true, 1000);
	/* Paused for ten dead-peer timeouts: never dead, never pinged (we could not read the
	 * answer). */
	for (uint64_t t = 1000; t < 10 * DEAD; t += 500)
		assert_int_equal(st_liveness_check(&l, t, PING, DEAD), ST_LIVENESS_OK);
	st_liveness_pause(&l, false, 10 * DEAD);
	assert_int_equal(st_liveness_check(&l, 10 * DEAD + PING - 1, PING, DEAD), ST_LIVENESS_OK);
	assert_int_equal(st_liveness_check(&l, 10 * DEAD + PING, PING, DEAD), ST_LIVENESS_PING);
	assert_int_equal(st_liveness_check(&l, 11 * DEAD, PING, DEAD), ST_LIVENESS_DEAD);
	/* Pausing twice, resuming twice: the same. */
	st_liveness_pause(&l, true, 11 * DEAD);
	st_liveness_pause(&l, true, 11 * DEAD + 5);
	st_liveness_pause(&l, false, 12 * DEAD);
	st_liveness_pause(&l, false, 12 * DEAD + 5);
	assert_int_equal(st_liveness_check(&l, 12 * DEAD + 1, PING, DEAD), ST_LIVENESS_OK);
}

static void test_st_liveness_check__zero_disables(void **state)
{
	(void)state;
	struct st_liveness l;
	st_liveness_init(&l, 0);
	assert_int_equal(st_liveness_check(&l, 1u << 30, 0, 0), ST_LIVENESS_OK);
	assert_int_equal(st_liveness_check(&l, DEAD, 0, DEAD), ST_LIVENESS_DEAD);
	assert_int_equal(st_liveness_check(&l, PING, PING, 0), ST_LIVENESS_PING);
}

static void test_st_liveness_sweep_interval_ms__bounds(void **state)
{
	(void)state;
	assert_true(st_liveness_sweep_interval_ms(0) == 100);
	assert_true(st_liveness_sweep_interval_ms(1000) == 250);
	assert_true(st_liveness_sweep_interval_ms(15000) == 1000);
}

/* Exact on a quiet peer: the PING, the next PING and the verdict each come at the time it
 * gave, not a millisecond before. */
static void test_st_liveness_next_check_ms__exact(void **state)
{
	(void)state;
	struct st_liveness l;
	st_liveness_init(&l, 1000);
	uint64_t due = st_liveness_next_check_ms(&l, 1000, PING, DEAD);
	assert_true(due == 1000 + PING);
	assert_int_equal(st_liveness_check(&l, due - 1, PING, DEAD), ST_LIVENESS_OK);
	assert_int_equal(st_liveness_check(&l, due, PING, DEAD), ST_LIVENESS_PING);
	due = st_liveness_next_check_ms(&l, 1000 + PING, PING, DEAD);
	assert_true(due == 1000 + 2 * PING);
	assert_int_equal(st_liveness_check(&l, due - 1, PING, DEAD), ST_LIVENESS_OK);
	assert_int_equal(st_liveness_check(&l, due, PING, DEAD), ST_LIVENESS_PING);
	/* Pinged every interval until the verdict, which comes first once it is the sooner. */
	for (int i = 0; i < 10; i++) {
		due = st_liveness_next_check_ms(&l, due, PING, DEAD);
		if (due == 1000 + DEAD)
			break;
		assert_int_equal(st_liveness_check(&l, due, PING, DEAD), ST_LIVENESS_PING);
	}
	assert_true(due == 1000 + DEAD);
	assert_int_equal(st_liveness_check(&l, due - 1, PING, DEAD), ST_LIVENESS_OK);
	assert_int_equal(st_liveness_check(&l, due, PING, DEAD), ST_LIVENESS_DEAD);
	/* Nothing to do ever, with both off. */
	st_liveness_init(&l, 0);
	assert_true(st_liveness_next_check_ms(&l, 0, 0, 0) == UINT64_MAX);
	st_liveness_pause(&l, true, 5);
	assert_true(st_liveness_next_check_ms(&l, 5, 0, 0) == UINT64_MAX);
	assert_true(st_liveness_next_check_ms(&l, 5, PING, DEAD) == 5 + PING);
}

/* A sweep that skips a record until its time misses nothing: random frames, pauses and
 * resumes between checks at random times; every check before the time computed at the last
 * check answers OK. */
static void test_st_liveness_next_check_ms__never_late(void **state)
{
	(void)state;
	uint64_t seed = 42;
	for (int run = 0; run < 200; run++) {
		struct st_liveness l;
		uint64_t now = 1000;
		st_liveness_init(&l, now);
		uint64_t due = st_liveness_next_check_ms(&l, now, PING, DEAD);
		unsigned skipped_ok = 0, verdicts = 0;
		for (int step = 0; step < 400; step++) {
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			unsigned r = (unsigned)(seed >> 33);
			now += r % 3000;
			switch (r % 7) {
			case 0:
				st_liveness_rx(&l, now);
				break;
			case 1:
				st_liveness_pause(&l, !l.paused, now);
				break;
			default: { /* a sweep */
				enum st_liveness_verdict v = st_liveness_check(&l, now, PING, DEAD);
				if (now < due) {
					assert_int_equal(v, ST_LIVENESS_OK);
					skipped_ok++;
				}
				verdicts += v != ST_LIVENESS_OK;
				due = st_liveness_next_check_ms(&l, now, PING, DEAD);
				assert_true(due > now || v == ST_LIVENESS_DEAD);
				break;
			}
			}
		}
		assert_true(skipped_ok > 0 && verdicts > 0); /* both paths were taken */
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_st_liveness_check__quiet_peer_pinged_then_dead),
	        cmocka_unit_test(test_st_liveness_rx__any_frame_counts),
	        cmocka_unit_test(test_st_liveness_pause__our_silence_never_kills),
	        cmocka_unit_test(test_st_liveness_check__zero_disables),
	        cmocka_unit_test(test_st_liveness_sweep_interval_ms__bounds),
	        cmocka_unit_test(test_st_liveness_next_check_ms__exact),
	        cmocka_unit_test(test_st_liveness_next_check_ms__never_late),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
