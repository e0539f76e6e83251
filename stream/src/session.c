/*
 * One tunnel session, sans-I/O (stream/session.h): the stream table and the session's lifecycle.
 *
 * The session is five files around one private header (session_int.h, which holds the structs
 * and the invariants they keep):
 *   session.c         this file: st_session_new/free, the stream table (a chained hash keyed by
 *                     ConnectID, grown by doubling), the ready ring, marking a stream for its
 *                     REMOVE/ERROR, the per-stream accessors and the stats
 *   session_credit.c  budgets and credit: what a stream's window charges to the node and process
 *                     budgets, what a writer may queue (st_session_write*), the grants a consumer
 *                     earns (st_session_consumed)
 *   session_recv.c    the receive path: st_session_recv and one handler per message type
 *   session_send.c    the send path: opening and ending streams, st_session_pack's round-robin
 *   session_tunnel.c  tunnel-level messages: HELLO (extension negotiation), RECONNECT and
 *                     CLOSE_CONNECT, the peer queue, and the base protocol's remembered endings
 *
 * A stream with something it may send (a WINDOW grant, its connect, DATA within credit,
 * HALF_CLOSE, REMOVE/ERROR) sits on the ready ring; st_session_pack() takes one message from the
 * stream at the head and moves on, so every ready stream gets a turn per round and a stream
 * without credit simply is not on the ring.
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

/* ---- stream table -------------------------------------------------------------------------- */

/* The stream table's first size: an idle tunnel's streams fit (measured: 8 KiB per session
 * when it was sized for max_streams at once). */
#define ST_SESSION_FIRST_BUCKETS 16u

/* Doubles the table once streams outnumber buckets (load factor 1), up to max_buckets; an idle
 * tunnel keeps a table of a few lines instead of one sized for max_streams. Out of memory:
 * the old table stays, only its chains get longer. */
static void table_grow(struct st_session *s)
{
	if (s->nstreams <= s->nbuckets || s->nbuckets >= s->max_buckets)
		return;
	size_t n = s->nbuckets * 2;
	struct stream **nb = calloc(n, sizeof *nb);
	if (nb == NULL)
		return;
	struct stream **old = s->buckets;
	size_t old_n = s->nbuckets;
	s->buckets = nb;
	s->nbuckets = n;
	for (size_t b = 0; b < old_n; b++)
		for (struct stream *st = old[b], *next; st; st = next) {
			next = st->hash_next;
			size_t nbk = st__session_bucket_of(s, st->id);
			st->hash_next = nb[nbk];
			nb[nbk] = st;
		}
	free(old);
}

struct stream *st__session_stream_new(struct st_session *s, uint64_t id)
{
	struct stream *st = calloc(1, sizeof *st);
	if (st == NULL)
		return NULL;
	st->id = id;
	st->state = ST_STREAM_S_IDLE;
	st_buf_init(&st->out, s->cfg.stream_out_bytes);
	st_window_init(&st->win, s->cfg.send_window_bytes, st__session_announced_window(s));
	size_t b = st__session_bucket_of(s, id);
	st->hash_next = s->buckets[b];
	s->buckets[b] = st;
	s->nstreams++;
	s->stats.streams_total++;
	table_grow(s);
	return st;
}

static void ready_remove(struct st_session *s, struct stream *st)
{
	if (!st->in_ready)
		return;
	if (st->ready_next == st) {
		s->ready = NULL;
	} else {
		st->ready_prev->ready_next = st->ready_next;
		st->ready_next->ready_prev = st->ready_prev;
		if (s->ready == st)
			s->ready = st->ready_next;
	}
	st->in_ready = false;
}

void st__session_stream_free(struct st_session *s, struct stream *st)
{
	st__session_window_credit(s, st, st->charged);
	ready_remove(s, st);
	struct stream **pp = &s->buckets[st__session_bucket_of(s, st->id)];
	while (*pp != st)
		pp = &(*pp)->hash_next;
	*pp = st->hash_next;
	s->nstreams--;
	st__session_out_drop(s, st);
	free(st->connect);
	free(st->close_reason);
	free(st);
}

/* ---- readiness ----------------------------------------------------------------------------- */

static bool has_work(const struct st_session *s, const struct stream *st)
{
	if (st->window_grant > 0 || st->connect_pending || st->opened_pending ||
	    st__session_may_send_data(s, st) || st__session_writer_to_wake(s, st))
		return true;
	/* DATA queued behind an OPENED that never came is not sent: the stream failed. */
	bool drained = st_buf_len(&st->out) == 0 || st->opened_due;
	return drained && ((st->half_close_pending && !st->opened_due) || st->close_pending);
}

/* Puts @st on the ready ring (at the tail) or takes it off, as its work says. */
void st__session_update_ready(struct st_session *s, struct stream *st)
{
	bool want = has_work(s, st);
	if (want == st->in_ready)
		return;
	if (!want) {
		ready_remove(s, st);
		return;
	}
	if (s->ready == NULL) {
		st->ready_next = st->ready_prev = st;
		s->ready = st;
	} else {
		struct stream *tail = s->ready->ready_prev;
		st->ready_prev = tail;
		st->ready_next = s->ready;
		tail->ready_next = st;
		s->ready->ready_prev = st;
	}
	st->in_ready = true;
}

