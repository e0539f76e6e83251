/* Unit tests for the worker pool (stream/workq.h), with a notify hook and with a real lws loop. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <libwebsockets.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <stream/err.h>
#include <stream/log.h>
#include <stream/workq.h>

#define ITEMS 200

struct job {
	atomic_int ran;
	int done_calls;
	int status;
	pthread_t worker;
};

struct gate {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool open;
};

static struct gate gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false};

static void work_fn(void *arg)
{
	struct job *j = arg;
	j->worker = pthread_self();
	atomic_fetch_add(&j->ran, 1);
}

static void blocking_work(void *arg)
{
	pthread_mutex_lock(&gate.lock);
	while (!gate.open)
		pthread_cond_wait(&gate.cond, &gate.lock);
	pthread_mutex_unlock(&gate.lock);
	work_fn(arg);
}

static void open_gate(bool open)
{
	pthread_mutex_lock(&gate.lock);
	gate.open = open;
	pthread_cond_broadcast(&gate.cond);
	pthread_mutex_unlock(&gate.lock);
}

static int completed;

static void done_fn(void *arg, int status)
{
	struct job *j = arg;
	j->done_calls++;
	j->status = status;
	completed++;
}

static void eventfd_notify(void *user)
{
	uint64_t one = 1;
	ssize_t w = write(*(int *)user, &one, sizeof one);
	(void)w;
}

/* Waits on the eventfd and runs completions until @want are done (bounded: 10 s). */
static void drain(struct st_workq *wq, int efd, int want)
{
	for (int i = 0; completed < want && i < 1000; i++) {
		struct pollfd p = {.fd = efd, .events = POLLIN};
		poll(&p, 1, 10);
		uint64_t v;
		if (p.revents & POLLIN) {
			ssize_t r = read(efd, &v, sizeof v);
			(void)r;
		}
		st_workq_run_completions(wq);
	}
}

static void test_runs_everything_once(void **state)
{
	(void)state;
	static struct job jobs[ITEMS];
	memset(jobs, 0, sizeof jobs);
	completed = 0;
	int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	assert_true(efd >= 0);
	struct st_workq *wq;
	assert_int_equal(st_workq_new(&wq, NULL, 4, ITEMS), 0);
	st_workq_set_notify(wq, eventfd_notify, &efd);
	for (int i = 0; i < ITEMS; i++)
		assert_int_equal(st_workq_submit(wq, work_fn, done_fn, &jobs[i]), 0);
	drain(wq, efd, ITEMS);
	assert_int_equal(completed, ITEMS);
	assert_int_equal(st_workq_pending(wq), 0);
	for (int i = 0; i < ITEMS; i++) {
		assert_int_equal(atomic_load(&jobs[i].ran), 1);
		assert_int_equal(jobs[i].done_calls, 1);
		assert_int_equal(jobs[i].status, 0);
		assert_false(pthread_equal(jobs[i].worker, pthread_self()));
	}
	assert_int_equal(st_workq_run_completions(wq), 0); /* idempotent */
	st_workq_free(wq);
	close(efd);
}

/* Work runs in the log scope of the thread that submitted it (an embedded instance's workers
 * log to that instance's hook), and a worker leaves it afterwards. */
static _Atomic int scoped_seen, unscoped_seen;

static void scope_probe(void *arg)
{
	const struct st_log_scope *want = arg, *in = st_log_current();
	if (want != NULL && in == want)
		atomic_fetch_add(&scoped_seen, 1);
	else if (want == NULL && in == NULL)
		atomic_fetch_add(&unscoped_seen, 1);
}

static void scope_done(void *arg, int status)
{
	(void)arg, (void)status;
	completed++;
}

