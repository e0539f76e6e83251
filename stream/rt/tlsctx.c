/* TLS client contexts we own instead of libwebsockets (stream/tlsctx.h). */
#include <stream/tlsctx.h>

#include <stdio.h>
#include <string.h>

#include <openssl/err.h>

/* @what and the first error on OpenSSL's queue (which is emptied). */
static void fail(char *err, size_t errlen, const char *what)
{
	unsigned long e, first = 0;
	while ((e = ERR_get_error()) != 0)
		if (first == 0)
			first = e;
	char buf[200] = "";
	if (first)
		ERR_error_string_n(first, buf, sizeof buf);
	snprintf(err, errlen, "%s%s%s", what, buf[0] ? ": " : "", buf);
}

SSL_CTX *st_tls_client_ctx(const char *cert, const char *key, const char *ca, bool system_ok,
                           char *err, size_t errlen)
{
	bool have_ca = ca && ca[0];
	if (!have_ca && !system_ok) {
		snprintf(err, errlen, "no CA file to verify the peer with");
		return NULL;
	}
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	if (ctx == NULL) {
		fail(err, errlen, "SSL_CTX_new");
		return NULL;
	}
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	st_tls_prefer_aes128(ctx, false);
	if (have_ca ? SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1
	            : SSL_CTX_set_default_verify_paths(ctx) != 1) {
		char what[300];
		snprintf(what, sizeof what, "cannot load CA %s", have_ca ? ca : "(system)");
		fail(err, errlen, what);
		SSL_CTX_free(ctx);
		return NULL;
	}
	if (cert && cert[0] &&
	    (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1 ||
	     SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1 ||
	     SSL_CTX_check_private_key(ctx) != 1)) {
		char what[600];
		snprintf(what, sizeof what, "cannot load client certificate %s / key %s", cert,
		         key ? key : "(none)");
		fail(err, errlen, what);
		SSL_CTX_free(ctx);
		return NULL;
	}
	return ctx;
}

/* OpenSSL 3.0's TLS_DEFAULT_CIPHERSUITES: the list a context has unless configured. */
#define OPENSSL_DEFAULT_SUITES                                                                     \
	"TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256:TLS_AES_128_GCM_SHA256"

bool st_tls_prefer_aes128(SSL_CTX *ctx, bool server)
{
	if (ctx == NULL)
		return false;
	/* The TLS 1.3 suites head the context's list (IANA ids 0x1301..0x1305). */
	char have[256] = "";
	size_t used = 0;
	STACK_OF(SSL_CIPHER) *sk = SSL_CTX_get_ciphers(ctx);
	for (int i = 0; sk && i < sk_SSL_CIPHER_num(sk); i++) {
		const SSL_CIPHER *c = sk_SSL_CIPHER_value(sk, i);
		if ((SSL_CIPHER_get_protocol_id(c) & 0xff00) != 0x1300)
			continue;
		int n = snprintf(have + used, sizeof have - used, "%s%s", used ? ":" : "",
		                 SSL_CIPHER_get_name(c));
		if (n < 0 || (size_t)n >= sizeof have - used)
			return false;
		used += (size_t)n;
	}
	if (strcmp(have, OPENSSL_DEFAULT_SUITES) != 0 ||
	    SSL_CTX_set_ciphersuites(ctx, ST_TLS13_CIPHERSUITES) != 1)
		return false;
	if (server)
		SSL_CTX_set_options(ctx,
		                    SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_PRIORITIZE_CHACHA);
	return true;
}
