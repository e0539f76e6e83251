/*
 * cloudstream/src/join_srv.c — bootstrap and rotation of edge certificates on the tunnel port
 * (plain HTTPS requests beside the websocket upgrade; see README "Bootstrap and rotation"):
 *
 *   GET  /v1/cloudstream/ca      the --tunnel-ca bundle, to anyone (the edge pins it by hash)
 *   POST /v1/cloudstream/join    Authorization: Bearer <join token>, body a PEM CSR: a node
 *                                with no certificate yet; the key stays on the node
 *   POST /v1/cloudstream/renew   the edge's current (verified) client certificate, body a PEM
 *                                CSR for the same node: rotation, no token
 *
 * Answers: 200 with the signed certificate and then the CA bundle (PEM), or 403 with the reason
 * (body and X-Cloudstream-Refusal), logged once and counted. Everything that reads a file or
 * signs runs on the worker pool: the token file (read at every join, so edits apply at once),
 * the CSR's signature check, the signing, the CA bundle. A token's uses are counted under a
 * mutex on the worker, taken before signing and given back when signing fails, so two edges
 * racing for a token's last use cannot both get it.
 *
 * Threads: the request objects and the list of them belong to the loop; a job carries the
 * request's ordinal and copies of what it needs, never a pointer to the request (a request
 * whose connection closed is gone when the job completes, and its answer is dropped).
 */
#include "tunnel_int.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <openssl/pem.h>

#include <certs/certs.h>
#include <stream/admin.h>
#include <stream/err.h>
#include <stream/log.h>
#include <stream/status.h>
#include <stream/workq.h>

#include "join.h"
#include "join_srv.h"

#define JOIN_PATH  "/v1/cloudstream/join"
#define RENEW_PATH "/v1/cloudstream/renew"
#define CA_PATH    "/v1/cloudstream/ca"

#define JOIN_BODY_TIMEOUT_S 10
#define JOIN_MAX_INFLIGHT   64u

/* One request on the tunnel port. Loop thread. */
struct cs_join_req {
	struct cs_join *j;
	struct lws *wsi;
	uint64_t ordinal;
	enum cs_join_kind kind;
	char peer[64];
	char node[CS_JOIN_NODE_MAX_BYTES + 1]; /* renew: the certificate's node */
	char id[CS_JOIN_TOKEN_ID_BYTES + 1];
	char token[CS_JOIN_TOKEN_BYTES + 1];
	bool bad_token; /* an Authorization header, not a bootstrap token */
	char *body;     /* the CSR, up to CERTS_MAX_CSR_BYTES */
	size_t body_len;
	bool too_large; /* the body went over: answered 413 */
	bool submitted; /* a job runs for it */
	char *answer;   /* the whole HTTP answer, once known (owned) */
	size_t answer_len;
	bool sent; /* the answer was written: the next WRITEABLE closes */
	struct cs_join_req *next, *prev;
};

static bool local_signer(const struct cs_config *c)
{
	return c->signer_key && c->signer_key[0] && c->signer_cert && c->signer_cert[0];
}

bool cs__join_kube_signer(const struct cs_config *c)
{
	return c->csr_signer_name && c->csr_signer_name[0];
}

bool cs_join_enabled(const struct cs_server *srv)
{
	return local_signer(&srv->cfg) || cs__join_kube_signer(&srv->cfg);
}

/* ---- answers (loop) ------------------------------------------------------------------------ */

static struct cs_join_req *find_req(struct cs_join *j, uint64_t ordinal)
{
	for (struct cs_join_req *r = j->reqs; r; r = r->next)
		if (r->ordinal == ordinal)
			return r;
	return NULL;
}

/* The whole HTTP answer into r->answer. */
static void set_answer(struct cs_join_req *r, int status, const char *refusal, const char *body,
                       size_t body_len, const char *type)
{
	char head[600];
	char reason[300] = "";
	if (refusal) {
		snprintf(reason, sizeof reason, "%.280s", refusal);
		for (char *c = reason; *c; c++)
			if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e)
				*c = ' ';
	}
	int n = snprintf(head, sizeof head,
	                 "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n%s%s%sContent-Length: %zu\r\n"
	                 "Connection: close\r\n\r\n",
	                 status, st_http_reason_phrase(status), type,
	                 refusal ? ST_REFUSAL_HEADER ": " : "", reason, refusal ? "\r\n" : "",
	                 body_len);
	free(r->answer);
	r->answer = malloc(LWS_PRE + (size_t)n + body_len);
	if (r->answer == NULL) {
		r->answer_len = 0;
		return;
	}
	memcpy(r->answer + LWS_PRE, head, (size_t)n);
	memcpy(r->answer + LWS_PRE + n, body, body_len);
	r->answer_len = (size_t)n + body_len;
}

