/*
 * cloudstream/src/authz_req.c — who may use the stream port, and for what: the kubelet's
 * authentication (client certificate, or a bearer token checked by a TokenReview) and
 * authorization (a SubjectAccessReview per request, or the subject list) around each request
 * on an apiserver connection. The decisions are authz.c's (pure); this file asks the apiserver
 * on the worker pool (libcurl, apiserver.c's credentials), keeps the answers in the decision
 * cache and resumes the waiting requests.
 *
 * A request that needs an answer waits in CS_FRONT_ROUTING with its head kept, exactly like a
 * pod lookup: when the answer is in, its head is parsed again and passes the steps it has
 * passed already (the front remembers them until the request is consumed). Requests asking the
 * same question share one call (the cache's in-flight entries); each call has a job id that is
 * never reused, and a front that is gone by the time the answer comes is simply not found.
 *
 * Loop thread, except the job's work function (worker thread: its job and the immutable
 * configuration only).
 */
#include "front.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <certs/certs.h>
#include <stream/admin.h>
#include <stream/log.h>
#include <stream/workq.h>

#include "apiserver.h"
#include "authz.h"

#define REVIEW_BODY_MAX (CS_AUTHZ_MAX_USER_JSON + CS_AUTHZ_MAX_TOKEN_BYTES + 1024)
#define CACHE_ENTRIES   4096u
#define USER_BUCKETS    64u

/* A client certificate's user, one copy for every connection that presents the same identity:
 * kube-apiserver opens each of its streams as a TLS connection with one certificate, and a
 * copy per connection was 0.6 KB of each quiet `logs -f` (README, "Many quiet streams"). */
struct shared_user {
	struct shared_user *next; /* in its bucket */
	uint32_t hash;
	uint32_t refs;          /* connections holding it */
	struct cs_authz_user u; /* last: allocated up to json[json_len] only */
};

/* The server's part (srv->authz). */
struct cs_authz {
	struct cs_authz_cache *cache;
	struct shared_user *users[USER_BUCKETS]; /* by the hash of the user's JSON */
	uint64_t next_job;
	uint64_t token_reviews, sars; /* calls made */
	uint64_t hits;                /* answers taken from the cache */
	uint64_t errors;              /* calls that got no usable answer */
};

struct az_job {
	struct cs_server *srv;
	uint64_t id;
	bool sar;              /* else a TokenReview */
	uint64_t submitted_us; /* st_now_us() at submit: the review histogram */
	uint8_t key[CS_AUTHZ_KEY_BYTES];
	char *body; /* the review we POST (a TokenReview holds the token: wiped after) */
	size_t body_len;
	/* results (worker → loop) */
	long http_status;
	struct cs_api_body answer;
	char error[CURL_ERROR_SIZE + 64];
};

/* ---- users -------------------------------------------------------------------------------- */

/* A heap copy of @u holding only the bytes in use. */
static struct cs_authz_user *user_dup(const struct cs_authz_user *u)
{
	size_t n = offsetof(struct cs_authz_user, json) + u->json_len + 1;
	struct cs_authz_user *c = malloc(n);
	if (c)
		memcpy(c, u, n);
	return c;
}

static uint32_t user_hash(const struct cs_authz_user *u)
{
	uint32_t h = 2166136261u; /* FNV-1a */
	for (size_t i = 0; i < u->json_len; i++)
		h = (h ^ (uint8_t)u->json[i]) * 16777619u;
	return h;
}

/* The shared copy of @u (one more holder), made when none exists; NULL when out of memory. */
static struct cs_authz_user *user_get(struct cs_authz *az, const struct cs_authz_user *u)
{
	uint32_t h = user_hash(u);
	struct shared_user **b = &az->users[h % USER_BUCKETS];
	for (struct shared_user *s = *b; s; s = s->next)
		if (s->hash == h && s->u.json_len == u->json_len &&
		    memcmp(s->u.json, u->json, u->json_len) == 0 &&
		    strcmp(s->u.name, u->name) == 0) {
			s->refs++;
			return &s->u;
		}
	size_t n = offsetof(struct cs_authz_user, json) + u->json_len + 1;
	struct shared_user *s = malloc(offsetof(struct shared_user, u) + n);
	if (s == NULL)
		return NULL;
	memcpy(&s->u, u, n);
	s->hash = h;
	s->refs = 1;
	s->next = *b;
	*b = s;
	return &s->u;
}

