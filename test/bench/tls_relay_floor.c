/*
 * test/bench/tls_relay_floor.c — the cheapest TLS → TLS byte relay we know how to write: a
 * lower bound on the CPU any relay spends that terminates TLS on one side and originates it on
 * the other (cloudstream and edgestream each do, plus framing, multiplexing and HTTP). The
 * relay benches run a pair of these beside the chain, so the chain's figures have a floor
 * measured on the same cores in the same run (README "Bulk relay cost").
 *
 *   tls_relay_floor --cert C --key K --upstream-port P (--upstream-ca F | --upstream-insecure)
 *                   [--port 0] [--host 127.0.0.1] [--upstream-host 127.0.0.1]
 *                   [--upstream-cert C --upstream-key K] [--upstream-name N]
 *                   [--alpn h2,http/1.1] [--buffer-kib 256] [--ready-file F]
 *
 * Per accepted connection: TLS accepted (no client certificate asked for), a TCP connection
 * to the upstream, TLS there (client certificate, the upstream verified against its CA), then
 * the bytes copied both ways until each side has closed. No framing, no parsing, no queue: each
 * round reads what the source's socket has (up to --buffer-kib of plaintext, OpenSSL's
 * read-ahead pulling many records per read()) and writes it as one SSL_write whose records are
 * collected and sent with one send(). TLS 1.3 with AES-128-GCM first, the server's order on the
 * listener, exactly as the daemons do (stream/tlsctx.h, compiled in). ALPN passes through: the
 * listener accepts the client's first protocol that is in --alpn and offers the upstream that
 * one alone (a connection whose upstream picks another is closed).
 *
 * Why one thread per connection with poll() over two non-blocking sockets, not a blocking
 * thread per direction: both directions use both SSL objects (one reads it, the other writes
 * it), and OpenSSL does not allow one SSL object in two threads at once (TLS 1.3's
 * post-handshake messages run its state machine inside SSL_read). The poll() costs one system
 * call per round of up to --buffer-kib, about 4 per MiB at the default.
 *
 * --ready-file gets "port=N" once the listener is up. SIGTERM/SIGINT stop it (exit 0). A bench
 * tool: each failed connection prints one line to stderr and closes; nothing else is logged.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <stream/tlsctx.h>

#include "benchutil.h"

#define HANDSHAKE_TIMEOUT_S 10
/* Room in an out buffer beyond the plaintext: TLS 1.3 adds 22 bytes per 16 KiB record
 * (header, content type, tag); a handshake flight or a KeyUpdate fits in the rest. */
#define OUT_SLACK_BYTES (64u << 10)
#define ALPN_MAX_BYTES  256

static struct opts {
	const char *host, *cert, *key, *up_host, *up_cert, *up_key, *up_ca, *up_name, *alpn,
	        *ready_file;
	int port, up_port, buffer_kib;
	bool insecure, help;
} o = {.host = "127.0.0.1", .up_host = "127.0.0.1", .alpn = "h2,http/1.1", .buffer_kib = 256};

static const struct bench_opt opt_table[] = {
        {"cert", BENCH_STR, &o.cert, "FILE", true},
        {"key", BENCH_STR, &o.key, "FILE", true},
        {"upstream-port", BENCH_INT, &o.up_port, "P", true},
        {"port", BENCH_INT, &o.port, "P", false},
        {"host", BENCH_STR, &o.host, "ADDR", false},
        {"upstream-host", BENCH_STR, &o.up_host, "HOST", false},
        {"upstream-cert", BENCH_STR, &o.up_cert, "FILE", false},
        {"upstream-key", BENCH_STR, &o.up_key, "FILE", false},
        {"upstream-ca", BENCH_STR, &o.up_ca, "FILE", false},
        {"upstream-name", BENCH_STR, &o.up_name, "NAME", false},
        {"upstream-insecure", BENCH_FLAG, &o.insecure, NULL, false},
        {"alpn", BENCH_STR, &o.alpn, "LIST", false},
        {"buffer-kib", BENCH_INT, &o.buffer_kib, "N", false},
        {"ready-file", BENCH_STR, &o.ready_file, "FILE", false},
        {"help", BENCH_FLAG, &o.help, NULL, false},
};
static const struct bench_cli cli = {"tls_relay_floor", opt_table,
                                     sizeof opt_table / sizeof opt_table[0]};

