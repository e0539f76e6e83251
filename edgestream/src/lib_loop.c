/*
 * edgestream/src/lib_loop.c — an instance's event loop: the libwebsockets context and its
 * vhosts (the tunnel client with our TLS context, the admin port), the auxiliary protocol that
 * wakes the loop for other threads, and what the loop thread does on those wake-ups: a new
 * configuration, a reload, a stop (the drain, then the tunnels close).
 *
 * The seam: this is lib.c's one step that builds lws objects, and the loop-thread side of the
 * cross-thread requests (the calls that make them are in lib.c and lib_config.c).
 */
#include "es.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <stream/log.h>
#include <stream/loop.h>
#include <stream/workq.h>

#include "backend.h"
#include "conn.h"
#include "h2conn.h"
#include "tls.h"
#include "tunnel.h"

/* ---- the loop -------------------------------------------------------------------------- */

static void stop_tunnels(struct edgestream *es, const char *why)
{
	if (es->stopped)
		return;
	es->stopped = true;
	st_info("stopping: %s", why);
	lws_sul_cancel(&es->sul_certs);
	lws_sul_cancel(&es->sul_drain);
	for (struct es_tunnel *t = es->tunnels; t; t = t->next)
		es_tunnel_stop(t);
}

static void drain_check(struct edgestream *es)
{
	size_t open = es->m.streams_open;
	if (es->drain.state == ST_DRAIN_DRAINING &&
	    st_drain_check(&es->drain, open, st_now_ms()) == ST_DRAIN_STOPPING)
		stop_tunnels(es, open == 0 ? "drained" : "drain timeout");
}

static void on_drain_timer(lws_sorted_usec_list_t *sul)
{
	drain_check(lws_container_of(sul, struct edgestream, sul_drain));
}

void es_maybe_finish_drain(struct edgestream *es)
{
	/* From the timer, not here: a stream ends deep inside session and socket callbacks,
	 * where closing the tunnel is not safe. */
	if (es->drain.state == ST_DRAIN_DRAINING && es->m.streams_open == 0)
		lws_sul_schedule(es->ctx, 0, &es->sul_drain, on_drain_timer, 1);
}

/* Loop thread: a configuration from edgestream_reconfigure(). */
static void apply_pending_config(struct edgestream *es)
{
	struct es_config *fresh = atomic_exchange(&es->pending_cfg, NULL);
	if (fresh == NULL)
		return;
	uint64_t interval = es->cfg.cert_check_interval_ms;
	st_config_apply_reload(&es_config_spec, &es->cfg, fresh);
	st_config_cleanup(&es_config_spec, fresh);
	free(fresh);
	st_log_scope_set(&es->log_scope, (enum st_log_level)es->cfg.log_level,
	                 (enum st_log_format)es->cfg.log_format);
	if (interval != es->cfg.cert_check_interval_ms)
		es_certs_reschedule(es);
}

void es__handle_requests(struct edgestream *es)
{
	apply_pending_config(es);
	if (atomic_exchange(&es->reload_requested, false))
		es_certs_check(es, true);
	unsigned stops = atomic_load(&es->stop_requests);
	if (stops == es->stop_requests_seen || es->stopped)
		return;
	es->stop_requests_seen = stops;
	bool again = es->drain.state != ST_DRAIN_RUNNING;
	if (st_drain_request(&es->drain, st_now_ms(), es->cfg.drain_timeout_ms) ==
	    ST_DRAIN_STOPPING) {
		stop_tunnels(es, again ? "asked again while draining" : "asked to");
		return;
	}
	st_info("stopping: draining %zu streams in flight (up to %llu ms; new streams are "
	        "refused)",
	        (size_t)es->m.streams_open, (unsigned long long)es->cfg.drain_timeout_ms);
	lws_sul_schedule(es->ctx, 0, &es->sul_drain, on_drain_timer,
	                 (lws_usec_t)es->cfg.drain_timeout_ms * LWS_US_PER_MS);
	drain_check(es); /* none in flight: stop now */
}

