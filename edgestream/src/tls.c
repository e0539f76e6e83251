/*
 * edgestream/src/tls.c — TLS client over BIOs in memory (tls.h).
 */
#include "tls.h"

#include <stream/tlsctx.h>

#include <pthread.h>

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/x509v3.h>

/* Writes @what and the first queued OpenSSL error into @out and drains the queue. Returns whether
 * one of the errors is a fatal alert the peer sent (OpenSSL queues it as SSL_AD_REASON_OFFSET +
 * the alert's description). */
static bool openssl_reason(char *out, size_t cap, const char *what)
{
	unsigned long e, first = 0;
	bool peer_alert = false;
	while ((e = ERR_get_error()) != 0) {
		if (first == 0)
			first = e;
		if (ERR_GET_LIB(e) == ERR_LIB_SSL && ERR_GET_REASON(e) >= SSL_AD_REASON_OFFSET)
			peer_alert = true;
	}
	char buf[200] = "";
	if (first)
		ERR_error_string_n(first, buf, sizeof buf);
	snprintf(out, cap, "%s%s%s", what, buf[0] ? ": " : "", buf);
	return peer_alert;
}

/* The buffer for why a call failed, allocated at the first failure; NULL without memory (the
 * failure is still returned, only its text is lost). */
static char *error_buf(struct es_tls *t)
{
	t->failed = true;
	if (t->error == NULL)
		t->error = malloc(ES_TLS_ERROR_BYTES);
	return t->error;
}

/* Sets the error text from @what and OpenSSL's queue (openssl_reason). */
static bool set_openssl_error(struct es_tls *t, const char *what)
{
	char *out = error_buf(t);
	if (out == NULL) {
		ERR_clear_error();
		return false;
	}
	return openssl_reason(out, ES_TLS_ERROR_BYTES, what);
}

/*
 * Session resumption toward the one backend a context serves (the kubelet): the newest session
 * ticket is kept in the context and offered by the next connection, so a short request pays an
 * abbreviated handshake (no certificate chain sent or verified again) instead of a full one. The
 * context belongs to the loop thread, so one slot needs no lock.
 *
 * A backend that refuses resumption outright (es_tls_resumption_refused) turns it off for the
 * context for good: the client session cache mode goes to OFF, so OpenSSL stops handing new
 * sessions to on_new_session, and the slot is emptied. The cache mode is the flag itself, so
 * there is no second copy of it to keep in step.
 */
/* One ex_data index for the whole process, taken once: instances on several threads may make
 * their contexts at the same time (pthread_once, not a racy check). */
static int session_slot = -1;
static pthread_once_t session_slot_once = PTHREAD_ONCE_INIT;

static void free_slot(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl, void *argp);

static void session_slot_init(void)
{
	session_slot = SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, free_slot);
}

static void free_slot(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl, void *argp)
{
	(void)parent, (void)ad, (void)idx, (void)argl, (void)argp;
	SSL_SESSION_free(ptr);
}

static int on_new_session(SSL *ssl, SSL_SESSION *sess)
{
	SSL_CTX *ctx = SSL_get_SSL_CTX(ssl);
	SSL_SESSION *old = SSL_CTX_get_ex_data(ctx, session_slot);
	if (SSL_CTX_set_ex_data(ctx, session_slot, sess) != 1)
		return 0; /* not kept: OpenSSL frees it */
	SSL_SESSION_free(old);
	return 1; /* the slot owns it now */
}

SSL_CTX *es_tls_client_ctx(const char *cert, const char *key, const char *ca, char *err,
                           size_t errlen)
{
	pthread_once(&session_slot_once, session_slot_init);
	SSL_CTX *ctx = st_tls_client_ctx(cert, key, ca, true, err, errlen);
	if (ctx) {
		SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT |
		                                            SSL_SESS_CACHE_NO_INTERNAL_STORE);
		SSL_CTX_sess_set_new_cb(ctx, on_new_session);
	}
	return ctx;
}

SSL_CTX *es_tls_tunnel_ctx(const char *cert, const char *key, const char *ca, char *err,
                           size_t errlen)
{
	return st_tls_client_ctx(cert, key, ca, false, err, errlen);
}

/*
 * The read side: a BIO that lends OpenSSL the bytes of es_tls_feed() where they are (lws's read
 * buffer), so ciphertext is copied once, into OpenSSL's record buffer. A memory BIO took a copy
 * of every read first (zeroing the room it grew into, and wiping its buffer when trimmed): 2-3 %
 * of the edge's CPU on a bulk download. What OpenSSL has not taken when the caller stops
 * reading (es_tls_keep) is copied into @rest, which the BIO hands out first and frees once read.
 * The state lives in its own allocation, the BIO's, since struct es_tls moves (es_conn_adopt).
 */
struct rx_src {
	const uint8_t *in; /* es_tls_feed()'s bytes not read yet, borrowed until es_tls_keep() */
	size_t in_len;
	uint8_t *rest; /* owned: what a feed left unread, rest_off.. rest_len still to hand out */
	size_t rest_off, rest_len;
};

