/*
 * edgestream/src/tunnel.c — a tunnel to the cloud (tunnel.h), lws glue: dial with mutual TLS
 * and the cloud's certificate verified, KubeEdge's upgrade headers plus our extension offer, the
 * session (edge role), pings and dead-peer detection, redial with backoff and jitter, and the
 * streams' access to the session. Loop thread only.
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
#include <stream/ext.h>
#include <stream/log.h>
#include <stream/loop.h>
#include <stream/workq.h>

#include "relay.h"

/* ---- session callbacks: the cloud's stream events go to the stream objects -------------- */

static int on_open(struct st_session *s, uint64_t id, uint64_t type, const uint8_t *payload,
                   size_t len, void *user)
{
	(void)s;
	return es_stream_open(user, id, type, payload, len);
}

static int on_data(struct st_session *s, uint64_t id, const uint8_t *data, size_t len, void *user)
{
	(void)user;
	struct es_stream *st = st_session_stream_user(s, id);
	return st ? es_stream_on_data(st, data, len) : 0;
}

static void on_half_close(struct st_session *s, uint64_t id, void *user)
{
	(void)user;
	struct es_stream *st = st_session_stream_user(s, id);
	if (st)
		es_stream_on_half_close(st);
}

static void on_close(struct st_session *s, uint64_t id, void *stream_user, uint64_t code,
                     const char *reason, size_t reason_len, void *user)
{
	(void)s;
	(void)id;
	(void)user;
	if (stream_user)
		es_stream_on_cloud_close(stream_user, code, reason, reason_len);
}

static void on_writable(struct st_session *s, uint64_t id, void *user)
{
	(void)user;
	struct es_stream *st = st_session_stream_user(s, id);
	if (st)
		es_stream_on_writable(st);
}

static void on_tunnel_close(struct st_session *s, const char *text, size_t len, void *user)
{
	(void)s;
	char why[300];
	snprintf(why, sizeof why, "the cloud asked to redial: %.*s", (int)(len > 200 ? 200 : len),
	         text);
	es_tunnel_close(user, -ECONNRESET, why);
}

static void on_reconnect(struct st_session *s, uint64_t drain_ms, void *user);

static const struct st_session_callbacks session_cbs = {
        .on_open = on_open,
        .on_data = on_data,
        .on_half_close = on_half_close,
        .on_close = on_close,
        .on_writable = on_writable,
        .on_tunnel_close = on_tunnel_close,
        .on_reconnect = on_reconnect,
};

/* ---- the streams' side ----------------------------------------------------------------- */

void es_tunnel_kick(struct es_tunnel *t)
{
	if (t->wsi && t->connected && (t->want_ping || (t->sess && st_session_want_write(t->sess))))
		lws_callback_on_writable(t->wsi);
}

uint32_t es_tunnel_caps(const struct es_tunnel *t)
{
	return t->sess ? t->caps : 0;
}

ssize_t es_tunnel_write(struct es_tunnel *t, uint64_t id, const uint8_t *p, size_t n)
{
	if (t->sess == NULL)
		return -ENOTCONN;
	ssize_t w = st_session_write(t->sess, id, p, n);
	es_tunnel_kick(t);
	return w;
}

void es_tunnel_end_stream(struct es_tunnel *t, uint64_t id, uint64_t code, const char *reason)
{
	if (t->sess == NULL)
		return;
	st_session_close(t->sess, id, code, reason);
	es_tunnel_kick(t);
}

void es_tunnel_consumed(struct es_tunnel *t, uint64_t id, size_t n)
{
	if (t->sess == NULL)
		return;
	st_session_consumed(t->sess, id, n);
	es_tunnel_kick(t);
}

void es_tunnel_opened(struct es_tunnel *t, uint64_t id)
{
	if (t->sess == NULL || !(t->caps & ST_CAP_OPENED))
		return;
	st_session_opened(t->sess, id);
	es_tunnel_kick(t);
}

void es_tunnel_attach(struct es_tunnel *t, uint64_t id, struct es_stream *st)
{
	if (t->sess)
		st_session_set_stream_user(t->sess, id, st);
}

