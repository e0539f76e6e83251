/*
 * cloudstream/src/join_srv.h — bootstrap and rotation requests on the tunnel port (join_srv.c):
 * the CA bundle, joins with a token and renewals with the current certificate, signed on the
 * worker pool. Loop thread, except where a function says otherwise.
 */
#ifndef CLOUDSTREAM_JOIN_SRV_H
#define CLOUDSTREAM_JOIN_SRV_H

#include <stdbool.h>
#include <stddef.h>

struct lws;
struct cs_server;
struct cs_join_req;
struct st_text;

/* cs_join_new() - at start-up: check --join-tokens, --signer-cert and --signer-key (a bad token
 * file or a key that is not the signer's: logged, -EINVAL), and set up srv->join when signing
 * is configured. 0 when it is not. */
int cs_join_new(struct cs_server *srv);
/* cs_join_free() - after the worker pool is freed. */
void cs_join_free(struct cs_server *srv);
/* cs_join_enabled() - are --signer-cert and --signer-key set? */
bool cs_join_enabled(const struct cs_server *srv);
/* cs_join_optional_client_certs() - with --join-tokens: make the tunnel listener's client
 * certificate optional (asked for, verified when sent) in @ssl_ctx (an SSL_CTX *). */
void cs_join_optional_client_certs(struct cs_server *srv, void *ssl_ctx);

/*
 * cs_join_http() - LWS_CALLBACK_HTTP on the tunnel port for @uri: one of our requests? Returns
 * 0 when not (the caller answers as before), 1 when it is (*@slot holds the request until
 * cs_join_closed; the answer follows through WRITEABLE), -1 out of memory (close).
 */
int cs_join_http(struct lws *wsi, struct cs_server *srv, struct cs_join_req **slot,
                 const char *uri);
/* LWS_CALLBACK_HTTP_BODY / _BODY_COMPLETION / HTTP_WRITEABLE for the request: the return is
 * the callback's (-1 closes). */
int cs_join_body(struct cs_join_req *r, const void *in, size_t len);
int cs_join_body_done(struct cs_join_req *r);
int cs_join_writeable(struct cs_join_req *r);
/* cs_join_closed() - the connection is gone: frees the request (a job still running for it
 * finds nothing and drops its answer). */
void cs_join_closed(struct cs_join_req *r);

/* cs_join_metrics() - cloudstream_certificates_signed_total, cloudstream_join_refusals_total. */
void cs_join_metrics(struct st_text *t, const struct cs_server *srv);

#endif /* CLOUDSTREAM_JOIN_SRV_H */