static int rx_bio_read(BIO *b, char *out, int outl)
{
	struct rx_src *r = BIO_get_data(b);
	BIO_clear_retry_flags(b);
	if (outl <= 0)
		return 0;
	size_t want = (size_t)outl, got = 0;
	if (r->rest_len > r->rest_off) {
		size_t n = r->rest_len - r->rest_off;
		got = n < want ? n : want;
		memcpy(out, r->rest + r->rest_off, got);
		r->rest_off += got;
		if (r->rest_off == r->rest_len) { /* drained: hold nothing */
			free(r->rest);
			r->rest = NULL;
			r->rest_off = r->rest_len = 0;
		}
	}
	if (got < want && r->in_len > 0) {
		size_t n = r->in_len < want - got ? r->in_len : want - got;
		memcpy(out + got, r->in, n);
		r->in += n;
		r->in_len -= n;
		got += n;
	}
	if (got == 0) {
		r->in = NULL;          /* nothing borrowed any more */
		BIO_set_retry_read(b); /* empty means "wait", not EOF */
		return -1;
	}
	return (int)got;
}

static long rx_bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
	(void)num, (void)ptr;
	struct rx_src *r = BIO_get_data(b);
	switch (cmd) {
	case BIO_CTRL_PENDING:
		return (long)(r->rest_len - r->rest_off + r->in_len);
	case BIO_CTRL_FLUSH:
		return 1;
	default:
		return 0;
	}
}

static int rx_bio_create(BIO *b)
{
	struct rx_src *r = calloc(1, sizeof *r);
	if (r == NULL)
		return 0;
	BIO_set_data(b, r);
	BIO_set_init(b, 1);
	return 1;
}

static int rx_bio_destroy(BIO *b)
{
	struct rx_src *r = BIO_get_data(b);
	if (r)
		free(r->rest);
	free(r);
	BIO_set_data(b, NULL);
	return 1;
}

/* Made once for the process (instances may start on several threads), kept until exit. */
static BIO_METHOD *rx_method;
static pthread_once_t rx_method_once = PTHREAD_ONCE_INIT;

static void rx_method_init(void)
{
	BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "es_tls rx");
	if (m && BIO_meth_set_read(m, rx_bio_read) == 1 && BIO_meth_set_ctrl(m, rx_bio_ctrl) == 1 &&
	    BIO_meth_set_create(m, rx_bio_create) == 1 &&
	    BIO_meth_set_destroy(m, rx_bio_destroy) == 1)
		rx_method = m;
	else
		BIO_meth_free(m);
}

int es_tls_start(struct es_tls *t, SSL_CTX *ctx, const char *host)
{
	memset(t, 0, sizeof *t);
	pthread_once(&rx_method_once, rx_method_init);
	t->ssl = SSL_new(ctx);
	t->rbio = rx_method ? BIO_new(rx_method) : NULL;
	t->wbio = BIO_new(BIO_s_mem());
	if (t->ssl == NULL || t->rbio == NULL || t->wbio == NULL) {
		SSL_free(t->ssl);
		BIO_free(t->rbio);
		BIO_free(t->wbio);
		memset(t, 0, sizeof *t);
		return -ENOMEM;
	}
	SSL_SESSION *resume = session_slot >= 0 && es_tls_resuming(ctx)
	                              ? SSL_CTX_get_ex_data(ctx, session_slot)
	                              : NULL;
	if (resume && SSL_SESSION_is_resumable(resume) && SSL_set_session(t->ssl, resume) == 1)
		t->offered_session = true;
	SSL_set_bio(t->ssl, t->rbio, t->wbio);
	SSL_set_connect_state(t->ssl);
	unsigned char ip[16];
	bool is_ip = inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1;
	X509_VERIFY_PARAM *param = SSL_get0_param(t->ssl);
	if (is_ip ? X509_VERIFY_PARAM_set1_ip_asc(param, host) != 1
	          : (SSL_set1_host(t->ssl, host) != 1 ||
	             SSL_set_tlsext_host_name(t->ssl, host) != 1)) {
		es_tls_free(t);
		return -EINVAL;
	}
	return 0;
}

void es_tls_free(struct es_tls *t)
{
	/* OpenSSL makes a session unresumable when its connection is freed without a shutdown
	 * (it cannot tell a clean end from an attack). A connection that finished its handshake
	 * and met no TLS error keeps its session for the next request: mark it shut down. */
	if (t->ssl && SSL_is_init_finished(t->ssl) && !t->failed) {
		SSL_set_quiet_shutdown(t->ssl, 1);
		SSL_shutdown(t->ssl);
	}
	SSL_free(t->ssl); /* frees both BIOs */
	t->ssl = NULL;
	t->rbio = t->wbio = NULL;
	free(t->error);
	t->error = NULL;
}

