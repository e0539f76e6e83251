/* The tunnel's batched, self-framed writer (stream/tunnelwrite.h). */
#include <stream/tunnelwrite.h>

#include <errno.h>
#include <libwebsockets.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <openssl/rand.h>
#include <stdlib.h>
#include <string.h>

#include <stream/limits.h>
#include <stream/session.h>
#include <stream/wsframe.h>

/* A message is packed behind room for the header a 126..65535-byte payload has (every full
 * DATA message): its frame then needs no move. A smaller message (control, a short DATA) is
 * moved down over the few bytes of its shorter header; a larger one (over 64 KiB) is moved up
 * to make room for the longer header, into the slack at the end of the buffer. */
#define BUF_BYTES                                                                                  \
	(LWS_PRE + ST_TUNNEL_BATCH_BYTES + 2 * ST_WS_MAX_HEADER_BYTES + ST_MAX_MESSAGE_BYTES)

_Static_assert(ST_TUNNEL_WRITE_MAX_BYTES ==
                       ST_TUNNEL_BATCH_BYTES + ST_WS_MAX_HEADER_BYTES + ST_MAX_MESSAGE_BYTES,
               "a batch: up to one message and its header past ST_TUNNEL_BATCH_BYTES - 1");

int st_tunnel_writer_init(struct st_tunnel_writer *w, bool mask)
{
	memset(w, 0, sizeof *w);
	w->buf = malloc(BUF_BYTES);
	if (w->buf == NULL)
		return -ENOMEM;
	w->mask = mask;
	return 0;
}

void st_tunnel_writer_free(struct st_tunnel_writer *w)
{
	free(w->buf);
	w->buf = NULL;
}

static const uint8_t *next_key(struct st_tunnel_writer *w)
{
	if (w->keys_left < 4) {
		if (RAND_bytes(w->keys, (int)sizeof w->keys) != 1)
			return NULL;
		w->keys_left = sizeof w->keys;
	}
	w->keys_left -= 4;
	return w->keys + w->keys_left;
}

int st_lws_write_corked(struct lws *wsi, uint8_t *buf, size_t len, int wp)
{
	/* Corked, the kernel appends each record's write to the segment being built and sends
	 * 64 KiB segments when the cork comes off: measured on the edge's tunnel socket, 31 TCP
	 * segments per MiB instead of 63 (one per record), and the receiver wakes and ACKs per
	 * segment. Two setsockopt calls per batch; none for a write of one record or less. */
	int fd = len > ST_TLS_RECORD_BYTES ? lws_get_socket_fd(wsi) : -1, on = 1, off = 0;
	if (fd >= 0)
		setsockopt(fd, IPPROTO_TCP, TCP_CORK, &on, sizeof on);
	int r = lws_write(wsi, buf, len, (enum lws_write_protocol)wp);
	if (fd >= 0)
		setsockopt(fd, IPPROTO_TCP, TCP_CORK, &off, sizeof off); /* pushes what is queued */
	return r < 0 ? -EIO : 0;
}

ssize_t st_tunnel_write(struct st_tunnel_writer *w, struct lws *wsi, struct st_session *sess)
{
	uint8_t *base = w->buf + LWS_PRE;
	size_t room = st_ws_header_len(126, w->mask);
	size_t off = 0, payload_total = 0, frames = 0;
	while (off < ST_TUNNEL_BATCH_BYTES) {
		uint8_t *payload = base + off + room;
		bool binary;
		ssize_t n = st_session_pack(sess, payload, ST_MAX_MESSAGE_BYTES, &binary);
		if (n < 0)
			return n;
		if (n == 0)
			break;
		size_t len = (size_t)n, hl = st_ws_header_len(len, w->mask);
		if (hl > room) { /* over 64 KiB: rare */
			memmove(base + off + hl, payload, len);
			payload = base + off + hl;
		}
		const uint8_t *key = NULL;
		if (w->mask) {
			key = next_key(w);
			if (key == NULL)
				return -ENOMEM;
			st_ws_mask(payload, len, key);
		}
		uint8_t *frame = payload - hl;
		st_ws_header_encode(frame, binary ? ST_WS_BINARY : ST_WS_TEXT, len, key);
		if (frame != base + off) /* a short message: a few bytes to close the gap */
			memmove(base + off, frame, hl + len);
		off += hl + len;
		payload_total += len;
		frames++;
	}
	if (off == 0)
		return 0;
	/* LWS_WRITE_HTTP: lws's websocket role sends it as it is (no framing, no masking). */
	if (st_lws_write_corked(wsi, base, off, LWS_WRITE_HTTP) < 0)
		return -EIO;
	w->frames_out += frames;
	w->writes_out++;
	return (ssize_t)payload_total;
}
