/*
 * edgestream/src/tls.c — TLS client over memory BIOs (tls.h).
 */
#include "tls.h"

#include <stream/tlsctx.h>

#include <pthread.h>

#include <arpa/inet.h>
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

int es_tls_start(struct es_tls *t, SSL_CTX *ctx, const char *host)
{
	memset(t, 0, sizeof *t);
	t->ssl = SSL_new(ctx);
	t->rbio = BIO_new(BIO_s_mem());
	t->wbio = BIO_new(BIO_s_mem());
	if (t->ssl == NULL || t->rbio == NULL || t->wbio == NULL) {
		SSL_free(t->ssl);
		BIO_free(t->rbio);
		BIO_free(t->wbio);
		memset(t, 0, sizeof *t);
		return -ENOMEM;
	}
	BIO_set_mem_eof_return(t->rbio, -1); /* empty means "wait", not EOF */
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
	if (len && BIO_write(t->rbio, p, (int)len) != (int)len)
		return -ENOMEM;
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
	/* An empty buffer in place of each drained one (BIO_CLOSE: the BIO frees the old). */
	BIO *bios[2] = {t->rbio, t->wbio};
	for (size_t i = 0; i < 2; i++) {
		if (!bio_holds_buffer(bios[i]))
			continue;
		BUF_MEM *empty = BUF_MEM_new();
		if (empty == NULL || BIO_set_mem_buf(bios[i], empty, BIO_CLOSE) <= 0)
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
