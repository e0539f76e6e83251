/*
 * test/bench/follow_burst.c — N `kubectl logs -f`-like requests opened in one burst, as an
 * apiserver would open them on cloudstream's stream port: one TLS connection each (mTLS with
 * the apiserver's kubelet client certificate), GET <target>, then the answer's head and its
 * first bytes up to --expect; the connection then stays open and is read (a quiet follower,
 * not a stalled one) until SIGTERM/SIGINT or --hold seconds.
 *
 * One epoll loop with OpenSSL directly (no lws, no Python), so the client is not what bounds
 * the burst: every connect() is started at once (or --max-connecting at a time).
 *
 *   follow_burst --port P --ca stream-ca.crt --cert client.crt --key client.key
 *                [--host 127.0.0.1] [--n 10000] [--target /containerLogs/...?follow=true]
 *                [--host-header edge-1:10350] [--expect "line 1"] [--timeout 120]
 *                [--max-connecting 0] [--hold 0]
 *
 * Prints, once every request is settled (answered with --expect, failed, or timed out):
 *   burst n=N answered=A status504=B other=C failed=D seconds=T
 * ("answered": a 200 whose body reached --expect), then "holding" while the connections stay
 * open, and exits 0 after SIGTERM (or --hold). Needs RLIMIT_NOFILE above N. A bench tool, not
 * a test.
 *
 * --h2-streams-per-conn K (K > 0): as kube-apiserver's Go transport with HTTP/2 does, the
 * requests go as HTTP/2 streams, K per TLS connection (ALPN h2; an nghttp2 client session per
 * connection, ceil(N/K) connections). Each stream is counted as a request above.
 * --h2-eager 1: the K requests all go before the server's SETTINGS are read (nghttp2 otherwise
 * assumes 100 concurrent streams until then, and never more than the server's limit), as a
 * client that does not wait for them: past the server's limit the extra streams are refused
 * (REFUSED_STREAM, counted as failed).
 *
 * --unix PATH --connect HOST:PORT: as kube-apiserver with an EgressSelector `HTTPConnect` egress
 * over a unix socket (cloudstream's front door) does, each request first connects to PATH,
 * sends `CONNECT HOST:PORT` and reads the 200, then speaks TLS to the kubelet inside it (--ca
 * is then the kubelet's CA, --cert/--key the apiserver's kubelet client certificate). The
 * unix connect() blocks while the listener's backlog is full: bound it with --max-connecting.
 *
 * --drain: a download instead of a follow: the request says `Connection: close`, each answer
 * is read to its end, and once every connection closed the tool prints
 *   drained bytes=B seconds=S
 * (S from the first connect to the last close) and exits: a client that reads at TLS speed
 * (SSL_read into one 16 KiB buffer, nothing kept) through either entry.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "benchutil.h"

enum cst { C_IDLE, C_TCP, C_PROXY, C_TLS, C_REQ, C_HEAD, C_BODY, C_OPEN, C_H2, C_DONE };

/* An HTTP/2 stream (--h2-streams-per-conn). */
struct h2s {
	int status;
	bool settled;
	size_t got;
	char buf[64]; /* the body's first bytes, until --expect */
};

struct conn {
	int fd;
	enum cst st;
	SSL *ssl;
	/* HTTP/2: the session, its streams (first, count), output nghttp2 made that SSL_write
	 * has not taken yet */
	nghttp2_session *ng;
	struct h2s *streams;
	int nstreams;
	uint8_t *pend;
	size_t pend_len;
	int status;
	size_t req_off;
	size_t got;     /* bytes in buf */
	char buf[2048]; /* the head, then the body's first bytes, until --expect */
};

static struct {
	const char *host, *ca, *cert, *key, *target, *host_header, *expect, *unix_path, *connect_to;
	int port, n, timeout_s, max_connecting, hold_s, h2_per_conn, h2_eager;
	bool drain;
} o = {.host = "127.0.0.1",
       .target = "/containerLogs/default/pod-a/ctr?follow=true&tailLines=1&interval=5",
       .host_header = "edge-1:10350",
       .expect = "line 1",
       .n = 10000,
       .timeout_s = 120};

