/*
 * edgestream/src/tunnel.h — one tunnel to a cloud: the websocket (dialled with mutual TLS and
 * redialled with backoff forever), its session (stream/session.h, edge role), the reassembly of
 * fragmented messages, liveness (pings, dead peer), the base protocol's pause, and the streams
 * the cloud opened on it.
 *
 * An instance may hold several tunnels (es->tunnels); each is independent: its own session,
 * stream ids, liveness and backoff. The streams of a tunnel reach its session only through the
 * functions below, never through its fields, so a stream does not care which tunnel it rides.
 *
 * Lifetime: a tunnel lives from es_tunnel_new() until es_tunnel_free() at edgestream_free();
 * while the websocket is down it has no session and no streams (they end with it). Worker jobs
 * refer to streams, never to tunnels. Loop thread only.
 */
#ifndef EDGESTREAM_TUNNEL_H
#define EDGESTREAM_TUNNEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <libwebsockets.h>

#include <stream/ext.h>
#include <stream/liveness.h>
#include <stream/reasm.h>
#include <stream/session.h>
#include <stream/wsctl.h>

#include "backoff.h"
#include "es.h"

struct es_stream;

struct st_tunnel_reader;

struct es_tunnel {
	struct edgestream *es;  /* the instance (borrowed; outlives the tunnel) */
	struct es_tunnel *next; /* es->tunnels */
	/* where it dials */
	char cloud_host[ES_HOST_MAX], cloud_path[ES_HOST_MAX];
	char cloud_name[ES_HOST_MAX]; /* what the cloud's certificate must name */
	int cloud_port;
	size_t url_i;         /* es->urls entry of the current (or next) dial */
	unsigned round_fails; /* dials failed since the last tunnel up (a round: n_urls) */
	unsigned move_fails;  /* dials of a move refused so far (retried soon, then backoff) */
	char addr[64];        /* cloud_host resolved (es->cloud_dns, on a worker), dialled */
	struct es_name_wait
	        name_wait; /* attached while the dial waits for it; counts as dialling */
	uint32_t name_gen; /* the answer dialled (es_name_dial_failed's ticket) */
	bool name_dialled; /* addr came from the name: a failure there counts */
	/* RECONNECT from a draining cloud (PROTOCOL.md §5.6): this tunnel's streams go on, a new
	 * tunnel is dialled; once that one is up, this one closes when it carries no stream. It
	 * never redials. */
	bool retiring;
	bool spare; /* a retired tunnel, closed: kept for the next move, never dials by itself */
	lws_sorted_usec_list_t sul_retire; /* may a retiring tunnel close now? (off callbacks) */
	/* the websocket: wsi set from the upgrade's answer until CLOSED */
	struct lws *wsi;
	bool dialing;   /* a connect is under way (wsi may still be NULL) */
	bool connected; /* upgraded: sess exists */
	struct st_session *sess;
	uint32_t caps; /* agreed extensions (ext.h); 0 = base protocol */
	bool extended;
	struct st_reasm rx; /* reassembly of a fragmented message */
	struct st_liveness live;
	/* Our own reading of the cloud's frames (stream/tunnelread.h; NULL: lws reads, on its
	 * poll loop). Then the cloud's PINGs reach us, not lws, and we answer them: */
	struct st_tunnel_reader *reader;
	struct st_wsctl ctl;       /* the PING the timer asks for, the PONG owed (stream/wsctl.h) */
	bool rx_paused;            /* base protocol: reading paused for blocking streams */
	bool refusal_logged;       /* the session's first refusal of a stream was logged */
	unsigned blocking_streams; /* streams whose queue toward the backend is over its mark */
	uint64_t connected_ms;
	uint64_t bytes_in, bytes_out; /* websocket payload bytes of this connection (listings) */
	char replica[ST_MAX_REPLICA_ID_BYTES + 1]; /* the cloud replica's id, "" if it gave none */
	char close_reason[256]; /* why we are closing it, for the log and the callback */
	int close_err;
	struct es_backoff backoff;
	lws_sorted_usec_list_t sul_dial, sul_ping, sul_stable;
	struct es_stream *streams; /* live streams, newest first (relay.c links them) */
};

extern const struct lws_protocols es_tunnel_protocol;

/*
 * es_tunnel_new() - a tunnel of @es to the configured cloud (es->cloud_*), not dialled yet,
 * linked into es->tunnels. @seed seeds its backoff jitter. 0 or -ENOMEM.
 */
int es_tunnel_new(struct es_tunnel **out, struct edgestream *es, uint64_t seed);

/* es_tunnel_free() - after the context is gone (no callback can reach it any more): ends its
 * streams, frees its session, unlinks it. NULL is a no-op. */
void es_tunnel_free(struct es_tunnel *t);

/* es_tunnel_stream_ended() - a stream of @t ended (relay.c): a retiring tunnel may close. */
void es_tunnel_stream_ended(struct es_tunnel *t);