static void refuse(struct cs_join_req *r, int status, enum cs_join_refusal why, const char *detail)
{
	struct cs_join *j = r->j;
	const char *what = r->kind == CS_JOIN_KIND_RENEW  ? "renewal"
	                   : r->kind == CS_JOIN_KIND_JOIN ? "join"
	                                                  : "CA";
	if (why != CS_JOIN_OK)
		j->refused[why]++;
	st_log(status >= 500 ? ST_LOG_ERROR : ST_LOG_WARN, r->node[0] ? r->node : NULL, 0,
	       "%s from %s refused (%d, %s): %s", what, r->peer, status,
	       why != CS_JOIN_OK ? cs_join_refusal_name(why) : "error", detail);
	char refusal[320], body[720];
	snprintf(refusal, sizeof refusal, "%s: %.290s",
	         why != CS_JOIN_OK ? cs_join_refusal_name(why) : "error", detail);
	int n = snprintf(body, sizeof body, "%.700s\n", detail);
	set_answer(r, status, refusal, body, (size_t)n, "text/plain; charset=utf-8");
	if (r->wsi)
		lws_callback_on_writable(r->wsi);
}

/* The serial and notAfter of the first certificate of @pem, for the log. */
static void describe_cert(const char *pem, size_t len, char *out, size_t cap)
{
	out[0] = '\0';
	BIO *b = BIO_new_mem_buf(pem, (int)len);
	X509 *x = b ? PEM_read_bio_X509(b, NULL, NULL, NULL) : NULL;
	BIO_free(b);
	if (x == NULL)
		return;
	BIGNUM *bn = ASN1_INTEGER_to_BN(X509_get_serialNumber(x), NULL);
	char *hex = bn ? BN_bn2hex(bn) : NULL;
	struct tm tm;
	char until[32] = "?";
	if (ASN1_TIME_to_tm(X509_get0_notAfter(x), &tm) == 1)
		strftime(until, sizeof until, "%Y-%m-%dT%H:%M:%SZ", &tm);
	snprintf(out, cap, "serial %s until %s", hex ? hex : "?", until);
	OPENSSL_free(hex);
	BN_free(bn);
	X509_free(x);
}

static void job_done(void *arg, int status)
{
	struct cs_join_job *jb = arg;
	struct cs_join *j = jb->j;
	struct cs_join_req *r = find_req(j, jb->ordinal);
	if (r)
		r->submitted = false;
	if (status < 0 && r)
		refuse(r, 503, CS_JOIN_OK, "cloudstream is shutting down");
	else if (r && jb->status != 200)
		refuse(r, jb->status, jb->refusal, jb->detail);
	else if (r && jb->kind != CS_JOIN_KIND_CA && cs_identity_denied(j->srv, jb->node, "")) {
		/* The deny list lives on the loop: judged here, the certificate thrown away. */
		cs__join_give_back_use(jb);
		snprintf(r->node, sizeof r->node, "%s", jb->node);
		refuse(r, 403, CS_JOIN_DENIED, "node is on the deny list");
	} else if (r) {
		char what[200] = "";
		if (jb->kind == CS_JOIN_KIND_CA) {
			j->ca_served++;
		} else {
			describe_cert(jb->pem, jb->pem_len, what, sizeof what);
			snprintf(r->node, sizeof r->node, "%s", jb->node);
			if (jb->kind == CS_JOIN_KIND_JOIN) {
				j->signed_join++;
				st_log(ST_LOG_INFO, jb->node, 0,
				       "joined with token %s from %s: certificate %s", jb->id,
				       r->peer, what);
			} else {
				j->signed_renew++;
				st_log(ST_LOG_INFO, jb->node, 0,
				       "renewed its certificate from %s: %s", r->peer, what);
			}
		}
		set_answer(r, 200, NULL, jb->pem, jb->pem_len, "application/x-pem-file");
		if (r->wsi)
			lws_callback_on_writable(r->wsi);
	} else {
		cs__join_give_back_use(jb); /* the edge is gone: it never got the certificate */
	}
	free(jb->csr);
	free(jb->pem);
	free(jb);
}

static void submit(struct cs_join_req *r)
{
	struct cs_join *j = r->j;
	struct cs_join_job *jb = calloc(1, sizeof *jb);
	if (jb == NULL) {
		refuse(r, 503, CS_JOIN_OK, "out of memory");
		return;
	}
	jb->j = j;
	jb->ordinal = r->ordinal;
	jb->kind = r->kind;
	memcpy(jb->peer, r->peer, sizeof jb->peer);
	memcpy(jb->id, r->id, sizeof jb->id);
	memcpy(jb->token, r->token, sizeof jb->token);
	memcpy(jb->node, r->node, sizeof jb->node);
	jb->csr = r->body; /* moves */
	jb->csr_len = r->body_len;
	r->body = NULL;
	r->body_len = 0;
	OPENSSL_cleanse(r->token, sizeof r->token);
	if (st_workq_submit(j->srv->wq, cs__join_job_work, job_done, jb) < 0) {
		free(jb->csr);
		free(jb);
		refuse(r, 503, CS_JOIN_OK, "busy (the worker pool is full); retry");
		return;
	}
	r->submitted = true;
}

