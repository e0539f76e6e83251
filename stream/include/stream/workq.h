/*
 * stream/workq.h — a small worker pool for blocking work (libcurl calls to the apiserver, CRI
 * gRPC calls, certificate signing), so the libwebsockets loop never blocks.
 *
 * Work runs on a worker thread; its completion runs on the loop thread. A worker that finishes an
 * item puts it on a done list and wakes the loop with lws_cancel_service(); the loop's
 * LWS_CALLBACK_EVENT_WAIT_CANCELLED handler calls st_workq_run_completions(). That event is
 * broadcast and coalesced, so the call is cheap and idempotent when nothing is done.
 *
 * Thread rules: st_workq_new/submit/run_completions/free are called from the loop thread only;
 * work callbacks run on workers and must not touch loop-owned state; done callbacks run on the
 * loop thread inside st_workq_run_completions() or st_workq_free().
 */
#ifndef STREAM_WORKQ_H
#define STREAM_WORKQ_H

struct lws_context;
struct st_workq;

/* Runs on a worker thread. */
typedef void (*st_work_cb)(void *arg);
/* Runs on the loop thread: @status is 0 when the work ran, -ECANCELED when it never ran
 * because the pool was shutting down. */
typedef void (*st_done_cb)(void *arg, int status);
/* Runs on a worker thread, for an abandoned item (st_workq_submit_abandonable) once its work
 * returned: frees @arg; must not touch loop-owned state. */
typedef void (*st_drop_cb)(void *arg);
/* How long st_workq_free waits for abandonable items still running before it abandons them. */
#define ST_WORKQ_ABANDON_MS 250u
/* Wakes the loop thread (tests without lws); the default is lws_cancel_service(ctx). */
typedef void (*st_workq_notify_cb)(void *user);

/*
 * st_workq_new() - start @threads workers (1..64) with at most @max_pending queued items.
 * @ctx: the lws context to wake, or NULL when @notify is given instead.
 * Returns 0, -EINVAL, -ENOMEM, or -errno from pthread_create. Workers block every signal (the
 * daemons take signals through signalfd on the loop).
 */
int st_workq_new(struct st_workq **out, struct lws_context *ctx, unsigned threads,
                 unsigned max_pending);

/* st_workq_set_notify() - wake through @notify(@user) instead of lws_cancel_service. */
void st_workq_set_notify(struct st_workq *wq, st_workq_notify_cb notify, void *user);

/*
 * st_workq_submit() - queue @work(@arg); @done(@arg, status) follows on the loop thread.
 * Returns 0 (then @done runs exactly once), -EAGAIN when max_pending items are waiting, -ENOMEM,
 * or -ESHUTDOWN; on error @done never runs.
 */
int st_workq_submit(struct st_workq *wq, st_work_cb work, st_done_cb done, void *arg);

/*
 * st_workq_submit_abandonable() - as st_workq_submit, for work that may block far longer than
 * a stop should wait (getaddrinfo against a nameserver that does not answer) and that touches
 * only @arg: when st_workq_free finds it still running, it waits ST_WORKQ_ABANDON_MS at most,
 * then returns without it. Such an item's @done never runs; @drop(@arg) runs on its worker once
 * @work returns (the pool's memory goes with the last such worker). @work must not log (its
 * scope may be gone by then). -EINVAL without @drop.
 */
int st_workq_submit_abandonable(struct st_workq *wq, st_work_cb work, st_done_cb done,
                                st_drop_cb drop, void *arg);

/* st_workq_run_completions() - run the done callbacks of finished items; returns how many. */
unsigned st_workq_run_completions(struct st_workq *wq);

/* st_workq_pending() - items queued or running (not yet completed). */
unsigned st_workq_pending(struct st_workq *wq);

/*
 * st_workq_free() - stop: items not yet started complete with -ECANCELED, running ones finish,
 * threads are joined, and every remaining done callback runs before it returns; except running
 * abandonable items, waited for ST_WORKQ_ABANDON_MS at most, then left to their detached
 * workers (their done callbacks never run). NULL is a no-op.
 */
void st_workq_free(struct st_workq *wq);

#endif /* STREAM_WORKQ_H */
