/*
 * test/bench/tunnel_load.c — N real mTLS websocket tunnels to cloudstream's tunnel port, as
 * N edge nodes would open them: one client certificate per node (minted here from the tunnel
 * CA's key: CN=system:node:<prefix><i>, O=system:nodes), GET /v1/kubeedge/connect, then a
 * PING every --ping-interval (random phase), PONGs to the cloud's PINGs, and a redial when a
 * tunnel drops: the first after a random delay in [0, --redial-spread], then exponential
 * backoff with jitter as edgestream does (edgestream/src/backoff.h).
 *
 * One epoll loop per process with OpenSSL directly (no lws), so the client is not the bound;
 * --procs splits the tunnels over processes (each process has its own fd limit). Once a second
 * the parent prints one line of totals; "all-up" lines say how long it took until every tunnel
 * was up, after the start and after each drop (a cloudstream restart).
 *
 *   tunnel_load --port P --ca-cert tunnel-ca.crt --ca-key tunnel-ca.key --server-ca tunnel-ca.crt
 *               [--host 127.0.0.1] [--n 1000] [--procs 1] [--ping-interval 5000]
 *               [--pong-within 0 (KubeEdge's request) | 20000 (edgestream's offer)]
 *               [--redial-spread 2000] [--max-dialing 512] [--connect-timeout 30000]
 *               [--duration 0] [--prefix load-] [--quiet]
 *
 * A bench tool, not a test. Stop it with SIGTERM/SIGINT (or --duration, in seconds).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "benchutil.h"

enum st { S_IDLE, S_TCP, S_TLS, S_REQ, S_RESP, S_OPEN };

struct conn {
	int fd;
	uint8_t st;
	uint8_t hdr_len, opcode;
	bool ping_pending, pong_pending, was_open;
	uint32_t idx, attempt, resp_len;
	uint64_t due_ms; /* S_IDLE: dial at; S_OPEN: next ping at; else: deadline */
	uint64_t remain; /* payload bytes of the current server frame still to skip */
	uint8_t hdr[14];
	SSL *ssl;
	char *resp; /* the 101 response while it arrives */
};

/* Counters each process keeps in shared memory for the parent. */
struct counters {
	uint64_t open, dialing, dials, handshakes, refused, tls_err, http_err, timeouts, drops,
	        pings, pongs;
};

static struct opts {
	const char *host, *ca_cert, *ca_key, *server_ca, *prefix;
	int port, n, procs, max_dialing, duration_s;
	uint64_t ping_ms, spread_ms, timeout_ms, pong_within_ms;
	bool quiet;
} o = {.host = "127.0.0.1",
       .prefix = "load-",
       .n = 1000,
       .procs = 1,
       .max_dialing = 512,
       .ping_ms = 5000,
       .spread_ms = 2000,
       .timeout_ms = 30000};

static SSL_CTX *ctx;
static X509 *ca;
static EVP_PKEY *ca_key, *node_key;
static struct counters *cnt;
static int ep;
static int dialing;
static struct sockaddr_in dst;
static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(uint64_t bound)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return bound ? (rng * 0x2545f4914f6cdd1dull) % bound : 0;
}

static void die(const char *what)
{
	fprintf(stderr, "tunnel_load: %s\n", what);
	ERR_print_errors_fp(stderr);
	exit(1);
}

/* ---- certificates ---------------------------------------------------------------------- */

static X509 *mint(uint32_t idx)
{
	X509 *x = X509_new();
	char cn[96];
	snprintf(cn, sizeof cn, "system:node:%s%u", o.prefix, idx);
	X509_set_version(x, 2);
	ASN1_INTEGER_set(X509_get_serialNumber(x), (long)idx + 1000);
	X509_gmtime_adj(X509_getm_notBefore(x), -3600);
	X509_gmtime_adj(X509_getm_notAfter(x), 86400);
	X509_NAME *name = X509_get_subject_name(x);
	X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, (const unsigned char *)"system:nodes",
	                           -1, -1, 0);
	X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0);
	X509_set_issuer_name(x, X509_get_subject_name(ca));
	X509_set_pubkey(x, node_key);
	X509V3_CTX v3;
	X509V3_set_ctx(&v3, ca, x, NULL, NULL, 0);
	X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, &v3, NID_ext_key_usage, "clientAuth");
	X509_add_ext(x, e, -1);
	X509_EXTENSION_free(e);
	e = X509V3_EXT_conf_nid(NULL, &v3, NID_key_usage, "critical,digitalSignature");
	X509_add_ext(x, e, -1);
	X509_EXTENSION_free(e);
	if (X509_sign(x, ca_key, EVP_sha256()) <= 0)
		die("signing a node certificate");
	return x;
}

