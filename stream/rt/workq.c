/* Worker pool completing on the lws loop (stream/workq.h). One mutex guards both lists; work
 * and done callbacks always run with it released.
 *
 * Abandoning (st_workq_submit_abandonable): st_workq_free waits for the running items, but once
 * only abandonable ones are left it waits ST_WORKQ_ABANDON_MS at most. Then the threads still in
 * one are detached and the pool's memory becomes theirs: refs counts the owner plus each
 * detached thread, the last one out destroys it. A detached thread, its work done, runs the
 * item's drop callback (never its done callback) and wakes nobody (the loop may be gone). */
#include <stream/err.h>
#include <stream/workq.h>

#include <stream/log.h>

#include <libwebsockets.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#define WORKQ_MAX_THREADS 64u

struct item {
	struct item *next;
	st_work_cb work;
	st_done_cb done;
	st_drop_cb drop; /* non-NULL: abandonable */
	void *arg;
	int status;
	const struct st_log_scope *log_scope; /* the submitter's: the work logs there too */
};

struct st_workq {
	pthread_mutex_t lock;
	pthread_cond_t wake;                  /* signalled when an item is queued or on shutdown */
	struct item *queue_head, *queue_tail; /* waiting to run (guarded by lock) */
	struct item *done_head, *done_tail;   /* finished, waiting for the loop (guarded by lock) */
	unsigned queued;                      /* items in the queue (guarded by lock) */
	unsigned outstanding;                 /* submitted, done callback not yet run (loop only) */
	unsigned max_pending;
	bool stopping;                  /* guarded by lock */
	pthread_cond_t idle;            /* a thread left, or left an abandonable item */
	unsigned live;                  /* threads not yet returned (guarded by lock) */
	unsigned in_abandonable;        /* threads inside an abandonable work (lock) */
	bool abandoned;                 /* the owner left (guarded by lock) */
	unsigned refs;                  /* owner + detached threads (guarded by lock) */
	bool exited[WORKQ_MAX_THREADS]; /* thread i returned (guarded by lock) */
	struct worker_arg {
		struct st_workq *wq;
		unsigned i;
	} args[WORKQ_MAX_THREADS];
	struct lws_context *ctx;
	st_workq_notify_cb notify;
	void *notify_user;
	unsigned nthreads;
	pthread_t threads[WORKQ_MAX_THREADS];
};

static void push(struct item **head, struct item **tail, struct item *it)
{
	it->next = NULL;
	if (*tail)
		(*tail)->next = it;
	else
		*head = it;
	*tail = it;
}

static struct item *pop(struct item **head, struct item **tail)
{
	struct item *it = *head;
	if (it) {
		*head = it->next;
		if (*head == NULL)
			*tail = NULL;
	}
	return it;
}

static void wake_loop(struct st_workq *wq)
{
	if (wq->notify)
		wq->notify(wq->notify_user);
	else if (wq->ctx)
		lws_cancel_service(wq->ctx);
}

static void destroy(struct st_workq *wq)
{
	pthread_cond_destroy(&wq->idle);
	pthread_cond_destroy(&wq->wake);
	pthread_mutex_destroy(&wq->lock);
	free(wq);
}

/* A detached thread's last act (lock held): the pool goes with the last reference. */
static void *leave_abandoned(struct st_workq *wq)
{
	bool last = --wq->refs == 0;
	pthread_mutex_unlock(&wq->lock);
	if (last)
		destroy(wq);
	return NULL;
}

static void *worker_main(void *p)
{
	struct worker_arg *wa = p;
	struct st_workq *wq = wa->wq;
	pthread_mutex_lock(&wq->lock);
	for (;;) {
		while (wq->queue_head == NULL && !wq->stopping)
			pthread_cond_wait(&wq->wake, &wq->lock);
		if (wq->queue_head == NULL)
			break; /* stopping and nothing queued */
		struct item *it = pop(&wq->queue_head, &wq->queue_tail);
		wq->queued--;
		bool run = !wq->stopping;
		if (run && it->drop)
			wq->in_abandonable++;
		pthread_mutex_unlock(&wq->lock);
		if (run) {
			const struct st_log_scope *prev = st_log_enter(it->log_scope);
			it->work(it->arg);
			st_log_enter(prev);
		}
		it->status = run ? 0 : -ECANCELED;
		pthread_mutex_lock(&wq->lock);
		if (run && it->drop) {
			wq->in_abandonable--;
			pthread_cond_broadcast(&wq->idle);
		}
		if (wq->abandoned) { /* the owner stopped waiting for this item: it is ours */
			pthread_mutex_unlock(&wq->lock);
			it->drop(it->arg);
			free(it);
			pthread_mutex_lock(&wq->lock);
			wq->live--;
			return leave_abandoned(wq);
		}
		push(&wq->done_head, &wq->done_tail, it);
		pthread_mutex_unlock(&wq->lock);
		wake_loop(wq);
		pthread_mutex_lock(&wq->lock);
	}
	wq->live--;
	wq->exited[wa->i] = true;
	pthread_cond_broadcast(&wq->idle);
	pthread_mutex_unlock(&wq->lock);
	return NULL;
}