/* ---- lws hooks (loop) ------------------------------------------------------------------- */

int cs_join_http(struct lws *wsi, struct cs_server *srv, struct cs_join_req **slot, const char *uri)
{
	struct cs_join *j = srv->join;
	if (j == NULL || uri == NULL)
		return 0;
	bool post = lws_hdr_total_length(wsi, WSI_TOKEN_POST_URI) > 0;
	enum cs_join_kind kind;
	if (strcmp(uri, CA_PATH) == 0 && !post)
		kind = CS_JOIN_KIND_CA;
	else if (strcmp(uri, JOIN_PATH) == 0 && post && srv->cfg.join_tokens &&
	         srv->cfg.join_tokens[0])
		kind = CS_JOIN_KIND_JOIN;
	else if (strcmp(uri, RENEW_PATH) == 0 && post)
		kind = CS_JOIN_KIND_RENEW;
	else
		return 0;
	struct cs_join_req *r = calloc(1, sizeof *r);
	if (r == NULL)
		return -1;
	r->j = j;
	r->wsi = wsi;
	r->kind = kind;
	r->ordinal = ++j->next_ordinal;
	lws_get_peer_simple(wsi, r->peer, sizeof r->peer);
	r->next = j->reqs;
	if (j->reqs)
		j->reqs->prev = r;
	j->reqs = r;
	j->n_reqs++;
	*slot = r;
	lws_set_timeout(wsi, PENDING_TIMEOUT_HTTP_CONTENT, JOIN_BODY_TIMEOUT_S);
	if (j->n_reqs > JOIN_MAX_INFLIGHT) {
		refuse(r, 503, CS_JOIN_OK, "too many joins in flight; retry");
		return 1;
	}
	if (kind == CS_JOIN_KIND_CA) {
		submit(r);
		return 1;
	}
	if (kind == CS_JOIN_KIND_RENEW) {
		struct cs_admission a;
		memset(&a, 0, sizeof a);
		cs__tunnel_admit_cert(wsi, srv, &a);
		if (a.status != 0) {
			snprintf(r->node, sizeof r->node, "%s", a.node);
			refuse(r, 403, a.reason == CS_REFUSE_DENIED ? CS_JOIN_DENIED : CS_JOIN_CERT,
			       a.detail);
			return 1;
		}
		snprintf(r->node, sizeof r->node, "%s", a.node);
		return 1;
	}
	char auth[128];
	int n = lws_hdr_copy(wsi, auth, sizeof auth, WSI_TOKEN_HTTP_AUTHORIZATION);
	if (n <= 0 || cs_join_bearer(auth, (size_t)n, r->id, r->token) < 0)
		r->bad_token = true;
	OPENSSL_cleanse(auth, sizeof auth);
	return 1;
}

int cs_join_body(struct cs_join_req *r, const void *in, size_t len)
{
	if (r->answer || r->submitted)
		return 0; /* answered already (refused before the body) */
	if (r->body_len + len > CERTS_MAX_CSR_BYTES) {
		free(r->body);
		r->body = NULL;
		r->too_large = true;
		return 0;
	}
	if (r->too_large)
		return 0;
	if (r->body == NULL && (r->body = malloc(CERTS_MAX_CSR_BYTES)) == NULL)
		return -1;
	memcpy(r->body + r->body_len, in, len);
	r->body_len += len;
	return 0;
}

int cs_join_body_done(struct cs_join_req *r)
{
	if (r->answer || r->submitted)
		return 0;
	if (r->too_large) {
		refuse(r, 413, CS_JOIN_BAD_CSR, "the signing request is over 8 KiB");
		return 0;
	}
	if (r->kind == CS_JOIN_KIND_JOIN && r->bad_token) {
		refuse(r, 403, CS_JOIN_NO_TOKEN,
		       "a join needs Authorization: Bearer <token> ([a-z0-9]{6}.[a-z0-9]{16})");
		return 0;
	}
	if (r->body == NULL) {
		refuse(r, 403, CS_JOIN_BAD_CSR, "no signing request in the body");
		return 0;
	}
	submit(r);
	return 0;
}

