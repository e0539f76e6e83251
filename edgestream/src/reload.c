/*
 * edgestream/src/reload.c — the tunnel certificate files, re-read when they change: checked
 * every --cert-check-interval and on edgestream_reload() (SIGHUP in the daemon), through the
 * runtime helper both daemons share (stream/certreload.h): the files are read and checked on a
 * worker (the key must match the certificate, OpenSSL must take the pair), and only a complete,
 * consistent set is swapped into the client vhost's live TLS context, on the loop. Every tunnel
 * of the instance dials with that context: the next handshake uses it, the tunnels up now keep
 * their sessions. A half-written file fails its check and is retried next time. Loop thread.
 */
#include "es.h"

#include <errno.h>

#include <stream/admin.h>
#include <stream/certreload.h>
#include <stream/log.h>

static void on_certs_reloaded(int rc, const char *reason, void *user)
{
	struct edgestream *es = user;
	bool log_unchanged = es->certs_log_unchanged;
	es->certs_log_unchanged = false;
	if (rc == 0) {
		es->m.cert_reloads++;
		es->renew_swap_pending = false;
		st_info("reloaded the tunnel certificate, key and CA (used from the next "
		        "handshake)");
		es_cert_event(es, 0, NULL);
		es_rotate_plan(es); /* --rotate-certificate: from the new validity */
	} else if (rc == 1) {
		if (log_unchanged)
			st_info("certificate files unchanged");
	} else if (rc == -ENODEV) {
		st_warn("certificate files changed but the TLS context is unknown: they are used "
		        "after a restart");
		es_cert_event(es, rc,
		              "the TLS context is unknown: the files are used after a restart");
	} else if (rc != -ECANCELED) {
		st_warn("certificate files changed but do not load yet (%s); retrying", reason);
		es_cert_event(es, rc, reason);
	}
}

void es_certs_check(struct edgestream *es, bool log_unchanged)
{
	if (es->certs == NULL)
		return;
	es->certs_log_unchanged = log_unchanged;
	int rc = st_certreload_start(es->certs, ST_CERTRELOAD_IF_CHANGED);
	if (rc == -EAGAIN)
		st_warn("certificate check not started: the worker pool is busy; retrying at the "
		        "next check");
}

static void on_certs_timer(lws_sorted_usec_list_t *sul)
{
	struct edgestream *es = lws_container_of(sul, struct edgestream, sul_certs);
	es_certs_check(es, false);
	lws_sul_schedule(es->ctx, 0, &es->sul_certs, on_certs_timer,
	                 (lws_usec_t)es->cfg.cert_check_interval_ms * LWS_US_PER_MS);
}

int es_certs_start(struct edgestream *es)
{
	const struct st_certreload_files f = {
	        .name = "tunnel",
	        .cert_path = es->cfg.tunnel_cert,
	        .key_path = es->cfg.tunnel_key,
	        .ca_path = es->cfg.tunnel_ca,
	};
	/* The helper takes the files' first stamps now, so the first check reads nothing. */
	int rc = st_certreload_new(&es->certs, es->wq, &f, 1, on_certs_reloaded, es);
	if (rc < 0)
		return rc;
	if (es->tunnel_ctx)
		st_certreload_set_ctx(es->certs, 0, es->tunnel_ctx);
	lws_sul_schedule(es->ctx, 0, &es->sul_certs, on_certs_timer,
	                 (lws_usec_t)es->cfg.cert_check_interval_ms * LWS_US_PER_MS);
	es_rotate_plan(es);
	return 0;
}

void es_certs_reschedule(struct edgestream *es)
{
	if (es->certs == NULL || es->stopped)
		return;
	lws_sul_schedule(es->ctx, 0, &es->sul_certs, on_certs_timer,
	                 (lws_usec_t)es->cfg.cert_check_interval_ms * LWS_US_PER_MS);
}

void es_certs_render_metrics(struct edgestream *es, struct st_text *t)
{
	int64_t nb, na;
	st_text_metric(t, "edgestream_certificate_expiry_seconds", "gauge",
	               "notAfter of the tunnel client certificate in use (unix time; follows "
	               "reloads). A WARN is logged when it has less than a third of its lifetime "
	               "or 30 days left.");
	if (es->certs && st_certreload_validity(es->certs, 0, &nb, &na) == 0)
		st_text_put(t, "edgestream_certificate_expiry_seconds{cert=\"tunnel\"} %lld\n",
		            (long long)na);
	st_text_labelled(
	        t, "edgestream_certificate_renewals_total", "counter",
	        "--rotate-certificate: renewals by result (ok: new files written).", "result",
	        (const struct st_text_sample[]){
	                {"ok", es->cert_renewals}, {"failed", es->cert_renewal_failures}, {0}});
}

void es_certs_stop(struct edgestream *es)
{
	es_rotate_stop(es);
	lws_sul_cancel(&es->sul_certs);
	st_certreload_free(es->certs);
	es->certs = NULL;
}
