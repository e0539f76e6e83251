/*
 * stream/wsctl.h — a websocket tunnel's control frames, sans-I/O: what the peer's PING, PONG
 * and CLOSE call for, and the PING and PONG we owe it. One for every tunnel we read ourselves
 * (stream/tunnelread.h): the cloud's edge tunnels, its peer links both ways and the edge's
 * tunnel. The reader hands each control frame to st_wsctl_recv(); the tunnel writer
 * (st_tunnel_write, stream/tunnelwrite.h) frames what is owed at the head of its next batch
 * (st_wsctl_take), so a PONG or PING costs no writable callback of its own.
 *
 * A PONG may be held (coalesced): a peer that told us how often it must hear from us (the
 * edge's pong-within offer, PROTOCOL.md §5.1) gets its PONG once that time since our last
 * frame is near, with the latest PING's payload (RFC 6455 §5.5.3 lets one PONG answer the
 * most recent PING), not one PONG per PING. The hold is the caller's parameter: 0 answers at
 * once (a KubeEdge edge, the peer links, the edge toward the cloud).
 *
 * The caller keeps one struct per tunnel. Thread-safety: none; the loop thread owns it.
 */
#ifndef STREAM_WSCTL_H
#define STREAM_WSCTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <stream/liveness.h>
#include <stream/wsframe.h>

#define ST_WS_MAX_CONTROL_BYTES 125u /* a control frame's payload at most (RFC 6455 §5.5) */

struct st_wsctl {
	/* Our PING's payload (static text, borrowed; not empty: lws 4.1.6 reports no empty PONG,
	 * ops-ws.c "goto already_done", so a peer reading with lws would not see the answer). */
	const char *ping;
	uint64_t last_tx_ms;  /* read-only: when we last wrote a frame (st_wsctl_sent) */
	uint64_t pong_due_ms; /* read-only: while @pong_held, when the PONG must go */
	bool want_ping;       /* a PING goes out with the next write (set by the liveness sweep) */
	bool want_pong;       /* read-only: a PONG with @pong goes out with the next write */
	bool pong_held;       /* read-only: @pong answers a PING, held until @pong_due_ms */
	bool closed;          /* read-only: the peer sent CLOSE; @close holds its status code */
	uint8_t close_len;    /* read-only: bytes of @close (0 or 2) */
	uint8_t close[2];     /* read-only: the CLOSE's status code, what an echo carries */
	uint8_t pong_len;     /* read-only: bytes of @pong */
	uint8_t pong[ST_WS_MAX_CONTROL_BYTES]; /* read-only: the latest PING's payload */
};

/* What st_wsctl_recv() asks of the caller. */
enum st_wsctl_action {
	ST_WSCTL_NONE = 0,  /* nothing to send now */
	ST_WSCTL_WRITE = 1, /* a PONG is owed now: ask for a writable callback */
	ST_WSCTL_LATER = 2, /* a PONG is held until @pong_due_ms: look again then (st_wsctl_due) */
};

/*
 * st_wsctl_init() - a tunnel that came up at @now_ms (its first frame counts as our last one
 * for the hold). @ping: our PING's payload, static text (borrowed for the struct's life), not
 * empty and at most 125 bytes.
 */
void st_wsctl_init(struct st_wsctl *c, const char *ping, uint64_t now_ms);

/*
 * st_wsctl_recv() - the peer's control frame @op (ST_WS_PING, ST_WS_PONG or ST_WS_CLOSE) with
 * @len bytes at @payload (borrowed for the call; @len <= 125, what the reader lets through)
 * arrived at @now_ms. Every control frame is a sign of life: @live hears of it
 * (st_liveness_rx). A PING keeps its payload for the PONG: owed at once when @hold_ms is 0 or
 * @hold_ms since our last frame has passed, else held until then (a later PING replaces the
 * payload, the time stays). A CLOSE keeps its status code (the first two bytes: the echo
 * carries the code only, as lws does). Returns what the caller must do; a PONG or a CLOSE
 * asks for nothing more (the CLOSE's echo is the caller's, when it closes).
 */
enum st_wsctl_action st_wsctl_recv(struct st_wsctl *c, struct st_liveness *live,
                                   enum st_ws_opcode op, const uint8_t *payload, size_t len,
                                   uint64_t now_ms, uint64_t hold_ms);

/*
 * st_wsctl_due() - a held PONG whose time has come at @now_ms (no later PING took it along)
 * is owed now. Returns true when it is: the caller asks for a writable callback.
 */
bool st_wsctl_due(struct st_wsctl *c, uint64_t now_ms);

/* st_wsctl_want_write() - true while a PING or PONG is owed (not a held one). */
bool st_wsctl_want_write(const struct st_wsctl *c);

/*
 * st_wsctl_take() - the next control frame owed, taken (the PONG first, then the PING): its
 * opcode in *@op and its payload in *@payload (valid until the next call on @c), *@len bytes.
 * Returns false when none is owed. Taking the PONG ends a hold.
 */
bool st_wsctl_take(struct st_wsctl *c, enum st_ws_opcode *op, const uint8_t **payload, size_t *len);

/* st_wsctl_sent() - we wrote a frame (any: control or data) at @now_ms: the hold's clock. */
void st_wsctl_sent(struct st_wsctl *c, uint64_t now_ms);

#endif /* STREAM_WSCTL_H */
