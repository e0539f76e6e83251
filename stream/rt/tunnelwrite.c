/* The tunnel's batched, self-framed writer (stream/tunnelwrite.h). */
#include <stream/tunnelwrite.h>

#include <errno.h>
#include <libwebsockets.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <openssl/bio.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <stream/limits.h>
#include <stream/session.h>
#include <stream/wsctl.h>
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
	static const uint8_t zero[4];
	if (w->zero_keys)
		return zero;
	if (w->keys_left < 4) {
		if (RAND_bytes(w->keys, (int)sizeof w->keys) != 1)
			return NULL;
		w->keys_left = sizeof w->keys;
	}
	w->keys_left -= 4;
	return w->keys + w->keys_left;
}

/*
 * One write() per batch. OpenSSL hands each TLS record it makes to its write BIO by itself: a
 * batch of eight 16 KiB records was eight write()s (and two setsockopt to cork them into a few
 * segments). A BIO of ours replaces the socket BIO as the connection's write BIO (the read BIO
 * stays lws's): while a batch is written (gather) it collects the records in the loop thread's
 * scratch, then sends them with one send(); the rest of the time it writes to the socket as
 * OpenSSL's socket BIO would. What a short send() leaves is kept by the BIO (the most one batch
 * makes) and goes out first: any write through it before that reports "retry" (lws buffers the
 * plaintext as for a full socket), and st_lws_write_pending() sends it from the writable
 * callback.
 */
/* A batch of full DATA messages (up to one 64 KiB message past ST_TUNNEL_BATCH_BYTES), or a
 * write of ST_CORKED_WRITE_BYTES, and its records' overhead; a longer one (a message over
 * 64 KiB: rare) is kept on the heap instead. One per loop thread (scratch()). */
#define GATHER_BYTES (ST_CORKED_WRITE_BYTES + 96u * 1024u)
_Static_assert(ST_TUNNEL_BATCH_BYTES <= ST_CORKED_WRITE_BYTES, "a batch fits the scratch");

struct wbatch {
	int fd;
	bool gather;   /* collecting a batch: writes append to @g */
	uint8_t *g;    /* the thread's scratch while gathering */
	size_t g_len;  /* bytes gathered */
	uint8_t *left; /* ciphertext a short send() left, sent before anything else */
	size_t left_len, left_off;
};

static BIO_METHOD *wbatch_method;
static int wbatch_type; /* its BIO type (OpenSSL 3.0 has no getter) */
static pthread_once_t wbatch_once = PTHREAD_ONCE_INIT;
static pthread_key_t scratch_key;