static void test_work_inherits_log_scope(void **state)
{
	(void)state;
	completed = 0;
	int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	assert_true(efd >= 0);
	struct st_workq *wq;
	assert_int_equal(st_workq_new(&wq, NULL, 2, 64), 0);
	st_workq_set_notify(wq, eventfd_notify, &efd);
	static struct st_log_scope scope;
	st_log_scope_set(&scope, ST_LOG_INFO, ST_LOG_FORMAT_TEXT);
	const struct st_log_scope *prev = st_log_enter(&scope);
	for (int i = 0; i < 20; i++)
		assert_int_equal(st_workq_submit(wq, scope_probe, scope_done, &scope), 0);
	st_log_enter(prev);
	for (int i = 0; i < 20; i++) /* submitted outside any scope: none on the worker either */
		assert_int_equal(st_workq_submit(wq, scope_probe, scope_done, NULL), 0);
	drain(wq, efd, 40);
	assert_int_equal(atomic_load(&scoped_seen), 20);
	assert_int_equal(atomic_load(&unscoped_seen), 20);
	st_workq_free(wq);
	close(efd);
}

static void test_bounded_and_cancel(void **state)
{
	(void)state;
	static struct job jobs[4];
	memset(jobs, 0, sizeof jobs);
	completed = 0;
	open_gate(false);
	struct st_workq *wq;
	assert_int_equal(st_workq_new(&wq, NULL, 1, 2), 0);
	/* One item runs (blocked on the gate) and leaves the queue; two wait; the fourth is
	 * refused. The worker may not have picked the first up yet, so allow either. */
	assert_int_equal(st_workq_submit(wq, blocking_work, done_fn, &jobs[0]), 0);
	int accepted = 1;
	bool taken[4] = {true};
	for (int i = 1; i < 4; i++) {
		/* Not always a prefix: the worker may take job 0 off the queue between a refusal
		 * and the next submit, which then fits. */
		int rc = st_workq_submit(wq, blocking_work, done_fn, &jobs[i]);
		if (rc == 0) {
			accepted++;
			taken[i] = true;
		} else {
			assert_int_equal(rc, -EAGAIN);
		}
	}
	assert_true(accepted == 2 || accepted == 3);
	assert_int_equal(st_workq_pending(wq), (unsigned)accepted);
	/* Free while the first is still blocked: release it from another thread's view by
	 * opening the gate first; queued items complete as cancelled. */
	open_gate(true);
	st_workq_free(wq);
	assert_int_equal(completed, accepted);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(jobs[i].done_calls, taken[i] ? 1 : 0);
		if (!taken[i])
			continue;
		if (jobs[i].status == 0)
			assert_int_equal(atomic_load(&jobs[i].ran), 1);
		else
			assert_int_equal(jobs[i].status, -ECANCELED);
	}
	st_workq_free(NULL);
	assert_int_equal(st_workq_new(&wq, NULL, 0, 1), -EINVAL);
	assert_int_equal(st_workq_new(&wq, NULL, 65, 1), -EINVAL);
	assert_int_equal(st_workq_new(&wq, NULL, 1, 0), -EINVAL);
}

/* ---- abandonable items (a hung getaddrinfo must not hold a stop) ---------------------------- */

static atomic_int dropped;