static void tls_setup(void)
{
	FILE *f = fopen(o.ca_cert, "r");
	if (f == NULL || (ca = PEM_read_X509(f, NULL, NULL, NULL)) == NULL)
		die("--ca-cert unreadable");
	fclose(f);
	f = fopen(o.ca_key, "r");
	if (f == NULL || (ca_key = PEM_read_PrivateKey(f, NULL, NULL, NULL)) == NULL)
		die("--ca-key unreadable");
	fclose(f);
	node_key = EVP_EC_gen("P-256");
	if (node_key == NULL)
		die("EC key");
	ctx = SSL_CTX_new(TLS_client_method());
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	if (SSL_CTX_load_verify_locations(ctx, o.server_ca, NULL) != 1)
		die("--server-ca unreadable");
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS | SSL_MODE_ENABLE_PARTIAL_WRITE |
	                              SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
	static const unsigned char alpn[] = "\x08http/1.1";
	SSL_CTX_set_alpn_protos(ctx, alpn, sizeof alpn - 1);
}

/* ---- one tunnel ------------------------------------------------------------------------ */

static void arm(struct conn *c, uint32_t events)
{
	struct epoll_event ev = {.events = events, .data.ptr = c};
	epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
}

/* Close and schedule the redial: the first one within the spread, then backoff. */
static void drop(struct conn *c, uint64_t *counter)
{
	uint64_t now = bench_now_ms();
	if (counter)
		(*counter)++;
	if (c->st == S_OPEN) {
		cnt->open--;
		cnt->drops++;
	} else if (c->st != S_IDLE) {
		cnt->dialing--;
		dialing--;
	}
	if (c->ssl)
		SSL_free(c->ssl);
	c->ssl = NULL;
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	free(c->resp);
	c->resp = NULL;
	uint64_t delay;
	if (c->was_open) {
		c->was_open = false;
		c->attempt = 0;
		delay = rnd(o.spread_ms + 1);
	} else {
		uint64_t base = 1000;
		for (uint32_t i = 0; i < c->attempt && base < 30000; i++)
			base *= 2;
		if (base > 30000)
			base = 30000;
		delay = base / 2 + rnd(base / 2 + 1);
	}
	c->attempt++;
	c->st = S_IDLE;
	c->due_ms = now + delay;
}

static void dial(struct conn *c)
{
	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->fd < 0) {
		c->st = S_IDLE;
		c->due_ms = bench_now_ms() + 1000;
		return;
	}
	int one = 1;
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	c->st = S_TCP;
	cnt->dials++;
	cnt->dialing++;
	dialing++;
	c->due_ms = bench_now_ms() + o.timeout_ms;
	struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = c};
	epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
	if (connect(c->fd, (struct sockaddr *)&dst, sizeof dst) < 0 && errno != EINPROGRESS)
		drop(c, &cnt->refused);
}

static void send_request(struct conn *c)
{
	char key[25], req[512], offer[80] = "";
	unsigned char raw[16];
	RAND_bytes(raw, sizeof raw);
	EVP_EncodeBlock((unsigned char *)key, raw, sizeof raw);
	/* --pong-within: the offer edgestream makes (PROTOCOL.md §5.1), without capabilities,
	 * so the tunnel stays on the base protocol; without it, a KubeEdge edge's request. */
	if (o.pong_within_ms)
		snprintf(offer, sizeof offer, "X-Cloudstream-Tunnel: v=1; pong-within=%llu\r\n",
		         (unsigned long long)o.pong_within_ms);
	int n = snprintf(
	        req, sizeof req,
	        "GET /v1/kubeedge/connect HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\n"
	        "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
	        "Sec-WebSocket-Version: 13\r\nSessionHostNameOverride: %s%u\r\n%s\r\n",
	        o.host, o.port, key, o.prefix, c->idx, offer);
	int w = SSL_write(c->ssl, req, n);
	if (w != n) { /* a fresh connection takes 300 bytes at once */
		drop(c, &cnt->tls_err);
		return;
	}
	c->st = S_RESP;
	c->resp = malloc(1024);
	c->resp_len = 0;
	arm(c, EPOLLIN);
}

