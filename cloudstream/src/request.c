/*
 * cloudstream/src/request.c — one request on an apiserver connection: starting it (its stream on
 * the node's tunnel: the connection is the stream's endpoint, tunnel.h), feeding its body into
 * the stream, relaying the answer back, and the access log line when it ends. Which node it is
 * for is request_route.c's; waiting for a node between tunnels is request_reconnect.c's.
 *
 * It answers by itself only before the edge has answered (Status JSON, then close), never adds
 * a byte to a relayed answer, and follows the answer's framing so a plain request's connection
 * serves the next request. Every such decision is relay.c's (pure); this file applies them to
 * the connection and the stream. Loop thread only.
 */
#include "peer.h"
#include "authz.h"
#include "front.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include <stream/err.h>
#include <stream/frame.h>
#include <stream/log.h>
#include <stream/status.h>

static struct cs_front *front_of(struct cs_endpoint *ep)
{
	return lws_container_of(ep, struct cs_front, ep);
}

/* The request's stream is over, whichever side ended it: no more answer deadline, one stream
 * fewer of its kind. */
static void stream_over(struct cs_front *f)
{
	lws_sul_cancel(&f->sul_answer);
	if (f->counted_stream) {
		f->srv->m.streams_open[f->rl.plan.path.kind]--;
		f->counted_stream = false;
	}
}

/* The request's kept head (front.h) is not needed any more. */
static void retry_forget(struct cs_front *f)
{
	free(f->retry_head);
	f->retry_head = NULL;
	f->retry_len = 0;
}

/* ---- the access log ---------------------------------------------------------------------- */

static void access_begin(struct cs_front *f, const struct st_http_request *req)
{
	if (f->acc.active)
		return; /* the same request again, after a pod lookup or a review */
	memset(&f->acc, 0, sizeof f->acc);
	f->acc.active = true;
	f->acc.started_ms = st_now_ms();
	f->acc.started_us = st_now_us();
	snprintf(f->acc.method, sizeof f->acc.method, "%.*s", (int)req->method_len, req->method);
	snprintf(f->acc.path, sizeof f->acc.path, "%.*s", (int)req->path_len, req->path);
}

/* The answer's status as the client saw it: ours (@status), the edge's head, or the 200 a
 * body-only answer was given. */
static int answer_status(const struct cs_front *f, int status)
{
	if (status)
		return status;
	if (f->rl.mode == CS_RELAY_RAW && f->rl.resp.head_done)
		return f->rl.resp.status;
	return f->rl.answered ? 200 : 0;
}

/* One info line per request, when it ends: what, who, how it ended, bytes, time. The edge's
 * line for the same stream carries the same node and stream id. */
static void access_end(struct cs_front *f, int status, const char *outcome)
{
	if (!f->acc.active)
		return;
	f->acc.active = false;
	if (!f->srv->cfg.access_log) /* --access-log off */
		return;
	const char *caller = f->req_user    ? f->req_user->name
	                     : f->cert_user ? f->cert_user->name
	                                    : "-";
	st_log(ST_LOG_INFO, cs__front_node(f), f->acc.sid,
	       "access: %s %s %d %s caller=%s to_edge=%llu to_client=%llu %llu ms%s%.0llu%s",
	       f->acc.method, f->acc.path, answer_status(f, status), outcome, caller,
	       (unsigned long long)f->acc.to_edge, (unsigned long long)f->acc.to_client,
	       (unsigned long long)(st_now_ms() - f->acc.started_ms),
	       f->acc.waited_ms ? " waited_for_node=" : "", (unsigned long long)f->acc.waited_ms,
	       f->acc.waited_ms ? " ms" : "");
}

/* Answer bytes were queued toward the client: the first of a request's answer (ours or the
 * edge's) is its time to first byte, by kind (cloudstream_request_ttfb_seconds). */
static void answer_sent(struct cs_front *f)
{
	if (!f->rl.answered && f->acc.started_us) {
		unsigned kind = (unsigned)f->rl.plan.path.kind;
		st_hist_observe(&f->srv->m.ttfb[kind < 6 ? kind : 0],
		                st_now_us() - f->acc.started_us);
		f->acc.started_us = 0;
	}
	cs_relay_sent(&f->rl);
}

