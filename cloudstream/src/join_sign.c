/*
 * cloudstream/src/join_sign.c — the worker half of joins and renewals (join_srv.c is the loop
 * half, the HTTP requests on the tunnel port): the token file read and checked, a token's uses
 * counted under the mutex, the CSR's signature and node checked, and the certificate signed
 * with --signer-cert/--signer-key or by the cluster's CSR API (--csr-signer-name), then
 * joined to the CA bundle. The uses are kept in --join-uses, written before anything is signed.
 *
 * The seam is the thread: everything here runs on the worker pool (it reads files, signs, calls
 * the apiserver and waits) and touches only its own job (struct cs_join_job, join_srv.h), the
 * read-only configuration and, under cs_join.lock, the uses table; join_srv.c owns the requests
 * and answers on the loop thread.
 */
#include "tunnel_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <json-c/json.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <certs/certs.h>
#include <stream/err.h>
#include <stream/log.h>

#include "apiserver.h"
#include "join.h"
#include "join_srv.h"

#define JOIN_MAX_ANSWER_BYTES (64u * 1024u)

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
int cs__join_read_file(const char *path, size_t max, char **out, size_t *len)
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
	int rc = cs__join_read_file(path, CS_JOIN_MAX_FILE_BYTES, &text, &len);
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
static void job_token(struct cs_join_job *jb, const struct cs_config *c)
{
	char *text = NULL;
	size_t len = 0;
	int rc = cs__join_read_file(c->join_tokens, CS_JOIN_MAX_FILE_BYTES, &text, &len);
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

void cs__join_give_back_use(struct cs_join_job *jb)
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

/* A CSR object: 1 signed (the PEM into @cert), 0 pending, -1 denied or failed (@why). */
static int kube_state(struct json_object *o, char *cert, size_t cap, size_t *len, char *why,
                      size_t wcap)
{
	struct json_object *status, *b64;
	if (!json_object_object_get_ex(o, "status", &status))
		return 0;
	const char *type, *reason, *message;
	if (cs_csr_refused(status, &type, &reason, &message)) {
		snprintf(why, wcap, "%s (%.60s): %.160s", type, reason, message);
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
static int kube_sign(struct cs_join_job *jb, const struct cs_config *c, char *cert, size_t cap,
                     size_t *len)
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
	snprintf(gen, sizeof gen, "cloudstream-%s-",
	         jb->kind == CS_JOIN_KIND_JOIN ? "join" : "renew");
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
	long st = cs_apiserver_json(c, "POST", url,
	                            json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN),
	                            KUBE_BODY_MAX, &body, err, sizeof err);
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
		st = cs_apiserver_json(c, "GET", url, NULL, KUBE_BODY_MAX, &body, err, sizeof err);
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

void cs__join_job_work(void *arg)
{
	struct cs_join_job *jb = arg;
	const struct cs_config *c = &jb->j->srv->cfg; /* read-only after start-up */
	jb->status = 200;
	char *bundle = NULL;
	size_t bundle_len = 0;
	int rc = cs__join_read_file(c->tunnel_ca, JOIN_MAX_ANSWER_BYTES / 2, &bundle, &bundle_len);
	if (rc < 0) {
		JOB_FAIL(jb, 500, CS_JOIN_OK, "cannot read --tunnel-ca: %s", st_strerror(rc));
		return;
	}
	if (jb->kind == CS_JOIN_KIND_CA) {
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
	if (jb->kind == CS_JOIN_KIND_RENEW && strcmp(node, jb->node) != 0) {
		JOB_FAIL(jb, 403, CS_JOIN_CSR_NAME,
		         "the request names node %s; the certificate presented is node %s's", node,
		         jb->node);
		goto out;
	}
	if (jb->kind == CS_JOIN_KIND_JOIN) {
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
	if (cert && cs__join_kube_signer(c)) {
		if (kube_sign(jb, c, cert, CERTS_MAX_CERT_BYTES, &cert_len) < 0) {
			cs__join_give_back_use(jb);
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
		cs__join_give_back_use(jb);
		free(cert);
		JOB_FAIL(jb, 500, CS_JOIN_OK, "signing failed: %.300s",
		         err[0] ? err : st_strerror(rc));
		goto out;
	}
	jb->pem = malloc(cert_len + bundle_len + 1);
	if (jb->pem == NULL) {
		cs__join_give_back_use(jb);
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
