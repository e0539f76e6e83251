/*
 * cloudstream/src/servecert.c — per-node serving certificates (servecert.h): the cache and each
 * node's issue/poll/renew cycle. The ClientHello hook that picks a node's certificate from the
 * cache is servecert_hello.c.
 *
 * A node's entry holds at most one certificate and one issue in progress (a job on the pool,
 * or a CSR being polled on a timer). The handshake only reads the cache: an entry without a
 * usable certificate starts an issue and the connection gets the default stream certificate
 * (logged once per node until its certificate is in). Failures back off per node (1 s doubling
 * to 5 min); a CSR is polled every 0.5 s doubling to 16 s, not watched, so that no worker of
 * the shared pool is held by a long watch, and given up after 15 min (issued again).
 *
 * Loop thread only; jobs touch only their own struct (servecert_int.h).
 */
#include "servecert.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <stream/log.h>
#include <libwebsockets.h>

#include <stream/admin.h>
#include <stream/workq.h>

#include "cs.h"
#include "servecert_int.h"

#define SC_BACKOFF_MIN_MS 1000u
#define SC_BACKOFF_MAX_MS (5u * 60u * 1000u)
#define SC_POLL_MIN_MS    500u
#define SC_POLL_MAX_MS    16000u
#define SC_PENDING_MAX_MS (15u * 60u * 1000u)
#define SC_REISSUE_GAP_MS 30000u /* one node's issues, however many handshakes miss */

/* Monotonic: timers and backoff. */
static uint64_t now_ms(void)
{
	return st_now_ms();
}

/* Wall clock: certificate times. */
static uint64_t wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static size_t bucket(const char *s)
{
	uint32_t h = 2166136261u;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 16777619u;
	return h % CS_SC_BUCKETS;
}

static struct cs_sc_entry *entry_find(struct cs_servecert *sc, const char *node)
{
	for (struct cs_sc_entry *e = sc->b[bucket(node)]; e; e = e->next)
		if (strcmp(e->node, node) == 0)
			return e;
	return NULL;
}

struct cs_sc_entry *cs__sc_entry_get(struct cs_servecert *sc, const char *node)
{
	struct cs_sc_entry *e = entry_find(sc, node);
	if (e || sc->n >= sc->max || strlen(node) > CS_NODE_NAME_MAX_BYTES)
		return e;
	e = calloc(1, sizeof *e);
	if (e == NULL)
		return NULL;
	e->sc = sc;
	snprintf(e->node, sizeof e->node, "%s", node);
	size_t i = bucket(node);
	e->next = sc->b[i];
	sc->b[i] = e;
	sc->n++;
	return e;
}

static void entry_free(struct cs_sc_entry *e)
{
	lws_sul_cancel(&e->sul);
	X509_free(e->cert);
	EVP_PKEY_free(e->key);
	EVP_PKEY_free(e->pending_key);
	free(e);
}

static void entry_remove(struct cs_servecert *sc, struct cs_sc_entry *e)
{
	for (struct cs_sc_entry **pp = &sc->b[bucket(e->node)]; *pp; pp = &(*pp)->next)
		if (*pp == e) {
			*pp = e->next;
			sc->n--;
			entry_free(e);
			return;
		}
}

static uint64_t asn1_ms(const ASN1_TIME *t)
{
	struct tm tm;
	if (ASN1_TIME_to_tm(t, &tm) != 1)
		return 0;
	return (uint64_t)timegm(&tm) * 1000u;
}

/* ---- the issue cycle ---------------------------------------------------------------------- */

static void job_done(void *arg, int status);