/* A holder of @u (from user_get) lets it go; the last one frees it. */
static void user_put(struct cs_authz *az, struct cs_authz_user *u)
{
	if (u == NULL)
		return;
	struct shared_user *s = (struct shared_user *)((char *)u - offsetof(struct shared_user, u));
	if (--s->refs > 0)
		return;
	struct shared_user **p = &az->users[s->hash % USER_BUCKETS];
	while (*p != s)
		p = &(*p)->next;
	*p = s->next;
	free(s);
}

bool cs__authz_on_tls(struct cs_front *f)
{
	struct cs_server *srv = f->srv;
	SSL *ssl = lws_get_ssl(f->wsi);
	if (ssl == NULL)
		return false;
	struct certs_identity id;
	int rc = certs_ssl_peer_identity(ssl, &id);
	if (rc ==
	    -ENOENT) /* allowed only with tokens (the handshake asks for no certificate else) */
		return srv->cfg.authentication_token_webhook;
	if (rc < 0)
		return false;
	const struct st_strlist *allow = &srv->cfg.stream_allowed_subjects;
	if (allow->n > 0 && !certs_identity_listed(&id, allow->v, allow->n)) {
		char peer[64] = "";
		lws_get_peer_simple(f->wsi, peer, sizeof peer);
		st_log(ST_LOG_WARN, NULL, 0,
		       "stream client %s: CN \"%s\" not in --stream-allowed-subjects: its requests "
		       "are answered 403",
		       peer, id.cn);
		f->cert_refused = true;
	}
	const char *orgs[CERTS_MAX_ORGS];
	for (size_t i = 0; i < id.num_orgs; i++)
		orgs[i] = id.orgs[i];
	struct cs_authz_user *u = malloc(sizeof *u);
	if (u == NULL)
		return false;
	rc = cs_authz_user_from_cert(id.cn, orgs, id.num_orgs, u);
	f->cert_user = rc == 0 ? user_get(srv->authz, u) : NULL;
	free(u);
	/* No CN: the x509 authenticator authenticates nobody; its requests get 401 (or go by a
	 * bearer token), as the kubelet answers them. */
	return f->cert_user != NULL || rc == -EINVAL;
}

void cs__authz_share_tls(struct cs_front *dst, const struct cs_front *conn)
{
	dst->cert_refused = conn->cert_refused;
	dst->cert_user = conn->cert_user;
	if (dst->cert_user) {
		struct shared_user *s = (struct shared_user *)((char *)dst->cert_user -
		                                               offsetof(struct shared_user, u));
		s->refs++;
	}
}

void cs__authz_request_done(struct cs_front *f)
{
	free(f->tok_user);
	f->tok_user = NULL;
	f->req_user = NULL;
	f->az_job = 0;
	f->az_next = 0;
	f->az_allowed = false;
	f->az_fail = 0;
}

void cs__authz_front_free(struct cs_front *f)
{
	cs__authz_request_done(f);
	user_put(f->srv->authz, f->cert_user);
	f->cert_user = NULL;
}

/* ---- calls to the apiserver --------------------------------------------------------------- */

static void job_work(void *arg)
{
	struct az_job *j = arg;
	const struct cs_config *c = &j->srv->cfg;
	char url[1024];
	if (j->sar)
		snprintf(url, sizeof url, "%s/apis/authorization.k8s.io/v1/subjectaccessreviews",
		         c->apiserver_url);
	else
		snprintf(url, sizeof url, "%s/apis/authentication.k8s.io/v1/tokenreviews",
		         c->apiserver_url);
	struct cs_api_request req = {
	        .content_type = "application/json", .body = j->body, .body_len = j->body_len};
	j->answer.max = CS_AUTHZ_MAX_ANSWER_BYTES;
	j->http_status = cs_apiserver_call(c, url, &req, &j->answer, j->error, sizeof j->error);
}

