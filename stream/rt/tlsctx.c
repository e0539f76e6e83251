/* TLS client contexts we own instead of libwebsockets (stream/tlsctx.h). */
#include <stream/tlsctx.h>

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