static void failed(struct cs_sc_entry *e, const char *what, const char *error)
{
	struct cs_servecert *sc = e->sc;
	e->busy = false;
	e->failures++;
	sc->failures++;
	uint64_t backoff = SC_BACKOFF_MIN_MS;
	for (uint32_t i = 1; i < e->failures && backoff < SC_BACKOFF_MAX_MS; i++)
		backoff *= 2;
	if (backoff > SC_BACKOFF_MAX_MS)
		backoff = SC_BACKOFF_MAX_MS;
	e->next_issue_ms = now_ms() + backoff;
	EVP_PKEY_free(e->pending_key);
	e->pending_key = NULL;
	st_log(ST_LOG_WARN, e->node, 0, "serving certificate: %s: %s (again in %llu ms%s)", what,
	       error, (unsigned long long)backoff,
	       e->cert ? "; the old one is served meanwhile" : "");
}

static void on_timer(lws_sorted_usec_list_t *sul)
{
	struct cs_sc_entry *e = lws_container_of(sul, struct cs_sc_entry, sul);
	struct cs_servecert *sc = e->sc;
	struct cs_server *srv = sc->srv;
	if (e->busy && e->csr_name[0]) { /* the CSR's next poll */
		if (now_ms() - e->pending_since_ms > SC_PENDING_MAX_MS) {
			e->csr_name[0] = '\0';
			failed(e, "CSR not signed in 15 min",
			       "no approver or signer acted on it (see the README's RBAC)");
			return;
		}
		struct cs_sc_job *j = calloc(1, sizeof *j);
		if (j == NULL)
			goto later;
		j->srv = srv;
		j->kind = CS_SC_JOB_POLL;
		j->entry_gen = e->gen;
		snprintf(j->node, sizeof j->node, "%s", e->node);
		snprintf(j->csr_name, sizeof j->csr_name, "%s", e->csr_name);
		if (st_workq_submit(srv->wq, cs__sc_job_work, job_done, j) == 0)
			return;
		free(j);
	later:
		lws_sul_schedule(srv->ctx, 0, &e->sul, on_timer, (lws_usec_t)e->poll_ms * 1000);
		return;
	}
	/* The renewal: only for a node that still has a tunnel; others are forgotten and issued
	 * again when they come back. */
	if (cs_registry_get(srv->reg, e->node, strlen(e->node)) == NULL) {
		st_log(ST_LOG_INFO, e->node, 0,
		       "serving certificate dropped: no tunnel at renewal");
		entry_remove(sc, e);
		return;
	}
	e->next_issue_ms = 0;
	cs__sc_issue_start(e, "renewal");
}

static void install(struct cs_sc_entry *e, EVP_PKEY *key, X509 *cert, const char *how)
{
	struct cs_servecert *sc = e->sc;
	X509_free(e->cert);
	EVP_PKEY_free(e->key);
	e->cert = cert;
	e->key = key;
	e->busy = false;
	e->failures = 0;
	e->fallback_logged = false;
	e->csr_name[0] = '\0';
	sc->issued++;
	uint64_t now = wall_ms(), nb = asn1_ms(X509_get0_notBefore(cert)),
	         na = asn1_ms(X509_get0_notAfter(cert));
	if (nb == 0 || na <= nb)
		nb = now, na = now + 3600000u;
	/* Signers backdate notBefore (5 min here and in kube-controller-manager): the lifetime
	 * that counts is what is left from now, or a short certificate renews at once. */
	if (nb < now && now < na)
		nb = now;
	/* Renew at 70-90 % of the lifetime, jittered, as the kubelet's certificate manager. */
	uint64_t life = na - nb, jitter = (uint64_t)((uint32_t)rand() % 2001u); /* 0..0.2 */
	uint64_t at = nb + life * 7 / 10 + life * jitter / 10000;
	if (at < now + 1000)
		at = now + 1000;
	e->next_issue_ms = now_ms() + SC_REISSUE_GAP_MS;
	lws_sul_schedule(sc->srv->ctx, 0, &e->sul, on_timer, (lws_usec_t)(at - now) * 1000);
	char serial[80] = "";
	BIGNUM *bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert), NULL);
	char *hex = bn ? BN_bn2hex(bn) : NULL;
	if (hex)
		snprintf(serial, sizeof serial, "%s", hex);
	OPENSSL_free(hex);
	BN_free(bn);
	st_log(ST_LOG_INFO, e->node, 0,
	       "serving certificate in (%s): serial %s, valid %llu s, renewed in %llu s", how,
	       serial, (unsigned long long)((na - now) / 1000),
	       (unsigned long long)((at - now) / 1000));
}