static void job_free(struct az_job *j)
{
	if (j->body)
		explicit_bzero(j->body, j->body_len); /* a TokenReview carries the token */
	free(j->body);
	free(j->answer.p);
	free(j);
}

/* Hands the answer of call @id to every front waiting for it and resumes them. @allowed:
 * authenticated or allowed; @user: a TokenReview's user; @fail: the status for a failed call. */
static void deliver(struct cs_server *srv, uint64_t id, bool sar, bool allowed,
                    const struct cs_authz_user *user, int fail)
{
	struct cs_front *next;
	for (struct cs_front *f = srv->fronts; f; f = next) {
		next = f->anext; /* processing may fail the request, never free the front */
		if (f->az_job != id || f->state != CS_FRONT_ROUTING)
			continue;
		f->az_job = 0;
		if (fail) {
			f->az_fail = fail;
		} else if (!sar) {
			f->tok_user = allowed ? user_dup(user) : NULL;
			f->req_user = f->tok_user;
			if (f->req_user == NULL)
				f->az_fail = 401;
		} else if (allowed) {
			f->az_allowed = true;
		} else {
			f->az_next++;
		}
		f->state = CS_FRONT_HEAD;
		cs__front_process(f); /* parses the kept head again */
	}
}

static void job_done(void *arg, int status)
{
	struct az_job *j = arg;
	struct cs_server *srv = j->srv;
	struct cs_authz *az = srv->authz;
	const char *what = j->sar ? "SubjectAccessReview" : "TokenReview";
	bool ok = false;
	char reason[CS_AUTHZ_MAX_REASON_BYTES] = "";
	struct cs_authz_user *user = NULL;
	int fail = j->sar ? 500 : 401, rc = -EIO;
	if (status == 0) /* not cancelled by the shutdown */
		st_hist_observe(&srv->m.review[j->sar ? 1 : 0], st_now_us() - j->submitted_us);
	if (status == 0 && j->error[0] == '\0' &&
	    (j->http_status == 201 || j->http_status == 200)) {
		if (j->sar) {
			enum cs_authz_verdict v;
			rc = cs_authz_parse_sar(j->answer.p ? j->answer.p : "", j->answer.len, &v,
			                        reason, sizeof reason);
			ok = v == CS_AUTHZ_ALLOW;
		} else {
			user = malloc(sizeof *user);
			rc = user ? cs_authz_parse_token_review(j->answer.p ? j->answer.p : "",
			                                        j->answer.len, &ok, user, reason,
			                                        sizeof reason)
			          : -ENOMEM;
		}
	}
	if (rc == 0) {
		fail = 0;
		uint64_t ttl = !j->sar ? srv->cfg.authn_cache_ttl_ms
		               : ok    ? srv->cfg.authz_cache_allowed_ttl_ms
		                       : srv->cfg.authz_cache_denied_ttl_ms;
		cs_authz_cache_put(az->cache, j->key, ok, ok ? user : NULL,
		                   ttl ? st_now_ms() + ttl : 0);
		if (!ok && !j->sar)
			st_log(ST_LOG_INFO, NULL, 0, "TokenReview: not authenticated%s%s",
			       reason[0] ? ": " : "", reason);
	} else {
		az->errors++;
		cs_authz_cache_put(az->cache, j->key, false, NULL, 0); /* errors are not cached */
		if (status == 0)
			st_warn("%s to %s failed: %s", what, srv->cfg.apiserver_url,
			        j->error[0]                 ? j->error
			        : j->http_status / 100 != 2 ? "unexpected HTTP status"
			                                    : "malformed answer");
	}
	if (status == 0)
		deliver(srv, j->id, j->sar, ok, user, fail);
	free(user);
	job_free(j);
}

/* Starts review @sar (else a TokenReview) of @key for front @f, which then waits in ROUTING:
 * the @n bytes its builder wrote into @body (taken; @n < 0: the builder failed, or there was no
 * buffer). 0; -ENOMEM when no call was made (the caller answers); -1 after failing the request
 * (the worker pool is full). */
