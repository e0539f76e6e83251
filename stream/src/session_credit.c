/*
 * One tunnel session (stream/session.h): budgets and credit.
 *
 * Owns the accounting of ST_CAP_FLOW: each stream's receive window is charged to the session's
 * node budget and the process budget (reserved whole when the stream opens, grown while its
 * consumer drains it, shrunk while a budget is tight), and so are the bytes queued toward the
 * peer until they are packed. It also decides what a writer may queue now (the queue's room and
 * the peer's credit) and when a blocked writer is woken. Internals: session_int.h.
 */
#include <stream/buf.h>
#include <stream/err.h>
#include <stream/ext.h>
#include <stream/frame.h>
#include <stream/session.h>
#include <stream/window.h>

#include <stdlib.h>
#include <string.h>

#include "session_int.h"

/* ---- budgets (ST_CAP_FLOW) ----------------------------------------------------------------- */

/* Charges @n more bytes of @st's window to the node budget and the process budget, both or
 * neither: 0 or -ENOSPC. */
static int window_charge(struct st_session *s, struct stream *st, uint64_t n)
{
	if (st_budget_charge(&s->node_budget, n) < 0)
		return -ENOSPC;
	if (st_budget_charge(s->cfg.process_budget, n) < 0) {
		st_budget_credit(&s->node_budget, n);
		return -ENOSPC;
	}
	st->charged += n;
	return 0;
}

void st__session_window_credit(struct st_session *s, struct stream *st, uint64_t n)
{
	if (n > st->charged)
		n = st->charged;
	st_budget_credit(&s->node_budget, n);
	st_budget_credit(s->cfg.process_budget, n);
	st->charged -= n;
}

/* The first window of a new stream: reserved whole, or the stream is refused. */
int st__session_window_reserve(struct st_session *s, struct stream *st)
{
	if (!st__session_has_cap(s, ST_CAP_FLOW))
		return 0;
	if (window_charge(s, st, st->win.recv_window) < 0) {
		s->stats.budget_refusals++;
		return -ENOSPC;
	}
	return 0;
}

/* A grant of @inc is due for @st: grow its window while it drains and the budgets have room,
 * shrink it toward the first window while either is tight. Returns the increment to send. */
static uint64_t window_adjust(struct st_session *s, struct stream *st, uint64_t inc)
{
	uint64_t win = st->win.recv_window;
	bool tight = st_budget_tight(&s->node_budget) || st_budget_tight(s->cfg.process_budget);
	if (tight && win > s->cfg.recv_window_bytes) {
		uint64_t before = win;
		inc = st_window_shrink(&st->win, inc, win - s->cfg.recv_window_bytes);
		st__session_window_credit(s, st, before - st->win.recv_window);
		return inc;
	}
	if (!tight && win < s->cfg.recv_window_max_bytes) {
		uint64_t grow = s->cfg.recv_window_max_bytes - win;
		if (grow > win)
			grow = win; /* doubling: a stream that keeps draining reaches the maximum fast */
		if (window_charge(s, st, grow) == 0)
			inc = st_window_grow(&st->win, inc, grow);
	}
	return inc;
}

/* With ST_CAP_FLOW, bytes queued toward the peer are memory too: charged to both budgets as
 * they are queued (forced: the credit already bounds them, and a refusal here could only stall
 * the writer) and credited as they are packed or dropped, so new streams are refused and
 * windows shrink while a node's uploads wait for its tunnel. */
static void out_charge(struct st_session *s, size_t n)
{
	if (!st__session_has_cap(s, ST_CAP_FLOW) || n == 0)
		return;
	st_budget_force(&s->node_budget, n);
	if (s->cfg.process_budget)
		st_budget_force(s->cfg.process_budget, n);
}

void st__session_out_credit(struct st_session *s, size_t n)
{
	if (!st__session_has_cap(s, ST_CAP_FLOW) || n == 0)
		return;
	st_budget_credit(&s->node_budget, n);
	if (s->cfg.process_budget)
		st_budget_credit(s->cfg.process_budget, n);
}

/* Drops everything @st queued toward the peer. */
void st__session_out_drop(struct st_session *s, struct stream *st)
{
	st__session_out_credit(s, st_buf_len(&st->out));
	st_buf_cleanup(&st->out);
}

/* ---- what a writer may queue ------------------------------------------------------------------ */

bool st__session_may_send_data(const struct st_session *s, const struct stream *st)
{
	if (st_buf_len(&st->out) == 0 || st->opened_due || st->opened_pending)
		return false;
	return !st__session_has_cap(s, ST_CAP_FLOW) || st->win.send_credit > 0;
}

/*
 * What a write may queue on @st now: the queue's room and, with ST_CAP_FLOW, no more than the
 * peer's credit covers. Bytes beyond the credit could only wait here; held back, they wait in
 * the producer's own source (a socket's kernel buffer, a paused read) and a stream the peer
 * stopped reading holds nothing in this queue. The peer's WINDOW wakes the writer.
 */
static size_t write_room(const struct st_session *s, const struct stream *st)
{
	size_t room = st_buf_space(&st->out);
	if (st__session_has_cap(s, ST_CAP_FLOW)) {
		uint64_t queued = st_buf_len(&st->out);
		uint64_t credit = st->win.send_credit > queued ? st->win.send_credit - queued : 0;
		if (credit < room)
			room = (size_t)credit;
	}
	return room;
}

/* A writer waits for room that is there now: the next pack round tells it (on_writable). */
bool st__session_writer_to_wake(const struct st_session *s, const struct stream *st)
{
	return st->blocked && !st->local_shut && write_room(s, st) > 0;
}

size_t st_session_write_space(const struct st_session *s, uint64_t id)
{
	const struct stream *st = st__session_find(s, id);
	if (st == NULL || st->local_shut)
		return 0;
	return write_room(s, st);
}

void st_session_notify_writable(struct st_session *s, uint64_t id)
{
	struct stream *st = st__session_find(s, id);
	if (st == NULL || st->local_shut)
		return;
	st->blocked = true;
	s->stats.write_blocked++;
}

ssize_t st_session_write(struct st_session *s, uint64_t id, const uint8_t *p, size_t len)
{
	struct stream *st = st__session_find(s, id);
	if (st == NULL)
		return -ENOENT;
	if (st->local_shut)
		return -EPIPE;
	size_t n = write_room(s, st);
	if (n > len)
		n = len;
	if (n > 0) {
		int rc = st_buf_append(&st->out, p, n);
		if (rc < 0)
			return rc;
		out_charge(s, n);
	}
	if (n < len) {
		st->blocked = true;
		s->stats.write_blocked++;
	}
	st__session_update_ready(s, st);
	return (ssize_t)n;
}

void st_session_consumed(struct st_session *s, uint64_t id, size_t n)
{
	struct stream *st = st__session_find(s, id);
	if (st == NULL || !st__session_has_cap(s, ST_CAP_FLOW) || st->close_pending)
		return;
	uint64_t inc = st_window_on_consumed(&st->win, n);
	if (inc == 0)
		return;
	inc = window_adjust(s, st, inc);
	if (inc == 0)
		return;
	st->window_grant += inc;
	st__session_update_ready(s, st);
}
