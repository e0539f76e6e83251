/*
 * edgestream/src/relay.h — a stream: one request the cloud opened on a tunnel, relayed to the
 * backend serving it (backend.h).
 *
 * The relay owns the two queues and their rules, whatever the backend:
 *
 *   cloud DATA → to_backend → the backend. With the flow extension the cloud never sends more
 *   than the window (the queue's cap), and credit goes back only once the backend took the
 *   bytes (es_stream_sent), so a slow backend holds up only its own stream. Without it (a
 *   KubeEdge cloud) a queue over its mark pauses the whole tunnel (es_tunnel_block), and a
 *   backend that does not drain it within --stall-timeout is cut.
 *
 *   backend → es_stream_to_cloud → the session's per-stream queue; what it cannot take waits
 *   in to_cloud, and the backend stops producing above its mark (es_stream_cloud_full) until
 *   ops->on_writable says it drained.
 *
 * Every stream gets an answer: the backend's, or es_stream_fail() (ERROR with a code and a
 * reason when negotiated; for a base-protocol cloud an HTTP error response on upgrades, REMOVE
 * otherwise). A stream is freed when the cloud ends it, when its tunnel goes, or once the
 * backend is done and its queue went out; its backend's close() runs then. Loop thread only.
 */
#ifndef EDGESTREAM_RELAY_H
#define EDGESTREAM_RELAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libwebsockets.h>

#include <stream/buf.h>

#include "backend.h"
#include "es.h"
#include "es_route.h"

struct es_tunnel;
struct es_conn;

struct es_stream {
	struct es_tunnel *t;           /* the tunnel it rides (borrowed; frees its streams first) */
	struct edgestream *es;         /* t->es */
	struct es_stream *next, *prev; /* t->streams */
	uint64_t id;                   /* the tunnel's stream (connect) id */
	uint64_t type;                 /* connect message type (frame.h) */
	uint64_t started_ms;
	uint64_t started_us;    /* for the TTFB histogram (es->ttfb) */
	uint8_t kind;           /* enum st_kubelet_kind of its path; OTHER for TCP_CONNECT */
	bool reserve_on_demand; /* to_cloud reserved lazily: a `logs -f`, or a TCP_CONNECT */
	uint16_t port;          /* the route's local port (local-port backend), else 0 */
	const char *local_name; /* its allow-list name (borrowed from es->allow) */
	const char *tcp_host;   /* TCP_CONNECT: where the local-port backend dials, NULL for
	                       * 127.0.0.1 (es->kubelet_host, or pod_ip) */
	char pod_ip[16];        /* TCP_CONNECT to a pod: its IP, dotted */
	const struct es_backend_ops *ops; /* set once routed; NULL for a refusal */
	void *be;                         /* the backend's own state; its close() frees it */
	struct es_conn *conn;             /* the backend connection, for backends that have one */
	struct st_buf to_backend;         /* the cloud's bytes the backend has not taken yet */
	struct st_buf to_cloud;           /* the backend's bytes the session could not take yet */
	bool done;                        /* the backend finished: to_cloud goes out, then REMOVE */
	bool answered;                    /* some answer byte went toward the cloud */
	bool body_sent;                   /* some of the cloud's bytes reached the backend */
	bool cloud_half_closed; /* TCP streams: the cloud sent its last byte (HALF_CLOSE) */
	bool blocking;          /* base protocol: to_backend is over its mark (tunnel paused) */
	uint64_t reserved;      /* charged to es->budget for the backend's own buffer */
	/* to_cloud's charge to es->budget (relay.c, TO_CLOUD_HIGH): its whole cap while
	 * to_cloud_reserved (always, unless a follower); else what it holds (forced: the budget
	 * had no room), or 0 */
	uint64_t to_cloud_charged;
	bool to_cloud_reserved;
	/* to_cloud's cap grown past HIGH + burst for a backend whose window grew (the kubelet's
	 * HTTP/2 bulk streams, es_stream_grow_to_cloud), and what of it is charged to es->budget
	 * (to_cloud_grown_charged <= to_cloud_grown). Never given back by the quiet sweep; the
	 * backend gives it back as its peer's window shrinks (es_stream_shrink_to_cloud). */
	uint64_t to_cloud_grown, to_cloud_grown_charged;
	uint64_t to_cloud_queued_ms; /* bytes last waited in to_cloud (or the stream opened) */
	/* The access log line when it ends (relay.c): the cloud's line for the same stream id
	 * says what was asked and by whom; this one how the edge served it. */
	uint64_t to_cloud_bytes, from_cloud_bytes;
	const char *outcome;              /* static: "done" unless set otherwise */
	lws_sorted_usec_list_t sul_stall; /* armed while blocking: cut when it fires */
};

