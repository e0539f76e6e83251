/*
 * cloudstream/src/peer_members.c — the peer set (peer.h, peer_int.h): who the other replicas
 * are and its lifecycle. Members come from --peers (resolved once at start-up, kept for good),
 * --peer-dns (resolved again every --peer-dns-interval on the worker pool, never on the loop)
 * and --peer-service (the Service's EndpointSlices, watched by peerwatch.c); a member that
 * appears gets a link dialled (peer_dial.c), one that is no longer named has its link closed
 * and not redialled. Also: start (the client vhost, the directory, the first dials, the
 * liveness sweep), stop, free, and the peer figures on /metrics. Loop thread only, but for
 * dns_work on a worker.
 */
#include "peer_int.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/err.h>

#include <stream/admin.h>
#include <stream/log.h>
#include <stream/tlsctx.h>
#include <stream/tunnelwrite.h>
#include <stream/workq.h>

/* A --peer-dns resolution on the worker pool. */
struct dns_job {
	struct cs_server *srv;
	char name[256];
	char addrs[PEER_ADDRS_MAX][64]; /* numeric */
	size_t n;
	int err; /* getaddrinfo's, 0 when fine */
};

/* ---- start-up --------------------------------------------------------------------------- */

static int split_host_port(const char *v, char *host, size_t cap, int *port)
{
	const char *colon = strrchr(v, ':');
	if (colon == NULL || colon == v)
		return -EINVAL;
	const char *h = v;
	size_t hl = (size_t)(colon - v);
	if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') {
		h++;
		hl -= 2;
	}
	char *end;
	long p = strtol(colon + 1, &end, 10);
	if (*end != '\0' || p < 1 || p > 65535 || hl == 0 || hl >= cap)
		return -EINVAL;
	memcpy(host, h, hl);
	host[hl] = '\0';
	*port = (int)p;
	return 0;
}

int cs_peers_configure(struct cs_server *srv)
{
	const struct cs_config *c = &srv->cfg;
	bool dns = c->peer_dns && c->peer_dns[0];
	bool svc = c->peer_service && c->peer_service[0];
	if (c->peers.n == 0 && !dns && !svc)
		return 0;
	if (svc && (c->apiserver_url == NULL || c->apiserver_url[0] == '\0' ||
	            strchr(c->peer_service, '/') == NULL)) {
		st_err("--peer-service NAMESPACE/NAME needs --apiserver-url");
		return -EINVAL;
	}
	if (!c->peer_cert || !c->peer_key || !c->peer_ca || !c->peer_server_ca) {
		st_err("--peers and --peer-dns need --peer-cert, --peer-key, --peer-ca and "
		       "--peer-server-ca");
		return -EINVAL;
	}
	if (c->peers.n > PEER_ADDRS_MAX) {
		st_err("--peers: at most %d replicas", PEER_ADDRS_MAX);
		return -EINVAL;
	}
	struct cs_peers *p = calloc(1, sizeof *p);
	if (p == NULL)
		return -ENOMEM;
	srv->peers = p;
	p->srv = srv;
	p->out = calloc(PEER_ADDRS_MAX, sizeof *p->out);
	p->peer_store = X509_STORE_new();
	if (p->out == NULL || p->peer_store == NULL)
		return -ENOMEM;
	if (X509_STORE_load_locations(p->peer_store, c->peer_ca, NULL) != 1) {
		ERR_clear_error();
		st_err("--peer-ca %s: cannot load it as PEM certificates", c->peer_ca);
		return -EINVAL;
	}
	if (dns &&
	    split_host_port(c->peer_dns, p->dns_name, sizeof p->dns_name, &p->dns_port) < 0) {
		st_err("--peer-dns %s: not NAME:PORT", c->peer_dns);
		return -EINVAL;
	}
	for (size_t i = 0; i < c->peers.n; i++) {
		struct out_link *l = &p->out[i];
		l->srv = srv;
		l->used = true;
		if (split_host_port(c->peers.v[i], l->host, sizeof l->host, &l->port) < 0) {
			st_err("--peers %s: not HOST:PORT", c->peers.v[i]);
			return -EINVAL;
		}
		/* Start-up, before the loop: resolving here blocks nobody (STYLE B7.1). */
		struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
		int rc = getaddrinfo(l->host, NULL, &hints, &res);
		if (rc != 0 || res == NULL ||
		    getnameinfo(res->ai_addr, res->ai_addrlen, l->addr, sizeof l->addr, NULL, 0,
		                NI_NUMERICHOST) != 0) {
			st_err("--peers %s: cannot resolve %s (%s)", c->peers.v[i], l->host,
			       rc ? gai_strerror(rc) : "no address");
			if (res)
				freeaddrinfo(res);
			return -EINVAL;
		}
		freeaddrinfo(res);
	}
	p->n_out = c->peers.n;
	return 0;
}

