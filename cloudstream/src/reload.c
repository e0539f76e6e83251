/*
 * cloudstream/src/reload.c — certificate reload on SIGHUP (see reload.h).
 */
#include "reload.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <stream/log.h>
#include <stream/workq.h>

#include "cs.h"

/* What one listener needs: a leaf, its chain, its key and the CA store for client certs. */
struct tls_material {
	char *cert_path, *key_path, *ca_path; /* copies: the worker must not read the config */
	X509 *leaf;
	STACK_OF(X509) * chain;
	EVP_PKEY *key;
	X509_STORE *store;
	char error[256];
};

struct reload_job {
	struct cs_server *srv;
	struct tls_material m[2]; /* [0] tunnel, [1] stream */
};

static SSL_CTX *ctx_tunnel, *ctx_stream; /* owned by lws; valid while the context lives */
static bool reload_running, reload_again;

void cs_reload_note_ctx(struct cs_server *srv, const char *vhost_name, SSL_CTX *ctx)
{
	(void)srv;
	if (strcmp(vhost_name, "tunnel") == 0)
		ctx_tunnel = ctx;
	else if (strcmp(vhost_name, "stream") == 0)
		ctx_stream = ctx;
}

static void material_free(struct tls_material *m)
{
	free(m->cert_path);
	free(m->key_path);
	free(m->ca_path);
	X509_free(m->leaf);
	sk_X509_pop_free(m->chain, X509_free);
	EVP_PKEY_free(m->key);
	X509_STORE_free(m->store);
	memset(m, 0, sizeof *m);
}

static void fail_material(struct tls_material *m, const char *path, const char *what)
{
	unsigned long e = ERR_get_error();
	char ossl[128] = "";
	if (e)
		ERR_error_string_n(e, ossl, sizeof ossl);
	ERR_clear_error();
	snprintf(m->error, sizeof m->error, "%s: %s%s%s", path, what, ossl[0] ? ": " : "", ossl);
}

/* Worker thread: read and check the files of one listener. */
static void load_material(struct tls_material *m)
{
	FILE *f = fopen(m->cert_path, "r");
	if (f == NULL) {
		snprintf(m->error, sizeof m->error, "%s: %s", m->cert_path, strerror(errno));
		return;
	}
	m->leaf = PEM_read_X509(f, NULL, NULL, NULL);
	m->chain = sk_X509_new_null();
	X509 *x;
	while (m->chain && (x = PEM_read_X509(f, NULL, NULL, NULL)) != NULL)
		if (!sk_X509_push(m->chain, x))
			X509_free(x);
	ERR_clear_error(); /* the loop ends on "no start line" */
	fclose(f);
	if (m->leaf == NULL || m->chain == NULL) {
		fail_material(m, m->cert_path, "no certificate");
		return;
	}
	f = fopen(m->key_path, "r");
	if (f == NULL) {
		snprintf(m->error, sizeof m->error, "%s: %s", m->key_path, strerror(errno));
		return;
	}
	m->key = PEM_read_PrivateKey(f, NULL, NULL, NULL);
	fclose(f);
	if (m->key == NULL) {
		fail_material(m, m->key_path, "no private key");
		return;
	}
	if (X509_check_private_key(m->leaf, m->key) != 1) {
		fail_material(m, m->key_path, "key does not match the certificate");
		return;
	}
	m->store = X509_STORE_new();
	if (m->store == NULL || X509_STORE_load_file(m->store, m->ca_path) != 1) {
		fail_material(m, m->ca_path, "cannot load the CA");
		return;
	}
}

static void reload_work(void *arg)
{
	struct reload_job *j = arg;
	for (int i = 0; i < 2; i++)
		load_material(&j->m[i]);
}

static void log_leaf(const char *what, X509 *leaf)
{
	char subject[256] = "";
	X509_NAME_oneline(X509_get_subject_name(leaf), subject, sizeof subject);
	unsigned char md[32];
	unsigned int mdlen = 0;
	char hex[17] = "";
	if (X509_digest(leaf, EVP_sha256(), md, &mdlen) && mdlen >= 8)
		for (int i = 0; i < 8; i++)
			snprintf(hex + 2 * i, 3, "%02x", md[i]);
	st_info("reloaded %s certificate: %s (sha256 %s...)", what, subject, hex);
}

/* Loop thread: swap the new material into @ctx. */
static bool apply(const char *what, SSL_CTX *ctx, struct tls_material *m)
{
	if (ctx == NULL) {
		st_err("reload of the %s certificate: listener has no TLS context", what);
		return false;
	}
	if (SSL_CTX_use_cert_and_key(ctx, m->leaf, m->key, m->chain, 1) != 1) {
		fail_material(m, m->cert_path, "rejected by OpenSSL");
		st_err("reload of the %s certificate failed: %s", what, m->error);
		return false;
	}
	SSL_CTX_set_cert_store(ctx, m->store); /* takes ownership */
	m->store = NULL;
	log_leaf(what, m->leaf);
	return true;
}

static void reload_done(void *arg, int status)
{
	struct reload_job *j = arg;
	static const char *const what[2] = {"tunnel", "stream"};
	if (status == 0) {
		bool ok = true;
		for (int i = 0; i < 2; i++)
			if (j->m[i].error[0]) {
				st_err("reload failed, old certificates kept: %s", j->m[i].error);
				ok = false;
			}
		if (ok) {
			apply(what[0], ctx_tunnel, &j->m[0]);
			apply(what[1], ctx_stream, &j->m[1]);
		}
	}
	for (int i = 0; i < 2; i++)
		material_free(&j->m[i]);
	struct cs_server *srv = j->srv;
	free(j);
	reload_running = false;
	if (reload_again && status == 0) {
		reload_again = false;
		cs_reload_start(srv);
	}
}

static char *dup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

void cs_reload_start(struct cs_server *srv)
{
	if (reload_running) {
		reload_again = true;
		return;
	}
	struct reload_job *j = calloc(1, sizeof *j);
	if (j == NULL) {
		st_err("reload: out of memory");
		return;
	}
	j->srv = srv;
	j->m[0].cert_path = dup_or_null(srv->cfg.tunnel_cert);
	j->m[0].key_path = dup_or_null(srv->cfg.tunnel_key);
	j->m[0].ca_path = dup_or_null(srv->cfg.tunnel_ca);
	j->m[1].cert_path = dup_or_null(srv->cfg.stream_cert);
	j->m[1].key_path = dup_or_null(srv->cfg.stream_key);
	j->m[1].ca_path = dup_or_null(srv->cfg.stream_client_ca);
	for (int i = 0; i < 2; i++)
		if (!j->m[i].cert_path || !j->m[i].key_path || !j->m[i].ca_path) {
			reload_done(j, -ENOMEM);
			return;
		}
	st_info("SIGHUP: reloading certificates");
	reload_running = true;
	if (st_workq_submit(srv->wq, reload_work, reload_done, j) < 0) {
		st_err("reload: worker pool busy; send SIGHUP again");
		reload_running = false;
		for (int i = 0; i < 2; i++)
			material_free(&j->m[i]);
		free(j);
	}
}

void cs_reload_cleanup(struct cs_server *srv)
{
	(void)srv;
	ctx_tunnel = ctx_stream = NULL;
	reload_running = reload_again = false;
}