static const char help_text[] =
        "tls_relay_floor: the cheapest TLS -> TLS byte relay (a CPU floor for relays).\n"
        "  --cert FILE, --key FILE   the listener's certificate chain and key\n"
        "  --port P                  listen port (default 0: any; see --ready-file)\n"
        "  --host ADDR               listen address (default 127.0.0.1)\n"
        "  --upstream-host HOST      where each connection goes (default 127.0.0.1)\n"
        "  --upstream-port P         its port (required)\n"
        "  --upstream-cert FILE, --upstream-key FILE   client certificate toward it\n"
        "  --upstream-ca FILE        CA the upstream's certificate must chain to\n"
        "  --upstream-name NAME      SNI, and the name its certificate must carry\n"
        "  --upstream-insecure       do not verify the upstream (instead of --upstream-ca)\n"
        "  --alpn LIST               protocols passed through (default h2,http/1.1)\n"
        "  --buffer-kib N            plaintext per round (default 256)\n"
        "  --ready-file FILE         written with \"port=N\" once listening\n"
        "SIGTERM/SIGINT: exit 0.\n";

static SSL_CTX *srv_ctx, *cli_ctx;
static struct sockaddr_storage up_addr;
static socklen_t up_addr_len;
static size_t buf_bytes;
static unsigned char alpn_wire[ALPN_MAX_BYTES]; /* --alpn in ALPN's wire format */
static size_t alpn_wire_len;

/* ---- the write side: records collected, sent with one send() ------------------------------ */

/* What one SSL object has written and the socket has not taken yet: buf[off, len). Used by
 * the connection's thread alone. */
struct out {
	int fd;
	unsigned char *buf;
	size_t cap, off, len;
};

/* Sends what @ob holds. 0: all sent; -EAGAIN: the socket is full (the rest kept); -errno. */
static int out_flush(struct out *ob)
{
	while (ob->off < ob->len) {
		ssize_t n = send(ob->fd, ob->buf + ob->off, ob->len - ob->off, MSG_NOSIGNAL);
		if (n > 0) {
			ob->off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)
		               ? -EAGAIN
		               : (n < 0 ? -errno : -EPIPE);
	}
	ob->off = ob->len = 0;
	return 0;
}

static int out_bio_write(BIO *b, const char *data, int n)
{
	struct out *ob = BIO_get_data(b);
	BIO_clear_retry_flags(b);
	if (n <= 0)
		return 0;
	if (ob->off == ob->len)
		ob->off = ob->len = 0;
	if (ob->cap - ob->len < (size_t)n) { /* only while the socket is full: wait for it */
		BIO_set_retry_write(b);
		return -1;
	}
	memcpy(ob->buf + ob->len, data, (size_t)n);
	ob->len += (size_t)n;
	return n;
}

static long out_bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
	(void)num;
	(void)ptr;
	if (cmd != BIO_CTRL_FLUSH)
		return 0;
	/* OpenSSL flushes after each handshake flight: send it now. */
	BIO_clear_retry_flags(b);
	int rc = out_flush(BIO_get_data(b));
	if (rc == 0)
		return 1;
	if (rc == -EAGAIN)
		BIO_set_retry_write(b);
	return -1;
}

static BIO_METHOD *out_method;

/* ---- one connection ------------------------------------------------------------------------ */

struct conn {
	unsigned long id;
	int fd[2];       /* 0: the client's, 1: the upstream's */
	SSL *ssl[2];     /* on fd[i] */
	struct out o[2]; /* what ssl[i] has written toward fd[i] */
	unsigned char *plain;
};

