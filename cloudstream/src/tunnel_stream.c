/*
 * cloudstream/src/tunnel_stream.c — streams for stream endpoints, and the budgets of what
 * endpoints hold (see tunnel.h and budget.h).
 *
 * The session's callbacks find a stream's endpoint by the stream's user pointer and call its
 * ops; they never know what the endpoint is. Everything that keeps the budget invariants is
 * here, and only here:
 *   node budget  = base protocol: the bytes held by the endpoints with a stream on that
 *                  tunnel; with credit the session's own budget of its streams' windows;
 *   process      = the windows of every stream with credit (charged by the sessions) plus the
 *                  bytes held by every other endpoint (a stream to a base edge, or none);
 *   blocking_eps = the tunnel's endpoints over their high mark (base protocol).
 * With a base-protocol edge a full endpoint or a budget over its limit pauses the tunnel, and an
 * endpoint that keeps it paused for --stall-timeout without draining to its low mark is cut
 * (ops->cut). With credit flow control the tunnel is never paused: the session refuses a stream
 * whose first window does not fit (cs_stream_open answers -ENOSPC). Loop thread only.
 */
#include "tunnel_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <stream/err.h>
#include <stream/ext.h>
#include <stream/limits.h>
#include <stream/log.h>
#include <stream/loop.h>
#include <stream/tunnelread.h>

/* ---- session callbacks ----------------------------------------------------------------- */

static int on_data(struct st_session *s, uint64_t id, const uint8_t *data, size_t len, void *user)
{
	struct cs_tunnel *t = user;
	struct cs_endpoint *ep = st_session_stream_user(s, id);
	t->srv->m.bytes_from_edge += len;
	if (ep == NULL)
		return 0;       /* the endpoint is gone; its REMOVE is on its way */
	ep->credit_debt += len; /* returned to the edge as the endpoint's consumer takes it */
	return ep->ops->data(ep, data, len);
}

static void detach(struct cs_endpoint *ep, bool send_close, uint64_t code, const char *reason);

static void on_close(struct st_session *s, uint64_t id, void *stream_user, uint64_t code,
                     const char *reason, size_t reason_len, void *user)
{
	(void)s;
	(void)id;
	(void)user;
	struct cs_endpoint *ep = stream_user;
	if (ep == NULL)
		return;
	detach(ep, false, 0, NULL); /* the session has forgotten the stream already */
	ep->ops->end(ep, code, reason, reason_len);
}

static void on_writable(struct st_session *s, uint64_t id, void *user)
{
	(void)user;
	struct cs_endpoint *ep = st_session_stream_user(s, id);
	if (ep != NULL)
		ep->ops->writable(ep);
}

static void on_opened(struct st_session *s, uint64_t id, void *user)
{
	(void)user;
	struct cs_endpoint *ep = st_session_stream_user(s, id);
	if (ep != NULL && ep->ops->opened)
		ep->ops->opened(ep);
}

static int on_peer(struct st_session *s, uint64_t type, const uint8_t *payload, size_t len,
                   void *user)
{
	(void)s;
	struct cs_tunnel *t = user;
	/* Only a peer link's other end announces nodes: anywhere else they are ignored. */
	return t->link_ops ? t->link_ops->dir_msg(t->link_user, type, payload, len) : 0;
}

const struct st_session_callbacks cs__tunnel_session_cbs = {
        .on_peer = on_peer,
        .on_opened = on_opened,
        .on_data = on_data,
        .on_close = on_close,
        .on_writable = on_writable,
};

/* ---- pausing the tunnel ---------------------------------------------------------------- */

void cs__tunnel_kick(struct cs_tunnel *t)
{
	/* Written at the end of this loop round, not the next (stream/loop.h): a request's
	 * CONNECT or an answer's credit leaves without an epoll_ctl and a round of its own. */
	if (t->wsi && st_session_want_write(t->sess))
		st_loop_write_soon(t->srv->loop, t->wsi);
}

void cs__tunnel_paused_remove(struct cs_tunnel *t)
{
	struct cs_tunnel_set *set = &t->srv->tun;
	if (!t->on_paused_list)
		return;
	if (t->paused_prev)
		t->paused_prev->paused_next = t->paused_next;
	else
		set->paused = t->paused_next;
	if (t->paused_next)
		t->paused_next->paused_prev = t->paused_prev;
	t->paused_next = t->paused_prev = NULL;
	t->on_paused_list = false;
}

