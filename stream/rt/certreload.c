/*
 * stream/rt/certreload.c — certificate reload: load and verify on a worker, swap on the loop
 * (see certreload.h).
 *
 * A job carries copies of everything the worker reads (paths and the stamps of the material in
 * use) and everything it makes (the loaded objects, the new stamps, the verdict); the worker
 * never touches the helper. The helper outlives its job: st_certreload_free() during a reload
 * only marks it, and the job's completion frees both.
 */
#include <stream/certreload.h>

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <stream/filestamp.h>
#include <stream/log.h>
#include <stream/workq.h>

#define REASON_BYTES 768

enum { F_CERT = 0, F_KEY, F_CA, F_COUNT };

struct context {
	char name[32];
	char *path[F_COUNT]; /* path[F_CA] may be NULL */
	SSL_CTX *ctx;        /* borrowed from lws */
	struct st_file_stamp
	        stamps[F_COUNT];       /* of the material in ctx: at new, then at each swap */
	int64_t not_before, not_after; /* of the certificate in ctx (unix s); 0: not known */
};

struct st_certreload {
	struct st_workq *wq;
	struct context c[ST_CERTRELOAD_MAX_CONTEXTS];
	size_t n;
	st_certreload_done_cb done;
	void *user;
	bool running; /* a job is on the worker pool */
	bool again;   /* start another attempt when it completes */
	unsigned again_flags;
	bool freed; /* st_certreload_free came during a job: its completion frees */
};

/* What the worker made of one context's files. */
struct material {
	X509 *leaf;
	STACK_OF(X509) * chain;
	EVP_PKEY *key;
	X509_STORE *store; /* NULL when the context keeps its CAs */
	struct st_file_stamp stamps[F_COUNT];
};

struct job {
	struct st_certreload *r; /* read on the loop only (completion) */
	unsigned flags;
	size_t n;
	const char *path[ST_CERTRELOAD_MAX_CONTEXTS][F_COUNT]; /* the helper's: never written */
	struct st_file_stamp old[ST_CERTRELOAD_MAX_CONTEXTS][F_COUNT]; /* copied at submit */
	struct material m[ST_CERTRELOAD_MAX_CONTEXTS];
	bool unchanged;
	int rc;
	char reason[REASON_BYTES];
};

static void material_free(struct material *m)
{
	X509_free(m->leaf);
	sk_X509_pop_free(m->chain, X509_free);
	EVP_PKEY_free(m->key);
	X509_STORE_free(m->store);
	m->leaf = NULL;
	m->chain = NULL;
	m->key = NULL;
	m->store = NULL;
}

/* Records the first error code and appends "@path: @what[: openssl]" to the reason. */
static void job_fail(struct job *j, int rc, const char *path, const char *what)
{
	unsigned long e = ERR_get_error();
	char ossl[160] = "";
	if (e)
		ERR_error_string_n(e, ossl, sizeof ossl);
	ERR_clear_error(); /* the queue stays empty for the next caller on this thread */
	if (j->rc == 0)
		j->rc = rc;
	size_t used = strlen(j->reason);
	snprintf(j->reason + used, sizeof j->reason - used, "%s%s: %s%s%s", used ? "; " : "", path,
	         what, ossl[0] ? ": " : "", ossl);
}

static FILE *open_or_fail(struct job *j, const char *path)
{
	FILE *f = fopen(path, "r");
	if (f == NULL) {
		int e = errno;
		ERR_clear_error();
		job_fail(j, -e, path, strerror(e));
	}
	return f;
}

