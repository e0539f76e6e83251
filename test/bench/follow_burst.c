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
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "benchutil.h"

enum cst { C_IDLE, C_TCP, C_TLS, C_REQ, C_HEAD, C_BODY, C_OPEN, C_DONE };

struct conn {
	int fd;
	enum cst st;
	SSL *ssl;
	int status;
	size_t req_off;
	size_t got;     /* bytes in buf */
	char buf[2048]; /* the head, then the body's first bytes, until --expect */
};

static struct {
	const char *host, *ca, *cert, *key, *target, *host_header, *expect;
	int port, n, timeout_s, max_connecting, hold_s;
} o = {.host = "127.0.0.1",
       .target = "/containerLogs/default/pod-a/ctr?follow=true&tailLines=1&interval=5",
       .host_header = "edge-1:10350",
       .expect = "line 1",
       .n = 10000,
       .timeout_s = 120};

static SSL_CTX *ctx;
static int ep;
static struct conn *conns;
static int connecting, started;
static unsigned answered, s504, other, failed;
static unsigned failed_in[C_DONE + 1]; /* failures by the state they happened in */
static char req[1024];
static size_t req_len;
static void want(struct conn *c, uint32_t events)
{
	struct epoll_event ev = {.events = events, .data.ptr = c};
	epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
}

/* The request is settled (answered or not): counted once. */
static void settle(struct conn *c, enum cst next)
{
	if (c->st == C_TCP || c->st == C_TLS)
		connecting--;
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

static void start(struct conn *c)
{
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
			c->ssl = SSL_new(ctx);
			SSL_set_fd(c->ssl, c->fd);
			SSL_set_connect_state(c->ssl);
			c->st = C_TLS;
			continue;
		}
		case C_TLS: {
			int r = SSL_do_handshake(c->ssl);
			if (r == 1) {
				connecting--;
				c->st = C_REQ;
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
			if (c->st == C_OPEN)
				continue;
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
			if (strstr(c->buf, o.expect) != NULL)
				settle(c, C_OPEN);
			continue;
		}
		default:
			return;
		}
	}
}

static const struct bench_opt opts[] = {
        {"port", BENCH_INT, &o.port, "P", true},
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
};
static const struct bench_cli cli = {"follow_burst", opts, sizeof opts / sizeof opts[0]};

int main(int argc, char **argv)
{
	bench_parse_args(&cli, argc, argv);
	if (o.port <= 0 || !o.ca || !o.cert || !o.key || o.n <= 0)
		bench_usage(&cli);
	rlim_t nofile = bench_raise_nofile();
	if (nofile < (rlim_t)o.n + 16) {
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
	int rn = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", o.target,
	                  o.host_header);
	if (rn < 0 || (size_t)rn >= sizeof req)
		bench_usage(&cli);
	req_len = (size_t)rn;
	ep = epoll_create1(0);
	conns = calloc((size_t)o.n, sizeof *conns);
	if (conns == NULL)
		return 1;
	uint64_t t0 = bench_now_ms();
	bool reported = false;
	uint64_t hold_until = 0;
	struct epoll_event evs[512];
	while (!bench_stop) {
		while (started < o.n && (o.max_connecting <= 0 || connecting < o.max_connecting))
			start(&conns[started]);
		unsigned settled = answered + s504 + other + failed;
		if (!reported && started == o.n && settled == (unsigned)o.n) {
			printf("burst n=%d answered=%u status504=%u other=%u failed=%u "
			       "seconds=%.2f\n",
			       o.n, answered, s504, other, failed,
			       (double)(bench_now_ms() - t0) / 1000.0);
			if (failed)
				fprintf(stderr,
				        "failed in: connect %u, TLS %u, request %u, head %u, body "
				        "%u\n",
				        failed_in[C_TCP], failed_in[C_TLS], failed_in[C_REQ],
				        failed_in[C_HEAD], failed_in[C_BODY]);
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
		}
		if (hold_until && bench_now_ms() >= hold_until)
			break;
		int k = epoll_wait(ep, evs, 512, 200);
		for (int i = 0; i < k; i++)
			step(evs[i].data.ptr);
	}
	for (int i = 0; i < o.n; i++) {
		if (conns[i].ssl)
			SSL_free(conns[i].ssl);
		if (conns[i].fd > 0)
			close(conns[i].fd);
	}
	free(conns);
	SSL_CTX_free(ctx);
	return 0;
}