/* Sends what is left; true when nothing is (or it cannot go: the socket failed). */
static bool wbatch_drain(struct wbatch *b)
{
	while (b->left_off < b->left_len) {
		ssize_t n = send(b->fd, b->left + b->left_off, b->left_len - b->left_off,
		                 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return false;
		if (n < 0)
			break; /* the connection failed: lws finds out on its next read or write */
		b->left_off += (size_t)n;
	}
	free(b->left);
	b->left = NULL;
	b->left_len = b->left_off = 0;
	return true;
}

/* Keeps @p (what a send() did not take) for later. */
static int wbatch_keep(struct wbatch *b, const uint8_t *p, size_t n)
{
	uint8_t *k = realloc(b->left, b->left_len + n);
	if (k == NULL)
		return -1;
	memcpy(k + b->left_len, p, n);
	b->left = k;
	b->left_len += n;
	return 0;
}

static int wbatch_write(BIO *bio, const char *in, int inl)
{
	struct wbatch *b = BIO_get_data(bio);
	BIO_clear_retry_flags(bio);
	if (inl <= 0)
		return 0;
	size_t n = (size_t)inl;
	if (b->gather) {
		if (b->left_len == 0 && b->g_len + n <= GATHER_BYTES) {
			memcpy(b->g + b->g_len, in, n);
			b->g_len += n;
			return inl;
		}
		/* Over the scratch (a write larger than a batch): what was gathered, then this,
		 * wait in @left; the end of the batch sends them. */
		if (b->g_len && wbatch_keep(b, b->g, b->g_len) < 0)
			return -1;
		b->g_len = 0;
		return wbatch_keep(b, (const uint8_t *)in, n) < 0 ? -1 : inl;
	}
	if (!wbatch_drain(b)) {
		BIO_set_retry_write(bio);
		return -1;
	}
	for (;;) {
		ssize_t w = send(b->fd, in, n, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w >= 0)
			return (int)w;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			BIO_set_retry_write(bio);
		return -1;
	}
}

static long wbatch_ctrl(BIO *bio, int cmd, long num, void *ptr)
{
	(void)num, (void)ptr;
	struct wbatch *b = BIO_get_data(bio);
	switch (cmd) {
	case BIO_CTRL_FLUSH:
		return 1; /* written as it comes; what is left goes out from the writable callback */
	case BIO_CTRL_WPENDING:
	case BIO_CTRL_PENDING:
		return b ? (long)(b->left_len - b->left_off) : 0;
	default:
		return 0;
	}
}

static int wbatch_destroy(BIO *bio)
{
	struct wbatch *b = BIO_get_data(bio);
	if (b) {
		free(b->left);
		free(b);
	}
	BIO_set_data(bio, NULL);
	return 1;
}

static void wbatch_init_once(void)
{
	if (pthread_key_create(&scratch_key, free) != 0)
		return;
	int type = BIO_get_new_index() | BIO_TYPE_SOURCE_SINK;
	BIO_METHOD *m = BIO_meth_new(type, "st-wbatch");
	if (m == NULL)
		return;
	if (BIO_meth_set_write(m, wbatch_write) != 1 || BIO_meth_set_ctrl(m, wbatch_ctrl) != 1 ||
	    BIO_meth_set_destroy(m, wbatch_destroy) != 1) {
		BIO_meth_free(m);
		return;
	}
	wbatch_type = type;
	wbatch_method = m;
}

/* The batching BIO of @ssl's connection, put in place at its first bulk write; NULL when it
 * cannot be (then the caller corks instead). */
static struct wbatch *wbatch_of(SSL *ssl, int fd)
{
	pthread_once(&wbatch_once, wbatch_init_once);
	if (wbatch_method == NULL || fd < 0 || !SSL_is_init_finished(ssl))
		return NULL;
	BIO *w = SSL_get_wbio(ssl);
	if (w && BIO_method_type(w) == wbatch_type)
		return BIO_get_data(w);
	if (w == NULL || BIO_ctrl_wpending(w) > 0)
		return NULL;
	struct wbatch *b = calloc(1, sizeof *b);
	BIO *bio = b ? BIO_new(wbatch_method) : NULL;
	if (bio == NULL) {
		free(b);
		return NULL;
	}
	b->fd = fd;
	BIO_set_data(bio, b);
	BIO_set_init(bio, 1);
	SSL_set0_wbio(ssl, bio); /* the SSL owns it; the socket BIO stays its read BIO */
	return b;
}

/* The loop thread's gather scratch (freed when the thread ends). */
static uint8_t *scratch(void)
{
	uint8_t *g = pthread_getspecific(scratch_key);
	if (g == NULL && (g = malloc(GATHER_BYTES)) != NULL &&
	    pthread_setspecific(scratch_key, g) != 0) {
		free(g);
		g = NULL;
	}
	return g;
}

bool st_lws_write_pending(struct lws *wsi)
{
	/* What lws kept of a short write goes first too: lws asks for POLLOUT itself, flushes it
	 * before any writable callback, and asks again once it is out. */
	if (lws_partial_buffered(wsi))
		return true;
	pthread_once(&wbatch_once, wbatch_init_once);
	SSL *ssl = lws_get_ssl(wsi);
	BIO *w = ssl ? SSL_get_wbio(ssl) : NULL;
	if (w == NULL || wbatch_method == NULL || BIO_method_type(w) != wbatch_type)
		return false;
	struct wbatch *b = BIO_get_data(w);
	if (b == NULL || wbatch_drain(b))
		return false;
	lws_callback_on_writable(wsi);
	return true;
}

static int write_corked(struct lws *wsi, uint8_t *buf, size_t len, int wp)
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

int st_lws_write_corked(struct lws *wsi, uint8_t *buf, size_t len, int wp)
{
	SSL *ssl = len > ST_TLS_RECORD_BYTES ? lws_get_ssl(wsi) : NULL;
	struct wbatch *b = ssl ? wbatch_of(ssl, lws_get_socket_fd(wsi)) : NULL;
	uint8_t *g = b ? scratch() : NULL;
	if (g == NULL || !wbatch_drain(b))
		return write_corked(wsi, buf, len,
		                    wp); /* a raw socket, or still sending the last */
	b->gather = true;
	b->g = g;
	b->g_len = 0;
	int r = lws_write(wsi, buf, len, (enum lws_write_protocol)wp);
	b->gather = false;
	size_t done = 0;
	while (done < b->g_len) {
		ssize_t n = send(b->fd, g + done, b->g_len - done, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		done += (size_t)n;
	}
	/* What the socket did not take goes before anything written after it (in @left, after
	 * what a write larger than the scratch put there: none then was gathered). */
	if (done < b->g_len && wbatch_keep(b, g + done, b->g_len - done) < 0)
		r = -1;
	b->g = NULL;
	b->g_len = 0;
	if (r >= 0 && !wbatch_drain(b))
		lws_callback_on_writable(wsi);
	return r < 0 ? -EIO : 0;
}

/* One control frame of @len (<= 125) bytes framed at @out, masked on a client. Returns its
 * length, or 0 when no mask key could be drawn. */
static size_t control_frame(struct st_tunnel_writer *w, uint8_t *out, enum st_ws_opcode op,
                            const uint8_t *payload, size_t len)
{
	const uint8_t *key = NULL;
	if (w->mask && (key = next_key(w)) == NULL)
		return 0;
	size_t hl = st_ws_header_encode(out, op, len, key);
	if (len > 0)
		memcpy(out + hl, payload, len);
	if (key)
		st_ws_mask(out + hl, len, key);
	return hl + len;
}

int st_tunnel_write_close(struct st_tunnel_writer *w, struct lws *wsi, const struct st_wsctl *ctl)
{
	uint8_t *f = w->buf + LWS_PRE;
	size_t n = control_frame(w, f, ST_WS_CLOSE, ctl->close, ctl->close_len);
	if (n == 0)
		return -ENOMEM;
	return lws_write(wsi, f, n, LWS_WRITE_HTTP) < 0 ? -EIO : 0;
}

enum st_liveness_verdict st_tunnel_liveness(struct st_liveness *live, struct st_wsctl *ctl,
                                            struct lws *wsi, uint64_t now_ms, uint64_t ping_ms,
                                            uint64_t dead_ms)
{
	enum st_liveness_verdict v = st_liveness_check(live, now_ms, ping_ms, dead_ms);
	switch (v) {
	case ST_LIVENESS_PING:
		ctl->want_ping = true;
		lws_callback_on_writable(wsi);
		break;
	case ST_LIVENESS_DEAD:
		lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
		break;
	case ST_LIVENESS_OK:
		break;
	}
	return v;
}

ssize_t st_tunnel_write(struct st_tunnel_writer *w, struct lws *wsi, struct st_session *sess,
                        struct st_wsctl *ctl, uint64_t now_ms)
{
	if (st_lws_write_pending(wsi))
		return 0; /* the last batch is still going out: called again when writable */
	uint8_t *base = w->buf + LWS_PRE;
	size_t room = st_ws_header_len(126, w->mask);
	size_t off = 0, payload_total = 0, frames = 0;
	/* The control frames first (at most two of 131 bytes): the peer may be waiting for the
	 * PONG, and they are no message (between two messages, RFC 6455 §5.4). */
	enum st_ws_opcode op;
	const uint8_t *cp;
	size_t clen;
	while (ctl && st_wsctl_take(ctl, &op, &cp, &clen)) {
		size_t n = control_frame(w, base + off, op, cp, clen);
		if (n == 0)
			return -ENOMEM;
		off += n;
		frames++;
	}
	while (off < ST_TUNNEL_BATCH_BYTES) {
		uint8_t *payload = base + off + room;
		bool binary;
		/* Masked as the session copies it out (one pass over the bytes, not two). */
		const uint8_t *key = w->mask ? next_key(w) : NULL;
		if (w->mask && key == NULL)
			return -ENOMEM;
		ssize_t n = key ? st_session_pack_masked(sess, payload, ST_MAX_MESSAGE_BYTES,
		                                         &binary, key)
		                : st_session_pack(sess, payload, ST_MAX_MESSAGE_BYTES, &binary);
		if (n < 0)
			return n;
		if (n == 0) {
			if (key && !w->zero_keys)
				w->keys_left += 4; /* not used: the next message takes it */
			break;
		}
		size_t len = (size_t)n, hl = st_ws_header_len(len, w->mask);
		/* Over 64 KiB: every full DATA message at the default 64 KiB payload (its header
		 * takes it past 65,535). Moving it within the batch measured as nothing: DATA of
		 * 65,524 bytes, which never moves, gave the same CPU per GiB (1.13 s, 2026-11-25). */
		if (hl > room) {
			memmove(base + off + hl, payload, len);
			payload = base + off + hl;
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
	if (ctl)
		st_wsctl_sent(ctl, now_ms);
	w->frames_out += frames;
	w->writes_out++;
	return (ssize_t)payload_total;
}
