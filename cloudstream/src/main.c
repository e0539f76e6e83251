/*
 * cloudstream/src/main.c — start-up, the loop, signals (SIGTERM drains, SIGHUP reloads the
 * certificates) and shutdown.
 *
 * Order (STYLE B7): configuration → certificate files checked → lws context and listeners →
 * seccomp → worker pool → ready file → loop. What each listener is (the vhosts, the aux
 * callback, the SSL_CTXs SIGHUP reloads, the ready file's contents) is vhosts.c's.
 */
#include "cs.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include <certs/certs.h>
#include <stream/admin.h>
#include <stream/certreload.h>
#include <stream/err.h>
#include <stream/log.h>
#include <stream/loop.h>
#include <stream/sandbox.h>
#include <stream/tlsctx.h>
#include <stream/workq.h>

#include "certshare.h"
#include "door.h"
#include "join_srv.h"
#include "listen.h"
#include "peer.h"
#include "recent.h"
#include "tunnel_int.h"
#include "servecert.h"

/* A certificate (and its key, when given) must be readable and match now. */
static int check_files(const char *flag, const char *cert, const char *key)
{
	char err[512];
	int rc = key ? certs_check_pair(cert, key, err, sizeof err)
	             : certs_check_cert(cert, err, sizeof err);
	if (rc < 0)
		st_err("--%s: %s", flag, err);
	return rc;
}

/* The apiserver options, checked now rather than at the first request that needs them: the
 * URL's scheme, a token file with a token, a CA and a client certificate that load. */
static int check_apiserver(const struct cs_config *c)
{
	if (c->apiserver_url == NULL || c->apiserver_url[0] == '\0')
		return 0;
	if (strncmp(c->apiserver_url, "https://", 8) != 0 &&
	    strncmp(c->apiserver_url, "http://", 7) != 0) {
		st_err("--apiserver-url %s: expected https://HOST[:PORT]", c->apiserver_url);
		return -EINVAL;
	}
	if (c->apiserver_token_file && c->apiserver_token_file[0]) {
		FILE *f = fopen(c->apiserver_token_file, "re");
		char tok[8];
		size_t n = f ? fread(tok, 1, sizeof tok, f) : 0;
		int e = errno;
		if (f)
			fclose(f);
		if (f == NULL || n == 0) {
			st_err("--apiserver-token-file %s: %s", c->apiserver_token_file,
			       f ? "empty" : strerror(e));
			return -EINVAL;
		}
	}
	if (c->apiserver_ca && c->apiserver_ca[0] &&
	    check_files("apiserver-ca", c->apiserver_ca, NULL) < 0)
		return -EINVAL;
	if (c->apiserver_cert && c->apiserver_cert[0] &&
	    check_files("apiserver-cert/--apiserver-key", c->apiserver_cert, c->apiserver_key) < 0)
		return -EINVAL;
	return 0;
}

/* A listen address for --check-config: one of this host's? (Its port may be held by the
 * running daemon: said, not an error.) */
static int check_listen(const char *flag, const char *addr)
{
	bool port_free;
	int rc = st_loop_check_listen(addr, &port_free);
	if (rc == -EINVAL)
		st_err("--%s %s: expected ADDR:PORT, [IPv6]:PORT or :PORT", flag, addr);
	else if (rc < 0)
		st_err("--%s %s: not an address of this host: %s", flag, addr, strerror(-rc));
	else if (!port_free)
		st_info("--%s %s: the address is this host's; its port is in use now (the running "
		        "daemon?)",
		        flag, addr);
	return rc;
}

/*
 * --check-config: everything start-up checks, without starting — the configuration (already
 * loaded), the certificates, keys and CAs (readable, parsed, each key matching its
 * certificate), the deny list, the apiserver URL, token, CA and client certificate, the stream
 * port's authorization settings, the front door's, the serving certificates' and the join
 * signer's settings, and the listen addresses. A check added to start-up belongs here too. Every problem is reported, not only
 * the first. Returns the number of problems.
 */
