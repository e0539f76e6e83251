/*
 * One tunnel session, sans-I/O (stream/session.h).
 *
 * Streams live in a chained hash table keyed by ConnectID. A stream with something it may send
 * (a WINDOW grant, its connect, DATA within credit, HALF_CLOSE, REMOVE/ERROR) sits on the ready
 * ring; st_session_pack() takes one message from the stream at the head and moves on, so every
 * ready stream gets a turn per round and a stream without credit simply is not on the ring.
 *
 * Base protocol endings. KubeEdge's cloud, once the apiserver side of an exec/attach ends,
 * sends REMOVE in a tight loop until the edge's REMOVE arrives (cloudstream's
 * containerexec_connection.go Serve, v1.15), and KubeEdge's edge answers every REMOVE with its
 * own. So each stream ends with one REMOVE each way: the peer's REMOVE keeps the stream in the
 * table (closed, without its user object) until our answer is packed; ours, if still queued
 * when the peer's crosses it, goes at once; and a small ring remembers the IDs we sent REMOVE
 * for, so the peer's repeats cost nothing and a REMOVE for an ID we never answered gets one.
 */
#include <stream/buf.h>
#include <stream/err.h>
#include <stream/ext.h>
#include <stream/frame.h>
#include <stream/session.h>
#include <stream/window.h>

#include <stdlib.h>
#include <string.h>

struct stream {
	struct stream *hash_next;
	struct stream *ready_prev, *ready_next; /* on the ready ring iff in_ready */
	bool in_ready;
	uint64_t id;
	enum st_stream_state state;
	struct st_window win;
	struct st_buf out; /* DATA waiting to be packed */
	uint8_t *connect;  /* pending connect payload (cloud), or NULL */
	size_t connect_len;
	uint64_t connect_type;
	bool connect_pending;
	uint64_t window_grant;   /* WINDOW increment waiting to be sent */
	bool local_shut;         /* we write no more DATA */
	bool half_close_pending; /* HALF_CLOSE to send once out is empty */
	bool close_pending;      /* REMOVE/ERROR to send once out is empty; then forget */
	uint64_t close_code;
	char *close_reason; /* NULL: none; allocated at its length when a stream ends with one,
	                     * not held inline by every stream (most end without) */
	bool blocked;       /* a write came up short: on_writable when there is room */
	/* With ST_CAP_OPENED, on a TCP_CONNECT stream (PROTOCOL.md §5.4, "opening"): */
	bool tcp;            /* a TCP_CONNECT stream */
	bool await_opened;   /* cloud: the edge's OPENED has not come; its DATA would break */
	bool opened_due;     /* edge: OPENED not queued yet; our DATA waits behind it */
	bool opened_pending; /* edge: OPENED queued, to be packed before any DATA */
	/* Base protocol: the peer's REMOVE came; ours (close_pending) answers it, and the caller
	 * was told (on_close), so user is NULL and nothing but that REMOVE is sent. */
	bool peer_removed;
	uint64_t charged; /* with ST_CAP_FLOW: its receive window, charged to both budgets */
	void *user;       /* the caller's object for this stream (st_session_set_stream_user) */
};

/* Base protocol: one stream ID we sent REMOVE for, or owe one (answer_pending: the peer's
 * REMOVE came for an ID not in the table and not remembered). */
struct ended_id {
	uint64_t id;
	bool answer_pending;
};

struct st_session {
	struct st_session_config cfg;
	const struct st_session_callbacks *cb;
	void *user;
	struct stream **buckets;
	size_t nbuckets;    /* power of two; doubles while streams outnumber buckets */
	size_t max_buckets; /* the power of two at or above max_streams: no growth past it */
	size_t nstreams;
	struct stream *ready; /* head of the ready ring */
	bool hello_pending;
	char replica[ST_MAX_REPLICA_ID_BYTES + 1];
	/* Cloud: one tunnel-level message to pack after HELLO (RECONNECT or CLOSE_CONNECT), once
	 * per session: tunnel_ctl_type 0 = none queued; tunnel_ctl_done once one was queued. */
	uint64_t tunnel_ctl_type;
	uint8_t tunnel_ctl[ST_MAX_EXT_PAYLOAD_BYTES];
	size_t tunnel_ctl_len;
	bool tunnel_ctl_done;
	/* ST_CAP_PEER: queued peer messages, each [type][len hi][len lo][payload]; bytes
	 * [peerq_head, peerq_len) are unsent (allocated at the first st_session_send_peer). */
	uint8_t *peerq;
	size_t peerq_head, peerq_len;
	/* Base protocol: a ring of the latest ended IDs; slots [0, ended_used) are valid and
	 * ended_next is the slot written next (the oldest once the ring is full). */
	struct ended_id ended[ST_BASE_ENDED_IDS];
	size_t ended_next;
	size_t ended_used;
	size_t answers_pending;       /* entries with answer_pending: REMOVEs to pack */
	struct st_budget node_budget; /* with ST_CAP_FLOW: every stream's receive window */
	struct st_session_stats stats;
};

static bool has_cap(const struct st_session *s, uint32_t cap)
{
	return (s->cfg.caps & cap) != 0;
}

