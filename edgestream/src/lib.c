/*
 * edgestream/src/lib.c — the library's instance life cycle (edgestream.h): edgestream_new (the
 * instance, its workers, its first tunnel), running it (own thread, host-driven or blocking),
 * the cross-thread stop and reload requests, and edgestream_free. The configuration API and the
 * checks at start are in lib_config.c, the event loop's set-up and its loop-thread requests (the
 * drain, a new configuration) in lib_loop.c; stats and the admin endpoints in stats.c.
 *
 * The seam: this file orders start-up and tear-down (what is created and freed in which order);
 * what a configuration means and how the loop is built are each one step it calls.
 */
#include "es.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include <stream/log.h>
#include <stream/loop.h>
#include <stream/workq.h>

#include "backend.h"
#include "tunnel.h"

static void lws_log_emit(int level, const char *line)
{
	size_t n = strlen(line);
	while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
		n--;
	st_log(level & LLL_ERR ? ST_LOG_ERROR : ST_LOG_WARN, NULL, 0, "lws: %.*s", (int)n, line);
}

/* The certificate hook's first event: the certificate in use at start. */
static void on_cert_start(lws_sorted_usec_list_t *sul)
{
	struct edgestream *es = lws_container_of(sul, struct edgestream, sul_cert_start);
	es_cert_event(es, 0, NULL);
}

static int instance_init(struct edgestream *es, struct edgestream **out,
                         const struct edgestream_config *cfg, const struct edgestream_callbacks *cb,
                         void *user, char *err, size_t errlen)
{
	es->inotify_fd = -1;
	pthread_mutex_init(&es->stats_lock, NULL);
	if (cb)
		es->cb = *cb;
	es->user = user;
	es->cert_cb = cfg->cert_cb;
	es->cert_user = cfg->cert_user;
	es->admin_ops.render_metrics = es_render_metrics;
	es->admin_ops.ready = es_ready;
	es->admin_ops.action = es_admin_action;
	for (size_t k = 0; k < sizeof es->ttfb / sizeof es->ttfb[0]; k++)
		st_hist_init(&es->ttfb[k], &st_hist_spec_ttfb);
	es->admin_ops.user = es;
	int rc = es__config_copy(&es->cfg, &cfg->c, err, errlen);
	if (rc == 0)
		rc = es__check_config(es, err, errlen);
	st_budget_init(&es->budget, es->cfg.process_buffer_bytes);
	if (rc == 0) {
		es->tx = malloc(LWS_PRE + ST_MAX_MESSAGE_BYTES + 4096);
		es->scratch = malloc(2 * 64 * 1024);
		if (es->tx == NULL || es->scratch == NULL ||
		    st_tunnel_writer_init(&es->tunnel_writer, true) < 0) {
			snprintf(err, errlen, "out of memory");
			rc = -ENOMEM;
		}
	}
	if (rc == 0) {
		lws_set_log_level(LLL_ERR | LLL_WARN, lws_log_emit);
		rc = es__create_loop(es, err, errlen);
	}
	if (rc < 0) {
		edgestream_free(es);
		return rc;
	}
	uint64_t seed = st_now_ms() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)es;
	FILE *ur = fopen("/dev/urandom", "re");
	if (ur) {
		if (fread(&seed, sizeof seed, 1, ur) != 1)
			seed ^= (uint64_t)time(NULL);
		fclose(ur);
	}
	/* Blocking work (runtime calls through libcurl, certificate file reads, host names)
	 * runs on two workers, never on the loop. */
	if ((es->cri_enabled && curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) ||
	    st_workq_new(&es->wq, es->ctx, 2, 256) < 0) {
		snprintf(err, errlen, "cannot start the worker pool");
		edgestream_free(es);
		return -ENOMEM;
	}
	/* Host names are resolved on the workers (resolve.h); the kubelet's at once, so the
	 * first request finds its address. */
	for (size_t i = 0; i < es->n_urls; i++)
		es_name_init(&es->cloud_dns[i], es->wq, "cloud", es->urls[i].host);
	if (es->kubelet_port) {
		es_name_init(&es->kubelet_dns, es->wq, "kubelet", es->kubelet_host);
		es_name_prefetch(&es->kubelet_dns);
	}
	/* One tunnel, to --cloud-url's entries in turn; a draining cloud's RECONNECT adds a
	 * second for the move (tunnel.h). */
	struct es_tunnel *t;
	if (es_tunnel_new(&t, es, seed) < 0) {
		snprintf(err, errlen, "out of memory");
		edgestream_free(es);
		return -ENOMEM;
	}
	if (es_certs_start(es) < 0) {
		snprintf(err, errlen, "out of memory");
		edgestream_free(es);
		return -ENOMEM;
	}
	st_heap_trimmer_start(&es->heap_trimmer, es->ctx, ST_HEAP_TRIM_INTERVAL_MS);
	if (es->cert_cb)
		lws_sul_schedule(es->ctx, 0, &es->sul_cert_start, on_cert_start, 1);
	for (t = es->tunnels; t; t = t->next)
		es_tunnel_schedule_dial(t, 0);
	st_info("edgestream %s: node %s, cloud wss://%s:%d%s (verified as %s), kubelet %s, %zu "
	        "local ports allowed, CRI %s, admin %s",
	        EDGESTREAM_VERSION, es->node, es->cloud_host, es->cloud_port, es->cloud_path,
	        es->cloud_name, es->kubelet_port ? es->cfg.kubelet_url : "off", es->allow.n,
	        es->cri_enabled ? es->cfg.cri_socket : "off",
	        es->vh_admin ? es->cfg.admin_listen : "off");
	es_publish_stats(es);
	*out = es;
	return 0;
}

