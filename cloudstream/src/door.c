/*
 * cloudstream/src/door.c — the front door's listeners and connections (door.h): kube-apiserver's
 * HTTPConnect egress over TLS with a client certificate (--front-door-listen) and over a unix
 * socket (--front-door-socket), as lws raw glue: the client's identity, the output queue (one
 * lws_write per WRITEABLE), the close; its counters on /metrics. What a connection's CONNECT
 * does is door_conn.c's, where it goes door_route.c's. Loop thread only.
 */
#include "door_int.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <stream/err.h>
#include <stream/log.h>
#include <stream/loop.h>
#include <stream/tunnelwrite.h>

/* ---- the connection ---------------------------------------------------------------------- */

/* The TLS client on its first bytes: false to close (no certificate, or one that did not
 * verify; lws requires one, this is the belt to its braces). */
static bool check_client(struct door *d)
{
	SSL *ssl = lws_get_ssl(d->wsi);
	struct certs_identity id;
	if (ssl == NULL || certs_ssl_peer_identity(ssl, &id) < 0)
		return false;
	snprintf(d->caller, sizeof d->caller, "%s", id.cn);
	const struct st_strlist *allow = &d->srv->cfg.front_door_allowed_subjects;
	d->refused = allow->n > 0 && !certs_identity_listed(&id, allow->v, allow->n);
	return true;
}

