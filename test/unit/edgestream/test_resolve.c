/*
 * Unit tests for host names resolved on the worker pool (edgestream/src/resolve.h): the cache
 * policy, with a real st_workq (one worker, woken through a notify hook instead of lws) and a
 * fake resolver at the module's edge (es_name.resolve) that counts its calls and can be held.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include <stream/workq.h>

#include "resolve.h"

/* ---- the fake resolver (worker side) and the loop's wake-up ------------------------------ */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static unsigned calls; /* resolutions asked for */
static bool held;      /* the resolver waits while set (a hanging nameserver) */
static const char *answer[ES_NAME_MAX_ADDRS]; /* NULL-terminated; none: a failure */
static unsigned wakeups;                      /* completions signalled to the "loop" */

static size_t fake_resolve(const char *host, char (*addrs)[ES_NAME_ADDR_BYTES], size_t cap,
                           char *err, size_t errcap)
{
	pthread_mutex_lock(&mu);
	calls++;
	while (held)
		pthread_cond_wait(&cv, &mu);
	size_t n = 0;
	while (n < cap && answer[n]) {
		snprintf(addrs[n], ES_NAME_ADDR_BYTES, "%s", answer[n]);
		n++;
	}
	pthread_mutex_unlock(&mu);
	if (n == 0)
		snprintf(err, errcap, "cannot resolve %s: Name or service not known", host);
	return n;
}

static void notify(void *user)
{
	(void)user;
	pthread_mutex_lock(&mu);
	wakeups++;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
}

static void set_answer(const char *a, const char *b)
{
	pthread_mutex_lock(&mu);
	answer[0] = a;
	answer[1] = a ? b : NULL;
	answer[2] = NULL;
	pthread_mutex_unlock(&mu);
}

static void hold(bool on)
{
	pthread_mutex_lock(&mu);
	held = on;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
}

static unsigned calls_now(void)
{
	pthread_mutex_lock(&mu);
	unsigned c = calls;
	pthread_mutex_unlock(&mu);
	return c;
}

/* The loop's turn: wait for a completion and run it. */
static void run_one(struct st_workq *wq)
{
	pthread_mutex_lock(&mu);
	while (wakeups == 0)
		pthread_cond_wait(&cv, &mu);
	wakeups--;
	pthread_mutex_unlock(&mu);
	while (st_workq_run_completions(wq) == 0) {
		/* the wake-up came before the item reached the done list: wait for the next */
		pthread_mutex_lock(&mu);
		while (wakeups == 0)
			pthread_cond_wait(&cv, &mu);
		wakeups--;
		pthread_mutex_unlock(&mu);
	}
}

/* ---- a dial waiting on a name ------------------------------------------------------------- */

struct waiter {
	struct es_name_wait w;
	int called, rc;
	char addr[ES_NAME_ADDR_BYTES], why[ES_NAME_ERR_BYTES];
	uint32_t gen;
};

static void on_resolved(struct es_name_wait *w, int rc, const char *addr, uint32_t gen,
                        const char *why)
{
	struct waiter *x = lws_container_of(w, struct waiter, w);
	x->called++;
	x->rc = rc;
	x->gen = gen;
	snprintf(x->addr, sizeof x->addr, "%s", addr ? addr : "");
	snprintf(x->why, sizeof x->why, "%s", why ? why : "");
}

struct fixture {
	struct st_workq *wq;
	struct es_name n;
};

static int setup(void **state)
{
	static struct fixture f;
	memset(&f, 0, sizeof f);
	pthread_mutex_lock(&mu);
	calls = 0;
	wakeups = 0;
	held = false;
	pthread_mutex_unlock(&mu);
	set_answer("10.0.0.1", "10.0.0.2");
	if (st_workq_new(&f.wq, NULL, 1, 8) < 0)
		return -1;
	st_workq_set_notify(f.wq, notify, NULL);
	es_name_init(&f.n, f.wq, "kubelet", "kubelet.test");
	f.n.resolve = fake_resolve;
	*state = &f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	hold(false);
	st_workq_free(f->wq);
	return 0;
}

static int get(struct es_name *n, struct waiter *x, const char **addr, uint32_t *gen)
{
	const char *why;
	return es_name_get(n, &x->w, on_resolved, addr, gen, &why);
}

/* ---- the tests ---------------------------------------------------------------------------- */

