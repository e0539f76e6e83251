/*
 * test/unit/cloudstream/test_front_h2_alpn.c — front_h2_alpn.c: the SSL_get0_alpn_selected
 * interposition (cloudstream/README.md, Code: HTTP/2) and its start-up check.
 *
 * Built twice (test/CMakeLists.txt): as is, where the executable exports its definition as
 * cloudstream does (the check passes; a TLS handshake in memory shows the client got h2 while
 * the function the dynamic linker hands out reports no ALPN for the server's SSL), and with
 * CS_TEST_HIDDEN, linked with a version script that keeps the definition out of the dynamic
 * symbol table (the check fails, ALPN h2 is not installed: the client gets no h2).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dlfcn.h>
#include <errno.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "front.h"

typedef void (*alpn_fn)(const SSL *, const unsigned char **, unsigned int *);

/* A self-signed P-256 certificate and key on @ctx. */
static void use_self_signed(SSL_CTX *ctx)
{
	EVP_PKEY *key = EVP_EC_gen("P-256");
	assert_non_null(key);
	X509 *x = X509_new();
	assert_non_null(x);
	ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
	X509_gmtime_adj(X509_getm_notBefore(x), -60);
	X509_gmtime_adj(X509_getm_notAfter(x), 3600);
	X509_NAME *n = X509_get_subject_name(x);
	X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC, (const unsigned char *)"localhost", -1,
	                           -1, 0);
	X509_set_issuer_name(x, n);
	X509_set_pubkey(x, key);
	assert_true(X509_sign(x, key, EVP_sha256()) > 0);
	assert_int_equal(SSL_CTX_use_certificate(ctx, x), 1);
	assert_int_equal(SSL_CTX_use_PrivateKey(ctx, key), 1);
	X509_free(x);
	EVP_PKEY_free(key);
}

/* A handshake in memory between a client offering h2, http/1.1 and a server whose context got
 * cs__h2_alpn_install (its return in *@rc). What the dynamic linker's SSL_get0_alpn_selected
 * (the one liblws calls) says on each side. */
static void handshake(int *rc, char *cli_alpn, char *srv_alpn)
{
	SSL_CTX *sctx = SSL_CTX_new(TLS_server_method());
	SSL_CTX *cctx = SSL_CTX_new(TLS_client_method());
	assert_non_null(sctx);
	assert_non_null(cctx);
	use_self_signed(sctx);
	*rc = cs__h2_alpn_install(sctx);
	static const unsigned char offer[] = "\x02h2\x08http/1.1";
	assert_int_equal(SSL_CTX_set_alpn_protos(cctx, offer, sizeof offer - 1), 0);
	SSL *s = SSL_new(sctx), *c = SSL_new(cctx);
	BIO *bs, *bc;
	assert_int_equal(BIO_new_bio_pair(&bs, 0, &bc, 0), 1);
	SSL_set_bio(s, bs, bs);
	SSL_set_bio(c, bc, bc);
	SSL_set_accept_state(s);
	SSL_set_connect_state(c);
	int done_c = 0, done_s = 0;
	for (int i = 0; i < 100 && !(done_c && done_s); i++) {
		if (!done_c)
			done_c = SSL_do_handshake(c) == 1;
		if (!done_s)
			done_s = SSL_do_handshake(s) == 1;
	}
	assert_true(done_c && done_s);
	alpn_fn linked = (alpn_fn)dlsym(RTLD_DEFAULT, "SSL_get0_alpn_selected");
	assert_non_null(linked);
	const unsigned char *p = NULL;
	unsigned int len = 0;
	linked(c, &p, &len);
	snprintf(cli_alpn, 16, "%.*s", (int)len, p ? (const char *)p : "");
	p = NULL;
	len = 0;
	linked(s, &p, &len);
	snprintf(srv_alpn, 16, "%.*s", (int)len, p ? (const char *)p : "");
	SSL_free(s);
	SSL_free(c);
	SSL_CTX_free(sctx);
	SSL_CTX_free(cctx);
}

#ifndef CS_TEST_HIDDEN
static void test_cs__h2_alpn_install__interposed(void **state)
{
	(void)state;
	assert_true(cs__h2_interposed());
	int rc = -1;
	char cli[16], srv[16];
	handshake(&rc, cli, srv);
	assert_int_equal(rc, 0);
	assert_string_equal(cli, "h2"); /* the client got h2 in the ServerHello */
	assert_string_equal(srv, "");   /* lws, on the server side, is told none */
}
#else
static void test_cs__h2_alpn_install__not_interposed(void **state)
{
	(void)state;
	assert_false(cs__h2_interposed());
	int rc = 0;
	char cli[16], srv[16];
	handshake(&rc, cli, srv);
	assert_int_equal(rc, -ENOSYS);
	assert_string_equal(cli, ""); /* HTTP/2 not offered: no ALPN chosen (lws's own, in the
	                               * daemon, would answer http/1.1) */
	assert_string_equal(srv, "");
}
#endif

int main(void)
{
	const struct CMUnitTest tests[] = {
#ifndef CS_TEST_HIDDEN
	        cmocka_unit_test(test_cs__h2_alpn_install__interposed),
#else
	        cmocka_unit_test(test_cs__h2_alpn_install__not_interposed),
#endif
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