/* The instance's own log scope from the start: what it logs while starting is its too. */
static int instance_new(struct edgestream **out, const struct edgestream_config *cfg,
                        const struct edgestream_callbacks *cb, void *user, char *err, size_t errlen)
{
	struct edgestream *es = calloc(1, sizeof *es);
	if (es == NULL)
		return -ENOMEM;
	es_log_scope_init(es, cfg);
	const struct st_log_scope *prev = st_log_enter(&es->log_scope);
	int rc = instance_init(es, out, cfg, cb, user, err, errlen); /* frees @es on failure */
	st_log_enter(prev);
	return rc;
}

int edgestream_new(struct edgestream **out, const struct edgestream_config *cfg,
                   const struct edgestream_callbacks *cb, void *user, char *err, size_t errlen)
{
	/* The host's SIGPIPE disposition survives libwebsockets' SIG_IGN, and the worker threads
	 * started here inherit the blocked SIGPIPE (embed.c). */
	struct sigaction host_sigpipe;
	bool have = sigaction(SIGPIPE, NULL, &host_sigpipe) == 0;
	bool was_blocked = es_sigpipe_block();
	int rc = instance_new(out, cfg, cb, user, err, errlen);
	if (have)
		sigaction(SIGPIPE, &host_sigpipe, NULL);
	es_sigpipe_restore(was_blocked);
	return rc;
}

/* Stopped, and every tunnel's websocket closed. */
static bool all_closed(const struct edgestream *es)
{
	if (!es->stopped)
		return false;
	for (const struct es_tunnel *t = es->tunnels; t; t = t->next)
		if (t->wsi)
			return false;
	return true;
}

/* One loop round, SIGPIPE already blocked on this thread (embed.c). */
static int service_round(struct edgestream *es, int timeout_ms)
{
	if (all_closed(es))
		return 1;
	const struct st_log_scope *prev = st_log_enter(&es->log_scope);
	es__handle_requests(es);
	int rc = st_loop_run(es->loop, timeout_ms) < 0 || all_closed(es) ? 1 : 0;
	st_log_enter(prev);
	return rc;
}

