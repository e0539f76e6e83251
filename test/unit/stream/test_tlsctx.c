/* Unit tests for the TLS 1.3 suite order (stream/tlsctx.h): real handshakes between two
 * contexts in memory (BIO pairs), checking which suite they agree on. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <stream/tlsctx.h>

static EVP_PKEY *key;
static X509 *cert;

static int setup(void **state)
{
	(void)state;
	key = EVP_EC_gen("P-256");
	cert = X509_new();
	if (key == NULL || cert == NULL)
		return -1;
	ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
	X509_gmtime_adj(X509_getm_notBefore(cert), 0);
	X509_gmtime_adj(X509_getm_notAfter(cert), 3600);
	X509_set_pubkey(cert, key);
	X509_NAME *name = X509_get_subject_name(cert);
	X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"t", -1, -1, 0);
	X509_set_issuer_name(cert, name);
	return X509_sign(cert, key, EVP_sha256()) > 0 ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	X509_free(cert);
	EVP_PKEY_free(key);
	return 0;
}

static SSL_CTX *server_ctx(void)
{
	SSL_CTX *c = SSL_CTX_new(TLS_server_method());
	assert_non_null(c);
	assert_int_equal(SSL_CTX_use_certificate(c, cert), 1);
	assert_int_equal(SSL_CTX_use_PrivateKey(c, key), 1);
	return c;
}

static SSL_CTX *client_ctx(void)
{
	SSL_CTX *c = SSL_CTX_new(TLS_client_method());
	assert_non_null(c);
	SSL_CTX_set_verify(c, SSL_VERIFY_NONE, NULL);
	return c;
}

/* The TLS 1.3 suite @client and @server agree on (its standard name). */
static const char *agreed(SSL_CTX *client, SSL_CTX *server)
{
	static char name[64];
	SSL *c = SSL_new(client), *s = SSL_new(server);
	BIO *cb, *sb;
	assert_int_equal(BIO_new_bio_pair(&cb, 0, &sb, 0), 1);
	SSL_set_bio(c, cb, cb);
	SSL_set_bio(s, sb, sb);
	SSL_set_connect_state(c);
	SSL_set_accept_state(s);
	int done = 0;
	for (int i = 0; i < 20 && done != 3; i++) {
		if (!(done & 1) && SSL_do_handshake(c) == 1)
			done |= 1;
		if (!(done & 2) && SSL_do_handshake(s) == 1)
			done |= 2;
	}
	assert_int_equal(done, 3);
	assert_int_equal(SSL_version(c), TLS1_3_VERSION);
	snprintf(name, sizeof name, "%s", SSL_CIPHER_standard_name(SSL_get_current_cipher(c)));
	SSL_free(c);
	SSL_free(s);
	return name;
}

/* OpenSSL's own order on both ends: AES-256, what the replicas and edges used before. */
static void test_openssl_default_is_aes256(void **state)
{
	(void)state;
	SSL_CTX *c = client_ctx(), *s = server_ctx();
	assert_string_equal(agreed(c, s), "TLS_AES_256_GCM_SHA384");
	SSL_CTX_free(c);
	SSL_CTX_free(s);
}

/* Our client offers AES-128 first; our listener chooses it even for a client that offers
 * AES-256 first (curl, an edge of an older version). */
static void test_ours_agree_on_aes128(void **state)
{
	(void)state;
	SSL_CTX *c = client_ctx(), *s = server_ctx(), *plain = client_ctx();
	assert_true(st_tls_prefer_aes128(c, false));
	assert_string_equal(agreed(c, s), "TLS_AES_128_GCM_SHA256");
	assert_true(st_tls_prefer_aes128(s, true));
	assert_string_equal(agreed(plain, s), "TLS_AES_128_GCM_SHA256");
	assert_string_equal(agreed(c, s), "TLS_AES_128_GCM_SHA256");
	SSL_CTX_free(c);
	SSL_CTX_free(s);
	SSL_CTX_free(plain);
}

/* A client that wants ChaCha20 first (Go without AES instructions) keeps it. */
static void test_chacha_client_keeps_chacha(void **state)
{
	(void)state;
	SSL_CTX *c = client_ctx(), *s = server_ctx();
	assert_int_equal(SSL_CTX_set_ciphersuites(c, "TLS_CHACHA20_POLY1305_SHA256:"
	                                             "TLS_AES_128_GCM_SHA256"),
	                 1);
	assert_true(st_tls_prefer_aes128(s, true));
	assert_string_equal(agreed(c, s), "TLS_CHACHA20_POLY1305_SHA256");
	SSL_CTX_free(c);
	SSL_CTX_free(s);
}

/* A list set elsewhere (an operator's openssl.cnf) is left as it is, options too. */
static void test_configured_list_kept(void **state)
{
	(void)state;
	SSL_CTX *s = server_ctx(), *c = client_ctx();
	assert_int_equal(SSL_CTX_set_ciphersuites(s, "TLS_AES_256_GCM_SHA384"), 1);
	assert_false(st_tls_prefer_aes128(s, true));
	assert_false(SSL_CTX_get_options(s) & SSL_OP_CIPHER_SERVER_PREFERENCE);
	assert_true(st_tls_prefer_aes128(c, false));
	assert_string_equal(agreed(c, s), "TLS_AES_256_GCM_SHA384");
	assert_false(st_tls_prefer_aes128(NULL, true));
	SSL_CTX_free(s);
	SSL_CTX_free(c);
}

int main(void)
{
	/* OpenSSL's built-in defaults, whatever this machine's openssl.cnf says. */
	if (OPENSSL_init_ssl(OPENSSL_INIT_NO_LOAD_CONFIG, NULL) != 1)
		return 1;
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_openssl_default_is_aes256),
	        cmocka_unit_test(test_ours_agree_on_aes128),
	        cmocka_unit_test(test_chacha_client_keeps_chacha),
	        cmocka_unit_test(test_configured_list_kept),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