int st_workq_new(struct st_workq **out, struct lws_context *ctx, unsigned threads,
                 unsigned max_pending)
{
	if (threads == 0 || threads > WORKQ_MAX_THREADS || max_pending == 0)
		return -EINVAL;
	struct st_workq *wq = calloc(1, sizeof *wq);
	if (wq == NULL)
		return -ENOMEM;
	wq->ctx = ctx;
	wq->max_pending = max_pending;
	wq->refs = 1;
	pthread_mutex_init(&wq->lock, NULL);
	pthread_cond_init(&wq->wake, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&wq->idle, &ca);
	pthread_condattr_destroy(&ca);
	/* Workers inherit this mask: no signal is ever delivered to them. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = 0;
	for (unsigned i = 0; i < threads; i++) {
		wq->args[i] = (struct worker_arg){.wq = wq, .i = i};
		pthread_mutex_lock(&wq->lock);
		wq->live++;
		pthread_mutex_unlock(&wq->lock);
		int e = pthread_create(&wq->threads[i], NULL, worker_main, &wq->args[i]);
		if (e != 0) {
			pthread_mutex_lock(&wq->lock);
			wq->live--;
			pthread_mutex_unlock(&wq->lock);
			rc = -e;
			break;
		}
		wq->nthreads++;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc < 0) {
		st_workq_free(wq);
		return rc;
	}
	*out = wq;
	return 0;
}

void st_workq_set_notify(struct st_workq *wq, st_workq_notify_cb notify, void *user)
{
	wq->notify = notify;
	wq->notify_user = user;
}

static int submit(struct st_workq *wq, st_work_cb work, st_done_cb done, st_drop_cb drop, void *arg)
{
	struct item *it = malloc(sizeof *it);
	if (it == NULL)
		return -ENOMEM;
	it->work = work;
	it->done = done;
	it->drop = drop;
	it->arg = arg;
	it->status = 0;
	it->log_scope = st_log_current();
	pthread_mutex_lock(&wq->lock);
	int rc = 0;
	if (wq->stopping)
		rc = -ESHUTDOWN;
	else if (wq->queued >= wq->max_pending)
		rc = -EAGAIN;
	if (rc == 0) {
		push(&wq->queue_head, &wq->queue_tail, it);
		wq->queued++;
		pthread_cond_signal(&wq->wake);
	}
	pthread_mutex_unlock(&wq->lock);
	if (rc < 0) {
		free(it);
		return rc;
	}
	wq->outstanding++;
	return 0;
}

int st_workq_submit(struct st_workq *wq, st_work_cb work, st_done_cb done, void *arg)
{
	return submit(wq, work, done, NULL, arg);
}

int st_workq_submit_abandonable(struct st_workq *wq, st_work_cb work, st_done_cb done,
                                st_drop_cb drop, void *arg)
{
	if (drop == NULL)
		return -EINVAL;
	return submit(wq, work, done, drop, arg);
}

unsigned st_workq_run_completions(struct st_workq *wq)
{
	pthread_mutex_lock(&wq->lock);
	struct item *list = wq->done_head;
	wq->done_head = wq->done_tail = NULL;
	pthread_mutex_unlock(&wq->lock);
	unsigned n = 0;
	while (list) {
		struct item *it = list;
		list = it->next;
		wq->outstanding--;
		it->done(it->arg, it->status);
		free(it);
		n++;
	}
	return n;
}

unsigned st_workq_pending(struct st_workq *wq)
{
	return wq->outstanding;
}

static uint64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Waits (lock held) until every thread returned, or only abandonable work is left running
 * ST_WORKQ_ABANDON_MS after the stop: then true (abandon those). */
static bool wait_threads(struct st_workq *wq)
{
	uint64_t deadline = mono_ms() + ST_WORKQ_ABANDON_MS;
	for (;;) {
		if (wq->live == 0)
			return false;
		bool only_abandonable = wq->live == wq->in_abandonable;
		if (only_abandonable && mono_ms() >= deadline)
			return true;
		if (!only_abandonable) { /* counts only fall now: each fall broadcasts */
			pthread_cond_wait(&wq->idle, &wq->lock);
			continue;
		}
		struct timespec until = {.tv_sec = (time_t)(deadline / 1000u),
		                         .tv_nsec = (long)(deadline % 1000u) * 1000000L};
		(void)pthread_cond_timedwait(&wq->idle, &wq->lock, &until);
	}
}

void st_workq_free(struct st_workq *wq)
{
	if (wq == NULL)
		return;
	pthread_mutex_lock(&wq->lock);
	wq->stopping = true;
	pthread_cond_broadcast(&wq->wake);
	bool abandon = wait_threads(wq);
	bool join[WORKQ_MAX_THREADS];
	for (unsigned i = 0; i < wq->nthreads; i++)
		join[i] = !abandon || wq->exited[i];
	if (abandon) {
		wq->abandoned = true;
		for (unsigned i = 0; i < wq->nthreads; i++)
			if (!wq->exited[i]) {
				pthread_detach(wq->threads[i]);
				wq->refs++;
			}
		st_warn("stopping without waiting for %u blocking call%s still under way (a "
		        "host name's resolution): %s on its own",
		        wq->live, wq->live == 1 ? "" : "s", wq->live == 1 ? "it ends" : "they end");
	}
	pthread_mutex_unlock(&wq->lock);
	for (unsigned i = 0; i < wq->nthreads; i++)
		if (join[i])
			pthread_join(wq->threads[i], NULL);
	/* Workers drained the queue as cancelled items; anything left (no threads) too. */
	pthread_mutex_lock(&wq->lock);
	struct item *it;
	while ((it = pop(&wq->queue_head, &wq->queue_tail)) != NULL) {
		it->status = -ECANCELED;
		push(&wq->done_head, &wq->done_tail, it);
	}
	pthread_mutex_unlock(&wq->lock);
	st_workq_run_completions(wq);
	pthread_mutex_lock(&wq->lock);
	bool last = --wq->refs == 0;
	pthread_mutex_unlock(&wq->lock);
	if (last)
		destroy(wq);
}
