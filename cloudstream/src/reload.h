/*
 * cloudstream/src/reload.h — SIGHUP: reload the TLS certificates, keys and CAs of both
 * listeners without dropping a connection. Files are read and checked on a worker; the new
 * objects are swapped into the listeners' SSL_CTXs on the loop, so new handshakes use them and
 * established connections keep theirs. A file that fails to load or a key that does not match
 * its certificate leaves everything as it was (logged).
 */
#ifndef CLOUDSTREAM_RELOAD_H
#define CLOUDSTREAM_RELOAD_H

#include <openssl/ssl.h>

struct cs_server;

/* Remember a listener's SSL_CTX (from LWS_CALLBACK_OPENSSL_LOAD_EXTRA_SERVER_VERIFY_CERTS). */
void cs_reload_note_ctx(struct cs_server *srv, const char *vhost_name, SSL_CTX *ctx);

/* Start a reload (loop thread). A reload already running makes this one wait for it. */
void cs_reload_start(struct cs_server *srv);

/* Free reload state at exit (after the worker pool stopped). */
void cs_reload_cleanup(struct cs_server *srv);

#endif /* CLOUDSTREAM_RELOAD_H */
