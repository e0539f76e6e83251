/*
 * stream/session.h — one tunnel session (one edge node's websocket), sans-I/O.
 *
 * Like nghttp2_session: the caller feeds every received websocket message to st_session_recv()
 * and gets callbacks; it queues stream bytes with st_session_write() and asks st_session_pack()
 * for the next message to put on the wire whenever the websocket is writable. The session owns
 * the stream table, the per-stream state machine (ext.h), credit flow control (window.h) when
 * negotiated, bounded per-stream output queues (buf.h) and a round-robin writer, so one busy or
 * stalled stream never starves another. It does no I/O, reads no clock and logs nothing.
 *
 * Base protocol (caps 0): only connect/DATA/REMOVE/CLOSE_CONNECT are sent, never an extension
 * type; inbound extension types are ignored like any unknown type. Every stream ends with one
 * REMOVE each way, as KubeEdge's peers expect (its cloud resends REMOVE until it sees the
 * edge's): the peer's REMOVE is answered with ours exactly once, ours still queued when the
 * peer's crosses it goes at once (the bytes before it are dropped: nobody reads them), and a
 * REMOVE for an ID we no longer know is answered once unless we sent ours for it lately.
 *
 * Thread-safety: one session belongs to one thread (the loop). Callbacks run inside
 * st_session_recv() and may call st_session_write/close/consumed for any stream.
 */
#ifndef STREAM_SESSION_H
#define STREAM_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <stream/budget.h>
#include <stream/limits.h>

struct st_session;

enum st_session_role {
	ST_SESSION_CLOUD = 0, /* opens streams (sends connects) */
	ST_SESSION_EDGE = 1,  /* accepts streams */
};

/* Counters a process keeps over all its sessions, past and present: a session given one in its
 * config bumps it with its own stats (same thread as the session). */
struct st_session_totals {
	uint64_t removes_answered; /* see struct st_session_stats */
	uint64_t removes_crossed;
	uint64_t removes_repeated;
	/* Edge: connects refused by the session itself, before on_open (ERROR limit): */
	uint64_t refused_limit;  /* past max_streams */
	uint64_t refused_budget; /* the stream's first window did not fit a budget */
};

struct st_session_config {
	enum st_session_role role;
	uint32_t caps;              /* agreed ext.h capabilities; 0 = base protocol */
	uint64_t send_window_bytes; /* with ST_CAP_FLOW: the peer's announced window */
	uint64_t recv_window_bytes; /* with ST_CAP_FLOW: each stream's first window (the window
	                             * we announce, unless recv_window_quiet_bytes) */
	/* With ST_CAP_FLOW, edge role: 0, or a smaller window (<= recv_window_bytes) that is
	 * announced instead and is the first window of LOGS and METRIC streams, which carry at
	 * most a request body from the cloud. Other streams (exec, attach, TCP: uploads) still get
	 * recv_window_bytes at open: reserved whole with the stream, the difference granted in a
	 * WINDOW ahead of anything else of the stream (PROTOCOL.md §5.3). */
	uint64_t recv_window_quiet_bytes;
	/* With ST_CAP_FLOW, memory is bounded by credit, never by pausing the tunnel: every stream's
	 * receive window (what the peer may have in flight or we hold for it) is charged to the
	 * session's node budget and to @process_budget. A stream whose first window does not fit
	 * is refused (-ENOSPC from st_session_open; ERROR limit to the cloud on the edge). A window
	 * grows (doubling, up to recv_window_max_bytes) when its consumer drains it and both
	 * budgets have room, and shrinks back toward recv_window_bytes when either is tight.
	 * Toward the peer, a write takes no more than the peer's credit covers, and what waits in
	 * a stream's queue is charged to both budgets until it is packed (st_session_write): the
	 * first ST_STREAM_OUT_FLOOR_BYTES of it on the stream's own reservation (charged with its
	 * first window, so every stream can always make progress), the rest only as far as both
	 * budgets have room, so a process's memory stays within its budget however many streams
	 * have their output waiting (a writer that finds no room is woken when there is). */
	uint64_t recv_window_max_bytes;   /* 0 = recv_window_bytes: no growth */
	uint64_t node_budget_bytes;       /* 0 = no node limit */
	struct st_budget *process_budget; /* optional, borrowed: shared by a process's sessions */
	size_t max_streams;               /* 0 = ST_DEFAULT_MAX_STREAMS */
	size_t stream_out_bytes; /* per-stream output queue; 0 = ST_DEFAULT_STREAM_OUT_BYTES */
	size_t max_data_payload; /* DATA payload per message; 0 = ST_DEFAULT_DATA_PAYLOAD_BYTES */
	struct st_session_totals *totals; /* optional, borrowed: must outlive the session */
};