static int job_start(struct cs_front *f, bool sar, const uint8_t key[CS_AUTHZ_KEY_BYTES],
                     char *body, ssize_t n)
{
	struct az_job *j = n >= 0 ? calloc(1, sizeof *j) : NULL;
	if (j == NULL) {
		free(body);
		return -ENOMEM;
	}
	j->sar = sar;
	j->body = body;
	j->body_len = (size_t)n;
	memcpy(j->key, key, CS_AUTHZ_KEY_BYTES);
	struct cs_server *srv = f->srv;
	j->srv = srv;
	j->id = ++srv->authz->next_job;
	j->submitted_us = st_now_us();
	int rc = st_workq_submit(srv->wq, job_work, job_done, j);
	if (rc < 0) {
		job_free(j);
		cs__request_fail(
		        f, 503, CS_ERR_LIMIT,
		        "cloudstream cannot ask the apiserver now (worker pool full); retry");
		return -1;
	}
	cs_authz_cache_pending(srv->authz->cache, j->key, j->id); /* -ENOSPC: not shared */
	j->sar ? srv->authz->sars++ : srv->authz->token_reviews++;
	f->az_job = j->id;
	f->state = CS_FRONT_ROUTING;
	return 0;
}

static void digest(const void *const *parts, const size_t *lens, size_t n,
                   uint8_t out[CS_AUTHZ_KEY_BYTES])
{
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	unsigned len = 0;
	memset(out, 0, CS_AUTHZ_KEY_BYTES);
	if (c && EVP_DigestInit_ex(c, EVP_sha256(), NULL) == 1) {
		for (size_t i = 0; i < n; i++)
			EVP_DigestUpdate(c, parts[i], lens[i]);
		EVP_DigestFinal_ex(c, out, &len);
	}
	EVP_MD_CTX_free(c);
}

/* ---- the steps of a request --------------------------------------------------------------- */

static int unauthorized(struct cs_front *f)
{
	cs__request_fail(f, 401, CS_ERR_UNAUTHORIZED, "Unauthorized");
	return -1;
}

int cs__authz_authenticate(struct cs_front *f, const struct st_http_request *req)
{
	struct cs_server *srv = f->srv;
	if (f->az_fail == 401)
		return unauthorized(f);
	if (f->req_user)
		return 1;
	/* The kubelet's union: a client certificate first, then a bearer token. */
	if (f->cert_user) {
		if (f->cert_refused) {
			char msg[CS_AUTHZ_MAX_NAME_BYTES + 128];
			snprintf(msg, sizeof msg,
			         "Forbidden (user=%s): the client certificate's subject is not in "
			         "--stream-allowed-subjects",
			         f->cert_user->name);
			cs__request_fail(f, 403, CS_ERR_FORBIDDEN, msg);
			return -1;
		}
		f->req_user = f->cert_user;
		return 1;
	}
	ssize_t i = st_http_header_find(req->headers, req->num_headers, "Authorization", 0);
	const char *tok;
	size_t tok_len;
	if (!srv->cfg.authentication_token_webhook || i < 0 ||
	    cs_authz_bearer(req->headers[i].value, req->headers[i].value_len, &tok, &tok_len) < 0)
		return unauthorized(f);
	uint8_t key[CS_AUTHZ_KEY_BYTES];
	digest((const void *const[]){"token", tok}, (const size_t[]){6, tok_len}, 2, key);
	bool ok;
	const struct cs_authz_user *u = NULL;
	uint64_t job;
	switch (cs_authz_cache_get(srv->authz->cache, key, st_now_ms(), &ok, &u, &job)) {
	case CS_AUTHZ_HIT:
		srv->authz->hits++;
		if (!ok || u == NULL)
			return unauthorized(f);
		f->tok_user = user_dup(u);
		if (f->tok_user == NULL)
			return unauthorized(f);
		f->req_user = f->tok_user;
		return 1;
	case CS_AUTHZ_PENDING:
		f->az_job = job;
		f->state = CS_FRONT_ROUTING;
		return 0;
	case CS_AUTHZ_MISS:
		break;
	}
	char *body = malloc(REVIEW_BODY_MAX);
	int rc = job_start(f, false, key, body,
	                   body ? cs_authz_token_review_body(tok, tok_len, body, REVIEW_BODY_MAX)
	                        : -1);
	return rc == -ENOMEM ? unauthorized(f) : rc;
}