static void job_done(void *arg, int status)
{
	struct cs_sc_job *j = arg;
	struct cs_servecert *sc = j->srv->sc;
	struct cs_sc_entry *e = sc && !sc->stopping ? entry_find(sc, j->node) : NULL;
	if (status != 0 || e == NULL || e->gen != j->entry_gen) {
		cs__sc_job_free(j);
		return;
	}
	if (j->error[0]) {
		failed(e, j->kind == CS_SC_JOB_POLL ? "polling the CSR" : "issue failed", j->error);
		if (j->kind == CS_SC_JOB_POLL)
			e->csr_name[0] = '\0';
		cs__sc_job_free(j);
		return;
	}
	if (j->kind == CS_SC_JOB_ISSUE) {
		if (j->cert) { /* ca mode, or a CSR signed at once */
			install(e, j->key, j->cert, j->ca ? "signed with the serving CA" : "CSR");
			j->key = NULL;
			j->cert = NULL;
		} else {
			EVP_PKEY_free(e->pending_key);
			e->pending_key = j->key;
			j->key = NULL;
			snprintf(e->csr_name, sizeof e->csr_name, "%s", j->csr_name);
			e->pending_since_ms = now_ms();
			e->poll_ms = SC_POLL_MIN_MS;
			st_log(ST_LOG_INFO, e->node, 0,
			       "serving certificate: CSR %s created (%s)%s", j->csr_name, j->detail,
			       j->approve && !j->approve_forbidden && !j->approve_error[0]
			               ? ", approved by cloudstream"
			               : ", waiting for the cluster's approver");
			if (j->approve_forbidden && !sc->approve_logged) {
				sc->approve_logged = true;
				st_log(ST_LOG_INFO, NULL, 0,
				       "serving certificates: not allowed to approve CSRs (403 on "
				       "the "
				       "approval subresource: needs update on "
				       "certificatesigningrequests/approval and approve on signers "
				       "kubernetes.io/kubelet-serving); the cluster's approver "
				       "must "
				       "approve them");
			}
			if (j->approve_error[0])
				st_log(ST_LOG_WARN, e->node, 0, "serving certificate: %s",
				       j->approve_error);
			lws_sul_schedule(sc->srv->ctx, 0, &e->sul, on_timer,
			                 (lws_usec_t)e->poll_ms * 1000);
		}
		cs__sc_job_free(j);
		return;
	}
	/* CS_SC_JOB_POLL */
	if (j->gone) {
		e->busy = false;
		e->csr_name[0] = '\0';
		EVP_PKEY_free(e->pending_key);
		e->pending_key = NULL;
		st_log(ST_LOG_WARN, e->node, 0,
		       "serving certificate: CSR %s was deleted; asking again", j->csr_name);
		cs__sc_issue_start(e, "CSR deleted");
	} else if (j->denied) {
		e->csr_name[0] = '\0';
		failed(e, "CSR refused", j->detail);
	} else if (j->cert) {
		/* take_certificate() checked it against the key we keep for it. */
		X509 *cert = j->cert;
		j->cert = NULL;
		EVP_PKEY *key = e->pending_key;
		e->pending_key = NULL;
		if (key == NULL || X509_check_private_key(cert, key) != 1) {
			ERR_clear_error();
			X509_free(cert);
			EVP_PKEY_free(key);
			e->csr_name[0] = '\0';
			failed(e, "CSR", "the signed certificate is not for our key");
		} else {
			install(e, key, cert, "CSR signed");
		}
	} else {
		e->poll_ms = e->poll_ms * 2 > SC_POLL_MAX_MS ? SC_POLL_MAX_MS : e->poll_ms * 2;
		lws_sul_schedule(sc->srv->ctx, 0, &e->sul, on_timer, (lws_usec_t)e->poll_ms * 1000);
	}
	cs__sc_job_free(j);
}