struct st_session_callbacks {
	/* Edge: the cloud opened stream @id with connect @type and its payload (JSON connect, or
	 * a TCP_CONNECT payload). Return 0 to accept, or a negative errno to refuse: the session
	 * then answers with ERROR (mapped code, when negotiated) or REMOVE. */
	int (*on_open)(struct st_session *s, uint64_t id, uint64_t type, const uint8_t *payload,
	               size_t len, void *user);
	/* DATA for an open stream. Return 0, or a negative errno to reset that stream. */
	int (*on_data)(struct st_session *s, uint64_t id, const uint8_t *data, size_t len,
	               void *user);
	/* The peer will send no more DATA on @id (HALF_CLOSE). May be NULL. */
	void (*on_half_close)(struct st_session *s, uint64_t id, void *user);
	/* @id ended by the peer or by a protocol error: @code 0 for REMOVE, else an ERROR code
	 * (ext.h) with @reason (a view, not NUL-terminated). @stream_user is what
	 * st_session_set_stream_user attached (the stream may already be out of the table). */
	void (*on_close)(struct st_session *s, uint64_t id, void *stream_user, uint64_t code,
	                 const char *reason, size_t reason_len, void *user);
	/* Output queue space or send credit became available on @id again (after a short
	 * st_session_write). May be NULL. */
	void (*on_writable)(struct st_session *s, uint64_t id, void *user);
	/* Cloud, with ST_CAP_OPENED: the edge's dial for TCP_CONNECT stream @id succeeded
	 * (OPENED); DATA from the edge may follow. May be NULL. */
	void (*on_opened)(struct st_session *s, uint64_t id, void *user);
	/* Edge: the cloud asked to drop the tunnel (CLOSE_CONNECT) with @text. May be NULL. */
	void (*on_tunnel_close)(struct st_session *s, const char *text, size_t len, void *user);
	/* Edge, with ST_CAP_RECONNECT: the cloud is draining and asks for a new tunnel (through
	 * its load balancer, to another replica) before this one closes; it serves this tunnel's
	 * streams for up to @drain_ms more (PROTOCOL.md §5.6). May be NULL. */
	void (*on_reconnect)(struct st_session *s, uint64_t drain_ms, void *user);
	/* With ST_CAP_PEER (a link between two cloudstream replicas): a NODE_UP, NODE_DOWN, SYNC
	 * or SYNC_END message (@type, ConnectID 0) with its payload (a view, valid during the
	 * call). Return 0, or a negative errno: the session then fails with -EPROTO (the link
	 * must be closed). Required when ST_CAP_PEER is agreed. */
	int (*on_peer)(struct st_session *s, uint64_t type, const uint8_t *payload, size_t len,
	               void *user);
};

struct st_session_stats {
	uint64_t streams_open;  /* streams in the table now */
	uint64_t streams_total; /* streams ever opened */
	uint64_t msgs_in, msgs_out;
	uint64_t data_bytes_in, data_bytes_out;
	uint64_t ignored_msgs;  /* messages for unknown streams or of unknown types */
	uint64_t stream_resets; /* streams reset for protocol errors or refusals */
	uint64_t write_blocked; /* st_session_write calls cut short by a full queue or credit */
	/* Base protocol REMOVE bookkeeping (see the top of this file): */
	uint64_t removes_answered; /* our REMOVE sent because the peer's came first */
	uint64_t removes_crossed;  /* the peer's REMOVE arrived while ours was still queued */
	uint64_t removes_repeated; /* the peer's REMOVE for an ID already answered: absorbed */
	uint64_t budget_refusals;  /* streams refused because their first window did not fit */
	uint64_t window_bytes; /* receive windows held now, all streams (the node budget's use) */
};