int es_tls_feed(struct es_tls *t, const uint8_t *p, size_t len)
{
	struct rx_src *r = BIO_get_data(t->rbio);
	assert(r->in_len == 0); /* the last feed was read to the end, or kept */
	r->in = len ? p : NULL;
	r->in_len = len;
	return 0;
}

int es_tls_keep(struct es_tls *t)
{
	if (t->rbio == NULL)
		return 0;
	struct rx_src *r = BIO_get_data(t->rbio);
	if (r->in_len == 0)
		return 0;
	size_t left = r->rest_len - r->rest_off;
	uint8_t *rest = malloc(left + r->in_len);
	if (rest == NULL)
		return -ENOMEM;
	if (left)
		memcpy(rest, r->rest + r->rest_off, left);
	memcpy(rest + left, r->in, r->in_len);
	free(r->rest);
	r->rest = rest;
	r->rest_off = 0;
	r->rest_len = left + r->in_len;
	r->in = NULL;
	r->in_len = 0;
	return 0;
}

int es_tls_handshake(struct es_tls *t)
{
	if (t->handshake_done)
		return 1;
	int r = SSL_do_handshake(t->ssl);
	if (r == 1) {
		t->handshake_done = true;
		return 1;
	}
	int e = SSL_get_error(t->ssl, r);
	if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
		return 0;
	long v = SSL_get_verify_result(t->ssl);
	if (v != X509_V_OK) {
		ERR_clear_error();
		if (error_buf(t))
			snprintf(t->error, ES_TLS_ERROR_BYTES, "certificate verify failed: %s",
			         X509_verify_cert_error_string(v));
	} else {
		t->peer_alert = set_openssl_error(t, "TLS handshake failed");
	}
	return -EPROTO;
}

bool es_tls_resumption_refused(const struct es_tls *t)
{
	return t->offered_session && t->peer_alert && !t->handshake_done;
}

bool es_tls_stop_resuming(SSL_CTX *ctx)
{
	bool was_on = es_tls_resuming(ctx);
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
	if (session_slot >= 0) {
		SSL_SESSION *old = SSL_CTX_get_ex_data(ctx, session_slot);
		if (old && SSL_CTX_set_ex_data(ctx, session_slot, NULL) == 1)
			SSL_SESSION_free(old);
	}
	return was_on;
}

bool es_tls_resuming(SSL_CTX *ctx)
{
	return (SSL_CTX_get_session_cache_mode(ctx) & SSL_SESS_CACHE_CLIENT) != 0;
}

ssize_t es_tls_read(struct es_tls *t, uint8_t *out, size_t cap)
{
	int r = SSL_read(t->ssl, out, cap > 1u << 30 ? 1 << 30 : (int)cap);
	if (r > 0)
		return r;
	int e = SSL_get_error(t->ssl, r);
	if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
		return 0;
	if (e == SSL_ERROR_ZERO_RETURN)
		return -EPIPE;
	set_openssl_error(t, "TLS read failed");
	return -EPROTO;
}

int es_tls_write(struct es_tls *t, const uint8_t *p, size_t len)
{
	while (len > 0) {
		int chunk = len > 1u << 20 ? 1 << 20 : (int)len;
		int r = SSL_write(t->ssl, p, chunk);
		if (r <= 0) {
			set_openssl_error(t, "TLS write failed");
			return -EPROTO;
		}
		p += r;
		len -= (size_t)r;
	}
	return 0;
}

void es_tls_close_notify(struct es_tls *t)
{
	SSL_shutdown(t->ssl);
	ERR_clear_error();
}

/* Whether @b is empty and still holds a buffer. */
static bool bio_holds_buffer(BIO *b)
{
	BUF_MEM *bm = NULL;
	return BIO_ctrl_pending(b) == 0 && BIO_get_mem_ptr(b, &bm) > 0 && bm != NULL && bm->max > 0;
}

void es_tls_trim(struct es_tls *t)
{
	if (t->ssl == NULL)
		return;
	SSL_free_buffers(t->ssl); /* 0 when a record is in flight: then they stay */
	/* An empty buffer in place of the drained write BIO's (BIO_CLOSE: the BIO frees the old).
	 * The read side holds a buffer only while kept bytes wait (es_tls_keep). */
	if (bio_holds_buffer(t->wbio)) {
		BUF_MEM *empty = BUF_MEM_new();
		if (empty == NULL || BIO_set_mem_buf(t->wbio, empty, BIO_CLOSE) <= 0)
			BUF_MEM_free(empty);
	}
}

size_t es_tls_pending(const struct es_tls *t)
{
	return t->wbio ? BIO_ctrl_pending(t->wbio) : 0;
}

size_t es_tls_take(struct es_tls *t, uint8_t *out, size_t cap)
{
	size_t n = es_tls_pending(t);
	if (n > cap)
		n = cap;
	if (n == 0)
		return 0;
	int r = BIO_read(t->wbio, out, (int)n);
	return r > 0 ? (size_t)r : 0;
}
