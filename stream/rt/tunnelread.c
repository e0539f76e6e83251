/* The tunnel's reader: websocket frames read by us from lws's TLS connection
 * (stream/tunnelread.h). Loop thread only. */
#include <stream/tunnelread.h>

#include <errno.h>
#include <ev.h>
#include <libwebsockets.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdlib.h>
#include <string.h>

#include <stream/limits.h>
#include <stream/loop.h>
#include <stream/reasm.h>
#include <stream/wsframe.h>

/* Plaintext handed over per wake-up before other sockets get their turn (libuv caps its reads
 * per wake-up the same way); what OpenSSL read ahead past it is taken after them. */
#define READ_BUDGET_BYTES (1024u * 1024u)
/* OpenSSL's read-ahead buffer: one read() for up to four full records. */
#define READ_AHEAD_BYTES (4u * (16384u + 256u))
/* Below this, a frame with nothing read ahead past it ends the round (run()). */
#define SMALL_FRAME_BYTES 1024u

struct st_tunnel_reader {
	struct ev_io io; /* EV_READ on the socket, beside lws's own watcher */
	/* Both active while OpenSSL holds records read ahead past a spent budget: the idle keeps
	 * the next poll from blocking, the check reads on after it (an idle alone would wait for
	 * a round without other events). */
	struct ev_idle more;
	struct ev_check after;
	struct ev_loop *ev;
	SSL *ssl;
	bool server;  /* frames must be masked */
	bool paused;  /* st_tunnel_reader_pause: neither watcher runs */
	bool ended;   /* on_end was called: nothing runs again */
	bool in_frag; /* a fragmented message is being gathered in @frag */
	const struct st_tunnel_reader_cbs *cbs;
	void *user;
	uint8_t *buf;     /* the frame being read: header, then payload; @small or the heap
	                   * (NULL between frames when the socket is drained) */
	size_t have, cap; /* bytes of the frame read so far; @buf's size */
	struct st_reasm frag;
	/* Headers and control frames (a PING and its header: 16 bytes) without a malloc: an idle
	 * tunnel's PING every few seconds, times 19,000 tunnels, stays off the heap. */
	uint8_t small[ST_WS_MAX_HEADER_BYTES + 125];
};

static void buf_free(struct st_tunnel_reader *r)
{
	if (r->buf != r->small)
		free(r->buf);
	r->buf = NULL;
	r->cap = 0;
}

static void end(struct st_tunnel_reader *r, const char *why)
{
	if (r->ended)
		return;
	r->ended = true;
	ev_io_stop(r->ev, &r->io);
	ev_idle_stop(r->ev, &r->more);
	ev_check_stop(r->ev, &r->after);
	r->cbs->on_end(r->user, why);
}

/* Records OpenSSL read ahead raise no EV_READ: read them after this round's events. */
static void read_on_soon(struct st_tunnel_reader *r)
{
	if (SSL_has_pending(r->ssl)) {
		ev_idle_start(r->ev, &r->more);
		ev_check_start(r->ev, &r->after);
	}
}

static int grow(struct st_tunnel_reader *r, size_t need)
{
	if (need <= r->cap)
		return 0;
	if (r->buf == NULL && need <= sizeof r->small) {
		r->buf = r->small;
		r->cap = sizeof r->small;
		return 0;
	}
	uint8_t *b = malloc(need);
	if (b == NULL)
		return -ENOMEM;
	if (r->have > 0)
		memcpy(b, r->buf, r->have);
	buf_free(r);
	r->buf = b;
	r->cap = need;
	return 0;
}