/* st_session_new() - 0, -EINVAL (bad config or missing on_data/on_close, or edge without
 * on_open), -ENOMEM. @cb and @user must outlive the session. */
int st_session_new(struct st_session **out, const struct st_session_config *cfg,
                   const struct st_session_callbacks *cb, void *user);

/* st_session_free() - frees every stream without callbacks. NULL is a no-op. */
void st_session_free(struct st_session *s);

/*
 * st_session_recv() - process one complete received websocket message.
 * Returns 0, or a fatal error after which the tunnel must be closed: -EBADMSG (malformed),
 * -EMSGSIZE (over a limit), -EPROTO (a connect toward the cloud, a connect for an ID in use, a
 * malformed extension message), -ENOMEM. Problems confined to one stream reset that stream and
 * return 0.
 */
int st_session_recv(struct st_session *s, const uint8_t *msg, size_t len);

/*
 * st_session_open() - cloud: open stream @id by queueing connect @type with @payload (copied).
 * Returns 0; -EEXIST (id in use); -EAGAIN (max_streams open); -ENOSPC (with ST_CAP_FLOW: the
 * stream's receive window does not fit the node or process budget); -EMSGSIZE (payload too
 * big); -ENOTSUP (TCP_CONNECT not negotiated); -EINVAL (not a connect type, id 0, or the edge
 * role).
 */
int st_session_open(struct st_session *s, uint64_t id, uint64_t type, const uint8_t *payload,
                    size_t len);

/*
 * st_session_write() - queue DATA bytes for @id.
 * Returns the bytes accepted (may be fewer than @len; 0 when the queue is full: pause the source
 * until on_writable), -ENOENT (unknown stream), -EPIPE (our side already shut down or closing),
 * -ENOMEM.
 */
ssize_t st_session_write(struct st_session *s, uint64_t id, const uint8_t *p, size_t len);

/* st_session_write_space() - bytes st_session_write would accept now for @id (0 if unknown). */
size_t st_session_write_space(const struct st_session *s, uint64_t id);

/*
 * st_session_notify_writable() - call on_writable for @id once its queue has room again, as
 * after a short write: for a caller that sized its write by st_session_write_space() and still
 * has bytes waiting (nothing else may wake it, e.g. an upload that gets no answer bytes).
 */
void st_session_notify_writable(struct st_session *s, uint64_t id);

/*
 * st_session_opened() - edge, with ST_CAP_OPENED: the dial for TCP_CONNECT stream @id
 * succeeded; OPENED is packed before any DATA of the stream (which waits for it: a stream that
 * fails instead ends with ERROR, and its DATA is never sent). Returns 0; -ENOENT (unknown
 * stream); -ENOTSUP (OPENED not negotiated, or not a TCP_CONNECT stream); -EALREADY (queued
 * already); -EPIPE (the stream is ending); -EINVAL (the cloud role).
 */
int st_session_opened(struct st_session *s, uint64_t id);

/* st_session_shutdown() - we send no more DATA on @id: HALF_CLOSE after the queued bytes (with
 * ST_CAP_HALF_CLOSE; in the base protocol nothing is sent). 0, -ENOENT, -EPIPE. */
int st_session_shutdown(struct st_session *s, uint64_t id);

/*
 * st_session_close() - end @id from our side: the queued bytes go first, then REMOVE (@code 0)
 * or ERROR(@code, @reason) when negotiated (REMOVE otherwise). The stream is forgotten once
 * that message is packed; no on_close callback follows. 0 (also when the stream is already
 * ending) or -ENOENT.
 */
int st_session_close(struct st_session *s, uint64_t id, uint64_t code, const char *reason);

/* st_session_consumed() - the consumer took @n bytes of @id's DATA: with ST_CAP_FLOW, credit
 * goes back to the peer (in WINDOW messages of at least half the window), the window growing or
 * shrinking as the budgets allow. */
void st_session_consumed(struct st_session *s, uint64_t id, size_t n);