static void drop_fn(void *arg)
{
	(void)arg;
	atomic_fetch_add(&dropped, 1);
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void *open_gate_later(void *arg)
{
	usleep((useconds_t)(uintptr_t)arg * 1000u);
	open_gate(true);
	return NULL;
}

static void test_free_abandons_a_hung_abandonable_item(void **state)
{
	(void)state;
	static struct job jobs[3];
	memset(jobs, 0, sizeof jobs);
	completed = 0;
	atomic_store(&dropped, 0);
	open_gate(false);
	int efd = eventfd(0, EFD_NONBLOCK);
	struct st_workq *wq;
	assert_int_equal(st_workq_new(&wq, NULL, 2, 8), 0);
	st_workq_set_notify(wq, eventfd_notify, &efd);
	/* One abandonable item that finishes, one that hangs (the gate), one ordinary one. */
	assert_int_equal(st_workq_submit_abandonable(wq, work_fn, done_fn, drop_fn, &jobs[0]), 0);
	assert_int_equal(st_workq_submit(wq, work_fn, done_fn, &jobs[1]), 0);
	drain(wq, efd, 2);
	assert_int_equal(completed, 2);
	assert_int_equal(st_workq_submit_abandonable(wq, blocking_work, done_fn, drop_fn, &jobs[2]),
	                 0);
	assert_int_equal(st_workq_submit_abandonable(wq, work_fn, done_fn, NULL, &jobs[1]),
	                 -EINVAL);
	usleep(50 * 1000); /* a worker is inside it now */
	uint64_t t0 = now_ms();
	st_workq_free(wq);
	uint64_t took = now_ms() - t0;
	/* The stop waited its bound for the hung item, not for the item. */
	assert_true(took >= ST_WORKQ_ABANDON_MS - 10 && took < ST_WORKQ_ABANDON_MS + 1000);
	assert_int_equal(jobs[2].done_calls, 0);
	assert_int_equal(atomic_load(&dropped), 0);
	/* Released, the detached worker finishes it and drops it (never its done callback). */
	open_gate(true);
	for (int i = 0; atomic_load(&dropped) == 0 && i < 500; i++)
		usleep(10 * 1000);
	assert_int_equal(atomic_load(&dropped), 1);
	assert_int_equal(atomic_load(&jobs[2].ran), 1);
	assert_int_equal(jobs[2].done_calls, 0);
	assert_int_equal(jobs[0].done_calls, 1);
	usleep(20 * 1000); /* the worker leaves, freeing the pool */
	close(efd);
}

static void test_free_waits_for_an_ordinary_item(void **state)
{
	(void)state;
	static struct job job;
	memset(&job, 0, sizeof job);
	completed = 0;
	open_gate(false);
	struct st_workq *wq;
	assert_int_equal(st_workq_new(&wq, NULL, 1, 2), 0);
	assert_int_equal(st_workq_submit(wq, blocking_work, done_fn, &job), 0);
	usleep(20 * 1000);
	pthread_t opener;
	uint64_t later = 2u * ST_WORKQ_ABANDON_MS + 200u;
	assert_int_equal(pthread_create(&opener, NULL, open_gate_later, (void *)(uintptr_t)later),
	                 0);
	uint64_t t0 = now_ms();
	st_workq_free(wq);
	assert_true(now_ms() - t0 >= later - 50);
	assert_int_equal(job.done_calls, 1);
	assert_int_equal(job.status, 0);
	pthread_join(opener, NULL);
}

/* ---- with a real lws context ---------------------------------------------------------------- */

static struct st_workq *lws_wq;

static int cb_test(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                   size_t len)
{
	(void)wsi;
	(void)user;
	(void)in;
	(void)len;
	if (reason == LWS_CALLBACK_EVENT_WAIT_CANCELLED && lws_wq != NULL)
		st_workq_run_completions(lws_wq);
	return 0;
}

static const struct lws_protocols protocols[] = {
        {"test", cb_test, 0, 0, 0, NULL, 0},
        {NULL, NULL, 0, 0, 0, NULL, 0},
};

static void test_with_lws_loop(void **state)
{
	(void)state;
	lws_set_log_level(LLL_ERR, NULL);
	struct lws_context_creation_info info;
	memset(&info, 0, sizeof info);
	info.port = CONTEXT_PORT_NO_LISTEN;
	info.protocols = protocols;
	struct lws_context *ctx = lws_create_context(&info);
	assert_non_null(ctx);
	static struct job jobs[ITEMS];
	memset(jobs, 0, sizeof jobs);
	completed = 0;
	assert_int_equal(st_workq_new(&lws_wq, ctx, 2, ITEMS), 0);
	for (int i = 0; i < ITEMS; i++)
		assert_int_equal(st_workq_submit(lws_wq, work_fn, done_fn, &jobs[i]), 0);
	/* Completions arrive through lws_cancel_service -> EVENT_WAIT_CANCELLED. */
	for (int i = 0; completed < ITEMS && i < 2000; i++)
		lws_service(ctx, 0);
	assert_int_equal(completed, ITEMS);
	st_workq_free(lws_wq);
	lws_wq = NULL;
	lws_context_destroy(ctx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_runs_everything_once),
	        cmocka_unit_test(test_work_inherits_log_scope),
	        cmocka_unit_test(test_bounded_and_cancel),
	        cmocka_unit_test(test_free_abandons_a_hung_abandonable_item),
	        cmocka_unit_test(test_free_waits_for_an_ordinary_item),
	        cmocka_unit_test(test_with_lws_loop),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
