/*
 * edgestream/src/lib.c — the library's public API (edgestream.h): configuration, the instance
 * and its event loop, its tunnels, running it (own thread, host-driven or blocking),
 * cross-thread stop (the drain) and reload. Stats and the admin endpoints: stats.c.
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

#include <certs/certs.h>
#include <stream/err.h>
#include <stream/log.h>
#include <stream/loop.h>
#include <stream/workq.h>

#include "backend.h"
#include "conn.h"
#include "h2conn.h"
#include "tls.h"
#include "tunnel.h"

uint64_t es_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t es_now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* ---- configuration --------------------------------------------------------------------- */

int edgestream_config_new(struct edgestream_config **out)
{
	struct edgestream_config *c = calloc(1, sizeof *c);
	if (c == NULL)
		return -ENOMEM;
	char err[256];
	int rc = st_config_defaults(&es_config_spec, &c->c, err, sizeof err);
	/* Embedded, no admin port unless asked for: the daemon's default is the daemon's (its
	 * st_config_load starts again from the option table). */
	if (rc == 0)
		rc = st_config_set(&es_config_spec, &c->c, "admin-listen", "", err, sizeof err);
	if (rc < 0) {
		st_config_cleanup(&es_config_spec, &c->c);
		free(c);
		return rc;
	}
	*out = c;
	return 0;
}

int edgestream_config_set(struct edgestream_config *cfg, const char *name, const char *value,
                          char *err, size_t errlen)
{
	return st_config_set(&es_config_spec, &cfg->c, name, value, err, errlen);
}

int edgestream_config_load_file(struct edgestream_config *cfg, const char *path, char *err,
                                size_t errlen)
{
	return st_config_load_file(&es_config_spec, &cfg->c, path, err, errlen);
}

void edgestream_config_free(struct edgestream_config *cfg)
{
	if (cfg == NULL)
		return;
	st_config_cleanup(&es_config_spec, &cfg->c);
	free(cfg);
}

/* A deep copy through the option table, so the caller may free its configuration. */
static int config_copy(struct es_config *dst, const struct es_config *src, char *err, size_t errlen)
{
	int rc = st_config_defaults(&es_config_spec, dst, err, errlen);
	for (size_t i = 0; rc == 0 && i < es_config_spec.num_opts; i++) {
		const struct st_opt *o = &es_config_spec.opts[i];
		const char *base = (const char *)src + o->offset;
		char *to = (char *)dst + o->offset;
		if (o->type == ST_OPT_STRING) {
			char **d = (char **)to;
			const char *s = *(char *const *)base;
			free(*d);
			*d = s ? strdup(s) : NULL;
			if (s && *d == NULL)
				rc = -ENOMEM;
		} else if (o->type == ST_OPT_STRING_LIST) {
			const struct st_strlist *l = (const struct st_strlist *)base;
			for (size_t j = 0; rc == 0 && j < l->n; j++)
				rc = st_config_set(&es_config_spec, dst, o->name, l->v[j], err,
				                   errlen);
		} else if (o->type == ST_OPT_BOOL) {
			*(bool *)to = *(const bool *)base;
		} else if (o->type == ST_OPT_ENUM) {
			*(int *)to = *(const int *)base;
		} else {
			*(uint64_t *)to = *(const uint64_t *)base;
		}
	}
	return rc;
}

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
	    st_drain_check(&es->drain, open, es_now_ms()) == ST_DRAIN_STOPPING)
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

static void handle_requests(struct edgestream *es)
{
	apply_pending_config(es);
	if (atomic_exchange(&es->reload_requested, false))
		es_certs_check(es, true);
	unsigned stops = atomic_load(&es->stop_requests);
	if (stops == es->stop_requests_seen || es->stopped)
		return;
	es->stop_requests_seen = stops;
	bool again = es->drain.state != ST_DRAIN_RUNNING;
	if (st_drain_request(&es->drain, es_now_ms(), es->cfg.drain_timeout_ms) ==
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
			handle_requests(es);
			if (es->wq)
				st_workq_run_completions(es->wq); /* finished runtime calls */
		}
	}
	return 0;
}

static void lws_log_emit(int level, const char *line)
{
	size_t n = strlen(line);
	while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
		n--;
	st_log(level & LLL_ERR ? ST_LOG_ERROR : ST_LOG_WARN, NULL, 0, "lws: %.*s", (int)n, line);
}