static void handshake(struct conn *c)
{
	int r = SSL_do_handshake(c->ssl);
	if (r == 1) {
		cnt->handshakes++;
		send_request(c);
		return;
	}
	int e = SSL_get_error(c->ssl, r);
	if (e == SSL_ERROR_WANT_READ)
		arm(c, EPOLLIN);
	else if (e == SSL_ERROR_WANT_WRITE)
		arm(c, EPOLLOUT);
	else
		drop(c, &cnt->tls_err);
}

/* Writes a masked client control frame (PING 0x9 / PONG 0xA) with a 2-byte payload. */
static bool send_control(struct conn *c, uint8_t opcode)
{
	/* The mask is fixed: a retried SSL_write must carry the same bytes, and the server does
	 * not judge the mask's randomness. */
	static const uint8_t m[4] = {0x37, 0xfa, 0x21, 0x3d};
	uint8_t f[8] = {
	        (uint8_t)(0x80 | opcode), 0x82, m[0], m[1], m[2], m[3], (uint8_t)('l' ^ m[0]),
	        (uint8_t)('d' ^ m[1])};
	int w = SSL_write(c->ssl, f, sizeof f);
	if (w == (int)sizeof f)
		return true;
	int e = SSL_get_error(c->ssl, w);
	if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) {
		arm(c, EPOLLIN | EPOLLOUT);
		return false; /* retried from the loop */
	}
	drop(c, &cnt->drops);
	return false;
}

/* Reads the cloud's frames: PINGs are answered, a CLOSE ends the tunnel, the rest skipped. */
static void read_open(struct conn *c)
{
	uint8_t buf[16384];
	for (;;) {
		int r = SSL_read(c->ssl, buf, sizeof buf);
		if (r <= 0) {
			int e = SSL_get_error(c->ssl, r);
			if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
				return;
			drop(c, NULL);
			return;
		}
		for (int i = 0; i < r;) {
			if (c->remain) {
				uint64_t k = (uint64_t)(r - i) < c->remain ? (uint64_t)(r - i)
				                                           : c->remain;
				c->remain -= k;
				i += (int)k;
				continue;
			}
			c->hdr[c->hdr_len++] = buf[i++];
			if (c->hdr_len < 2)
				continue;
			uint8_t l7 = c->hdr[1] & 0x7f;
			unsigned need = 2u +
			                (l7 == 126   ? 2u
			                 : l7 == 127 ? 8u
			                             : 0u) +
			                ((c->hdr[1] & 0x80) ? 4u : 0u);
			if (c->hdr_len < need)
				continue;
			uint64_t len = l7;
			if (l7 == 126)
				len = (uint64_t)c->hdr[2] << 8 | c->hdr[3];
			else if (l7 == 127)
				for (int k = 0; k < 8; k++)
					len = len << 8 | c->hdr[2 + k];
			uint8_t op = c->hdr[0] & 0x0f;
			c->hdr_len = 0;
			c->remain = len;
			if (op == 0x8) {
				drop(c, NULL);
				return;
			}
			if (op == 0x9 && !c->pong_pending)
				c->pong_pending = !send_control(c, 0xA) && c->fd >= 0;
			if (op == 0xA)
				cnt->pongs++;
			if (c->fd < 0)
				return;
		}
	}
}

static void read_response(struct conn *c)
{
	for (;;) {
		int r = SSL_read(c->ssl, c->resp + c->resp_len, (int)(1023 - c->resp_len));
		if (r <= 0) {
			int e = SSL_get_error(c->ssl, r);
			if (e == SSL_ERROR_WANT_READ)
				return;
			drop(c, &cnt->tls_err); /* a refused certificate shows up here */
			return;
		}
		c->resp_len += (uint32_t)r;
		c->resp[c->resp_len] = '\0';
		char *end = strstr(c->resp, "\r\n\r\n");
		if (end == NULL) {
			if (c->resp_len >= 1023)
				drop(c, &cnt->http_err);
			continue;
		}
		if (strncmp(c->resp, "HTTP/1.1 101", 12) != 0) {
			if (!o.quiet && cnt->http_err < 5)
				fprintf(stderr, "tunnel_load: %.*s\n", (int)(end - c->resp),
				        c->resp);
			drop(c, &cnt->http_err);
			return;
		}
		/* Frames after the head (none expected) are skipped by read_open. */
		free(c->resp);
		c->resp = NULL;
		c->st = S_OPEN;
		c->was_open = true;
		cnt->dialing--;
		dialing--;
		cnt->open++;
		c->due_ms = bench_now_ms() + rnd(o.ping_ms);
		read_open(c);
		return;
	}
}

