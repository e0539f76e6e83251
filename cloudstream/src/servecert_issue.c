/*
 * cloudstream/src/servecert_issue.c — a node's serving certificate, made on a worker thread:
 * the Node's addresses from the apiserver, a new P-256 key, then either a certificate signed
 * with the operator's serving CA or a CertificateSigningRequest for the signer
 * kubernetes.io/kubelet-serving (created, approved when allowed, then polled).
 *
 * What the request looks like follows the kubelet (pkg/kubelet/certificate/kubelet.go): subject
 * CN=system:node:<name>, O=system:nodes; DNS SANs from the Node's Hostname, InternalDNS and
 * ExternalDNS addresses, IP SANs from its InternalIP and ExternalIP ones; usages digital
 * signature and server auth (an EC key: no key encipherment). kube-controller-manager's signer
 * refuses anything else for that signer (pkg/apis/certificates IsKubeletServingCSR).
 *
 * Only the job and the read-only configuration are touched here (servecert_int.h).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>
#include <json-c/json.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include "apiserver.h"
#include "cs.h"
#include "servecert_int.h"

#define API_BODY_MAX   (1u << 20)
#define SANS_MAX       16u
#define SAN_TEXT_MAX   2048u
#define URL_MAX        2048u
#define KUBELET_SIGNER "kubernetes.io/kubelet-serving"

struct sans {
	char ip[SANS_MAX][INET6_ADDRSTRLEN];
	size_t n_ip;
	char dns[SANS_MAX][CS_NODE_NAME_MAX_BYTES + 1];
	size_t n_dns;
};

/* One apiserver call of the job (apiserver.h cs_apiserver_json): the failure in j->error. */
static long api_call(struct cs_sc_job *j, const char *method, const char *url, const char *body,
                     char **out)
{
	return cs_apiserver_json(&j->srv->cfg, method, url, body, API_BODY_MAX, out, j->error,
	                         sizeof j->error);
}

static struct json_object *parse(const char *p)
{
	return p ? json_tokener_parse(p) : NULL;
}

/* A Status answer's message, for the log. */
static void status_error(struct cs_sc_job *j, const char *what, long status, const char *body)
{
	struct json_object *o = parse(body), *m;
	const char *msg =
	        o && json_object_object_get_ex(o, "message", &m) ? json_object_get_string(m) : "";
	snprintf(j->error, sizeof j->error, "%s: HTTP %ld%s%.200s", what, status,
	         msg[0] ? ": " : "", msg);
	json_object_put(o);
}

/* A DNS name we put in a SAN: letters, digits, '-', '.', as the node names' DNS-1123. */
static bool dns_ok(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 253)
		return false;
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '-' || ch == '.'))
			return false;
	}
	return true;
}

static void add_ip(struct sans *s, const char *a)
{
	unsigned char bin[16];
	if (s->n_ip >= SANS_MAX ||
	    (inet_pton(AF_INET, a, bin) != 1 && inet_pton(AF_INET6, a, bin) != 1))
		return;
	for (size_t i = 0; i < s->n_ip; i++)
		if (strcmp(s->ip[i], a) == 0)
			return;
	snprintf(s->ip[s->n_ip++], sizeof s->ip[0], "%s", a);
}

static void add_dns(struct sans *s, const char *a)
{
	if (s->n_dns >= SANS_MAX || !dns_ok(a) || strlen(a) >= sizeof s->dns[0])
		return;
	for (size_t i = 0; i < s->n_dns; i++)
		if (strcmp(s->dns[i], a) == 0)
			return;
	snprintf(s->dns[s->n_dns++], sizeof s->dns[0], "%s", a);
}

