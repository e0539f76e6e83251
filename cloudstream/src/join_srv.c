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
#include <limits.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <json-c/json.h>
#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <certs/certs.h>
#include <stream/admin.h>
#include <stream/err.h>
#include <stream/log.h>
#include <stream/status.h>
#include <stream/workq.h>

#include "apiserver.h"
#include "join.h"
#include "join_srv.h"

#define JOIN_PATH  "/v1/cloudstream/join"
#define RENEW_PATH "/v1/cloudstream/renew"
#define CA_PATH    "/v1/cloudstream/ca"

#define JOIN_MAX_ANSWER_BYTES (64u * 1024u)
#define JOIN_BODY_TIMEOUT_S   10
#define JOIN_MAX_INFLIGHT     64u

enum join_kind { JOIN_CA, JOIN_JOIN, JOIN_RENEW };

/* One request on the tunnel port. Loop thread. */
struct cs_join_req {
	struct cs_join *j;
	struct lws *wsi;
	uint64_t ordinal;
	enum join_kind kind;
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
struct job {
	struct cs_join *j;
	uint64_t ordinal;
	enum join_kind kind;
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

static bool local_signer(const struct cs_config *c)
{
	return c->signer_key && c->signer_key[0] && c->signer_cert && c->signer_cert[0];
}

static bool kube_signer(const struct cs_config *c)
{
	return c->csr_signer_name && c->csr_signer_name[0];
}

bool cs_join_enabled(const struct cs_server *srv)
{
	return local_signer(&srv->cfg) || kube_signer(&srv->cfg);
}

/* ---- the uses table (workers, under the lock) ------------------------------------------- */

static uint32_t *use_slot_locked(struct cs_join *j, const char *id)
{
	for (size_t i = 0; i < j->n_uses; i++)
		if (strcmp(j->uses[i].id, id) == 0)
			return &j->uses[i].used;
	if (j->n_uses == CS_JOIN_MAX_TOKENS)
		return NULL;
	struct cs_join_use *u = realloc(j->uses, (j->n_uses + 1) * sizeof *u);
	if (u == NULL)
		return NULL;
	j->uses = u;
	memset(&u[j->n_uses], 0, sizeof *u);
	memcpy(u[j->n_uses].id, id, CS_JOIN_TOKEN_ID_BYTES);
	return &u[j->n_uses++].used;
}

/* ---- the worker ------------------------------------------------------------------------ */

/* Reads a whole file of at most @max bytes (NUL-terminated). */
static int read_file(const char *path, size_t max, char **out, size_t *len)
{
	FILE *f = fopen(path, "re");
	if (f == NULL)
		return -errno;
	char *buf = malloc(max + 1);
	size_t n = buf ? fread(buf, 1, max + 1, f) : 0;
	int rc = buf == NULL ? -ENOMEM : ferror(f) ? -EIO : n > max ? -EMSGSIZE : 0;
	fclose(f);
	if (rc < 0) {
		free(buf);
		return rc;
	}
	buf[n] = '\0';
	*out = buf;
	*len = n;
	return 0;
}

/* ---- the uses file (--join-uses; workers, under the lock) -------------------------------- */

static void uses_path(const struct cs_config *c, char *out, size_t cap)
{
	if (c->join_uses && c->join_uses[0])
		snprintf(out, cap, "%s", c->join_uses);
	else
		snprintf(out, cap, "%s.uses", c->join_tokens);
}

/* Reads the uses back once: a missing file is none taken. 0, or -errno with @why. */
static int uses_load_locked(struct cs_join *j, const struct cs_config *c, char *why, size_t whylen)
{
	if (j->uses_loaded)
		return 0;
	char path[PATH_MAX];
	uses_path(c, path, sizeof path);
	char *text = NULL;
	size_t len = 0;
	int rc = read_file(path, CS_JOIN_MAX_FILE_BYTES, &text, &len);
	if (rc == -ENOENT) {
		j->uses_loaded = true;
		return 0;
	}
	struct cs_join_error perr = {0};
	struct cs_join_use *v = NULL;
	size_t n = 0;
	if (rc == 0)
		rc = cs_join_uses_parse(text, len, &v, &n, &perr);
	free(text);
	if (rc < 0) {
		snprintf(why, whylen, "%s: %s%s%s", path, st_strerror(rc), perr.why ? ": " : "",
		         perr.why ? perr.why : "");
		return rc;
	}
	free(j->uses);
	j->uses = v;
	j->n_uses = n;
	j->uses_loaded = true;
	return 0;
}

/* Writes every use taken: a temporary file, synced, renamed over the old one. */
static int uses_save_locked(struct cs_join *j, const struct cs_config *c, char *why, size_t whylen)
{
	char path[PATH_MAX], tmp[PATH_MAX + 8];
	uses_path(c, path, sizeof path);
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	size_t need = cs_join_uses_format(j->uses, j->n_uses, NULL, 0);
	char *text = malloc(need + 1);
	if (text == NULL)
		return -ENOMEM;
	cs_join_uses_format(j->uses, j->n_uses, text, need + 1);
	int rc = 0;
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		rc = -errno;
	for (size_t off = 0; rc == 0 && off < need;) {
		ssize_t w = write(fd, text + off, need - off);
		if (w < 0 && errno != EINTR)
			rc = -errno;
		else if (w > 0)
			off += (size_t)w;
	}
	if (rc == 0 && fsync(fd) != 0)
		rc = -errno;
	if (fd >= 0 && close(fd) != 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, path) != 0)
		rc = -errno;
	if (rc < 0) {
		unlink(tmp);
		snprintf(why, whylen, "%s: %s", path, st_strerror(rc));
	}
	free(text);
	return rc;
}

#define JOB_FAIL(jb, st, r, ...)                                                                   \
	do {                                                                                       \
		(jb)->status = (st);                                                               \
		(jb)->refusal = (r);                                                               \
		snprintf((jb)->detail, sizeof(jb)->detail, __VA_ARGS__);                           \
	} while (0)

/* The token check for a join: the file, the secret, the expiry, the node, one use taken. */
static void job_token(struct job *jb, const struct cs_config *c)
{
	char *text = NULL;
	size_t len = 0;
	int rc = read_file(c->join_tokens, CS_JOIN_MAX_FILE_BYTES, &text, &len);
	struct cs_join_tokens *toks = NULL;
	struct cs_join_error perr;
	if (rc == 0)
		rc = cs_join_tokens_parse(text, len, &toks, &perr);
	free(text);
	if (rc < 0) {
		JOB_FAIL(jb, 503, CS_JOIN_OK, "the join token file %s cannot be used: %s%s%s",
		         c->join_tokens, st_strerror(rc), rc == -EBADMSG ? ": " : "",
		         rc == -EBADMSG ? perr.why : "");
		return;
	}
	const struct cs_join_token *t = cs_join_tokens_find(toks, jb->id);
	uint8_t md[32];
	unsigned mdlen = 0;
	bool secret_ok =
	        t &&
	        EVP_Digest(jb->token, strlen(jb->token), md, &mdlen, EVP_sha256(), NULL) == 1 &&
	        mdlen == 32 && CRYPTO_memcmp(md, t->hash, 32) == 0;
	int64_t now = (int64_t)time(NULL);
	char why[PATH_MAX + 200] = "";
	pthread_mutex_lock(&jb->j->lock);
	rc = uses_load_locked(jb->j, c, why, sizeof why);
	uint32_t *used = secret_ok && rc == 0 ? use_slot_locked(jb->j, jb->id) : NULL;
	enum cs_join_refusal r =
	        cs_join_token_check(t, secret_ok, now, used ? *used : UINT32_MAX, jb->node);
	if (rc == 0 && r == CS_JOIN_OK) {
		(*used)++;
		/* Recorded before anything is signed: a use that cannot be kept is not taken. */
		rc = uses_save_locked(jb->j, c, why, sizeof why);
		if (rc < 0)
			(*used)--;
		else
			jb->counted = true;
	}
	pthread_mutex_unlock(&jb->j->lock);
	if (rc < 0) {
		JOB_FAIL(jb, 503, CS_JOIN_OK, "the uses of join tokens cannot be kept: %.600s",
		         why);
		cs_join_tokens_free(toks);
		return;
	}
	switch (r) {
	case CS_JOIN_OK:
		break;
	case CS_JOIN_UNKNOWN:
		JOB_FAIL(jb, 403, r, "token %s is not a valid join token", jb->id);
		break;
	case CS_JOIN_EXPIRED:
		JOB_FAIL(jb, 403, r, "token %s expired %lld s ago", jb->id,
		         (long long)(now - t->expires));
		break;
	case CS_JOIN_USED_UP:
		JOB_FAIL(jb, 403, r, "token %s was already used (%u of %u uses)", jb->id, t->uses,
		         t->uses);
		break;
	case CS_JOIN_FOREIGN_NODE:
		JOB_FAIL(jb, 403, r, "token %s is for node %s, not %s", jb->id, t->node, jb->node);
		break;
	default:
		JOB_FAIL(jb, 403, r, "token %s refused", jb->id);
		break;
	}
	cs_join_tokens_free(toks);
}

static void give_back_use(struct job *jb)
{
	if (!jb->counted)
		return;
	char why[PATH_MAX + 200] = "";
	pthread_mutex_lock(&jb->j->lock);
	uint32_t *used = use_slot_locked(jb->j, jb->id);
	int rc = 0;
	if (used && *used > 0) {
		(*used)--;
		rc = uses_save_locked(jb->j, &jb->j->srv->cfg, why, sizeof why);
	}
	pthread_mutex_unlock(&jb->j->lock);
	jb->counted = false;
	if (rc < 0) /* the use stays counted on disk: safe, one use lost to the edge */
		st_warn("a token use given back could not be recorded: %s", why);
}

/* ---- --csr-signer-name: the Kubernetes CSR API signs (worker) ------------------------------- */

#define KUBE_BODY_MAX (256u * 1024u)
#define KUBE_POLL_US  250000
#define KUBE_URL_MAX  1024

/* One call to --apiserver-url: the HTTP status (0 with @err when the call failed). */
static long kube_call(const struct cs_config *c, const char *method, const char *url,
                      const char *body, char **out, char *err, size_t cap)
{
	*out = NULL;
	CURL *h = curl_easy_init();
	if (h == NULL) {
		snprintf(err, cap, "curl_easy_init failed");
		return 0;
	}
	char errbuf[CURL_ERROR_SIZE] = "";
	struct curl_slist *hdrs = NULL;
	struct cs_api_body b = {.max = KUBE_BODY_MAX};
	long status = 0;
	if (cs_apiserver_setup(h, c, url, &hdrs, errbuf, err, cap) < 0)
		goto out;
	if (body) {
		struct curl_slist *l = curl_slist_append(hdrs, "Content-Type: application/json");
		if (l == NULL)
			goto out;
		hdrs = l;
		curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
	}
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, cs_apiserver_collect);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
	CURLcode rc = curl_easy_perform(h);
	if (rc != CURLE_OK) {
		snprintf(err, cap, "%s certificatesigningrequests: %s", method,
		         errbuf[0] ? errbuf : curl_easy_strerror(rc));
		goto out;
	}
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	*out = b.p;
	b.p = NULL;
out:
	free(b.p);
	curl_slist_free_all(hdrs);
	curl_easy_cleanup(h);
	return status;
}

