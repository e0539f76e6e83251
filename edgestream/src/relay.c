/*
 * edgestream/src/relay.c — a stream between a tunnel and its backend (relay.h): routing to a
 * backend, the queues both ways with their bounds and flow control, the base protocol's
 * tunnel pause and stall cut, and every way a stream ends. Loop thread only.
 */
#include "relay.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stream/err.h>
#include <stream/ext.h>
#include <stream/frame.h>
#include <stream/log.h>
#include <stream/query.h>
#include <stream/status.h>

#include "tunnel.h"

/* Base protocol (no credit): a queue toward the backend above HIGH pauses the whole tunnel
 * until it is back at LOW; CAP bounds what arrives meanwhile (lws delivers what it has). */
#define BASE_QUEUE_HIGH (1024u * 1024u)
#define BASE_QUEUE_LOW  (256u * 1024u)
#define BASE_QUEUE_CAP  (8u * 1024u * 1024u)
/* Toward the cloud: what the session could not take yet (it takes no more than the cloud's
 * credit and the budget's room); above HIGH the backend pauses, at LOW it resumes. The queue's
 * cap is HIGH plus the backend's burst (backend.h), reserved from the process budget at open,
 * so streams that will fill it (downloads nobody reads) are admitted only as far as the
 * budget holds them, and its peak never passes the limit. Except a `logs -f` (follower): it
 * trickles, its lines go straight into the session, and 10,000 of them would reserve 1.2 GB
 * they never use; its queue is reserved when it first has to hold bytes, and given back once
 * it stayed empty for QUIET_MS (a sweep). If the budget has no room then, the bytes its
 * backend had in hand are held anyway (charged by force: past the limit each such follower
 * adds at most that one burst) and the backend pauses until the queue drained. A TCP_CONNECT
 * is reserved the same way: through the front door each of kube-apiserver's kubelet
 * connections is one, its TLS opaque here, so a `logs -f` cannot be told from a download;
 * reserving 120 KiB at open for each admitted only ~1,400 to the default budget. Small marks
 * cost no speed: with credit, the window is the pipeline, and this queue only bridges a
 * WINDOW's round trip; the source keeps the rest (a paused socket's kernel buffer). */
#define TO_CLOUD_HIGH (8u * 1024u)
#define TO_CLOUD_LOW  (4u * 1024u)
#define QUIET_MS      1000u /* queue empty this long: its reservation goes back */

static bool is_upgrade_type(uint64_t type)
{
	return type == ST_MSG_EXEC_CONNECT || type == ST_MSG_ATTACH_CONNECT;
}

const char *es_stream_describe(const struct es_stream *st, char *buf, size_t cap)
{
	if (st->ops && st->ops->describe)
		st->ops->describe(st, buf, cap);
	else
		snprintf(buf, cap, "no backend");
	return buf;
}

/* ---- teardown -------------------------------------------------------------------------- */

static void unblock(struct es_stream *st)
{
	lws_sul_cancel(&st->sul_stall);
	if (!st->blocking)
		return;
	st->blocking = false;
	es_tunnel_block(st->t, false);
}

static void stream_free(struct es_stream *st)
{
	struct es_tunnel *t = st->t;
	struct edgestream *es = st->es;
	if (st->prev)
		st->prev->next = st->next;
	else
		t->streams = st->next;
	if (st->next)
		st->next->prev = st->prev;
	es_tunnel_detach(t, st->id, st);
	unblock(st);
	if (es->cfg.access_log) /* --access-log */
		st_log(ST_LOG_INFO, es->node, st->id,
		       "access: %s %s %s to_cloud=%llu from_cloud=%llu %llu ms",
		       st_msg_type_name(st->type), st->ops ? st->ops->name : "no backend",
		       st->outcome ? st->outcome : "done", (unsigned long long)st->to_cloud_bytes,
		       (unsigned long long)st->from_cloud_bytes,
		       (unsigned long long)(st_now_ms() - st->started_ms));
	if (st->ops && st->ops->close)
		st->ops->close(st); /* the backend lets go of @st (and its connection) */
	st_buf_cleanup(&st->to_backend);
	st_budget_credit(&es->budget,
	                 st->reserved + st->to_cloud_charged + st->to_cloud_grown_charged);
	st_buf_cleanup(&st->to_cloud);
	es->m.streams_open--;
	free(st);
	es_publish_stats(es);
	es_maybe_finish_drain(es);
	es_tunnel_stream_ended(t);
}