int edgestream_service(struct edgestream *es, int timeout_ms)
{
	if (all_closed(es))
		return 1;
	bool was_blocked = es_sigpipe_block(); /* the host's thread runs library code: embed.c */
	int rc = service_round(es, timeout_ms);
	es_sigpipe_restore(was_blocked);
	return rc;
}

int edgestream_run(struct edgestream *es)
{
	/* Once, not per round: a round of a keep-alive GET's path is a few system calls, and
	 * two rt_sigprocmask per round were a fifth of them. */
	bool was_blocked = es_sigpipe_block();
	while (service_round(es, -1) == 0)
		;
	es_sigpipe_restore(was_blocked);
	atomic_store(&es->loop_done, true);
	return 0;
}

bool edgestream_stopped(const struct edgestream *es)
{
	return atomic_load(&es->loop_done);
}

static void *thread_main(void *arg)
{
	struct edgestream *es = arg;
	es_sigpipe_block(); /* the library's own thread: for good */
	st_log_enter(&es->log_scope);
	edgestream_run(es);
	return NULL;
}

int edgestream_start(struct edgestream *es)
{
	if (es->thread_started)
		return -EALREADY;
	int rc = pthread_create(&es->thread, NULL, thread_main, es);
	if (rc != 0)
		return -rc;
	es->thread_started = true;
	return 0;
}

void edgestream_stop(struct edgestream *es)
{
	atomic_fetch_add(&es->stop_requests, 1);
	if (es->ctx)
		lws_cancel_service(es->ctx);
}

void edgestream_reload(struct edgestream *es)
{
	atomic_store(&es->reload_requested, true);
	if (es->ctx)
		lws_cancel_service(es->ctx);
}

void edgestream_free(struct edgestream *es)
{
	if (es == NULL)
		return;
	if (es->thread_started) {
		edgestream_stop(es);
		pthread_join(es->thread, NULL);
	}
	bool was_blocked = es_sigpipe_block(); /* closing TLS connections writes */
	/* Its last lines are its own; the scope goes with it (a caller inside it leaves it). */
	const struct st_log_scope *prev = st_log_enter(&es->log_scope);
	if (prev == &es->log_scope)
		prev = NULL;
	es->stopped = true;
	st_workq_free(es->wq); /* before the context: completions look at streams */
	es->wq = NULL;
	es_certs_stop(es); /* after the pool: a read under way is dropped, not swapped */
	if (es->ctx) {
		st_heap_trimmer_stop(&es->heap_trimmer);
		lws_sul_cancel(&es->sul_cert_start);
		/* Streams and kept connections go while the context still serves their sockets
		 * and timers; then the context closes the tunnels (their callbacks run). */
		for (struct es_tunnel *t = es->tunnels; t; t = t->next) {
			es_tunnel_stop(t);
			es_tunnel_end_streams(t);
		}
		es_kubelet_pool_free(es);
		lws_sul_cancel(&es->sul_quiet); /* relay.c's sweep; nothing re-arms it now */
		st_loop_destroy(es->loop);      /* lws_context_destroy, then the loop */
	}
	if (es->tunnel_ctx) /* ours, lent to the client vhost: after the context */
		SSL_CTX_free(es->tunnel_ctx);
	while (es->tunnels)
		es_tunnel_free(es->tunnels);
	struct es_config *pending = atomic_exchange(&es->pending_cfg, NULL);
	if (pending) {
		st_config_cleanup(&es_config_spec, pending);
		free(pending);
	}
	if (es->kubelet_ctx)
		SSL_CTX_free(es->kubelet_ctx);
	free(es->tx);
	st_tunnel_writer_free(&es->tunnel_writer);
	free(es->scratch);
	st_config_cleanup(&es_config_spec, &es->cfg);
	pthread_mutex_destroy(&es->stats_lock);
	if (es->cri_enabled)
		curl_global_cleanup();
	if (es->curl_global)
		curl_global_cleanup();
	st_log_enter(prev);
	free(es);
	es_sigpipe_restore(was_blocked);
}