static bool is_base(const struct st_session *s)
{
	return s->cfg.caps == 0;
}

/* Bumps a REMOVE counter in the session's stats and in the process totals, if any. */
#define COUNT_REMOVE(s, field)                                                                     \
	do {                                                                                       \
		(s)->stats.field++;                                                                \
		if ((s)->cfg.totals)                                                               \
			(s)->cfg.totals->field++;                                                  \
	} while (0)

/* ---- base protocol: remembered endings ------------------------------------------------------ */

static struct ended_id *ended_find(struct st_session *s, uint64_t id)
{
	/* 64 entries, looked at only for a REMOVE of an ID not in the table: a scan is cheaper
	 * than keeping an index. */
	for (size_t i = 0; i < s->ended_used; i++)
		if (s->ended[i].id == id)
			return &s->ended[i];
	return NULL;
}

/* Remembers @id, overwriting the oldest entry; false (nothing written) when that entry still
 * owes its answer: a peer that wants an answer asks again. */
static bool ended_add(struct st_session *s, uint64_t id, bool answer_pending)
{
	struct ended_id *e = &s->ended[s->ended_next];
	if (s->ended_used == ST_BASE_ENDED_IDS && e->answer_pending)
		return false;
	e->id = id;
	e->answer_pending = answer_pending;
	s->ended_next = (s->ended_next + 1) % ST_BASE_ENDED_IDS;
	if (s->ended_used < ST_BASE_ENDED_IDS)
		s->ended_used++;
	if (answer_pending)
		s->answers_pending++;
	return true;
}

/* ---- stream table -------------------------------------------------------------------------- */

/* The stream table's first size: an idle tunnel's streams fit (measured: 8 KiB per session
 * when it was sized for max_streams at once). */
#define ST_SESSION_FIRST_BUCKETS 16u

static size_t bucket_of(const struct st_session *s, uint64_t id)
{
	/* Fibonacci hashing: ConnectIDs are sequential, this spreads them. */
	return (size_t)((id * 0x9e3779b97f4a7c15ull) >> 32) & (s->nbuckets - 1);
}

static struct stream *find(const struct st_session *s, uint64_t id)
{
	for (struct stream *st = s->buckets[bucket_of(s, id)]; st; st = st->hash_next)
		if (st->id == id)
			return st;
	return NULL;
}

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
			size_t nbk = bucket_of(s, st->id);
			st->hash_next = nb[nbk];
			nb[nbk] = st;
		}
	free(old);
}