static int cb_aux(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                  size_t len)
{
	(void)user;
	(void)in;
	(void)len;
	if (reason == LWS_CALLBACK_RAW_RX_FILE || reason == LWS_CALLBACK_RAW_CLOSE_FILE) {
		struct edgestream *es = lws_get_opaque_user_data(wsi); /* the inotify fd */
		if (es == NULL || wsi != es->inotify_wsi)
			return 0;
		if (reason == LWS_CALLBACK_RAW_RX_FILE)
			es_logs_on_inotify(es);
		else
			es_logs_on_inotify_closed(es);
		return 0;
	}
	if (reason == LWS_CALLBACK_EVENT_WAIT_CANCELLED) {
		struct edgestream *es = lws_context_user(lws_get_context(wsi));
		if (es) {
			es__handle_requests(es);
			if (es->wq)
				st_workq_run_completions(es->wq); /* finished runtime calls */
		}
	}
	return 0;
}

int es__create_loop(struct edgestream *es, char *err, size_t errlen)
{
	struct lws_context_creation_info info;
	memset(&info, 0, sizeof info);
	info.options = LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT | LWS_SERVER_OPTION_EXPLICIT_VHOSTS;
	info.user = es;
	info.pt_serv_buf_size = ES_READ_BYTES + LWS_PRE; /* one buffer per loop, not per socket */
	info.timeout_secs = (unsigned)((es->cfg.connect_timeout_ms + 999) / 1000);
	/* The same loop as cloudstream's (stream/loop.h): epoll through lws's libev plugin. */
	enum st_loop_kind kind;
	if (st_loop_context_new(&es->loop, &es->ctx, &info, ST_LOOP_EPOLL, &kind) < 0) {
		snprintf(err, errlen, "cannot create the event loop");
		return -ENOMEM;
	}
	if (kind != ST_LOOP_EPOLL)
		st_warn("the libwebsockets-evlib-ev plugin did not load (see the lws line above): "
		        "running on lws's poll loop");
	/* The client vhost: the tunnel first (protocols[0] gets the TLS callbacks), backends,
	 * cross-thread wake-ups; per instance, so several can live in one process. */
	struct lws_protocols *protos = es->protocols;
	protos[0] = es_tunnel_protocol;
	protos[1] = es_backend_protocol;
	protos[2] = (struct lws_protocols){.name = "es-aux", .callback = cb_aux};
	protos[3] = es_h2_protocol;
	memset(&protos[4], 0, sizeof protos[4]);
	memset(&info, 0, sizeof info);
	info.vhost_name = "client";
	info.port = CONTEXT_PORT_NO_LISTEN;
	info.protocols = protos;
	info.options = LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT; /* else no TLS at all (notes §1) */
	/* Our own client context: it trusts --tunnel-ca alone (lws's would add the system's
	 * public CAs, and leaks when two instances live in one process: tls.h). */
	char why[512];
	es->tunnel_ctx = es_tls_tunnel_ctx(es->cfg.tunnel_cert, es->cfg.tunnel_key,
	                                   es->cfg.tunnel_ca, why, sizeof why);
	if (es->tunnel_ctx == NULL) {
		snprintf(err, errlen, "tunnel TLS: %s", why);
		return -EINVAL;
	}
	info.provided_client_ssl_ctx = es->tunnel_ctx;
	info.alpn = "http/1.1";
	info.user = es;
	es->vh_client = lws_create_vhost(es->ctx, &info);
	if (es->vh_client == NULL) {
		snprintf(err, errlen, "cannot set up the tunnel client (see the lws lines above)");
		return -EINVAL;
	}
	if (es->cfg.admin_listen && es->cfg.admin_listen[0]) {
		char host[64];
		memset(&info, 0, sizeof info);
		info.vhost_name = "admin";
		info.protocols = st_admin_protocols;
		info.options = LWS_SERVER_OPTION_ADOPT_APPLY_LISTEN_ACCEPT_CONFIG;
		info.listen_accept_role = "raw-skt";
		info.listen_accept_protocol = st_admin_protocols[0].name;
		info.user = &es->admin_ops;
		int rc = st_loop_set_listen(&info, es->cfg.admin_listen, host, sizeof host);
		if (rc < 0) {
			if (rc == -EINVAL)
				snprintf(err, errlen, "admin-listen %.100s: expected ADDR:PORT",
				         es->cfg.admin_listen);
			else
				snprintf(err, errlen,
				         "admin-listen %.100s: cannot listen there: %s",
				         es->cfg.admin_listen, strerror(-rc));
			return rc;
		}
		es->vh_admin = lws_create_vhost(es->ctx, &info);
		if (es->vh_admin == NULL) {
			snprintf(err, errlen, "cannot listen on %.100s for the admin port",
			         es->cfg.admin_listen);
			return -EADDRNOTAVAIL;
		}
	}
	return 0;
}