static void peer_uid(struct door *d)
{
	struct ucred cr;
	socklen_t len = sizeof cr;
	if (getsockopt(lws_get_socket_fd(d->wsi), SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0)
		snprintf(d->caller, sizeof d->caller, "uid=%u", (unsigned)cr.uid);
}

static struct door *door_new(struct cs_server *srv, struct lws *wsi, bool uds)
{
	struct door_set *ds = cs__door_set(srv);
	struct door *d = calloc(1, sizeof *d);
	if (d == NULL)
		return NULL;
	cs_endpoint_init(&d->ep, &cs__door_endpoint_ops, srv);
	d->srv = srv;
	d->wsi = wsi;
	d->uds = uds;
	d->ordinal = ++srv->next_ordinal;
	d->next = ds->all;
	if (ds->all)
		ds->all->prev = d;
	ds->all = d;
	d->started_ms = st_now_ms();
	/* The edge sends no more than the stream's window; our 200 and one more read fit too. */
	st_buf_init(&d->out, (size_t)cs_tunnel_window_cap(srv) + ST_MAX_MESSAGE_BYTES + 4096);
	ds->open++;
	ds->accepted++;
	if (uds) {
		peer_uid(d);
	} else {
		/* Nagle + delayed ACK would hold the ClientHello after our 200 (~40 ms a tunnel). */
		int one = 1;
		setsockopt(lws_get_socket_fd(wsi), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	}
	/* The head must come soon; then the tunnel lives as long as its peers keep it. */
	lws_set_timeout(wsi, PENDING_TIMEOUT_HTTP_KEEPALIVE_IDLE,
	                (int)(srv->cfg.idle_timeout_ms / 1000));
	return d;
}

static void door_closed(struct door *d)
{
	struct door_set *ds = cs__door_set(d->srv);
	if (d->state == DOOR_RELAY)
		ds->relays--;
	/* Closed before its answer (still dialling, or waiting for a pod lookup or a node's
	 * redial): the client went. */
	bool gone =
	        d->state == DOOR_DIALING || d->state == DOOR_LOOKUP || d->state == DOOR_RECONNECT;
	cs__door_unpark(d, CS_RECONNECT_CLIENT_GONE);
	cs__door_access_line(d, gone ? "client gone" : "done");
	lws_sul_cancel(&d->sul_dial);
	cs_endpoint_cleanup(&d->ep); /* REMOVE to the edge; what `out` held is credited */
	st_buf_cleanup(&d->out);
	free(d->in);
	ds->open--;
	if (d->prev)
		d->prev->next = d->next;
	else
		ds->all = d->next;
	if (d->next)
		d->next->prev = d->prev;
	struct cs_server *srv = d->srv;
	free(d);
	cs_maybe_finish_drain(srv);
}

static int door_writeable(struct door *d)
{
	struct cs_server *srv = d->srv;
	if (st_lws_write_pending(d->wsi))
		return 0; /* the last batch is still going out (stream/tunnelwrite.h) */
	if (d->in_len > 0 && d->state != DOOR_CLOSING)
		cs__door_process(d);
	/* Up to DOOR_WRITE_MAX from several queue blocks in one write per loop round: one block
	 * (16 KiB) a round was 64 sendto() and 65 loop rounds per MiB toward the apiserver. */
	size_t n = st_buf_read(&d->out, srv->tx + LWS_PRE, DOOR_WRITE_MAX);
	if (n > 0) {
		int rc = d->uds ? lws_write(d->wsi, srv->tx + LWS_PRE, n, LWS_WRITE_RAW)
		                : st_lws_write_corked(d->wsi, srv->tx + LWS_PRE, n, LWS_WRITE_RAW);
		if (rc < 0)
			return -1;
		cs_endpoint_delivered(&d->ep, n);
	}
	if (st_buf_len(&d->out) > 0) {
		lws_callback_on_writable(d->wsi);
		return 0;
	}
	if (d->state == DOOR_CLOSING && st_lws_write_pending(d->wsi))
		return 0; /* the answer's end first, then the close_notify and the close */
	if (d->state == DOOR_CLOSING) {
		SSL *ssl = d->uds ? NULL : lws_get_ssl(d->wsi);
		if (ssl)
			SSL_shutdown(ssl);
		return -1;
	}
	return 0;
}

static int cb_door(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                   size_t len)
{
	if (reason == LWS_CALLBACK_OPENSSL_PERFORM_CLIENT_CERT_VERIFICATION)
		return !len; /* fail closed (libwebsockets-notes §1) */
	if (reason == LWS_CALLBACK_OPENSSL_LOAD_EXTRA_SERVER_VERIFY_CERTS) {
		struct lws_vhost *vh = in; /* SIGHUP swaps the reloaded files in there */
		cs_certs_note_ctx(lws_get_vhost_user(vh), lws_get_vhost_name(vh), user);
		return 0;
	}
	struct cs_server *srv = lws_context_user(lws_get_context(wsi));
	struct door **slot = user;
	struct door *d = slot ? *slot : NULL;
	switch (reason) {
	case LWS_CALLBACK_RAW_ADOPT:
		*slot = door_new(srv, wsi, lws_get_vhost(wsi) == cs__door_set(srv)->vh_uds);
		return *slot ? 0 : -1;
	case LWS_CALLBACK_RAW_RX:
		if (d == NULL)
			return -1;
		if (!d->uds && !d->checked) {
			if (!check_client(d)) {
				cs__door_set(srv)->refused_tls++;
				return -1;
			}
			d->checked = true;
		}
		return cs__door_rx(d, in, len);
	case LWS_CALLBACK_RAW_WRITEABLE:
		return d ? door_writeable(d) : -1;
	case LWS_CALLBACK_RAW_CLOSE:
		if (d) {
			door_closed(d);
			*slot = NULL;
		}
		return 0;
	default:
		return 0;
	}
}

const struct lws_protocols cs_door_protocols[2] = {
        {
                .name = "cs-door",
                .callback = cb_door,
                .per_session_data_size = sizeof(struct door *),
                .rx_buffer_size = 16384,
                .tx_packet_size = DOOR_WRITE_MAX, /* one write goes out whole */
        },
        {0}, /* terminator */
};

/* ---- set-up -------------------------------------------------------------------------------- */

int cs_door_setup(struct cs_server *srv)
{
	const struct cs_config *c = &srv->cfg;
	struct door_set *ds = calloc(1, sizeof *ds);
	if (ds == NULL)
		return -ENOMEM;
	srv->door = ds;
	int rc = 0; /* every problem is said, not only the first (--check-config) */
	const struct st_strlist *ports = &c->front_door_kubelet_ports;
	for (size_t i = 0; i < ports->n; i++) {
		if (ds->n_kubelet_ports >= DOOR_MAX_KUBELET_PORTS ||
		    cs_door_port_parse(ports->v[i], &ds->kubelet_ports[ds->n_kubelet_ports]) < 0) {
			st_err("--front-door-kubelet-ports %s: expected up to %u ports 1..65535",
			       ports->v[i], DOOR_MAX_KUBELET_PORTS);
			rc = -EINVAL;
			break;
		}
		ds->n_kubelet_ports++;
	}
	const char *mode = c->front_door_socket_mode ? c->front_door_socket_mode : "0660";
	char *end;
	unsigned long m = strtoul(mode, &end, 8);
	if (mode[0] < '0' || mode[0] > '7' || *end != '\0' || m > 0777) {
		st_err("--front-door-socket-mode %s: expected octal permissions, e.g. 0660", mode);
		rc = -EINVAL;
	}
	ds->socket_mode = (unsigned)m;
	if (c->front_door_pod_ips && (c->apiserver_url == NULL || c->apiserver_url[0] == '\0')) {
		st_err("--front-door-pod-ips needs --apiserver-url (pods are looked up there)");
		rc = -EINVAL;
	}
	return rc;
}

static const char *or_default(const char *v, const char *dflt)
{
	return v && v[0] ? v : dflt;
}

int cs_door_create_vhosts(struct cs_server *srv)
{
	const struct cs_config *c = &srv->cfg;
	struct door_set *ds = cs__door_set(srv);
	struct lws_context_creation_info info;
	static char host[64];
	if (c->front_door_listen && c->front_door_listen[0]) {
		memset(&info, 0, sizeof info);
		info.vhost_name = "door";
		info.protocols = cs_door_protocols;
		info.options = LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT |
		               LWS_SERVER_OPTION_REQUIRE_VALID_OPENSSL_CLIENT_CERT |
		               LWS_SERVER_OPTION_ADOPT_APPLY_LISTEN_ACCEPT_CONFIG;
		info.listen_accept_role = "raw-skt";
		info.listen_accept_protocol = cs_door_protocols[0].name;
		info.ssl_cert_filepath = or_default(c->front_door_cert, c->stream_cert);
		info.ssl_private_key_filepath = or_default(c->front_door_key, c->stream_key);
		info.ssl_ca_filepath = or_default(c->front_door_client_ca, c->stream_client_ca);
		info.alpn = "http/1.1"; /* kube-apiserver offers none; lws would pick h2 */
		info.user = srv;
		int rc = st_loop_set_listen(&info, c->front_door_listen, host, sizeof host);
		if (rc < 0) {
			st_err("--front-door-listen %s: %s", c->front_door_listen,
			       rc == -EINVAL ? "expected ADDR:PORT, [IPv6]:PORT or :PORT"
			                     : strerror(-rc));
			return rc;
		}
		ds->vh_tls = lws_create_vhost(srv->ctx, &info);
		if (ds->vh_tls == NULL) {
			st_err("cannot listen on %s for the front door", c->front_door_listen);
			return -EADDRNOTAVAIL;
		}
	}
	if (c->front_door_socket && c->front_door_socket[0]) {
		struct stat sb;
		/* A socket left by a previous run would make the bind fail: only a socket is
		 * removed, never another kind of file. */
		if (lstat(c->front_door_socket, &sb) == 0) {
			if (!S_ISSOCK(sb.st_mode)) {
				st_err("--front-door-socket %s: exists and is not a socket",
				       c->front_door_socket);
				return -EEXIST;
			}
			unlink(c->front_door_socket);
		}
		memset(&info, 0, sizeof info);
		info.vhost_name = "door-uds";
		info.protocols = cs_door_protocols;
		info.options = LWS_SERVER_OPTION_UNIX_SOCK |
		               LWS_SERVER_OPTION_ADOPT_APPLY_LISTEN_ACCEPT_CONFIG;
		info.listen_accept_role = "raw-skt";
		info.listen_accept_protocol = cs_door_protocols[0].name;
		info.iface = c->front_door_socket;
		info.port = 0;
		info.user = srv;
		ds->vh_uds = lws_create_vhost(srv->ctx, &info);
		if (ds->vh_uds == NULL || lstat(c->front_door_socket, &sb) != 0) {
			st_err("--front-door-socket %s: cannot listen there", c->front_door_socket);
			return -EADDRNOTAVAIL;
		}
		/* Whoever may open it may reach every edge node's kubelet port: owner and group. */
		if (chmod(c->front_door_socket, (mode_t)ds->socket_mode) != 0) {
			st_err("--front-door-socket %s: chmod: %s", c->front_door_socket,
			       strerror(errno));
			return -errno;
		}
	}
	return 0;
}

int cs_door_port(const struct cs_server *srv)
{
	const struct door_set *ds = srv->door;
	int port = ds && ds->vh_tls ? st_loop_listen_port(ds->vh_tls) : 0;
	return port > 0 ? port : 0;
}

void cs_door_free(struct cs_server *srv)
{
	free(srv->door);
	srv->door = NULL;
}

void cs_door_metrics(struct st_text *t, const struct cs_server *srv)
{
	const struct door_set *ds = srv->door;
	if (ds == NULL)
		return;
	st_text_labelled(
	        t, "cloudstream_front_door_connections", "gauge",
	        "Front-door (HTTPConnect) connections now: all, and those relaying.", "state",
	        (const struct st_text_sample[]){{"all", ds->open}, {"relaying", ds->relays}, {0}});
	st_text_counter(t, "cloudstream_front_door_accepted_total",
	                "Front-door connections accepted (TLS and unix socket).", ds->accepted);
	st_text_counter(t, "cloudstream_front_door_refused_total",
	                "Front-door TLS connections closed at their first bytes: a client "
	                "certificate that did not verify.",
	                ds->refused_tls);
	st_text_metric(t, "cloudstream_front_door_connects_total", "counter",
	               "CONNECTs answered, by result (ok = 200 after the edge's dial).");
	for (int r = 0; r < DOOR_R_COUNT; r++)
		st_text_put(t, "cloudstream_front_door_connects_total{result=\"%s\"} %llu\n",
		            cs__door_result_names[r], (unsigned long long)ds->results[r]);
	st_text_metric(t, "cloudstream_front_door_dial_seconds_total", "counter",
	               "Time from CONNECT to 200 summed over the successful CONNECTs (divide by "
	               "cloudstream_front_door_connects_total{result=\"ok\"}).");
	st_text_put(t, "cloudstream_front_door_dial_seconds_total %.3f\n",
	            (double)ds->dial_ms_sum / 1000.0);
}
