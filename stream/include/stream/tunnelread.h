/*
 * stream/tunnelread.h — the tunnel's reader: a websocket's frames read by us, in big reads,
 * once libwebsockets has set the connection up (the counterpart of stream/tunnelwrite.h).
 *
 * Why: lws 4.1.6 reads a websocket in pieces of its protocol's rx_buffer_size (2 KiB on the
 * cloud's tunnels, kept small because lws holds that much per idle tunnel): eight SSL_read
 * calls, eight callbacks and eight ERR_clear_error per 16 KiB record, two read() system calls
 * per record (no read-ahead: lws looks only at SSL_pending), and st_reasm copies each message
 * together again. The reader takes the socket's reading over: lws's own reading is paused for
 * good (lws_rx_flow_control), an ev_io of ours on the same socket calls SSL_read with OpenSSL's
 * read-ahead on (one read() brings several records), reads each frame exactly (its header,
 * then its payload, so no bytes of the next frame need moving), unmasks 32 bytes per step
 * and hands each whole message to the caller from its buffer. lws still does the handshake
 * and the close; every write is the tunnel writer's (stream/tunnelwrite.h; the PONGs owed,
 * stream/wsctl.h, included).
 *
 * Only on the epoll loop (stream/loop.h), and taken over where no frame can have reached lws yet:
 * in LWS_CALLBACK_ESTABLISHED (server) or LWS_CALLBACK_CLIENT_ESTABLISHED (client). The upgrade
 * request and the 101 each come in a TLS record of their own, before any frame, and SSL_read
 * returns one record at a time, so lws has read nothing past them. A peer that put frames in
 * the same TLS record as its upgrade request or 101 would be cut (its frame split between lws
 * and us); neither lws, KubeEdge's Go peers nor ours do.
 *
 * Memory: nothing but this struct while idle; a buffer the size of the frame being read
 * (up to ST_MAX_MESSAGE_BYTES) while a frame is partly read, and st_reasm's for a fragmented
 * message. Thread-safety: none; the loop thread owns the reader.
 */
#ifndef STREAM_TUNNELREAD_H
#define STREAM_TUNNELREAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <stream/wsframe.h>

struct lws;
struct st_loop;
struct st_tunnel_reader;

/*
 * What the reader hands over. @user is the one given at creation. Callbacks must not free the
 * reader (st_tunnel_reader_free only from the connection's close callback); they may pause it.
 */
struct st_tunnel_reader_cbs {
	/* a whole TEXT or BINARY message (gathered when it came fragmented); @msg is valid for the
	 * call. 0 to go on, < 0 to stop reading (the caller closes the connection). */
	int (*on_message)(void *user, const uint8_t *msg, size_t len);
	/* a control frame: @opcode is ST_WS_PING, ST_WS_PONG or ST_WS_CLOSE (stream/wsframe.h),
	 * @len <= 125, @payload valid for the call. What it calls for (the PONG, a sign of life,
	 * the CLOSE's echo) is st_wsctl_recv()'s (stream/wsctl.h). A CLOSE comes just before
	 * on_end: the caller may echo it (RFC 6455 §5.5.1) before it closes. */
	void (*on_control)(void *user, enum st_ws_opcode opcode, const uint8_t *payload,
	                   size_t len);
	/* the reading ended and will not start again: the peer's CLOSE frame, close_notify or
	 * EOF, a TLS error, a malformed or oversized frame. @why is static text: "the peer's close
	 * frame" and "close_notify" for a peer that closed, "the connection closed" for one gone
	 * without closing (an EOF without close_notify, a reset), anything else for an error. Called once; the caller closes the
	 * connection (lws_set_timeout ... LWS_TO_KILL_ASYNC). */
	void (*on_end)(void *user, const char *why);
};

/*
 * st_tunnel_reader_new() - take the reading of @wsi (an established websocket over TLS) over.
 * @server: we are the websocket server, so every frame must be masked. Returns 0 with *@out,
 * -ENOTSUP when @l is lws's poll loop or @wsi has no TLS (then lws keeps reading; nothing
 * changed), or -ENOMEM.
 */
int st_tunnel_reader_new(struct st_tunnel_reader **out, struct st_loop *l, struct lws *wsi,
                         bool server, const struct st_tunnel_reader_cbs *cbs, void *user);

/* st_tunnel_reader_pause() - stop (@pause) or restart reading: the tunnel's back-pressure.
 * The frame being handed over when it is paused is the last until the restart. */
void st_tunnel_reader_pause(struct st_tunnel_reader *r, bool pause);

/* st_tunnel_reader_free() - stop and free. NULL is a no-op. */
void st_tunnel_reader_free(struct st_tunnel_reader *r);

#endif