/* One direction: ssl[src] is read, ssl[1 - src] written. */
struct dir {
	int src;
	bool eof;            /* the source has closed (clean: close_notify seen) */
	bool clean;          /* eof with close_notify */
	bool shut;           /* close_notify written toward the destination */
	bool done;           /* the EOF has been passed on */
	bool want_src_write; /* SSL_read of the source needs its own socket writable */
	bool full;           /* the last round filled the buffer: OpenSSL may hold more records
	                      * already read, which poll() would not report */
	bool ready;          /* worth an SSL_read: poll() said so, or full (no read() that can
	                      * only fail with EAGAIN: an idle direction costs nothing) */
};

/* Prints "tls_relay_floor: connection N: @what" and OpenSSL's first queued error (the queue
 * is emptied). */
static void conn_fail(const struct conn *c, const char *what, int err)
{
	unsigned long e, first = 0;
	while ((e = ERR_get_error()) != 0)
		if (first == 0)
			first = e;
	char ssl_err[200] = "";
	if (first)
		ERR_error_string_n(first, ssl_err, sizeof ssl_err);
	fprintf(stderr, "tls_relay_floor: connection %lu: %s%s%s%s%s\n", c->id, what,
	        err ? ": " : "", err ? strerror(err) : "", first ? ": " : "", ssl_err);
}

static int set_nonblocking(int fd, bool on)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0)
		return -errno;
	if (fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK) != 0)
		return -errno;
	return 0;
}