/* GET the Node: its status.addresses become the SANs. 0, or -1 with j->error. */
static int node_sans(struct cs_sc_job *j, struct sans *s)
{
	char url[URL_MAX];
	snprintf(url, sizeof url, "%s/api/v1/nodes/%s", j->srv->cfg.apiserver_url, j->node);
	char *body = NULL;
	long st = api_call(j, "GET", url, NULL, &body);
	if (st != 200) {
		if (st != 0)
			status_error(j, "GET Node", st, body);
		free(body);
		return -1;
	}
	struct json_object *o = parse(body), *status, *addrs;
	free(body);
	if (o && json_object_object_get_ex(o, "status", &status) &&
	    json_object_object_get_ex(status, "addresses", &addrs) &&
	    json_object_is_type(addrs, json_type_array)) {
		size_t n = json_object_array_length(addrs);
		for (size_t i = 0; i < n; i++) {
			struct json_object *a = json_object_array_get_idx(addrs, i), *t, *v;
			if (!json_object_object_get_ex(a, "type", &t) ||
			    !json_object_object_get_ex(a, "address", &v))
				continue;
			const char *type = json_object_get_string(t),
			           *val = json_object_get_string(v);
			if (strcmp(type, "InternalIP") == 0 || strcmp(type, "ExternalIP") == 0)
				add_ip(s, val);
			else if (strcmp(type, "Hostname") == 0 ||
			         strcmp(type, "InternalDNS") == 0 ||
			         strcmp(type, "ExternalDNS") == 0)
				add_dns(s, val);
		}
	}
	json_object_put(o);
	if (s->n_ip + s->n_dns == 0) {
		/* The kubelet refuses too: a serving certificate must name something. */
		snprintf(j->error, sizeof j->error, "Node %s lists no addresses", j->node);
		return -1;
	}
	return 0;
}

/* "DNS:a,IP:b" for X509V3_EXT_nconf_nid, and the same text for the log. */
static void sans_text(const struct sans *s, char *out, size_t cap)
{
	size_t n = 0;
	out[0] = '\0';
	for (size_t i = 0; i < s->n_dns && n < cap; i++)
		n += (size_t)snprintf(out + n, cap - n, "%sDNS:%s", n ? "," : "", s->dns[i]);
	for (size_t i = 0; i < s->n_ip && n < cap; i++)
		n += (size_t)snprintf(out + n, cap - n, "%sIP:%s", n ? "," : "", s->ip[i]);
}

static void ssl_error(struct cs_sc_job *j, const char *what)
{
	unsigned long e = ERR_get_error();
	char buf[160] = "";
	if (e)
		ERR_error_string_n(e, buf, sizeof buf);
	ERR_clear_error(); /* the queue stays empty (STYLE B4.6) */
	snprintf(j->error, sizeof j->error, "%s: %s", what, buf[0] ? buf : "failed");
}

static X509_NAME *node_subject(const char *node)
{
	X509_NAME *n = X509_NAME_new();
	char cn[CS_NODE_NAME_MAX_BYTES + 16];
	snprintf(cn, sizeof cn, "system:node:%s", node);
	if (n == NULL ||
	    !X509_NAME_add_entry_by_txt(n, "O", MBSTRING_ASC, (const unsigned char *)"system:nodes",
	                                -1, -1, 0) ||
	    !X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1,
	                                0)) {
		X509_NAME_free(n);
		return NULL;
	}
	return n;
}

static int add_ext(X509 *x, X509V3_CTX *ctx, int nid, const char *value)
{
	X509_EXTENSION *e = X509V3_EXT_nconf_nid(NULL, ctx, nid, value);
	if (e == NULL)
		return -1;
	int ok = X509_add_ext(x, e, -1);
	X509_EXTENSION_free(e);
	return ok ? 0 : -1;
}