/* Ends the stream from our side: with @send_close the edge gets REMOVE (@code 0) or ERROR. */
static void end_stream(struct cs_front *f, bool send_close, uint64_t code, const char *reason)
{
	stream_over(f);
	if (send_close)
		cs_stream_close(&f->ep, code, reason);
	else
		cs_stream_detach(&f->ep);
}

void cs__request_fail(struct cs_front *f, int status, enum cs_err_reason why, const char *message)
{
	retry_forget(f);
	if (status == 0)
		status = cs_err_reason_status(why);
	f->srv->m.request_errors[why]++;
	access_end(f, f->rl.answered ? 0 : status, cs_err_reason_name(why));
	st_log(why == CS_ERR_BAD_REQUEST ? ST_LOG_INFO : ST_LOG_WARN, cs__front_node(f), f->ep.sid,
	       "request failed (%s): %s%s", cs_err_reason_name(why), message,
	       f->rl.answered ? "; answer cut short" : "");
	char buf[ST_MAX_STATUS_JSON_BYTES + 256];
	ssize_t n = cs_relay_error_answer(&f->rl, status, message, buf, sizeof buf);
	if (n > 0 && cs__front_queue(f, buf, (size_t)n) == 0)
		answer_sent(f);
	if (f->h2r) {
		cs__h2_answer_end(f, false); /* an HTTP/2 stream ends; its connection stays */
		return;
	}
	f->state = CS_FRONT_CLOSING;
	lws_callback_on_writable(f->wsi);
}

/* The answer is complete: the stream ends; the connection serves the next request or closes. */
static void request_done(struct cs_front *f, bool send_remove)
{
	retry_forget(f);
	access_end(f, 0, "done");
	end_stream(f, send_remove, 0, NULL);
	bool again = cs_relay_keep_alive(&f->rl);
	cs_relay_cleanup(&f->rl); /* idle: the next request's errors are answered again */
	if (f->h2r) {
		cs__h2_answer_end(f, false); /* one request per HTTP/2 stream */
		return;
	}
	/* Draining: a connection left idle is closed, as at SIGTERM (cs_front_drain_idle), so
	 * the drain ends once the balancer stops sending (main.c). */
	f->served = true;
	if (!again || (f->srv->draining && f->in_len == 0)) {
		f->state = CS_FRONT_CLOSING;
	} else {
		f->state = CS_FRONT_HEAD;
		f->node[0] = '\0';
		lws_set_timeout(f->wsi, PENDING_TIMEOUT_HTTP_KEEPALIVE_IDLE,
		                (int)(f->srv->cfg.idle_timeout_ms / 1000));
	}
	/* Pipelined input and the close are handled from WRITEABLE, outside the session. */
	lws_callback_on_writable(f->wsi);
}

/* ---- the stream endpoint: what the tunnel calls ---------------------------------------- */

static int ep_data(struct cs_endpoint *ep, const uint8_t *p, size_t len)
{
	struct cs_front *f = front_of(ep);
	if (f->state != CS_FRONT_WAIT && f->state != CS_FRONT_RESPONSE)
		return 0;
	if (f->state == CS_FRONT_WAIT) {
		f->state = CS_FRONT_RESPONSE;
		lws_sul_cancel(&f->sul_answer);
		retry_forget(f); /* the holder answers: no retry */
	}
	struct cs_relay_emit e;
	if (cs_relay_answer(&f->rl, p, len, &e) < 0) {
		cs__request_fail(f, 502, CS_ERR_BAD_RESPONSE,
		                 "the edge's backend sent a malformed HTTP response");
		end_stream(f, true, ST_EXT_ERR_PROTOCOL, "malformed response");
		return 0;
	}
	if (e.head_len) {
		if (cs__front_queue(f, e.head, e.head_len) < 0)
			return -ENOMEM; /* the session resets the stream */
		answer_sent(f);
	}
	if (e.chunk_len + e.take + e.trailer_len > 0) {
		if ((e.chunk_len && cs__front_queue(f, e.chunk, e.chunk_len) < 0) ||
		    (e.take && cs__front_queue(f, p, e.take) < 0) ||
		    (e.trailer_len && cs__front_queue(f, e.trailer, e.trailer_len) < 0)) {
			cs__request_fail(f, 502, CS_ERR_BAD_RESPONSE,
			                 "answer over the stream's buffer limit");
			end_stream(f, true, ST_EXT_ERR_LIMIT, "buffer limit");
			return 0;
		}
		answer_sent(f);
	}
	if (e.take < len)
		st_log(ST_LOG_DEBUG, cs__front_node(f), f->ep.sid,
		       "%zu bytes after the response dropped", len - e.take);
	if (e.done)
		request_done(f, true);
	return 0;
}