void es_tunnel_detach(struct es_tunnel *t, uint64_t id, const struct es_stream *st)
{
	if (t->sess && st_session_stream_user(t->sess, id) == st)
		st_session_set_stream_user(t->sess, id, NULL);
}

/* Reading follows the blocking streams: paused while any is over its mark. */
static void update_rx(struct es_tunnel *t)
{
	struct edgestream *es = t->es;
	bool pause = t->blocking_streams > 0;
	if (t->wsi == NULL || !t->connected || pause == t->rx_paused)
		return;
	t->rx_paused = pause;
	st_liveness_pause(&t->live, pause, es_now_ms());
	if (pause) {
		es->m.tunnel_pauses++;
		st_log(es->m.tunnel_pauses == 1 ? ST_LOG_WARN : ST_LOG_DEBUG, es->node, 0,
		       "tunnel reading paused: a backend is slower than the cloud and the base "
		       "protocol has no per-stream flow control (counted in "
		       "edgestream_tunnel_pauses_total)");
	}
	lws_rx_flow_control(t->wsi, pause ? 0 : 1);
}

void es_tunnel_block(struct es_tunnel *t, bool on)
{
	if (on)
		t->blocking_streams++;
	else if (t->blocking_streams > 0)
		t->blocking_streams--;
	update_rx(t);
}

void es_tunnel_close(struct es_tunnel *t, int err, const char *why)
{
	if (t->wsi == NULL)
		return;
	if (t->close_reason[0] == '\0') {
		snprintf(t->close_reason, sizeof t->close_reason, "%.250s", why);
		t->close_err = err;
	}
	lws_set_timeout(t->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
}

/* ---- dialling -------------------------------------------------------------------------- */

static void down(struct es_tunnel *t, int err, const char *why);

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
		down(t, -ECONNREFUSED, why);
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
			down(t, -EHOSTUNREACH, why);
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
		down(t, rc, why);
	}
}

void es_tunnel_schedule_dial(struct es_tunnel *t, uint64_t delay_ms)
{
	if (t->es->stopped)
		return;
	lws_sul_schedule(t->es->ctx, 0, &t->sul_dial, dial_now,
	                 (lws_usec_t)delay_ms * LWS_US_PER_MS);
}

static void on_stable(lws_sorted_usec_list_t *sul)
{
	struct es_tunnel *t = lws_container_of(sul, struct es_tunnel, sul_stable);
	es_backoff_reset(&t->backoff);
}

static void on_ping_timer(lws_sorted_usec_list_t *sul)
{
	struct es_tunnel *t = lws_container_of(sul, struct es_tunnel, sul_ping);
	struct edgestream *es = t->es;
	if (t->wsi == NULL || !t->connected)
		return;
	uint64_t now = es_now_ms();
	switch (st_liveness_check(&t->live, now, es->cfg.ping_interval_ms,
	                          es->cfg.dead_peer_timeout_ms)) {
	case ST_LIVENESS_DEAD: {
		char why[128];
		snprintf(why, sizeof why, "nothing from the cloud for %llu ms (dead peer)",
		         (unsigned long long)(now - t->live.last_rx_ms));
		es_tunnel_close(t, -ETIMEDOUT, why);
		return;
	}
	case ST_LIVENESS_PING:
		t->want_ping = true;
		es_tunnel_kick(t);
		break;
	case ST_LIVENESS_OK:
		break;
	}
	lws_sul_schedule(es->ctx, 0, &t->sul_ping, on_ping_timer,
	                 (lws_usec_t)st_liveness_sweep_interval_ms(es->cfg.ping_interval_ms) *
	                         LWS_US_PER_MS);
}

/* ---- moving to another replica (RECONNECT, PROTOCOL.md §5.6) --------------------------- */

/* A retiring tunnel closes once another tunnel is up and it carried no stream for this long. */
#define ES_RETIRE_IDLE_MS 1000u