static SSL_CTX *ctx;
static int ep;
static struct conn *conns;
static int nconns; /* N, or ceil(N/K) with HTTP/2 */
static struct h2s *h2streams;
static int connecting, started;
static unsigned answered, s504, other, failed;
static uint64_t drained_bytes; /* --drain: body bytes read */
static unsigned drained_closed;
static unsigned failed_in[C_DONE + 1]; /* failures by the state they happened in */
static char req[1024];
static size_t req_len;
static char proxy_req[512]; /* --unix: the CONNECT head */
static size_t proxy_req_len;
static void want(struct conn *c, uint32_t events)
{
	struct epoll_event ev = {.events = events, .data.ptr = c};
	epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
}

/* The request is settled (answered or not): counted once. */
static void settle(struct conn *c, enum cst next)
{
	if (c->st == C_TCP || c->st == C_PROXY || c->st == C_TLS)
		connecting--;
	if (o.h2_per_conn > 0) { /* streams are what is counted */
		if (next == C_DONE) {
			for (int i = 0; i < c->nstreams; i++)
				if (!c->streams[i].settled) {
					c->streams[i].settled = true;
					failed++;
					failed_in[c->st]++;
				}
			if (c->ng)
				nghttp2_session_del(c->ng);
			c->ng = NULL;
			if (c->ssl)
				SSL_free(c->ssl);
			c->ssl = NULL;
			close(c->fd);
			c->fd = -1;
		}
		c->st = next;
		return;
	}
	if (next == C_DONE) {
		if (c->status == 504)
			s504++;
		else if (c->status != 0)
			other++;
		else {
			failed++;
			failed_in[c->st]++;
		}
		if (c->ssl)
			SSL_free(c->ssl);
		c->ssl = NULL;
		close(c->fd);
		c->fd = -1;
	} else {
		answered++;
	}
	c->st = next;
}

static void start_unix(struct conn *c)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s", o.unix_path);
	c->fd = socket(AF_UNIX, SOCK_STREAM, 0);
	started++;
	connecting++;
	c->st = C_TCP;
	if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		fprintf(stderr, "%s: %s\n", o.unix_path, strerror(errno));
		settle(c, C_DONE);
		return;
	}
	fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
	struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = c};
	epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
}

static void start(struct conn *c)
{
	if (o.unix_path) {
		start_unix(c);
		return;
	}
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)o.port)};
	inet_pton(AF_INET, o.host, &sa.sin_addr);
	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (c->fd < 0) {
		fprintf(stderr, "socket: %s\n", strerror(errno));
		c->st = C_DONE;
		failed++;
		return;
	}
	int one = 1;
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	started++;
	connecting++;
	c->st = C_TCP;
	struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = c};
	epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
	if (connect(c->fd, (struct sockaddr *)&sa, sizeof sa) < 0 && errno != EINPROGRESS)
		settle(c, C_DONE);
}

/* ---- HTTP/2 (--h2-streams-per-conn) ------------------------------------------------------ */

static void h2_settle(struct h2s *st, int status)
{
	if (st->settled)
		return;
	st->settled = true;
	if (status == 200)
		answered++;
	else if (status == 504)
		s504++;
	else if (status != 0)
		other++;
	else {
		failed++;
		failed_in[C_H2]++;
	}
}

static int h2_on_header(nghttp2_session *ng, const nghttp2_frame *fr, const uint8_t *name,
                        size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                        void *user)
{
	(void)flags;
	(void)user;
	struct h2s *st = nghttp2_session_get_stream_user_data(ng, fr->hd.stream_id);
	if (st && namelen == 7 && memcmp(name, ":status", 7) == 0) {
		char v[8] = "";
		memcpy(v, value, valuelen < 7 ? valuelen : 7);
		st->status = (int)strtol(v, NULL, 10);
		if (st->status != 200)
			h2_settle(st, st->status);
	}
	return 0;
}

static int h2_on_data(nghttp2_session *ng, uint8_t flags, int32_t sid, const uint8_t *data,
                      size_t len, void *user)
{
	(void)flags;
	(void)user;
	struct h2s *st = nghttp2_session_get_stream_user_data(ng, sid);
	if (st == NULL || st->settled)
		return 0;
	size_t room = sizeof st->buf - 1 - st->got;
	size_t n = len < room ? len : room;
	memcpy(st->buf + st->got, data, n);
	st->got += n;
	st->buf[st->got] = '\0';
	if (strstr(st->buf, o.expect) != NULL)
		h2_settle(st, 200);
	else if (st->got == sizeof st->buf - 1)
		h2_settle(st, -1); /* --expect not within the first bytes */
	return 0;
}