static int check_config(struct cs_server *srv)
{
	const struct cs_config *c = &srv->cfg;
	int bad = 0;
	bad += check_files("tunnel-cert/--tunnel-key", c->tunnel_cert, c->tunnel_key) < 0;
	bad += check_files("tunnel-ca", c->tunnel_ca, NULL) < 0;
	bad += check_files("stream-cert/--stream-key", c->stream_cert, c->stream_key) < 0;
	bad += check_files("stream-client-ca", c->stream_client_ca, NULL) < 0;
	bad += check_apiserver(c) < 0;
	bad += check_listen("tunnel-listen", c->tunnel_listen) < 0;
	bad += check_listen("stream-listen", c->stream_listen) < 0;
	if (c->admin_listen && c->admin_listen[0])
		bad += check_listen("admin-listen", c->admin_listen) < 0;
	if (c->front_door_listen && c->front_door_listen[0])
		bad += check_listen("front-door-listen", c->front_door_listen) < 0;
	if (c->front_door_cert && c->front_door_cert[0])
		bad += check_files("front-door-cert/--front-door-key", c->front_door_cert,
		                   c->front_door_key) < 0;
	if (c->front_door_client_ca && c->front_door_client_ca[0])
		bad += check_files("front-door-client-ca", c->front_door_client_ca, NULL) < 0;
	bad += cs_door_setup(srv) < 0; /* its ports and the socket's mode */
	cs_door_free(srv);
	bad += cs_authz_start(srv) < 0;
	cs_authz_stop(srv);
	bad += cs_identity_new(srv) < 0; /* the deny list, the IP policy's needs */
	cs_identity_free(srv);
	bad += cs_servecert_new(srv) < 0; /* the serving CA, what its mode needs */
	cs_servecert_free(srv);
	bad += cs_advertise_check(srv) < 0;
	bad += cs_join_new(srv) < 0; /* the signer pair, the join tokens file */
	cs_join_free(srv);
	return bad;
}

/* ---- draining and stopping ------------------------------------------------------------- */

static void stop_now(struct cs_server *srv, const char *why)
{
	if (srv->stop)
		return;
	st_info("stopping: %s (%zu sessions, %zu streams)", why, srv->tun.n, srv->tun.n_streams);
	srv->stop = true;
	lws_cancel_service(srv->ctx);
}

void cs_maybe_finish_drain(struct cs_server *srv)
{
	/* In flight: the streams, and the edges still moving to another replica (their tunnels
	 * stay until the new one is up: make before break, tunnel.c). With peers, requests are
	 * still taken while draining (until the load balancer sees /readyz fail), so an apiserver
	 * connection is in flight too (idle ones are closed: request.c). */
	size_t busy = srv->tun.n_streams + srv->tun.moving + (srv->peers ? srv->n_fronts : 0);
	if (srv->draining && st_drain_check(&srv->drain, busy, st_now_ms()) == ST_DRAIN_STOPPING)
		stop_now(srv, busy == 0 ? "drained" : "drain timeout");
}

static void on_drain_timeout(lws_sorted_usec_list_t *sul)
{
	struct cs_server *srv = lws_container_of(sul, struct cs_server, sul_drain);
	stop_now(srv, "drain timeout");
}

/* ---- SIGHUP: the configuration file again -------------------------------------------------- */

/* The command line, for reading the configuration again as at start (file, then flags). */
static int cfg_argc;
static char **cfg_argv;

struct config_job {
	struct cs_server *srv;
	struct cs_config fresh; /* loaded on a worker; applied on the loop */
	int rc;
	char err[512];
};

/* Worker: the file is read off the loop (STYLE B7.2). */
static void config_work(void *arg)
{
	struct config_job *j = arg;
	enum st_config_action action;
	j->rc = st_config_load(&cs_config_spec, &j->fresh, cfg_argc, cfg_argv, &action, j->err,
	                       sizeof j->err);
}

/* Loop: what may change now changes; the rest is logged by name (st_config_apply_reload). */
static void config_done(void *arg, int status)
{
	struct config_job *j = arg;
	struct cs_server *srv = j->srv;
	if (status == 0 && j->rc < 0)
		st_err("configuration not reloaded, the running one stays: %s", j->err);
	else if (status == 0 && srv->cfg.authorization_mode != CS_AUTHZ_MODE_WEBHOOK &&
	         j->fresh.stream_allowed_subjects.n == 0)
		/* the start-up rule (cs_authz_start): no list and no webhook lets any certificate
		 * of --stream-client-ca do anything */
		st_err("configuration not reloaded, the running one stays: stream-allowed-subjects "
		       "is empty and authorization-mode is not Webhook");
	else if (status == 0) {
		st_config_apply_reload(&cs_config_spec, &srv->cfg, &j->fresh);
		st_log_set_level((enum st_log_level)srv->cfg.log_level);
		st_log_set_format((enum st_log_format)srv->cfg.log_format);
	}
	st_config_cleanup(&cs_config_spec, &j->fresh);
	free(j);
}