/* A retiring tunnel closes once another tunnel is up and it carries no stream. */
static void on_retire_check(lws_sorted_usec_list_t *sul)
{
	struct es_tunnel *t = lws_container_of(sul, struct es_tunnel, sul_retire);
	if (!t->retiring || t->wsi == NULL || !t->connected || t->streams != NULL)
		return;
	for (const struct es_tunnel *o = t->es->tunnels; o; o = o->next)
		if (o != t && o->connected && !o->retiring) {
			es_tunnel_close(t, 0, "moved to a new tunnel, no stream left on this one");
			return;
		}
}

void es_tunnel_stream_ended(struct es_tunnel *t)
{
	/* From a timer: a stream ends inside session and socket callbacks. Not at once: a cloud
	 * replica with peers closes the old tunnel itself once its peers know of the new one
	 * (it alone knows when no request is on its way to it); this is for one without. */
	if (t->retiring)
		lws_sul_schedule(t->es->ctx, 0, &t->sul_retire, on_retire_check,
		                 (lws_usec_t)ES_RETIRE_IDLE_MS * LWS_US_PER_MS);
}

static void on_reconnect(struct st_session *s, uint64_t drain_ms, void *user)
{
	(void)s;
	struct es_tunnel *t = user;
	struct edgestream *es = t->es;
	if (t->retiring || es->stopped)
		return;
	struct es_tunnel *n;
	for (n = es->tunnels; n; n = n->next)
		if (n->spare)
			break;
	if (n == NULL && es_tunnel_new(&n, es, t->backoff.rng ^ es_now_ms()) < 0) {
		st_warn("the cloud asked to move to another replica; no memory for a second "
		        "tunnel: staying until it closes");
		return;
	}
	n->spare = false;
	n->round_fails = 0;
	n->move_fails = 0;
	es_backoff_reset(&n->backoff);
	n->url_i = es->n_urls > 0 ? (t->url_i + 1) % es->n_urls : 0;
	t->retiring = true;
	es->m.reconnects_asked++;
	size_t open = 0;
	for (const struct es_stream *st = t->streams; st; st = st->next)
		open++;
	st_info("cloud replica %s is draining (for up to %llu ms): dialling a new tunnel; this one "
	        "closes once that one is up and its %zu streams ended",
	        t->replica[0] ? t->replica : "?", (unsigned long long)drain_ms, open);
	es_tunnel_schedule_dial(n, 0);
}

/* ---- life cycle ------------------------------------------------------------------------ */

/* The ready file, once the first tunnel is up. */
static int write_ready(struct edgestream *es)
{
	if (es->ready_written || es->cfg.ready_file == NULL || es->cfg.ready_file[0] == '\0')
		return 0;
	char buf[400];
	int n = snprintf(buf, sizeof buf, "admin=%d\nnode=%s\n",
	                 es->vh_admin ? st_loop_listen_port(es->vh_admin) : 0, es->node);
	int rc = st_loop_write_ready_file(es->cfg.ready_file, buf, (size_t)n);
	if (rc < 0)
		st_err("--ready-file %s: %s", es->cfg.ready_file, strerror(-rc));
	es->ready_written = rc == 0;
	return rc;
}

