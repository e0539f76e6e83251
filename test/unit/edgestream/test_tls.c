/* Unit tests for the memory-BIO TLS client (edgestream/src/tls.h) against an in-memory OpenSSL
 * server, with certificates minted for the test: the handshake, the peer's name and CA checked,
 * data both ways, close_notify, session resumption and a server that refuses it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>

#include <certs/certs.h>

#include "testutil.h"
#include "tls.h"

static char dir[256];
static char ca[300], other_ca[300], srv_crt[300], srv_key[300], cli_crt[300], cli_key[300];

struct server {
	SSL_CTX *ctx;
	SSL *ssl;
	BIO *rbio, *wbio;
};

static int setup(void **state)
{
	(void)state;
	char err[256];
	if (test_mkdtemp(dir, sizeof dir, "tls") < 0)
		return -1;
	char ca_key[300], other_key[300];
	snprintf(ca, sizeof ca, "%s/ca.crt", dir);
	snprintf(ca_key, sizeof ca_key, "%s/ca.key", dir);
	snprintf(other_ca, sizeof other_ca, "%s/other.crt", dir);
	snprintf(other_key, sizeof other_key, "%s/other.key", dir);
	snprintf(srv_crt, sizeof srv_crt, "%s/srv.crt", dir);
	snprintf(srv_key, sizeof srv_key, "%s/srv.key", dir);
	snprintf(cli_crt, sizeof cli_crt, "%s/cli.crt", dir);
	snprintf(cli_key, sizeof cli_key, "%s/cli.key", dir);
	struct certs_key_opts k = {.type = CERTS_KEY_EC_P256};
	const char *dns[] = {"kubelet.test"};
	const char *ips[] = {"127.0.0.1"};
	struct certs_leaf_opts srv = {.key = k,
	                              .cn = "kubelet",
	                              .dns = dns,
	                              .num_dns = 1,
	                              .ips = ips,
	                              .num_ips = 1,
	                              .usage = CERTS_USAGE_SERVER,
	                              .days = 1};
	struct certs_leaf_opts cli = {
	        .key = k, .cn = "edgestream", .usage = CERTS_USAGE_CLIENT, .days = 1};
	if (certs_create_ca(ca, ca_key, "test CA", &k, 1, CERTS_WRITE_NEW, err, sizeof err) < 0 ||
	    certs_create_ca(other_ca, other_key, "other CA", &k, 1, CERTS_WRITE_NEW, err,
	                    sizeof err) < 0 ||
	    certs_issue(ca, ca_key, srv_crt, srv_key, &srv, CERTS_WRITE_NEW, err, sizeof err) < 0 ||
	    certs_issue(ca, ca_key, cli_crt, cli_key, &cli, CERTS_WRITE_NEW, err, sizeof err) < 0) {
		fprintf(stderr, "minting test certificates: %s\n", err);
		return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	rmtree(dir);
	return 0;
}

static void server_again(struct server *s);

static void server_new(struct server *s, bool require_client_cert)
{
	s->ctx = SSL_CTX_new(TLS_server_method());
	assert_non_null(s->ctx);
	assert_int_equal(SSL_CTX_use_certificate_chain_file(s->ctx, srv_crt), 1);
	assert_int_equal(SSL_CTX_use_PrivateKey_file(s->ctx, srv_key, SSL_FILETYPE_PEM), 1);
	if (require_client_cert) {
		assert_int_equal(SSL_CTX_load_verify_locations(s->ctx, ca, NULL), 1);
		SSL_CTX_set_verify(s->ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
	}
	s->ssl = NULL;
	server_again(s);
}

/* A (new) connection on the server context (whose session tickets stay valid). */
static void server_again(struct server *s)
{
	SSL_free(s->ssl);
	s->ssl = SSL_new(s->ctx);
	s->rbio = BIO_new(BIO_s_mem());
	s->wbio = BIO_new(BIO_s_mem());
	BIO_set_mem_eof_return(s->rbio, -1);
	SSL_set_bio(s->ssl, s->rbio, s->wbio);
	SSL_set_accept_state(s->ssl);
}