/* The replica the request was forwarded to does not hold the node any more (its directory
 * entry here was behind: the edge is moving, or its tunnel went a moment ago): the request is
 * routed again from its kept head, outside the session, as if it had just come. It waits for
 * the node's redial there (the refusing holder is not tried again until a peer announces the
 * node). false: no retry possible. */
static bool retry_forwarded(struct cs_front *f)
{
	if (cs__front_unread(f, f->retry_head, f->retry_len) < 0)
		return false;
	retry_forget(f);
	f->fwd_refused_by = f->fwd_link;
	cs_front_node_gone(f->srv, f->node, strlen(f->node), NULL, NULL, 0); /* between tunnels */
	cs_relay_cleanup(&f->rl);
	f->state = CS_FRONT_HEAD;
	st_log(ST_LOG_DEBUG, f->node, f->ep.sid,
	       "the replica the request went to no longer holds the node: routed again");
	lws_callback_on_writable(f->wsi); /* front_writeable parses the head again */
	return true;
}

static void ep_end(struct cs_endpoint *ep, uint64_t code, const char *reason, size_t len)
{
	struct cs_front *f = front_of(ep);
	stream_over(f); /* the session has forgotten the stream already */
	if (f->state == CS_FRONT_CLOSING || f->state == CS_FRONT_HEAD)
		return;
	if (f->retry_head && f->forwarded && f->state == CS_FRONT_WAIT && !f->rl.answered &&
	    code == ST_EXT_ERR_UNREACHABLE && retry_forwarded(f))
		return;
	struct cs_relay_end end;
	cs_relay_on_end(&f->rl, code, &end);
	if (end.verdict == CS_RELAY_FAIL) {
		char msg[ST_MAX_ERROR_REASON_BYTES + 256];
		cs_relay_end_message(msg, sizeof msg, f->node, code, reason, len);
		cs__request_fail(f, end.status, end.why, msg);
		return;
	}
	if (end.verdict == CS_RELAY_DONE) {
		if (end.last_len == 0 || cs__front_queue(f, end.last, end.last_len) == 0) {
			request_done(f, false);
			return;
		}
		end.cut_short = cs_relay_cut_short(&f->rl, code); /* the last chunk did not fit */
	}
	/* An upgraded stream, a body until close, or an answer cut short: the apiserver side
	 * closes right after the queued bytes, so nobody waits for a dead stream. */
	if (end.cut_short)
		f->srv->m.request_errors[CS_ERR_BAD_RESPONSE]++;
	access_end(f, 0, end.cut_short ? "cut short" : "done");
	if (f->h2r) {
		cs__h2_answer_end(f, end.cut_short);
		return;
	}
	f->state = CS_FRONT_CLOSING;
	lws_callback_on_writable(f->wsi);
}

static void ep_writable(struct cs_endpoint *ep)
{
	lws_callback_on_writable(front_of(ep)->wsi); /* input waiting for room is fed there */
}

static void ep_gone(struct cs_endpoint *ep, const char *why)
{
	struct cs_front *f = front_of(ep);
	char msg[512];
	snprintf(msg, sizeof msg, "edge node %s: %s", f->node, why);
	stream_over(f);
	if (f->state == CS_FRONT_CLOSING || f->state == CS_FRONT_HEAD)
		return;
	cs__request_fail(f, 0, CS_ERR_EDGE_GONE, msg);
}