/* The credit window each stream starts with: the budget sizes it from there. */
static int established(struct es_tunnel *t, const struct st_ext_offer *agreed)
{
	struct edgestream *es = t->es;
	struct st_session_config sc = {
	        .role = ST_SESSION_EDGE,
	        .caps = agreed->version ? agreed->caps : 0,
	        .send_window_bytes = agreed->window_bytes ? agreed->window_bytes
	                                                  : ST_DEFAULT_STREAM_WINDOW_BYTES,
	        .recv_window_bytes = es__tunnel_first_window(es),
	        .recv_window_max_bytes = es->cfg.stream_window_bytes,
	        .process_budget = &es->budget,
	        .max_streams = es->cfg.max_streams,
	        .stream_out_bytes = es->cfg.stream_queue_bytes,
	        .max_data_payload = es->cfg.data_payload_bytes,
	        .totals = &es->session_totals,
	};
	if (st_session_new(&t->sess, &sc, &session_cbs, t) < 0)
		return -ENOMEM;
	t->caps = sc.caps;
	t->extended = sc.caps != 0;
	t->connected = true;
	t->dialing = false;
	t->round_fails = 0;
	t->move_fails = 0;
	t->rx_paused = false;
	t->connected_ms = es_now_ms();
	t->bytes_in = t->bytes_out = 0;
	snprintf(t->replica, sizeof t->replica, "%s", agreed->replica_id);
	st_liveness_init(&t->live, t->connected_ms);
	es->m.connects_total++;
	if (t->caps)
		st_session_hello(t->sess, es->node);
	st_info("tunnel up to %s:%d (%s) as node %s (%s protocol%s%s)", t->cloud_host,
	        t->cloud_port, t->addr, es->node, t->extended ? "extended" : "base",
	        agreed->replica_id[0] ? ", cloud replica " : "", agreed->replica_id);
	/* Make before break: a tunnel this one replaces closes once it carries no stream. */
	for (struct es_tunnel *o = es->tunnels; o; o = o->next)
		if (o != t && o->retiring)
			es_tunnel_stream_ended(o);
	lws_sul_schedule(es->ctx, 0, &t->sul_ping, on_ping_timer,
	                 (lws_usec_t)st_liveness_sweep_interval_ms(es->cfg.ping_interval_ms) *
	                         LWS_US_PER_MS);
	lws_sul_schedule(es->ctx, 0, &t->sul_stable, on_stable,
	                 (lws_usec_t)es->cfg.backoff_reset_ms * LWS_US_PER_MS);
	write_ready(es);
	es_publish_stats(es);
	if (es->cb.connected)
		es->cb.connected(es, es->node, t->extended, es->user);
	es_tunnel_kick(t);
	return 0;
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
static void down(struct es_tunnel *t, int err, const char *why)
{
	struct edgestream *es = t->es;
	bool was_up = t->connected;
	t->wsi = NULL;
	t->connected = false;
	t->dialing = false;
	t->want_ping = false;
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
		        t->cloud_port, (unsigned long long)((es_now_ms() - t->connected_ms) / 1000),
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
		retry = es_backoff_after_up(&t->backoff, es_now_ms() - t->connected_ms);
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
		        (unsigned long long)((es_now_ms() - t->connected_ms) / 1000), why,
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

void es_tunnel_note_refusal(struct es_tunnel *t, const char *why)
{
	if (t->refusal_logged)
		return;
	/* Said once per tunnel, then only the counters move. */
	st_log(ST_LOG_WARN, t->es->node, 0,
	       "a stream from the cloud refused: %s (counted in "
	       "edgestream_streams_refused_by_session_total{reason}; further refusals are only "
	       "counted)",
	       why);
	t->refusal_logged = true;
}

static int tunnel_message(struct es_tunnel *t, const uint8_t *msg, size_t len)
{
	const struct st_session_totals *tot = &t->es->session_totals;
	uint64_t refused_limit = tot->refused_limit, refused_budget = tot->refused_budget;
	int rc = st_session_recv(t->sess, msg, len);
	/* The session refused a stream itself (before any backend). */
	if (tot->refused_budget != refused_budget)
		es_tunnel_note_refusal(t, "its first window does not fit --process-buffer-bytes");
	else if (tot->refused_limit != refused_limit)
		es_tunnel_note_refusal(t, "--max-streams streams are open");
	if (rc < 0) {
		char why[128];
		snprintf(why, sizeof why, "%s from the cloud", st_strerror(rc));
		es_tunnel_close(t, rc, why);
		return -1;
	}
	es_tunnel_kick(t);
	return 0;
}

static int tunnel_receive(struct es_tunnel *t, const uint8_t *in, size_t len, bool first,
                          bool final)
{
	const uint8_t *msg;
	size_t msg_len;
	int rc = st_reasm_feed(&t->rx, in, len, first, final, &msg, &msg_len);
	if (rc == 0)
		return 0;
	if (rc < 0) {
		es_tunnel_close(t, rc,
		                rc == -EMSGSIZE ? "a message over 1 MiB from the cloud"
		                                : "out of memory");
		return -1;
	}
	return tunnel_message(t, msg, msg_len);
}

static int tunnel_writeable(struct es_tunnel *t)
{
	uint8_t *tx = t->es->tx + LWS_PRE;
	if (t->want_ping) {
		t->want_ping = false;
		static const char ping[] = "ping you"; /* what KubeEdge's edge sends */
		memcpy(tx, ping, sizeof ping - 1);
		if (lws_write(t->wsi, tx, sizeof ping - 1, LWS_WRITE_PING) < 0)
			return -1;
		es_tunnel_kick(t);
		return 0;
	}
	ssize_t n = st_tunnel_write(&t->es->tunnel_writer, t->wsi, t->sess);
	if (n == -EIO)
		return -1;
	if (n < 0) {
		es_tunnel_close(t, (int)n, "cannot pack a message");
		return -1;
	}
	t->bytes_out += (uint64_t)n;
	es_tunnel_kick(t);
	return 0;
}

static int cb_tunnel(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                     size_t len)
{
	if (reason == LWS_CALLBACK_OPENSSL_LOAD_EXTRA_CLIENT_VERIFY_CERTS) {
		/* @user is the client vhost's SSL_CTX, shared by every tunnel of the instance:
		 * keep it to load rotated files into (reload.c). */
		struct edgestream *es = lws_context_user(lws_get_context(wsi));
		if (es && user)
			es->tunnel_ctx = user;
		return 0;
	}
	struct es_tunnel *t = lws_get_opaque_user_data(wsi);
	if (t == NULL)
		return 0;
	switch (reason) {
	case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER: {
		unsigned char **p = in;
		es__tunnel_append_headers(t->es, wsi, p, *p + len);
		return 0;
	}
	case LWS_CALLBACK_CLIENT_FILTER_PRE_ESTABLISH: {
		struct st_ext_offer agreed;
		if (es__tunnel_read_echo(t, wsi, &agreed) < 0) {
			t->close_err = -EPROTO;
			return -1;
		}
		t->wsi = wsi;
		return established(t, &agreed) < 0 ? -1 : 0;
	}
	case LWS_CALLBACK_CLIENT_ESTABLISHED:
		es_tunnel_kick(t);
		return 0;
	case LWS_CALLBACK_CLIENT_CONNECTION_ERROR: {
		char why[400];
		es__tunnel_note_answer(t, wsi);
		snprintf(why, sizeof why, "%.100s:%d: %.280s", t->cloud_host, t->cloud_port,
		         t->close_reason[0] ? t->close_reason
		         : in               ? (const char *)in
		                            : "connection failed");
		t->close_reason[0] = '\0';
		down(t, t->close_err ? t->close_err : -ECONNREFUSED, why);
		return 0;
	}
	case LWS_CALLBACK_CLIENT_RECEIVE:
		st_liveness_rx(&t->live, es_now_ms());
		if (t->sess == NULL)
			return -1;
		t->bytes_in += len;
		return tunnel_receive(t, in, len, lws_is_first_fragment(wsi),
		                      lws_is_final_fragment(wsi));
	case LWS_CALLBACK_CLIENT_RECEIVE_PONG:
		st_liveness_rx(&t->live, es_now_ms());
		return 0;
	case LWS_CALLBACK_CLIENT_WRITEABLE:
		return t->sess ? tunnel_writeable(t) : 0;
	case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
		if (t->close_reason[0] == '\0')
			snprintf(t->close_reason, sizeof t->close_reason,
			         "the cloud closed the websocket");
		return 0;
	case LWS_CALLBACK_CLIENT_CLOSED:
		down(t, -ECONNRESET, "connection closed");
		return 0;
	default:
		return 0;
	}
}

const struct lws_protocols es_tunnel_protocol = {
        .name = "es-tunnel",
        .callback = cb_tunnel,
        .rx_buffer_size = 16384,
        .tx_packet_size = ST_TUNNEL_BATCH_BYTES, /* one batch per write (stream/tunnelwrite.h) */
};

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
	st_session_free(t->sess);
	st_reasm_cleanup(&t->rx);
	for (struct es_tunnel **pp = &t->es->tunnels; *pp; pp = &(*pp)->next)
		if (*pp == t) {
			*pp = t->next;
			break;
		}
	free(t);
}