/* One whole frame in r->buf. Returns 0 to go on, < 0 when the reading stopped. */
static int frame(struct st_tunnel_reader *r, const struct st_ws_header *h)
{
	uint8_t *p = r->buf + h->header_bytes;
	size_t len = (size_t)h->len;
	if (r->server && !h->masked) {
		end(r, "an unmasked frame from the client");
		return -1;
	}
	if (h->masked)
		st_ws_mask(p, len, h->key);
	switch (h->opcode) {
	case ST_WS_TEXT:
	case ST_WS_BINARY:
	case ST_WS_CONTINUATION: {
		bool cont = h->opcode == ST_WS_CONTINUATION;
		if (cont != r->in_frag) {
			end(r, cont ? "a continuation frame outside a message"
			            : "a new message inside a fragmented one");
			return -1;
		}
		const uint8_t *msg = p; /* the usual case: a message in one frame, no copy */
		size_t msg_len = len;
		int rc = 1;
		if (cont || !h->fin) {
			rc = st_reasm_feed(&r->frag, p, len, !cont, h->fin, &msg, &msg_len);
			r->in_frag = !h->fin;
		}
		if (rc < 0) {
			end(r, rc == -EMSGSIZE ? "a message over 1 MiB" : "out of memory");
			return -1;
		}
		if (rc == 1 && r->cbs->on_message(r->user, msg, msg_len) < 0) {
			end(r, "refused");
			return -1;
		}
		return 0;
	}
	case ST_WS_PING:
	case ST_WS_PONG:
		r->cbs->on_control(r->user, (enum st_ws_opcode)h->opcode, p, len);
		return 0;
	case ST_WS_CLOSE:
		r->cbs->on_control(r->user, (enum st_ws_opcode)h->opcode, p, len);
		end(r, "the peer's close frame");
		return -1;
	default:
		end(r, "a frame of an unknown opcode");
		return -1;
	}
}

/* OpenSSL 3 reports a socket closed without close_notify as an SSL error ("unexpected eof
 * while reading"). That is a peer gone (killed, rebooted, its process ended: what a fleet does
 * every day), not a TLS error: the caller tells the two apart by @why (on_end). */
static bool unexpected_eof(void)
{
#ifdef SSL_R_UNEXPECTED_EOF_WHILE_READING
	return ERR_GET_REASON(ERR_peek_error()) == SSL_R_UNEXPECTED_EOF_WHILE_READING;
#else
	return false;
#endif
}

/* SSL_read into the frame until it holds @need bytes. 1: it does; 0: the socket has no more
 * now; < 0: the reading ended. */
static int fill(struct st_tunnel_reader *r, size_t need)
{
	while (r->have < need) {
		/* SSL_get_error() reads the thread's error queue: whatever another connection's
		 * failure (a dial, a handshake) left there would turn our WANT_READ into
		 * SSL_ERROR_SSL and drop a healthy tunnel. Empty it before each read, as lws does
		 * (looked at first: clearing walks all of its slots, 1 % of an idle loop's CPU). */
		if (ERR_peek_error() != 0)
			ERR_clear_error();
		int n = SSL_read(r->ssl, r->buf + r->have, (int)(need - r->have));
		if (n > 0) {
			r->have += (size_t)n;
			continue;
		}
		int e = SSL_get_error(r->ssl, n);
		bool eof = e == SSL_ERROR_SYSCALL || (e == SSL_ERROR_SSL && unexpected_eof());
		if (ERR_peek_error() != 0)
			ERR_clear_error(); /* leave nothing for other connections' verdicts either */
		if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
			return 0;
		end(r, e == SSL_ERROR_ZERO_RETURN ? "close_notify"
		       : eof                      ? "the connection closed"
		                                  : "a TLS error");
		return -1;
	}
	return 1;
}

