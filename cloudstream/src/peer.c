/*
 * cloudstream/src/peer.c — links to the other replicas (peer.h): the links this replica dials
 * (cloud role, a struct cs_tunnel each; the directory of what the other holds), the links it
 * accepts on the tunnel port (edge role: its own nodes announced, incoming streams relayed to
 * the nodes' tunnels), membership from --peers, and readiness. lws glue; the protocol decisions
 * are st_session's and peerdir.c's. Loop thread only.
 */
#include "peer.h"

#include "peerdir.h"
#include "tunnel_int.h"

#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <stream/admin.h>
#include <stream/connect.h>
#include <stream/err.h>
#include <stream/ext.h>
#include <stream/frame.h>
#include <stream/liveness.h>
#include <stream/log.h>
#include <stream/tlsctx.h>
#include <stream/reasm.h>
#include <stream/tunnelwrite.h>
#include <stream/workq.h>

/* One entry of --peers: a link this replica dials. */
struct out_link {
	struct cs_server *srv;
	char host[256]; /* as configured: SNI and the name checked (or --peer-server-name) */
	char addr[64];  /* resolved at start */
	int port;
	struct lws *wsi;   /* the connection in progress or up, else NULL */
	struct in_link *e; /* the link once up (edge role: our nodes, their streams) */
	bool self;         /* the other end said our own replica id: never dialled again */
	bool stopping;     /* no more dials (exit, or the address left the membership) */
	bool used;         /* the slot holds a link (p->out is a table of slots) */
	int source;        /* enum member_source: who named it (a dynamic one takes it away) */
	unsigned fails;    /* dials failed in a row (backoff) */
	char replica[ST_MAX_REPLICA_ID_BYTES + 1]; /* the other's id, from its echo */
	lws_sorted_usec_list_t sul_dial;
};

/* Bytes one hop did not take yet: [off, off + len) of p. Bounded by the sender's credit
 * (the caller checks); grown by doubling, compacted only when the tail is full. */
struct pbuf {
	uint8_t *p;
	size_t off, len, cap;
};

static int pbuf_append(struct pbuf *b, const uint8_t *p, size_t n)
{
	if (b->off + b->len + n > b->cap) {
		if (b->off > 0) {
			memmove(b->p, b->p + b->off, b->len);
			b->off = 0;
		}
		if (b->len + n > b->cap) {
			size_t cap = b->cap ? b->cap : 65536;
			while (cap < b->len + n)
				cap *= 2;
			uint8_t *nb = realloc(b->p, cap);
			if (nb == NULL)
				return -ENOMEM;
			b->p = nb;
			b->cap = cap;
		}
	}
	memcpy(b->p + b->off + b->len, p, n);
	b->len += n;
	return 0;
}

static void pbuf_consume(struct pbuf *b, size_t n)
{
	b->off += n;
	b->len -= n;
	if (b->len == 0)
		b->off = 0;
}

/* A stream relayed from an accepted link to a node's tunnel. */
struct pstream {
	struct cs_endpoint ep; /* toward the node's tunnel */
	struct in_link *l;     /* NULL once the link is gone */
	uint64_t id;           /* the stream's id on the link; 0 once that side ended */
	struct pbuf down;      /* edge → link bytes the link's session did not take yet */
	struct pbuf up;        /* link → edge bytes the tunnel did not take yet */
	bool up_half_close;    /* the link half-closed: shut the edge side once @up is out */
	bool down_end;         /* the edge ended: close the link side once @down is out */
	uint64_t down_code;
	char down_reason[128];
	uint64_t started_ms;
	struct pstream *next, *prev; /* in l->streams */
};

/* The edge-role side of a link: the one this replica dialled to another (an out_link's). */
struct in_link {
	struct cs_server *srv;
	struct lws *wsi; /* the client connection; NULL once lws is closing it */
	struct st_session *sess;
	struct st_reasm rx;
	char replica[ST_MAX_REPLICA_ID_BYTES + 1];
	uint64_t ordinal;
	bool sync_pending;        /* a full list must (re)start: SYNC not queued yet */
	bool in_sync;             /* between our SYNC and SYNC_END */
	struct cs_tunnel *cursor; /* the next local tunnel the list names */
	bool kill;
	bool want_ping;          /* the sweep asked for a PING: the next WRITEABLE sends it */
	struct st_liveness live; /* any frame received counts (a PONG too) */
	struct pstream *streams;
	struct in_link *next, *prev;
};

#define PEER_ADDRS_MAX CS_PEERDIR_MAX_PEERS

/* Where a member came from: --peers (for good), --peer-dns or --peer-service (as long as they
 * name it). */
enum member_source { SRC_STATIC = 0, SRC_DNS = 1, SRC_SERVICE = 2 };

/* A --peer-dns resolution on the worker pool. */
struct dns_job {
	struct cs_server *srv;
	char name[256];
	char addrs[PEER_ADDRS_MAX][64]; /* numeric */
	size_t n;
	int err; /* getaddrinfo's, 0 when fine */
};

struct cs_peers {
	struct cs_server *srv;
	SSL_CTX *client_ctx; /* ours, lent to the "peer" vhost (stream/tlsctx.h); freed after lws */
	struct out_link *out; /* PEER_ADDRS_MAX slots */
	size_t n_out;         /* slots ever used (a bound for loops) */
	char dns_name[256];   /* --peer-dns: the name, its port */
	int dns_port;
	bool dns_known;     /* the first answer arrived (readiness waits for it) */
	bool service_known; /* the first EndpointSlice list arrived (the same) */
	bool dns_failing;
	lws_sorted_usec_list_t sul_dns;
	struct in_link *in;    /* the edge-role sides of the links we dialled */
	struct cs_tunnel *acc; /* the cloud-role sides of the links we accepted (all_next) */
	struct cs_tunnel *slot_owner[CS_PEERDIR_MAX_PEERS]; /* the accepted link of each peer */
	struct cs_peerdir *dir;
	struct lws_vhost *vh;           /* the client vhost (peer certificate) */
	X509_STORE *peer_store;         /* --peer-ca alone: what a peer certificate chains to */
	struct st_tunnel_writer writer; /* masked: we are the client on dialled links */
	uint64_t started_ms;
	lws_sorted_usec_list_t sul_live; /* one liveness sweep over every link */
	bool ready_logged, timeout_logged;
	uint64_t forwarded_out, forwarded_in, stale_closed, links_lost;
};

static struct cs_peers *peers_of(const struct cs_server *srv)
{
	return srv->peers;
}

static uint64_t wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

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

static int cb_peer_client(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                          size_t len);