/* ---- from the tunnel (session callbacks) ----------------------------------------------- */

/* es_stream_open() - the cloud opened stream @id with connect @type and @payload: route it
 * and hand it to its backend (or refuse it, answered). 0, or -ENOMEM (the session refuses). */
int es_stream_open(struct es_tunnel *t, uint64_t id, uint64_t type, const uint8_t *payload,
                   size_t len);
/* DATA from the cloud. 0, or -EMSGSIZE when over the queue's cap (the session resets it). */
int es_stream_on_data(struct es_stream *st, const uint8_t *p, size_t len);
void es_stream_on_half_close(struct es_stream *st);
/* The cloud ended the stream (REMOVE, or ERROR @code): it is freed. */
void es_stream_on_cloud_close(struct es_stream *st, uint64_t code, const char *reason,
                              size_t reason_len);
/* The session can take more of this stream's bytes. */
void es_stream_on_writable(struct es_stream *st);
/* The tunnel went down (or the instance is freed): the stream is freed without a word. */
void es_stream_tunnel_gone(struct es_stream *st);

/* ---- for backends ---------------------------------------------------------------------- */

/* es_stream_to_cloud() - the backend's bytes toward the cloud. 0, or -1 when @st is gone
 * (the session forgot it, or over the queue's cap: failed). */
int es_stream_to_cloud(struct es_stream *st, const uint8_t *p, size_t n);

/* es_stream_cloud_full() - to_cloud is over its mark, or holds bytes it could not reserve
 * (relay.c, TO_CLOUD_HIGH): stop producing until on_writable. */
bool es_stream_cloud_full(const struct es_stream *st);

/* es_stream_grow_to_cloud() - let to_cloud hold @extra more bytes for the rest of the stream,
 * charged to the process budget now (before the backend's peer is told it may send them).
 * 0, or -ENOSPC (nothing changed). */
int es_stream_grow_to_cloud(struct es_stream *st, size_t extra);

/* es_stream_shrink_to_cloud() - to_cloud's cap past its base is @cap_extra from now on, of
 * which @charged is charged to the budget (each at most what it is; the rest goes back).
 * 0, or -EBUSY when the queue holds more than the smaller cap (nothing changed). */
int es_stream_shrink_to_cloud(struct es_stream *st, uint64_t cap_extra, uint64_t charged);

/* es_stream_recharge_grown() - charge @extra more of the grown cap again (at most what is not
 * charged), by force when the budget has no room. */
void es_stream_recharge_grown(struct es_stream *st, uint64_t extra);

/* es_relay_quiet_sweep_arm() - (re)start the sweep that takes back the queue reservations of
 * quiet streams, unless it runs already. */
void es_relay_quiet_sweep_arm(struct edgestream *es);

/* es_stream_sent() - @n bytes at the front of to_backend reached the backend: they are
 * dropped and their credit goes back to the cloud. */
void es_stream_sent(struct es_stream *st, size_t n);

/* es_stream_fail() - fails @st before (or instead of) the backend's answer, with an ERROR
 * @code (ext.h) and @reason, logged once at WARN; after an answer began, the stream just ends.
 * @st is freed. */
void es_stream_fail(struct es_stream *st, uint64_t code, const char *reason);

/* es_stream_backend_done() - the backend finished: what is queued goes out, then REMOVE (and
 * the stream is freed; maybe at once). */
void es_stream_backend_done(struct es_stream *st);

/* es_stream_describe() - the backend's name for messages (ops->describe). */
const char *es_stream_describe(const struct es_stream *st, char *buf, size_t cap);

#endif /* EDGESTREAM_RELAY_H */
