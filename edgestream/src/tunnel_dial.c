/*
 * edgestream/src/tunnel_dial.c — getting a tunnel its websocket (tunnel.h): the --cloud-url
 * entries in turn, the cloud's name resolved on a worker (no DNS on the loop), the connect with
 * mutual TLS, and when the tunnel or the dial ends: its streams end, and the redial is scheduled
 * (at once after a tunnel that was up, round the list, then backoff; soon while a move is under
 * way). Also the tunnel's allocation and freeing. Loop thread (the resolve runs on a worker).
 *
 * The seam: nothing here reads a message; this is the tunnel while it has no websocket, and
 * what happens when it loses one. The websocket itself is tunnel.c's, the move tunnel_move.c's.
 */
#include "tunnel.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <stream/err.h>
#include <stream/log.h>
#include <stream/tunnelread.h>
#include <stream/workq.h>

#include "relay.h"

/* ---- dialling -------------------------------------------------------------------------- */

/* The tunnel dials es->urls[url_i] next: its copy of where, for the log and the listings. */
static void use_url(struct es_tunnel *t)
{
	const struct es_cloud_url *u = &t->es->urls[t->url_i];
	memcpy(t->cloud_host, u->host, sizeof t->cloud_host);
	memcpy(t->cloud_path, u->path, sizeof t->cloud_path);
	memcpy(t->cloud_name, u->name, sizeof t->cloud_name);
	t->cloud_port = u->port;
}

/* Connect to @t->addr, the cloud's resolved address; the host name stays the name for SNI and
 * the certificate check (i.host), so nothing here resolves (lws 4.1.6 would, on the loop). */
static void connect_now(struct es_tunnel *t)
{
	struct edgestream *es = t->es;
	struct lws_client_connect_info i;
	memset(&i, 0, sizeof i);
	i.context = es->ctx;
	i.vhost = es->vh_client;
	i.address = t->addr;
	i.port = t->cloud_port;
	i.path = t->cloud_path;
	i.host = t->cloud_name; /* SNI and the certificate name check */
	i.origin = NULL;        /* the Go server refuses a foreign Origin */
	i.ssl_connection = LCCSCF_USE_SSL;
	i.local_protocol_name = es_tunnel_protocol.name;
	i.pwsi = &t->wsi; /* the tunnel outlives every wsi of it */
	i.opaque_user_data = t;
	st_dbg("dialling wss://%s:%d%s at %s", t->cloud_host, t->cloud_port, t->cloud_path,
	       t->addr);
	if (lws_client_connect_via_info(&i) == NULL && t->dialing) {
		char why[400];
		snprintf(why, sizeof why, "%.100s:%d: cannot dial %s", t->cloud_host, t->cloud_port,
		         t->addr);
		es__tunnel_down(t, -ECONNREFUSED, why);
	}
}

/* A worker resolves the cloud's host name (STYLE B7.2: no DNS on the loop). The job holds the
 * tunnel's pointer: tunnels outlive the worker pool (edgestream_free frees the pool first, its
 * cancelled completions only clear @resolving), and dial_gen drops a result a newer dial
 * replaced. */
struct resolve_job {
	struct es_tunnel *t;
	uint64_t gen;
	char host[ES_HOST_MAX];
	char addr[64];
	char err[160];
};

static void resolve_work(void *arg)
{
	struct resolve_job *j = arg;
	struct addrinfo hints, *res = NULL;
	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	int rc = getaddrinfo(j->host, NULL, &hints, &res);
	if (rc != 0) {
		snprintf(j->err, sizeof j->err, "cannot resolve %.80s: %.40s", j->host,
		         gai_strerror(rc));
		return;
	}
	/* An IPv4 address, else an IPv6 one ("localhost" answers ::1 first, and a cloud or its
	 * load balancer listening on IPv4 only is the common case). A name with several
	 * addresses (replicas by DNS, no balancer) is gone round: dial n takes the (n mod count)-th,
	 * so a dead replica's address is not dialled again and again. */
	for (int family = AF_INET; j->addr[0] == '\0' && family != 0;
	     family = family == AF_INET ? AF_INET6 : 0) {
		uint64_t count = 0;
		for (const struct addrinfo *a = res; a; a = a->ai_next)
			count += a->ai_family == family;
		uint64_t want = count ? j->gen % count : 0;
		for (const struct addrinfo *a = res; a && j->addr[0] == '\0'; a = a->ai_next) {
			const void *ip = NULL;
			if (a->ai_family != family || want-- > 0)
				continue;
			if (family == AF_INET)
				ip = &((const struct sockaddr_in *)(const void *)a->ai_addr)
				              ->sin_addr;
			else
				ip = &((const struct sockaddr_in6 *)(const void *)a->ai_addr)
				              ->sin6_addr;
			if (inet_ntop(family, ip, j->addr, sizeof j->addr) == NULL)
				j->addr[0] = '\0';
		}
	}
	freeaddrinfo(res);
	if (j->addr[0] == '\0')
		snprintf(j->err, sizeof j->err, "cannot resolve %.80s: no IPv4 or IPv6 address",
		         j->host);
}