/* The stream ends from our side: the queued bytes go first, then REMOVE. */
static void stream_finish(struct es_stream *st)
{
	es_tunnel_end_stream(st->t, st->id, 0, NULL);
	stream_free(st);
}

/* The first byte of @st's answer goes toward the cloud now: its time to first byte. */
static void first_answer(struct es_stream *st)
{
	if (st->answered)
		return;
	st->answered = true;
	st_hist_observe(&st->es->ttfb[st->kind < 6 ? st->kind : 0], st_now_us() - st->started_us);
}

/*
 * With ERROR negotiated the cloud gets @code and @reason; a base-protocol cloud gets an HTTP
 * error response on upgrades (what kubectl shows) and a bare REMOVE otherwise (a KubeEdge
 * cloud has no way to carry more). With raw responses the HTTP error goes whatever the type.
 */
void es_stream_fail(struct es_stream *st, uint64_t code, const char *reason)
{
	struct es_tunnel *t = st->t;
	uint32_t caps = es_tunnel_caps(t);
	st_warn_ns(st->es->node, st->id, "%s %s", st_msg_type_name(st->type), reason);
	st->outcome = st->ops ? "failed" : "refused";
	if (st->answered) {
		stream_finish(st);
		return;
	}
	first_answer(st); /* the refusal is the answer */
	if (caps & ST_CAP_ERROR) {
		es_tunnel_end_stream(t, st->id, code, reason);
		stream_free(st);
		return;
	}
	if (is_upgrade_type(st->type) || (caps & ST_CAP_RAW_RESPONSE)) {
		char resp[ST_MAX_STATUS_JSON_BYTES + 512];
		ssize_t n = st_http_error_response(resp, sizeof resp,
		                                   st_ext_error_http_status(code), reason);
		if (n > 0)
			es_tunnel_write(t, st->id, (const uint8_t *)resp, (size_t)n);
	}
	stream_finish(st);
}

/* ---- toward the cloud ------------------------------------------------------------------ */

/* Moves what the session takes from to_cloud; ends the stream once the backend is done and
 * everything went; else lets the backend produce more once the queue is low. */
static void flush(struct es_stream *st)
{
	while (st_buf_len(&st->to_cloud) > 0) {
		const uint8_t *p;
		size_t n = st_buf_peek(&st->to_cloud, &p);
		ssize_t w = es_tunnel_write(st->t, st->id, p, n);
		if (w < 0) {
			stream_free(st); /* the session forgot the stream: nothing more to say */
			return;
		}
		st_buf_consume(&st->to_cloud, (size_t)w);
		if (!st->to_cloud_reserved) { /* charged by force as it came */
			st_budget_credit(&st->es->budget, (uint64_t)w);
			st->to_cloud_charged -= (uint64_t)w;
		}
		st->es->m.bytes_to_cloud += (uint64_t)w;
		st->to_cloud_bytes += (uint64_t)w;
		if ((size_t)w < n)
			break;
	}
	if (st->done) {
		if (st_buf_len(&st->to_cloud) == 0)
			stream_finish(st);
		return;
	}
	if (st_buf_below_low(&st->to_cloud) && st->ops && st->ops->on_writable)
		st->ops->on_writable(st);
}