/* ca mode: a certificate for the job's key, signed by the serving CA. */
static int sign_with_ca(struct cs_sc_job *j, const char *san)
{
	X509 *x = X509_new();
	X509_NAME *subj = node_subject(j->node);
	BIGNUM *bn = BN_new();
	int rc = -1;
	if (x == NULL || subj == NULL || bn == NULL || !X509_set_version(x, 2) ||
	    !BN_rand(bn, 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) ||
	    !BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) || !X509_set_subject_name(x, subj) ||
	    !X509_set_issuer_name(x, X509_get_subject_name(j->ca->cert)) ||
	    !X509_set_pubkey(x, j->key)) {
		ssl_error(j, "building the certificate");
		goto out;
	}
	/* Valid from a little before now (clocks differ), never past the CA's own end. */
	time_t now = time(NULL);
	if (!X509_gmtime_adj(X509_getm_notBefore(x), -300) ||
	    !X509_time_adj_ex(X509_getm_notAfter(x), 0, (long)j->validity_s, &now)) {
		ssl_error(j, "setting the validity");
		goto out;
	}
	if (X509_cmp_time(X509_get0_notAfter(j->ca->cert), NULL) > 0 &&
	    ASN1_TIME_compare(X509_get0_notAfter(x), X509_get0_notAfter(j->ca->cert)) > 0)
		X509_set1_notAfter(x, X509_get0_notAfter(j->ca->cert));
	X509V3_CTX ctx;
	X509V3_set_ctx(&ctx, j->ca->cert, x, NULL, NULL, 0);
	if (add_ext(x, &ctx, NID_basic_constraints, "critical,CA:FALSE") < 0 ||
	    add_ext(x, &ctx, NID_key_usage, "critical,digitalSignature") < 0 ||
	    add_ext(x, &ctx, NID_ext_key_usage, "serverAuth") < 0 ||
	    add_ext(x, &ctx, NID_subject_key_identifier, "hash") < 0 ||
	    add_ext(x, &ctx, NID_authority_key_identifier, "keyid:always") < 0 ||
	    add_ext(x, &ctx, NID_subject_alt_name, san) < 0) {
		ssl_error(j, "certificate extensions");
		goto out;
	}
	if (X509_sign(x, j->ca->key, EVP_sha256()) <= 0) {
		ssl_error(j, "signing with --serving-ca-key");
		goto out;
	}
	j->cert = x;
	x = NULL;
	rc = 0;
out:
	X509_free(x);
	X509_NAME_free(subj);
	BN_free(bn);
	return rc;
}

/* csr mode: the PEM CertificateRequest, base64 as spec.request wants it. Owned by the caller. */
static char *csr_request_b64(struct cs_sc_job *j, const char *san)
{
	X509_REQ *req = X509_REQ_new();
	X509_NAME *subj = node_subject(j->node);
	STACK_OF(X509_EXTENSION) *exts = sk_X509_EXTENSION_new_null();
	X509_EXTENSION *e = NULL;
	BIO *mem = BIO_new(BIO_s_mem());
	char *out = NULL;
	if (req == NULL || subj == NULL || exts == NULL || mem == NULL ||
	    !X509_REQ_set_version(req, 0) || !X509_REQ_set_subject_name(req, subj) ||
	    !X509_REQ_set_pubkey(req, j->key) ||
	    (e = X509V3_EXT_nconf_nid(NULL, NULL, NID_subject_alt_name, san)) == NULL ||
	    !sk_X509_EXTENSION_push(exts, e)) {
		X509_EXTENSION_free(e);
		ssl_error(j, "building the CertificateRequest");
		goto out;
	}
	if (!X509_REQ_add_extensions(req, exts) || X509_REQ_sign(req, j->key, EVP_sha256()) <= 0 ||
	    !PEM_write_bio_X509_REQ(mem, req)) {
		ssl_error(j, "signing the CertificateRequest");
		goto out;
	}
	char *pem;
	long n = BIO_get_mem_data(mem, &pem);
	out = malloc(((size_t)n + 2) / 3 * 4 + 1);
	if (out == NULL) {
		snprintf(j->error, sizeof j->error, "out of memory");
		goto out;
	}
	EVP_EncodeBlock((unsigned char *)out, (const unsigned char *)pem, (int)n);
out:
	sk_X509_EXTENSION_pop_free(exts, X509_EXTENSION_free);
	X509_NAME_free(subj);
	X509_REQ_free(req);
	BIO_free(mem);
	return out;
}