/* es_tunnel_schedule_dial() - dial in @delay_ms (unless the instance is stopping). */
void es_tunnel_schedule_dial(struct es_tunnel *t, uint64_t delay_ms);

/* es_tunnel_stop() - no more dials; the websocket, if any, closes (its streams end). */
void es_tunnel_stop(struct es_tunnel *t);

/* es_tunnel_end_streams() - every stream of @t ends now, without a word to the cloud (the
 * instance is going: while the context still serves their connections). */
void es_tunnel_end_streams(struct es_tunnel *t);

/* es_tunnel_close() - close the websocket with @err and @why (kept for the log and the
 * disconnected callback; the first reason wins). */
void es_tunnel_close(struct es_tunnel *t, int err, const char *why);

/* es_tunnel_kick() - ask for WRITEABLE when the session or a ping has something to send. */
void es_tunnel_kick(struct es_tunnel *t);

/* ---- for the streams riding a tunnel (relay.c) ----------------------------------------- */

/* es_tunnel_caps() - the agreed extensions (0 while down or with a base-protocol cloud). */
uint32_t es_tunnel_caps(const struct es_tunnel *t);

/*
 * es_tunnel_write() - queue stream @id's bytes toward the cloud, as many as its queue and
 * credit take. Returns the bytes taken (may be short: the session calls on_writable later),
 * or <0 when the session no longer knows the stream (or the tunnel is down).
 */
ssize_t es_tunnel_write(struct es_tunnel *t, uint64_t id, const uint8_t *p, size_t n);

/* es_tunnel_end_stream() - end stream @id from our side: REMOVE after its queued bytes, or
 * ERROR @code with @reason (code != 0, when negotiated). */
void es_tunnel_end_stream(struct es_tunnel *t, uint64_t id, uint64_t code, const char *reason);

/* es_tunnel_opened() - with OPENED agreed: the TCP_CONNECT stream @id's dial succeeded. */
void es_tunnel_opened(struct es_tunnel *t, uint64_t id);

/* es_tunnel_consumed() - @n bytes of stream @id left the edge toward its backend: their
 * credit goes back to the cloud (flow extension). */
void es_tunnel_consumed(struct es_tunnel *t, uint64_t id, size_t n);

/* es_tunnel_attach() / es_tunnel_detach() - the stream object the session's callbacks for
 * @id reach; detach forgets it only if it is still @st. */
void es_tunnel_attach(struct es_tunnel *t, uint64_t id, struct es_stream *st);
void es_tunnel_detach(struct es_tunnel *t, uint64_t id, const struct es_stream *st);

/*
 * es_tunnel_block() - base protocol (no per-stream credit): a stream's queue toward its
 * backend went over (@on) or back under its mark. While any stream is over, the tunnel is not
 * read (lws_rx_flow_control), and its liveness clock stands still.
 */
void es_tunnel_block(struct es_tunnel *t, bool on);

/* es_tunnel_note_refusal() - a stream was refused for a limit (@why): warn once per tunnel;
 * the caller counts it. */
void es_tunnel_note_refusal(struct es_tunnel *t, const char *why);

/* ---- internal to the tunnel: tunnel.c's seams with tunnel_dial.c and tunnel_move.c ---- */
/* tunnel_dial.c: the tunnel or its dial ended (@err, @why unless a close reason was kept): its
 * streams end, its session goes, a redial is scheduled (none for a retiring tunnel, which
 * becomes a spare). From the websocket's callback or a failed dial. */
void es__tunnel_down(struct es_tunnel *t, int err, const char *why);
/* tunnel_move.c: the session's on_reconnect (a draining cloud's RECONNECT): dial a second
 * tunnel; this one retires. @user is the tunnel. */
void es__tunnel_on_reconnect(struct st_session *s, uint64_t drain_ms, void *user);

/* ---- internal to the tunnel (tunnel_hs.c: the upgrade's headers) ---- */
uint64_t es__tunnel_first_window(const struct edgestream *es);
/* The window announced to the cloud: LOGS and METRIC streams' first window (4 KiB, or the
 * first window when smaller); the session grants other streams the rest of theirs at open. */
uint64_t es__tunnel_announced_window(const struct edgestream *es);
void es__tunnel_append_headers(struct edgestream *es, struct lws *wsi, unsigned char **p,
                               unsigned char *end);
/* The 101's echo: our extensions, the base protocol, or a broken cloud. 0 or -EPROTO. */
int es__tunnel_read_echo(struct es_tunnel *t, struct lws *wsi, struct st_ext_offer *agreed);
/* A failed upgrade: the cloud's refusal reason or its status into t->close_reason. */
void es__tunnel_note_answer(struct es_tunnel *t, struct lws *wsi);

#endif /* EDGESTREAM_TUNNEL_H */