static void server_free(struct server *s)
{
	SSL_free(s->ssl);
	SSL_CTX_free(s->ctx);
	ERR_clear_error();
}

/* Lends @n bytes and keeps what the client does not read of them at once: the tests reuse their
 * buffers and feed several times before reading. */
static int feed(struct es_tls *c, const uint8_t *p, size_t n)
{
	int r = es_tls_feed(c, p, n);
	return r ? r : es_tls_keep(c);
}

/* Moves bytes both ways until neither side has anything to say; returns the handshake result. */
static int pump(struct es_tls *c, struct server *s)
{
	int hs = 0;
	uint8_t buf[65536];
	for (int round = 0; round < 20; round++) {
		hs = es_tls_handshake(c);
		size_t n = es_tls_take(c, buf, sizeof buf);
		if (n)
			BIO_write(s->rbio, buf, (int)n);
		SSL_do_handshake(s->ssl);
		ERR_clear_error(); /* the server's failures are not the client's to report */
		int m = BIO_read(s->wbio, buf, sizeof buf);
		if (m > 0)
			assert_int_equal(feed(c, buf, (size_t)m), 0);
		if (hs != 0 || (n == 0 && m <= 0))
			break;
	}
	return hs != 0 ? hs : es_tls_handshake(c);
}

static void test_es_tls__handshake_data_and_close(void **state)
{
	(void)state;
	char err[256];
	SSL_CTX *cctx = es_tls_client_ctx(cli_crt, cli_key, ca, err, sizeof err);
	assert_non_null(cctx);
	struct server s;
	server_new(&s, true);
	struct es_tls c;
	assert_int_equal(es_tls_start(&c, cctx, "kubelet.test"), 0);
	assert_int_equal(pump(&c, &s), 1);
	/* client → server */
	const char req[] = "GET /metrics HTTP/1.1\r\n\r\n";
	assert_int_equal(es_tls_write(&c, (const uint8_t *)req, sizeof req - 1), 0);
	uint8_t buf[65536];
	size_t n = es_tls_take(&c, buf, sizeof buf);
	BIO_write(s.rbio, buf, (int)n);
	char got[128];
	int r = SSL_read(s.ssl, got, sizeof got);
	assert_int_equal(r, sizeof req - 1);
	assert_memory_equal(got, req, sizeof req - 1);
	/* server → client, more than one record, then close_notify */
	static uint8_t big[100000];
	for (size_t i = 0; i < sizeof big; i++)
		big[i] = (uint8_t)(i * 7);
	assert_int_equal(SSL_write(s.ssl, big, sizeof big), (int)sizeof big);
	SSL_shutdown(s.ssl);
	size_t total = 0;
	uint8_t out[16384];
	for (;;) {
		int m = BIO_read(s.wbio, buf, sizeof buf);
		if (m <= 0)
			break;
		assert_int_equal(feed(&c, buf, (size_t)m), 0);
	}
	ssize_t k;
	while ((k = es_tls_read(&c, out, sizeof out)) > 0) {
		assert_memory_equal(out, big + total, (size_t)k);
		total += (size_t)k;
	}
	assert_int_equal(total, sizeof big);
	assert_int_equal(k, -EPIPE);
	es_tls_close_notify(&c);
	assert_true(es_tls_pending(&c) > 0);
	es_tls_free(&c);
	server_free(&s);
	SSL_CTX_free(cctx);
}

/* A connection that ended cleanly leaves its session to the next one: an abbreviated handshake
 * (TLS 1.3 tickets arrive after the handshake, with the first data). */
