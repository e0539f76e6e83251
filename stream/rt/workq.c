/* Worker pool completing on the lws loop (stream/workq.h). One mutex guards both lists; work
 * and done callbacks always run with it released. */
#include <stream/err.h>
#include <stream/workq.h>

#include <stream/log.h>

#include <libwebsockets.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>

#define WORKQ_MAX_THREADS 64u

struct item {
	struct item *next;
	st_work_cb work;
	st_done_cb done;
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
	bool stopping; /* guarded by lock */
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

static void *worker_main(void *p)
{
	struct st_workq *wq = p;
	pthread_mutex_lock(&wq->lock);
	for (;;) {
		while (wq->queue_head == NULL && !wq->stopping)
			pthread_cond_wait(&wq->wake, &wq->lock);
		if (wq->queue_head == NULL)
			break; /* stopping and nothing queued */
		struct item *it = pop(&wq->queue_head, &wq->queue_tail);
		wq->queued--;
		bool run = !wq->stopping;
		pthread_mutex_unlock(&wq->lock);
		if (run) {
			const struct st_log_scope *prev = st_log_enter(it->log_scope);
			it->work(it->arg);
			st_log_enter(prev);
		}
		it->status = run ? 0 : -ECANCELED;
		pthread_mutex_lock(&wq->lock);
		push(&wq->done_head, &wq->done_tail, it);
		pthread_mutex_unlock(&wq->lock);
		wake_loop(wq);
		pthread_mutex_lock(&wq->lock);
	}
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
	pthread_mutex_init(&wq->lock, NULL);
	pthread_cond_init(&wq->wake, NULL);
	/* Workers inherit this mask: no signal is ever delivered to them. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = 0;
	for (unsigned i = 0; i < threads; i++) {
		int e = pthread_create(&wq->threads[i], NULL, worker_main, wq);
		if (e != 0) {
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

int st_workq_submit(struct st_workq *wq, st_work_cb work, st_done_cb done, void *arg)
{
	struct item *it = malloc(sizeof *it);
	if (it == NULL)
		return -ENOMEM;
	it->work = work;
	it->done = done;
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

void st_workq_free(struct st_workq *wq)
{
	if (wq == NULL)
		return;
	pthread_mutex_lock(&wq->lock);
	wq->stopping = true;
	pthread_cond_broadcast(&wq->wake);
	pthread_mutex_unlock(&wq->lock);
	for (unsigned i = 0; i < wq->nthreads; i++)
		pthread_join(wq->threads[i], NULL);
	/* Workers drained the queue as cancelled items; anything left (no threads) too. */
	struct item *it;
	while ((it = pop(&wq->queue_head, &wq->queue_tail)) != NULL) {
		it->status = -ECANCELED;
		push(&wq->done_head, &wq->done_tail, it);
	}
	st_workq_run_completions(wq);
	pthread_cond_destroy(&wq->wake);
	pthread_mutex_destroy(&wq->lock);
	free(wq);
}