/* st_session_hello() - queue our HELLO (with ext caps) carrying @replica_id; sent first. */
int st_session_hello(struct st_session *s, const char *replica_id);

/*
 * st_session_send_peer() - with ST_CAP_PEER: queue a peer message (@type NODE_UP .. SYNC_END,
 * ConnectID 0, @payload copied), packed after HELLO and before any stream's message, in order.
 * The queue holds ST_PEER_QUEUE_BYTES; the caller keeps what did not fit (peerdir.h resyncs).
 * Returns 0; -EAGAIN (the queue is full now); -EMSGSIZE (@len over ST_MAX_EXT_PAYLOAD_BYTES);
 * -ENOTSUP (ST_CAP_PEER not agreed); -EINVAL (not a peer type); -ENOMEM.
 */
int st_session_send_peer(struct st_session *s, uint64_t type, const uint8_t *payload, size_t len);

/* st_session_peer_space() - payload bytes st_session_send_peer takes now in one message (0
 * when the queue is full or without ST_CAP_PEER). */
size_t st_session_peer_space(const struct st_session *s);

/*
 * st_session_reconnect() - cloud, with ST_CAP_RECONNECT: queue RECONNECT (ConnectID 0,
 * payload uvarint @drain_ms: how long this tunnel's streams are still served), packed right
 * after HELLO before any stream's message. Once per session. Returns 0; -ENOTSUP (not
 * agreed); -EALREADY (RECONNECT or CLOSE_CONNECT queued before); -EINVAL (the edge role);
 * -ENOMEM.
 */
int st_session_reconnect(struct st_session *s, uint64_t drain_ms);

/*
 * st_session_close_tunnel() - cloud: queue CLOSE_CONNECT (ConnectID 0) with @text (copied,
 * at most ST_MAX_EXT_PAYLOAD_BYTES): the base protocol's "drop this tunnel and redial". Packed
 * like RECONNECT; once per session. Returns 0; -EMSGSIZE; -EALREADY; -EINVAL (edge role);
 * -ENOMEM.
 */
int st_session_close_tunnel(struct st_session *s, const char *text);

/* st_session_want_write() - is there a message to pack? */
bool st_session_want_write(const struct st_session *s);

/*
 * st_session_pack() - write the next message to send into @out: control messages (HELLO,
 * WINDOW) first, then one message from the next stream in round-robin order that has something
 * it may send (connect, DATA within credit, HALF_CLOSE, REMOVE/ERROR).
 * @binary: set to whether to send it as a BINARY frame (only when negotiated; TEXT otherwise).
 * Returns the message length, 0 when nothing can be sent now, -EMSGSIZE when @cap is below
 * ST_MAX_MESSAGE_HEADER_BYTES + max_data_payload (and the connect payloads queued).
 */
ssize_t st_session_pack(struct st_session *s, uint8_t *out, size_t cap, bool *binary);

/*
 * st_session_pack_masked() - st_session_pack(), the message written XORed with the websocket
 * mask @key from out[0] on (RFC 6455 §5.3: a client's frame payload). A DATA payload is masked
 * as it is copied out of the stream's queue, so the bulk bytes are gone over once, not copied
 * and then masked in place.
 */
ssize_t st_session_pack_masked(struct st_session *s, uint8_t *out, size_t cap, bool *binary,
                               const uint8_t key[4]);

/* st_session_set_stream_user() - attach the caller's object to @id (like nghttp2's stream user
 * data), so callbacks find it in O(1). 0 or -ENOENT. */
int st_session_set_stream_user(struct st_session *s, uint64_t id, void *user);

/* st_session_stream_user() - the object attached to @id, or NULL (unknown id or none set). */
void *st_session_stream_user(const struct st_session *s, uint64_t id);

/* st_session_stream_exists() - is @id in the table? (A base-protocol stream the peer removed
 * stays there, without its user object, until our answering REMOVE is packed.) */
bool st_session_stream_exists(const struct st_session *s, uint64_t id);

void st_session_get_stats(const struct st_session *s, struct st_session_stats *out);

#endif /* STREAM_SESSION_H */