/* ---- membership by DNS (--peer-dns): resolved on the worker pool, never on the loop ----- */

static void dns_work(void *arg)
{
	struct dns_job *j = arg;
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
	j->err = getaddrinfo(j->name, NULL, &hints, &res);
	for (struct addrinfo *a = j->err ? NULL : res; a && j->n < PEER_ADDRS_MAX; a = a->ai_next) {
		char host[64];
		if (getnameinfo(a->ai_addr, a->ai_addrlen, host, sizeof host, NULL, 0,
		                NI_NUMERICHOST) != 0)
			continue;
		bool dup = false;
		for (size_t k = 0; k < j->n; k++)
			dup |= strcmp(j->addrs[k], host) == 0;
		if (!dup)
			snprintf(j->addrs[j->n++], sizeof j->addrs[0], "%s", host);
	}
	if (res)
		freeaddrinfo(res);
}

/* The loop: @source names these members now (@n addresses, each with its port): links to the
 * new ones, and those it no longer names go (no redial). @host names them for SNI and logs. */
static void members_apply(struct cs_server *srv, int source, const char *what, const char *name,
                          const char (*addrs)[64], const int *ports, size_t n)
{
	struct cs_peers *p = peers_of(srv);
	for (size_t i = 0; i < p->n_out; i++) {
		struct out_link *l = &p->out[i];
		if (!l->used || l->source != source || l->stopping)
			continue;
		bool kept = false;
		for (size_t k = 0; k < n; k++)
			kept |= strcmp(l->addr, addrs[k]) == 0 && l->port == ports[k];
		if (kept)
			continue;
		st_info("peers: %s:%d left %s", l->addr, l->port, what);
		l->stopping = true;
		lws_sul_cancel(&l->sul_dial);
		if (l->wsi)
			lws_set_timeout(l->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
		else
			l->used = false;
	}
	for (size_t k = 0; k < n; k++) {
		bool known = false;
		size_t free_slot = PEER_ADDRS_MAX;
		for (size_t i = 0; i < PEER_ADDRS_MAX; i++) {
			struct out_link *l = &p->out[i];
			if (l->used && !l->stopping && strcmp(l->addr, addrs[k]) == 0 &&
			    l->port == ports[k])
				known = true;
			if (!l->used && free_slot == PEER_ADDRS_MAX)
				free_slot = i;
		}
		if (known || free_slot == PEER_ADDRS_MAX)
			continue;
		struct out_link *l = &p->out[free_slot];
		memset(l, 0, sizeof *l);
		l->srv = srv;
		l->used = true;
		l->source = source;
		l->port = ports[k];
		/* the name for SNI and the certificate check (or --peer-server-name) */
		snprintf(l->host, sizeof l->host, "%s", name ? name : addrs[k]);
		snprintf(l->addr, sizeof l->addr, "%s", addrs[k]);
		if (free_slot + 1 > p->n_out)
			p->n_out = free_slot + 1;
		st_info("peers: %s:%d found by %s", l->addr, l->port, what);
		lws_sul_schedule(srv->ctx, 0, &l->sul_dial, cs__peer_dial, 1);
	}
}

static void dns_apply(struct cs_server *srv, const struct dns_job *j)
{
	struct cs_peers *p = peers_of(srv);
	int ports[PEER_ADDRS_MAX];
	char host[300];
	for (size_t k = 0; k < j->n; k++)
		ports[k] = p->dns_port;
	snprintf(host, sizeof host, "--peer-dns %s", p->dns_name);
	members_apply(srv, SRC_DNS, host, p->dns_name, j->addrs, ports, j->n);
}

void cs__peers_service_members(struct cs_server *srv, const char (*addrs)[64], const int *ports,
                               size_t n)
{
	struct cs_peers *p = peers_of(srv);
	if (p == NULL || p->dir == NULL)
		return;
	char host[300];
	snprintf(host, sizeof host, "--peer-service %s", srv->cfg.peer_service);
	p->service_known = true;
	members_apply(srv, SRC_SERVICE, host, NULL, addrs, ports, n);
}

static void on_dns_timer(lws_sorted_usec_list_t *sul);

static void dns_done(void *arg, int status)
{
	struct dns_job *j = arg;
	struct cs_server *srv = j->srv;
	struct cs_peers *p = peers_of(srv);
	if (status == 0 && p && p->dns_name[0]) {
		if (j->err) {
			if (!p->dns_failing)
				st_warn("peers: --peer-dns %s: %s (the links stay as they are)",
				        p->dns_name, gai_strerror(j->err));
			p->dns_failing = true;
		} else {
			p->dns_failing = false;
			p->dns_known = true;
			dns_apply(srv, j);
		}
		lws_sul_schedule(srv->ctx, 0, &p->sul_dns, on_dns_timer,
		                 (lws_usec_t)srv->cfg.peer_dns_interval_ms * LWS_US_PER_MS);
	}
	free(j);
}

static void on_dns_timer(lws_sorted_usec_list_t *sul)
{
	struct cs_peers *p = lws_container_of(sul, struct cs_peers, sul_dns);
	struct cs_server *srv = p->srv;
	struct dns_job *j = calloc(1, sizeof *j);
	if (j == NULL || srv->wq == NULL) {
		free(j); /* before the pool runs, or without memory: in a second */
		lws_sul_schedule(srv->ctx, 0, &p->sul_dns, on_dns_timer, LWS_US_PER_SEC);
		return;
	}
	j->srv = srv;
	snprintf(j->name, sizeof j->name, "%s", p->dns_name);
	if (st_workq_submit(srv->wq, dns_work, dns_done, j) < 0) {
		free(j); /* the pool is full: in a second */
		lws_sul_schedule(srv->ctx, 0, &p->sul_dns, on_dns_timer, LWS_US_PER_SEC);
	}
}

int cs_peers_start(struct cs_server *srv)
{
	struct cs_peers *p = peers_of(srv);
	if (p == NULL)
		return 0;
	const struct cs_config *c = &srv->cfg;
	struct lws_context_creation_info info;
	memset(&info, 0, sizeof info);
	info.vhost_name = "peer";
	info.port = CONTEXT_PORT_NO_LISTEN;
	info.protocols = cs__peer_client_protocols;
	info.options = LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT; /* notes §1.3: every TLS vhost */
	/* Our own client context: it trusts --peer-server-ca alone (lws's would add the
	 * system's public CAs: stream/tlsctx.h). */
	char why[512];
	p->client_ctx = st_tls_client_ctx(c->peer_cert, c->peer_key, c->peer_server_ca, false, why,
	                                  sizeof why);
	if (p->client_ctx == NULL) {
		st_err("peer links: --peer-cert/--peer-key/--peer-server-ca: %s", why);
		return -EINVAL;
	}
	info.provided_client_ssl_ctx = p->client_ctx;
	info.alpn = "http/1.1";
	info.user = srv;
	p->vh = lws_create_vhost(srv->ctx, &info);
	if (p->vh == NULL) {
		st_err("cannot set up the peer links' client (--peer-cert, --peer-key, "
		       "--peer-server-ca: see the lws lines above)");
		return -EINVAL;
	}
	if (cs_peerdir_new(&p->dir, 0) < 0 || st_tunnel_writer_init(&p->writer, true) < 0)
		return -ENOMEM;
	p->writer.zero_keys = true; /* TLS both ways, authenticated: no XOR (tunnelwrite.h) */
	p->started_ms = st_now_ms();
	for (size_t i = 0; i < p->n_out; i++)
		lws_sul_schedule(srv->ctx, 0, &p->out[i].sul_dial, cs__peer_dial, 1);
	if (p->dns_name[0])
		lws_sul_schedule(srv->ctx, 0, &p->sul_dns, on_dns_timer, 1);
	lws_sul_schedule(srv->ctx, 0, &p->sul_live, cs__peers_live_sweep,
	                 (lws_usec_t)st_liveness_sweep_interval_ms(c->peer_dead_timeout_ms / 3) *
	                         LWS_US_PER_MS);
	st_info("peers: %zu listed%s%s, this replica is %s", p->n_out,
	        p->dns_name[0] ? ", and what --peer-dns finds: " : "",
	        p->dns_name[0] ? c->peer_dns : "", srv->replica);
	return 0;
}

void cs_peers_stop(struct cs_server *srv)
{
	struct cs_peers *p = peers_of(srv);
	if (p == NULL)
		return;
	for (size_t i = 0; i < p->n_out; i++) {
		p->out[i].stopping = true;
		lws_sul_cancel(&p->out[i].sul_dial);
	}
	lws_sul_cancel(&p->sul_live);
	lws_sul_cancel(&p->sul_dns);
	p->dns_name[0] = '\0'; /* a resolution in flight changes nothing now */
}

static void peers_free(struct cs_peers *p)
{
	if (p == NULL)
		return;
	cs_peerdir_free(p->dir);
	st_tunnel_writer_free(&p->writer);
	if (p->client_ctx)
		SSL_CTX_free(p->client_ctx);
	X509_STORE_free(p->peer_store);
	free(p->out);
	free(p);
}

/* ---- metrics ------------------------------------------------------------------------------- */

void cs_peers_metrics(struct st_text *t, const struct cs_server *srv)
{
	const struct cs_peers *p = peers_of(srv);
	if (p == NULL || p->dir == NULL)
		return;
	struct cs_peerdir_stats st;
	cs_peerdir_get_stats(p->dir, &st);
	size_t up = 0, in = 0;
	for (size_t i = 0; i < p->n_out; i++)
		up += p->out[i].e != NULL;
	for (const struct accepted_link *a = p->acc; a; a = a->next)
		in++;
	st_text_metric(t, "cloudstream_peer_links", "gauge",
	               "Peer links up: dialled by this replica (out) or by another (in).");
	st_text_put(t, "cloudstream_peer_links{dir=\"out\"} %zu\n", up);
	st_text_put(t, "cloudstream_peer_links{dir=\"in\"} %zu\n", in);
	st_text_metric(t, "cloudstream_peer_directory_nodes", "gauge",
	               "Nodes whose tunnels other replicas hold, as this one knows them.");
	st_text_put(t, "cloudstream_peer_directory_nodes %zu\n", st.entries);
	st_text_metric(t, "cloudstream_peer_directory_bytes", "gauge",
	               "Heap the peer directory asked for.");
	st_text_put(t, "cloudstream_peer_directory_bytes %zu\n", st.bytes);
	st_text_metric(t, "cloudstream_peer_streams_total", "counter",
	               "Streams forwarded to the replica holding the node (out) and relayed for "
	               "another replica to a node held here (in).");
	st_text_put(t, "cloudstream_peer_streams_total{dir=\"out\"} %llu\n",
	            (unsigned long long)p->forwarded_out);
	st_text_put(t, "cloudstream_peer_streams_total{dir=\"in\"} %llu\n",
	            (unsigned long long)p->forwarded_in);
	st_text_metric(t, "cloudstream_peer_stale_tunnels_closed_total", "counter",
	               "Tunnels closed because the node reconnected to another replica.");
	st_text_put(t, "cloudstream_peer_stale_tunnels_closed_total %llu\n",
	            (unsigned long long)p->stale_closed);
	st_text_metric(t, "cloudstream_peer_links_lost_total", "counter",
	               "Dialled peer links lost (their nodes forgotten).");
	st_text_put(t, "cloudstream_peer_links_lost_total %llu\n",
	            (unsigned long long)p->links_lost);
}

void cs_peers_free(struct cs_server *srv)
{
	peers_free(srv->peers);
	srv->peers = NULL;
}
