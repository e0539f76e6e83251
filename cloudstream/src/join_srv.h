/*
 * cloudstream/src/join_srv.h — bootstrap and rotation requests on the tunnel port (join_srv.c):
 * the CA bundle, joins with a token and renewals with the current certificate, signed on the
 * worker pool (join_sign.c). Loop thread, except where a function says otherwise.
 */
#ifndef CLOUDSTREAM_JOIN_SRV_H
#define CLOUDSTREAM_JOIN_SRV_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "join.h"

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

/* ---- internal: what join_srv.c (the requests, loop thread) and join_sign.c (token checks and
 * signing, worker threads) share ---------------------------------------------------------- */

enum cs_join_kind { CS_JOIN_KIND_CA, CS_JOIN_KIND_JOIN, CS_JOIN_KIND_RENEW };

struct cs_join {
	struct cs_server *srv;
	struct cs_join_req *reqs; /* loop thread */
	size_t n_reqs;
	uint64_t next_ordinal;
	pthread_mutex_t lock;     /* guards uses and csr_waiting */
	struct cs_join_use *uses; /* token uses, kept in --join-uses */
	size_t n_uses;
	bool uses_loaded; /* --join-uses read (at the first join after the start) */
	bool csr_waiting; /* a worker waits for the cluster to sign a CSR (--csr-signer-name) */
	/* counters, loop thread */
	uint64_t signed_join, signed_renew, ca_served;
	uint64_t refused[CS_JOIN_REFUSAL_COUNT];
};

/* What a worker gets and gives back. */
struct cs_join_job {
	struct cs_join *j;
	uint64_t ordinal;
	enum cs_join_kind kind;
	char peer[64];
	char id[CS_JOIN_TOKEN_ID_BYTES + 1];
	char token[CS_JOIN_TOKEN_BYTES + 1];
	char node[CS_JOIN_NODE_MAX_BYTES + 1]; /* renew: in; join: out (the CSR's) */
	char *csr;
	size_t csr_len;
	/* out */
	int status; /* 200, 403, 500, 503 */
	enum cs_join_refusal refusal;
	bool counted; /* a token use was taken */
	char detail[700];
	char *pem; /* certificate + CA bundle, or the bundle alone */
	size_t pem_len;
};

struct cs_config;
/* cs__join_kube_signer() - is --csr-signer-name set (the cluster signs, not our key)? */
bool cs__join_kube_signer(const struct cs_config *c);
/* cs__join_read_file() - a whole file of at most @max bytes, NUL-terminated, into *@out
 * (malloc'd) and *@len. 0, or -errno, -ENOMEM, -EIO, -EMSGSIZE. Any thread. */
int cs__join_read_file(const char *path, size_t max, char **out, size_t *len);
/* cs__join_job_work() - the worker pool's job (a struct cs_join_job): the CA bundle, or the
 * CSR checked, the token's use taken and the certificate signed. Worker thread. */
void cs__join_job_work(void *arg);
/* cs__join_give_back_use() - a token use taken for @jb given back (the certificate did not
 * reach the edge; the uses file is rewritten); nothing when none was taken. Takes cs_join.lock. */
void cs__join_give_back_use(struct cs_join_job *jb);

#endif /* CLOUDSTREAM_JOIN_SRV_H */
