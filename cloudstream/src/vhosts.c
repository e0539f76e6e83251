/*
 * cloudstream/src/vhosts.c — the daemon's listeners as lws sees them: the tunnel, stream, admin
 * and aux vhosts (the front door's are door.c's), the aux vhost's callback (signals, worker
 * completions), which SSL_CTX belongs to which listener for SIGHUP's certificate reload, and
 * the ready file that names the ports.
 *
 * The seam is set-up versus sequencing: main.c decides when things start and stop (checks,
 * context, seccomp, workers, loop, drain, shutdown); this file only says what each listener is.
 *
 * Loop thread (start-up runs on it before the loop does).
 */
#include "cs.h"
#include "front.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <openssl/ssl.h>

#include <stream/admin.h>
#include <stream/certreload.h>
#include <stream/log.h>
#include <stream/loop.h>
#include <stream/workq.h>

#include "door.h"
#include "listen.h"
#include "peer.h"
#include "tunnel_int.h"

/* Fills the listener fields of @info from @addr; logs and returns -EINVAL when it is bad. */
static int set_listen(struct lws_context_creation_info *info, const char *flag, const char *addr,
                      char *host, size_t cap)
{
	int rc = st_loop_set_listen(info, addr, host, cap);
	if (rc == -EINVAL)
		st_err("--%s %s: expected ADDR:PORT, [IPv6]:PORT or :PORT", flag, addr);
	else if (rc < 0)
		st_err("--%s %s: cannot listen there: %s", flag, addr, strerror(-rc));
	return rc;
}

/* ---- certificate reload (stream/certreload.h) ------------------------------------------ */

/* The listeners, in the order of the reload helper's contexts (the front door's TLS listener
 * only when it is on). */
static const char *const tls_vhosts[3] = {"tunnel", "stream", "door"};

void cs_certs_note_ctx(struct cs_server *srv, const char *vhost_name, void *ssl_ctx)
{
	for (size_t i = 0; i < 3; i++)
		if (strcmp(vhost_name, tls_vhosts[i]) == 0)
			srv->ssl_ctx[i] = ssl_ctx;
}

static void on_certs_reloaded(int rc, const char *reason, void *user)
{
	(void)user;
	if (rc < 0 && rc != -ECANCELED)
		st_err("reload failed, old certificates kept: %s", reason);
}

/* The front door's files default to the stream port's. */
static const char *or_stream(const char *v, const char *stream)
{
	return v && v[0] ? v : stream;
}

/* Once the worker pool runs: SIGHUP reloads the listeners' files into their SSL_CTXs. */
int cs__certs_reload_new(struct cs_server *srv)
{
	const struct cs_config *c = &srv->cfg;
	const struct st_certreload_files files[3] = {
	        {tls_vhosts[0], c->tunnel_cert, c->tunnel_key, c->tunnel_ca},
	        {tls_vhosts[1], c->stream_cert, c->stream_key, c->stream_client_ca},
	        {tls_vhosts[2], or_stream(c->front_door_cert, c->stream_cert),
	         or_stream(c->front_door_key, c->stream_key),
	         or_stream(c->front_door_client_ca, c->stream_client_ca)},
	};
	size_t n = srv->ssl_ctx[2] ? 3 : 2;
	int rc = st_certreload_new(&srv->certs, srv->wq, files, n, on_certs_reloaded, srv);
	for (size_t i = 0; rc == 0 && i < n; i++)
		st_certreload_set_ctx(srv->certs, i, srv->ssl_ctx[i]);
	return rc;
}

/* Signals and worker completions: a vhost with no listener. */
static int cb_aux(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                  size_t len)
{
	(void)user;
	(void)in;
	(void)len;
	struct cs_server *srv = lws_context_user(lws_get_context(wsi));
	if (cs_listener_aux(srv, wsi, (int)reason))
		return 0;
	switch (reason) {
	case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
		if (srv && srv->wq)
			st_workq_run_completions(srv->wq);
		if (srv)
			cs_nodewatch_run_completions(srv);
		if (srv)
			cs_peerwatch_run_completions(srv);
		return 0;
	case LWS_CALLBACK_RAW_RX_FILE:
	case LWS_CALLBACK_RAW_CLOSE_FILE:
		return st_loop_signals_dispatch(wsi, (int)reason);
	default:
		return 0;
	}
}

static const struct lws_protocols aux_protocols[] = {
        {.name = "cs-aux", .callback = cb_aux}, {0}, /* terminator */
};

/*
 * A TLS vhost for the sockets our listeners (listen.h) hand over: no listener of its own,
 * HTTP/1.1 over ALPN (lws would pick h2 otherwise: libwebsockets-notes §1; the stream port's
 * own choice, h2 then http/1.1, replaces lws's below: front_h2.c), a verified client
 * certificate required. @retry: the idle/validity policy, NULL for the context's. NULL when lws
 * refused (it logged why).
 */