static void config_reload(struct cs_server *srv)
{
	struct config_job *j = calloc(1, sizeof *j);
	int rc = j ? 0 : -ENOMEM;
	if (j) {
		j->srv = srv;
		rc = st_workq_submit(srv->wq, config_work, config_done, j);
	}
	if (rc < 0) {
		st_err("configuration not reloaded: %s; send SIGHUP again",
		       rc == -EAGAIN ? "worker pool busy" : st_strerror(rc));
		free(j);
	}
}

static void on_signal(int signo, void *user)
{
	struct cs_server *srv = user;
	if (signo == SIGHUP) {
		st_info("SIGHUP: reloading the configuration, the certificates and the deny list");
		config_reload(srv);
		cs_identity_reload(srv);
		int rc = st_certreload_start(srv->certs, 0);
		if (rc < 0)
			st_err("reload: %s; send SIGHUP again",
			       rc == -EAGAIN ? "worker pool busy" : st_strerror(rc));
		return;
	}
	if (st_drain_request(&srv->drain, st_now_ms(), srv->cfg.drain_timeout_ms) ==
	    ST_DRAIN_STOPPING) {
		stop_now(srv, srv->draining ? "second signal" : strsignal(signo));
		return;
	}
	srv->draining = true;
	st_info("%s: draining (%zu streams in flight, up to %llu ms)", strsignal(signo),
	        srv->tun.n_streams, (unsigned long long)srv->cfg.drain_timeout_ms);
	cs_front_drain_idle(srv);
	cs_tunnels_drain(srv);
	lws_sul_schedule(srv->ctx, 0, &srv->sul_drain, on_drain_timeout,
	                 (lws_usec_t)srv->cfg.drain_timeout_ms * LWS_US_PER_MS);
	cs_maybe_finish_drain(srv);
}

static void lws_log_emit(int level, const char *line)
{
	uint32_t dropped;
	if (!cs_lws_log_allowed(&dropped)) /* 20 lines per 10 s: never a flood */
		return;
	if (dropped)
		st_warn("lws: %u lines dropped (at most 20 per 10 s)", dropped);
	size_t n = strlen(line);
	while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
		n--;
	st_log(level & LLL_ERR ? ST_LOG_ERROR : ST_LOG_WARN, NULL, 0, "lws: %.*s", (int)n, line);
}