static void ep_cut(struct cs_endpoint *ep)
{
	struct cs_front *f = front_of(ep);
	stream_over(f);
	/* Nothing more reaches that client: drop what waits for it and close. */
	size_t n = st_buf_len(&f->out);
	st_buf_cleanup(&f->out);
	cs_endpoint_dropped(&f->ep, n);
	if (f->h2r) {
		cs__h2_cut(f); /* RST_STREAM; the connection's other streams go on */
		return;
	}
	f->state = CS_FRONT_CLOSING;
	/* Reset, not close: a FIN queues behind the bytes in the socket that this client is not
	 * reading, so it would never learn that its stream broke (it would see an end that looks
	 * complete, if ever), and the kernel would keep the orphaned socket and its send buffer
	 * probing a zero window for about a minute. What the client already received it still
	 * reads, then the reset. */
	struct linger abort_on_close = {.l_onoff = 1, .l_linger = 0};
	int fd = lws_get_socket_fd(f->wsi);
	if (fd >= 0)
		(void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort_on_close, sizeof abort_on_close);
	lws_set_timeout(f->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
}

static void ep_info(const struct cs_endpoint *ep, struct cs_endpoint_info *out)
{
	const struct cs_front *f = lws_container_of(ep, struct cs_front, ep);
	out->kind = st_kubelet_kind_label(f->rl.plan.path.kind);
	out->method = f->acc.method;
	out->path = f->acc.path;
	out->caller = f->req_user ? f->req_user->name : f->cert_user ? f->cert_user->name : "-";
	out->started_ms = f->acc.started_ms;
	out->to_edge = f->acc.to_edge;
	out->to_client = f->acc.to_client;
}

const struct cs_endpoint_ops cs__front_endpoint_ops = {
        .data = ep_data,
        .end = ep_end,
        .writable = ep_writable,
        .gone = ep_gone,
        .cut = ep_cut,
        .info = ep_info,
};

static void on_answer_timeout(lws_sorted_usec_list_t *sul)
{
	struct cs_front *f = lws_container_of(sul, struct cs_front, sul_answer);
	if (f->state != CS_FRONT_WAIT)
		return;
	char msg[512];
	snprintf(msg, sizeof msg, "edge node %s did not answer within %llu ms", f->node,
	         (unsigned long long)f->srv->cfg.answer_timeout_ms);
	end_stream(f, true, ST_EXT_ERR_TIMEOUT, "no answer in time");
	cs__request_fail(f, 0, CS_ERR_TIMEOUT, msg);
}

/* ---- toward the edge ------------------------------------------------------------------- */

ssize_t cs__request_forward(struct cs_front *f, const uint8_t *p, size_t len)
{
	if (f->ep.tun == NULL)
		return f->rl.plan.upgrade ? (ssize_t)len : 0; /* stream over: upgraded bytes drop */
	if (cs_relay_request_done(&f->rl))
		return 0; /* what follows is the next request: it waits */
	size_t space = cs_stream_space(&f->ep);
	ssize_t b = cs_relay_request(&f->rl, p, len < space ? len : space);
	if (b < 0) {
		end_stream(f, true, ST_EXT_ERR_BAD_REQUEST, "malformed request body");
		cs__request_fail(f, 400, CS_ERR_BAD_REQUEST, "malformed chunked request body");
		return -1;
	}
	size_t take = (size_t)b;
	ssize_t w = cs_stream_write(&f->ep, p, take);
	if (w > 0)
		f->acc.to_edge += (uint64_t)w;
	/* The room, not the input, was the limit: nothing else wakes a connection whose input
	 * waits for room (an upload gets no answer bytes that would), so ask for ->writable. */
	if (w >= 0 && take == space && space < len && !cs_relay_request_done(&f->rl)) {
		f->srv->m.stream_stalls++;
		cs_stream_wait_writable(&f->ep);
	}
	if (w < 0) {
		end_stream(f, false, 0, NULL);
		cs__request_fail(f, 502, CS_ERR_EDGE_GONE, "the stream to the edge closed");
		return -1;
	}
	if (cs_relay_request_done(&f->rl))
		cs_stream_shutdown(&f->ep); /* HALF_CLOSE for our edges */
	return w;
}

/* ---- a new request --------------------------------------------------------------------- */

struct connect_args {
	const struct st_http_request *req;
	const char *edge_host;
};

/* The JSON connect request of stream @id, as KubeEdge's cloud writes it (exchange.h). */
static ssize_t connect_payload(uint64_t id, char *out, size_t cap, void *user)
{
	const struct connect_args *a = user;
	return cs_connect_json(a->req, id, a->edge_host, out, cap);
}

bool cs__request_start(struct cs_front *f, const struct st_http_request *req)
{
	struct cs_server *srv = f->srv;
	f->node[0] = '\0';
	cs__front_set_timeout(f, NO_PENDING_TIMEOUT, 0);
	const char *why;
	access_begin(f, req);
	int status = cs_relay_begin(&f->rl, req, &why); /* first: it sets the error form */
	/* Draining with peers: new requests are still served, by the node's tunnel while it is
	 * here (its edge is moving) or forwarded to its new holder; alone, refused. */
	if (srv->draining && srv->peers == NULL) {
		cs__request_fail(f, 0, CS_ERR_DRAINING, "cloudstream is shutting down; retry");
		return true;
	}
	if (status) {
		cs__request_fail(f, status, CS_ERR_BAD_REQUEST, why);
		return true;
	}
	int authn = cs__authz_authenticate(f, req);
	if (authn <= 0)
		return authn < 0; /* 0: waiting for a TokenReview */
	bool wait;
	struct cs_tunnel *t = cs__request_route(f, req, &wait);
	if (t == NULL)
		return !wait;
	if (!f->forwarded)
		snprintf(f->node, sizeof f->node, "%s", cs_tunnel_node(t));

	/* The one place a stream is admitted (budgets, stream limits): cs_stream_open. */
	char msg[512];
	/* A bearer token was ours to check: it is not passed on to the edge. */
	struct st_http_request stripped;
	if (srv->cfg.authentication_token_webhook &&
	    st_http_header_find(req->headers, req->num_headers, "Authorization", 0) >= 0) {
		stripped = *req;
		stripped.num_headers = 0;
		for (size_t i = 0; i < req->num_headers; i++)
			if (req->headers[i].name_len != 13 ||
			    strncasecmp(req->headers[i].name, "Authorization", 13) != 0)
				stripped.headers[stripped.num_headers++] = req->headers[i];
		req = &stripped;
	}
	struct connect_args ca = {.req = req, .edge_host = srv->cfg.edge_target_host};
	int rc = f->forwarded ? cs_peer_stream_open(t, f->node, &f->ep, f->rl.plan.connect_type,
	                                            connect_payload, &ca, msg, sizeof msg)
	                      : cs_stream_open(t, &f->ep, f->rl.plan.connect_type, connect_payload,
	                                       &ca, msg, sizeof msg);
	if (rc == -ENOSPC || rc == -EAGAIN) {
		cs__request_fail(f, 0, CS_ERR_LIMIT, msg);
		return true;
	}
	if (rc < 0) {
		cs__request_fail(f, cs_relay_connect_error(rc), CS_ERR_BAD_REQUEST,
		                 "request head cannot be carried to the edge (over the connect "
		                 "limits)");
		return true;
	}
	cs_relay_start(&f->rl, f->forwarded ? f->fwd_caps : cs_tunnel_caps(t));
	f->acc.sid = f->ep.sid;
	f->state = CS_FRONT_WAIT;
	f->started_ms = st_now_ms();
	f->counted_stream = true;
	srv->m.streams_total[f->rl.plan.path.kind]++;
	srv->m.streams_open[f->rl.plan.path.kind]++;
	if (cs_relay_request_done(&f->rl))
		cs_stream_shutdown(&f->ep);
	uint64_t deadline_ms = cs_relay_answer_timeout_ms(&f->rl, srv->cfg.answer_timeout_ms);
	if (deadline_ms)
		lws_sul_schedule(srv->ctx, 0, &f->sul_answer, on_answer_timeout,
		                 (lws_usec_t)deadline_ms * LWS_US_PER_MS);
	st_log(ST_LOG_DEBUG, f->node, f->ep.sid, "%.*s %.*s -> %s (%s)", (int)req->method_len,
	       req->method, (int)req->path_len, req->path,
	       st_msg_type_name(f->rl.plan.connect_type),
	       f->rl.mode == CS_RELAY_RAW ? "raw" : "body-only");
	return true;
}

void cs__request_pod_resolved(struct cs_front *f, bool ok)
{
	if (f->state != CS_FRONT_ROUTING)
		return;
	f->pod_lookup_ok = ok;
	f->state = CS_FRONT_HEAD;
	cs__front_process(f); /* parses the kept head again; the route now comes from the cache */
}

void cs__request_cleanup(struct cs_front *f)
{
	cs__request_unpark(f, CS_RECONNECT_CLIENT_GONE);
	retry_forget(f);
	access_end(f, 0, "client gone");
	stream_over(f);
	cs_endpoint_cleanup(&f->ep); /* REMOVE to the edge; what it held is credited */
	cs_relay_cleanup(&f->rl);
}