static int h2_on_close(nghttp2_session *ng, int32_t sid, uint32_t err, void *user)
{
	(void)err;
	(void)user;
	struct h2s *st = nghttp2_session_get_stream_user_data(ng, sid);
	if (st && !st->settled)
		h2_settle(st, st->status == 200 ? 0 : st->status);
	return 0;
}

/* The TLS handshake is done: the session and its K requests. */
static bool h2_begin(struct conn *c)
{
	const unsigned char *alpn = NULL;
	unsigned alpn_len = 0;
	SSL_get0_alpn_selected(c->ssl, &alpn, &alpn_len);
	if (alpn_len != 2 || memcmp(alpn, "h2", 2) != 0) {
		fprintf(stderr, "the server did not choose ALPN h2\n");
		return false;
	}
	nghttp2_session_callbacks *cbs;
	nghttp2_session_callbacks_new(&cbs);
	nghttp2_session_callbacks_set_on_header_callback(cbs, h2_on_header);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, h2_on_data);
	nghttp2_session_callbacks_set_on_stream_close_callback(cbs, h2_on_close);
	nghttp2_option *opt = NULL;
	if (o.h2_eager && nghttp2_option_new(&opt) == 0) /* all K before the SETTINGS come */
		nghttp2_option_set_peer_max_concurrent_streams(opt, (uint32_t)c->nstreams);
	int rc = nghttp2_session_client_new2(&c->ng, cbs, c, opt);
	nghttp2_option_del(opt);
	nghttp2_session_callbacks_del(cbs);
	if (rc != 0)
		return false;
	nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0}};
	nghttp2_submit_settings(c->ng, NGHTTP2_FLAG_NONE, iv, 1);
	char path[1024];
	snprintf(path, sizeof path, "%s", o.target);
	const nghttp2_nv nv[] = {
	        {(uint8_t *)":method", (uint8_t *)"GET", 7, 3, NGHTTP2_NV_FLAG_NONE},
	        {(uint8_t *)":scheme", (uint8_t *)"https", 7, 5, NGHTTP2_NV_FLAG_NONE},
	        {(uint8_t *)":authority", (uint8_t *)o.host_header, 10, strlen(o.host_header),
	         NGHTTP2_NV_FLAG_NONE},
	        {(uint8_t *)":path", (uint8_t *)path, 5, strlen(path), NGHTTP2_NV_FLAG_NONE},
	};
	for (int i = 0; i < c->nstreams; i++)
		if (nghttp2_submit_request(c->ng, NULL, nv, 4, NULL, &c->streams[i]) < 0)
			return false;
	return true;
}

/* Read what came, send what nghttp2 has: false when the connection is over. */
static bool h2_io(struct conn *c)
{
	for (;;) {
		uint8_t buf[16384];
		int r = SSL_read(c->ssl, buf, sizeof buf);
		if (r <= 0) {
			int e = SSL_get_error(c->ssl, r);
			if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
				break;
			ERR_clear_error();
			return false;
		}
		if (nghttp2_session_mem_recv(c->ng, buf, (size_t)r) < 0)
			return false;
	}
	for (;;) {
		if (c->pend_len == 0) {
			const uint8_t *d;
			ssize_t n = nghttp2_session_mem_send(c->ng, &d);
			if (n < 0)
				return false;
			if (n == 0)
				break;
			free(c->pend);
			c->pend = malloc((size_t)n);
			if (c->pend == NULL)
				return false;
			memcpy(c->pend, d, (size_t)n);
			c->pend_len = (size_t)n;
		}
		int r = SSL_write(c->ssl, c->pend, (int)c->pend_len);
		if (r <= 0) {
			int e = SSL_get_error(c->ssl, r);
			if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ)
				break;
			ERR_clear_error();
			return false;
		}
		memmove(c->pend, c->pend + r, c->pend_len - (size_t)r);
		c->pend_len -= (size_t)r;
	}
	if (c->pend_len == 0) {
		free(c->pend);
		c->pend = NULL;
	}
	want(c, EPOLLIN | (c->pend_len ? EPOLLOUT : 0));
	return nghttp2_session_want_read(c->ng) || nghttp2_session_want_write(c->ng);
}