static void test_es_tls__resumes_the_last_session(void **state)
{
	(void)state;
	char err[256];
	SSL_CTX *cctx = es_tls_client_ctx(cli_crt, cli_key, ca, err, sizeof err);
	assert_non_null(cctx);
	struct server s;
	server_new(&s, true);
	SSL_CTX_set_session_id_context(s.ctx, (const unsigned char *)"t", 1);
	server_again(&s); /* a connection made after the context is complete */
	for (int i = 0; i < 3; i++) {
		struct es_tls c;
		assert_int_equal(es_tls_start(&c, cctx, "kubelet.test"), 0);
		assert_int_equal(c.offered_session, i > 0);
		assert_int_equal(pump(&c, &s), 1);
		assert_int_equal(SSL_session_reused(c.ssl), i > 0);
		assert_false(es_tls_resumption_refused(&c));
		assert_int_equal(SSL_write(s.ssl, "ok", 2), 2);
		uint8_t buf[65536], out[16];
		int m;
		while ((m = BIO_read(s.wbio, buf, sizeof buf)) > 0)
			assert_int_equal(feed(&c, buf, (size_t)m), 0);
		assert_int_equal(es_tls_read(&c, out, sizeof out), 2);
		es_tls_free(&c);
		server_again(&s);
	}
	server_free(&s);
	SSL_CTX_free(cctx);
}

/* The server answers "ok" and the client reads it: the TLS 1.3 tickets come with it. */
static void exchange(struct es_tls *c, struct server *s)
{
	uint8_t buf[65536], out[16];
	int m;
	assert_int_equal(SSL_write(s->ssl, "ok", 2), 2);
	while ((m = BIO_read(s->wbio, buf, sizeof buf)) > 0)
		assert_int_equal(feed(c, buf, (size_t)m), 0);
	assert_int_equal(es_tls_read(c, out, sizeof out), 2);
	assert_memory_equal(out, "ok", 2);
}

/*
 * An OpenSSL server that requires client certificates and has no session id context (socat's
 * OPENSSL-LISTEN with verify=1) fails a resumption with an internal_error alert: that is a
 * refusal. Once resumption is stopped on the context, no session is offered or kept, and full
 * handshakes work. TLS 1.2 (session ids or tickets) and TLS 1.3 (PSK) alike.
 */
static void test_es_tls_resumption_refused__then_full_handshakes(void **state)
{
	(void)state;
	const int versions[] = {TLS1_2_VERSION, TLS1_3_VERSION};
	for (size_t v = 0; v < sizeof versions / sizeof versions[0]; v++) {
		char err[256];
		SSL_CTX *cctx = es_tls_client_ctx(cli_crt, cli_key, ca, err, sizeof err);
		assert_non_null(cctx);
		struct server s;
		server_new(&s, true); /* no SSL_CTX_set_session_id_context */
		assert_int_equal(SSL_CTX_set_max_proto_version(s.ctx, versions[v]), 1);
		server_again(&s);
		struct es_tls c;
		/* 1: a full handshake leaves a session in the context */
		assert_int_equal(es_tls_start(&c, cctx, "kubelet.test"), 0);
		assert_false(c.offered_session);
		assert_int_equal(pump(&c, &s), 1);
		exchange(&c, &s);
		es_tls_free(&c);
		server_again(&s);
		/* 2: offered, refused with an alert */
		assert_int_equal(es_tls_start(&c, cctx, "kubelet.test"), 0);
		assert_true(c.offered_session);
		assert_int_equal(pump(&c, &s), -EPROTO);
		assert_true(es_tls_resumption_refused(&c));
		assert_non_null(strstr(es_tls_error(&c), "alert internal error"));
		assert_int_equal(ERR_peek_error(), 0); /* drained into c.error */
		es_tls_free(&c);
		server_again(&s);
		/* the sticky switch: true the first time only */
		assert_true(es_tls_resuming(cctx));
		assert_true(es_tls_stop_resuming(cctx));
		assert_false(es_tls_resuming(cctx));
		assert_false(es_tls_stop_resuming(cctx));
		/* 3, 4: full handshakes, and the new tickets are not kept */
		for (int i = 0; i < 2; i++) {
			assert_int_equal(es_tls_start(&c, cctx, "kubelet.test"), 0);
			assert_false(c.offered_session);
			assert_int_equal(pump(&c, &s), 1);
			assert_int_equal(SSL_session_reused(c.ssl), 0);
			exchange(&c, &s);
			es_tls_free(&c);
			server_again(&s);
		}
		server_free(&s);
		SSL_CTX_free(cctx);
	}
}

/* A session offered to a server that cannot take it (other ticket keys) falls back to a full
 * handshake; a certificate that then fails our check is a failure, not a refused resumption. */