static void resolve_done(void *arg, int status)
{
	struct resolve_job *j = arg;
	struct es_tunnel *t = j->t;
	bool current = t->resolving && t->dial_gen == j->gen;
	if (current)
		t->resolving = false;
	if (current && status == 0 && !t->es->stopped) {
		if (j->addr[0] == '\0') {
			char why[300];
			snprintf(why, sizeof why, "%.250s", j->err);
			es__tunnel_down(t, -EHOSTUNREACH, why);
		} else {
			memcpy(t->addr, j->addr, sizeof t->addr);
			connect_now(t);
		}
	} else if (current) {
		t->dialing = false; /* cancelled: the instance is going */
	}
	free(j);
}

static bool is_ip_literal(const char *host)
{
	unsigned char buf[sizeof(struct in6_addr)];
	return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

static void dial_now(lws_sorted_usec_list_t *sul)
{
	struct es_tunnel *t = lws_container_of(sul, struct es_tunnel, sul_dial);
	struct edgestream *es = t->es;
	if (es->stopped || t->wsi || t->dialing || t->spare)
		return;
	use_url(t);
	t->dialing = true;
	t->dial_gen++;
	t->close_reason[0] = '\0';
	t->close_err = 0;
	es->m.dials_total++;
	if (is_ip_literal(t->cloud_host)) {
		snprintf(t->addr, sizeof t->addr, "%.63s", t->cloud_host);
		connect_now(t);
		return;
	}
	struct resolve_job *j = calloc(1, sizeof *j);
	int rc = j ? 0 : -ENOMEM;
	if (j) {
		j->t = t;
		j->gen = t->dial_gen;
		memcpy(j->host, t->cloud_host, sizeof j->host);
		t->resolving = true;
		rc = st_workq_submit(es->wq, resolve_work, resolve_done, j);
	}
	if (rc < 0) {
		free(j);
		t->resolving = false;
		char why[300];
		snprintf(why, sizeof why, "%.100s: cannot resolve now (%s)", t->cloud_host,
		         rc == -EAGAIN ? "worker pool busy" : st_strerror(rc));
		es__tunnel_down(t, rc, why);
	}
}

void es_tunnel_schedule_dial(struct es_tunnel *t, uint64_t delay_ms)
{
	if (t->es->stopped)
		return;
	lws_sul_schedule(t->es->ctx, 0, &t->sul_dial, dial_now,
	                 (lws_usec_t)delay_ms * LWS_US_PER_MS);
}

/* Every stream of @t ends without a word (the tunnel is gone, or the instance goes). */
static void end_streams(struct es_tunnel *t)
{
	while (t->streams)
		es_stream_tunnel_gone(t->streams);
	t->blocking_streams = 0;
}

/* While a move is under way (another tunnel of ours retires and is up), a refused dial of the
 * new tunnel is tried again after this long, not after the backoff. */
#define ES_MOVE_RETRY_MS 100u
#define ES_MOVE_RETRIES  10u

static bool moving(const struct es_tunnel *t)
{
	for (const struct es_tunnel *o = t->es->tunnels; o; o = o->next)
		if (o != t && o->retiring && o->connected)
			return true;
	return false;
}

/* The tunnel or the dial ended: streams end, a redial is scheduled. */
void es__tunnel_down(struct es_tunnel *t, int err, const char *why)
{
	struct edgestream *es = t->es;
	bool was_up = t->connected;
	t->wsi = NULL;
	t->connected = false;
	t->dialing = false;
	memset(&t->ctl, 0, sizeof t->ctl); /* nothing is owed on a connection that is gone */
	st_tunnel_reader_free(t->reader);  /* the socket is going: no more reading */
	t->reader = NULL;
	lws_sul_cancel(&t->sul_ping);
	lws_sul_cancel(&t->sul_stable);
	end_streams(t);
	st_session_free(t->sess);
	t->sess = NULL;
	t->caps = 0;
	st_reasm_cleanup(&t->rx);
	if (t->close_reason[0]) {
		why = t->close_reason;
		err = t->close_err ? t->close_err : err;
	}
	lws_sul_cancel(&t->sul_retire);
	if (t->retiring) {
		/* Moved: the new tunnel carries the node; this one never redials. */
		t->retiring = false;
		t->spare = true;
		st_info("the retired tunnel to %s:%d closed after %llu s: %s", t->cloud_host,
		        t->cloud_port, (unsigned long long)((st_now_ms() - t->connected_ms) / 1000),
		        why);
		es->m.tunnels_retired++;
		es_publish_stats(es);
		if (es->stopped)
			lws_cancel_service(es->ctx);
		return;
	}
	/* Each dial after this one goes to the next --cloud-url entry. After a tunnel that was up
	 * the first redial is at once (failover to another replica is not a backoff window), unless
	 * it flapped (backoff.h); failed dials go round the list at once, and back off once a
	 * whole round failed. */
	uint64_t retry = 0;
	if (es->n_urls > 0)
		t->url_i = (t->url_i + 1) % es->n_urls;
	if (es->stopped) {
		retry = 0;
	} else if (was_up) {
		t->round_fails = 0;
		retry = es_backoff_after_up(&t->backoff, st_now_ms() - t->connected_ms);
	} else if (moving(t) && ++t->move_fails <= ES_MOVE_RETRIES) {
		/* The new tunnel of a move was refused (the balancer sent it back to the draining
		 * replica, which refuses upgrades): the old one still serves, try again soon; then
		 * as any failed dial (a balancer slow to see /readyz fail, a lone replica). */
		retry = ES_MOVE_RETRY_MS;
	} else if (++t->round_fails >= es->n_urls) {
		t->round_fails = 0;
		retry = es_backoff_next(&t->backoff);
	}
	if (was_up) {
		es->m.disconnects_total++;
		st_warn("tunnel down after %llu s: %s%s",
		        (unsigned long long)((st_now_ms() - t->connected_ms) / 1000), why,
		        es->stopped ? "" : "; redialling");
	}
	if (!es->stopped)
		st_log(was_up ? ST_LOG_INFO : ST_LOG_WARN, NULL, 0, "%s%s; next dial in %llu ms",
		       was_up ? "" : "cannot reach the cloud: ", was_up ? "tunnel down" : why,
		       (unsigned long long)retry);
	es_publish_stats(es);
	if (es->cb.disconnected)
		es->cb.disconnected(es, err, why, retry, es->user);
	es_tunnel_schedule_dial(t, retry);
	if (es->stopped)
		lws_cancel_service(es->ctx); /* the loop may have nothing else to wake it */
}

/* ---- life cycle ------------------------------------------------------------------------ */

int es_tunnel_new(struct es_tunnel **out, struct edgestream *es, uint64_t seed)
{
	struct es_tunnel *t = calloc(1, sizeof *t);
	if (t == NULL)
		return -ENOMEM;
	t->es = es;
	t->url_i = 0;
	if (es->n_urls > 0)
		use_url(t);
	es_backoff_init(&t->backoff, es->cfg.backoff_initial_ms, es->cfg.backoff_max_ms, seed);
	t->next = es->tunnels;
	es->tunnels = t;
	*out = t;
	return 0;
}

void es_tunnel_stop(struct es_tunnel *t)
{
	lws_sul_cancel(&t->sul_dial);
	lws_sul_cancel(&t->sul_retire);
	if (t->wsi)
		es_tunnel_close(t, -ECANCELED, "stopping");
}

void es_tunnel_end_streams(struct es_tunnel *t)
{
	end_streams(t);
}

void es_tunnel_free(struct es_tunnel *t)
{
	if (t == NULL)
		return;
	end_streams(t);
	st_tunnel_reader_free(t->reader);
	st_session_free(t->sess);
	st_reasm_cleanup(&t->rx);
	for (struct es_tunnel **pp = &t->es->tunnels; *pp; pp = &(*pp)->next)
		if (*pp == t) {
			*pp = t->next;
			break;
		}
	free(t);
}
