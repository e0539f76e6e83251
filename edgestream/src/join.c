/*
 * edgestream/src/join.c — a certificate whose key is born on this node: the join with a token
 * at start (--join-token, --cloud-ca-hash) and the renewal at two thirds of the lifetime
 * (--rotate-certificate), both against cloudstream's tunnel port (cloudstream/src/join_srv.c).
 *
 * Join, at start-up on the calling thread (before the loop; it may take a few seconds):
 *   1. GET /v1/cloudstream/ca without verifying the server: nothing is trusted yet;
 *   2. keep the certificates of that bundle whose SubjectPublicKeyInfo hashes to
 *      --cloud-ca-hash; none: refuse (someone else's cloud, or a man in the middle);
 *   3. generate the key here, and POST a signing request with the token to
 *      /v1/cloudstream/join, verifying the server against the pinned CA alone (and its name);
 *   4. the answer (the certificate, then the CA bundle, from a server we now trust) is checked
 *      (the certificate is for our key and names our node) and written: key 0600 first, then
 *      the certificate and the CA bundle, each atomically.
 * Only the public key and the token cross the wire; the key is in this process and in
 * --tunnel-key.
 *
 * Renewal, on the loop: a timer at two thirds of the current certificate's lifetime submits a
 * job to the worker pool (libcurl, key generation, file writes, never on the loop), which
 * POSTs a new request to /v1/cloudstream/renew with the current certificate (mTLS against the
 * current --tunnel-ca) and writes the new files; the loop then reloads them through the shared
 * helper (stream/certreload.h: read and verified on a worker, swapped on the loop), so the
 * tunnel and its streams stay up and the next handshake uses the new certificate. Then the
 * next renewal is scheduled from the new validity; a failure retries after a tenth of what is
 * left (between 1 s and 5 min).
 */
#include "es.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <certs/certs.h>
#include <stream/err.h>
#include <stream/log.h>
#include <stream/workq.h>

#include "es_route.h"

#define JOIN_MAX_ANSWER_BYTES (64u * 1024u)
#define JOIN_TIMEOUT_MS       15000L
#define REFUSAL_HEADER        "x-cloudstream-refusal:"

/* What one HTTPS exchange brought back. */
struct answer {
	char *body; /* NUL-terminated */
	size_t len;
	bool too_large;
	char refusal[300]; /* X-Cloudstream-Refusal */
	long status;
};

static size_t on_body(char *p, size_t size, size_t n, void *user)
{
	struct answer *a = user;
	size_t len = size * n;
	if (a->len + len > JOIN_MAX_ANSWER_BYTES) {
		a->too_large = true;
		return 0;
	}
	memcpy(a->body + a->len, p, len);
	a->len += len;
	a->body[a->len] = '\0';
	return len;
}

static size_t on_header(char *p, size_t size, size_t n, void *user)
{
	struct answer *a = user;
	size_t len = size * n, hl = sizeof REFUSAL_HEADER - 1;
	if (len > hl && strncasecmp(p, REFUSAL_HEADER, hl) == 0) {
		size_t off = hl;
		while (off < len && p[off] == ' ')
			off++;
		size_t vl = len - off;
		while (vl && (p[off + vl - 1] == '\r' || p[off + vl - 1] == '\n'))
			vl--;
		snprintf(a->refusal, sizeof a->refusal, "%.*s", (int)vl, p + off);
	}
	return len;
}

/* How to reach and verify the cloud for one exchange. */
struct exchange {
	const char *url;
	const char *bearer;    /* Authorization: Bearer (join) */
	const char *ca_pem;    /* verify against these CAs (memory), or */
	const char *ca_path;   /* these (file); neither: no verification (the CA fetch) */
	const char *cert_path; /* client certificate (renewal) */
	const char *key_path;  /* its key */
	const char *body;      /* POST body, or NULL for a GET */
	size_t body_len;
	const char *connect_to; /* "NAME:PORT:HOST:PORT": verify NAME, dial HOST (or NULL) */
};