static struct stream *stream_new(struct st_session *s, uint64_t id)
{
	struct stream *st = calloc(1, sizeof *st);
	if (st == NULL)
		return NULL;
	st->id = id;
	st->state = ST_STREAM_S_IDLE;
	st_buf_init(&st->out, s->cfg.stream_out_bytes);
	st_window_init(&st->win, s->cfg.send_window_bytes, s->cfg.recv_window_bytes);
	size_t b = bucket_of(s, id);
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

static void window_credit(struct st_session *s, struct stream *st, uint64_t n)
{
	if (n > st->charged)
		n = st->charged;
	st_budget_credit(&s->node_budget, n);
	st_budget_credit(s->cfg.process_budget, n);
	st->charged -= n;
}

/* The first window of a new stream: reserved whole, or the stream is refused. */
static int window_reserve(struct st_session *s, struct stream *st)
{
	if (!has_cap(s, ST_CAP_FLOW))
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
		window_credit(s, st, before - st->win.recv_window);
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
	if (!has_cap(s, ST_CAP_FLOW) || n == 0)
		return;
	st_budget_force(&s->node_budget, n);
	if (s->cfg.process_budget)
		st_budget_force(s->cfg.process_budget, n);
}

static void out_credit(struct st_session *s, size_t n)
{
	if (!has_cap(s, ST_CAP_FLOW) || n == 0)
		return;
	st_budget_credit(&s->node_budget, n);
	if (s->cfg.process_budget)
		st_budget_credit(s->cfg.process_budget, n);
}

/* Drops everything @st queued toward the peer. */
static void out_drop(struct st_session *s, struct stream *st)
{
	out_credit(s, st_buf_len(&st->out));
	st_buf_cleanup(&st->out);
}

static void stream_free(struct st_session *s, struct stream *st)
{
	window_credit(s, st, st->charged);
	ready_remove(s, st);
	struct stream **pp = &s->buckets[bucket_of(s, st->id)];
	while (*pp != st)
		pp = &(*pp)->hash_next;
	*pp = st->hash_next;
	s->nstreams--;
	out_drop(s, st);
	free(st->connect);
	free(st->close_reason);
	free(st);
}

/* ---- readiness ----------------------------------------------------------------------------- */

static bool may_send_data(const struct st_session *s, const struct stream *st)
{
	if (st_buf_len(&st->out) == 0 || st->opened_due || st->opened_pending)
		return false;
	return !has_cap(s, ST_CAP_FLOW) || st->win.send_credit > 0;
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
	if (has_cap(s, ST_CAP_FLOW)) {
		uint64_t queued = st_buf_len(&st->out);
		uint64_t credit = st->win.send_credit > queued ? st->win.send_credit - queued : 0;
		if (credit < room)
			room = (size_t)credit;
	}
	return room;
}

/* A writer waits for room that is there now: the next pack round tells it (on_writable). */
static bool writer_to_wake(const struct st_session *s, const struct stream *st)
{
	return st->blocked && !st->local_shut && write_room(s, st) > 0;
}

static bool has_work(const struct st_session *s, const struct stream *st)
{
	if (st->window_grant > 0 || st->connect_pending || st->opened_pending ||
	    may_send_data(s, st) || writer_to_wake(s, st))
		return true;
	/* DATA queued behind an OPENED that never came is not sent: the stream failed. */
	bool drained = st_buf_len(&st->out) == 0 || st->opened_due;
	return drained && ((st->half_close_pending && !st->opened_due) || st->close_pending);
}

/* Puts @st on the ready ring (at the tail) or takes it off, as its work says. */
static void update_ready(struct st_session *s, struct stream *st)
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
	if (s->cfg.max_data_payload > ST_MAX_MESSAGE_BYTES - ST_MAX_MESSAGE_HEADER_BYTES ||
	    (has_cap(s, ST_CAP_FLOW) &&
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
			stream_free(s, s->buckets[b]);
	free(s->buckets);
	free(s->peerq);
	free(s);
}

/* The ERROR code that best describes a refusal given as a negative errno. */
static uint64_t error_code_of(int rc)
{
	switch (rc) {
	case -EACCES:
	case -EPERM:
		return ST_EXT_ERR_REFUSED;
	case -ENOENT:
		return ST_EXT_ERR_NOT_FOUND;
	case -ECONNREFUSED:
	case -EHOSTUNREACH:
	case -ENETUNREACH:
	case -ECONNRESET:
		return ST_EXT_ERR_UNREACHABLE;
	case -ETIMEDOUT:
		return ST_EXT_ERR_TIMEOUT;
	case -EAGAIN:
	case -EMSGSIZE:
	case -ENOSPC:
		return ST_EXT_ERR_LIMIT;
	case -EBADMSG:
	case -EINVAL:
		return ST_EXT_ERR_BAD_REQUEST;
	case -EPROTO:
		return ST_EXT_ERR_PROTOCOL;
	default:
		return ST_EXT_ERR_INTERNAL;
	}
}

/* Marks @st for REMOVE/ERROR after its queued bytes (or at once, when @drop_output). */
static void mark_close(struct st_session *s, struct stream *st, uint64_t code, const char *reason,
                       bool drop_output)
{
	if (drop_output) {
		out_drop(s, st);
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
	update_ready(s, st);
}

/* The peer broke the protocol on one stream: tell the caller, answer ERROR/REMOVE, drop it
 * from our side (incoming messages for it are dropped until it is forgotten). */
static void reset_by_peer(struct st_session *s, struct stream *st, const char *reason)
{
	s->stats.stream_resets++;
	st->state = ST_STREAM_S_CLOSED;
	s->cb->on_close(s, st->id, st->user, ST_EXT_ERR_PROTOCOL, reason, strlen(reason), s->user);
	/* on_close may have asked for a close itself; either way one REMOVE/ERROR goes out. */
	if (find(s, st->id) == st)
		mark_close(s, st, ST_EXT_ERR_PROTOCOL, reason, true);
}

/* ---- receiving ----------------------------------------------------------------------------- */

static int recv_connect(struct st_session *s, const struct st_msg *m)
{
	if (s->cfg.role != ST_SESSION_EDGE || m->connect_id == 0)
		return -EPROTO; /* only the cloud opens streams, never with ID 0 */
	if (find(s, m->connect_id) != NULL)
		return -EPROTO; /* IDs are not reused while known */
	/* Refusals still take a table slot until their REMOVE is packed; past twice the limit the
	 * peer is flooding us. */
	if (s->nstreams >= 2 * s->cfg.max_streams)
		return -EMSGSIZE;
	struct stream *st = stream_new(s, m->connect_id);
	if (st == NULL)
		return -ENOMEM;
	st->state = ST_STREAM_S_OPEN;
	st->tcp = m->type == ST_MSG_TCP_CONNECT;
	st->opened_due = st->tcp && has_cap(s, ST_CAP_OPENED);
	int rc;
	if (s->nstreams > s->cfg.max_streams) {
		rc = -EAGAIN;
		if (s->cfg.totals)
			s->cfg.totals->refused_limit++;
	} else if (window_reserve(s, st) < 0) {
		rc = -ENOSPC; /* the cloud gets ERROR limit; nothing of it was read yet */
		if (s->cfg.totals)
			s->cfg.totals->refused_budget++;
	} else
		rc = s->cb->on_open(s, m->connect_id, m->type, m->payload, m->payload_len, s->user);
	if (rc < 0 && find(s, m->connect_id) == st) {
		s->stats.stream_resets++;
		mark_close(s, st, error_code_of(rc), st_strerror(rc), true);
	}
	return 0;
}

static int recv_data(struct st_session *s, const struct st_msg *m)
{
	struct stream *st = find(s, m->connect_id);
	if (st == NULL || st->state == ST_STREAM_S_CLOSED) {
		s->stats.ignored_msgs++; /* in flight when the stream ended */
		return 0;
	}
	enum st_stream_state next;
	if (st_stream_next(st->state, ST_STREAM_E_RECV_DATA, &next) < 0) {
		reset_by_peer(s, st, "DATA after the peer's HALF_CLOSE");
		return 0;
	}
	if (st->await_opened) {
		reset_by_peer(s, st, "DATA before OPENED");
		return 0;
	}
	if (has_cap(s, ST_CAP_FLOW) && st_window_on_received(&st->win, m->payload_len) < 0) {
		reset_by_peer(s, st, "DATA beyond the flow-control window");
		return 0;
	}
	st->state = next;
	s->stats.data_bytes_in += m->payload_len;
	int rc = s->cb->on_data(s, st->id, m->payload, m->payload_len, s->user);
	if (rc < 0 && find(s, m->connect_id) == st) {
		s->stats.stream_resets++;
		mark_close(s, st, error_code_of(rc), st_strerror(rc), true);
	}
	return 0;
}

/* A base-protocol REMOVE for an ID not in the table: absorbed when we sent ours for it lately
 * (the peer's repeat, or its answer to ours), else answered once. */
static void recv_remove_unknown(struct st_session *s, uint64_t id)
{
	if (id == 0) {
		s->stats.ignored_msgs++; /* never a stream */
		return;
	}
	if (ended_find(s, id) != NULL) {
		COUNT_REMOVE(s, removes_repeated);
		return;
	}
	if (ended_add(s, id, true))
		COUNT_REMOVE(s, removes_answered);
	else
		s->stats.ignored_msgs++; /* every slot owes an answer: the peer will ask again */
}

/* REMOVE or ERROR from the peer: the stream is over. */
static void recv_end(struct st_session *s, uint64_t id, uint64_t code, const char *reason,
                     size_t reason_len)
{
	struct stream *st = find(s, id);
	if (st == NULL) {
		if (is_base(s))
			recv_remove_unknown(s, id);
		else
			s->stats.ignored_msgs++;
		return;
	}
	bool notify = st->state != ST_STREAM_S_CLOSED && !st->close_pending;
	void *stream_user = st->user;
	if (is_base(s)) {
		if (st->peer_removed) {
			COUNT_REMOVE(s, removes_repeated); /* our answer is queued already */
			return;
		}
		/* Our REMOVE answers it: queued already (crossing) or queued now. Either way it goes
		 * without the bytes before it, which the peer will not read. */
		st->peer_removed = true;
		if (st->close_pending)
			COUNT_REMOVE(s, removes_crossed);
		else
			COUNT_REMOVE(s, removes_answered);
		st->state = ST_STREAM_S_CLOSED;
		st->user = NULL;
		mark_close(s, st, 0, NULL, true);
	} else {
		stream_free(s, st);
	}
	if (notify)
		s->cb->on_close(s, id, stream_user, code, reason, reason_len, s->user);
}

static int recv_window(struct st_session *s, const struct st_msg *m)
{
	uint64_t inc;
	if (st_ext_window_decode(m->payload, m->payload_len, &inc) < 0)
		return -EPROTO;
	struct stream *st = find(s, m->connect_id);
	/* A stream closing gracefully still has queued bytes to send before its REMOVE: they
	 * need the credit. Only a stream with nothing left to send ignores it. */
	if (st == NULL || (st->close_pending && st_buf_len(&st->out) == 0)) {
		s->stats.ignored_msgs++;
		return 0;
	}
	if (st_window_on_grant(&st->win, inc) < 0) {
		reset_by_peer(s, st, "WINDOW beyond the maximum window");
		return 0;
	}
	update_ready(s, st);
	return 0;
}

static int recv_half_close(struct st_session *s, const struct st_msg *m)
{
	if (m->payload_len != 0)
		return -EPROTO;
	struct stream *st = find(s, m->connect_id);
	if (st == NULL || st->state == ST_STREAM_S_CLOSED) {
		s->stats.ignored_msgs++;
		return 0;
	}
	enum st_stream_state next;
	if (st_stream_next(st->state, ST_STREAM_E_RECV_HALF_CLOSE, &next) < 0) {
		reset_by_peer(s, st, "HALF_CLOSE twice");
		return 0;
	}
	if (st->await_opened) {
		reset_by_peer(s, st, "HALF_CLOSE before OPENED");
		return 0;
	}
	st->state = next;
	if (next == ST_STREAM_S_CLOSED && !st->close_pending) {
		/* Both directions are done: the stream ends gracefully. */
		uint64_t id = st->id;
		void *stream_user = st->user;
		stream_free(s, st);
		s->cb->on_close(s, id, stream_user, 0, "", 0, s->user);
		return 0;
	}
	if (s->cb->on_half_close)
		s->cb->on_half_close(s, st->id, s->user);
	return 0;
}

/* OPENED from the edge: the TCP_CONNECT's dial succeeded (PROTOCOL.md §5.4, "opening"). */
static int recv_opened(struct st_session *s, const struct st_msg *m)
{
	if (s->cfg.role != ST_SESSION_CLOUD || m->payload_len != 0 || m->connect_id == 0)
		return -EPROTO; /* only the edge acknowledges, with an empty payload */
	struct stream *st = find(s, m->connect_id);
	if (st == NULL || st->state == ST_STREAM_S_CLOSED || st->close_pending) {
		s->stats.ignored_msgs++; /* in flight when the stream ended */
		return 0;
	}
	if (!st->await_opened) {
		reset_by_peer(s, st, "OPENED for a stream that is not opening");
		return 0;
	}
	st->await_opened = false;
	if (s->cb->on_opened)
		s->cb->on_opened(s, st->id, s->user);
	return 0;
}

int st_session_recv(struct st_session *s, const uint8_t *msg, size_t len)
{
	struct st_msg m;
	int rc = st_msg_decode(msg, len, &m);
	if (rc < 0)
		return rc;
	s->stats.msgs_in++;
	bool ext = s->cfg.caps != 0;
	switch (m.type) {
	case ST_MSG_LOGS_CONNECT:
	case ST_MSG_EXEC_CONNECT:
	case ST_MSG_METRIC_CONNECT:
	case ST_MSG_ATTACH_CONNECT:
		return recv_connect(s, &m);
	case ST_MSG_TCP_CONNECT:
		if (!has_cap(s, ST_CAP_TCP))
			break;
		return recv_connect(s, &m);
	case ST_MSG_DATA:
		return recv_data(s, &m);
	case ST_MSG_REMOVE_CONNECT:
		recv_end(s, m.connect_id, 0, "", 0);
		return 0;
	case ST_MSG_CLOSE_CONNECT:
		if (s->cfg.role == ST_SESSION_EDGE && s->cb->on_tunnel_close)
			s->cb->on_tunnel_close(s, (const char *)m.payload, m.payload_len, s->user);
		return 0;
	case ST_MSG_RECONNECT: {
		if (!has_cap(s, ST_CAP_RECONNECT))
			break;
		/* Only the cloud asks, only on ConnectID 0, with exactly one uvarint. */
		uint64_t drain_ms = 0;
		ssize_t n =
		        m.payload_len ? st_uvarint_decode(m.payload, m.payload_len, &drain_ms) : 0;
		if (s->cfg.role != ST_SESSION_EDGE || m.connect_id != 0 || n <= 0 ||
		    (size_t)n != m.payload_len)
			return -EPROTO;
		if (s->cb->on_reconnect)
			s->cb->on_reconnect(s, drain_ms, s->user);
		return 0;
	}
	case ST_MSG_HELLO: {
		if (!ext)
			break;
		struct st_ext_hello h;
		if (m.connect_id != 0 || st_ext_hello_decode(m.payload, m.payload_len, &h) < 0)
			return -EPROTO;
		return 0;
	}
	case ST_MSG_WINDOW:
		if (!has_cap(s, ST_CAP_FLOW))
			break;
		return recv_window(s, &m);
	case ST_MSG_HALF_CLOSE:
		if (!has_cap(s, ST_CAP_HALF_CLOSE))
			break;
		return recv_half_close(s, &m);
	case ST_MSG_OPENED:
		if (!has_cap(s, ST_CAP_OPENED))
			break;
		return recv_opened(s, &m);
	case ST_MSG_NODE_UP:
	case ST_MSG_NODE_DOWN:
	case ST_MSG_SYNC:
	case ST_MSG_SYNC_END:
		if (!has_cap(s, ST_CAP_PEER))
			break;
		if (m.connect_id != 0 || m.payload_len > ST_MAX_EXT_PAYLOAD_BYTES ||
		    s->cb->on_peer(s, m.type, m.payload, m.payload_len, s->user) < 0)
			return -EPROTO;
		return 0;
	case ST_MSG_ERROR: {
		if (!has_cap(s, ST_CAP_ERROR))
			break;
		struct st_ext_error e;
		if (st_ext_error_decode(m.payload, m.payload_len, &e) < 0)
			return -EPROTO;
		/* code 0 would read as a clean REMOVE: an ERROR is never clean */
		recv_end(s, m.connect_id, e.code ? e.code : ST_EXT_ERR_INTERNAL, e.reason,
		         e.reason_len);
		return 0;
	}
	default:
		break;
	}
	s->stats.ignored_msgs++; /* unknown or not negotiated: ignored, as upstream does */
	return 0;
}

/* ---- queueing ------------------------------------------------------------------------------ */

int st_session_open(struct st_session *s, uint64_t id, uint64_t type, const uint8_t *payload,
                    size_t len)
{
	if (s->cfg.role != ST_SESSION_CLOUD || id == 0 || !st_msg_type_is_connect(type))
		return -EINVAL;
	if (type == ST_MSG_TCP_CONNECT && !has_cap(s, ST_CAP_TCP))
		return -ENOTSUP;
	if (find(s, id) != NULL)
		return -EEXIST;
	if (s->nstreams >= s->cfg.max_streams)
		return -EAGAIN;
	if (len > st_msg_max_payload(id, type))
		return -EMSGSIZE;
	uint8_t *copy = NULL;
	if (len > 0) {
		copy = malloc(len);
		if (copy == NULL)
			return -ENOMEM;
		memcpy(copy, payload, len);
	}
	struct stream *st = stream_new(s, id);
	if (st == NULL) {
		free(copy);
		return -ENOMEM;
	}
	if (window_reserve(s, st) < 0) {
		stream_free(s, st);
		s->stats.streams_total--; /* it never existed for the peer */
		free(copy);
		return -ENOSPC;
	}
	st->state = ST_STREAM_S_OPEN;
	st->connect = copy;
	st->connect_len = len;
	st->connect_type = type;
	st->connect_pending = true;
	st->tcp = type == ST_MSG_TCP_CONNECT;
	st->await_opened = st->tcp && has_cap(s, ST_CAP_OPENED);
	update_ready(s, st);
	return 0;
}

int st_session_opened(struct st_session *s, uint64_t id)
{
	if (s->cfg.role != ST_SESSION_EDGE)
		return -EINVAL;
	struct stream *st = find(s, id);
	if (st == NULL)
		return -ENOENT;
	if (!st->tcp || !has_cap(s, ST_CAP_OPENED))
		return -ENOTSUP;
	if (!st->opened_due)
		return -EALREADY;
	if (st->close_pending || st->state == ST_STREAM_S_CLOSED)
		return -EPIPE;
	st->opened_due = false;
	st->opened_pending = true;
	update_ready(s, st);
	return 0;
}

size_t st_session_write_space(const struct st_session *s, uint64_t id)
{
	const struct stream *st = find(s, id);
	if (st == NULL || st->local_shut)
		return 0;
	return write_room(s, st);
}

void st_session_notify_writable(struct st_session *s, uint64_t id)
{
	struct stream *st = find(s, id);
	if (st == NULL || st->local_shut)
		return;
	st->blocked = true;
	s->stats.write_blocked++;
}

ssize_t st_session_write(struct st_session *s, uint64_t id, const uint8_t *p, size_t len)
{
	struct stream *st = find(s, id);
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
	update_ready(s, st);
	return (ssize_t)n;
}

int st_session_shutdown(struct st_session *s, uint64_t id)
{
	struct stream *st = find(s, id);
	if (st == NULL)
		return -ENOENT;
	if (st->local_shut)
		return -EPIPE;
	st->local_shut = true;
	if (has_cap(s, ST_CAP_HALF_CLOSE))
		st->half_close_pending = true;
	update_ready(s, st);
	return 0;
}

int st_session_close(struct st_session *s, uint64_t id, uint64_t code, const char *reason)
{
	struct stream *st = find(s, id);
	if (st == NULL)
		return -ENOENT;
	if (st->close_pending)
		return 0;
	mark_close(s, st, code, reason, false);
	return 0;
}

void st_session_consumed(struct st_session *s, uint64_t id, size_t n)
{
	struct stream *st = find(s, id);
	if (st == NULL || !has_cap(s, ST_CAP_FLOW) || st->close_pending)
		return;
	uint64_t inc = st_window_on_consumed(&st->win, n);
	if (inc == 0)
		return;
	inc = window_adjust(s, st, inc);
	if (inc == 0)
		return;
	st->window_grant += inc;
	update_ready(s, st);
}

int st_session_hello(struct st_session *s, const char *replica_id)
{
	if (s->cfg.caps == 0)
		return -ENOTSUP; /* never to a base peer */
	size_t n = replica_id ? strlen(replica_id) : 0;
	if (n > ST_MAX_REPLICA_ID_BYTES)
		return -EMSGSIZE;
	memcpy(s->replica, replica_id ? replica_id : "", n);
	s->replica[n] = '\0';
	s->hello_pending = true;
	return 0;
}

int st_session_reconnect(struct st_session *s, uint64_t drain_ms)
{
	if (s->cfg.role != ST_SESSION_CLOUD)
		return -EINVAL;
	if (!has_cap(s, ST_CAP_RECONNECT))
		return -ENOTSUP;
	if (s->tunnel_ctl_done)
		return -EALREADY;
	s->tunnel_ctl_type = ST_MSG_RECONNECT;
	s->tunnel_ctl_len = st_uvarint_encode(s->tunnel_ctl, drain_ms);
	s->tunnel_ctl_done = true;
	return 0;
}

int st_session_close_tunnel(struct st_session *s, const char *text)
{
	if (s->cfg.role != ST_SESSION_CLOUD)
		return -EINVAL;
	size_t n = text ? strlen(text) : 0;
	if (n > sizeof s->tunnel_ctl)
		return -EMSGSIZE;
	if (s->tunnel_ctl_done)
		return -EALREADY;
	s->tunnel_ctl_type = ST_MSG_CLOSE_CONNECT;
	memcpy(s->tunnel_ctl, text ? text : "", n);
	s->tunnel_ctl_len = n;
	s->tunnel_ctl_done = true;
	return 0;
}

bool st_session_want_write(const struct st_session *s)
{
	return s->hello_pending || s->tunnel_ctl_type != 0 || s->answers_pending > 0 ||
	       s->ready != NULL || s->peerq_head < s->peerq_len;
}

size_t st_session_peer_space(const struct st_session *s)
{
	if (!has_cap(s, ST_CAP_PEER))
		return 0;
	size_t used = s->peerq_len - s->peerq_head;
	size_t room = ST_PEER_QUEUE_BYTES - used;
	if (room <= 3)
		return 0;
	room -= 3;
	return room < ST_MAX_EXT_PAYLOAD_BYTES ? room : ST_MAX_EXT_PAYLOAD_BYTES;
}

int st_session_send_peer(struct st_session *s, uint64_t type, const uint8_t *payload, size_t len)
{
	if (type < ST_MSG_NODE_UP || type > ST_MSG_SYNC_END)
		return -EINVAL;
	if (!has_cap(s, ST_CAP_PEER))
		return -ENOTSUP;
	if (len > ST_MAX_EXT_PAYLOAD_BYTES)
		return -EMSGSIZE;
	if (s->peerq == NULL) {
		s->peerq = malloc(ST_PEER_QUEUE_BYTES);
		if (s->peerq == NULL)
			return -ENOMEM;
	}
	if (st_session_peer_space(s) < len)
		return -EAGAIN;
	if (s->peerq_head > 0) { /* compact: what is unsent moves to the front */
		memmove(s->peerq, s->peerq + s->peerq_head, s->peerq_len - s->peerq_head);
		s->peerq_len -= s->peerq_head;
		s->peerq_head = 0;
	}
	uint8_t *q = s->peerq + s->peerq_len;
	q[0] = (uint8_t)type;
	q[1] = (uint8_t)(len >> 8);
	q[2] = (uint8_t)len;
	if (len > 0)
		memcpy(q + 3, payload, len);
	s->peerq_len += 3 + len;
	return 0;
}

/* ---- packing ------------------------------------------------------------------------------- */

static ssize_t pack_control(uint8_t *out, size_t cap, uint64_t id, uint64_t type,
                            const uint8_t *payload, size_t len)
{
	return st_msg_encode(out, cap, id, type, payload, len);
}

/* One message from @st into @out; *gone when the stream was forgotten. */
static ssize_t pack_stream(struct st_session *s, struct stream *st, uint8_t *out, size_t cap,
                           bool *gone)
{
	uint8_t payload[ST_MAX_EXT_PAYLOAD_BYTES];
	*gone = false;
	if (st->window_grant > 0) {
		uint64_t inc = st->window_grant;
		if (inc > ST_MAX_STREAM_WINDOW_BYTES)
			inc = ST_MAX_STREAM_WINDOW_BYTES;
		ssize_t pl = st_ext_window_encode(payload, sizeof payload, inc);
		if (pl < 0)
			return pl;
		ssize_t n = pack_control(out, cap, st->id, ST_MSG_WINDOW, payload, (size_t)pl);
		if (n > 0)
			st->window_grant -= inc;
		return n;
	}
	if (st->opened_pending) {
		ssize_t n = pack_control(out, cap, st->id, ST_MSG_OPENED, NULL, 0);
		if (n > 0)
			st->opened_pending = false;
		return n;
	}
	if (st->connect_pending) {
		ssize_t n = pack_control(out, cap, st->id, st->connect_type, st->connect,
		                         st->connect_len);
		if (n > 0) {
			st->connect_pending = false;
			free(st->connect);
			st->connect = NULL;
		}
		return n;
	}
	if (may_send_data(s, st)) {
		size_t want = st_buf_len(&st->out);
		if (want > s->cfg.max_data_payload)
			want = s->cfg.max_data_payload;
		if (has_cap(s, ST_CAP_FLOW))
			want = st_window_sendable(&st->win, want);
		ssize_t h = st_msg_header_encode(out, cap, st->id, ST_MSG_DATA);
		if (h < 0 || want > cap - (size_t)h)
			return -EMSGSIZE;
		size_t copied = 0;
		while (copied < want) {
			const uint8_t *p;
			size_t n = st_buf_peek(&st->out, &p);
			if (n > want - copied)
				n = want - copied;
			memcpy(out + h + copied, p, n);
			st_buf_consume(&st->out, n);
			copied += n;
		}
		out_credit(s, copied);
		if (has_cap(s, ST_CAP_FLOW))
			st_window_on_sent(&st->win, copied);
		s->stats.data_bytes_out += copied;
		return h + (ssize_t)copied;
	}
	if (st_buf_len(&st->out) > 0 && !st->opened_due)
		return 0; /* waiting for credit */
	if (st->close_pending) {
		ssize_t n;
		if (st->close_code != 0 && has_cap(s, ST_CAP_ERROR)) {
			struct st_ext_error e = {
			        .code = st->close_code,
			        .reason = st->close_reason ? st->close_reason : "",
			        .reason_len = st->close_reason ? strlen(st->close_reason) : 0};
			ssize_t pl = st_ext_error_encode(payload, sizeof payload, &e);
			if (pl < 0)
				return pl;
			n = pack_control(out, cap, st->id, ST_MSG_ERROR, payload, (size_t)pl);
		} else {
			n = pack_control(out, cap, st->id, ST_MSG_REMOVE_CONNECT, NULL, 0);
		}
		if (n > 0) {
			if (is_base(s))
				ended_add(s, st->id,
				          false); /* so the peer's REMOVE is known as answered */
			stream_free(s, st);
			*gone = true;
		}
		return n;
	}
	if (st->half_close_pending && !st->opened_due) {
		ssize_t n = pack_control(out, cap, st->id, ST_MSG_HALF_CLOSE, NULL, 0);
		if (n <= 0)
			return n;
		st->half_close_pending = false;
		enum st_stream_state next;
		if (st_stream_next(st->state, ST_STREAM_E_SEND_HALF_CLOSE, &next) == 0)
			st->state = next;
		if (st->state == ST_STREAM_S_CLOSED) {
			/* The peer had finished already: the stream ends gracefully. */
			uint64_t id = st->id;
			void *stream_user = st->user;
			stream_free(s, st);
			*gone = true;
			s->cb->on_close(s, id, stream_user, 0, "", 0, s->user);
		}
		return n;
	}
	return 0;
}

ssize_t st_session_pack(struct st_session *s, uint8_t *out, size_t cap, bool *binary)
{
	*binary = has_cap(s, ST_CAP_BINARY);
	if (cap < ST_MAX_MESSAGE_HEADER_BYTES + s->cfg.max_data_payload)
		return -EMSGSIZE;
	if (s->hello_pending) {
		uint8_t payload[ST_MAX_EXT_PAYLOAD_BYTES];
		struct st_ext_hello h = {.version = ST_EXT_VERSION,
		                         .caps = s->cfg.caps,
		                         .window_bytes = s->cfg.recv_window_bytes,
		                         .replica_id = s->replica,
		                         .replica_id_len = strlen(s->replica)};
		ssize_t pl = st_ext_hello_encode(payload, sizeof payload, &h);
		if (pl < 0)
			return pl;
		s->hello_pending = false;
		s->stats.msgs_out++;
		return pack_control(out, cap, 0, ST_MSG_HELLO, payload, (size_t)pl);
	}
	if (s->tunnel_ctl_type != 0) {
		ssize_t n =
		        pack_control(out, cap, 0, s->tunnel_ctl_type,
		                     s->tunnel_ctl_len ? s->tunnel_ctl : NULL, s->tunnel_ctl_len);
		if (n > 0) {
			s->tunnel_ctl_type = 0;
			s->stats.msgs_out++;
		}
		return n;
	}
	if (s->peerq_head < s->peerq_len) {
		const uint8_t *q = s->peerq + s->peerq_head;
		size_t len = (size_t)q[1] << 8 | q[2];
		ssize_t n = pack_control(out, cap, 0, q[0], len ? q + 3 : NULL, len);
		if (n > 0) {
			s->peerq_head += 3 + len;
			if (s->peerq_head == s->peerq_len)
				s->peerq_head = s->peerq_len = 0;
			s->stats.msgs_out++;
		}
		return n;
	}
	if (s->answers_pending > 0) {
		for (size_t i = 0; i < s->ended_used; i++) {
			struct ended_id *e = &s->ended[i];
			if (!e->answer_pending)
				continue;
			ssize_t n = pack_control(out, cap, e->id, ST_MSG_REMOVE_CONNECT, NULL, 0);
			if (n > 0) {
				e->answer_pending = false;
				s->answers_pending--;
				s->stats.msgs_out++;
			}
			return n;
		}
	}
	/* Every stream on the ring has something it may send, so this ends within one round; the
	 * bound only guards that invariant. */
	for (size_t turns = 0; s->ready != NULL && turns <= s->nstreams; turns++) {
		struct stream *st = s->ready;
		s->ready = st->ready_next; /* the next stream goes first next time */
		bool gone;
		ssize_t n = pack_stream(s, st, out, cap, &gone);
		if (n < 0)
			return n;
		if (!gone) {
			update_ready(s, st);
			if (writer_to_wake(s, st)) {
				st->blocked = false;
				update_ready(s, st);
				if (s->cb->on_writable)
					s->cb->on_writable(s, st->id, s->user);
			}
		}
		if (n > 0) {
			s->stats.msgs_out++;
			return n;
		}
	}
	return 0;
}

int st_session_set_stream_user(struct st_session *s, uint64_t id, void *user)
{
	struct stream *st = find(s, id);
	if (st == NULL)
		return -ENOENT;
	st->user = user;
	return 0;
}

void *st_session_stream_user(const struct st_session *s, uint64_t id)
{
	const struct stream *st = find(s, id);
	return st ? st->user : NULL;
}

bool st_session_stream_exists(const struct st_session *s, uint64_t id)
{
	return find(s, id) != NULL;
}

void st_session_get_stats(const struct st_session *s, struct st_session_stats *out)
{
	*out = s->stats;
	out->streams_open = s->nstreams;
	out->window_bytes = s->node_budget.used_bytes;
}
