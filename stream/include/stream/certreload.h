/*
 * stream/certreload.h — reload TLS certificates, keys and CAs into live SSL_CTXs without
 * dropping a connection: load → verify → swap.
 *
 * A daemon describes each TLS context it serves or dials with (a listener, a client vhost) by
 * its certificate, key and CA files, and tells the helper the SSL_CTX lws made for it. A reload
 * then:
 *   1. load, on a worker thread (stream/workq.h): stat the files, read the certificate and its
 *      chain, the key and the CA bundle of every context;
 *   2. verify, on the worker: the key matches the certificate, and OpenSSL accepts the pair in
 *      a scratch SSL_CTX (so the swap cannot fail half-way for a key it would refuse);
 *   3. swap, on the loop thread: every context gets its new certificate, chain, key and CA
 *      store at once (new handshakes use them; established connections keep theirs), or, when
 *      any file of any context failed, none does and the old material stays.
 * With ST_CERTRELOAD_IF_CHANGED a reload whose files have not changed since the last swap (by
 * mtime, size and inode; the first stamps are taken by st_certreload_new) reads nothing: a
 * periodic check of rotated files costs a few stat calls on a worker.
 *
 * Logging: each swap logs one INFO line per context with the certificate's subject and the
 * start of its SHA-256 fingerprint ("reloaded <name> certificate: ..."); failures are only
 * reported to the done callback, whose caller words and logs them.
 *
 * Thread rules: every function is called on the loop thread (the one that runs the work
 * queue's completions); the done callback runs there too. Workers touch only the job they
 * were given.
 */
#ifndef STREAM_CERTRELOAD_H
#define STREAM_CERTRELOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <openssl/ssl.h>

struct st_workq;
struct st_certreload;

/* How many contexts one helper reloads together. */
#define ST_CERTRELOAD_MAX_CONTEXTS 4

/* The files of one TLS context. Borrowed during st_certreload_new (copied). */
struct st_certreload_files {
	const char *name; /* what it is, for log lines ("tunnel", "stream"); at most 31 bytes */
	const char *cert_path; /* PEM: the certificate, then its chain */
	const char *key_path;  /* PEM: its private key */
	const char *ca_path;   /* PEM: the CAs that verify the peer; NULL keeps the context's */
};

/* Flags of st_certreload_start(). */
#define ST_CERTRELOAD_IF_CHANGED 1u /* read nothing if no file changed since the last swap */

/* The result of one reload attempt, on the loop thread.
 * @rc: 0 the new material was swapped in; 1 nothing changed (ST_CERTRELOAD_IF_CHANGED), nothing
 * done; < 0 nothing swapped, the old material stays: -ENOENT/-EACCES/... a file could not be
 * opened, -EBADMSG a file holds no usable PEM, -EKEYREJECTED the key does not match the
 * certificate or OpenSSL refuses the pair, -ENODEV a context's SSL_CTX is not known yet,
 * -ECANCELED the worker pool stopped first.
 * @reason: NUL-terminated, valid during the call: "" on success, else which file and why (and
 * OpenSSL's error), one "; "-separated item per failing context. */
typedef void (*st_certreload_done_cb)(int rc, const char *reason, void *user);

/*
 * st_certreload_new() - a helper for @n contexts (1..ST_CERTRELOAD_MAX_CONTEXTS) described by
 * @files, whose reloads run on @wq (borrowed; it must outlive the helper's jobs: free the helper
 * after st_workq_free, or any time, see st_certreload_free). @done(@user) follows every reload
 * attempt. Takes the files' first stamps (stat, at start-up: on the calling thread).
 * Returns 0, -EINVAL (bad @n, a NULL path or name, a name too long), -ENOMEM.
 */
int st_certreload_new(struct st_certreload **out, struct st_workq *wq,
                      const struct st_certreload_files *files, size_t n, st_certreload_done_cb done,
                      void *user);

/* st_certreload_set_ctx() - context @i's SSL_CTX (borrowed: lws owns it; keep it valid while
 * the helper lives), e.g. from LWS_CALLBACK_OPENSSL_LOAD_EXTRA_SERVER_VERIFY_CERTS (server) or
 * ..._CLIENT_VERIFY_CERTS (client). An index out of range is ignored. */
void st_certreload_set_ctx(struct st_certreload *r, size_t i, SSL_CTX *ctx);

/*
 * st_certreload_start() - start a reload with @flags (ST_CERTRELOAD_*). While one runs, this
 * asks for one more attempt after it (several such calls make one; its flags are those of the
 * last call).
 * Returns 0 (the done callback follows, once per attempt), or -EAGAIN when the worker pool is
 * full and -ENOMEM (no attempt; the callback does not run for this call).
 */
int st_certreload_start(struct st_certreload *r, unsigned flags);

/*
 * Expiry. The helper knows the validity of the certificate each context holds (from
 * st_certreload_set_ctx, then from each swap) and logs a WARN when one is set or swapped in
 * while it expires soon (st_cert_expiry_warning). Daemons export the notAfter as
 * <daemon>_certificate_expiry_seconds{cert="<name>"}.
 */
#define ST_CERT_WARN_DAYS 30

/* st_certreload_validity() - context @i's certificate: notBefore and notAfter in unix seconds.
 * Returns 0; -ENOENT when not known yet (both 0); -EINVAL for a bad index. */
int st_certreload_validity(const struct st_certreload *r, size_t i, int64_t *not_before,
                           int64_t *not_after);

/* st_cert_expiry_warning() - should a certificate valid [@not_before, @not_after] (unix s) be
 * warned about at @now: less than a third of its lifetime left, or less than ST_CERT_WARN_DAYS,
 * whichever comes later (a 365-day certificate at 30 days, a 2-minute one at 40 s: rotation
 * at two thirds of the lifetime should have happened by then). Pure. */
bool st_cert_expiry_warning(int64_t now, int64_t not_before, int64_t not_after);

/* st_certreload_free() - free the helper. A reload still on a worker finishes without a
 * swap or a callback, and its memory goes with its completion. NULL is a no-op. */
void st_certreload_free(struct st_certreload *r);

#endif /* STREAM_CERTRELOAD_H */