/* A CSR object: 1 signed (the PEM into @cert), 0 pending, -1 denied or failed (@why). */
static int kube_state(struct json_object *o, char *cert, size_t cap, size_t *len, char *why,
                      size_t wcap)
{
	struct json_object *status, *conds, *b64;
	if (!json_object_object_get_ex(o, "status", &status))
		return 0;
	if (json_object_object_get_ex(status, "conditions", &conds) &&
	    json_object_is_type(conds, json_type_array))
		for (size_t i = 0; i < json_object_array_length(conds); i++) {
			struct json_object *cd = json_object_array_get_idx(conds, i), *t, *r, *m;
			const char *type = json_object_object_get_ex(cd, "type", &t)
			                           ? json_object_get_string(t)
			                           : "";
			if (strcmp(type, "Denied") != 0 && strcmp(type, "Failed") != 0)
				continue;
			snprintf(why, wcap, "%s (%.60s): %.160s", type,
			         json_object_object_get_ex(cd, "reason", &r)
			                 ? json_object_get_string(r)
			                 : "",
			         json_object_object_get_ex(cd, "message", &m)
			                 ? json_object_get_string(m)
			                 : "");
			return -1;
		}
	if (!json_object_object_get_ex(status, "certificate", &b64) ||
	    json_object_get_string_len(b64) == 0)
		return 0;
	const char *in = json_object_get_string(b64);
	size_t n = strlen(in);
	if (n / 4 * 3 + 1 > cap) {
		snprintf(why, wcap, "status.certificate over %zu bytes", cap);
		return -1;
	}
	int dl = EVP_DecodeBlock((unsigned char *)cert, (const unsigned char *)in, (int)n);
	if (dl <= 0 || strstr(cert, "-----BEGIN CERTIFICATE-----") == NULL) {
		snprintf(why, wcap, "status.certificate is not PEM");
		return -1;
	}
	while (dl > 0 && cert[dl - 1] == '\0') /* base64 padding decodes to NULs */
		dl--;
	cert[dl] = '\0';
	*len = (size_t)dl;
	return 1;
}