int cs__authz_authorize(struct cs_front *f, const struct st_http_request *req)
{
	struct cs_server *srv = f->srv;
	if (srv->cfg.authorization_mode != CS_AUTHZ_MODE_WEBHOOK || f->az_allowed)
		return 1;
	struct cs_authz_attrs a;
	if (cs_authz_attrs_of(req->method, req->method_len, req->path, req->path_len, &a) < 0) {
		cs__request_fail(f, 400, CS_ERR_BAD_REQUEST,
		                 "malformed percent-escape in the path");
		return -1;
	}
	const struct cs_authz_user *u = f->req_user;
	if (f->az_fail == 500) {
		char msg[CS_AUTHZ_MAX_NAME_BYTES + 256];
		snprintf(msg, sizeof msg,
		         "Authorization error (user=%s, verb=%s, resource=nodes, subresource=%s)",
		         u->name, a.verb, a.subresource[f->az_next < a.n ? f->az_next : 0]);
		cs__request_fail(f, 500, CS_ERR_FORBIDDEN, msg);
		return -1;
	}
	for (; f->az_next < a.n; f->az_next++) {
		const char *sub = a.subresource[f->az_next];
		uint8_t key[CS_AUTHZ_KEY_BYTES];
		digest((const void *const[]){"sar", u->json, a.verb, sub, f->node},
		       (const size_t[]){4, u->json_len + 1, strlen(a.verb) + 1, strlen(sub) + 1,
		                        strlen(f->node)},
		       5, key);
		bool ok;
		uint64_t job;
		switch (cs_authz_cache_get(srv->authz->cache, key, st_now_ms(), &ok, NULL, &job)) {
		case CS_AUTHZ_HIT:
			srv->authz->hits++;
			if (ok)
				return 1;
			continue;
		case CS_AUTHZ_PENDING:
			f->az_job = job;
			f->state = CS_FRONT_ROUTING;
			return 0;
		case CS_AUTHZ_MISS:
			break;
		}
		char *body = malloc(REVIEW_BODY_MAX);
		int rc = job_start(
		        f, true, key, body,
		        body ? cs_authz_sar_body(u, a.verb, sub, f->node, body, REVIEW_BODY_MAX)
		             : -1);
		if (rc == -ENOMEM)
			cs__request_fail(f, 500, CS_ERR_FORBIDDEN, "out of memory");
		return rc < 0 ? -1 : rc;
	}
	char msg[CS_AUTHZ_MAX_NAME_BYTES + 256];
	cs_authz_forbidden_message(u->name, &a, msg, sizeof msg);
	st_log(ST_LOG_INFO, f->node, 0, "%s", msg);
	cs__request_fail(f, 403, CS_ERR_FORBIDDEN, msg);
	return -1;
}

/* ---- start-up ----------------------------------------------------------------------------- */

/* Does some certificate of PEM bundle @a equal one of @b in subject and public key? */
static bool same_ca(const char *a, const char *b)
{
	bool same = false;
	STACK_OF(X509_INFO) *sa = NULL, *sb = NULL;
	BIO *ba = BIO_new_file(a, "r"), *bb = BIO_new_file(b, "r");
	if (ba && bb) {
		sa = PEM_X509_INFO_read_bio(ba, NULL, NULL, NULL);
		sb = PEM_X509_INFO_read_bio(bb, NULL, NULL, NULL);
	}
	for (int i = 0; sa && sb && !same && i < sk_X509_INFO_num(sa); i++) {
		X509 *x = sk_X509_INFO_value(sa, i)->x509;
		for (int k = 0; x && !same && k < sk_X509_INFO_num(sb); k++) {
			X509 *y = sk_X509_INFO_value(sb, k)->x509;
			same = y &&
			       X509_NAME_cmp(X509_get_subject_name(x), X509_get_subject_name(y)) ==
			               0 &&
			       EVP_PKEY_eq(X509_get0_pubkey(x), X509_get0_pubkey(y)) == 1;
		}
	}
	sk_X509_INFO_pop_free(sa, X509_INFO_free);
	sk_X509_INFO_pop_free(sb, X509_INFO_free);
	BIO_free(ba);
	BIO_free(bb);
	ERR_clear_error();
	return same;
}