/* Node name and IP from the tunnel certificate, unless configured. */
static int identity(struct edgestream *es, char *err, size_t errlen)
{
	X509 *x;
	int rc = certs_load(es->cfg.tunnel_cert, &x, err, errlen);
	if (rc < 0)
		return rc;
	struct certs_identity id;
	rc = certs_x509_identity(x, &id);
	X509_free(x);
	if (rc < 0) {
		snprintf(err, errlen, "%s: identity unreadable", es->cfg.tunnel_cert);
		return rc;
	}
	if (es->cfg.node_name && es->cfg.node_name[0]) {
		snprintf(es->node, sizeof es->node, "%s", es->cfg.node_name);
	} else {
		enum certs_cn_mode mode = es->cfg.node_name_from == ES_NODE_NAME_FROM_CN
		                                  ? CERTS_CN_PLAIN
		                                  : CERTS_CN_NODE;
		if (certs_node_name_from_cn(id.cn, mode, es->node, sizeof es->node) < 0) {
			snprintf(err, errlen,
			         "%s: CN \"%.80s\" does not name a node (%s); set --node-name or "
			         "--node-name-from",
			         es->cfg.tunnel_cert, id.cn,
			         mode == CERTS_CN_NODE ? "system:node:<name> expected"
			                               : "not a name");
			return -EINVAL;
		}
	}
	if (es->cfg.internal_ip && es->cfg.internal_ip[0])
		snprintf(es->internal_ip, sizeof es->internal_ip, "%s", es->cfg.internal_ip);
	else if (id.num_ips > 0)
		snprintf(es->internal_ip, sizeof es->internal_ip, "%s", id.ips[0]);
	return 0;
}

static bool set_default(const struct es_config *c, const char *name, const char *value)
{
	(void)c;
	const struct st_opt *o = NULL;
	for (size_t i = 0; i < es_config_spec.num_opts; i++)
		if (strcmp(es_config_spec.opts[i].name, name) == 0)
			o = &es_config_spec.opts[i];
	return o && o->default_value && value && strcmp(o->default_value, value) == 0;
}

/* Where the tunnel's certificate comes from: the kubelet's rotating file, a join at start
 * (--join-token, when the files do not hold a usable pair yet), or the files as given. */
static int tunnel_credentials(struct edgestream *es, char *err, size_t errlen)
{
	struct es_config *c = &es->cfg;
	const char *krc = c->kubelet_rotating_cert;
	bool join = c->join_token && c->join_token[0];
	if (krc && krc[0]) {
		if (join || c->rotate_certificate ||
		    !set_default(c, "tunnel-cert", c->tunnel_cert) ||
		    !set_default(c, "tunnel-key", c->tunnel_key)) {
			snprintf(err, errlen,
			         "kubelet-rotating-cert replaces --tunnel-cert and --tunnel-key, "
			         "and "
			         "the kubelet rotates it: not with --join-token or "
			         "--rotate-certificate");
			return -EINVAL;
		}
		char *a = strdup(krc), *b = strdup(krc);
		if (a == NULL || b == NULL) {
			free(a);
			free(b);
			snprintf(err, errlen, "out of memory");
			return -ENOMEM;
		}
		free(c->tunnel_cert);
		free(c->tunnel_key);
		c->tunnel_cert = a; /* the certificate's PEM block and the key's, in one file */
		c->tunnel_key = b;
		return 0;
	}
	if ((join || c->rotate_certificate) && !es->curl_global)
		es->curl_global =
		        curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK; /* no thread yet */
	if (!join || certs_check_pair(c->tunnel_cert, c->tunnel_key, err, errlen) == 0)
		return 0; /* joined before: the token is not needed (and may be spent) */
	err[0] = '\0';
	return es_join_bootstrap(es, err, errlen);
}

