/*
 * stream/tlsctx.h — the TLS client contexts both daemons hand to libwebsockets for the
 * connections they dial (the edge's tunnel, the cloud's peer links).
 *
 * Why not lws's own: libwebsockets 4.1.6 builds a client vhost's SSL_CTX with the operating
 * system's CA store as well as the CA file it is given, when built with
 * LWS_SSL_CLIENT_USE_OS_CA_CERTS (Debian's build is): a certificate any public CA issued for
 * the peer's name would pass. And it finds its client contexts again through an OpenSSL index
 * it takes anew for every lws context, so with two contexts in one process (two embedded
 * instances) the first one's was never freed (~700 KiB: the system's CA store). A context from
 * here trusts the given CA file alone; the caller lends it to lws (provided_client_ssl_ctx) and
 * frees it after the lws context.
 */
#ifndef STREAM_TLSCTX_H
#define STREAM_TLSCTX_H

#include <stdbool.h>
#include <stddef.h>

#include <openssl/ssl.h>

/*
 * st_tls_client_ctx() - a client context (TLS 1.2 or later, peer verified) presenting the
 * certificate chain @cert with @key (both NULL or "": none) and trusting @ca (a file, a bundle
 * for CA rotation). @ca NULL or "": the system store when @system_ok, else an error. NULL on
 * failure with the reason (OpenSSL's included) in @err.
 */
SSL_CTX *st_tls_client_ctx(const char *cert, const char *key, const char *ca, bool system_ok,
                           char *err, size_t errlen);

#endif