static void begin_tls(struct conn *c)
{
	c->ssl = SSL_new(ctx);
	SSL_set_fd(c->ssl, c->fd);
	SSL_set_connect_state(c->ssl);
	c->st = C_TLS;
}

/* --unix: sends the CONNECT head, then reads the answer's head (nothing follows it before our
 * ClientHello). Returns 1 once a 200 arrived, 0 to wait for the socket, -1 on failure (another
 * status counts as "other", as on the stream port). */
static int proxy_step(struct conn *c)
{
	while (c->req_off < proxy_req_len) {
		ssize_t w = write(c->fd, proxy_req + c->req_off, proxy_req_len - c->req_off);
		if (w < 0) {
			if (errno == EAGAIN) {
				want(c, EPOLLOUT);
				return 0;
			}
			return -1;
		}
		c->req_off += (size_t)w;
		if (c->req_off == proxy_req_len)
			want(c, EPOLLIN);
	}
	for (;;) {
		if (c->got >= sizeof c->buf - 1)
			return -1;
		ssize_t r = read(c->fd, c->buf + c->got, sizeof c->buf - 1 - c->got);
		if (r < 0 && errno == EAGAIN)
			return 0;
		if (r <= 0)
			return -1;
		c->got += (size_t)r;
		c->buf[c->got] = '\0';
		if (strstr(c->buf, "\r\n\r\n") == NULL)
			continue;
		int status = strncmp(c->buf, "HTTP/1.1 ", 9) == 0
		                     ? (int)strtol(c->buf + 9, NULL, 10)
		                     : -1;
		c->got = 0;
		c->req_off = 0;
		if (status != 200) {
			c->status = status;
			return -1;
		}
		return 1;
	}
}

static void step(struct conn *c)
{
	for (;;) {
		switch (c->st) {
		case C_TCP: {
			int err = 0;
			socklen_t l = sizeof err;
			getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &l);
			if (err) {
				settle(c, C_DONE);
				return;
			}
			if (o.unix_path)
				c->st = C_PROXY;
			else
				begin_tls(c);
			continue;
		}
		case C_PROXY: {
			int r = proxy_step(c);
			if (r < 0) {
				settle(c, C_DONE);
				return;
			}
			if (r == 0)
				return;
			begin_tls(c);
			continue;
		}
		case C_TLS: {
			int r = SSL_do_handshake(c->ssl);
			if (r == 1) {
				connecting--;
				c->st = C_REQ;
				if (o.h2_per_conn > 0) {
					c->st = C_H2;
					if (!h2_begin(c)) {
						settle(c, C_DONE);
						return;
					}
				}
				continue;
			}
			int e = SSL_get_error(c->ssl, r);
			if (e == SSL_ERROR_WANT_READ) {
				want(c, EPOLLIN);
				return;
			}
			if (e == SSL_ERROR_WANT_WRITE) {
				want(c, EPOLLOUT);
				return;
			}
			ERR_clear_error();
			settle(c, C_DONE);
			return;
		}
		case C_REQ: {
			int r = SSL_write(c->ssl, req + c->req_off, (int)(req_len - c->req_off));
			if (r <= 0) {
				int e = SSL_get_error(c->ssl, r);
				if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) {
					want(c, e == SSL_ERROR_WANT_WRITE ? EPOLLOUT : EPOLLIN);
					return;
				}
				ERR_clear_error();
				settle(c, C_DONE);
				return;
			}
			c->req_off += (size_t)r;
			if (c->req_off == req_len) {
				c->st = C_HEAD;
				want(c, EPOLLIN);
			}
			continue;
		}
		case C_HEAD:
		case C_BODY:
		case C_OPEN: {
			char tmp[16384];
			char *dst = c->st == C_OPEN ? tmp : c->buf + c->got;
			size_t cap = c->st == C_OPEN ? sizeof tmp : sizeof c->buf - 1 - c->got;
			if (cap == 0) { /* --expect not within the first bytes: not answered */
				settle(c, C_DONE);
				return;
			}
			int r = SSL_read(c->ssl, dst, (int)cap);
			if (r <= 0) {
				int e = SSL_get_error(c->ssl, r);
				if (e == SSL_ERROR_WANT_READ)
					return;
				if (e == SSL_ERROR_WANT_WRITE) {
					want(c, EPOLLOUT);
					return;
				}
				ERR_clear_error();
				if (c->st == C_OPEN) { /* the stream ended after its answer */
					drained_closed++;
					SSL_free(c->ssl);
					c->ssl = NULL;
					close(c->fd);
					c->fd = -1;
					c->st = C_IDLE;
				} else {
					settle(c, C_DONE);
				}
				return;
			}
			if (c->st == C_OPEN) {
				drained_bytes += (uint64_t)r;
				continue;
			}
			c->got += (size_t)r;
			c->buf[c->got] = '\0';
			if (c->st == C_HEAD) {
				char *end = strstr(c->buf, "\r\n\r\n");
				if (end == NULL)
					continue;
				if (strncmp(c->buf, "HTTP/1.1 ", 9) == 0)
					c->status = (int)strtol(c->buf + 9, NULL, 10);
				else
					c->status = -1;
				if (c->status != 200) {
					settle(c, C_DONE);
					return;
				}
				c->st = C_BODY;
			}
			if (o.drain) { /* the body's first bytes, after the head */
				drained_bytes +=
				        c->got - (size_t)(strstr(c->buf, "\r\n\r\n") + 4 - c->buf);
				settle(c, C_OPEN);
				continue;
			}
			if (strstr(c->buf, o.expect) != NULL)
				settle(c, C_OPEN);
			continue;
		}
		case C_H2:
			if (!h2_io(c))
				settle(c, C_DONE);
			return;
		default:
			return;
		}
	}
}