static void on_event(struct conn *c, uint32_t ev)
{
	if (c->st == S_TCP) {
		int err = 0;
		socklen_t len = sizeof err;
		getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
		if (err != 0 || (ev & (EPOLLERR | EPOLLHUP))) {
			drop(c, &cnt->refused);
			return;
		}
		c->ssl = SSL_new(ctx);
		X509 *x = mint(c->idx);
		SSL_use_certificate(c->ssl, x);
		X509_free(x);
		SSL_use_PrivateKey(c->ssl, node_key);
		SSL_set_fd(c->ssl, c->fd);
		SSL_set_connect_state(c->ssl);
		c->st = S_TLS;
		handshake(c);
		return;
	}
	if (c->st == S_TLS) {
		handshake(c);
		return;
	}
	if (c->st == S_RESP) {
		read_response(c);
		return;
	}
	if (c->st != S_OPEN)
		return;
	if (c->ping_pending || c->pong_pending) {
		bool ping = c->ping_pending;
		if (send_control(c, ping ? 0x9 : 0xA)) {
			if (ping)
				c->ping_pending = false, cnt->pings++;
			else
				c->pong_pending = false;
			arm(c, EPOLLIN);
		}
		if (c->fd < 0)
			return;
	}
	if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR))
		read_open(c);
}

/* Every 50 ms: dial the due ones (within --max-dialing), ping, enforce deadlines. */
static void tick(struct conn *cs, int n)
{
	uint64_t now = bench_now_ms();
	for (int i = 0; i < n; i++) {
		struct conn *c = &cs[i];
		if (c->due_ms > now)
			continue;
		if (c->st == S_IDLE) {
			if (dialing < o.max_dialing)
				dial(c);
		} else if (c->st == S_OPEN) {
			c->due_ms = now + o.ping_ms;
			if (c->ping_pending)
				continue;
			if (send_control(c, 0x9))
				cnt->pings++;
			else if (c->fd >= 0)
				c->ping_pending = true;
		} else {
			drop(c, &cnt->timeouts); /* the client's deadline: a wasted handshake */
		}
	}
}

static void run_worker(int first, int n)
{
	signal(SIGPIPE, SIG_IGN);
	rng ^= (uint64_t)getpid() * 0x9e3779b97f4a7c15ull;
	tls_setup();
	ep = epoll_create1(EPOLL_CLOEXEC);
	struct conn *cs = calloc((size_t)n, sizeof *cs);
	uint64_t now = bench_now_ms();
	for (int i = 0; i < n; i++) {
		cs[i].fd = -1;
		cs[i].idx = (uint32_t)(first + i);
		cs[i].due_ms = now;
	}
	struct epoll_event evs[512];
	uint64_t next_tick = 0;
	while (!bench_stop && getppid() != 1) {
		int k = epoll_wait(ep, evs, 512, 50);
		for (int i = 0; i < k; i++)
			on_event(evs[i].data.ptr, evs[i].events);
		if (bench_now_ms() >= next_tick) {
			tick(cs, n);
			next_tick = bench_now_ms() + 50;
		}
	}
	for (int i = 0; i < n; i++)
		if (cs[i].fd >= 0)
			close(cs[i].fd);
	_exit(0);
}

/* ---- the parent ------------------------------------------------------------------------ */