static void run(struct st_tunnel_reader *r)
{
	size_t budget = READ_BUDGET_BYTES;
	while (!r->paused && !r->ended) {
		if (budget == 0) { /* the rest after the other sockets, without waiting for epoll */
			read_on_soon(r);
			return;
		}
		if (grow(r, ST_WS_MAX_HEADER_BYTES) < 0) {
			end(r, "out of memory");
			return;
		}
		int f = fill(r, 2);
		if (f > 0)
			f = fill(r, st_ws_header_need(r->buf));
		if (f < 0)
			return;
		struct st_ws_header h;
		ssize_t hl = f > 0 ? st_ws_header_decode(r->buf, r->have, &h) : 0;
		if (hl < 0 || (hl > 0 && h.len > ST_MAX_MESSAGE_BYTES)) {
			end(r, hl < 0 ? "a malformed frame header" : "a frame over 1 MiB");
			return;
		}
		if (hl > 0 && grow(r, (size_t)hl + (size_t)h.len) < 0) {
			end(r, "out of memory");
			return;
		}
		if (hl > 0)
			f = fill(r, (size_t)hl + (size_t)h.len);
		if (f < 0)
			return;
		if (f == 0) { /* drained: wait for the socket; between frames hold no buffer */
			if (r->have == 0)
				buf_free(r);
			return;
		}
		r->have = 0; /* consumed, whatever the callbacks do */
		size_t used = (size_t)hl + (size_t)h.len;
		budget = used >= budget ? 0 : budget - used;
		if (frame(r, &h) < 0)
			return;
		/* A small frame with nothing read ahead past it (OpenSSL's last read() took less
		 * than its buffer, so the socket was drained then) is most likely all a quiet tunnel
		 * sends: another SSL_read would be a read() answering EAGAIN (one per PING on an
		 * idle tunnel, a fifth of the idle loop's system calls). The poll is level-triggered
		 * and tells us of more. After a bulk frame the peer's next record is likely on its
		 * way, and reading on saves a loop round. */
		if (used < SMALL_FRAME_BYTES && !r->paused && !r->ended &&
		    !SSL_has_pending(r->ssl)) {
			buf_free(r);
			return;
		}
	}
}

static void on_io(struct ev_loop *ev, struct ev_io *w, int revents)
{
	(void)ev;
	(void)revents;
	run((struct st_tunnel_reader *)w->data);
}

static void on_more(struct ev_loop *ev, struct ev_idle *w, int revents)
{
	(void)ev;
	(void)w;
	(void)revents; /* the check does the work */
}

static void on_after(struct ev_loop *ev, struct ev_check *w, int revents)
{
	(void)revents;
	struct st_tunnel_reader *r = w->data;
	ev_check_stop(ev, w);
	ev_idle_stop(ev, &r->more);
	run(r);
}

int st_tunnel_reader_new(struct st_tunnel_reader **out, struct st_loop *l, struct lws *wsi,
                         bool server, const struct st_tunnel_reader_cbs *cbs, void *user)
{
	struct ev_loop *ev = st_loop_ev(l);
	SSL *ssl = lws_get_ssl(wsi);
	int fd = lws_get_socket_fd(wsi);
	if (ev == NULL || ssl == NULL || fd < 0)
		return -ENOTSUP;
	struct st_tunnel_reader *r = calloc(1, sizeof *r);
	if (r == NULL)
		return -ENOMEM;
	r->ev = ev;
	r->ssl = ssl;
	r->server = server;
	r->cbs = cbs;
	r->user = user;
	ev_io_init(&r->io, on_io, fd, EV_READ);
	r->io.data = r;
	ev_idle_init(&r->more, on_more);
	r->more.data = r;
	ev_check_init(&r->after, on_after);
	r->after.data = r;
	SSL_set_read_ahead(ssl, 1);
	SSL_set_default_read_buffer_len(ssl, READ_AHEAD_BYTES);
	lws_rx_flow_control(wsi, 0); /* for good: lws reads nothing more */
	ev_io_start(ev, &r->io);
	read_on_soon(r);
	*out = r;
	return 0;
}

void st_tunnel_reader_pause(struct st_tunnel_reader *r, bool pause)
{
	if (r->ended || r->paused == pause)
		return;
	r->paused = pause;
	if (pause) {
		ev_io_stop(r->ev, &r->io);
		ev_idle_stop(r->ev, &r->more);
		ev_check_stop(r->ev, &r->after);
		return;
	}
	ev_io_start(r->ev, &r->io);
	read_on_soon(r);
}

void st_tunnel_reader_free(struct st_tunnel_reader *r)
{
	if (r == NULL)
		return;
	ev_io_stop(r->ev, &r->io);
	ev_idle_stop(r->ev, &r->more);
	ev_check_stop(r->ev, &r->after);
	st_reasm_cleanup(&r->frag);
	buf_free(r);
	free(r);
}