/* status.certificate (base64 PEM, maybe a chain: the leaf first), checked against our key. */
static int take_certificate(struct cs_sc_job *j, const char *b64)
{
	size_t n = strlen(b64);
	unsigned char *pem = malloc(n / 4 * 3 + 4);
	if (pem == NULL) {
		snprintf(j->error, sizeof j->error, "out of memory");
		return -1;
	}
	int len = EVP_DecodeBlock(pem, (const unsigned char *)b64, (int)n);
	X509 *x = NULL;
	if (len > 0) {
		BIO *mem = BIO_new_mem_buf(pem, len);
		x = mem ? PEM_read_bio_X509(mem, NULL, NULL, NULL) : NULL;
		BIO_free(mem);
	}
	free(pem);
	if (x == NULL) {
		ssl_error(j, "status.certificate is not a PEM certificate");
		return -1;
	}
	if (j->key && X509_check_private_key(x, j->key) != 1) {
		ERR_clear_error();
		X509_free(x);
		snprintf(j->error, sizeof j->error, "status.certificate is not for our key");
		return -1;
	}
	j->cert = x;
	return 0;
}

/* A CSR object's state: a certificate, a Denied/Failed condition, or still pending. */
static void csr_state(struct cs_sc_job *j, struct json_object *o)
{
	struct json_object *status, *cert;
	if (!json_object_object_get_ex(o, "status", &status)) {
		j->pending = true;
		return;
	}
	const char *type, *reason, *message;
	if (cs_csr_refused(status, &type, &reason, &message)) {
		j->denied = true;
		snprintf(j->detail, sizeof j->detail, "%s: %.40s: %.80s", type, reason, message);
		return;
	}
	if (json_object_object_get_ex(status, "certificate", &cert) &&
	    json_object_get_string_len(cert) > 0) {
		j->pending = false;
		take_certificate(j, json_object_get_string(cert));
		return;
	}
	j->pending = true;
}

/* csr mode: approve our own CSR through the approval subresource (PUT the object with an
 * Approved condition); a 403 means the cluster's approver must do it. */
static void csr_approve(struct cs_sc_job *j, struct json_object *csr)
{
	struct json_object *status, *conds;
	if (!json_object_object_get_ex(csr, "status", &status)) {
		status = json_object_new_object();
		json_object_object_add(csr, "status", status);
	}
	if (!json_object_object_get_ex(status, "conditions", &conds)) {
		conds = json_object_new_array();
		json_object_object_add(status, "conditions", conds);
	}
	struct json_object *c = json_object_new_object();
	json_object_object_add(c, "type", json_object_new_string("Approved"));
	json_object_object_add(c, "status", json_object_new_string("True"));
	json_object_object_add(c, "reason", json_object_new_string("CloudstreamApprove"));
	json_object_object_add(c, "message",
	                       json_object_new_string("approved by cloudstream: the serving "
	                                              "certificate of an edge node it serves"));
	json_object_array_add(conds, c);
	char url[URL_MAX];
	snprintf(url, sizeof url,
	         "%s/apis/certificates.k8s.io/v1/certificatesigningrequests/%s/approval",
	         j->srv->cfg.apiserver_url, j->csr_name);
	char *body = NULL;
	long st = api_call(j, "PUT", url,
	                   json_object_to_json_string_ext(csr, JSON_C_TO_STRING_PLAIN), &body);
	if (st == 200) {
		struct json_object *o = parse(body);
		if (o)
			csr_state(j, o);
		json_object_put(o);
	} else if (st == 403) {
		j->approve_forbidden = true;
	} else {
		/* Not fatal: the CSR stays, and the cluster's approver may still approve it. */
		if (st != 0)
			status_error(j, "approving the CSR", st, body);
		snprintf(j->approve_error, sizeof j->approve_error, "%s", j->error);
		j->error[0] = '\0';
	}
	free(body);
}