static void set_replica(struct cs_server *srv)
{
	const char *r = srv->cfg.replica_id;
	char host[256] = "cloudstream";
	if (r == NULL || r[0] == '\0') {
		if (gethostname(host, sizeof host) != 0)
			snprintf(host, sizeof host, "cloudstream");
		host[sizeof host - 1] = '\0';
		r = host;
	}
	size_t n = 0;
	for (; r[n] && n < ST_MAX_REPLICA_ID_BYTES; n++) {
		char ch = r[n];
		bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		          (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-';
		srv->replica[n] = ok ? ch : '-';
	}
	srv->replica[n] = '\0';
}

int main(int argc, char **argv)
{
	static struct cs_server srv; /* static: big, and outlives every callback */
	char err[512];
	int exit_code =
	        2; /* configuration, files, certificates, listen addresses; 1 once running */

	if (st_loop_block_signals() < 0) {
		perror("cloudstream: blocking signals");
		return 1;
	}
	enum st_config_action action;
	cfg_argc = argc;
	cfg_argv = argv;
	if (st_config_load(&cs_config_spec, &srv.cfg, argc, argv, &action, err, sizeof err) < 0) {
		fprintf(stderr, "cloudstream: %s\n", err);
		st_config_cleanup(&cs_config_spec, &srv.cfg);
		return 2;
	}
	if (action == ST_CONFIG_CHECK) {
		st_log_set_format((enum st_log_format)srv.cfg.log_format);
		int bad = check_config(&srv);
		if (bad == 0)
			printf("cloudstream: the configuration is good\n");
		else
			fprintf(stderr, "cloudstream: %d problem%s in the configuration (above)\n",
			        bad, bad == 1 ? "" : "s");
		st_config_cleanup(&cs_config_spec, &srv.cfg);
		return bad ? 2 : 0;
	}
	if (action != ST_CONFIG_RUN) {
		int rc = st_config_act(&cs_config_spec, &srv.cfg, action, stdout);
		st_config_cleanup(&cs_config_spec, &srv.cfg);
		return rc < 0 ? 1 : 0;
	}
	st_log_set_level((enum st_log_level)srv.cfg.log_level);
	st_log_set_format((enum st_log_format)srv.cfg.log_format);
	lws_set_log_level(LLL_ERR | LLL_WARN, lws_log_emit);

	if (check_files("tunnel-cert/--tunnel-key", srv.cfg.tunnel_cert, srv.cfg.tunnel_key) < 0 ||
	    check_files("tunnel-ca", srv.cfg.tunnel_ca, NULL) < 0 ||
	    check_files("stream-cert/--stream-key", srv.cfg.stream_cert, srv.cfg.stream_key) < 0 ||
	    check_files("stream-client-ca", srv.cfg.stream_client_ca, NULL) < 0 ||
	    check_apiserver(&srv.cfg) < 0)
		goto out_config;
	if ((srv.cfg.front_door_cert && srv.cfg.front_door_cert[0] &&
	     check_files("front-door-cert/--front-door-key", srv.cfg.front_door_cert,
	                 srv.cfg.front_door_key) < 0) ||
	    (srv.cfg.front_door_client_ca && srv.cfg.front_door_client_ca[0] &&
	     check_files("front-door-client-ca", srv.cfg.front_door_client_ca, NULL) < 0) ||
	    cs_door_setup(&srv) < 0)
		goto out_config;
	set_replica(&srv);
	if (cs_peers_configure(&srv) < 0) /* --peers resolved here, before the loop */
		goto out_config;
	/* tcp and opened: front-door tunnels (door.h), 200 only once the edge's dial worked;
	 * reconnect: a drain moves our edges make-before-break (tunnel.c). */
	srv.our_caps = ST_CAP_FLOW | ST_CAP_HALF_CLOSE | ST_CAP_ERROR | ST_CAP_BINARY |
	               ST_CAP_RAW_RESPONSE | ST_CAP_TCP | ST_CAP_OPENED | ST_CAP_RECONNECT;
	srv.tx = malloc(LWS_PRE + ST_MAX_MESSAGE_BYTES);
	srv.scratch = malloc(ST_MAX_CONNECT_JSON_BYTES);
	uint64_t seed = (uint64_t)st_now_ms() ^ ((uint64_t)getpid() << 32);
	FILE *ur = fopen("/dev/urandom", "rb");
	if (ur) {
		if (fread(&seed, sizeof seed, 1, ur) != 1)
			seed ^= (uint64_t)time(NULL);
		fclose(ur);
	}
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) { /* before any thread */
		st_err("cannot initialise libcurl");
		goto out_config;
	}
	cs_tunnels_init(&srv);
	if (srv.tx == NULL || srv.scratch == NULL ||
	    st_tunnel_writer_init(&srv.tunnel_writer, false) < 0 ||
	    cs_registry_new(&srv.reg, (size_t)srv.cfg.max_sessions, seed) < 0 ||
	    cs_recent_new(&srv.recent, CS_RECENT_MAX_ENTRIES, seed ^ 0x5bd1e995u) < 0 ||
	    (srv.cfg.apiserver_url && srv.cfg.apiserver_url[0] &&
	     cs_podcache_new(&srv.pods, (size_t)srv.cfg.pod_cache_entries) < 0)) {
		st_err("out of memory at start");
		goto out_config;
	}
	if (cs_authz_start(&srv) < 0) /* the stream port's secure default, CA warnings */
		goto out_config;
	if (cs_identity_new(&srv) < 0 || cs_servecert_new(&srv) < 0 ||
	    cs_advertise_check(&srv) < 0 || cs_join_new(&srv) < 0)
		goto out_config;

	struct lws_context_creation_info info;
	memset(&info, 0, sizeof info);
	info.options = LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT | LWS_SERVER_OPTION_EXPLICIT_VHOSTS;
	info.user = &srv;
	info.pt_serv_buf_size = 16384; /* 4 KiB halves relay speed (libwebsockets-notes §7) */
	info.timeout_secs = 10;        /* TLS handshake deadline on the listeners */
	enum st_loop_kind loop_kind;
	if (st_loop_context_new(&srv.loop, &srv.ctx, &info, (enum st_loop_kind)srv.cfg.event_loop,
	                        &loop_kind) < 0) {
		st_err("cannot create the event loop");
		goto out_config;
	}
	if (loop_kind != (enum st_loop_kind)srv.cfg.event_loop)
		st_warn("--event-loop epoll: the libwebsockets-evlib-ev plugin did not load (see "
		        "the lws line above); running on lws's poll loop, O(connections) a round");
	cs_admin_ops_init(&srv.admin_ops, &srv);
	if (cs__create_vhosts(&srv) < 0 || cs_peers_start(&srv) < 0)
		goto out_ctx;
	cs_join_optional_client_certs(&srv, srv.ssl_ctx[0]); /* --join-tokens: edges with none */
	for (size_t i = 0; i < 3; i++) /* AES-128-GCM first, by our order (stream/tlsctx.h) */
		st_tls_prefer_aes128(srv.ssl_ctx[i], true);
	exit_code = 1; /* configured: what fails from here is the machine's, not the operator's */
	/* Liveness is ours, not lws's validity policy: that one counts only PONGs, never reads
	 * them while a tunnel is paused, and re-sorts a timer per tunnel (stream/liveness.h). */
	cs_tunnel_liveness_start(&srv);
	st_heap_trimmer_start(&srv.heap_trimmer, srv.ctx, ST_HEAP_TRIM_INTERVAL_MS);
	if (st_loop_signals_new(&srv.sig, srv.vh_aux, "cs-aux", on_signal, &srv) < 0) {
		st_err("cannot set up signal handling");
		goto out_ctx;
	}
	struct st_sandbox_opts sb = {.mode = (enum st_sandbox_mode)srv.cfg.sandbox};
	int rc = st_sandbox_apply(&sb);
	if (rc < 0) {
		st_err("cannot install the seccomp filter: %s", st_strerror(rc));
		goto out_ctx;
	}
	if (st_workq_new(&srv.wq, srv.ctx, 2, 64) < 0 || cs__certs_reload_new(&srv) < 0) {
		st_err("cannot start the worker pool");
		goto out_ctx;
	}
	if (cs_identity_start(&srv) < 0 || cs_node_events_start(&srv) < 0 ||
	    cs_peerwatch_start(&srv) < 0 || cs__write_ready_file(&srv) < 0)
		goto out_ctx;
	srv.ready = true;
	st_info("cloudstream %s replica %s: tunnel %s (port %d), stream %s (port %d), admin %s; "
	        "flow window %llu, node name from %s, %s loop",
	        cs_config_spec.version, srv.replica, srv.cfg.tunnel_listen, cs_listener_port(&srv),
	        srv.cfg.stream_listen, cs_stream_listener_port(&srv),
	        srv.vh_admin ? srv.cfg.admin_listen : "off",
	        (unsigned long long)srv.cfg.stream_window_bytes,
	        srv.cfg.node_name_from == ST_NODE_NAME_FROM_CN ? "CN" : "CN=system:node:<name>",
	        st_loop_kind_name(loop_kind));

	while (!srv.stop && st_loop_run(srv.loop, -1) >= 0)
		;
	exit_code = 0;

out_ctx:
	cs_identity_stop(&srv);
	cs_peerwatch_stop(&srv);
	cs_node_events_stop(&srv);
	lws_sul_cancel(&srv.sul_drain);
	st_heap_trimmer_stop(&srv.heap_trimmer);
	cs_tunnels_stop(&srv);
	cs_peers_stop(&srv);
	cs_servecert_stop(&srv);
	st_workq_free(srv.wq); /* before the context: completions may still touch it */
	srv.wq = NULL;
	cs_node_events_free(&srv);     /* the pool's cancelled jobs are gone */
	st_certreload_free(srv.certs); /* its SSL_CTXs go with the context */
	srv.certs = NULL;
	cs_listener_free(&srv);
	lws_sul_cancel(&srv.sul_reconnect);
	st_loop_destroy(srv.loop);        /* closes every connection: their callbacks free state */
	cs_certshare_free(srv.certshare); /* no handshake can ask for it now */
	srv.certshare = NULL;
	st_loop_signals_free(srv.sig);
out_config:
	cs_peers_free(&srv);
	cs_join_free(&srv);
	cs_identity_free(&srv);
	cs_servecert_free(&srv);
	cs_registry_free(srv.reg);
	cs_recent_free(srv.recent);
	cs_podcache_free(srv.pods);
	cs_authz_stop(&srv);
	cs_certshare_free(srv.certshare); /* NULL unless start-up failed after the vhosts */
	srv.certshare = NULL;
	cs_door_free(&srv);
	curl_global_cleanup();
	free(srv.tun.live); /* every tunnel left it when the context closed it */
	free(srv.tx);
	st_tunnel_writer_free(&srv.tunnel_writer);
	free(srv.scratch);
	st_config_cleanup(&cs_config_spec, &srv.cfg);
	if (exit_code == 0)
		st_info("stopped");
	return exit_code;
}