static int https(const struct exchange *x, struct answer *a, char *err, size_t errlen)
{
	memset(a, 0, sizeof *a);
	a->body = malloc(JOIN_MAX_ANSWER_BYTES + 1);
	CURL *c = curl_easy_init();
	if (a->body == NULL || c == NULL) {
		curl_easy_cleanup(c);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	a->body[0] = '\0';
	char auth[64];
	struct curl_slist *hdrs = NULL;
	if (x->bearer) {
		snprintf(auth, sizeof auth, "Authorization: Bearer %s", x->bearer);
		hdrs = curl_slist_append(hdrs, auth);
	}
	if (x->body)
		hdrs = curl_slist_append(hdrs, "Content-Type: application/pkcs10");
	hdrs = curl_slist_append(hdrs, "Expect:");
	curl_easy_setopt(c, CURLOPT_URL, x->url);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, JOIN_TIMEOUT_MS);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, JOIN_TIMEOUT_MS / 2);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "https");
	curl_easy_setopt(c, CURLOPT_USERAGENT, "edgestream/" EDGESTREAM_VERSION);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, a);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, a);
	if (x->body) {
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, x->body);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)x->body_len);
	}
	struct curl_blob blob;
	if (x->ca_pem) {
		blob.data = (void *)(uintptr_t)x->ca_pem;
		blob.len = strlen(x->ca_pem);
		blob.flags = CURL_BLOB_COPY;
		curl_easy_setopt(c, CURLOPT_CAINFO_BLOB, &blob);
		curl_easy_setopt(c, CURLOPT_CAPATH, NULL);
	} else if (x->ca_path) {
		curl_easy_setopt(c, CURLOPT_CAINFO, x->ca_path);
		curl_easy_setopt(c, CURLOPT_CAPATH, NULL);
	} else {
		/* The one exchange without trust: the CA bundle, checked against the pin after. */
		curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
		curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
	}
	if (x->cert_path) {
		curl_easy_setopt(c, CURLOPT_SSLCERT, x->cert_path);
		curl_easy_setopt(c, CURLOPT_SSLKEY, x->key_path);
	}
	struct curl_slist *connect_to = NULL;
	if (x->connect_to) {
		connect_to = curl_slist_append(NULL, x->connect_to);
		curl_easy_setopt(c, CURLOPT_CONNECT_TO, connect_to);
	}
	CURLcode rc = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &a->status);
	curl_slist_free_all(hdrs);
	curl_slist_free_all(connect_to);
	curl_easy_cleanup(c);
	if (rc != CURLE_OK && !(rc == CURLE_WRITE_ERROR && a->too_large)) {
		snprintf(err, errlen, "%s: %s", x->url, curl_easy_strerror(rc));
		return rc == CURLE_PEER_FAILED_VERIFICATION || rc == CURLE_SSL_CACERT_BADFILE
		               ? -EACCES
		               : -ECONNREFUSED;
	}
	if (a->too_large) {
		snprintf(err, errlen, "%s: answer over %u bytes", x->url, JOIN_MAX_ANSWER_BYTES);
		return -EMSGSIZE;
	}
	return 0;
}

static void answer_free(struct answer *a)
{
	free(a->body);
	a->body = NULL;
}

/* The certificates of a PEM bundle whose pin is @pin, as PEM (malloc'ed), or NULL. Fills
 * @seen with the pins found (for the error). */
static char *pinned_certs(const char *pem, size_t len, const char *pin, char *seen, size_t cap)
{
	BIO *in = BIO_new_mem_buf(pem, (int)len), *out = BIO_new(BIO_s_mem());
	char *res = NULL;
	size_t used = 0, matched = 0;
	seen[0] = '\0';
	X509 *x;
	while (in && out && (x = PEM_read_bio_X509(in, NULL, NULL, NULL)) != NULL) {
		char p[CERTS_PIN_TEXT_BYTES];
		if (certs_spki_pin(x, p, sizeof p) == 0) {
			if (certs_pin_equal(p, pin)) {
				PEM_write_bio_X509(out, x);
				matched++;
			}
			int n = snprintf(seen + used, cap - used, "%s%s", used ? ", " : "", p);
			if (n > 0 && (size_t)n < cap - used)
				used += (size_t)n;
		}
		X509_free(x);
	}
	ERR_clear_error();
	char *p;
	long n = out ? BIO_get_mem_data(out, &p) : 0;
	if (matched && n > 0 && (res = malloc((size_t)n + 1)) != NULL) {
		memcpy(res, p, (size_t)n);
		res[n] = '\0';
	}
	BIO_free(in);
	BIO_free(out);
	return res;
}