/* The edge's request as a CertificateSigningRequest, then its state until signed, denied or
 * --csr-wait. Returns 0 with the certificate in @cert, or fails @jb. */
static int kube_sign(struct job *jb, const struct cs_config *c, char *cert, size_t cap, size_t *len)
{
	pthread_mutex_lock(&jb->j->lock);
	bool busy = jb->j->csr_waiting;
	jb->j->csr_waiting = true;
	pthread_mutex_unlock(&jb->j->lock);
	if (busy) {
		JOB_FAIL(jb, 503, CS_JOIN_OK, "another join waits for the cluster's signer; retry");
		return -1;
	}
	int rc = -1;
	char err[300] = "", url[KUBE_URL_MAX], *body = NULL;
	size_t b64cap = 4 * ((jb->csr_len + 2) / 3) + 1;
	char *b64 = malloc(b64cap);
	struct json_object *o = json_object_new_object(), *meta = json_object_new_object(),
	                   *spec = json_object_new_object(), *usages = json_object_new_array();
	if (b64 == NULL || o == NULL || meta == NULL || spec == NULL || usages == NULL) {
		json_object_put(meta);
		json_object_put(spec);
		json_object_put(usages);
		JOB_FAIL(jb, 500, CS_JOIN_OK, "out of memory");
		goto out;
	}
	EVP_EncodeBlock((unsigned char *)b64, (const unsigned char *)jb->csr, (int)jb->csr_len);
	char gen[64];
	snprintf(gen, sizeof gen, "cloudstream-%s-", jb->kind == JOIN_JOIN ? "join" : "renew");
	json_object_object_add(o, "apiVersion", json_object_new_string("certificates.k8s.io/v1"));
	json_object_object_add(o, "kind", json_object_new_string("CertificateSigningRequest"));
	json_object_object_add(meta, "generateName", json_object_new_string(gen));
	json_object_object_add(o, "metadata", meta);
	json_object_object_add(spec, "request", json_object_new_string(b64));
	json_object_object_add(spec, "signerName", json_object_new_string(c->csr_signer_name));
	json_object_array_add(usages, json_object_new_string("digital signature"));
	json_object_array_add(usages, json_object_new_string("client auth"));
	json_object_object_add(spec, "usages", usages);
	uint64_t life = c->signed_cert_lifetime_ms / 1000;
	json_object_object_add(spec, "expirationSeconds",
	                       json_object_new_int64((int64_t)(life < 600 ? 600 : life)));
	json_object_object_add(o, "spec", spec);
	snprintf(url, sizeof url, "%s/apis/certificates.k8s.io/v1/certificatesigningrequests",
	         c->apiserver_url);
	long st =
	        kube_call(c, "POST", url, json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN),
	                  &body, err, sizeof err);
	struct json_object *created = st == 201 && body ? json_tokener_parse(body) : NULL, *m, *nm;
	free(body);
	body = NULL;
	char name[254] = "";
	if (created && json_object_object_get_ex(created, "metadata", &m) &&
	    json_object_object_get_ex(m, "name", &nm))
		snprintf(name, sizeof name, "%s", json_object_get_string(nm));
	json_object_put(created);
	if (name[0] == '\0') {
		if (st)
			JOB_FAIL(jb, 502, CS_JOIN_OK,
			         "creating the CSR: the apiserver answered %ld", st);
		else
			JOB_FAIL(jb, 502, CS_JOIN_OK, "creating the CSR: %.250s", err);
		goto out;
	}
	snprintf(url, sizeof url, "%s/apis/certificates.k8s.io/v1/certificatesigningrequests/%s",
	         c->apiserver_url, name);
	struct timespec t0, now;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		st = kube_call(c, "GET", url, NULL, &body, err, sizeof err);
		struct json_object *csr = st == 200 && body ? json_tokener_parse(body) : NULL;
		free(body);
		body = NULL;
		char why[300] = "";
		int state = csr ? kube_state(csr, cert, cap, len, why, sizeof why) : 0;
		json_object_put(csr);
		if (state == 1) {
			rc = 0;
			break;
		}
		if (state < 0) {
			JOB_FAIL(jb, 403, CS_JOIN_CSR_DENIED, "CSR %s: %s", name, why);
			break;
		}
		clock_gettime(CLOCK_MONOTONIC, &now);
		uint64_t ms = (uint64_t)(now.tv_sec - t0.tv_sec) * 1000u +
		              (uint64_t)((now.tv_nsec - t0.tv_nsec) / 1000000);
		if (ms >= c->csr_wait_ms) {
			JOB_FAIL(jb, 503, CS_JOIN_OK,
			         "CSR %s was not approved and signed within %llu ms (signer %s); "
			         "retry",
			         name, (unsigned long long)c->csr_wait_ms, c->csr_signer_name);
			break;
		}
		usleep(KUBE_POLL_US);
	}