int cs_join_writeable(struct cs_join_req *r)
{
	if (r->sent || r->answer == NULL || r->wsi == NULL)
		return r->sent ? -1 : 0; /* written and drained (lws calls us only then): close */
	if (lws_write(r->wsi, (unsigned char *)r->answer + LWS_PRE, r->answer_len,
	              LWS_WRITE_HTTP_FINAL) < 0)
		return -1;
	r->sent = true;
	lws_callback_on_writable(r->wsi);
	return 0;
}

void cs_join_closed(struct cs_join_req *r)
{
	struct cs_join *j = r->j;
	if (r->prev)
		r->prev->next = r->next;
	else
		j->reqs = r->next;
	if (r->next)
		r->next->prev = r->prev;
	j->n_reqs--;
	OPENSSL_cleanse(r->token, sizeof r->token);
	free(r->body);
	free(r->answer);
	free(r);
}

/* ---- start, stop, metrics ------------------------------------------------------------------ */

int cs_join_new(struct cs_server *srv)
{
	const struct cs_config *c = &srv->cfg;
	bool tokens = c->join_tokens && c->join_tokens[0];
	if (!cs_join_enabled(srv)) {
		if (tokens || (c->signer_cert && c->signer_cert[0]) ||
		    (c->signer_key && c->signer_key[0])) {
			st_err("--join-tokens, --signer-cert and --signer-key: signing needs both "
			       "--signer-cert and --signer-key (or --csr-signer-name)");
			return -EINVAL;
		}
		return 0;
	}
	char err[512];
	if (cs__join_kube_signer(c) && (c->apiserver_url == NULL || c->apiserver_url[0] == '\0')) {
		st_err("--csr-signer-name needs --apiserver-url");
		return -EINVAL;
	}
	if (!cs__join_kube_signer(c) &&
	    certs_check_pair(c->signer_cert, c->signer_key, err, sizeof err) < 0) {
		st_err("--signer-cert/--signer-key: %s", err);
		return -EINVAL;
	}
	if (tokens) {
		char *text = NULL;
		size_t len = 0;
		struct cs_join_tokens *t = NULL;
		struct cs_join_error perr = {0, NULL};
		int rc = cs__join_read_file(c->join_tokens, CS_JOIN_MAX_FILE_BYTES, &text, &len);
		if (rc == 0)
			rc = cs_join_tokens_parse(text, len, &t, &perr);
		free(text);
		if (rc < 0) {
			if (rc == -EBADMSG)
				st_err("--join-tokens %s: line %zu: %s", c->join_tokens, perr.line,
				       perr.why);
			else
				st_err("--join-tokens %s: %s", c->join_tokens, st_strerror(rc));
			return -EINVAL;
		}
		cs_join_tokens_free(t);
	}
	struct cs_join *j = calloc(1, sizeof *j);
	if (j == NULL)
		return -ENOMEM;
	j->srv = srv;
	pthread_mutex_init(&j->lock, NULL);
	srv->join = j;
	return 0;
}

void cs_join_optional_client_certs(struct cs_server *srv, void *ssl_ctx)
{
	SSL_CTX *ctx = ssl_ctx;
	if (srv->join == NULL || !srv->cfg.join_tokens || !srv->cfg.join_tokens[0] || ctx == NULL)
		return;
	/* A certificate is asked for, verified when sent (lws's callback, which we answer with
	 * OpenSSL's verdict), but no longer required: a joining edge has none yet. The upgrade
	 * still requires one (admission.c). */
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, SSL_CTX_get_verify_callback(ctx));
}

void cs_join_free(struct cs_server *srv)
{
	struct cs_join *j = srv->join;
	if (j == NULL)
		return;
	while (j->reqs)
		cs_join_closed(j->reqs);
	pthread_mutex_destroy(&j->lock);
	free(j->uses);
	free(j);
	srv->join = NULL;
}

void cs_join_metrics(struct st_text *t, const struct cs_server *srv)
{
	const struct cs_join *j = srv->join;
	if (j == NULL)
		return;
	st_text_labelled(t, "cloudstream_certificates_signed_total", "counter",
	                 "Edge certificates signed, by kind: join (a token) or renew (the edge's "
	                 "current certificate).",
	                 "kind",
	                 (const struct st_text_sample[]){
	                         {"join", j->signed_join}, {"renew", j->signed_renew}, {0}});
	st_text_metric(t, "cloudstream_join_refusals_total", "counter",
	               "Joins and renewals refused, by reason.");
	for (int i = 1; i < CS_JOIN_REFUSAL_COUNT; i++)
		st_text_put(t, "cloudstream_join_refusals_total{reason=\"%s\"} %llu\n",
		            cs_join_refusal_name((enum cs_join_refusal)i),
		            (unsigned long long)j->refused[i]);
}