int es_stream_to_cloud(struct es_stream *st, const uint8_t *p, size_t n)
{
	if (n == 0)
		return 0;
	first_answer(st);
	size_t w = 0;
	if (st_buf_len(&st->to_cloud) == 0) {
		ssize_t r = es_tunnel_write(st->t, st->id, p, n);
		if (r < 0) {
			stream_free(st);
			return -1;
		}
		w = (size_t)r;
		st->es->m.bytes_to_cloud += w;
		st->to_cloud_bytes += w;
	}
	if (w < n) {
		struct edgestream *es = st->es;
		/* A stream that gave its reservation back takes it again; without room the bytes
		 * in hand are held anyway (forced) and es_stream_cloud_full pauses the backend. */
		uint64_t base = st->to_cloud.cap - st->to_cloud_grown; /* grown: charged already */
		uint64_t held = st->to_cloud_charged;
		if (!st->to_cloud_reserved &&
		    st_budget_charge(&es->budget, base > held ? base - held : 0) == 0) {
			st->to_cloud_charged = base > held ? base : held;
			st->to_cloud_reserved = true;
			es_relay_quiet_sweep_arm(es);
		}
		if (st_buf_append(&st->to_cloud, p + w, n - w) < 0) {
			es_stream_fail(st, ST_EXT_ERR_LIMIT,
			               "backend output over the stream queue limit");
			return -1;
		}
		if (!st->to_cloud_reserved) {
			st_budget_force(&es->budget, n - w);
			st->to_cloud_charged += n - w;
		}
		st->to_cloud_queued_ms = st_now_ms();
	}
	return 0;
}

bool es_stream_cloud_full(const struct es_stream *st)
{
	return st_buf_above_high(&st->to_cloud) ||
	       (!st->to_cloud_reserved && st_buf_len(&st->to_cloud) > 0);
}

int es_stream_grow_to_cloud(struct es_stream *st, size_t extra)
{
	if (st_budget_charge(&st->es->budget, extra) < 0)
		return -ENOSPC;
	st_buf_raise_cap(&st->to_cloud, st->to_cloud.cap + extra);
	st->to_cloud_grown += extra;
	st->to_cloud_grown_charged += extra;
	return 0;
}

int es_stream_shrink_to_cloud(struct es_stream *st, uint64_t cap_extra, uint64_t charged)
{
	if (cap_extra > st->to_cloud_grown)
		cap_extra = st->to_cloud_grown;
	if (charged > cap_extra)
		charged = cap_extra;
	if (charged > st->to_cloud_grown_charged)
		charged = st->to_cloud_grown_charged;
	size_t cap = (size_t)(st->to_cloud.cap - st->to_cloud_grown + cap_extra);
	if (cap < st->to_cloud.cap && st_buf_lower_cap(&st->to_cloud, cap) < 0)
		return -EBUSY;
	st->to_cloud_grown = cap_extra;
	st_budget_credit(&st->es->budget, st->to_cloud_grown_charged - charged);
	st->to_cloud_grown_charged = charged;
	return 0;
}

void es_stream_recharge_grown(struct es_stream *st, uint64_t extra)
{
	uint64_t room = st->to_cloud_grown - st->to_cloud_grown_charged;
	if (extra > room)
		extra = room;
	if (extra == 0)
		return;
	if (st_budget_charge(&st->es->budget, extra) < 0)
		st_budget_force(&st->es->budget, extra);
	st->to_cloud_grown_charged += extra;
}

/* ---- quiet streams give their queue's reservation back ---------------------------------- */

static void on_quiet_sweep(lws_sorted_usec_list_t *sul)
{
	struct edgestream *es = lws_container_of(sul, struct edgestream, sul_quiet);
	uint64_t now = st_now_ms();
	bool again = false;
	for (struct es_tunnel *t = es->tunnels; t; t = t->next)
		for (struct es_stream *st = t->streams; st; st = st->next) {
			if (!st->to_cloud_reserved || !st->reserve_on_demand)
				continue;
			if (st_buf_len(&st->to_cloud) > 0 ||
			    now - st->to_cloud_queued_ms < QUIET_MS) {
				again = true;
				continue;
			}
			st_budget_credit(&es->budget, st->to_cloud_charged);
			st->to_cloud_charged = 0;
			st->to_cloud_reserved = false;
		}
	es->quiet_sweep_armed = again;
	if (again)
		lws_sul_schedule(es->ctx, 0, &es->sul_quiet, on_quiet_sweep,
		                 (lws_usec_t)QUIET_MS * LWS_US_PER_MS);
}