void cs__sc_issue_start(struct cs_sc_entry *e, const char *why)
{
	struct cs_servecert *sc = e->sc;
	struct cs_server *srv = sc->srv;
	if (e->busy || sc->stopping || now_ms() < e->next_issue_ms)
		return;
	struct cs_sc_job *j = calloc(1, sizeof *j);
	if (j == NULL)
		return;
	j->srv = srv;
	j->kind = CS_SC_JOB_ISSUE;
	j->ca = srv->cfg.serving_certs == CS_SERVING_CA ? &sc->ca : NULL;
	j->approve = srv->cfg.serving_csr_approve;
	j->validity_s = srv->cfg.serving_cert_validity_ms / 1000u;
	if (j->ca == NULL && j->validity_s < 600)
		j->validity_s = 600; /* spec.expirationSeconds: at least 10 minutes */
	j->entry_gen = ++e->gen;
	snprintf(j->node, sizeof j->node, "%s", e->node);
	int rc = st_workq_submit(srv->wq, cs__sc_job_work, job_done, j);
	if (rc < 0) {
		free(j);
		/* The pool is full (a storm of tunnels coming up): try again in 1-3 s, spread, so
		 * that a node whose tunnel came up meanwhile still gets its certificate before the
		 * apiserver's first handshake does. */
		e->next_issue_ms = now_ms() + SC_BACKOFF_MIN_MS;
		lws_sul_schedule(srv->ctx, 0, &e->sul, on_timer,
		                 (lws_usec_t)(SC_BACKOFF_MIN_MS + (uint32_t)rand() % 2000u) * 1000);
		return;
	}
	lws_sul_cancel(&e->sul); /* a renewal timer: this issue replaces it */
	e->busy = true;
	st_log(ST_LOG_INFO, e->node, 0, "serving certificate: issuing (%s)", why);
}

/* ---- the daemon's side -------------------------------------------------------------------- */

void cs_servecert_node_up(struct cs_server *srv, const char *node)
{
	struct cs_servecert *sc = srv->sc;
	if (sc == NULL)
		return;
	struct cs_sc_entry *e = cs__sc_entry_get(sc, node);
	if (e && (e->cert == NULL || X509_cmp_time(X509_get0_notAfter(e->cert), NULL) <= 0))
		cs__sc_issue_start(e, "tunnel up");
}

static int load_ca(struct cs_servecert *sc, const char *cert, const char *key)
{
	FILE *f = fopen(cert, "r");
	if (f) {
		sc->ca.cert = PEM_read_X509(f, NULL, NULL, NULL);
		fclose(f);
	}
	if (sc->ca.cert == NULL) {
		ERR_clear_error();
		st_err("--serving-ca-cert %s: not a readable PEM certificate", cert);
		return -EINVAL;
	}
	f = fopen(key, "r");
	if (f) {
		sc->ca.key = PEM_read_PrivateKey(f, NULL, NULL, NULL);
		fclose(f);
	}
	if (sc->ca.key == NULL) {
		ERR_clear_error();
		st_err("--serving-ca-key %s: not a readable PEM private key", key);
		return -EINVAL;
	}
	if (X509_check_private_key(sc->ca.cert, sc->ca.key) != 1) {
		ERR_clear_error();
		st_err("--serving-ca-key %s is not the key of --serving-ca-cert %s", key, cert);
		return -EINVAL;
	}
	if (X509_check_ca(sc->ca.cert) == 0) {
		st_err("--serving-ca-cert %s is not a CA certificate", cert);
		return -EINVAL;
	}
	return 0;
}

