/*
 * stream/src/session_int.h — what the session's files share (private to stream_proto).
 *
 * The session (stream/session.h) is split by responsibility: session.c (lifecycle, stream table,
 * ready ring, accessors), session_credit.c (budgets, credit, what a writer may queue),
 * session_recv.c (the receive path), session_send.c (opening, ending, packing) and
 * session_tunnel.c (HELLO, RECONNECT/CLOSE_CONNECT, the peer queue, the base protocol's
 * remembered endings). This header holds the structs they all work on and the functions one
 * file provides to another; nothing here is part of the public API.
 */
#ifndef STREAM_SESSION_INT_H
#define STREAM_SESSION_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <stream/budget.h>
#include <stream/buf.h>
#include <stream/ext.h>
#include <stream/limits.h>
#include <stream/session.h>
#include <stream/window.h>

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
	 * per session: tunnel_ctl_type 0 = none queued; tunnel_ctl_done once one was queued. Its
	 * payload is allocated when it is queued (owned; freed once packed): every idle tunnel
	 * carried 4 KiB for it before. */
	uint64_t tunnel_ctl_type;
	uint8_t *tunnel_ctl;
	size_t tunnel_ctl_len;
	bool tunnel_ctl_done;
	/* ST_CAP_PEER: queued peer messages, each [type][len hi][len lo][payload]; bytes
	 * [peerq_head, peerq_len) are unsent (allocated at the first st_session_send_peer). */
	uint8_t *peerq;
	size_t peerq_head, peerq_len;
	/* Base protocol: a ring of the latest ended IDs (ST_BASE_ENDED_IDS slots, allocated at the
	 * first ending: an idle tunnel has none); slots [0, ended_used) are valid and ended_next
	 * is the slot written next (the oldest once the ring is full). */
	struct ended_id *ended;
	size_t ended_next;
	size_t ended_used;
	size_t answers_pending;       /* entries with answer_pending: REMOVEs to pack */
	struct st_budget node_budget; /* with ST_CAP_FLOW: every stream's receive window */
	struct st_session_stats stats;
};

static inline bool st__session_has_cap(const struct st_session *s, uint32_t cap)
{
	return (s->cfg.caps & cap) != 0;
}

static inline bool st__session_is_base(const struct st_session *s)
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

/* ---- stream table (session.c) ------------------------------------------------------------- */

static inline size_t st__session_bucket_of(const struct st_session *s, uint64_t id)
{
	/* Fibonacci hashing: ConnectIDs are sequential, this spreads them. */
	return (size_t)((id * 0x9e3779b97f4a7c15ull) >> 32) & (s->nbuckets - 1);
}

static inline struct stream *st__session_find(const struct st_session *s, uint64_t id)
{
	for (struct stream *st = s->buckets[st__session_bucket_of(s, id)]; st; st = st->hash_next)
		if (st->id == id)
			return st;
	return NULL;
}

/* A new stream @id in the table (IDLE, empty queue, first window not charged yet); NULL when out
 * of memory. */
struct stream *st__session_stream_new(struct st_session *s, uint64_t id);
/* Forgets @st: its window and queue are credited back, it leaves the ring and the table. */
void st__session_stream_free(struct st_session *s, struct stream *st);
/* Puts @st on the ready ring (at the tail) or takes it off, as its work says. */
void st__session_update_ready(struct st_session *s, struct stream *st);
/* Marks @st for REMOVE/ERROR after its queued bytes (or at once, when @drop_output). */
void st__session_mark_close(struct st_session *s, struct stream *st, uint64_t code,
                            const char *reason, bool drop_output);

/* ---- budgets and credit (session_credit.c) --------------------------------------------------- */

/* The first window of a new stream, charged whole to both budgets: 0, or -ENOSPC (refused). */
int st__session_window_reserve(struct st_session *s, struct stream *st, uint64_t type);

/* The window announced to the peer (header, HELLO): every stream's credit at open. */
uint64_t st__session_announced_window(const struct st_session *s);
/* Gives back up to @n bytes of what @st's window holds charged. */
void st__session_window_credit(struct st_session *s, struct stream *st, uint64_t n);
/* Some of @st's queue toward the peer (@len_before bytes) was packed: what the budgets carried
 * of it beyond the stream's floor is credited back. */
void st__session_out_packed(struct st_session *s, struct stream *st, uint64_t len_before);
/* Drops everything @st queued toward the peer. */
void st__session_out_drop(struct st_session *s, struct stream *st);
/* @st has DATA it may pack now (queued, not behind an OPENED, within credit). */
bool st__session_may_send_data(const struct st_session *s, const struct stream *st);
/* A blocked writer on @st has room now: the next pack round tells it (on_writable). */
bool st__session_writer_to_wake(const struct st_session *s, const struct stream *st);

/* ---- base protocol: remembered endings (session_tunnel.c) ------------------------------------ */

/* The remembered entry for @id, or NULL. */
struct ended_id *st__session_ended_find(struct st_session *s, uint64_t id);
/* Remembers @id (with a REMOVE owed when @answer_pending); false when the oldest entry, which
 * would be overwritten, still owes its answer. */
bool st__session_ended_add(struct st_session *s, uint64_t id, bool answer_pending);

#endif
