/*
 * edgestream/src/tls.h — a TLS client over in-memory BIOs, for backend connections.
 *
 * libwebsockets 4.1.6 cannot make raw TLS client connections (libwebsockets-notes §7), so the
 * backend leg is a plain lws raw socket and OpenSSL runs here over two BIOs in memory: ciphertext
 * read from the socket is lent with es_tls_feed(), ciphertext to send comes out with
 * es_tls_take(); plaintext goes through es_tls_read()/es_tls_write(). No sockets, no clock:
 * unit-tested against an in-memory server.
 */
#ifndef EDGESTREAM_TLS_H
#define EDGESTREAM_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <openssl/ssl.h>

struct es_tls {
	SSL *ssl;
	BIO *rbio, *wbio; /* owned by ssl */
	bool handshake_done;
	bool offered_session; /* es_tls_start() offered the context's kept session to resume */
	bool peer_alert;      /* the handshake failed on a fatal alert from the peer */
	bool failed;          /* a call failed (error says why, when there was memory for it) */
	char *error;          /* why the last call failed; allocated at the first failure (most
	                       * connections never fail: 256 bytes less per stream), NULL before */
};

#define ES_TLS_ERROR_BYTES 256u

/* es_tls_error() - why the last call failed ("" when nothing failed). */
static inline const char *es_tls_error(const struct es_tls *t)
{
	return t->error ? t->error : "";
}

/*
 * es_tls_client_ctx() - an SSL_CTX that presents @cert/@key (both NULL: none) and verifies the
 * peer against @ca (NULL: the system store). NULL on failure with the reason in @err.
 */
SSL_CTX *es_tls_client_ctx(const char *cert, const char *key, const char *ca, char *err,
                           size_t errlen);

/*
 * es_tls_tunnel_ctx() - the tunnel's client context, handed to lws (provided_client_ssl_ctx):
 * it presents @cert/@key and trusts @ca alone. lws's own would also trust the operating
 * system's public CAs (Debian builds lws with LWS_SSL_CLIENT_USE_OS_CA_CERTS): any certificate
 * a public CA issued for the cloud's name would pass. Owned by the caller, who frees it after
 * the lws context. NULL on failure with the reason in @err.
 */
SSL_CTX *es_tls_tunnel_ctx(const char *cert, const char *key, const char *ca, char *err,
                           size_t errlen);

/* es_tls_start() - a client session checking the peer's name @host (a DNS name or an IP
 * literal) and sending it as SNI (DNS names only). 0, -ENOMEM or -EINVAL. */
int es_tls_start(struct es_tls *t, SSL_CTX *ctx, const char *host);
/* es_tls_free() - the connection and its error text; @t may be started again afterwards. */
void es_tls_free(struct es_tls *t);

/*
 * es_tls_feed() - ciphertext received: @p is borrowed, not copied (OpenSSL copies what it reads
 * into its record buffer), until es_tls_handshake() or es_tls_read() returns 0 (everything was
 * read) or es_tls_keep() is called, whichever comes first. The caller reads to 0 or keeps before
 * @p goes away (lws's read buffer: before the callback returns), and before the next feed.
 * Always 0.
 */
int es_tls_feed(struct es_tls *t, const uint8_t *p, size_t len);

/*
 * es_tls_keep() - copy what is left of the last es_tls_feed() (the caller stopped reading
 * before the end: a kept connection between requests, a test feeding several times before it
 * reads); it is read first next time, and freed once read. 0, or -ENOMEM (nothing kept: the
 * caller drops the connection).
 */
int es_tls_keep(struct es_tls *t);

/* es_tls_handshake() - advance the handshake: 1 done, 0 needs more input, -EPROTO failed
 * (t->error says why, e.g. the certificate verification result). */
int es_tls_handshake(struct es_tls *t);

/*
 * es_tls_resumption_refused() - after es_tls_handshake() returned -EPROTO: whether the server
 * refused the session this connection offered, i.e. it offered one and the server ended the
 * handshake with a fatal alert (a certificate check of ours that failed is not a refusal). An
 * OpenSSL server with client certificates required and no session id context (socat's
 * OPENSSL-LISTEN with verify=1) answers a resumption with internal_error instead of falling back
 * to a full handshake, as RFC 5077/8446 servers do; the caller then connects again with a full
 * handshake, which such a server completes.
 */
bool es_tls_resumption_refused(const struct es_tls *t);

/*
 * es_tls_stop_resuming() - sticky: connections on @ctx offer no session from now on and none is
 * kept (the kept one is freed). For the loop thread that owns @ctx. Returns true when resumption
 * was on until now (the caller logs the first time only).
 */
bool es_tls_stop_resuming(SSL_CTX *ctx);

/* es_tls_resuming() - whether new connections on @ctx offer the kept session (if there is one). */
bool es_tls_resuming(SSL_CTX *ctx);

/* es_tls_read() - plaintext: bytes read, 0 when more input is needed, -EPIPE when the peer
 * closed the TLS session (close_notify), -EPROTO on errors. */
ssize_t es_tls_read(struct es_tls *t, uint8_t *out, size_t cap);

/* es_tls_write() - encrypt @len plaintext bytes (all of them). 0 or -EPROTO. */
int es_tls_write(struct es_tls *t, const uint8_t *p, size_t len);

/* es_tls_close_notify() - queue a close_notify alert (our half-close). */
void es_tls_close_notify(struct es_tls *t);

/*
 * es_tls_trim() - let go of the buffers nothing is in: OpenSSL's record buffers (16.5 KB to
 * read, as much to write; SSL_MODE_RELEASE_BUFFERS frees them only on some paths) and the write
 * BIO's buffer (a memory BIO keeps its largest size for ever). Bytes in flight (a partial
 * record, ciphertext not taken yet) stay. Call it when a read or a write burst is over; cheap
 * when there is nothing to free (the next burst allocates what it needs again).
 */
void es_tls_trim(struct es_tls *t);

/* es_tls_pending() - ciphertext bytes waiting to be sent. */
size_t es_tls_pending(const struct es_tls *t);

/* es_tls_take() - move up to @cap ciphertext bytes into @out; returns how many. */
size_t es_tls_take(struct es_tls *t, uint8_t *out, size_t cap);

#endif /* EDGESTREAM_TLS_H */