void cs__tunnel_update_rx(struct cs_tunnel *t)
{
	struct cs_server *srv = t->srv;
	struct cs_tunnel_set *set = &srv->tun;
	if (t->wsi == NULL)
		return; /* closing: nothing to pause */
	/* With credit flow control each stream is bounded by its window and the budgets refuse
	 * new streams instead (cs_stream_open): the tunnel is never paused. A base-protocol edge
	 * has no credit: a full stream, or a budget, pauses it, and the stall check cuts a stream
	 * that keeps it paused (on_stall_check). */
	if (t->caps & ST_CAP_FLOW)
		return;
	bool want_pause = cs_budget_pause_tunnel(&t->budget, &set->budget, t->blocking_eps);
	if (st_budget_over(&set->budget) && want_pause && !t->on_paused_list) {
		t->paused_next = set->paused;
		t->paused_prev = NULL;
		if (set->paused)
			set->paused->paused_prev = t;
		set->paused = t;
		t->on_paused_list = true;
	}
	if (want_pause == t->rx_paused)
		return;
	t->rx_paused = want_pause;
	st_liveness_pause(&t->live, want_pause, st_now_ms());
	if (want_pause) {
		srv->m.tunnel_pauses++;
		/* Once per tunnel at WARN; after that only the counter moves. */
		st_log(t->pause_logged ? ST_LOG_DEBUG : ST_LOG_WARN, t->node, 0,
		       "tunnel paused: %llu bytes queued toward apiservers (%u full streams%s); "
		       "further pauses are counted in cloudstream_flow_stalls_total",
		       (unsigned long long)t->budget.used_bytes, t->blocking_eps,
		       t->caps & ST_CAP_FLOW ? "" : ", base-protocol edge without flow control");
		t->pause_logged = true;
	} else {
		cs__tunnel_paused_remove(t);
		st_log(ST_LOG_DEBUG, t->node, 0, "tunnel resumed");
	}
	if (t->reader)
		st_tunnel_reader_pause(t->reader, want_pause);
	else
		lws_rx_flow_control(t->wsi, want_pause ? 0 : 1);
}

/* The process budget may have room: resume the tunnels paused for it, once half is free. */
static void budget_changed(struct cs_server *srv)
{
	struct cs_tunnel_set *set = &srv->tun;
	if (!st_budget_half_free(&set->budget))
		return; /* hysteresis */
	while (set->paused) {
		struct cs_tunnel *t = set->paused;
		cs__tunnel_paused_remove(t);
		cs__tunnel_update_rx(t);
	}
}

/* ---- one endpoint's stream ------------------------------------------------------------- */

static void unblock(struct cs_endpoint *ep)
{
	lws_sul_cancel(&ep->sul_stall);
	if (ep->blocking && ep->tun) {
		ep->tun->blocking_eps--;
		cs__tunnel_update_rx(ep->tun);
	}
	ep->blocking = false;
}

/* Forgets @ep's stream; with @send_close the edge gets REMOVE (@code 0) or ERROR. What @ep
 * holds stays charged to the process, no longer to the node. */
static void detach(struct cs_endpoint *ep, bool send_close, uint64_t code, const char *reason)
{
	struct cs_tunnel *t = ep->tun;
	if (t == NULL)
		return;
	unblock(ep);
	if (ep->sid) {
		st_session_set_stream_user(t->sess, ep->sid, NULL);
		if (send_close)
			st_session_close(t->sess, ep->sid, code, reason);
		cs__tunnel_kick(t);
	}
	ep->credit_debt = 0;
	if (t->caps & ST_CAP_FLOW)
		st_budget_force(&t->srv->tun.budget, ep->queued); /* no window covers it now */
	else
		st_budget_credit(&t->budget, ep->queued);
	if (ep->tprev)
		ep->tprev->tnext = ep->tnext;
	else
		t->eps = ep->tnext;
	if (ep->tnext)
		ep->tnext->tprev = ep->tprev;
	ep->tnext = ep->tprev = NULL;
	ep->tun = NULL;
	ep->sid = 0;
	t->srv->tun.n_streams--;
	cs__tunnel_update_rx(t);
	cs__tunnel_stream_ended(t);
}

void cs__tunnel_end_streams(struct cs_tunnel *t, const char *why)
{
	while (t->eps) {
		struct cs_endpoint *ep = t->eps;
		detach(ep, false, 0, NULL);
		ep->ops->gone(ep, why);
	}
}