static const struct lws_protocols peer_client_protocols[] = {
        {
                .name = "cloudstream-peer",
                .callback = cb_peer_client,
                .rx_buffer_size = 16384,
                .tx_packet_size = ST_TUNNEL_BATCH_BYTES,
        },
        {0},
};

static void dial(lws_sorted_usec_list_t *sul);

/*
 * A partition that drops packets closes nothing: like the edges' tunnels, every link is
 * pinged when quiet (a third of --peer-dead-timeout) and dropped after --peer-dead-timeout of
 * silence, both ways, so the directory forgets a peer it cannot reach and the link is dialled again.
 */
static void on_live_sweep(lws_sorted_usec_list_t *sul)
{
	struct cs_peers *p = lws_container_of(sul, struct cs_peers, sul_live);
	struct cs_server *srv = p->srv;
	uint64_t now = cs_now_ms(), dead = srv->cfg.peer_dead_timeout_ms, ping = dead / 3;
	for (struct cs_tunnel *t = p->acc; t; t = t->all_next) {
		if (t->wsi == NULL)
			continue;
		switch (st_liveness_check(&t->live, now, ping, dead)) {
		case ST_LIVENESS_PING:
			t->want_ping = true;
			lws_callback_on_writable(t->wsi);
			break;
		case ST_LIVENESS_DEAD:
			st_warn("peers: link from %s silent for %llu ms (--peer-dead-timeout): "
			        "dropped",
			        t->node, (unsigned long long)(now - t->live.last_rx_ms));
			lws_set_timeout(t->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
			break;
		case ST_LIVENESS_OK:
			break;
		}
	}
	for (struct in_link *l = p->in; l; l = l->next) {
		if (l->wsi == NULL)
			continue;
		switch (st_liveness_check(&l->live, now, ping, dead)) {
		case ST_LIVENESS_PING:
			l->want_ping = true;
			lws_callback_on_writable(l->wsi);
			break;
		case ST_LIVENESS_DEAD:
			st_warn("peers: link to %s silent for %llu ms (--peer-dead-timeout): "
			        "dropped",
			        l->replica, (unsigned long long)(now - l->live.last_rx_ms));
			lws_set_timeout(l->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
			break;
		case ST_LIVENESS_OK:
			break;
		}
	}
	lws_sul_schedule(srv->ctx, 0, &p->sul_live, on_live_sweep,
	                 (lws_usec_t)st_liveness_sweep_interval_ms(ping) * LWS_US_PER_MS);
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
		lws_sul_schedule(srv->ctx, 0, &l->sul_dial, dial, 1);
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
	info.protocols = peer_client_protocols;
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
	p->started_ms = cs_now_ms();
	for (size_t i = 0; i < p->n_out; i++)
		lws_sul_schedule(srv->ctx, 0, &p->out[i].sul_dial, dial, 1);
	if (p->dns_name[0])
		lws_sul_schedule(srv->ctx, 0, &p->sul_dns, on_dns_timer, 1);
	lws_sul_schedule(srv->ctx, 0, &p->sul_live, on_live_sweep,
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

/* ---- certificates ------------------------------------------------------------------------- */

void cs_peer_trust_ca(struct cs_server *srv, void *ssl_ctx)
{
	const char *ca = srv->cfg.peer_ca;
	if (srv->peers == NULL || ca == NULL || ssl_ctx == NULL)
		return;
	if (X509_STORE_load_locations(SSL_CTX_get_cert_store(ssl_ctx), ca, NULL) != 1) {
		ERR_clear_error();
		st_err("--peer-ca %s: not added to the tunnel port's trust", ca);
	}
}

/* Does the peer's certificate chain to --peer-ca alone? */
static bool chains_to_peer_ca(struct cs_server *srv, struct lws *wsi)
{
	struct cs_peers *p = peers_of(srv);
	SSL *ssl = lws_get_ssl(wsi);
	if (p == NULL || ssl == NULL)
		return false;
	X509 *x = SSL_get_peer_certificate(ssl);
	if (x == NULL)
		return false;
	STACK_OF(X509) *chain = SSL_get_peer_cert_chain(ssl);
	X509_STORE_CTX *ctx = X509_STORE_CTX_new();
	bool ok = ctx && X509_STORE_CTX_init(ctx, p->peer_store, x, chain) == 1 &&
	          X509_verify_cert(ctx) == 1;
	X509_STORE_CTX_free(ctx);
	X509_free(x);
	ERR_clear_error();
	return ok;
}

bool cs_peer_cert_is_peer(struct cs_server *srv, struct lws *wsi)
{
	return srv->peers != NULL && chains_to_peer_ca(srv, wsi);
}

/* The CN of the verified client certificate is --peer-subject. */
static bool peer_subject_ok(struct cs_server *srv, struct lws *wsi, char *cn, size_t cap)
{
	cn[0] = '\0';
	SSL *ssl = lws_get_ssl(wsi);
	X509 *x = ssl ? SSL_get_peer_certificate(ssl) : NULL;
	if (x == NULL)
		return false;
	X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, cn, (int)cap);
	X509_free(x);
	return strcmp(cn, srv->cfg.peer_subject ? srv->cfg.peer_subject : "") == 0;
}

/* ---- the directory ------------------------------------------------------------------------ */

/* A peer announced a newer tunnel of a node we hold: ours is stale (PROTOCOL.md §7). */
static void on_dir_up(const char *node, size_t len, uint64_t gen, const char *replica, void *user)
{
	struct cs_server *srv = user;
	struct cs_tunnel *t = cs_registry_get(srv->reg, node, len);
	if (t == NULL || cs_peerdir_gen_cmp(t->gen_ms, srv->replica, gen, replica) >= 0)
		return;
	if (cs_tunnel_moved(t))
		return; /* draining: its streams finish here, new requests go to @replica */
	peers_of(srv)->stale_closed++;
	st_log(ST_LOG_INFO, t->node, 0,
	       "tunnel superseded: the edge node reconnected to replica %s (%llu ms later)",
	       replica, (unsigned long long)(gen - t->gen_ms));
	cs_tunnel_close(t, "the edge node reconnected to another cloudstream replica");
}

/* A peer announced a node: requests waiting for its redial go there. */
static void on_dir_up_wake(const char *node, size_t len, uint64_t gen, const char *replica,
                           void *user)
{
	on_dir_up(node, len, gen, replica, user);
	cs_front_node_back(user, node, len);
}

/* A peer's entry went: unless the node is connected here, it may be between tunnels. */
static void on_dir_down(const struct cs_peerdir_entry *e, void *user)
{
	struct cs_server *srv = user;
	if (cs_registry_get(srv->reg, e->node, e->node_len) == NULL)
		cs_front_node_gone(srv, e->node, e->node_len, e->ips, e->ip_lens, e->n_ips);
}

static const struct cs_peerdir_cbs dir_cbs = {.on_up = on_dir_up_wake, .on_down = on_dir_down};

/* A directory message on a link we accepted (tunnel_stream.c's on_peer). */
int cs__peer_dir_msg(struct cs_tunnel *t, uint64_t type, const uint8_t *payload, size_t len)
{
	struct cs_peers *p = peers_of(t->srv);
	if (!t->peer || p == NULL || p->slot_owner[t->peer_slot] != t)
		return 0; /* a link replaced by a newer one from the same replica: ignored */
	bool was = cs_peerdir_peer_synced(p->dir, t->peer_slot);
	int rc = cs_peerdir_recv(p->dir, t->peer_slot, type, payload, len, &dir_cbs, t->srv);
	if (rc < 0) {
		st_log(ST_LOG_WARN, t->node, 0, "peer link dropped: malformed %s from replica %s",
		       st_msg_type_name(type), t->node);
		return rc;
	}
	if (!was && cs_peerdir_peer_synced(p->dir, t->peer_slot)) {
		struct cs_peerdir_stats st;
		cs_peerdir_get_stats(p->dir, &st);
		st_log(ST_LOG_INFO, t->node, 0, "peer %s synced (%zu nodes held by peers)", t->node,
		       st.entries);
	}
	return 0;
}

bool cs_peers_ready(struct cs_server *srv, const char **why)
{
	struct cs_peers *p = peers_of(srv);
	if (p == NULL || p->dir == NULL)
		return true;
	const char *missing = p->dns_name[0] && !p->dns_known ? p->dns_name : NULL;
	if (missing == NULL && srv->cfg.peer_service && srv->cfg.peer_service[0] &&
	    !p->service_known)
		missing = srv->cfg.peer_service;
	for (size_t i = 0; missing == NULL && i < p->n_out; i++) {
		struct out_link *l = &p->out[i];
		if (!l->used || l->stopping || l->self)
			continue;
		/* Its node list comes on the link it dialled to us; it names itself on ours. */
		int slot = l->e ? cs_peerdir_peer_find(p->dir, l->replica) : -1;
		if (slot < 0 || !cs_peerdir_peer_synced(p->dir, slot) ||
		    p->slot_owner[slot] == NULL) {
			missing = l->host;
			break;
		}
	}
	if (missing == NULL) {
		if (!p->ready_logged)
			st_info("peers: synced with every peer: ready");
		p->ready_logged = true;
		return true;
	}
	if (p->ready_logged || cs_now_ms() - p->started_ms >= srv->cfg.peer_sync_timeout_ms) {
		if (!p->ready_logged && !p->timeout_logged)
			st_warn("peers: not synced with %s after --peer-sync-timeout: ready anyway",
			        missing);
		p->timeout_logged = true;
		return true;
	}
	*why = "not synced with every peer yet (--peer-sync-timeout)";
	return false;
}

/* ---- links we dial ------------------------------------------------------------------------ */

static void schedule_dial(struct out_link *l)
{
	if (l->stopping || l->self)
		return;
	/* The first redial after a link that was up goes at once; then 100 ms doubling to
	 * --peer-redial-max, with up to a quarter of jitter. */
	uint64_t ms = 0;
	if (l->fails > 0) {
		ms = 100ull << (l->fails > 10 ? 10 : l->fails - 1);
		if (ms > l->srv->cfg.peer_redial_max_ms)
			ms = l->srv->cfg.peer_redial_max_ms;
		ms += (uint64_t)(rand() % (int)(ms / 4 + 1));
	}
	lws_sul_schedule(l->srv->ctx, 0, &l->sul_dial, dial, (lws_usec_t)(ms * 1000 + 1));
}

static void dial(lws_sorted_usec_list_t *sul)
{
	struct out_link *l = lws_container_of(sul, struct out_link, sul_dial);
	struct cs_server *srv = l->srv;
	if (l->wsi || l->stopping || l->self)
		return;
	struct lws_client_connect_info i;
	memset(&i, 0, sizeof i);
	i.context = srv->ctx;
	i.vhost = peers_of(srv)->vh;
	i.address = l->addr;
	i.port = l->port;
	i.path = CS_PEER_PATH;
	i.host = srv->cfg.peer_server_name && srv->cfg.peer_server_name[0]
	                 ? srv->cfg.peer_server_name
	                 : l->host;
	i.ssl_connection = LCCSCF_USE_SSL;
	i.local_protocol_name = peer_client_protocols[0].name;
	i.pwsi = &l->wsi;
	i.opaque_user_data = l;
	if (lws_client_connect_via_info(&i) == NULL) {
		l->fails++;
		schedule_dial(l);
	}
}

static void append_offer(struct cs_server *srv, struct lws *wsi, unsigned char **p,
                         unsigned char *end)
{
	struct st_ext_offer offer = {.version = ST_EXT_VERSION,
	                             .caps = srv->our_caps | ST_CAP_PEER,
	                             .window_bytes = (uint32_t)cs__tunnel_first_window(srv)};
	snprintf(offer.replica_id, sizeof offer.replica_id, "%s", srv->replica);
	char v[ST_EXT_HEADER_MAX_BYTES];
	ssize_t n = st_ext_offer_format(v, sizeof v, &offer);
	if (n > 0 && lws_add_http_header_by_name(wsi, (const unsigned char *)ST_EXT_HEADER ":",
	                                         (const unsigned char *)v, (int)n, p, end))
		st_warn("peers: the offer did not fit the upgrade request");
}

static struct in_link *edge_side_new(struct cs_server *srv, struct lws *wsi,
                                     const struct st_ext_offer *echo);
static void in_kick(struct in_link *l);

/* The 101 arrived: check the echo; on this link we are the edge role (PROTOCOL.md §7). */
static int out_established(struct out_link *l, struct lws *wsi)
{
	struct cs_server *srv = l->srv;
	char v[ST_EXT_HEADER_MAX_BYTES + 1];
	struct st_ext_offer ours = {.version = ST_EXT_VERSION, .caps = srv->our_caps | ST_CAP_PEER};
	struct st_ext_offer echo;
	int n = lws_hdr_custom_copy(wsi, v, sizeof v, ST_EXT_HEADER_LWS,
	                            (int)strlen(ST_EXT_HEADER_LWS));
	if (n <= 0 || st_ext_offer_parse(v, (size_t)n, &echo) < 0 ||
	    st_ext_check_echo(&ours, &echo) < 0 || !(echo.caps & ST_CAP_PEER) ||
	    !(echo.caps & ST_CAP_FLOW) || echo.replica_id[0] == '\0') {
		st_warn("peer %s:%d answered without the peer capability and a replica id: not a "
		        "cloudstream peer link",
		        l->host, l->port);
		return -1;
	}
	if (strcmp(echo.replica_id, srv->replica) == 0) {
		/* Ourselves (a static list names every replica): never by address. */
		l->self = true;
		st_info("peers: %s:%d is this replica (%s)", l->host, l->port, srv->replica);
		return -1;
	}
	struct in_link *e = edge_side_new(srv, wsi, &echo);
	if (e == NULL)
		return -1;
	l->e = e;
	l->fails = 0;
	snprintf(l->replica, sizeof l->replica, "%s", echo.replica_id);
	st_info("peers: link up to %s (%s:%d)", l->replica, l->host, l->port);
	in_kick(e);
	return 0;
}

static void out_closed(struct out_link *l, const char *why)
{
	l->wsi = NULL;
	if (l->stopping && l->source != SRC_STATIC) {
		if (l->e != NULL) {
			cs_peer_in_closed(l->e);
			l->e = NULL;
		}
		l->used = false; /* it left the membership: the slot is free again */
		return;
	}
	if (l->e != NULL) {
		cs_peer_in_closed(l->e);
		l->e = NULL;
		st_warn("peers: link to %s lost (%s)", l->replica, why);
		l->fails = 0; /* the first redial goes at once */
	} else if (!l->self) {
		l->fails++;
		if (l->fails == 1 || l->fails % 32 == 0)
			st_warn("peers: cannot reach %s:%d (%s); retrying", l->host, l->port, why);
	}
	schedule_dial(l);
}

static int cb_peer_client(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                          size_t len)
{
	(void)user;
	struct out_link *l = lws_get_opaque_user_data(wsi);
	if (l == NULL)
		return 0;
	switch (reason) {
	case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER: {
		unsigned char **pp = in;
		append_offer(l->srv, wsi, pp, *pp + len);
		return 0;
	}
	case LWS_CALLBACK_CLIENT_FILTER_PRE_ESTABLISH:
		return out_established(l, wsi);
	case LWS_CALLBACK_CLIENT_ESTABLISHED:
		if (l->e)
			in_kick(l->e);
		return 0;
	case LWS_CALLBACK_CLIENT_RECEIVE:
		if (l->e == NULL)
			return -1;
		return cs_peer_in_receive(l->e, in, len, lws_is_first_fragment(wsi),
		                          lws_is_final_fragment(wsi));
	case LWS_CALLBACK_CLIENT_RECEIVE_PONG:
		if (l->e)
			cs_peer_in_pong(l->e);
		return 0;
	case LWS_CALLBACK_CLIENT_WRITEABLE:
		return l->e ? cs_peer_in_writeable(l->e) : -1;
	case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
		out_closed(l, in ? (const char *)in : "connection error");
		return 0;
	case LWS_CALLBACK_CLIENT_CLOSED:
		out_closed(l, "closed");
		return 0;
	default:
		return 0;
	}
}

/* ---- forwarding: the dialling side -------------------------------------------------------- */

struct cs_tunnel *cs_peer_lookup(struct cs_server *srv, const char *node, size_t len,
                                 uint32_t *caps, const char **replica)
{
	struct cs_peers *p = peers_of(srv);
	struct cs_peerdir_hit h;
	if (p == NULL || p->dir == NULL || cs_peerdir_get(p->dir, node, len, &h) < 0)
		return NULL;
	struct cs_tunnel *t = p->slot_owner[h.slot];
	if (t == NULL || t->wsi == NULL)
		return NULL;
	*caps = h.caps;
	if (replica)
		*replica = h.replica;
	return t;
}

struct cs_tunnel *cs_peer_lookup_ip(struct cs_server *srv, const char *ip, size_t len,
                                    const char **node, uint32_t *caps)
{
	struct cs_peers *p = peers_of(srv);
	struct cs_peerdir_hit h;
	if (p == NULL || p->dir == NULL || cs_peerdir_get_by_ip(p->dir, ip, len, &h) < 0)
		return NULL;
	*node = h.node;
	return cs_peer_lookup(srv, h.node, strlen(h.node), caps, NULL);
}

struct wrap_args {
	const char *node;
	cs_connect_payload_cb inner;
	void *user;
};

/* The payload on a peer link: the node's name, then what the edge would get. */
static ssize_t wrapped_payload(uint64_t id, char *out, size_t cap, void *user)
{
	const struct wrap_args *a = user;
	size_t nl = strlen(a->node);
	size_t hl = st_uvarint_len(nl);
	if (cap < hl + nl)
		return -EMSGSIZE;
	st_uvarint_encode((uint8_t *)out, nl);
	memcpy(out + hl, a->node, nl);
	ssize_t n = a->inner(id, out + hl + nl, cap - hl - nl, a->user);
	return n < 0 ? n : n + (ssize_t)(hl + nl);
}

int cs_peer_stream_open(struct cs_tunnel *link, const char *node, struct cs_endpoint *ep,
                        uint64_t type, cs_connect_payload_cb payload, void *user, char *msg,
                        size_t msg_cap)
{
	struct wrap_args a = {.node = node, .inner = payload, .user = user};
	int rc = cs_stream_open(link, ep, type, wrapped_payload, &a, msg, msg_cap);
	if (rc == 0)
		peers_of(link->srv)->forwarded_out++;
	return rc;
}

/* ---- links we accepted: announcing our nodes ---------------------------------------------- */

static bool holds(const struct cs_tunnel *t)
{
	return t->registered && t->wsi != NULL && !t->peer;
}

static ssize_t encode_up(const struct cs_tunnel *t, uint8_t *out, size_t cap)
{
	struct cs_peerdir_entry e = {
	        .node = t->node, .node_len = strlen(t->node), .gen_ms = t->gen_ms, .caps = t->caps};
	for (const char *s = t->ips; s && *s && e.n_ips < CS_REGISTRY_MAX_IPS;) {
		const char *comma = strchr(s, ',');
		size_t len = comma ? (size_t)(comma - s) : strlen(s);
		e.ips[e.n_ips] = s;
		e.ip_lens[e.n_ips++] = len;
		s += len + (comma != NULL);
	}
	return cs_peerdir_entry_encode(out, cap, true, &e);
}

/* Queues as much of the full list as the link's peer queue takes. */
static void in_fill(struct in_link *l)
{
	uint8_t buf[ST_MAX_EXT_PAYLOAD_BYTES];
	if (l->sync_pending) {
		if (st_session_send_peer(l->sess, ST_MSG_SYNC, NULL, 0) < 0)
			return;
		l->sync_pending = false;
		l->in_sync = true;
		l->cursor = l->srv->tun.all;
	}
	while (l->in_sync) {
		size_t room = st_session_peer_space(l->sess);
		if (room == 0)
			return;
		size_t pos = 0;
		while (l->cursor) {
			if (!holds(l->cursor)) {
				l->cursor = l->cursor->all_next;
				continue;
			}
			ssize_t n = encode_up(l->cursor, buf + pos, room - pos);
			if (n < 0)
				break;
			pos += (size_t)n;
			l->cursor = l->cursor->all_next;
		}
		if (pos > 0) {
			if (st_session_send_peer(l->sess, ST_MSG_NODE_UP, buf, pos) < 0)
				return; /* cannot happen: sized by the room */
			continue;
		}
		if (l->cursor != NULL)
			return; /* one entry did not fit the room left: after the next write */
		if (st_session_send_peer(l->sess, ST_MSG_SYNC_END, NULL, 0) < 0)
			return;
		l->in_sync = false;
	}
}

static void in_kick(struct in_link *l)
{
	if (l->wsi && (l->sync_pending || l->in_sync || st_session_want_write(l->sess)))
		lws_callback_on_writable(l->wsi);
}

static void announce(struct cs_server *srv, struct cs_tunnel *t, bool up)
{
	struct cs_peers *p = peers_of(srv);
	if (p == NULL || t->peer || (!up && !t->announced))
		return;
	t->announced = up;
	uint8_t buf[ST_MAX_EXT_PAYLOAD_BYTES];
	for (struct in_link *l = p->in; l; l = l->next) {
		if (l->cursor == t)
			l->cursor = t->all_next; /* the list goes on without it */
		if (l->sync_pending)
			continue; /* the list to come says it */
		ssize_t n;
		if (up) {
			n = encode_up(t, buf, sizeof buf);
		} else {
			struct cs_peerdir_entry e = {
			        .node = t->node, .node_len = strlen(t->node), .gen_ms = t->gen_ms};
			n = cs_peerdir_entry_encode(buf, sizeof buf, false, &e);
		}
		if (n < 0 || st_session_send_peer(l->sess, up ? ST_MSG_NODE_UP : ST_MSG_NODE_DOWN,
		                                  buf, (size_t)n) < 0)
			l->sync_pending = true; /* the queue is full: a full list says it all */
		in_kick(l);
	}
}

void cs_peers_node_up(struct cs_server *srv, struct cs_tunnel *t)
{
	t->gen_ms = wall_ms();
	announce(srv, t, true);
}

void cs_peers_node_down(struct cs_server *srv, struct cs_tunnel *t)
{
	announce(srv, t, false);
}

/* ---- links we accepted: relaying their streams ------------------------------------------- */

static void ps_maybe_free(struct pstream *ps)
{
	if (ps->id != 0 || ps->ep.tun != NULL)
		return;
	cs_endpoint_cleanup(&ps->ep);
	if (ps->l) {
		if (ps->prev)
			ps->prev->next = ps->next;
		else
			ps->l->streams = ps->next;
		if (ps->next)
			ps->next->prev = ps->prev;
	}
	free(ps->down.p);
	free(ps->up.p);
	free(ps);
}

/* The link side ends (@code 0: REMOVE). */
static void ps_close_link(struct pstream *ps, uint64_t code, const char *reason)
{
	if (ps->id == 0 || ps->l == NULL)
		return;
	st_session_set_stream_user(ps->l->sess, ps->id, NULL);
	st_session_close(ps->l->sess, ps->id, code, reason);
	ps->id = 0;
	in_kick(ps->l);
}

/* edge → link: what waits goes into the link's session as far as it takes it. */
static void ps_flush_down(struct pstream *ps)
{
	if (ps->id == 0 || ps->l == NULL)
		return;
	if (ps->down.len > 0) {
		ssize_t w = st_session_write(ps->l->sess, ps->id, ps->down.p + ps->down.off,
		                             ps->down.len);
		if (w < 0) {
			cs_endpoint_dropped(&ps->ep, ps->down.len);
			pbuf_consume(&ps->down, ps->down.len);
			return;
		}
		pbuf_consume(&ps->down, (size_t)w);
		cs_endpoint_delivered(&ps->ep, (size_t)w);
		in_kick(ps->l);
	}
	if (ps->down.len == 0 && ps->down_end)
		ps_close_link(ps, ps->down_code, ps->down_reason);
}

/* link → edge: what waits goes into the node's tunnel as far as it takes it. */
static void ps_flush_up(struct pstream *ps)
{
	if (ps->up.len > 0 && ps->ep.tun) {
		size_t space = cs_stream_space(&ps->ep);
		size_t take = ps->up.len < space ? ps->up.len : space;
		ssize_t w = take ? cs_stream_write(&ps->ep, ps->up.p + ps->up.off, take) : 0;
		if (w > 0) {
			pbuf_consume(&ps->up, (size_t)w);
			if (ps->id && ps->l)
				st_session_consumed(ps->l->sess, ps->id, (size_t)w);
			if (ps->l)
				in_kick(ps->l);
		}
		if (ps->up.len > 0)
			cs_stream_wait_writable(&ps->ep);
	}
	if (ps->up.len == 0 && ps->up_half_close && ps->ep.tun) {
		ps->up_half_close = false;
		cs_stream_shutdown(&ps->ep);
	}
}

static int ep_data(struct cs_endpoint *ep, const uint8_t *p, size_t len)
{
	struct pstream *ps = (struct pstream *)ep;
	cs_endpoint_queued(ep, len);
	if (ps->id == 0) {
		cs_endpoint_dropped(ep, len);
		return 0;
	}
	if (ps->down.len == 0) {
		/* The common case: the link's session takes the bytes at once, no copy here. */
		ssize_t w = st_session_write(ps->l->sess, ps->id, p, len);
		if (w < 0) {
			cs_endpoint_dropped(ep, len);
			return 0; /* the link side is ending: its close follows */
		}
		cs_endpoint_delivered(ep, (size_t)w);
		in_kick(ps->l);
		p += w;
		len -= (size_t)w;
		if (len == 0)
			return 0;
	}
	if (ps->down.len + len > ST_MAX_STREAM_WINDOW_BYTES + ST_DEFAULT_STREAM_OUT_BYTES)
		return -EMSGSIZE; /* more than the edge's credit allows */
	return pbuf_append(&ps->down, p, len);
}

static void ep_end(struct cs_endpoint *ep, uint64_t code, const char *reason, size_t len)
{
	struct pstream *ps = (struct pstream *)ep;
	ps->down_end = true;
	ps->down_code = code;
	snprintf(ps->down_reason, sizeof ps->down_reason, "%.*s", (int)len, reason);
	pbuf_consume(&ps->up, ps->up.len);
	ps_flush_down(ps);
	if (ps->id != 0 && ps->l && ps->down.len > 0)
		return; /* closed once the rest is out (on_writable) */
	ps_maybe_free(ps);
}

static void ep_writable(struct cs_endpoint *ep)
{
	ps_flush_up((struct pstream *)ep);
}

static void ep_gone(struct cs_endpoint *ep, const char *why)
{
	struct pstream *ps = (struct pstream *)ep;
	cs_endpoint_dropped(ep, ps->down.len);
	pbuf_consume(&ps->down, ps->down.len);
	pbuf_consume(&ps->up, ps->up.len);
	ps_close_link(ps, ST_EXT_ERR_UNREACHABLE, why);
	ps_maybe_free(ps);
}

static void ep_cut(struct cs_endpoint *ep)
{
	ep_gone(ep, "the stream stalled the node's tunnel");
}

static void ep_info(const struct cs_endpoint *ep, struct cs_endpoint_info *out)
{
	const struct pstream *ps = (const struct pstream *)ep;
	out->kind = "peer";
	out->method = "";
	out->path = "";
	out->caller = ps->l ? ps->l->replica : "-";
	out->started_ms = ps->started_ms;
	out->to_edge = 0;
	out->to_client = 0;
}

static void ep_opened(struct cs_endpoint *ep)
{
	struct pstream *ps = (struct pstream *)ep;
	if (ps->id && ps->l) {
		st_session_opened(ps->l->sess, ps->id);
		in_kick(ps->l);
	}
}

static const struct cs_endpoint_ops pstream_ops = {
        .data = ep_data,
        .end = ep_end,
        .writable = ep_writable,
        .gone = ep_gone,
        .cut = ep_cut,
        .info = ep_info,
        .opened = ep_opened,
};

struct inner_args {
	uint64_t type;
	const uint8_t *p;
	size_t len;
};

/* The edge's payload with its MessID set to the tunnel's stream id. */
static ssize_t inner_payload(uint64_t id, char *out, size_t cap, void *user)
{
	const struct inner_args *a = user;
	if (a->type == ST_MSG_TCP_CONNECT) {
		if (a->len > cap)
			return -EMSGSIZE;
		memcpy(out, a->p, a->len);
		return (ssize_t)a->len;
	}
	struct st_connect_req req;
	int rc = st_connect_req_decode(a->p, a->len, &req);
	if (rc < 0)
		return rc;
	req.connect_id = id;
	ssize_t n = st_connect_req_encode(out, cap, &req);
	st_connect_req_cleanup(&req);
	return n;
}

static int in_on_open(struct st_session *s, uint64_t id, uint64_t type, const uint8_t *payload,
                      size_t len, void *user)
{
	(void)s;
	struct in_link *l = user;
	struct cs_server *srv = l->srv;
	uint64_t nl;
	ssize_t h = st_uvarint_decode(payload, len, &nl);
	if (h <= 0 || nl == 0 || nl > CS_NODE_NAME_MAX_BYTES || nl > len - (size_t)h)
		return -EBADMSG;
	const char *node = (const char *)payload + h;
	struct cs_tunnel *t = cs_registry_get(srv->reg, node, (size_t)nl);
	/* Draining: a tunnel still here (its edge is moving, or moved a moment ago) serves a
	 * request forwarded by a peer whose directory was behind (tunnel.c). */
	if (t == NULL)
		t = cs_tunnel_find_moved(srv, node, (size_t)nl);
	if (t == NULL)
		return -EHOSTUNREACH; /* ERROR unreachable: the directory was behind */
	struct pstream *ps = calloc(1, sizeof *ps);
	if (ps == NULL)
		return -ENOMEM;
	cs_endpoint_init(&ps->ep, &pstream_ops, srv);
	struct inner_args a = {
	        .type = type, .p = payload + (size_t)h + nl, .len = len - (size_t)h - (size_t)nl};
	char msg[256];
	int rc = cs_stream_open(t, &ps->ep, type, inner_payload, &a, msg, sizeof msg);
	if (rc < 0) {
		free(ps);
		return rc == -EAGAIN || rc == -ENOSPC ? -EAGAIN : rc;
	}
	ps->l = l;
	ps->id = id;
	ps->started_ms = cs_now_ms();
	ps->next = l->streams;
	if (l->streams)
		l->streams->prev = ps;
	l->streams = ps;
	st_session_set_stream_user(l->sess, id, ps);
	peers_of(srv)->forwarded_in++;
	return 0;
}

static int in_on_data(struct st_session *s, uint64_t id, const uint8_t *data, size_t len,
                      void *user)
{
	(void)user;
	struct pstream *ps = st_session_stream_user(s, id);
	if (ps == NULL) {
		st_session_consumed(s, id, len);
		return 0;
	}
	if (ps->ep.tun == NULL) {
		st_session_consumed(s, id, len); /* the edge ended: nobody reads them */
		return 0;
	}
	if (ps->up.len == 0) {
		/* The common case: the node's tunnel takes the bytes at once, no copy here. */
		size_t space = cs_stream_space(&ps->ep);
		size_t take = len < space ? len : space;
		ssize_t w = take ? cs_stream_write(&ps->ep, data, take) : 0;
		if (w > 0) {
			st_session_consumed(s, id, (size_t)w);
			in_kick(ps->l);
			data += w;
			len -= (size_t)w;
		}
		if (len == 0)
			return 0;
		cs_stream_wait_writable(&ps->ep);
	}
	/* Bounded by the window we granted on the link. */
	return pbuf_append(&ps->up, data, len);
}

static void in_on_half_close(struct st_session *s, uint64_t id, void *user)
{
	(void)user;
	struct pstream *ps = st_session_stream_user(s, id);
	if (ps == NULL)
		return;
	ps->up_half_close = true;
	ps_flush_up(ps);
}

static void in_on_close(struct st_session *s, uint64_t id, void *stream_user, uint64_t code,
                        const char *reason, size_t len, void *user)
{
	(void)s;
	(void)id;
	(void)user;
	struct pstream *ps = stream_user;
	if (ps == NULL)
		return;
	ps->id = 0; /* the session forgot it */
	char why[128];
	snprintf(why, sizeof why, "%.*s", (int)len, reason);
	ps_flush_up(ps);
	cs_endpoint_dropped(&ps->ep, ps->down.len);
	pbuf_consume(&ps->down, ps->down.len);
	cs_stream_close(&ps->ep, code, why);
	ps_maybe_free(ps);
}

static void in_on_writable(struct st_session *s, uint64_t id, void *user)
{
	(void)user;
	struct pstream *ps = st_session_stream_user(s, id);
	if (ps != NULL) {
		ps_flush_down(ps);
		ps_maybe_free(ps);
	}
}

static int in_on_peer(struct st_session *s, uint64_t type, const uint8_t *payload, size_t len,
                      void *user)
{
	(void)s;
	(void)type;
	(void)payload;
	(void)len;
	(void)user;
	return 0; /* the dialler's directory goes on the link it accepted from us */
}

static const struct st_session_callbacks in_cbs = {
        .on_open = in_on_open,
        .on_data = in_on_data,
        .on_half_close = in_on_half_close,
        .on_close = in_on_close,
        .on_writable = in_on_writable,
        .on_peer = in_on_peer,
};

bool cs_peer_is_peer_upgrade(struct lws *wsi)
{
	char uri[64];
	return lws_hdr_copy(wsi, uri, sizeof uri, WSI_TOKEN_GET_URI) > 0 &&
	       strcmp(uri, CS_PEER_PATH) == 0;
}

/* Admission of a peer link: 0, or the HTTP status to refuse with (and why). */
static int in_admit(struct lws *wsi, struct cs_server *srv, struct st_ext_offer *offer, char *why,
                    size_t cap)
{
	char cn[128];
	char v[ST_EXT_HEADER_MAX_BYTES + 1];
	if (srv->peers == NULL) {
		snprintf(why, cap, "this cloudstream has no peers (--peers)");
		return 404;
	}
	if (!chains_to_peer_ca(srv, wsi)) {
		snprintf(why, cap, "the client certificate is not from --peer-ca");
		return 403;
	}
	if (!peer_subject_ok(srv, wsi, cn, sizeof cn)) {
		snprintf(why, cap, "peer certificate CN \"%.60s\" is not --peer-subject", cn);
		return 403;
	}
	int n = lws_hdr_custom_copy(wsi, v, sizeof v, ST_EXT_HEADER_LWS,
	                            (int)strlen(ST_EXT_HEADER_LWS));
	if (n <= 0 || st_ext_offer_parse(v, (size_t)n, offer) < 0 || !(offer->caps & ST_CAP_PEER) ||
	    !(offer->caps & ST_CAP_FLOW) || offer->replica_id[0] == '\0') {
		snprintf(why, cap, "a peer link offers the peer capability and a replica id");
		return 400;
	}
	return 0;
}

static void agreed(struct cs_server *srv, const struct st_ext_offer *theirs,
                   struct st_ext_offer *out)
{
	struct st_ext_offer ours = {.version = ST_EXT_VERSION,
	                            .caps = srv->our_caps | ST_CAP_PEER,
	                            .window_bytes = (uint32_t)cs__tunnel_first_window(srv)};
	snprintf(ours.replica_id, sizeof ours.replica_id, "%s", srv->replica);
	st_ext_negotiate(&ours, theirs, out);
}

int cs_peer_in_confirm(struct lws *wsi, struct cs_server *srv)
{
	struct st_ext_offer offer;
	struct cs_admission a;
	memset(&a, 0, sizeof a);
	a.status = in_admit(wsi, srv, &offer, a.detail, sizeof a.detail);
	if (a.status == 0)
		return 0;
	a.reason = a.status == 403 ? CS_REFUSE_CERT : CS_REFUSE_PATH;
	return cs__tunnel_refuse(wsi, srv, &a);
}

int cs_peer_in_headers(struct lws *wsi, struct cs_server *srv, void *in)
{
	struct st_ext_offer offer, ag;
	char why[200];
	if (in_admit(wsi, srv, &offer, why, sizeof why) != 0)
		return 0;
	agreed(srv, &offer, &ag);
	char v[ST_EXT_HEADER_MAX_BYTES];
	ssize_t n = st_ext_offer_format(v, sizeof v, &ag);
	struct lws_process_html_args *args = in;
	if (n > 0 && lws_add_http_header_by_name(wsi, (const unsigned char *)ST_EXT_HEADER ":",
	                                         (const unsigned char *)v, (int)n,
	                                         (unsigned char **)&args->p,
	                                         (unsigned char *)args->p + args->max_len))
		return 1;
	return 0;
}

/* The edge-role side of a link we dialled: it announces our nodes and relays the streams the
 * other replica opens to our nodes' tunnels. NULL without memory. */
static struct in_link *edge_side_new(struct cs_server *srv, struct lws *wsi,
                                     const struct st_ext_offer *echo)
{
	struct cs_peers *p = peers_of(srv);
	struct in_link *l = calloc(1, sizeof *l);
	if (l == NULL)
		return NULL;
	struct st_session_config sc = {
	        .role = ST_SESSION_EDGE,
	        .caps = echo->caps,
	        .send_window_bytes =
	                echo->window_bytes ? echo->window_bytes : ST_DEFAULT_STREAM_WINDOW_BYTES,
	        .recv_window_bytes = cs__tunnel_first_window(srv),
	        .recv_window_max_bytes = srv->cfg.stream_window_bytes,
	        .process_budget = &srv->tun.budget,
	        .max_streams = srv->cfg.max_streams,
	        .stream_out_bytes = srv->cfg.stream_queue_bytes,
	        .max_data_payload = srv->cfg.data_payload_bytes,
	        .totals = &srv->m.sessions,
	};
	if (st_session_new(&l->sess, &sc, &in_cbs, l) < 0) {
		free(l);
		return NULL;
	}
	l->srv = srv;
	l->wsi = wsi;
	l->ordinal = ++srv->next_ordinal;
	snprintf(l->replica, sizeof l->replica, "%s", echo->replica_id);
	l->sync_pending = true;
	st_liveness_init(&l->live, cs_now_ms());
	st_session_hello(l->sess, srv->replica);
	l->next = p->in;
	if (p->in)
		p->in->prev = l;
	p->in = l;
	return l;
}

/* A link another replica dialled: the cloud-role side, a tunnel streams open on. */
int cs_peer_in_established(struct lws *wsi, struct cs_server *srv, struct cs_tunnel **slot)
{
	struct cs_peers *p = peers_of(srv);
	struct st_ext_offer offer, ag;
	char why[200];
	if (p == NULL || p->dir == NULL || in_admit(wsi, srv, &offer, why, sizeof why) != 0)
		return -1;
	if (strcmp(offer.replica_id, srv->replica) == 0)
		return -1; /* ourselves: the dialler saw our echo and stops dialling this address */
	agreed(srv, &offer, &ag);
	int pslot = cs_peerdir_peer_add(p->dir, offer.replica_id);
	if (pslot < 0) {
		st_err("peers: more than %d peers: %s refused", CS_PEERDIR_MAX_PEERS,
		       offer.replica_id);
		return -1;
	}
	struct cs_tunnel *t = calloc(1, sizeof *t);
	if (t == NULL)
		return -1;
	struct st_session_config sc = {
	        .role = ST_SESSION_CLOUD,
	        .caps = ag.caps,
	        .send_window_bytes =
	                offer.window_bytes ? offer.window_bytes : ST_DEFAULT_STREAM_WINDOW_BYTES,
	        .recv_window_bytes = cs__tunnel_first_window(srv),
	        .recv_window_max_bytes = srv->cfg.stream_window_bytes,
	        .process_budget = &srv->tun.budget,
	        .max_streams = srv->cfg.max_streams,
	        .stream_out_bytes = srv->cfg.stream_queue_bytes,
	        .max_data_payload = srv->cfg.data_payload_bytes,
	        .totals = &srv->m.sessions,
	};
	if (st_session_new(&t->sess, &sc, &cs__tunnel_session_cbs, t) < 0) {
		free(t);
		return -1;
	}
	t->srv = srv;
	t->wsi = wsi;
	t->peer = true;
	t->peer_slot = pslot;
	t->caps = sc.caps;
	t->ordinal = ++srv->next_ordinal;
	t->next_stream_id = 1;
	st_budget_init(&t->budget, 0);
	t->connected_ms = cs_now_ms();
	snprintf(t->node, sizeof t->node, "%s", offer.replica_id);
	st_liveness_init(&t->live, t->connected_ms);
	st_session_hello(t->sess, srv->replica);
	struct cs_tunnel *old = p->slot_owner[pslot];
	if (old != NULL) {
		/* The same replica again (it redialled before we saw the old link go): the new
		 * link's resync replaces what the old one said. */
		st_warn("peers: a new link from %s replaces the old one", t->node);
		cs__tunnel_end_streams(old,
		                       "the link to the replica holding the node was replaced");
		if (old->wsi)
			lws_set_timeout(old->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
	}
	p->slot_owner[pslot] = t;
	t->all_next = p->acc;
	if (p->acc)
		p->acc->all_prev = t;
	p->acc = t;
	*slot = t;
	char peer[64] = "";
	lws_get_peer_simple(wsi, peer, sizeof peer);
	st_info("peers: link from %s (%s) accepted", t->node, peer);
	cs__tunnel_kick(t);
	return 0;
}

/* tunnel.c's CLOSED for an accepted link: the replica's nodes are forgotten with it (unless a
 * newer link from it took over), its streams end. */
void cs__peer_link_closed(struct cs_tunnel *t)
{
	struct cs_server *srv = t->srv;
	struct cs_peers *p = peers_of(srv);
	t->wsi = NULL;
	cs__tunnel_end_streams(t, "the link to the replica holding the node was lost");
	if (t->all_prev)
		t->all_prev->all_next = t->all_next;
	else
		p->acc = t->all_next;
	if (t->all_next)
		t->all_next->all_prev = t->all_prev;
	if (p->slot_owner[t->peer_slot] == t) {
		p->slot_owner[t->peer_slot] = NULL;
		size_t gone = cs_peerdir_peer_drop(p->dir, t->peer_slot, &dir_cbs, srv);
		p->links_lost++;
		st_warn("peers: link from %s lost: its %zu nodes forgotten", t->node, gone);
	}
	st_session_free(t->sess);
	st_reasm_cleanup(&t->rx);
	free(t);
}

int cs_peer_in_receive(void *slot, const uint8_t *in, size_t len, bool first, bool final)
{
	struct in_link *l = slot;
	const uint8_t *msg;
	size_t msg_len;
	st_liveness_rx(&l->live, cs_now_ms());
	int rc = st_reasm_feed(&l->rx, in, len, first, final, &msg, &msg_len);
	if (rc == 0)
		return 0;
	if (rc > 0)
		rc = st_session_recv(l->sess, msg, msg_len);
	if (rc < 0) {
		st_warn("peers: link from %s dropped: %s", l->replica, st_strerror(rc));
		return -1;
	}
	in_kick(l);
	return 0;
}

void cs_peer_in_pong(void *slot)
{
	st_liveness_rx(&((struct in_link *)slot)->live, cs_now_ms());
}

int cs_peer_in_writeable(void *slot)
{
	struct in_link *l = slot;
	if (l->kill)
		return -1;
	if (l->want_ping) {
		static const char ping[] = "cloudstream-peer";
		l->want_ping = false;
		memcpy(l->srv->tx + LWS_PRE, ping, sizeof ping - 1);
		if (lws_write(l->wsi, l->srv->tx + LWS_PRE, sizeof ping - 1, LWS_WRITE_PING) < 0)
			return -1;
		in_kick(l);
		lws_callback_on_writable(l->wsi);
		return 0;
	}
	in_fill(l);
	ssize_t n = st_tunnel_write(&peers_of(l->srv)->writer, l->wsi, l->sess); /* masked */
	if (n < 0)
		return -1;
	in_kick(l);
	return 0;
}

void cs_peer_in_closed(void *slot)
{
	struct in_link *l = slot;
	struct cs_peers *p = peers_of(l->srv);
	l->wsi = NULL;
	while (l->streams) {
		struct pstream *ps = l->streams;
		l->streams = ps->next;
		ps->l = NULL;
		ps->id = 0;
		ps->prev = ps->next = NULL;
		cs_endpoint_dropped(&ps->ep, ps->down.len);
		pbuf_consume(&ps->down, ps->down.len);
		cs_stream_close(&ps->ep, ST_EXT_ERR_UNREACHABLE, "the peer link was lost");
		ps_maybe_free(ps);
	}
	if (l->prev)
		l->prev->next = l->next;
	else if (p)
		p->in = l->next;
	if (l->next)
		l->next->prev = l->prev;
	st_info("peers: link from %s closed", l->replica);
	st_session_free(l->sess);
	st_reasm_cleanup(&l->rx);
	free(l);
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
	for (const struct cs_tunnel *a = p->acc; a; a = a->all_next)
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

void cs__peers_free(struct cs_server *srv)
{
	peers_free(srv->peers);
	srv->peers = NULL;
}
