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

/*
 * TLS 1.3's AES-128-GCM first, as Go (kube-apiserver, the kubelet, cloudcore), BoringSSL and
 * Cloudflare order it; OpenSSL 3.0's built-in order puts AES-256-GCM first, so two OpenSSL
 * ends (an edge and a replica, two replicas, curl and a replica) used AES-256 although neither
 * asked for it. AES-128-GCM is the suite every TLS 1.3 implementation must have (RFC 8446
 * §9.1); it makes 10 AES rounds per block instead of 14. Measured (cloudstream/README.md
 * "Several replicas"): 2-3 % less CPU per GiB in every process of a relayed transfer.
 */
#define ST_TLS13_CIPHERSUITES                                                                      \
	"TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"

/*
 * st_tls_prefer_aes128() - ST_TLS13_CIPHERSUITES on @ctx, unless its TLS 1.3 list is not
 * OpenSSL's built-in one (an operator's `Ciphersuites` in openssl.cnf: that is the knob, and
 * it is kept as it is). @server: a listener's context also chooses by this order rather than
 * the client's (SSL_OP_CIPHER_SERVER_PREFERENCE), except that a client whose first choice is
 * ChaCha20 (Go without AES instructions) keeps it (SSL_OP_PRIORITIZE_CHACHA). Returns true
 * when it changed @ctx.
 */
bool st_tls_prefer_aes128(SSL_CTX *ctx, bool server);

#endif