/*
 * Base protocol: this endpoint's full queue has had the whole tunnel paused (no per-stream
 * credit) for --stall-timeout without draining to its low mark, and every other stream of the
 * node waited with it: cut it (REMOVE to the edge, its consumer closed) and read the tunnel
 * again. What counts is how long the others wait, not whether this client still trickles: a
 * reader that drains its queue within the stall time is never cut.
 */
static void on_stall_check(lws_sorted_usec_list_t *sul)
{
	struct cs_endpoint *ep = lws_container_of(sul, struct cs_endpoint, sul_stall);
	struct cs_tunnel *t = ep->tun;
	struct cs_server *srv = ep->srv;
	if (!ep->blocking || t == NULL)
		return;
	srv->m.stall_cuts++;
	st_log(srv->m.stall_cuts == 1 ? ST_LOG_WARN : ST_LOG_INFO, t->node, ep->sid,
	       "stream cut: the tunnel to this base-protocol edge was paused for it for %llu ms "
	       "and its apiserver connection did not drain it (--stall-timeout; counted in "
	       "cloudstream_stream_stall_cuts_total)",
	       (unsigned long long)srv->cfg.stall_timeout_ms);
	detach(ep, true, ST_EXT_ERR_TIMEOUT, "the apiserver side stopped reading");
	ep->ops->cut(ep);
}

void cs_endpoint_init(struct cs_endpoint *ep, const struct cs_endpoint_ops *ops,
                      struct cs_server *srv)
{
	memset(ep, 0, sizeof *ep);
	ep->ops = ops;
	ep->srv = srv;
}

void cs_endpoint_cleanup(struct cs_endpoint *ep)
{
	detach(ep, true, 0, NULL);
	lws_sul_cancel(&ep->sul_stall);
	cs_endpoint_dropped(ep, (size_t)ep->queued); /* what it held goes with it */
}

int cs_stream_open(struct cs_tunnel *t, struct cs_endpoint *ep, uint64_t type,
                   cs_connect_payload_cb payload, void *user, char *msg, size_t msg_cap)
{
	struct cs_server *srv = t->srv;
	struct cs_tunnel_set *set = &srv->tun;
	uint64_t sid = t->next_stream_id;
	ssize_t len = payload(sid, srv->scratch, ST_MAX_CONNECT_JSON_BYTES, user);
	if (len < 0)
		return (int)len;
	int rc = set->n_streams >= srv->cfg.max_streams
	                 ? -EAGAIN
	                 : st_session_open(t->sess, sid, type, (const uint8_t *)srv->scratch,
	                                   (size_t)len);
	if (rc == -ENOSPC) {
		srv->m.budget_refusals++;
		/* With credit flow control a budget never pauses the tunnel (that would hold up
		 * every stream of the node, and its liveness): the session reserves each stream's
		 * first window, and refuses a stream it cannot reserve until streams that do not
		 * drain have gone. */
		struct st_session_stats ss;
		st_session_get_stats(t->sess, &ss);
		bool node = ss.window_bytes + cs_tunnel_first_window(srv) >
		            srv->cfg.session_buffer_bytes;
		snprintf(msg, msg_cap,
		         "edge node %s: its streams toward apiservers hold %llu bytes of the %s "
		         "budget of %llu bytes (apiserver connections that do not read); try again "
		         "later",
		         t->node,
		         (unsigned long long)(node ? ss.window_bytes : set->budget.used_bytes),
		         node ? "node's" : "process's",
		         (unsigned long long)(node ? srv->cfg.session_buffer_bytes
		                                   : srv->cfg.process_buffer_bytes));
		return -ENOSPC;
	}
	if (rc < 0) {
		snprintf(msg, msg_cap, "edge node %s: too many streams open (%s)", t->node,
		         st_strerror(rc));
		return -EAGAIN;
	}
	t->next_stream_id++;
	st_session_set_stream_user(t->sess, sid, ep);
	ep->tun = t;
	ep->sid = sid;
	ep->credit_debt = 0;
	ep->tprev = NULL;
	ep->tnext = t->eps;
	if (t->eps)
		t->eps->tprev = ep;
	t->eps = ep;
	if (t->caps & ST_CAP_FLOW)
		st_budget_credit(&set->budget, ep->queued); /* its window covers it now */
	else
		st_budget_force(&t->budget, ep->queued);
	set->n_streams++;
	cs__tunnel_kick(t);
	return 0;
}

