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

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stream/err.h>
#include <stream/log.h>
#include <stream/tunnelread.h>

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

/* The cloud's host name resolved (or not) on a worker while the dial waited (resolve.h: one
 * cache per --cloud-url entry, shared with the kubelet's name). Tunnels outlive the worker
 * pool (edgestream_free frees the pool first: its cancelled completions only end the dial). */
static void on_resolved(struct es_name_wait *w, int rc, const char *addr, uint32_t gen,
                        const char *why)
{
	struct es_tunnel *t = lws_container_of(w, struct es_tunnel, name_wait);
	if (rc == -ECANCELED || t->es->stopped) {
		t->dialing = false; /* cancelled: the instance is going */
		return;
	}
	if (rc < 0) {
		char reason[300];
		snprintf(reason, sizeof reason, "%.250s", why);
		es__tunnel_down(t, -EHOSTUNREACH, reason);
		return;
	}
	snprintf(t->addr, sizeof t->addr, "%s", addr);
	t->name_gen = gen;
	t->name_dialled = true;
	connect_now(t);
}

static void dial_now(lws_sorted_usec_list_t *sul)
{
	struct es_tunnel *t = lws_container_of(sul, struct es_tunnel, sul_dial);
	struct edgestream *es = t->es;
	if (es->stopped || t->wsi || t->dialing || t->spare)
		return;
	use_url(t);
	t->dialing = true;
	t->close_reason[0] = '\0';
	t->close_err = 0;
	es->m.dials_total++;
	/* The address: an IP literal as it is, a name from its cache or once a worker resolved
	 * it (on_resolved), never through lws. */
	const char *addr = NULL, *why = NULL;
	uint32_t gen = 0;
	int rc = es_name_get(&es->cloud_dns[t->url_i], &t->name_wait, on_resolved, &addr, &gen,
	                     &why);
	if (rc == 1)
		return;
	if (rc == 0) {
		snprintf(t->addr, sizeof t->addr, "%s", addr);
		t->name_gen = gen;
		t->name_dialled = true;
		connect_now(t);
		return;
	}
	char reason[300];
	snprintf(reason, sizeof reason, "%.250s", why);
	es__tunnel_down(t, rc, reason);
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
	/* A dial to the cloud's address failed, or a tunnel on it dropped: the next dial takes the
	 * name's next address, or resolves it again (resolve.h), not the same one again. */
	es_name_cancel(&t->name_wait);
	if (t->name_dialled && t->url_i < es->n_urls)
		es_name_dial_failed(&es->cloud_dns[t->url_i], t->name_gen);
	t->name_dialled = false;
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
	if (es_name_waiting(&t->name_wait)) {
		es_name_cancel(&t->name_wait);
		t->dialing = false;
	}
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
	es_name_cancel(&t->name_wait);
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
