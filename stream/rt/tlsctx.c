/* TLS client contexts we own instead of libwebsockets (stream/tlsctx.h). */
#include <stream/tlsctx.h>

#include <errno.h>
#include <stdio.h>

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
	if (st_tls_prefer_aes128(ctx, false) < 0) {
		fail(err, errlen, "cannot set the TLS 1.3 cipher suites");
		SSL_CTX_free(ctx);
		return NULL;
	}
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

/* AES-128-GCM first: both relays decrypt and encrypt every byte they carry, and on this
 * machine's AES-NI/VAES it is the cheaper of the two AES suites (README, "Bulk relay cost"). It
 * is TLS 1.3's one mandatory suite and what Go's crypto/tls (kube-apiserver, KubeEdge's edge)
 * prefers on hardware with AES instructions; 128-bit keys are not the weak point of a
 * connection authenticated with P-256 or RSA-2048 certificates. */
int st_tls_prefer_aes128(SSL_CTX *ctx, bool server)
{
	if (SSL_CTX_set_ciphersuites(ctx, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:"
	                                  "TLS_CHACHA20_POLY1305_SHA256") != 1)
		return -EINVAL;
	if (server)
		SSL_CTX_set_options(ctx,
		                    SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_PRIORITIZE_CHACHA);
	return 0;
}