/* The answer of a join or renewal: the certificate (for @key, naming @node), then the CA
 * bundle. Writes key, certificate and bundle. */
static int install(const struct es_config *c, const char *node, EVP_PKEY *key, const char *pem,
                   size_t len, char *err, size_t errlen)
{
	BIO *b = BIO_new_mem_buf(pem, (int)len);
	X509 *leaf = b ? PEM_read_bio_X509(b, NULL, NULL, NULL) : NULL;
	/* What follows the first certificate is the bundle. */
	const char *end = strstr(pem, "-----END CERTIFICATE-----");
	const char *bundle = end ? end + sizeof "-----END CERTIFICATE-----" - 1 : NULL;
	while (bundle && (*bundle == '\n' || *bundle == '\r'))
		bundle++;
	BIO_free(b);
	int rc = 0;
	struct certs_identity id;
	char want[ES_NODE_NAME_MAX + 16];
	snprintf(want, sizeof want, "system:node:%s", node);
	if (leaf == NULL || bundle == NULL || strstr(bundle, "BEGIN CERTIFICATE") == NULL) {
		snprintf(err, errlen, "the answer is not a certificate and a CA bundle");
		rc = -EBADMSG;
	} else if (X509_check_private_key(leaf, key) != 1) {
		snprintf(err, errlen, "the certificate is not for the key generated here");
		rc = -EBADMSG;
	} else if (certs_x509_identity(leaf, &id) < 0 || strcmp(id.cn, want) != 0) {
		snprintf(err, errlen, "the certificate does not name %s", want);
		rc = -EBADMSG;
	}
	if (rc == 0) {
		size_t leaf_len = (size_t)(bundle - pem);
		/* The key first: a certificate never exists without its key. */
		if ((rc = certs_write_key(c->tunnel_key, key, err, errlen)) == 0 &&
		    (rc = certs_write_file(c->tunnel_cert, pem, leaf_len, 0644)) == 0 &&
		    (rc = certs_write_file(c->tunnel_ca, bundle, strlen(bundle), 0644)) < 0)
			snprintf(err, errlen, "writing %s: %s", c->tunnel_ca, strerror(-rc));
		else if (rc < 0 && !err[0])
			snprintf(err, errlen, "writing %s: %s", c->tunnel_cert, strerror(-rc));
	}
	ERR_clear_error();
	X509_free(leaf);
	return rc;
}

/* "https://host:port" of joins and renewals; with --cloud-server-name (and no --join-url) the
 * URL names the server name, and @connect_to dials --cloud-url's host for it (else ""). */
static void base_url(const struct edgestream *es, char *out, size_t cap, char *connect_to,
                     size_t ccap)
{
	const char *j = es->cfg.join_url;
	connect_to[0] = '\0';
	if (j && j[0]) {
		size_t n = strlen(j);
		while (n && j[n - 1] == '/')
			n--;
		snprintf(out, cap, "%.*s", (int)n, j);
		return;
	}
	const char *name = es->cloud_name;
	bool v6 = strchr(name, ':') != NULL;
	snprintf(out, cap, "https://%s%s%s:%d", v6 ? "[" : "", name, v6 ? "]" : "", es->cloud_port);
	if (strcmp(name, es->cloud_host) != 0) {
		bool hv6 = strchr(es->cloud_host, ':') != NULL;
		snprintf(connect_to, ccap, "%s:%d:%s%s%s:%d", name, es->cloud_port, hv6 ? "[" : "",
		         es->cloud_host, hv6 ? "]" : "", es->cloud_port);
	}
}

/* A signing request for this node's new key. */
static int new_request(const char *node, EVP_PKEY **key, char *csr, size_t cap, size_t *len,
                       char *err, size_t errlen)
{
	char cn[ES_NODE_NAME_MAX + 16];
	snprintf(cn, sizeof cn, "system:node:%s", node);
	const char *orgs[] = {"system:nodes"};
	return certs_csr_new(key, cn, orgs, 1, csr, cap, len, err, errlen);
}

