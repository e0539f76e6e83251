/*
 * edgestream/src/reload.c — the tunnel certificate files, re-read when they change: checked
 * every --cert-check-interval and on edgestream_reload() (SIGHUP in the daemon). A change is
 * loaded into the client vhost's live TLS context, which every tunnel of the instance dials
 * with: the next handshake uses it, the tunnels up now keep their sessions. A half-written file
 * fails to load and is retried next time. Loop thread only.
 */
#include "es.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <openssl/err.h>

#include <stream/log.h>

static void stamp_of(const char *path, struct es_file_stamp *out)
{
	struct stat sb;
	memset(out, 0, sizeof *out);
	if (path && stat(path, &sb) == 0) {
		out->mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
		out->size = (int64_t)sb.st_size;
		out->ino = (uint64_t)sb.st_ino;
	}
}

/* The stamps of the tunnel certificate, key and CA now. */
static void stamps_now(const struct edgestream *es, struct es_file_stamp out[3])
{
	stamp_of(es->cfg.tunnel_cert, &out[0]);
	stamp_of(es->cfg.tunnel_key, &out[1]);
	stamp_of(es->cfg.tunnel_ca, &out[2]);
}

void es_certs_check(struct edgestream *es, bool log_unchanged)
{
	struct es_file_stamp now[3];
	stamps_now(es, now);
	if (memcmp(now, es->stamps, sizeof now) == 0) {
		if (log_unchanged)
			st_info("certificate files unchanged");
		return;
	}
	if (es->tunnel_ctx == NULL) {
		st_warn("certificate files changed but the TLS context is unknown: they are used "
		        "after a restart");
		memcpy(es->stamps, now, sizeof now);
		return;
	}
	SSL_CTX *ctx = es->tunnel_ctx;
	X509_STORE *store = X509_STORE_new();
	if (store == NULL || X509_STORE_load_file(store, es->cfg.tunnel_ca) != 1 ||
	    SSL_CTX_use_certificate_chain_file(ctx, es->cfg.tunnel_cert) != 1 ||
	    SSL_CTX_use_PrivateKey_file(ctx, es->cfg.tunnel_key, SSL_FILETYPE_PEM) != 1 ||
	    SSL_CTX_check_private_key(ctx) != 1) {
		char e[200] = "";
		ERR_error_string_n(ERR_get_error(), e, sizeof e);
		ERR_clear_error();
		X509_STORE_free(store);
		st_warn("certificate files changed but do not load yet (%s); retrying", e);
		return;
	}
	SSL_CTX_set_cert_store(ctx, store); /* takes ownership, frees the old store */
	memcpy(es->stamps, now, sizeof now);
	es->m.cert_reloads++;
	st_info("reloaded the tunnel certificate, key and CA (used from the next handshake)");
}

static void on_certs_timer(lws_sorted_usec_list_t *sul)
{
	struct edgestream *es = lws_container_of(sul, struct edgestream, sul_certs);
	es_certs_check(es, false);
	lws_sul_schedule(es->ctx, 0, &es->sul_certs, on_certs_timer,
	                 (lws_usec_t)es->cfg.cert_check_interval_ms * LWS_US_PER_MS);
}

void es_certs_start(struct edgestream *es)
{
	stamps_now(es, es->stamps);
	lws_sul_schedule(es->ctx, 0, &es->sul_certs, on_certs_timer,
	                 (lws_usec_t)es->cfg.cert_check_interval_ms * LWS_US_PER_MS);
}