void es_relay_quiet_sweep_arm(struct edgestream *es)
{
	if (es->quiet_sweep_armed || es->ctx == NULL || es->stopped)
		return;
	es->quiet_sweep_armed = true;
	lws_sul_schedule(es->ctx, 0, &es->sul_quiet, on_quiet_sweep,
	                 (lws_usec_t)QUIET_MS * LWS_US_PER_MS);
}

void es_stream_backend_done(struct es_stream *st)
{
	st_dbg_ns(st->es->node, st->id,
	          "backend finished after %llu ms (%s, %zu bytes still queued)",
	          (unsigned long long)(st_now_ms() - st->started_ms),
	          st->answered ? "answered" : "no answer", st_buf_len(&st->to_cloud));
	st->done = true;
	flush(st); /* ends the stream once everything went out */
}

/* ---- from the cloud -------------------------------------------------------------------- */

static void on_stall_check(lws_sorted_usec_list_t *sul);

static void arm_stall_check(struct es_stream *st)
{
	lws_sul_schedule(st->es->ctx, 0, &st->sul_stall, on_stall_check,
	                 (lws_usec_t)st->es->cfg.stall_timeout_ms * LWS_US_PER_MS);
}

/* Base protocol: this stream's full queue toward its backend has had the tunnel paused (no
 * per-stream credit) for --stall-timeout without draining to its low mark, and every other
 * stream waited with it: cut it. A backend that drains its queue within the stall time is
 * never cut, however often it fills it. */
static void on_stall_check(lws_sorted_usec_list_t *sul)
{
	struct es_stream *st = lws_container_of(sul, struct es_stream, sul_stall);
	struct edgestream *es = st->es;
	if (!st->blocking)
		return;
	es->m.stall_cuts++;
	char why[160];
	snprintf(why, sizeof why,
	         "the tunnel was paused for its backend for %llu ms and the backend did not drain "
	         "it (--stall-timeout)",
	         (unsigned long long)es->cfg.stall_timeout_ms);
	es_stream_fail(st, ST_EXT_ERR_TIMEOUT, why);
}

int es_stream_on_data(struct es_stream *st, const uint8_t *p, size_t len)
{
	struct edgestream *es = st->es;
	es->m.bytes_from_cloud += len;
	st->from_cloud_bytes += len;
	if (st_buf_append(&st->to_backend, p, len) < 0) {
		st_warn_ns(es->node, st->id, "the cloud sent more than the stream queue holds");
		return -EMSGSIZE; /* the session resets the stream */
	}
	if (!(es_tunnel_caps(st->t) & ST_CAP_FLOW) && st_buf_above_high(&st->to_backend) &&
	    !st->blocking) {
		st->blocking = true;
		arm_stall_check(st);
		es_tunnel_block(st->t, true);
	}
	if (st->ops && st->ops->write)
		st->ops->write(st);
	return 0;
}

void es_stream_sent(struct es_stream *st, size_t n)
{
	st->body_sent = true;
	st_buf_consume(&st->to_backend, n);
	es_tunnel_consumed(st->t, st->id, n); /* the bytes reached the backend: credit back */
	if (st->blocking && st_buf_below_low(&st->to_backend))
		unblock(st);
}