static struct lws_vhost *adopting_tls_vhost(struct cs_server *srv, const char *name,
                                            const struct lws_protocols *protocols, const char *cert,
                                            const char *key, const char *ca,
                                            const lws_retry_bo_t *retry)
{
	struct lws_context_creation_info info;
	memset(&info, 0, sizeof info);
	info.vhost_name = name;
	info.protocols = protocols;
	info.options = LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT |
	               LWS_SERVER_OPTION_REQUIRE_VALID_OPENSSL_CLIENT_CERT;
	info.ssl_cert_filepath = cert;
	info.ssl_private_key_filepath = key;
	info.ssl_ca_filepath = ca;
	info.alpn = "http/1.1";
	info.user = srv;
	info.retry_and_idle_policy = retry;
	info.port = CONTEXT_PORT_NO_LISTEN_SERVER;
	return lws_create_vhost(srv->ctx, &info);
}

int cs__create_vhosts(struct cs_server *srv)
{
	const struct cs_config *c = &srv->cfg;
	char host[3][64];
	struct lws_context_creation_info info;

	/* Liveness is ours (one sweep, stream/liveness.h): no lws validity timer per tunnel (the
	 * context's default is 300 s), whose re-sorting walks every timer (notes §8). */
	static const lws_retry_bo_t no_validity = {.secs_since_valid_ping = 0,
	                                           .secs_since_valid_hangup = 0};
	srv->vh_tunnel = adopting_tls_vhost(srv, "tunnel", cs_tunnel_protocols, c->tunnel_cert,
	                                    c->tunnel_key, c->tunnel_ca, &no_validity);
	if (srv->vh_tunnel == NULL) {
		st_err("cannot set up the tunnel server (see the lws lines above)");
		return -ENOMEM;
	}
	/* Its listening socket is ours too (listen.h: the stream port's handshake gate). */
	srv->vh_stream = adopting_tls_vhost(srv, "stream", cs_front_protocols, c->stream_cert,
	                                    c->stream_key, c->stream_client_ca, NULL);
	if (srv->vh_stream == NULL) {
		st_err("cannot set up the stream server (see the lws lines above)");
		return -ENOMEM;
	}
	/* lws picks a vhost by SNI among those on the same listen port, else the first one: the
	 * tunnel vhost, also without a listener, would answer a client that sends a name
	 * ("localhost") with the tunnel's certificate. One vhost serves this port: no switch. */
	if (srv->ssl_ctx[1])
		SSL_CTX_set_tlsext_servername_callback((SSL_CTX *)srv->ssl_ctx[1], NULL);
	/* ALPN h2 then http/1.1, chosen by us after lws set its own (front_h2.c: lws would turn
	 * an h2 connection into its own HTTP/2 role). */
	if (srv->ssl_ctx[1] && c->stream_http2)             /* --stream-http2 */
		(void)cs__h2_alpn_install(srv->ssl_ctx[1]); /* else HTTP/1.1 only, an ERR line */

	if (c->admin_listen && c->admin_listen[0]) {
		memset(&info, 0, sizeof info);
		info.vhost_name = "admin";
		info.protocols = st_admin_protocols;
		info.user = &srv->admin_ops;
		info.options = LWS_SERVER_OPTION_ADOPT_APPLY_LISTEN_ACCEPT_CONFIG;
		info.listen_accept_role = "raw-skt";
		info.listen_accept_protocol = st_admin_protocols[0].name;
		if (set_listen(&info, "admin-listen", c->admin_listen, host[2], sizeof host[2]) < 0)
			return -EINVAL;
		srv->vh_admin = lws_create_vhost(srv->ctx, &info);
		if (srv->vh_admin == NULL) {
			st_err("cannot listen on %s for the admin port", c->admin_listen);
			return -EADDRNOTAVAIL;
		}
	}

	memset(&info, 0, sizeof info);
	info.vhost_name = "aux";
	info.port = CONTEXT_PORT_NO_LISTEN_SERVER;
	info.protocols = aux_protocols;
	srv->vh_aux = lws_create_vhost(srv->ctx, &info);
	if (srv->vh_aux == NULL)
		return -ENOMEM;
	int rc = cs_door_create_vhosts(srv);
	if (rc < 0)
		return rc;
	rc = cs_listener_new(srv);
	return rc < 0 ? rc : cs_stream_listener_new(srv);
}

int cs__write_ready_file(struct cs_server *srv)
{
	if (srv->cfg.ready_file == NULL || srv->cfg.ready_file[0] == '\0')
		return 0;
	char buf[160];
	int n = snprintf(buf, sizeof buf, "tunnel=%d\nstream=%d\nadmin=%d\nfront_door=%d\n",
	                 cs_listener_port(srv), cs_stream_listener_port(srv),
	                 srv->vh_admin ? st_loop_listen_port(srv->vh_admin) : 0, cs_door_port(srv));
	int rc = st_loop_write_ready_file(srv->cfg.ready_file, buf, (size_t)n);
	if (rc < 0)
		st_err("--ready-file %s: %s", srv->cfg.ready_file, strerror(-rc));
	return rc;
}