int es_parse_cloud_urls(struct edgestream *es, const char *value, const char *server_name,
                        char *err, size_t errlen)
{
	es->n_urls = 0;
	const char *p = value;
	for (;;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		while (len > 0 && (*p == ' ' || *p == '\t')) {
			p++;
			len--;
		}
		while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t'))
			len--;
		char one[3 * ES_HOST_MAX];
		struct es_cloud_url *u = &es->urls[es->n_urls];
		if (es->n_urls == ES_MAX_CLOUD_URLS) {
			snprintf(err, errlen, "cloud-url: more than %u URLs", ES_MAX_CLOUD_URLS);
			return -EINVAL;
		}
		if (len == 0 || len >= sizeof one) {
			snprintf(err, errlen, "cloud-url %.200s: an empty or overlong entry",
			         value);
			return -EINVAL;
		}
		memcpy(one, p, len);
		one[len] = '\0';
		if (es_parse_url(one, "wss", 443, u->host, sizeof u->host, &u->port, u->path,
		                 sizeof u->path) < 0) {
			snprintf(err, errlen, "cloud-url %.200s: expected wss://HOST[:PORT][/PATH]",
			         one);
			return -EINVAL;
		}
		snprintf(u->name, sizeof u->name, "%s",
		         server_name && server_name[0] ? server_name : u->host);
		es->n_urls++;
		if (comma == NULL)
			break;
		p = comma + 1;
	}
	memcpy(es->cloud_host, es->urls[0].host, sizeof es->cloud_host);
	memcpy(es->cloud_path, es->urls[0].path, sizeof es->cloud_path);
	memcpy(es->cloud_name, es->urls[0].name, sizeof es->cloud_name);
	es->cloud_port = es->urls[0].port;
	return 0;
}

static int check_config(struct edgestream *es, char *err, size_t errlen)
{
	struct es_config *c = &es->cfg;
	if (c->cloud_url == NULL || c->cloud_url[0] == '\0') {
		snprintf(err, errlen,
		         "cloud-url is required (wss://HOST:PORT/v1/kubeedge/connect)");
		return -EINVAL;
	}
	int urc = es_parse_cloud_urls(es, c->cloud_url, c->cloud_server_name, err, errlen);
	if (urc < 0)
		return urc;
	int rc = tunnel_credentials(es, err, errlen);
	if (rc < 0)
		return rc;
	rc = certs_check_pair(c->tunnel_cert, c->tunnel_key, err, errlen);
	if (rc < 0 || (rc = certs_check_cert(c->tunnel_ca, err, errlen)) < 0)
		return rc;
	if ((rc = identity(es, err, errlen)) < 0)
		return rc;
	if (c->cri_socket && c->cri_socket[0]) {
		if (strlen(c->cri_socket) >= ES_CRI_SOCKET_MAX) {
			snprintf(err, errlen, "cri-socket: path too long");
			return -EINVAL;
		}
		es->cri_enabled = true;
	}
	if (c->backoff_max_ms < c->backoff_initial_ms) {
		snprintf(err, errlen, "backoff-max is below backoff-initial");
		return -EINVAL;
	}
	for (size_t i = 0; i < c->local_ports.n; i++)
		if ((rc = es_allow_add(&es->allow, c->local_ports.v[i], err, errlen)) < 0)
			return -EINVAL;
	for (size_t i = 0; i < c->pod_ports.n; i++)
		if ((rc = es_allow_add_pod_port(&es->allow, c->pod_ports.v[i], err, errlen)) < 0)
			return -EINVAL;
	for (size_t i = 0; i < c->pod_cidrs.n; i++)
		if ((rc = es_allow_add_pod_cidr(&es->allow, c->pod_cidrs.v[i], err, errlen)) < 0)
			return -EINVAL;
	if (es->allow.n_pod_ports > 0 && es->allow.n_pod_cidrs == 0) {
		snprintf(err, errlen,
		         "--pod-ports needs --pod-cidr (which pod IPs are this node's)");
		return -EINVAL;
	}
	if (c->kubelet_url && c->kubelet_url[0] && (rc = es_kubelet_setup(es, err, errlen)) < 0)
		return rc;
	return 0;
}

