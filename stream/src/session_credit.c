/*
 * One tunnel session (stream/session.h): budgets and credit.
 *
 * Owns the accounting of ST_CAP_FLOW: each stream's receive window is charged to the session's
 * node budget and the process budget (reserved whole when the stream opens, grown while its
 * consumer drains it, shrunk while a budget is tight), and so are the bytes queued toward the
 * peer until they are packed (the first ST_STREAM_OUT_FLOOR_BYTES on the stream's reservation,
 * the rest only as far as the budgets have room). It also decides what a writer may queue now (the queue's room and
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

/* What a stream may queue toward the peer on its own reservation (ST_STREAM_OUT_FLOOR_BYTES,
 * or its whole queue when that is smaller). */
static uint64_t out_floor(const struct st_session *s)
{
	return s->cfg.stream_out_bytes < ST_STREAM_OUT_FLOOR_BYTES ? s->cfg.stream_out_bytes
	                                                           : ST_STREAM_OUT_FLOOR_BYTES;
}

/* The part of a queue of @len bytes that the budgets carry beyond the stream's floor. */
static uint64_t out_beyond_floor(const struct st_session *s, uint64_t len)
{
	uint64_t floor_bytes = out_floor(s);
	return len > floor_bytes ? len - floor_bytes : 0;
}

uint64_t st__session_announced_window(const struct st_session *s)
{
	return s->cfg.recv_window_quiet_bytes ? s->cfg.recv_window_quiet_bytes
	                                      : s->cfg.recv_window_bytes;
}

/* Streams that start at the quiet window: those that carry at most a request body from the
 * cloud (PROTOCOL.md §3: containerLogs, and other kubelet GETs and POSTs), and TCP streams,
 * whose bytes the edge cannot classify (through the front door each is one of kube-apiserver's
 * kubelet connections: mostly a request up and an answer down; one that uploads grows its
 * window as it drains, window_adjust). Uploads (exec, attach, port-forward) start whole. */
static bool is_quiet_type(uint64_t type)
{
	return type == ST_MSG_LOGS_CONNECT || type == ST_MSG_METRIC_CONNECT ||
	       type == ST_MSG_TCP_CONNECT;
}

/*
 * The first window of a new stream of connect @type, and its output floor: reserved whole, or
 * the stream is refused. The floor is what lets every admitted stream make progress when the
 * budgets are full: output beyond it waits for room (write_room), output within it never does.
 * A stream started at the announced quiet window that is not a quiet type is grown to
 * recv_window_bytes at once (in the same charge, so it is all or nothing) and the difference
 * queued as its first WINDOW.
 */
int st__session_window_reserve(struct st_session *s, struct stream *st, uint64_t type)
{
	if (!st__session_has_cap(s, ST_CAP_FLOW))
		return 0;
	uint64_t first = st->win.recv_window;
	if (s->cfg.recv_window_quiet_bytes && !is_quiet_type(type))
		first = s->cfg.recv_window_bytes;
	if (window_charge(s, st, first + out_floor(s)) < 0) {
		s->stats.budget_refusals++;
		return -ENOSPC;
	}
	if (first > st->win.recv_window) {
		st->window_grant += st_window_grow(&st->win, 0, first - st->win.recv_window);
		st__session_update_ready(s, st);
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

/* With ST_CAP_FLOW, bytes queued toward the peer are memory too. What a stream queues within
 * its floor was reserved with its first window; what it queues beyond is charged to both
 * budgets as it is queued (write_room let in only what fits) and credited as it is packed or
 * dropped, so new streams are refused and windows shrink while a node's output waits for its
 * tunnel, and the budgets are never passed. */
static void out_charge(struct st_session *s, uint64_t len_before, uint64_t len_after)
{
	if (!st__session_has_cap(s, ST_CAP_FLOW))
		return;
	uint64_t n = out_beyond_floor(s, len_after) - out_beyond_floor(s, len_before);
	if (n == 0)
		return;
	/* Forced only in name: write_room admitted no more than both budgets' room. */
	st_budget_force(&s->node_budget, n);
	if (s->cfg.process_budget)
		st_budget_force(s->cfg.process_budget, n);
}

void st__session_out_packed(struct st_session *s, struct stream *st, uint64_t len_before)
{
	if (!st__session_has_cap(s, ST_CAP_FLOW))
		return;
	uint64_t n = out_beyond_floor(s, len_before) - out_beyond_floor(s, st_buf_len(&st->out));
	if (n == 0)
		return;
	st_budget_credit(&s->node_budget, n);
	if (s->cfg.process_budget)
		st_budget_credit(s->cfg.process_budget, n);
}

/* Drops everything @st queued toward the peer. */
void st__session_out_drop(struct st_session *s, struct stream *st)
{
	uint64_t len = st_buf_len(&st->out);
	st_buf_cleanup(&st->out);
	st__session_out_packed(s, st, len);
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
		/* Within the floor on the stream's own reservation, beyond it in the budgets' room
		 * (the node's and the process's, which other sessions share). */
		uint64_t floor_bytes = out_floor(s);
		uint64_t own = floor_bytes > queued ? floor_bytes - queued : 0;
		uint64_t budgets = st_budget_room(&s->node_budget);
		uint64_t process = st_budget_room(s->cfg.process_budget);
		if (process < budgets)
			budgets = process;
		if (budgets < UINT64_MAX - own && own + budgets < room)
			room = (size_t)(own + budgets);
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
	/* Room may be there already (a budget freed, a WINDOW came, since the caller looked):
	 * then the stream goes on the ready ring now, or no pack round would ever wake it. */
	st__session_update_ready(s, st);
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
		uint64_t before = st_buf_len(&st->out);
		int rc = st_buf_append(&st->out, p, n);
		if (rc < 0)
			return rc;
		out_charge(s, before, st_buf_len(&st->out));
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