static const struct bench_opt opts[] = {
        {"port", BENCH_INT, &o.port, "P", true},
        {"ca-cert", BENCH_STR, &o.ca_cert, "F", true},
        {"ca-key", BENCH_STR, &o.ca_key, "F", true},
        {"server-ca", BENCH_STR, &o.server_ca, "F", true},
        {"host", BENCH_STR, &o.host, "H", false},
        {"n", BENCH_INT, &o.n, "N", false},
        {"procs", BENCH_INT, &o.procs, "P", false},
        {"ping-interval", BENCH_U64, &o.ping_ms, "MS", false},
        {"pong-within", BENCH_U64, &o.pong_within_ms, "MS", false},
        {"redial-spread", BENCH_U64, &o.spread_ms, "MS", false},
        {"max-dialing", BENCH_INT, &o.max_dialing, "K", false},
        {"connect-timeout", BENCH_U64, &o.timeout_ms, "MS", false},
        {"duration", BENCH_INT, &o.duration_s, "S", false},
        {"prefix", BENCH_STR, &o.prefix, "P", false},
        {"quiet", BENCH_FLAG, &o.quiet, NULL, false},
};
static const struct bench_cli cli = {"tunnel_load", opts, sizeof opts / sizeof opts[0]};

int main(int argc, char **argv)
{
	bench_parse_args(&cli, argc, argv);
	if (!o.port || !o.ca_cert || !o.ca_key || !o.server_ca || o.n < 1 || o.procs < 1 ||
	    o.ping_ms < 1)
		bench_usage(&cli);
	memset(&dst, 0, sizeof dst);
	dst.sin_family = AF_INET;
	dst.sin_port = htons((uint16_t)o.port);
	if (inet_pton(AF_INET, o.host, &dst.sin_addr) != 1)
		bench_usage(&cli);
	bench_raise_nofile();
	struct counters *all = mmap(NULL, sizeof *all * (size_t)o.procs, PROT_READ | PROT_WRITE,
	                            MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (all == MAP_FAILED)
		die("mmap");
	memset(all, 0, sizeof *all * (size_t)o.procs);
	bench_catch_stop();
	pid_t *kids = calloc((size_t)o.procs, sizeof *kids);
	int per = (o.n + o.procs - 1) / o.procs, first = 0;
	for (int p = 0; p < o.procs; p++) {
		int n = o.n - first < per ? o.n - first : per;
		kids[p] = fork();
		if (kids[p] == 0) {
			cnt = &all[p];
			run_worker(first, n);
		}
		first += n;
	}
	uint64_t t0 = bench_now_ms(), up_since = 0, down_at = t0;
	bool all_up = false;
	while (!bench_stop &&
	       (o.duration_s == 0 || bench_now_ms() - t0 < (uint64_t)o.duration_s * 1000)) {
		usleep(100000);
		struct counters s = {0};
		for (int p = 0; p < o.procs; p++) {
			const uint64_t *src = (const uint64_t *)&all[p];
			uint64_t *d = (uint64_t *)&s;
			for (size_t k = 0; k < sizeof s / sizeof(uint64_t); k++)
				d[k] += src[k];
		}
		uint64_t now = bench_now_ms();
		if (!all_up && s.open == (uint64_t)o.n) {
			all_up = true;
			printf("all-up n=%d after_s=%.2f dials=%llu handshakes=%llu "
			       "timeouts=%llu\n",
			       o.n, (double)(now - down_at) / 1000.0, (unsigned long long)s.dials,
			       (unsigned long long)s.handshakes, (unsigned long long)s.timeouts);
			fflush(stdout);
		} else if (all_up && s.open < (uint64_t)o.n) {
			all_up = false;
			down_at = now;
			printf("drop open=%llu at_s=%.2f\n", (unsigned long long)s.open,
			       (double)(now - t0) / 1000.0);
			fflush(stdout);
		}
		if (now - up_since >= 1000) {
			up_since = now;
			printf("t=%.1f open=%llu dialing=%llu dials=%llu handshakes=%llu "
			       "refused=%llu "
			       "tls_err=%llu http_err=%llu timeouts=%llu drops=%llu pings=%llu "
			       "pongs=%llu\n",
			       (double)(now - t0) / 1000.0, (unsigned long long)s.open,
			       (unsigned long long)s.dialing, (unsigned long long)s.dials,
			       (unsigned long long)s.handshakes, (unsigned long long)s.refused,
			       (unsigned long long)s.tls_err, (unsigned long long)s.http_err,
			       (unsigned long long)s.timeouts, (unsigned long long)s.drops,
			       (unsigned long long)s.pings, (unsigned long long)s.pongs);
			fflush(stdout);
		}
	}
	for (int p = 0; p < o.procs; p++)
		kill(kids[p], SIGTERM);
	for (int p = 0; p < o.procs; p++)
		waitpid(kids[p], NULL, 0);
	free(kids);
	return 0;
}