static void test_es_tls_resumption_refused__not_for_our_own_checks(void **state)
{
	(void)state;
	char err[256];
	SSL_CTX *cctx = es_tls_client_ctx(cli_crt, cli_key, ca, err, sizeof err);
	assert_non_null(cctx);
	struct server s;
	server_new(&s, true);
	SSL_CTX_set_session_id_context(s.ctx, (const unsigned char *)"t", 1);
	server_again(&s);
	struct es_tls c;
	assert_int_equal(es_tls_start(&c, cctx, "kubelet.test"), 0);
	assert_int_equal(pump(&c, &s), 1);
	exchange(&c, &s);
	es_tls_free(&c);
	server_free(&s);
	server_new(&s, true); /* a new context: the ticket means nothing to it */
	assert_int_equal(es_tls_start(&c, cctx, "wrong.test"), 0);
	assert_true(c.offered_session);
	assert_int_equal(pump(&c, &s), -EPROTO);
	assert_non_null(strstr(es_tls_error(&c), "hostname mismatch"));
	assert_false(es_tls_resumption_refused(&c));
	assert_true(es_tls_resuming(cctx));
	es_tls_free(&c);
	server_free(&s);
	SSL_CTX_free(cctx);
}

static void test_es_tls__refuses_wrong_name_and_other_ca(void **state)
{
	(void)state;
	char err[256];
	SSL_CTX *cctx = es_tls_client_ctx(cli_crt, cli_key, ca, err, sizeof err);
	SSL_CTX *other = es_tls_client_ctx(cli_crt, cli_key, other_ca, err, sizeof err);
	assert_non_null(cctx);
	assert_non_null(other);
	struct {
		SSL_CTX *ctx;
		const char *host;
		const char *why;
	} cases[] = {
	        {cctx, "127.0.0.1", NULL},
	        {cctx, "wrong.test", "hostname mismatch"},
	        {cctx, "127.0.0.2", "IP address mismatch"},
	        {other, "kubelet.test", "unable to get local issuer certificate"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct server s;
		server_new(&s, false);
		struct es_tls c;
		assert_int_equal(es_tls_start(&c, cases[i].ctx, cases[i].host), 0);
		int hs = pump(&c, &s);
		if (cases[i].why == NULL) {
			assert_int_equal(hs, 1);
		} else {
			assert_int_equal(hs, -EPROTO);
			assert_non_null(strstr(es_tls_error(&c), cases[i].why));
			assert_false(es_tls_resumption_refused(&c)); /* nothing was offered */
		}
		es_tls_free(&c);
		server_free(&s);
	}
	SSL_CTX_free(cctx);
	SSL_CTX_free(other);
}

/* OpenSSL's allocations made while `tracking` is on and still live (CRYPTO_set_mem_functions,
 * installed first thing in main): what the objects made meanwhile hold. */
#define TRACK_MAX 16384
static struct {
	void *p;
	size_t n;
} tracked[TRACK_MAX];
static bool tracking;
static size_t track_n, track_hi; /* live entries; slots in use are all below track_hi */

static void track_add(void *p, size_t n)
{
	for (size_t i = 0; p && i < TRACK_MAX; i++)
		if (tracked[i].p == NULL) {
			tracked[i].p = p;
			tracked[i].n = n;
			track_n++;
			track_hi = i + 1 > track_hi ? i + 1 : track_hi;
			return;
		}
}

static bool track_del(void *p)
{
	for (size_t i = 0; p && track_n > 0 && i < track_hi; i++)
		if (tracked[i].p == p) {
			tracked[i].p = NULL;
			track_n--;
			return true;
		}
	return false;
}

static void *t_malloc(size_t n, const char *file, int line)
{
	(void)file, (void)line;
	void *p = malloc(n);
	if (tracking)
		track_add(p, n);
	return p;
}

static void *t_realloc(void *q, size_t n, const char *file, int line)
{
	(void)file, (void)line;
	bool was = track_del(q); /* looked up before @q may be freed */
	void *p = realloc(q, n);
	if (p == NULL && n > 0) {
		if (was)
			track_add(q, 0); /* @q stays; its size no longer matters here */
		return NULL;
	}
	if (was || tracking)
		track_add(p, n);
	return p;
}

static void t_free(void *p, const char *file, int line)
{
	(void)file, (void)line;
	track_del(p);
	free(p);
}

/* Bytes of the live tracked allocations, and the largest of them. */
static size_t held(size_t *largest)
{
	size_t sum = 0, big = 0;
	for (size_t i = 0; i < TRACK_MAX; i++)
		if (tracked[i].p) {
			sum += tracked[i].n;
			big = tracked[i].n > big ? tracked[i].n : big;
		}
	if (largest)
		*largest = big;
	return sum;
}

/*
 * A connection holds only what is in flight: after a burst that grew its buffers (a 100 KB
 * answer fed at once, a 64 KiB write), es_tls_trim leaves no record buffer and no grown memory
 * BIO; a partial record waiting for its end stays, and the connection works on.
 */
/* es_tls_feed lends its bytes: read to the end, the buffer may be reused at once; a caller that
 * stops early keeps the rest (copied), which is read first and matches byte for byte. */
static void test_es_tls_feed__lends_and_keeps(void **state)
{
	(void)state;
	char err[256];
	SSL_CTX *cctx = es_tls_client_ctx(cli_crt, cli_key, ca, err, sizeof err);
	assert_non_null(cctx);
	struct server s;
	server_new(&s, true);
	struct es_tls c;
	assert_int_equal(es_tls_start(&c, cctx, "kubelet.test"), 0);
	assert_int_equal(pump(&c, &s), 1);
	static uint8_t big[40000], out[65536], wire[65536];
	for (size_t i = 0; i < sizeof big; i++)
		big[i] = (uint8_t)(i * 13);
	/* lent and read to the end (the tickets too); then the buffer is scribbled over */
	assert_int_equal(SSL_write(s.ssl, big, sizeof big), (int)sizeof big);
	int m = BIO_read(s.wbio, wire, sizeof wire);
	assert_true(m > (int)sizeof big);
	assert_int_equal(es_tls_feed(&c, wire, (size_t)m), 0);
	size_t total = 0;
	ssize_t k;
	while ((k = es_tls_read(&c, out + total, sizeof out - total)) > 0)
		total += (size_t)k;
	assert_int_equal(k, 0);
	assert_int_equal(total, sizeof big);
	assert_memory_equal(out, big, sizeof big);
	memset(wire, 0xee, sizeof wire);
	/* lent, one record read, the rest kept; the buffer scribbled over before the rest is read */
	assert_int_equal(SSL_write(s.ssl, big, sizeof big), (int)sizeof big);
	m = BIO_read(s.wbio, wire, sizeof wire);
	assert_int_equal(es_tls_feed(&c, wire, (size_t)m), 0);
	k = es_tls_read(&c, out, sizeof out);
	assert_int_equal(k, 16384);
	assert_int_equal(es_tls_keep(&c), 0);
	memset(wire, 0xee, sizeof wire);
	total = (size_t)k;
	while ((k = es_tls_read(&c, out + total, sizeof out - total)) > 0)
		total += (size_t)k;
	assert_int_equal(k, 0);
	assert_int_equal(total, sizeof big);
	assert_memory_equal(out, big, sizeof big);
	es_tls_free(&c);
	server_free(&s);
	SSL_CTX_free(cctx);
}

static void test_es_tls_trim__holds_nothing_between_bursts(void **state)
{
	(void)state;
	char err[256];
	SSL_CTX *cctx = es_tls_client_ctx(cli_crt, cli_key, ca, err, sizeof err);
	assert_non_null(cctx);
	es_tls_stop_resuming(cctx); /* no session kept in the context: count the connection's */
	struct server s;
	server_new(&s, true);
	struct es_tls c;
	tracking = true;
	assert_int_equal(es_tls_start(&c, cctx, "kubelet.test"), 0);
	assert_int_equal(pump(&c, &s), 1);
	static uint8_t big[100000], out[16384];
	uint8_t buf[65536];
	memset(big, 'x', sizeof big);
	/* a big write: the write BIO grows to hold it */
	assert_int_equal(es_tls_write(&c, big, sizeof buf), 0);
	size_t n;
	while ((n = es_tls_take(&c, buf, sizeof buf)) > 0)
		BIO_write(s.rbio, buf, (int)n);
	/* a big answer, fed at once and kept: the read side holds it only until it is read */
	assert_int_equal(SSL_write(s.ssl, big, sizeof big), (int)sizeof big);
	static uint8_t wire[200000];
	size_t wire_len = 0;
	int m;
	while ((m = BIO_read(s.wbio, wire + wire_len, (int)(sizeof wire - wire_len))) > 0)
		wire_len += (size_t)m;
	assert_int_equal(feed(&c, wire, wire_len), 0);
	size_t total = 0;
	ssize_t k;
	while ((k = es_tls_read(&c, out, sizeof out)) > 0)
		total += (size_t)k;
	assert_int_equal(k, 0);
	assert_int_equal(total, sizeof big);
	tracking = false;
	server_free(&s); /* its allocations are not the client's */
	size_t largest, before = held(&largest);
	assert_true(largest >= 16384); /* a record buffer, or a grown BIO */
	es_tls_trim(&c);
	size_t after = held(&largest);
	/* Freed: the grown write BIO (the 64 KiB write) and OpenSSL's record buffers (the kept
	 * 100 KB answer went once read). Left: the SSL object (7.6 KB, the largest), the session
	 * and its peer certificate, cipher state: about 21 KB, no buffer. */
	assert_true(before - after >= 65536);
	assert_true(before < 65536 + 32768 + 2 * 17408); /* the kept answer is not held any more */
	assert_true(largest < 16384);
	assert_true(after < 32768);
	es_tls_trim(&c); /* nothing more to free */
	assert_int_equal(held(NULL), after);
	/* A partial record stays; the connection reads on. */
	server_new(&s, true);
	es_tls_free(&c);
	assert_int_equal(es_tls_start(&c, cctx, "kubelet.test"), 0);
	assert_int_equal(pump(&c, &s), 1);
	assert_int_equal(SSL_write(s.ssl, "hello", 5), 5);
	m = BIO_read(s.wbio, buf, sizeof buf);
	assert_true(m > 5);
	assert_int_equal(feed(&c, buf, 3), 0);
	assert_int_equal(es_tls_read(&c, out, sizeof out), 0);
	es_tls_trim(&c);
	assert_int_equal(feed(&c, buf + 3, (size_t)m - 3), 0);
	assert_int_equal(es_tls_read(&c, out, sizeof out), 5);
	assert_memory_equal(out, "hello", 5);
	es_tls_free(&c);
	server_free(&s);
	SSL_CTX_free(cctx);
	tracking = false;
}

static void test_es_tls_client_ctx__bad_files(void **state)
{
	(void)state;
	char err[512];
	assert_null(es_tls_client_ctx(cli_crt, srv_key, ca, err, sizeof err)); /* key mismatch */
	assert_non_null(strstr(err, "client certificate"));
	assert_null(es_tls_client_ctx(NULL, NULL, "/nonexistent/ca.crt", err, sizeof err));
	assert_non_null(strstr(err, "/nonexistent/ca.crt"));
	SSL_CTX *ctx = es_tls_client_ctx(NULL, NULL, ca, err, sizeof err); /* no client cert */
	assert_non_null(ctx);
	SSL_CTX_free(ctx);
}

int main(void)
{
	/* Before OpenSSL allocates anything (later calls are refused). */
	if (!CRYPTO_set_mem_functions(t_malloc, t_realloc, t_free))
		return 1;
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_es_tls__handshake_data_and_close),
	        cmocka_unit_test(test_es_tls__resumes_the_last_session),
	        cmocka_unit_test(test_es_tls_resumption_refused__then_full_handshakes),
	        cmocka_unit_test(test_es_tls_resumption_refused__not_for_our_own_checks),
	        cmocka_unit_test(test_es_tls__refuses_wrong_name_and_other_ca),
	        cmocka_unit_test(test_es_tls_feed__lends_and_keeps),
	        cmocka_unit_test(test_es_tls_trim__holds_nothing_between_bursts),
	        cmocka_unit_test(test_es_tls_client_ctx__bad_files),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