void es_stream_on_half_close(struct es_stream *st)
{
	/* Only a raw TCP stream passes the end of the cloud's bytes on as a TCP half-close. For
	 * HTTP it only means "the request is complete": an HTTP server that sees EOF after the
	 * request drops the answer (Go's cancels the request context, Python's loses the
	 * connection), so the backend connection stays open both ways. */
	if (st->type != ST_MSG_TCP_CONNECT)
		return;
	st->cloud_half_closed = true;
	if (st->ops && st->ops->write)
		st->ops->write(st);
}

void es_stream_on_cloud_close(struct es_stream *st, uint64_t code, const char *reason,
                              size_t reason_len)
{
	if (code)
		st_dbg_ns(st->es->node, st->id, "the cloud ended the stream: %s %.*s",
		          st_ext_error_name(code), (int)reason_len, reason);
	if (!st->done)
		st->outcome = code ? "ended by the cloud with an error" : "ended by the cloud";
	stream_free(st);
}

void es_stream_on_writable(struct es_stream *st)
{
	flush(st);
}

void es_stream_tunnel_gone(struct es_stream *st)
{
	st->outcome = "tunnel gone";
	stream_free(st);
}

/* ---- opening --------------------------------------------------------------------------- */

/* Which backend serves a routed stream. */
static const struct es_backend_ops *backend_for(const struct es_target *target,
                                                const struct st_connect_req *req)
{
	switch (target->kind) {
	case ES_TARGET_KUBELET:
		return &es_backend_kubelet;
	case ES_TARGET_LOCAL_PORT:
	case ES_TARGET_KUBELET_TCP: /* raw TCP: the same backend, another address */
	case ES_TARGET_POD:
		return &es_backend_local_port;
	case ES_TARGET_CRI: {
		struct st_kubelet_path kp;
		if (req && st_kubelet_path_parse(req->path, strlen(req->path), &kp) == 0 &&
		    kp.kind == ST_KUBELET_CONTAINER_LOGS)
			return &es_backend_cri_logs; /* answered from the runtime's files */
		return &es_backend_cri_stream;
	}
	default:
		return NULL;
	}
}

/*
 * Reserves what @st may hold toward the cloud with @ops as its backend, and sizes to_cloud to
 * it: the backend's own buffer (a CRI log follower's output) for the stream's life; the queue
 * too, at open, unless the stream is a `logs -f` or a TCP_CONNECT (then when it first has to
 * hold bytes: TO_CLOUD_HIGH). 0, or -ENOSPC (counted: the stream is refused).
 */
static int reserve(struct es_stream *st, const struct es_backend_ops *ops)
{
	struct edgestream *es = st->es;
	size_t cap = TO_CLOUD_HIGH + ops->to_cloud_burst;
	uint64_t want = ops->own_bytes + (st->reserve_on_demand ? 0 : (uint64_t)cap);
	if (st_budget_charge(&es->budget, want) < 0) {
		/* The counter and the one-line warning the session's own refusals use. */
		es->session_totals.refused_budget++;
		es_tunnel_note_refusal(st->t, "its memory toward the cloud does not fit "
		                              "--process-buffer-bytes");
		return -ENOSPC;
	}
	st->reserved = ops->own_bytes;
	if (!st->reserve_on_demand) {
		st->to_cloud_charged = cap;
		st->to_cloud_reserved = true;
	}
	st_buf_init(&st->to_cloud, cap);
	st_buf_set_watermarks(&st->to_cloud, TO_CLOUD_HIGH, TO_CLOUD_LOW);
	return 0;
}