int cs_servecert_new(struct cs_server *srv)
{
	const struct cs_config *c = &srv->cfg;
	if (c->serving_certs == CS_SERVING_OFF)
		return 0;
	if (c->apiserver_url == NULL || c->apiserver_url[0] == '\0') {
		st_err("--serving-certs %s needs --apiserver-url: the certificates name the Node "
		       "object's addresses (needs get on nodes%s)",
		       c->serving_certs == CS_SERVING_CA ? "ca" : "csr",
		       c->serving_certs == CS_SERVING_CSR ? ", create and get on "
		                                            "certificatesigningrequests"
		                                          : "");
		return -EINVAL;
	}
	bool have_ca = c->serving_ca_cert && c->serving_ca_cert[0];
	if (c->serving_certs == CS_SERVING_CA &&
	    (!have_ca || c->serving_ca_key == NULL || c->serving_ca_key[0] == '\0')) {
		st_err("--serving-certs ca needs --serving-ca-cert and --serving-ca-key");
		return -EINVAL;
	}
	if (c->serving_certs == CS_SERVING_CSR && have_ca)
		st_warn("--serving-ca-cert is ignored with --serving-certs csr");
	struct cs_servecert *sc = calloc(1, sizeof *sc);
	if (sc == NULL)
		return -ENOMEM;
	sc->srv = srv;
	sc->max = (size_t)c->max_sessions;
	if (c->serving_certs == CS_SERVING_CA &&
	    load_ca(sc, c->serving_ca_cert, c->serving_ca_key) < 0) {
		X509_free(sc->ca.cert);
		EVP_PKEY_free(sc->ca.key);
		free(sc);
		return -EINVAL;
	}
	srv->sc = sc;
	st_info("serving certificates: per node, %s, valid %llu s, renewed at 70-90 %% of that",
	        c->serving_certs == CS_SERVING_CA ? "signed with --serving-ca-cert"
	        : c->serving_csr_approve ? "CSR kubernetes.io/kubelet-serving, approved by "
	                                   "cloudstream when allowed"
	                                 : "CSR kubernetes.io/kubelet-serving, approved by "
	                                   "the cluster",
	        (unsigned long long)(c->serving_cert_validity_ms / 1000u));
	return 0;
}

void cs_servecert_stop(struct cs_server *srv)
{
	struct cs_servecert *sc = srv->sc;
	if (sc == NULL)
		return;
	sc->stopping = true;
	for (size_t i = 0; i < CS_SC_BUCKETS; i++)
		for (struct cs_sc_entry *e = sc->b[i]; e; e = e->next)
			lws_sul_cancel(&e->sul);
}

void cs_servecert_free(struct cs_server *srv)
{
	struct cs_servecert *sc = srv->sc;
	if (sc == NULL)
		return;
	for (size_t i = 0; i < CS_SC_BUCKETS; i++) {
		struct cs_sc_entry *e = sc->b[i];
		while (e) {
			struct cs_sc_entry *next = e->next;
			entry_free(e);
			e = next;
		}
	}
	X509_free(sc->ca.cert);
	EVP_PKEY_free(sc->ca.key);
	free(sc);
	srv->sc = NULL;
}

void cs_servecert_metrics(struct st_text *t, const struct cs_server *srv)
{
	const struct cs_servecert *sc = srv->sc;
	if (sc == NULL)
		return;
	st_text_labelled(t, "cloudstream_serving_cert_handshakes_total", "counter",
	                 "Stream-port TLS handshakes by the certificate they got: the node's own, "
	                 "or the default stream certificate (no node, or none issued yet).",
	                 "certificate",
	                 (const struct st_text_sample[]){{"node", sc->handshakes_node},
	                                                 {"default", sc->handshakes_default},
	                                                 {0}});
	st_text_counter(t, "cloudstream_serving_certs_issued_total",
	                "Node serving certificates issued (signed here or by the CSR's signer).",
	                sc->issued);
	st_text_counter(t, "cloudstream_serving_cert_failures_total",
	                "Issues that failed (apiserver errors, refused or expired CSRs).",
	                sc->failures);
	st_text_gauge(t, "cloudstream_serving_certs", "Nodes with a cache entry.", sc->n);
}