/* ---- lifecycle ----------------------------------------------------------------------------- */

int st_session_new(struct st_session **out, const struct st_session_config *cfg,
                   const struct st_session_callbacks *cb, void *user)
{
	if (cb == NULL || cb->on_data == NULL || cb->on_close == NULL ||
	    (cfg->role == ST_SESSION_EDGE && cb->on_open == NULL) ||
	    ((cfg->caps & ST_CAP_PEER) && cb->on_peer == NULL))
		return -EINVAL;
	struct st_session *s = calloc(1, sizeof *s);
	if (s == NULL)
		return -ENOMEM;
	s->cfg = *cfg;
	if (s->cfg.max_streams == 0)
		s->cfg.max_streams = ST_DEFAULT_MAX_STREAMS;
	if (s->cfg.stream_out_bytes == 0)
		s->cfg.stream_out_bytes = ST_DEFAULT_STREAM_OUT_BYTES;
	if (s->cfg.max_data_payload == 0)
		s->cfg.max_data_payload = ST_DEFAULT_DATA_PAYLOAD_BYTES;
	if (s->cfg.recv_window_max_bytes < s->cfg.recv_window_bytes)
		s->cfg.recv_window_max_bytes = s->cfg.recv_window_bytes;
	/* Only the edge receives connects, and a "quiet" window larger than the first is none. */
	if (s->cfg.role != ST_SESSION_EDGE ||
	    s->cfg.recv_window_quiet_bytes >= s->cfg.recv_window_bytes)
		s->cfg.recv_window_quiet_bytes = 0;
	if (s->cfg.max_data_payload > ST_MAX_MESSAGE_BYTES - ST_MAX_MESSAGE_HEADER_BYTES ||
	    (st__session_has_cap(s, ST_CAP_FLOW) &&
	     (s->cfg.send_window_bytes == 0 || s->cfg.recv_window_bytes == 0 ||
	      s->cfg.send_window_bytes > ST_MAX_STREAM_WINDOW_BYTES ||
	      s->cfg.recv_window_max_bytes > ST_MAX_STREAM_WINDOW_BYTES))) {
		free(s);
		return -EINVAL;
	}
	st_budget_init(&s->node_budget, s->cfg.node_budget_bytes);
	s->max_buckets = ST_SESSION_FIRST_BUCKETS;
	while (s->max_buckets < s->cfg.max_streams)
		s->max_buckets <<= 1;
	s->nbuckets = ST_SESSION_FIRST_BUCKETS;
	s->buckets = calloc(s->nbuckets, sizeof *s->buckets);
	if (s->buckets == NULL) {
		free(s);
		return -ENOMEM;
	}
	s->cb = cb;
	s->user = user;
	*out = s;
	return 0;
}

void st_session_free(struct st_session *s)
{
	if (s == NULL)
		return;
	for (size_t b = 0; b < s->nbuckets; b++)
		while (s->buckets[b])
			st__session_stream_free(s, s->buckets[b]);
	free(s->buckets);
	free(s->peerq);
	free(s->tunnel_ctl);
	free(s->ended);
	free(s);
}

/* Marks @st for REMOVE/ERROR after its queued bytes (or at once, when @drop_output). */
void st__session_mark_close(struct st_session *s, struct stream *st, uint64_t code,
                            const char *reason, bool drop_output)
{
	if (drop_output) {
		st__session_out_drop(s, st);
		st->connect_pending = false;
		st->half_close_pending = false;
		st->window_grant = 0;
	}
	st->close_pending = true;
	st->local_shut = true;
	st->close_code = code;
	size_t n = reason ? strlen(reason) : 0;
	if (n > ST_MAX_ERROR_REASON_BYTES)
		n = ST_MAX_ERROR_REASON_BYTES;
	free(st->close_reason);
	/* Out of memory: the ending still goes, without its reason (an ERROR carries the code). */
	st->close_reason = n ? strndup(reason, n) : NULL;
	st__session_update_ready(s, st);
}

/* ---- accessors ----------------------------------------------------------------------------- */

int st_session_set_stream_user(struct st_session *s, uint64_t id, void *user)
{
	struct stream *st = st__session_find(s, id);
	if (st == NULL)
		return -ENOENT;
	st->user = user;
	return 0;
}

void *st_session_stream_user(const struct st_session *s, uint64_t id)
{
	const struct stream *st = st__session_find(s, id);
	return st ? st->user : NULL;
}

bool st_session_stream_exists(const struct st_session *s, uint64_t id)
{
	return st__session_find(s, id) != NULL;
}

void st_session_get_stats(const struct st_session *s, struct st_session_stats *out)
{
	*out = s->stats;
	out->streams_open = s->nstreams;
	out->window_bytes = s->node_budget.used_bytes;
}