static void set_timeouts(int fd, int seconds)
{
	struct timeval tv = {.tv_sec = seconds};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

/* SSL on @c->fd[@i] with the read-ahead socket BIO to read and @c->o[@i] to write. */
static SSL *conn_ssl(struct conn *c, int i, SSL_CTX *ctx)
{
	SSL *ssl = SSL_new(ctx);
	BIO *rb = BIO_new_socket(c->fd[i], BIO_NOCLOSE);
	BIO *wb = BIO_new(out_method);
	if (!ssl || !rb || !wb) {
		SSL_free(ssl);
		BIO_free(rb);
		BIO_free(wb);
		return NULL;
	}
	BIO_set_data(wb, &c->o[i]);
	BIO_set_init(wb, 1);
	SSL_set_bio(ssl, rb, wb);
	return ssl;
}

/* The listener's ALPN choice: the client's first protocol that --alpn lists. */
static int on_alpn(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                   const unsigned char *in, unsigned int inlen, void *arg)
{
	(void)ssl;
	(void)arg;
	for (unsigned int i = 0; i < inlen; i += 1u + in[i]) {
		unsigned int n = in[i];
		if (i + 1 + n > inlen)
			break;
		for (size_t j = 0; j < alpn_wire_len; j += 1u + alpn_wire[j])
			if (alpn_wire[j] == n && memcmp(alpn_wire + j + 1, in + i + 1, n) == 0) {
				*out = in + i + 1;
				*outlen = (unsigned char)n;
				return SSL_TLSEXT_ERR_OK;
			}
	}
	return SSL_TLSEXT_ERR_NOACK;
}

/* Both handshakes and the upstream's TCP connection (blocking, bounded by socket timeouts). */
static int conn_open(struct conn *c)
{
	int one = 1;
	setsockopt(c->fd[0], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	set_timeouts(c->fd[0], HANDSHAKE_TIMEOUT_S);
	int rc;
	if ((c->ssl[0] = conn_ssl(c, 0, srv_ctx)) == NULL || (rc = SSL_accept(c->ssl[0])) != 1) {
		conn_fail(c, "client TLS handshake",
		          c->ssl[0] && SSL_get_error(c->ssl[0], rc) == SSL_ERROR_SYSCALL ? errno
		                                                                         : 0);
		return -1;
	}
	const unsigned char *proto = NULL;
	unsigned int proto_len = 0;
	SSL_get0_alpn_selected(c->ssl[0], &proto, &proto_len);

	c->fd[1] = socket(up_addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd[1] < 0) {
		conn_fail(c, "socket", errno);
		return -1;
	}
	c->o[1].fd = c->fd[1];
	setsockopt(c->fd[1], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	set_timeouts(c->fd[1], HANDSHAKE_TIMEOUT_S);
	if (connect(c->fd[1], (struct sockaddr *)&up_addr, up_addr_len) != 0) {
		conn_fail(c, "connect to the upstream", errno);
		return -1;
	}
	if ((c->ssl[1] = conn_ssl(c, 1, cli_ctx)) == NULL) {
		conn_fail(c, "SSL_new", 0);
		return -1;
	}
	if (o.up_name) {
		SSL_set_tlsext_host_name(c->ssl[1], o.up_name);
		if (!o.insecure)
			SSL_set1_host(c->ssl[1], o.up_name);
	}
	unsigned char wire[ALPN_MAX_BYTES];
	if (proto_len) { /* offer the upstream what the client got, alone */
		wire[0] = (unsigned char)proto_len;
		memcpy(wire + 1, proto, proto_len);
		SSL_set_alpn_protos(c->ssl[1], wire, proto_len + 1);
	}
	if ((rc = SSL_connect(c->ssl[1])) != 1) {
		conn_fail(c, "upstream TLS handshake",
		          SSL_get_error(c->ssl[1], rc) == SSL_ERROR_SYSCALL ? errno : 0);
		return -1;
	}
	const unsigned char *up_proto = NULL;
	unsigned int up_len = 0;
	SSL_get0_alpn_selected(c->ssl[1], &up_proto, &up_len);
	if (proto_len && (up_len != proto_len || memcmp(up_proto, proto, proto_len) != 0)) {
		conn_fail(c, "the upstream did not accept the client's ALPN protocol", 0);
		return -1;
	}
	for (int i = 0; i < 2; i++) {
		set_timeouts(c->fd[i], 0);
		if (set_nonblocking(c->fd[i], true) != 0) {
			conn_fail(c, "O_NONBLOCK", errno);
			return -1;
		}
	}
	return 0;
}

/*
 * One round of @d: what the destination still holds goes first; then the source is read until
 * it has nothing more or the plaintext buffer is full, and that is one SSL_write, its records
 * sent with one send(). 0: go on (poll); -1: the connection fails.
 */
static int dir_round(struct conn *c, struct dir *d)
{
	int s = d->src, t = 1 - d->src;
	int rc = out_flush(&c->o[t]);
	if (rc == -EAGAIN)
		return 0;
	if (rc < 0) {
		conn_fail(c, t ? "send to the upstream" : "send to the client", -rc);
		return -1;
	}
	if (d->eof) {
		if (d->clean && !d->shut) { /* once: a second call would wait for the peer's */
			d->shut = true;
			if (SSL_shutdown(c->ssl[t]) < 0) {
				conn_fail(c, "SSL_shutdown", 0);
				return -1;
			}
		}
		if ((rc = out_flush(&c->o[t])) == -EAGAIN)
			return 0;
		shutdown(c->fd[t], SHUT_WR);
		d->done = true;
		return 0;
	}
	if (!d->ready)
		return 0;
	size_t n = 0;
	d->want_src_write = false;
	d->full = false;
	while (n < buf_bytes) {
		int r = SSL_read(c->ssl[s], c->plain + n, (int)(buf_bytes - n));
		if (r > 0) {
			n += (size_t)
			        r; /* and on: a round as large as the socket has (one send()) */
			continue;
		}
		int e = SSL_get_error(c->ssl[s], r);
		if (e == SSL_ERROR_WANT_READ)
			break;
		if (e == SSL_ERROR_WANT_WRITE) { /* a post-handshake answer waits for the socket */
			d->want_src_write = true;
			break;
		}
		/* A TCP FIN without close_notify is passed on as a FIN alone (no close_notify
		 * made up): OpenSSL 3 reports it as SSL_R_UNEXPECTED_EOF_WHILE_READING. */
		unsigned long le = ERR_peek_error();
		if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && le == 0) ||
		    (e == SSL_ERROR_SSL &&
		     ERR_GET_REASON(le) == SSL_R_UNEXPECTED_EOF_WHILE_READING)) {
			ERR_clear_error();
			d->eof = true;
			d->clean = e == SSL_ERROR_ZERO_RETURN;
			break;
		}
		conn_fail(c, s ? "read from the upstream" : "read from the client",
		          e == SSL_ERROR_SYSCALL ? errno : 0);
		return -1;
	}
	d->full = n == buf_bytes;
	d->ready = d->full;
	if (n && SSL_write(c->ssl[t], c->plain, (int)n) != (int)n) {
		conn_fail(c, "SSL_write", 0);
		return -1;
	}
	rc = out_flush(&c->o[t]);
	if (rc < 0 && rc != -EAGAIN) {
		conn_fail(c, t ? "send to the upstream" : "send to the client", -rc);
		return -1;
	}
	return d->eof ? dir_round(c, d) : 0;
}

static void conn_relay(struct conn *c)
{
	/* Both ready at first: the handshakes' read-ahead may hold the first bytes already. */
	struct dir dirs[2] = {{.src = 0, .ready = true}, {.src = 1, .ready = true}};
	for (;;) {
		for (int i = 0; i < 2; i++)
			if (!dirs[i].done && dir_round(c, &dirs[i]) != 0)
				return;
		/* What an SSL_read wrote (a KeyUpdate's answer) goes out too. */
		for (int i = 0; i < 2; i++) {
			int rc = out_flush(&c->o[i]);
			if (rc < 0 && rc != -EAGAIN) {
				conn_fail(c, "send", -rc);
				return;
			}
		}
		if (dirs[0].done && dirs[1].done)
			return;
		struct pollfd p[2] = {{.fd = c->fd[0]}, {.fd = c->fd[1]}};
		int timeout_ms = -1;
		for (int i = 0; i < 2; i++) {
			struct dir *d = &dirs[i];
			int s = d->src, t = 1 - d->src;
			if (d->done)
				continue;
			if (c->o[t].off < c->o[t].len)
				p[t].events |= POLLOUT;
			else if (d->want_src_write)
				p[s].events |= POLLOUT;
			else if (d->full)
				timeout_ms = 0; /* read on: records may wait in OpenSSL's buffer */
			else if (!d->eof)
				p[s].events |= POLLIN;
		}
		for (int i = 0; i < 2; i++)
			if (c->o[i].off < c->o[i].len)
				p[i].events |= POLLOUT;
		if (poll(p, 2, timeout_ms) < 0 && errno != EINTR) {
			conn_fail(c, "poll", errno);
			return;
		}
		/* An error or hang-up is read (and reported) in the direction's round. */
		for (int i = 0; i < 2; i++) {
			struct dir *d = &dirs[i];
			short ev = p[d->src].revents;
			if ((ev & (POLLIN | POLLERR | POLLHUP)) ||
			    (d->want_src_write && (ev & POLLOUT)))
				d->ready = true;
		}
	}
}

static void *conn_main(void *arg)
{
	struct conn *c = arg;
	size_t out_cap = buf_bytes + buf_bytes / 512 + OUT_SLACK_BYTES;
	c->plain = malloc(buf_bytes);
	c->o[0].buf = malloc(out_cap);
	c->o[1].buf = malloc(out_cap);
	c->o[0].cap = c->o[1].cap = out_cap;
	c->o[0].fd = c->fd[0];
	if (!c->plain || !c->o[0].buf || !c->o[1].buf)
		conn_fail(c, "out of memory", 0);
	else if (conn_open(c) == 0)
		conn_relay(c);
	for (int i = 0; i < 2; i++) {
		SSL_free(c->ssl[i]);
		if (c->fd[i] >= 0)
			close(c->fd[i]);
		free(c->o[i].buf);
	}
	free(c->plain);
	free(c);
	ERR_clear_error();
	return NULL;
}

/* ---- start-up -------------------------------------------------------------------------------- */

static void die(const char *what)
{
	unsigned long e = ERR_get_error();
	char ssl_err[200] = "";
	if (e)
		ERR_error_string_n(e, ssl_err, sizeof ssl_err);
	fprintf(stderr, "tls_relay_floor: %s%s%s\n", what, e ? ": " : "", ssl_err);
	exit(1);
}

/* What both contexts share: no buffers released between records (a relay moving bulk wants
 * them kept), read-ahead with room for --buffer-kib of records per read(). */
static void bulk_ctx(SSL_CTX *ctx)
{
	SSL_CTX_clear_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
	SSL_CTX_set_read_ahead(ctx, 1);
	SSL_CTX_set_default_read_buffer_len(ctx, buf_bytes + buf_bytes / 512 + 512);
}

static void make_contexts(void)
{
	if ((srv_ctx = SSL_CTX_new(TLS_server_method())) == NULL)
		die("SSL_CTX_new");
	SSL_CTX_set_min_proto_version(srv_ctx, TLS1_2_VERSION);
	if (SSL_CTX_use_certificate_chain_file(srv_ctx, o.cert) != 1)
		die("cannot load --cert");
	if (SSL_CTX_use_PrivateKey_file(srv_ctx, o.key, SSL_FILETYPE_PEM) != 1 ||
	    SSL_CTX_check_private_key(srv_ctx) != 1)
		die("cannot load --key (or it does not match --cert)");
	st_tls_prefer_aes128(srv_ctx, true);
	if (alpn_wire_len)
		SSL_CTX_set_alpn_select_cb(srv_ctx, on_alpn, NULL);
	bulk_ctx(srv_ctx);

	if (o.insecure) {
		if ((cli_ctx = SSL_CTX_new(TLS_client_method())) == NULL)
			die("SSL_CTX_new");
		SSL_CTX_set_min_proto_version(cli_ctx, TLS1_2_VERSION);
		st_tls_prefer_aes128(cli_ctx, false);
		if (o.up_cert &&
		    (SSL_CTX_use_certificate_chain_file(cli_ctx, o.up_cert) != 1 ||
		     SSL_CTX_use_PrivateKey_file(cli_ctx, o.up_key, SSL_FILETYPE_PEM) != 1))
			die("cannot load --upstream-cert / --upstream-key");
	} else {
		char err[800];
		cli_ctx = st_tls_client_ctx(o.up_cert, o.up_key, o.up_ca, false, err, sizeof err);
		if (cli_ctx == NULL) {
			fprintf(stderr, "tls_relay_floor: upstream: %s\n", err);
			exit(1);
		}
	}
	bulk_ctx(cli_ctx);
}

/* --alpn "a,b" into ALPN's wire format (length-prefixed names). */
static void parse_alpn(void)
{
	const char *p = o.alpn;
	while (*p) {
		const char *end = strchr(p, ',');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		if (n == 0 || n > 255 || alpn_wire_len + 1 + n > sizeof alpn_wire) {
			fprintf(stderr, "tls_relay_floor: bad --alpn \"%s\"\n", o.alpn);
			exit(2);
		}
		alpn_wire[alpn_wire_len] = (unsigned char)n;
		memcpy(alpn_wire + alpn_wire_len + 1, p, n);
		alpn_wire_len += 1 + n;
		p += n + (end ? 1 : 0);
	}
}

static void resolve_upstream(void)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai;
	char port[16];
	snprintf(port, sizeof port, "%d", o.up_port);
	int rc = getaddrinfo(o.up_host, port, &hints, &ai);
	if (rc != 0) {
		fprintf(stderr, "tls_relay_floor: --upstream-host %s: %s\n", o.up_host,
		        gai_strerror(rc));
		exit(1);
	}
	memcpy(&up_addr, ai->ai_addr, ai->ai_addrlen);
	up_addr_len = ai->ai_addrlen;
	freeaddrinfo(ai);
}