static int create_loop(struct edgestream *es, char *err, size_t errlen)
{
	struct lws_context_creation_info info;
	memset(&info, 0, sizeof info);
	info.options = LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT | LWS_SERVER_OPTION_EXPLICIT_VHOSTS;
	info.user = es;
	info.pt_serv_buf_size = 16384; /* 4 KiB halves relay speed (libwebsockets-notes §7) */
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
	int rc = config_copy(&es->cfg, &cfg->c, err, errlen);
	if (rc == 0)
		rc = check_config(es, err, errlen);
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
		rc = create_loop(es, err, errlen);
	}
	if (rc < 0) {
		edgestream_free(es);
		return rc;
	}
	uint64_t seed = es_now_ms() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)es;
	FILE *ur = fopen("/dev/urandom", "re");
	if (ur) {
		if (fread(&seed, sizeof seed, 1, ur) != 1)
			seed ^= (uint64_t)time(NULL);
		fclose(ur);
	}
	/* Blocking work (runtime calls through libcurl, certificate file reads) runs on two
	 * workers, never on the loop. */
	if ((es->cri_enabled && curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) ||
	    st_workq_new(&es->wq, es->ctx, 2, 256) < 0) {
		snprintf(err, errlen, "cannot start the worker pool");
		edgestream_free(es);
		return -ENOMEM;
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

int edgestream_service(struct edgestream *es, int timeout_ms)
{
	if (all_closed(es))
		return 1;
	bool was_blocked = es_sigpipe_block(); /* the host's thread runs library code: embed.c */
	const struct st_log_scope *prev = st_log_enter(&es->log_scope);
	handle_requests(es);
	int rc = st_loop_run(es->loop, timeout_ms) < 0 || all_closed(es) ? 1 : 0;
	st_log_enter(prev);
	es_sigpipe_restore(was_blocked);
	return rc;
}

int edgestream_run(struct edgestream *es)
{
	bool was_blocked = es_sigpipe_block(); /* once, not per round */
	while (edgestream_service(es, -1) == 0)
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

int edgestream_reconfigure(struct edgestream *es, const struct edgestream_config *cfg)
{
	char err[256];
	struct es_config *c = calloc(1, sizeof *c);
	if (c == NULL)
		return -ENOMEM;
	if (config_copy(c, &cfg->c, err, sizeof err) < 0) {
		st_config_cleanup(&es_config_spec, c);
		free(c);
		return -ENOMEM;
	}
	struct es_config *old = atomic_exchange(&es->pending_cfg, c);
	if (old) { /* not applied yet: this one replaces it */
		st_config_cleanup(&es_config_spec, old);
		free(old);
	}
	if (es->ctx)
		lws_cancel_service(es->ctx);
	return 0;
}

int edgestream_config_check(const struct edgestream_config *cfg, char *err, size_t errlen)
{
	struct edgestream *es = calloc(1, sizeof *es);
	if (es == NULL)
		return -ENOMEM;
	es->inotify_fd = -1;
	pthread_mutex_init(&es->stats_lock, NULL);
	es_log_scope_init(es, cfg);
	const struct st_log_scope *prev = st_log_enter(&es->log_scope);
	err[0] = '\0';
	int rc = config_copy(&es->cfg, &cfg->c, err, errlen);
	const struct es_config *c = &es->cfg;
	char why[256];
	if (rc == 0 && c->join_token && c->join_token[0] &&
	    certs_check_pair(c->tunnel_cert, c->tunnel_key, why, sizeof why) < 0) {
		/* Not joined yet: the join at start makes the tunnel files, and a check must not
		 * spend the token (check_config would join). The cloud's URL is checked. */
		st_info("not joined yet (%s): the tunnel certificate comes from --join-token at "
		        "start; --check-config does not join",
		        why);
		if (c->cloud_url == NULL) {
			snprintf(err, errlen,
			         "cloud-url (none): expected wss://HOST[:PORT][/PATH]");
			rc = -EINVAL;
		} else {
			rc = es_parse_cloud_urls(es, c->cloud_url, c->cloud_server_name, err,
			                         errlen);
		}
	} else if (rc == 0) {
		rc = check_config(es, err, errlen);
	}
	es->cri_enabled = false; /* curl was never initialised */
	const char *admin = cfg->c.admin_listen;
	if (admin && admin[0]) {
		bool port_free;
		int lrc = st_loop_check_listen(admin, &port_free);
		if (lrc < 0) {
			size_t n = strlen(err);
			snprintf(err + n, errlen - n, "%sadmin-listen %s: %s", n ? "; " : "", admin,
			         lrc == -EINVAL ? "expected ADDR:PORT, [IPv6]:PORT or :PORT"
			                        : "not an address of this host");
			rc = rc < 0 ? rc : lrc;
		} else if (!port_free) {
			st_info("admin-listen %s: the address is this host's; its port is in use "
			        "now "
			        "(a running edgestream?)",
			        admin);
		}
	}
	edgestream_free(es);
	st_log_enter(prev);
	return rc;
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
		st_loop_destroy(es->loop); /* lws_context_destroy, then the loop */
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