out:
	json_object_put(o);
	free(b64);
	pthread_mutex_lock(&jb->j->lock);
	jb->j->csr_waiting = false;
	pthread_mutex_unlock(&jb->j->lock);
	return rc;
}

static void job_work(void *arg)
{
	struct job *jb = arg;
	const struct cs_config *c = &jb->j->srv->cfg; /* read-only after start-up */
	jb->status = 200;
	char *bundle = NULL;
	size_t bundle_len = 0;
	int rc = read_file(c->tunnel_ca, JOIN_MAX_ANSWER_BYTES / 2, &bundle, &bundle_len);
	if (rc < 0) {
		JOB_FAIL(jb, 500, CS_JOIN_OK, "cannot read --tunnel-ca: %s", st_strerror(rc));
		return;
	}
	if (jb->kind == JOIN_CA) {
		jb->pem = bundle;
		jb->pem_len = bundle_len;
		return;
	}
	/* The request names its node; a join's token is checked against it. */
	struct certs_csr_info info;
	const char *why = NULL;
	char node[CS_JOIN_NODE_MAX_BYTES + 1];
	rc = certs_csr_read(jb->csr, jb->csr_len, &info);
	if (rc < 0) {
		JOB_FAIL(jb, 403, CS_JOIN_BAD_CSR,
		         "the body is not one PEM certificate request signed by its own key (%s)",
		         st_strerror(rc));
		goto out;
	}
	if (cs_join_csr_node(&info, node, sizeof node, &why) != CS_JOIN_OK) {
		JOB_FAIL(jb, 403, CS_JOIN_CSR_NAME, "%s", why);
		goto out;
	}
	if (jb->kind == JOIN_RENEW && strcmp(node, jb->node) != 0) {
		JOB_FAIL(jb, 403, CS_JOIN_CSR_NAME,
		         "the request names node %s; the certificate presented is node %s's", node,
		         jb->node);
		goto out;
	}
	if (jb->kind == JOIN_JOIN) {
		snprintf(jb->node, sizeof jb->node, "%s", node);
		job_token(jb, c);
		if (jb->status != 200)
			goto out;
	}
	char cn[CS_JOIN_NODE_MAX_BYTES + 16];
	snprintf(cn, sizeof cn, "system:node:%s", node);
	const char *orgs[] = {"system:nodes"};
	char *cert = malloc(CERTS_MAX_CERT_BYTES);
	size_t cert_len = 0;
	char err[300] = "";
	if (cert && kube_signer(c)) {
		if (kube_sign(jb, c, cert, CERTS_MAX_CERT_BYTES, &cert_len) < 0) {
			give_back_use(jb);
			free(cert);
			goto out;
		}
		rc = 0;
	} else {
		rc = cert ? certs_sign_csr(c->signer_cert, c->signer_key, jb->csr, jb->csr_len, cn,
		                           orgs, 1, (long)(c->signed_cert_lifetime_ms / 1000), cert,
		                           CERTS_MAX_CERT_BYTES, &cert_len, err, sizeof err)
		          : -ENOMEM;
	}
	if (rc < 0) {
		give_back_use(jb);
		free(cert);
		JOB_FAIL(jb, 500, CS_JOIN_OK, "signing failed: %.300s",
		         err[0] ? err : st_strerror(rc));
		goto out;
	}
	jb->pem = malloc(cert_len + bundle_len + 1);
	if (jb->pem == NULL) {
		give_back_use(jb);
		free(cert);
		JOB_FAIL(jb, 500, CS_JOIN_OK, "out of memory");
		goto out;
	}
	memcpy(jb->pem, cert, cert_len);
	memcpy(jb->pem + cert_len, bundle, bundle_len);
	jb->pem_len = cert_len + bundle_len;
	jb->pem[jb->pem_len] = '\0';
	free(cert);
out:
	free(bundle);
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
	const char *what = r->kind == JOIN_RENEW ? "renewal" : r->kind == JOIN_JOIN ? "join" : "CA";
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
	struct job *jb = arg;
	struct cs_join *j = jb->j;
	struct cs_join_req *r = find_req(j, jb->ordinal);
	if (r)
		r->submitted = false;
	if (status < 0 && r)
		refuse(r, 503, CS_JOIN_OK, "cloudstream is shutting down");
	else if (r && jb->status != 200)
		refuse(r, jb->status, jb->refusal, jb->detail);
	else if (r && jb->kind != JOIN_CA && cs_identity_denied(j->srv, jb->node, "")) {
		/* The deny list lives on the loop: judged here, the certificate thrown away. */
		give_back_use(jb);
		snprintf(r->node, sizeof r->node, "%s", jb->node);
		refuse(r, 403, CS_JOIN_DENIED, "node is on the deny list");
	} else if (r) {
		char what[200] = "";
		if (jb->kind == JOIN_CA) {
			j->ca_served++;
		} else {
			describe_cert(jb->pem, jb->pem_len, what, sizeof what);
			snprintf(r->node, sizeof r->node, "%s", jb->node);
			if (jb->kind == JOIN_JOIN) {
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
		give_back_use(jb); /* the edge is gone: it never got the certificate */
	}
	free(jb->csr);
	free(jb->pem);
	free(jb);
}

static void submit(struct cs_join_req *r)
{
	struct cs_join *j = r->j;
	struct job *jb = calloc(1, sizeof *jb);
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
	if (st_workq_submit(j->srv->wq, job_work, job_done, jb) < 0) {
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
	enum join_kind kind;
	if (strcmp(uri, CA_PATH) == 0 && !post)
		kind = JOIN_CA;
	else if (strcmp(uri, JOIN_PATH) == 0 && post && srv->cfg.join_tokens &&
	         srv->cfg.join_tokens[0])
		kind = JOIN_JOIN;
	else if (strcmp(uri, RENEW_PATH) == 0 && post)
		kind = JOIN_RENEW;
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
	if (kind == JOIN_CA) {
		submit(r);
		return 1;
	}
	if (kind == JOIN_RENEW) {
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
	if (r->kind == JOIN_JOIN && r->bad_token) {
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
	if (kube_signer(c) && (c->apiserver_url == NULL || c->apiserver_url[0] == '\0')) {
		st_err("--csr-signer-name needs --apiserver-url");
		return -EINVAL;
	}
	if (!kube_signer(c) &&
	    certs_check_pair(c->signer_cert, c->signer_key, err, sizeof err) < 0) {
		st_err("--signer-cert/--signer-key: %s", err);
		return -EINVAL;
	}
	if (tokens) {
		char *text = NULL;
		size_t len = 0;
		struct cs_join_tokens *t = NULL;
		struct cs_join_error perr = {0, NULL};
		int rc = read_file(c->join_tokens, CS_JOIN_MAX_FILE_BYTES, &text, &len);
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
	st_text_metric(t, "cloudstream_certificates_signed_total", "counter",
	               "Edge certificates signed, by kind: join (a token) or renew (the edge's "
	               "current certificate).");
	st_text_put(t, "cloudstream_certificates_signed_total{kind=\"join\"} %llu\n",
	            (unsigned long long)j->signed_join);
	st_text_put(t, "cloudstream_certificates_signed_total{kind=\"renew\"} %llu\n",
	            (unsigned long long)j->signed_renew);
	st_text_metric(t, "cloudstream_join_refusals_total", "counter",
	               "Joins and renewals refused, by reason.");
	for (int i = 1; i < CS_JOIN_REFUSAL_COUNT; i++)
		st_text_put(t, "cloudstream_join_refusals_total{reason=\"%s\"} %llu\n",
		            cs_join_refusal_name((enum cs_join_refusal)i),
		            (unsigned long long)j->refused[i]);
}