static const struct bench_opt opts[] = {
        {"port", BENCH_INT, &o.port, "P", false},
        {"ca", BENCH_STR, &o.ca, "CA", true},
        {"cert", BENCH_STR, &o.cert, "CRT", true},
        {"key", BENCH_STR, &o.key, "KEY", true},
        {"host", BENCH_STR, &o.host, "H", false},
        {"n", BENCH_INT, &o.n, "N", false},
        {"target", BENCH_STR, &o.target, "T", false},
        {"host-header", BENCH_STR, &o.host_header, "H", false},
        {"expect", BENCH_STR, &o.expect, "S", false},
        {"timeout", BENCH_INT, &o.timeout_s, "S", false},
        {"max-connecting", BENCH_INT, &o.max_connecting, "N", false},
        {"hold", BENCH_INT, &o.hold_s, "S", false},
        {"h2-streams-per-conn", BENCH_INT, &o.h2_per_conn, "K", false},
        {"h2-eager", BENCH_INT, &o.h2_eager, "0|1", false},
        {"unix", BENCH_STR, &o.unix_path, "PATH", false},
        {"connect", BENCH_STR, &o.connect_to, "HOST:PORT", false},
        {"drain", BENCH_FLAG, &o.drain, NULL, false},
};
static const struct bench_cli cli = {"follow_burst", opts, sizeof opts / sizeof opts[0]};