size_t cs_stream_space(const struct cs_endpoint *ep)
{
	return ep->tun ? st_session_write_space(ep->tun->sess, ep->sid) : 0;
}

ssize_t cs_stream_write(struct cs_endpoint *ep, const uint8_t *p, size_t len)
{
	struct cs_tunnel *t = ep->tun;
	if (t == NULL)
		return -ENOENT;
	ssize_t w = len ? st_session_write(t->sess, ep->sid, p, len) : 0;
	if (w > 0)
		ep->srv->m.bytes_to_edge += (uint64_t)w;
	cs__tunnel_kick(t);
	return w;
}

void cs_stream_wait_writable(struct cs_endpoint *ep)
{
	if (ep->tun) {
		st_session_notify_writable(ep->tun->sess, ep->sid);
		cs__tunnel_kick(ep->tun); /* room already there: the next round wakes the writer */
	}
}

void cs_stream_shutdown(struct cs_endpoint *ep)
{
	if (ep->tun == NULL)
		return;
	st_session_shutdown(ep->tun->sess, ep->sid); /* HALF_CLOSE for our edges */
	cs__tunnel_kick(ep->tun);
}

void cs_stream_close(struct cs_endpoint *ep, uint64_t code, const char *reason)
{
	detach(ep, true, code, reason);
}

void cs_stream_detach(struct cs_endpoint *ep)
{
	detach(ep, false, 0, NULL);
}

/* ---- what endpoints hold --------------------------------------------------------------- */

/* Are @ep's queued bytes charged to the budgets? Not while its stream has credit flow control:
 * the session charged the stream's window, which holds them. */
static bool holds_charged(const struct cs_endpoint *ep)
{
	return ep->tun == NULL || !(ep->tun->caps & ST_CAP_FLOW);
}

static void credit(struct cs_endpoint *ep, size_t n)
{
	ep->queued -= n;
	if (!holds_charged(ep))
		return;
	st_budget_credit(&ep->srv->tun.budget, n);
	if (ep->tun)
		st_budget_credit(&ep->tun->budget, n);
}

void cs_endpoint_queued(struct cs_endpoint *ep, size_t n)
{
	struct cs_server *srv = ep->srv;
	struct cs_tunnel *t = ep->tun;
	ep->queued += n;
	if (holds_charged(ep))
		st_budget_force(&srv->tun.budget, n);
	if (t == NULL)
		return;
	if (holds_charged(ep))
		st_budget_force(&t->budget, n);
	/* A base-protocol edge has no per-stream credit: a full endpoint pauses the tunnel, and
	 * the stall check starts. */
	if (!(t->caps & ST_CAP_FLOW) && !ep->blocking && ep->queued > ST_RELAY_HIGH_WATER_BYTES) {
		ep->blocking = true;
		t->blocking_eps++;
		srv->m.stream_stalls++;
		lws_sul_schedule(srv->ctx, 0, &ep->sul_stall, on_stall_check,
		                 (lws_usec_t)srv->cfg.stall_timeout_ms * LWS_US_PER_MS);
	}
	cs__tunnel_update_rx(t);
}

void cs_endpoint_delivered(struct cs_endpoint *ep, size_t n)
{
	struct cs_tunnel *t = ep->tun;
	credit(ep, n);
	if (t != NULL) {
		if (ep->credit_debt && ep->sid) {
			size_t c = n < ep->credit_debt ? n : (size_t)ep->credit_debt;
			ep->credit_debt -= c;
			st_session_consumed(t->sess, ep->sid, c);
			cs__tunnel_kick(t);
		}
		if (ep->blocking && ep->queued <= ST_RELAY_LOW_WATER_BYTES)
			unblock(ep);
		else
			cs__tunnel_update_rx(t);
	}
	budget_changed(ep->srv);
}

void cs_endpoint_dropped(struct cs_endpoint *ep, size_t n)
{
	credit(ep, n);
	if (ep->tun != NULL)
		cs__tunnel_update_rx(ep->tun);
	budget_changed(ep->srv);
}

/* ---- accessors and the set ------------------------------------------------------------- */

uint32_t cs_tunnel_caps(const struct cs_tunnel *t)
{
	return t->caps;
}

const char *cs_tunnel_node(const struct cs_tunnel *t)
{
	return t->node;
}

void cs_tunnels_init(struct cs_server *srv)
{
	memset(&srv->tun, 0, sizeof srv->tun);
	st_budget_init(&srv->tun.budget, srv->cfg.process_buffer_bytes);
}
