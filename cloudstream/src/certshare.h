/*
 * cloudstream/src/certshare.h — one parsed copy of each client certificate the stream port
 * sees again and again (kube-apiserver presents the same one on every connection, and it opens
 * one connection per stream).
 *
 * OpenSSL parses the certificate a client sends into a new X509 per connection and keeps it for
 * the connection's life (the session's peer and its verified chain): about 7 KB with its public
 * key, a quarter of a quiet `logs -f` stream's memory (README, "Many quiet streams"). Installed
 * as the SSL_CTX's certificate verification callback, this swaps each certificate received for
 * the byte-identical copy kept here (X509_cmp) before the usual X509_verify_cert runs on it, so
 * the one just parsed is freed at once; a certificate whose chain verified is kept for the next
 * connections, a few of them, the oldest replaced. Verification itself is unchanged: every
 * handshake checks its chain, times and purpose, on the shared copy.
 *
 * Loop thread only (OpenSSL calls it inside SSL_accept).
 */
#ifndef CS_CERTSHARE_H
#define CS_CERTSHARE_H

#include <stdint.h>

#include <openssl/ssl.h>

/* Certificates kept: kube-apiserver's (one per replica, rotated now and then), a few others. */
#define CS_CERTSHARE_SLOTS 16u

struct cs_certshare;

/* cs_certshare_new() - an empty set in *@out. 0 or -ENOMEM. */
int cs_certshare_new(struct cs_certshare **out);

/* cs_certshare_free() - lets go of the kept certificates (connections keep their own
 * references). NULL is a no-op. */
void cs_certshare_free(struct cs_certshare *t);

/* cs_certshare_install() - verify @ctx's client certificates through @t (borrowed: it must
 * outlive every handshake on @ctx). Replaces any certificate verification callback. */
void cs_certshare_install(struct cs_certshare *t, SSL_CTX *ctx);

/* cs_certshare_hits() - received certificates replaced by a kept copy so far. */
uint64_t cs_certshare_hits(const struct cs_certshare *t);

#endif