int main(int argc, char **argv)
{
	bench_parse_args(&cli, argc, argv);
	if ((o.port <= 0 && !o.unix_path) || !o.ca || !o.cert || !o.key || o.n <= 0)
		bench_usage(&cli);
	nconns = o.h2_per_conn > 0 ? (o.n + o.h2_per_conn - 1) / o.h2_per_conn : o.n;
	rlim_t nofile = bench_raise_nofile();
	if (nofile < (rlim_t)nconns + 16) {
		fprintf(stderr, "RLIMIT_NOFILE %llu is too low for %d connections\n",
		        (unsigned long long)nofile, o.n);
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);
	bench_catch_stop();
	ctx = SSL_CTX_new(TLS_client_method());
	if (SSL_CTX_load_verify_locations(ctx, o.ca, NULL) != 1 ||
	    SSL_CTX_use_certificate_chain_file(ctx, o.cert) != 1 ||
	    SSL_CTX_use_PrivateKey_file(ctx, o.key, SSL_FILETYPE_PEM) != 1) {
		ERR_print_errors_fp(stderr);
		return 1;
	}
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS | SSL_MODE_ENABLE_PARTIAL_WRITE);
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
	if (o.h2_per_conn > 0)
		SSL_CTX_set_alpn_protos(ctx, (const unsigned char *)"\x02h2", 3);
	int rn = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", o.target,
	                  o.host_header, o.drain ? "Connection: close\r\n" : "");
	if (rn < 0 || (size_t)rn >= sizeof req)
		bench_usage(&cli);
	req_len = (size_t)rn;
	if (!o.unix_path != !o.connect_to || ((o.unix_path || o.drain) && o.h2_per_conn > 0))
		bench_usage(&cli);
	if (o.unix_path) {
		rn = snprintf(proxy_req, sizeof proxy_req,
		              "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", o.connect_to,
		              o.connect_to);
		if (rn < 0 || (size_t)rn >= sizeof proxy_req)
			bench_usage(&cli);
		proxy_req_len = (size_t)rn;
	}
	ep = epoll_create1(0);
	conns = calloc((size_t)nconns, sizeof *conns);
	if (conns == NULL)
		return 1;
	if (o.h2_per_conn > 0) {
		h2streams = calloc((size_t)o.n, sizeof *h2streams);
		if (h2streams == NULL)
			return 1;
		for (int i = 0; i < nconns; i++) {
			conns[i].streams = h2streams + (size_t)i * (size_t)o.h2_per_conn;
			int left = o.n - i * o.h2_per_conn;
			conns[i].nstreams = left < o.h2_per_conn ? left : o.h2_per_conn;
		}
	}
	uint64_t t0 = bench_now_ms();
	bool reported = false;
	uint64_t hold_until = 0;
	struct epoll_event evs[512];
	while (!bench_stop) {
		while (started < nconns && (o.max_connecting <= 0 || connecting < o.max_connecting))
			start(&conns[started]);
		unsigned settled = answered + s504 + other + failed;
		if (!reported && started == nconns && settled == (unsigned)o.n) {
			printf("burst n=%d answered=%u status504=%u other=%u failed=%u "
			       "seconds=%.2f\n",
			       o.n, answered, s504, other, failed,
			       (double)(bench_now_ms() - t0) / 1000.0);
			if (failed)
				fprintf(stderr,
				        "failed in: connect %u, CONNECT %u, TLS %u, request %u, "
				        "head "
				        "%u, body %u, h2 %u\n",
				        failed_in[C_TCP], failed_in[C_PROXY], failed_in[C_TLS],
				        failed_in[C_REQ], failed_in[C_HEAD], failed_in[C_BODY],
				        failed_in[C_H2]);
			printf("holding\n");
			fflush(stdout);
			reported = true;
			if (o.hold_s > 0)
				hold_until = bench_now_ms() + (uint64_t)o.hold_s * 1000u;
		}
		if (!reported && bench_now_ms() - t0 > (uint64_t)o.timeout_s * 1000u) {
			unsigned pending = (unsigned)o.n - settled;
			printf("burst n=%d answered=%u status504=%u other=%u failed=%u "
			       "seconds=%.2f "
			       "unsettled=%u\n",
			       o.n, answered, s504, other, failed + pending,
			       (double)(bench_now_ms() - t0) / 1000.0, pending);
			printf("holding\n");
			fflush(stdout);
			reported = true;
			if (o.hold_s > 0)
				hold_until = bench_now_ms() + (uint64_t)o.hold_s * 1000u;
		}
		if (hold_until && bench_now_ms() >= hold_until)
			break;
		if (o.drain && reported && drained_closed == answered) {
			printf("drained bytes=%llu seconds=%.3f\n",
			       (unsigned long long)drained_bytes,
			       (double)(bench_now_ms() - t0) / 1000.0);
			fflush(stdout);
			break;
		}
		int k = epoll_wait(ep, evs, 512, 200);
		for (int i = 0; i < k; i++)
			step(evs[i].data.ptr);
	}
	for (int i = 0; i < nconns; i++) {
		if (conns[i].ng)
			nghttp2_session_del(conns[i].ng);
		free(conns[i].pend);
		if (conns[i].ssl)
			SSL_free(conns[i].ssl);
		if (conns[i].fd > 0)
			close(conns[i].fd);
	}
	free(conns);
	free(h2streams);
	SSL_CTX_free(ctx);
	return 0;
}