/* Worker: load and verify context @i. Returns true when it is usable. */
static bool load_context(struct job *j, size_t i)
{
	struct material *m = &j->m[i];
	const char *const *path = j->path[i];
	FILE *f = open_or_fail(j, path[F_CERT]);
	if (f == NULL)
		return false;
	m->leaf = PEM_read_X509(f, NULL, NULL, NULL);
	m->chain = sk_X509_new_null();
	X509 *x;
	while (m->leaf && m->chain && (x = PEM_read_X509(f, NULL, NULL, NULL)) != NULL)
		if (!sk_X509_push(m->chain, x))
			X509_free(x);
	fclose(f);
	if (m->leaf == NULL || m->chain == NULL) {
		job_fail(j, -EBADMSG, path[F_CERT], "no certificate");
		return false;
	}
	ERR_clear_error(); /* the chain loop ends on "no start line" */
	if ((f = open_or_fail(j, path[F_KEY])) == NULL)
		return false;
	m->key = PEM_read_PrivateKey(f, NULL, NULL, NULL);
	fclose(f);
	if (m->key == NULL) {
		job_fail(j, -EBADMSG, path[F_KEY], "no private key");
		return false;
	}
	if (X509_check_private_key(m->leaf, m->key) != 1) {
		job_fail(j, -EKEYREJECTED, path[F_KEY], "key does not match the certificate");
		return false;
	}
	/* What OpenSSL would refuse at the swap (a key too weak for the security level, ...) is
	 * refused now, before any context has changed. */
	SSL_CTX *trial = SSL_CTX_new(TLS_method());
	bool accepted = trial && SSL_CTX_use_cert_and_key(trial, m->leaf, m->key, m->chain, 1) == 1;
	SSL_CTX_free(trial);
	if (!accepted) {
		job_fail(j, -EKEYREJECTED, path[F_CERT], "certificate and key rejected by OpenSSL");
		return false;
	}
	if (path[F_CA] == NULL)
		return true;
	m->store = X509_STORE_new();
	if (m->store == NULL || X509_STORE_load_file(m->store, path[F_CA]) != 1) {
		/* X509_STORE_load_file says nothing useful about a missing file: ask stat. */
		int rc = m->stamps[F_CA].err ? -m->stamps[F_CA].err : -EBADMSG;
		job_fail(j, rc, path[F_CA],
		         m->stamps[F_CA].err ? strerror(m->stamps[F_CA].err)
		                             : "cannot load the CA");
		return false;
	}
	return true;
}

static void reload_work(void *arg)
{
	struct job *j = arg;
	for (size_t i = 0; i < j->n; i++)
		for (int k = 0; k < F_COUNT; k++)
			st_file_stamp_read(j->path[i][k], &j->m[i].stamps[k]);
	if (j->flags & ST_CERTRELOAD_IF_CHANGED) {
		bool same = true;
		for (size_t i = 0; i < j->n; i++)
			for (int k = 0; k < F_COUNT; k++)
				same = same &&
				       st_file_stamp_equal(&j->m[i].stamps[k], &j->old[i][k]);
		if (same) {
			j->unchanged = true;
			return;
		}
	}
	for (size_t i = 0; i < j->n; i++)
		load_context(j, i); /* every context, so the reason names every bad file */
}

static void log_swap(const char *name, X509 *leaf)
{
	char subject[256] = "";
	X509_NAME_oneline(X509_get_subject_name(leaf), subject, sizeof subject);
	unsigned char md[32];
	unsigned int mdlen = 0;
	char hex[17] = "";
	if (X509_digest(leaf, EVP_sha256(), md, &mdlen) && mdlen >= 8)
		for (int i = 0; i < 8; i++)
			snprintf(hex + 2 * i, 3, "%02x", md[i]);
	st_info("reloaded %s certificate: %s (sha256 %s...)", name, subject, hex);
}

/* Unix seconds of an ASN1_TIME; 0 when unreadable. */
static int64_t asn1_unix(const ASN1_TIME *t)
{
	struct tm tm;
	if (t == NULL || ASN1_TIME_to_tm(t, &tm) != 1)
		return 0;
	return (int64_t)timegm(&tm);
}

bool st_cert_expiry_warning(int64_t now, int64_t not_before, int64_t not_after)
{
	if (not_after <= 0)
		return false;
	int64_t left = not_after - now;
	int64_t third = not_after > not_before ? (not_after - not_before) / 3 : 0;
	int64_t limit = third < ST_CERT_WARN_DAYS * 86400 ? third : ST_CERT_WARN_DAYS * 86400;
	return left < limit;
}

/* Context @c now holds @leaf: note its validity, warn when it expires soon. */
static void note_validity(struct context *c, X509 *leaf)
{
	if (leaf == NULL)
		return;
	c->not_before = asn1_unix(X509_get0_notBefore(leaf));
	c->not_after = asn1_unix(X509_get0_notAfter(leaf));
	int64_t now = (int64_t)time(NULL);
	if (st_cert_expiry_warning(now, c->not_before, c->not_after)) {
		int64_t left = c->not_after - now;
		st_warn("the %s certificate %s %lld s (%lld days): rotate it (warned below a third "
		        "of its lifetime or %d days)",
		        c->name, left > 0 ? "expires in" : "expired",
		        (long long)(left > 0 ? left : -left),
		        (long long)((left > 0 ? left : -left) / 86400), ST_CERT_WARN_DAYS);
	}
}

int st_certreload_validity(const struct st_certreload *r, size_t i, int64_t *not_before,
                           int64_t *not_after)
{
	if (r == NULL || i >= r->n)
		return -EINVAL;
	*not_before = r->c[i].not_before;
	*not_after = r->c[i].not_after;
	return r->c[i].not_after ? 0 : -ENOENT;
}