/* Words a refused exchange. */
static int refused(const char *what, const struct answer *a, char *err, size_t errlen)
{
	if (a->refusal[0])
		snprintf(err, errlen, "the cloud refused the %s (%ld): %s", what, a->status,
		         a->refusal);
	else
		snprintf(err, errlen, "the cloud refused the %s (%ld): %.200s", what, a->status,
		         a->body ? a->body : "");
	size_t n = strlen(err);
	while (n && (err[n - 1] == '\n' || err[n - 1] == '\r'))
		err[--n] = '\0';
	return a->status == 403 ? -EACCES : -EPROTO;
}

int es_join_bootstrap(struct edgestream *es, char *err, size_t errlen)
{
	const struct es_config *c = &es->cfg;
	if (!certs_pin_valid(c->cloud_ca_hash)) {
		snprintf(err, errlen,
		         "join-token needs --cloud-ca-hash sha256:<64 hex> (stream-certs ca-hash "
		         "on the CA); a join never trusts a cloud it cannot pin");
		return -EINVAL;
	}
	if (c->node_name == NULL || !certs_valid_node_name(c->node_name, strlen(c->node_name))) {
		snprintf(err, errlen, "join-token needs --node-name (the node to join as)");
		return -EINVAL;
	}
	char base[ES_HOST_MAX + 32], url[ES_HOST_MAX + 64], connect_to[2 * ES_HOST_MAX + 32];
	base_url(es, base, sizeof base, connect_to, sizeof connect_to);
	const char *ct = connect_to[0] ? connect_to : NULL;
	st_info("joining as node %s through %s (the cloud's CA pinned to %.20s...)", c->node_name,
	        base, c->cloud_ca_hash);
	/* 1, 2: the CA bundle, trusted only as far as the pin. */
	struct answer a;
	snprintf(url, sizeof url, "%s/v1/cloudstream/ca", base);
	struct exchange x = {.url = url, .connect_to = ct};
	int rc = https(&x, &a, err, errlen);
	if (rc == 0 && a.status != 200)
		rc = refused("CA request", &a, err, errlen);
	if (rc < 0) {
		answer_free(&a);
		return rc;
	}
	char seen[600];
	char *pinned = pinned_certs(a.body, a.len, c->cloud_ca_hash, seen, sizeof seen);
	answer_free(&a);
	if (pinned == NULL) {
		snprintf(err, errlen,
		         "the cloud's CA does not match --cloud-ca-hash %.80s (it offered %s): not "
		         "joining",
		         c->cloud_ca_hash, seen[0] ? seen : "no certificate");
		return -EACCES;
	}
	/* 3: the key is born here; only the request goes out, to a server the pin vouches for. */
	EVP_PKEY *key = NULL;
	char csr[CERTS_MAX_CSR_BYTES];
	size_t csr_len = 0;
	rc = new_request(c->node_name, &key, csr, sizeof csr, &csr_len, err, errlen);
	if (rc == 0) {
		snprintf(url, sizeof url, "%s/v1/cloudstream/join", base);
		struct exchange j = {.url = url,
		                     .bearer = c->join_token,
		                     .ca_pem = pinned,
		                     .body = csr,
		                     .body_len = csr_len,
		                     .connect_to = ct};
		rc = https(&j, &a, err, errlen);
		if (rc == -EACCES)
			snprintf(err + strlen(err), errlen - strlen(err),
			         " (the server's certificate does not chain to the pinned CA)");
		if (rc == 0 && a.status != 200)
			rc = refused("join", &a, err, errlen);
		/* 4: check and write. */
		if (rc == 0)
			rc = install(c, c->node_name, key, a.body, a.len, err, errlen);
		answer_free(&a);
	}
	free(pinned);
	EVP_PKEY_free(key);
	if (rc == 0)
		st_info("joined: certificate for system:node:%s written to %s (key %s, 0600)",
		        c->node_name, c->tunnel_cert, c->tunnel_key);
	return rc;
}

/* ---- renewal ------------------------------------------------------------------------------ */

struct renew_job {
	struct edgestream *es; /* its config is read-only; nothing else is touched */
	char node[ES_NODE_NAME_MAX + 1];
	char base[ES_HOST_MAX + 32];
	char connect_to[2 * ES_HOST_MAX + 32];
	int rc;
	char err[600];
};