static void test_es_name_get__literal_is_never_resolved(void **state)
{
	struct fixture *f = *state;
	struct es_name lit;
	es_name_init(&lit, f->wq, "kubelet", "127.0.0.1");
	lit.resolve = fake_resolve;
	struct waiter x = {0};
	const char *addr = NULL;
	uint32_t gen = 7;
	assert_int_equal(get(&lit, &x, &addr, &gen), 0);
	assert_string_equal(addr, "127.0.0.1");
	es_name_init(&lit, f->wq, "kubelet", "::1");
	assert_int_equal(get(&lit, &x, &addr, &gen), 0);
	assert_string_equal(addr, "::1");
	es_name_prefetch(&lit);
	assert_int_equal(calls_now(), 0);
	assert_int_equal(x.called, 0);
}

static void test_es_name_get__dials_wait_on_one_resolution_then_use_the_cache(void **state)
{
	struct fixture *f = *state;
	struct waiter a = {0}, b = {0}, c = {0};
	const char *addr = NULL;
	uint32_t gen = 0;
	hold(true);
	assert_int_equal(get(&f->n, &a, &addr, &gen), 1);
	assert_int_equal(get(&f->n, &b, &addr, &gen), 1);
	assert_true(es_name_waiting(&a.w) && es_name_waiting(&b.w));
	hold(false);
	run_one(f->wq);
	assert_int_equal(calls_now(), 1); /* one resolution for both */
	assert_int_equal(a.called, 1);
	assert_int_equal(b.called, 1);
	assert_int_equal(a.rc, 0);
	assert_string_equal(a.addr, "10.0.0.1");
	assert_string_equal(b.addr, "10.0.0.1");
	assert_int_equal(a.gen, b.gen);
	assert_false(es_name_waiting(&a.w));
	/* The next dials find the answer: no resolution per request. */
	for (int i = 0; i < 5; i++) {
		assert_int_equal(get(&f->n, &c, &addr, &gen), 0);
		assert_string_equal(addr, "10.0.0.1");
		assert_int_equal(gen, a.gen);
	}
	assert_int_equal(calls_now(), 1);
	assert_int_equal(c.called, 0);
	assert_int_equal(f->n.resolves_ok, 1);
}

static void test_es_name_dial_failed__next_address_then_resolves_again(void **state)
{
	struct fixture *f = *state;
	struct waiter x = {0};
	const char *addr = NULL;
	uint32_t gen = 0, gen1;
	assert_int_equal(get(&f->n, &x, &addr, &gen), 1);
	run_one(f->wq);
	gen1 = x.gen;
	es_name_dial_failed(&f->n, gen1 + 1); /* another answer's ticket: not counted */
	assert_int_equal(get(&f->n, &x, &addr, &gen), 0);
	assert_string_equal(addr, "10.0.0.1");
	es_name_dial_failed(&f->n, gen1); /* 10.0.0.1 refused: the next address */
	assert_int_equal(get(&f->n, &x, &addr, &gen), 0);
	assert_string_equal(addr, "10.0.0.2");
	assert_int_equal(calls_now(), 1);
	es_name_dial_failed(&f->n, gen1); /* each failed: the next dial resolves again */
	set_answer("10.0.0.3", NULL);
	x.called = 0;
	assert_int_equal(get(&f->n, &x, &addr, &gen), 1);
	run_one(f->wq);
	assert_int_equal(calls_now(), 2);
	assert_int_equal(x.called, 1);
	assert_string_equal(x.addr, "10.0.0.3");
	assert_int_not_equal(x.gen, gen1);
	es_name_dial_failed(&f->n, gen1); /* a late failure on the old answer: ignored */
	assert_int_equal(get(&f->n, &x, &addr, &gen), 0);
	assert_string_equal(addr, "10.0.0.3");
}