/* Loop thread: every context gets its new material. */
static void swap(struct st_certreload *r, struct job *j)
{
	for (size_t i = 0; i < j->n; i++)
		if (r->c[i].ctx == NULL) {
			job_fail(j, -ENODEV, r->c[i].name, "the TLS context is not known yet");
			return;
		}
	for (size_t i = 0; i < j->n; i++) {
		struct material *m = &j->m[i];
		if (SSL_CTX_use_cert_and_key(r->c[i].ctx, m->leaf, m->key, m->chain, 1) != 1) {
			/* Verified on the worker; only an allocation failure can get here. */
			job_fail(j, -ENOMEM, r->c[i].path[F_CERT], "rejected by OpenSSL");
			return;
		}
		if (m->store) {
			SSL_CTX_set_cert_store(r->c[i].ctx, m->store); /* takes ownership */
			m->store = NULL;
		}
		memcpy(r->c[i].stamps, m->stamps, sizeof m->stamps);
		log_swap(r->c[i].name, m->leaf);
		note_validity(&r->c[i], m->leaf);
	}
}

static void job_free(struct job *j)
{
	for (size_t i = 0; i < j->n; i++)
		material_free(&j->m[i]);
	free(j);
}

static void free_now(struct st_certreload *r)
{
	for (size_t i = 0; i < r->n; i++)
		for (int k = 0; k < F_COUNT; k++)
			free(r->c[i].path[k]);
	free(r);
}

static void reload_done(void *arg, int status)
{
	struct job *j = arg;
	struct st_certreload *r = j->r;
	r->running = false;
	if (r->freed) {
		job_free(j);
		free_now(r);
		return;
	}
	int rc;
	if (status < 0) {
		rc = status;
		snprintf(j->reason, sizeof j->reason, "the worker pool stopped");
	} else if (j->unchanged) {
		rc = 1;
	} else {
		if (j->rc == 0)
			swap(r, j);
		rc = j->rc;
	}
	const char *reason = rc < 0 ? j->reason : "";
	r->done(rc, reason, r->user);
	job_free(j);
	if (r->again && status == 0) {
		r->again = false;
		(void)st_certreload_start(r, r->again_flags);
	}
}

int st_certreload_new(struct st_certreload **out, struct st_workq *wq,
                      const struct st_certreload_files *files, size_t n, st_certreload_done_cb done,
                      void *user)
{
	*out = NULL;
	if (n == 0 || n > ST_CERTRELOAD_MAX_CONTEXTS || wq == NULL || done == NULL)
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (files[i].name == NULL ||
		    strlen(files[i].name) >= sizeof((struct context *)0)->name ||
		    files[i].cert_path == NULL || files[i].key_path == NULL)
			return -EINVAL;
	struct st_certreload *r = calloc(1, sizeof *r);
	if (r == NULL)
		return -ENOMEM;
	r->wq = wq;
	r->n = n;
	r->done = done;
	r->user = user;
	for (size_t i = 0; i < n; i++) {
		struct context *c = &r->c[i];
		snprintf(c->name, sizeof c->name, "%s", files[i].name);
		const char *p[F_COUNT] = {files[i].cert_path, files[i].key_path, files[i].ca_path};
		for (int k = 0; k < F_COUNT; k++) {
			if (p[k] && (c->path[k] = strdup(p[k])) == NULL) {
				free_now(r);
				return -ENOMEM;
			}
			st_file_stamp_read(c->path[k], &c->stamps[k]);
		}
	}
	*out = r;
	return 0;
}

void st_certreload_set_ctx(struct st_certreload *r, size_t i, SSL_CTX *ctx)
{
	if (r && i < r->n) {
		r->c[i].ctx = ctx;
		if (ctx)
			note_validity(&r->c[i], SSL_CTX_get0_certificate(ctx));
	}
}

int st_certreload_start(struct st_certreload *r, unsigned flags)
{
	if (r->running) {
		r->again = true;
		r->again_flags = flags;
		return 0;
	}
	struct job *j = calloc(1, sizeof *j);
	if (j == NULL)
		return -ENOMEM;
	j->r = r;
	j->flags = flags;
	j->n = r->n;
	for (size_t i = 0; i < r->n; i++) {
		for (int k = 0; k < F_COUNT; k++)
			j->path[i][k] = r->c[i].path[k];
		memcpy(j->old[i], r->c[i].stamps, sizeof j->old[i]);
	}
	int rc = st_workq_submit(r->wq, reload_work, reload_done, j);
	if (rc < 0) {
		free(j);
		return rc;
	}
	r->running = true;
	return 0;
}

void st_certreload_free(struct st_certreload *r)
{
	if (r == NULL)
		return;
	if (r->running) {
		r->freed = true; /* the job's completion frees it */
		return;
	}
	free_now(r);
}