static int listen_on(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)o.port)};
	if (inet_pton(AF_INET, o.host, &a.sin_addr) != 1) {
		fprintf(stderr, "tls_relay_floor: --host %s is not an IPv4 address\n", o.host);
		exit(2);
	}
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	if (fd < 0)
		die("socket");
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 128) != 0) {
		fprintf(stderr, "tls_relay_floor: listen on %s:%d: %s\n", o.host, o.port,
		        strerror(errno));
		exit(1);
	}
	socklen_t len = sizeof a;
	getsockname(fd, (struct sockaddr *)&a, &len);
	o.port = ntohs(a.sin_port);
	return fd;
}

static void write_ready(void)
{
	if (!o.ready_file)
		return;
	char tmp[4096];
	snprintf(tmp, sizeof tmp, "%s.tmp", o.ready_file);
	FILE *f = fopen(tmp, "w");
	if (!f || fprintf(f, "port=%d\n", o.port) < 0 || fclose(f) != 0 ||
	    rename(tmp, o.ready_file) != 0) {
		fprintf(stderr, "tls_relay_floor: --ready-file %s: %s\n", o.ready_file,
		        strerror(errno));
		exit(1);
	}
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			fputs(help_text, stdout);
			return 0;
		}
	bench_parse_args(&cli, argc, argv);
	if (!o.insecure && !o.up_ca) {
		fprintf(stderr,
		        "tls_relay_floor: --upstream-ca FILE or --upstream-insecure needed\n");
		return 2;
	}
	if (!o.up_cert != !o.up_key) {
		fprintf(stderr,
		        "tls_relay_floor: --upstream-cert and --upstream-key go together\n");
		return 2;
	}
	if (o.buffer_kib < 16 || o.buffer_kib > 16384) {
		fprintf(stderr, "tls_relay_floor: --buffer-kib must be in [16, 16384]\n");
		return 2;
	}
	buf_bytes = (size_t)o.buffer_kib << 10;
	parse_alpn();
	signal(SIGPIPE, SIG_IGN);
	if ((out_method = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "relay out")) ==
	            NULL ||
	    !BIO_meth_set_write(out_method, out_bio_write) ||
	    !BIO_meth_set_ctrl(out_method, out_bio_ctrl))
		die("BIO_meth_new");
	make_contexts();
	resolve_upstream();
	int lfd = listen_on();
	bench_catch_stop();
	write_ready();

	/* Connection threads never take SIGTERM/SIGINT: accept() here returns EINTR. */
	sigset_t stop, old;
	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	unsigned long next_id = 1;
	while (!bench_stop) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno != EINTR && errno != ECONNABORTED)
				fprintf(stderr, "tls_relay_floor: accept: %s\n", strerror(errno));
			if (errno == EMFILE || errno == ENFILE)
				sleep(1);
			continue;
		}
		struct conn *c = calloc(1, sizeof *c);
		if (c == NULL) {
			close(fd);
			continue;
		}
		c->id = next_id++;
		c->fd[0] = fd;
		c->fd[1] = -1;
		pthread_t t;
		pthread_sigmask(SIG_BLOCK, &stop, &old);
		int rc = pthread_create(&t, &attr, conn_main, c);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		if (rc != 0) {
			fprintf(stderr, "tls_relay_floor: pthread_create: %s\n", strerror(rc));
			close(fd);
			free(c);
		}
	}
	pthread_attr_destroy(&attr);
	close(lfd);
	return 0;
}