int es_stream_open(struct es_tunnel *t, uint64_t id, uint64_t type, const uint8_t *payload,
                   size_t len)
{
	struct edgestream *es = t->es;
	struct es_stream *st = calloc(1, sizeof *st);
	if (st == NULL)
		return -ENOMEM;
	st->t = t;
	st->es = es;
	st->id = id;
	st->type = type;
	st->started_ms = st_now_ms();
	st->started_us = st_now_us();
	st_buf_init(&st->to_cloud, 0); /* sized once the backend is known */
	/* With credit the cloud never sends more than the window; without, bound it hard. */
	bool flow = es_tunnel_caps(t) & ST_CAP_FLOW;
	st_buf_init(&st->to_backend, flow ? (size_t)es->cfg.stream_window_bytes : BASE_QUEUE_CAP);
	if (!flow)
		st_buf_set_watermarks(&st->to_backend, BASE_QUEUE_HIGH, BASE_QUEUE_LOW);
	st->next = t->streams;
	if (t->streams)
		t->streams->prev = st;
	t->streams = st;
	es->m.streams_open++;
	es->m.streams_total++;
	es_tunnel_attach(t, id, st);

	if (es->drain.state != ST_DRAIN_RUNNING) {
		es->m.streams_refused++;
		es_stream_fail(st, ST_EXT_ERR_LIMIT, "edgestream is shutting down");
		return 0;
	}
	struct st_connect_req req = {0};
	struct es_target tg = {0};
	if (type == ST_MSG_TCP_CONNECT) {
		struct st_ext_tcp_connect tc;
		if (st_ext_tcp_connect_decode(payload, len, &tc) < 0) {
			es->m.streams_refused++;
			es_stream_fail(st, ST_EXT_ERR_BAD_REQUEST, "malformed TCP_CONNECT");
			return 0;
		}
		es_route_tcp(&es->allow, es->kubelet_port > 0, tc.port, tc.target, tc.target_len,
		             &tg);
		st->reserve_on_demand = true; /* opaque: a follow or a download alike */
	} else {
		int rc = st_connect_req_decode(payload, len, &req);
		if (rc < 0) {
			char why[128];
			snprintf(why, sizeof why, "malformed connect request: %s", st_strerror(rc));
			es->m.streams_refused++;
			es_stream_fail(st, ST_EXT_ERR_BAD_REQUEST, why);
			return 0;
		}
		es_route_request(&es->allow, es->kubelet_port > 0, es->cri_enabled, req.path,
		                 strlen(req.path), &tg);
		struct st_kubelet_path kp;
		const char *q = strchr(req.path, '?');
		if (st_kubelet_path_parse(req.path, q ? (size_t)(q - req.path) : strlen(req.path),
		                          &kp) == 0)
			st->kind = (uint8_t)kp.kind;
		/* A follower trickles: its queue toward the cloud is reserved only when needed. */
		st->reserve_on_demand =
		        st->kind == ST_KUBELET_CONTAINER_LOGS && req.raw_query &&
		        st_query_k8s_flag(req.raw_query, strlen(req.raw_query), "follow");
	}
	st->port = tg.port;
	st->local_name = tg.local_name;
	if (tg.kind == ES_TARGET_KUBELET_TCP) {
		st->tcp_host = es->kubelet_host; /* the kubelet's own endpoint, never the cloud's */
		st->port = (uint16_t)es->kubelet_port;
		st->local_name = ES_TCP_TARGET_KUBELET;
	} else if (tg.kind == ES_TARGET_POD) {
		memcpy(st->pod_ip, tg.host, sizeof st->pod_ip);
		st->tcp_host = st->pod_ip;
		st->local_name = "pod";
	}
	const struct es_backend_ops *ops =
	        backend_for(&tg, type == ST_MSG_TCP_CONNECT ? NULL : &req);
	if (ops == NULL) {
		es->m.streams_refused++;
		st_connect_req_cleanup(&req);
		es_stream_fail(st, tg.refuse_code, tg.reason);
		return 0;
	}
	if (reserve(st, ops) < 0) {
		st_connect_req_cleanup(&req);
		es_stream_fail(st, ST_EXT_ERR_LIMIT,
		               "memory budget spent (the edge's --process-buffer-bytes)");
		return 0;
	}
	st->ops = ops;
	st->ops->open(st, type == ST_MSG_TCP_CONNECT ? NULL : &req, tg.path, tg.path_len);
	st_connect_req_cleanup(&req);
	return 0;
}