static void csr_create(struct cs_sc_job *j, const char *san)
{
	char *req = csr_request_b64(j, san);
	if (req == NULL)
		return;
	struct json_object *o = json_object_new_object(), *meta = json_object_new_object(),
	                   *spec = json_object_new_object(), *usages = json_object_new_array();
	json_object_object_add(o, "apiVersion", json_object_new_string("certificates.k8s.io/v1"));
	json_object_object_add(o, "kind", json_object_new_string("CertificateSigningRequest"));
	json_object_object_add(meta, "generateName", json_object_new_string("csr-"));
	json_object_object_add(o, "metadata", meta);
	json_object_object_add(spec, "request", json_object_new_string(req));
	json_object_object_add(spec, "signerName", json_object_new_string(KUBELET_SIGNER));
	json_object_array_add(usages, json_object_new_string("digital signature"));
	json_object_array_add(usages, json_object_new_string("server auth"));
	json_object_object_add(spec, "usages", usages);
	json_object_object_add(spec, "expirationSeconds",
	                       json_object_new_int64((int64_t)j->validity_s));
	json_object_object_add(o, "spec", spec);
	free(req);
	char url[URL_MAX];
	snprintf(url, sizeof url, "%s/apis/certificates.k8s.io/v1/certificatesigningrequests",
	         j->srv->cfg.apiserver_url);
	char *body = NULL;
	long st = api_call(j, "POST", url,
	                   json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN), &body);
	json_object_put(o);
	if (st != 201) {
		if (st != 0)
			status_error(j, "creating the CSR", st, body);
		free(body);
		return;
	}
	struct json_object *csr = parse(body), *m, *name;
	free(body);
	if (csr == NULL || !json_object_object_get_ex(csr, "metadata", &m) ||
	    !json_object_object_get_ex(m, "name", &name)) {
		snprintf(j->error, sizeof j->error, "the created CSR has no metadata.name");
		json_object_put(csr);
		return;
	}
	snprintf(j->csr_name, sizeof j->csr_name, "%s", json_object_get_string(name));
	j->pending = true;
	if (j->approve)
		csr_approve(j, csr);
	json_object_put(csr);
}

static void csr_poll(struct cs_sc_job *j)
{
	char url[URL_MAX];
	snprintf(url, sizeof url, "%s/apis/certificates.k8s.io/v1/certificatesigningrequests/%s",
	         j->srv->cfg.apiserver_url, j->csr_name);
	char *body = NULL;
	long st = api_call(j, "GET", url, NULL, &body);
	if (st == 200) {
		struct json_object *o = parse(body);
		if (o)
			csr_state(j, o);
		else
			snprintf(j->error, sizeof j->error, "the CSR answer is not JSON");
		json_object_put(o);
	} else if (st == 404) {
		j->gone = true;
	} else if (st != 0) {
		status_error(j, "GET CSR", st, body);
	}
	free(body);
}

void cs__sc_job_work(void *arg)
{
	struct cs_sc_job *j = arg;
	if (j->kind == CS_SC_JOB_POLL) {
		csr_poll(j);
		return;
	}
	struct sans s;
	memset(&s, 0, sizeof s);
	if (node_sans(j, &s) < 0)
		return;
	char san[SAN_TEXT_MAX];
	sans_text(&s, san, sizeof san);
	snprintf(j->detail, sizeof j->detail, "%.150s", san);
	j->key = EVP_EC_gen("P-256");
	if (j->key == NULL) {
		ssl_error(j, "generating a P-256 key");
		return;
	}
	if (j->ca)
		sign_with_ca(j, san);
	else
		csr_create(j, san);
}

void cs__sc_job_free(struct cs_sc_job *j)
{
	if (j == NULL)
		return;
	EVP_PKEY_free(j->key);
	X509_free(j->cert);
	free(j);
}
