/*
 * stream/tunnelwrite.h — the tunnel's writer, one for both daemons: several session messages
 * per writable callback, framed by us (stream/wsframe.h), handed to libwebsockets as raw bytes.
 *
 * Each writable callback packs messages from the session (st_session_pack: control first, then
 * round-robin over the streams) until ST_TUNNEL_BATCH_BYTES are framed or nothing is left, and
 * writes them with one lws_write: one TLS write of up to eight 16 KiB records instead of one
 * message, one record and one loop round each. On the edge (a websocket client) every frame is
 * masked with its own key, 32 bytes per step; keys come from OpenSSL's DRBG (RAND_bytes, in
 * process), drawn 256 frames at a time, never from a read of /dev/urandom per frame.
 *
 * A batch ends with the message that reaches ST_TUNNEL_BATCH_BYTES, so it can be longer by up to
 * one message and its header: ST_TUNNEL_WRITE_MAX_BYTES, which is what the tunnel protocols set
 * as their tx_packet_size, so lws sends a batch in one go and copies nothing to its output list
 * unless the socket is full. (With tx_packet_size at ST_TUNNEL_BATCH_BYTES, lws cut the bytes
 * of every batch past it into its output list and sent them in a writable round of their own:
 * one more TLS record, write(), TCP segment and loop round per batch.) The PONG and PING a
 * tunnel owes (stream/wsctl.h) head the batch: they are tiny, and written alone each cost a
 * writable callback and a TLS record of its own. Only where lws reads the tunnel itself (its
 * poll loop) does lws answer the peer's PINGs.
 *
 * Thread-safety: none; the loop thread owns the writer.
 */
#ifndef STREAM_TUNNELWRITE_H
#define STREAM_TUNNELWRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <stream/liveness.h>

struct lws;
struct st_session;
struct st_wsctl;

#define ST_TUNNEL_BATCH_BYTES (128u * 1024u) /* a batch ends with the message that reaches it */
#define ST_TLS_RECORD_BYTES   16384u         /* TLS plaintext per full record */
/* The most plaintext one st_lws_write_corked() is meant for besides a batch (a stream's bytes
 * toward its apiserver: cloudstream writes up to this per writable round): its records still
 * go out in one send() from the gather scratch. */
#define ST_CORKED_WRITE_BYTES (256u * 1024u)
/* The longest batch: one message (ST_MAX_MESSAGE_BYTES, 1 MiB) and its websocket header
 * (at most 14 bytes) past ST_TUNNEL_BATCH_BYTES - 1; the tunnel protocols' tx_packet_size. */
#define ST_TUNNEL_WRITE_MAX_BYTES (ST_TUNNEL_BATCH_BYTES + 14u + (1u << 20))

struct st_tunnel_writer {
	uint8_t *buf;       /* LWS_PRE + batch + one largest message + its header */
	bool mask;          /* a client: mask every frame */
	uint8_t keys[1024]; /* mask keys not used yet (4 bytes each) */
	size_t keys_left;   /* bytes of @keys still unused, from the end */
	/* With @mask: every frame gets the key 0 (set after init, default false). Only for a
	 * TLS connection whose other end authenticated as one of ours (cloudstream's peer
	 * links, PROTOCOL.md §7): RFC 6455 §10.3's random keys keep a script from choosing the
	 * bytes a proxy on the path sees, and there is neither script nor proxy there. The
	 * frames stay well formed (a zero key is a key); neither end XORs a byte. */
	bool zero_keys;
	uint64_t frames_out; /* read-only: frames written */
	uint64_t writes_out; /* read-only: lws_write calls (batches) */
};

/* st_tunnel_writer_init() - @mask: we are the websocket client. 0 or -ENOMEM. */
int st_tunnel_writer_init(struct st_tunnel_writer *w, bool mask);
void st_tunnel_writer_free(struct st_tunnel_writer *w);

/*
 * st_tunnel_write() - frame and write, in @wsi's writable callback, the control frames @ctl
 * owes (st_wsctl_take: a PONG, a PING; @ctl may be NULL) and then what @sess has to send, in
 * one batch; @ctl hears that a frame went out at @now_ms (st_wsctl_sent). Returns the message
 * bytes written (frame headers and control frames not counted; 0 when there was no message to
 * send), or a negative errno: what st_session_pack returned (the session cannot go on), -EIO
 * when lws refused the write (the connection is going), -ENOMEM when no mask key could be
 * drawn.
 */
ssize_t st_tunnel_write(struct st_tunnel_writer *w, struct lws *wsi, struct st_session *sess,
                        struct st_wsctl *ctl, uint64_t now_ms);

/*
 * st_tunnel_write_close() - echo the peer's CLOSE that @ctl holds (@ctl->closed; its status
 * code) on @wsi, in its writable callback, just before the caller closes it: lws 4.1.6 has no
 * public CLOSE write. Best effort: the socket closes right after. Returns 0, or -EIO when lws
 * refused the write, -ENOMEM when no mask key could be drawn.
 */
int st_tunnel_write_close(struct st_tunnel_writer *w, struct lws *wsi, const struct st_wsctl *ctl);

/*
 * st_tunnel_liveness() - st_liveness_check(@live, @now_ms, @ping_ms, @dead_ms) acted on for the
 * tunnel @wsi: PING asks @ctl for a PING (the writer sends it) and @wsi for a writable
 * callback; DEAD closes @wsi (lws_set_timeout ... LWS_TO_KILL_ASYNC). Returns the verdict,
 * for the caller to log a dead tunnel (the quiet time is @now_ms - @live->last_rx_ms) or keep
 * a reason. Loop thread, @wsi not NULL.
 */
enum st_liveness_verdict st_tunnel_liveness(struct st_liveness *live, struct st_wsctl *ctl,
                                            struct lws *wsi, uint64_t now_ms, uint64_t ping_ms,
                                            uint64_t dead_ms);

/*
 * st_lws_write_corked() - one lws_write(@wsi, @buf, @len, @wp) (@wp: an enum
 * lws_write_protocol; @buf has LWS_PRE bytes of headroom) sent with as few system calls as
 * possible. On a TLS connection lws owns, the records OpenSSL cuts more than one record's worth
 * into are collected and sent with one send() (a write BIO of ours under the connection's SSL,
 * put in place at its first bulk write): one system call per batch instead of one per 16 KiB
 * record plus two setsockopt. What the socket does not take is kept (at most one batch) and
 * sent before any later byte of the connection: call st_lws_write_pending() first thing in the
 * connection's writable callback. Elsewhere (a raw socket, or no memory for the BIO) the socket
 * is corked (TCP_CORK) around the write. For every bulk TLS write on the loop (the tunnel's
 * batches, a stream's bytes toward its apiserver or backend). Returns 0, or -EIO when lws
 * refused the write (the connection is going).
 */
int st_lws_write_corked(struct lws *wsi, uint8_t *buf, size_t len, int wp);

/*
 * st_lws_write_pending() - sends what the last st_lws_write_corked() on @wsi left unsent.
 * Returns true when some is still left, or lws still holds the tail of a short write of its
 * own (any connection, TLS or not): the caller writes nothing now (and does not close) and
 * returns from its writable callback (another is asked for). False when nothing is left.
 * Loop thread, in @wsi's writable callback.
 */
bool st_lws_write_pending(struct lws *wsi);

#endif