static void renew_work(void *arg)
{
	struct renew_job *rj = arg;
	const struct es_config *c = &rj->es->cfg;
	EVP_PKEY *key = NULL;
	char csr[CERTS_MAX_CSR_BYTES], url[ES_HOST_MAX + 64];
	size_t csr_len = 0;
	rj->rc = new_request(rj->node, &key, csr, sizeof csr, &csr_len, rj->err, sizeof rj->err);
	if (rj->rc < 0)
		return;
	snprintf(url, sizeof url, "%s/v1/cloudstream/renew", rj->base);
	struct exchange x = {.url = url,
	                     .ca_path = c->tunnel_ca,
	                     .cert_path = c->tunnel_cert,
	                     .key_path = c->tunnel_key,
	                     .body = csr,
	                     .body_len = csr_len,
	                     .connect_to = rj->connect_to[0] ? rj->connect_to : NULL};
	struct answer a;
	rj->rc = https(&x, &a, rj->err, sizeof rj->err);
	if (rj->rc == 0 && a.status != 200)
		rj->rc = refused("renewal", &a, rj->err, sizeof rj->err);
	if (rj->rc == 0)
		rj->rc = install(c, rj->node, key, a.body, a.len, rj->err, sizeof rj->err);
	answer_free(&a);
	EVP_PKEY_free(key);
}

static void rotate_schedule(struct edgestream *es, int64_t delay_s);

static void renew_done(void *arg, int status)
{
	struct renew_job *rj = arg;
	struct edgestream *es = rj->es;
	es->renewing = false;
	if (status < 0) {
		free(rj);
		return;
	}
	if (rj->rc < 0) {
		es->cert_renewal_failures++;
		int64_t nb = 0, na = 0, now = (int64_t)time(NULL);
		st_certreload_validity(es->certs, 0, &nb, &na);
		int64_t retry = (na - now) / 10;
		retry = retry < 1 ? 1 : retry > 300 ? 300 : retry;
		st_warn("certificate renewal failed, retrying in %lld s: %s", (long long)retry,
		        rj->err);
		rotate_schedule(es, retry);
	} else {
		es->cert_renewals++;
		st_info("certificate renewed: new key, certificate and CA bundle written; "
		        "swapping them in");
		/* Swapped through the shared helper; on_certs_reloaded schedules the next one. */
		es->renew_swap_pending = true;
		es_certs_check(es, false);
	}
	free(rj);
}

static void on_rotate_timer(lws_sorted_usec_list_t *sul)
{
	struct edgestream *es = lws_container_of(sul, struct edgestream, sul_rotate);
	if (es->renewing || es->stopped)
		return;
	struct renew_job *rj = calloc(1, sizeof *rj);
	if (rj == NULL) {
		rotate_schedule(es, 5);
		return;
	}
	rj->es = es;
	snprintf(rj->node, sizeof rj->node, "%s", es->node);
	base_url(es, rj->base, sizeof rj->base, rj->connect_to, sizeof rj->connect_to);
	if (st_workq_submit(es->wq, renew_work, renew_done, rj) < 0) {
		free(rj);
		rotate_schedule(es, 5);
		return;
	}
	es->renewing = true;
}

static void rotate_schedule(struct edgestream *es, int64_t delay_s)
{
	if (delay_s < 1)
		delay_s = 1;
	lws_sul_schedule(es->ctx, 0, &es->sul_rotate, on_rotate_timer,
	                 (lws_usec_t)delay_s * LWS_US_PER_SEC);
}

void es_rotate_plan(struct edgestream *es)
{
	if (!es->cfg.rotate_certificate || es->certs == NULL)
		return;
	int64_t nb, na, now = (int64_t)time(NULL);
	if (st_certreload_validity(es->certs, 0, &nb, &na) < 0) {
		rotate_schedule(es, 5); /* the context is not known yet */
		return;
	}
	int64_t at = nb + (na - nb) * 2 / 3;
	st_info("certificate valid until %lld: renewal in %lld s (two thirds of its lifetime)",
	        (long long)na, (long long)(at > now ? at - now : 0));
	rotate_schedule(es, at - now);
}

void es_rotate_stop(struct edgestream *es)
{
	lws_sul_cancel(&es->sul_rotate);
}