/* A CA whose subject names a Kubernetes cluster CA (kubeadm "kubernetes", k3s/rke2
 * "k3s-client-ca"/"rke2-client-ca"): it signs every kubelet's system:node:* certificate. */
static bool cluster_ca(const char *path)
{
	bool hit = false;
	BIO *b = BIO_new_file(path, "r");
	X509 *x = b ? PEM_read_bio_X509(b, NULL, NULL, NULL) : NULL;
	if (x) {
		char cn[256] = "";
		X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, cn, sizeof cn);
		hit = strcmp(cn, "kubernetes") == 0 || strstr(cn, "-client-ca") != NULL;
	}
	X509_free(x);
	BIO_free(b);
	ERR_clear_error();
	return hit;
}

int cs_authz_start(struct cs_server *srv)
{
	const struct cs_config *c = &srv->cfg;
	bool webhook = c->authorization_mode == CS_AUTHZ_MODE_WEBHOOK;
	if (!webhook && c->stream_allowed_subjects.n == 0) {
		st_err("the stream port would let any certificate of --stream-client-ca do "
		       "anything: "
		       "set --stream-allowed-subjects (the CN of kube-apiserver's "
		       "--kubelet-client-certificate) or --authorization-mode Webhook");
		return -EINVAL;
	}
	if (c->authentication_token_webhook && !webhook) {
		st_err("--authentication-token-webhook needs --authorization-mode Webhook (a "
		       "token's "
		       "user is authorized by SubjectAccessReview)");
		return -EINVAL;
	}
	if ((webhook || c->authentication_token_webhook) &&
	    (c->apiserver_url == NULL || c->apiserver_url[0] == '\0')) {
		st_err("--authorization-mode Webhook and --authentication-token-webhook need "
		       "--apiserver-url");
		return -EINVAL;
	}
	if (same_ca(c->stream_client_ca, c->tunnel_ca))
		st_warn("--stream-client-ca is the edge nodes' CA (--tunnel-ca): every edge node's "
		        "certificate (system:node:*) is a client of the stream port%s",
		        webhook ? "; SubjectAccessReview decides what it may do"
		                : "; only --stream-allowed-subjects keeps them out");
	else if (cluster_ca(c->stream_client_ca))
		st_warn("--stream-client-ca looks like the cluster CA, which also signs every "
		        "kubelet's system:node:* certificate: %s",
		        webhook ? "SubjectAccessReview decides what they may do"
		                : "only --stream-allowed-subjects keeps them out");
	srv->authz = calloc(1, sizeof *srv->authz);
	if (srv->authz == NULL || cs_authz_cache_new(&srv->authz->cache, CACHE_ENTRIES) < 0) {
		st_err("out of memory at start");
		return -ENOMEM;
	}
	st_info("stream port: %s, %s%s",
	        webhook ? "SubjectAccessReview per request" : "subject list",
	        c->authentication_token_webhook
	                ? "client certificates or bearer tokens (TokenReview)"
	                : "client certificates",
	        c->stream_allowed_subjects.n ? " narrowed by --stream-allowed-subjects" : "");
	return 0;
}

void cs_authz_metrics(struct st_text *t, const struct cs_server *srv)
{
	const struct cs_authz *az = srv->authz;
	if (az == NULL)
		return;
	st_text_labelled(t, "cloudstream_authz_reviews_total", "counter",
	                 "TokenReviews and SubjectAccessReviews sent to the apiserver (one call "
	                 "serves every request asking the same question meanwhile).",
	                 "kind",
	                 (const struct st_text_sample[]){{"token_review", az->token_reviews},
	                                                 {"subject_access_review", az->sars},
	                                                 {0}});
	st_text_counter(t, "cloudstream_authz_review_errors_total",
	                "Reviews that got no usable answer (not cached: 401 or 500).", az->errors);
	st_text_counter(t, "cloudstream_authz_cache_hits_total",
	                "Authentication and authorization answers taken from the cache.", az->hits);
}

void cs_authz_stop(struct cs_server *srv)
{
	if (srv->authz == NULL)
		return;
	cs_authz_cache_free(srv->authz->cache);
	free(srv->authz);
	srv->authz = NULL;
}