static void test_es_name_get__a_failure_answers_dials_for_a_while(void **state)
{
	struct fixture *f = *state;
	struct waiter x = {0}, y = {0};
	const char *addr = NULL, *why = NULL;
	uint32_t gen = 0;
	set_answer(NULL, NULL);
	assert_int_equal(get(&f->n, &x, &addr, &gen), 1);
	run_one(f->wq);
	assert_int_equal(x.called, 1);
	assert_int_equal(x.rc, -EHOSTUNREACH);
	assert_string_equal(x.why, "cannot resolve kubelet.test: Name or service not known");
	assert_int_equal(f->n.resolves_failed, 1);
	/* Within ES_NAME_RETRY_MS: at once, no worker job. */
	assert_int_equal(es_name_get(&f->n, &y.w, on_resolved, &addr, &gen, &why), -EHOSTUNREACH);
	assert_string_equal(why, "cannot resolve kubelet.test: Name or service not known");
	assert_false(es_name_waiting(&y.w));
	assert_int_equal(calls_now(), 1);
	/* Later: tried again, and it resolves now. */
	f->n.failed_ms -= ES_NAME_RETRY_MS;
	set_answer("10.0.0.9", NULL);
	assert_int_equal(get(&f->n, &y, &addr, &gen), 1);
	run_one(f->wq);
	assert_int_equal(y.rc, 0);
	assert_string_equal(y.addr, "10.0.0.9");
	assert_false(f->n.failing);
	assert_int_equal(calls_now(), 2);
}

static void test_es_name_get__an_old_answer_is_refreshed_behind_the_dials(void **state)
{
	struct fixture *f = *state;
	struct waiter x = {0};
	const char *addr = NULL;
	uint32_t gen = 0;
	assert_int_equal(get(&f->n, &x, &addr, &gen), 1);
	run_one(f->wq);
	f->n.resolved_ms -= ES_NAME_REFRESH_MS;
	hold(true); /* the refresh hangs: dials go on with the old address */
	set_answer("10.0.0.5", NULL);
	x.called = 0;
	for (int i = 0; i < 3; i++) {
		assert_int_equal(get(&f->n, &x, &addr, &gen), 0);
		assert_string_equal(addr, "10.0.0.1");
	}
	assert_true(f->n.running);
	hold(false);
	run_one(f->wq);
	assert_int_equal(calls_now(), 2);
	assert_int_equal(x.called, 0); /* nobody waited */
	assert_int_equal(get(&f->n, &x, &addr, &gen), 0);
	assert_string_equal(addr, "10.0.0.5");
}

static void test_es_name_cancel__a_cancelled_dial_hears_nothing(void **state)
{
	struct fixture *f = *state;
	struct waiter x = {0}, y = {0};
	const char *addr = NULL;
	uint32_t gen = 0;
	hold(true);
	assert_int_equal(get(&f->n, &x, &addr, &gen), 1);
	assert_int_equal(get(&f->n, &y, &addr, &gen), 1);
	es_name_cancel(&x.w);
	es_name_cancel(&x.w); /* detached: a no-op */
	assert_false(es_name_waiting(&x.w));
	hold(false);
	run_one(f->wq);
	assert_int_equal(x.called, 0);
	assert_int_equal(y.called, 1);
}

/* A callback that cancels another waiter (a failed stream freeing a connection that waited). */
static struct waiter *victim;
static void cancel_victim(struct es_name_wait *w, int rc, const char *addr, uint32_t gen,
                          const char *why)
{
	on_resolved(w, rc, addr, gen, why);
	es_name_cancel(&victim->w);
}

static void test_es_name_get__a_callback_may_cancel_another_waiter(void **state)
{
	struct fixture *f = *state;
	struct waiter x = {0}, y = {0};
	const char *addr = NULL, *why = NULL;
	uint32_t gen = 0;
	victim = &y;
	hold(true);
	assert_int_equal(es_name_get(&f->n, &x.w, cancel_victim, &addr, &gen, &why), 1);
	assert_int_equal(get(&f->n, &y, &addr, &gen), 1);
	hold(false);
	run_one(f->wq);
	assert_int_equal(x.called, 1);
	assert_int_equal(y.called, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(test_es_name_get__literal_is_never_resolved, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(
	                test_es_name_get__dials_wait_on_one_resolution_then_use_the_cache, setup,
	                teardown),
	        cmocka_unit_test_setup_teardown(
	                test_es_name_dial_failed__next_address_then_resolves_again, setup,
	                teardown),
	        cmocka_unit_test_setup_teardown(
	                test_es_name_get__a_failure_answers_dials_for_a_while, setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                test_es_name_get__an_old_answer_is_refreshed_behind_the_dials, setup,
	                teardown),
	        cmocka_unit_test_setup_teardown(test_es_name_cancel__a_cancelled_dial_hears_nothing,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                test_es_name_get__a_callback_may_cancel_another_waiter, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
