/*
 * cloudstream/src/front.c — the stream server on :10350: kube-apiserver's kubelet-API requests
 * (lws raw TLS glue plus the request life cycle).
 *
 * A front is one apiserver connection. It reads a request head, routes it to a node's tunnel
 * (route.c), opens a stream with a JSON connect request and relays: request body or upgraded
 * bytes toward the edge, the answer back. It answers by itself only before the edge has
 * answered (Status JSON, then close), never adds a byte to a relayed answer, and tracks the
 * answer's framing so a plain request's connection serves the next request.
 *
 * Memory: the input buffer exists only while a head is incomplete or the stream cannot take
 * more; the output queue is bounded (flow control stops the edge, or pauses the tunnel for a
 * base-protocol edge). Loop thread only.
 */
#include "cs.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <linux/netfilter_ipv4.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <certs/certs.h>
#include <stream/chunked.h>
#include <stream/err.h>
#include <stream/frame.h>
#include <stream/log.h>
#include <stream/status.h>

#include "apiserver.h"
#include "reload.h"
#include "route.h"

#ifndef IP6T_SO_ORIGINAL_DST
#define IP6T_SO_ORIGINAL_DST 80
#endif

/* Input kept while a head is incomplete or the stream is full: a whole head plus the one read
 * lws may still deliver after we pause. */
#define FRONT_IN_CAP (ST_MAX_HTTP_HEAD_BYTES + 64u * 1024u)

static void front_process(struct cs_front *f);

static const char *front_node(const struct cs_front *f)
{
	return f->node[0] ? f->node : NULL;
}

/* ---- output toward the apiserver ------------------------------------------------------- */

static int out_append(struct cs_front *f, const void *p, size_t n)
{
	int rc = st_buf_append(&f->out, p, n);
	if (rc < 0)
		return rc;
	f->srv->buffered += n;
	if (f->tun)
		f->tun->buffered += n;
	lws_callback_on_writable(f->wsi);
	return 0;
}

static void on_stall_check(lws_sorted_usec_list_t *sul);

static void arm_stall_check(struct cs_front *f)
{
	lws_sul_schedule(lws_get_context(f->wsi), 0, &f->sul_stall, on_stall_check,
	                 (lws_usec_t)f->srv->cfg.stall_timeout_ms * LWS_US_PER_MS);
}

/* After bytes were appended: with a base-protocol edge a full queue pauses the tunnel, and the
 * stall check starts. */
static void out_check_high(struct cs_front *f)
{
	struct cs_tunnel *t = f->tun;
	if (t == NULL)
		return;
	if (!(t->caps & ST_CAP_FLOW) && !f->blocking_tunnel && st_buf_above_high(&f->out)) {
		f->blocking_tunnel = true;
		t->blocking_fronts++;
		f->srv->m.stream_stalls++;
		arm_stall_check(f);
	}
	cs_tunnel_update_rx(t);
}

static void unblock_tunnel(struct cs_front *f)
{
	lws_sul_cancel(&f->sul_stall);
	if (f->blocking_tunnel && f->tun) {
		f->tun->blocking_fronts--;
		cs_tunnel_update_rx(f->tun);
	}
	f->blocking_tunnel = false;
}

/* ---- the stream ------------------------------------------------------------------------ */

static void tun_link(struct cs_front *f, struct cs_tunnel *t)
{
	f->tun = t;
	f->tprev = NULL;
	f->tnext = t->fronts;
	if (t->fronts)
		t->fronts->tprev = f;
	t->fronts = f;
	t->buffered += st_buf_len(&f->out);
}

/* Forgets the stream; with @send_close the edge gets REMOVE (@code 0) or ERROR. */
static void detach(struct cs_front *f, bool send_close, uint64_t code, const char *reason)
{
	struct cs_tunnel *t = f->tun;
	lws_sul_cancel(&f->sul_answer);
	if (f->counted_stream) {
		f->srv->m.streams_open[f->plan.path.kind]--;
		f->srv->n_streams--;
		f->counted_stream = false;
	}
	if (t == NULL)
		return;
	unblock_tunnel(f);
	if (f->sid) {
		st_session_set_stream_user(t->sess, f->sid, NULL);
		if (send_close)
			st_session_close(t->sess, f->sid, code, reason);
		cs_tunnel_kick(t);
	}
	if (f->credit_debt)
		f->credit_debt = 0;
	t->buffered -= st_buf_len(&f->out);
	if (f->tprev)
		f->tprev->tnext = f->tnext;
	else
		t->fronts = f->tnext;
	if (f->tnext)
		f->tnext->tprev = f->tprev;
	f->tnext = f->tprev = NULL;
	f->tun = NULL;
	f->sid = 0;
	cs_tunnel_update_rx(t);
}

/* ---- answers of our own ---------------------------------------------------------------- */

static const char *const err_reason_names[CS_ERR_COUNT] = {
        [CS_ERR_BAD_REQUEST] = "bad_request",   [CS_ERR_NO_ROUTE] = "no_route",
        [CS_ERR_NO_SESSION] = "no_session",     [CS_ERR_LIMIT] = "limit",
        [CS_ERR_EDGE_REFUSED] = "edge_refused", [CS_ERR_EDGE_GONE] = "edge_gone",
        [CS_ERR_TIMEOUT] = "timeout",           [CS_ERR_BAD_RESPONSE] = "bad_response",
        [CS_ERR_DRAINING] = "draining",
};

const char *cs_err_reason_name(enum cs_err_reason r)
{
	return r < CS_ERR_COUNT ? err_reason_names[r] : "unknown";
}

/* Ends the request with an error: an answer of our own if nothing was written yet (a Status,
 * or for kube-apiserver's pods/log client the text and a status it shows: f->plan.err_form),
 * then close. */
static void fail(struct cs_front *f, int http_status, enum cs_err_reason why, const char *message)
{
	f->srv->m.request_errors[why]++;
	st_log(why == CS_ERR_BAD_REQUEST ? ST_LOG_INFO : ST_LOG_WARN, front_node(f), f->sid,
	       "request failed (%s): %s%s", cs_err_reason_name(why), message,
	       f->wrote_any ? "; answer cut short" : "");
	if (!f->wrote_any) {
		char buf[ST_MAX_STATUS_JSON_BYTES + 256];
		ssize_t n = st_http_error_answer(buf, sizeof buf, f->plan.err_form, http_status,
		                                 message);
		if (n > 0 && out_append(f, buf, (size_t)n) == 0)
			f->wrote_any = true;
	}
	f->state = CS_FRONT_CLOSING;
	f->keep_alive = false;
	lws_callback_on_writable(f->wsi);
}

/* The answer is complete: the stream ends; the connection serves the next request or closes. */
static void request_done(struct cs_front *f, bool send_remove)
{
	detach(f, send_remove, 0, NULL);
	/* A body the backend did not wait for leaves the connection out of sync: close it. */
	bool again = f->keep_alive && f->req_body.done &&
	             (f->mode == CS_MODE_BODY_ONLY || f->resp.keep_alive);
	cs_resp_cleanup(&f->resp);
	if (!again) {
		f->state = CS_FRONT_CLOSING;
	} else {
		f->state = CS_FRONT_HEAD;
		f->node[0] = '\0';
		f->plan.err_form = ST_ERROR_FORM_STATUS;
		lws_set_timeout(f->wsi, PENDING_TIMEOUT_HTTP_KEEPALIVE_IDLE,
		                (int)(f->srv->cfg.idle_timeout_ms / 1000));
	}
	/* Pipelined input and the close are handled from WRITEABLE, outside the session. */
	lws_callback_on_writable(f->wsi);
}

/* ---- from the edge --------------------------------------------------------------------- */

static void answer_started(struct cs_front *f)
{
	if (f->state == CS_FRONT_WAIT) {
		f->state = CS_FRONT_RESPONSE;
		lws_sul_cancel(&f->sul_answer);
	}
}

int cs_front_on_data(struct cs_front *f, const uint8_t *p, size_t len)
{
	if (f->state != CS_FRONT_WAIT && f->state != CS_FRONT_RESPONSE)
		return 0;
	f->credit_debt += len;
	answer_started(f);
	if (f->mode == CS_MODE_BODY_ONLY) {
		/* A base-protocol edge relays only the body: frame it as the kubelet would. */
		if (!f->wrote_any) {
			static const char head[] = "HTTP/1.1 200 OK\r\n"
			                           "Content-Type: text/plain; charset=utf-8\r\n"
			                           "Transfer-Encoding: chunked\r\n\r\n";
			if (out_append(f, head, sizeof head - 1) < 0)
				return -ENOMEM;
			f->wrote_any = true;
		}
		if (len == 0)
			return 0;
		char ch[ST_CHUNK_HEADER_MAX_BYTES];
		ssize_t h = st_chunked_encode_header(ch, sizeof ch, len);
		if (h < 0 || out_append(f, ch, (size_t)h) < 0 || out_append(f, p, len) < 0 ||
		    out_append(f, ST_CHUNK_TRAILER, 2) < 0) {
			fail(f, 502, CS_ERR_BAD_RESPONSE, "answer over the stream's buffer limit");
			detach(f, true, ST_EXT_ERR_LIMIT, "buffer limit");
			return 0;
		}
		out_check_high(f);
		return 0;
	}
	ssize_t n = cs_resp_feed(&f->resp, p, len);
	if (n < 0) {
		fail(f, 502, CS_ERR_BAD_RESPONSE,
		     "the edge's backend sent a malformed HTTP response");
		detach(f, true, ST_EXT_ERR_PROTOCOL, "malformed response");
		return 0;
	}
	if (n > 0) {
		if (out_append(f, p, (size_t)n) < 0) {
			fail(f, 502, CS_ERR_BAD_RESPONSE, "answer over the stream's buffer limit");
			detach(f, true, ST_EXT_ERR_LIMIT, "buffer limit");
			return 0;
		}
		f->wrote_any = true;
		out_check_high(f);
	}
	if ((size_t)n < len)
		st_log(ST_LOG_DEBUG, front_node(f), f->sid, "%zu bytes after the response dropped",
		       len - (size_t)n);
	if (cs_resp_done(&f->resp))
		request_done(f, true);
	return 0;
}

void cs_front_on_stream_end(struct cs_front *f, uint64_t code, const char *reason, size_t len)
{
	detach(f, false, 0, NULL); /* the session has forgotten the stream already */
	if (f->state == CS_FRONT_CLOSING || f->state == CS_FRONT_HEAD)
		return;
	if (!f->wrote_any) {
		char msg[ST_MAX_ERROR_REASON_BYTES + 256];
		if (code == 0) {
			snprintf(msg, sizeof msg,
			         "edge node %s closed the stream without answering", f->node);
			fail(f, 502, CS_ERR_EDGE_REFUSED, msg);
		} else {
			snprintf(msg, sizeof msg, "edge node %s: %s: %.*s", f->node,
			         st_ext_error_name(code), (int)(len > 1024 ? 1024 : len), reason);
			enum cs_err_reason why =
			        code == ST_EXT_ERR_TIMEOUT ? CS_ERR_TIMEOUT : CS_ERR_EDGE_REFUSED;
			fail(f, st_ext_error_http_status(code), why, msg);
		}
		return;
	}
	if (f->mode == CS_MODE_BODY_ONLY) {
		if (code == 0 && out_append(f, ST_CHUNK_LAST, sizeof ST_CHUNK_LAST - 1) == 0) {
			request_done(f, false);
			return;
		}
	} else if (cs_resp_done(&f->resp)) {
		request_done(f, false);
		return;
	}
	/* An upgraded stream, a body until close, or an answer cut short: the apiserver side
	 * closes right after the queued bytes, so nobody waits for a dead stream. */
	if (code != 0 || (!f->resp.upgraded && f->resp.body.kind != ST_HTTP_BODY_UNTIL_CLOSE))
		f->srv->m.request_errors[CS_ERR_BAD_RESPONSE]++;
	f->state = CS_FRONT_CLOSING;
	lws_callback_on_writable(f->wsi);
}

void cs_front_on_tunnel_gone(struct cs_front *f, const char *why)
{
	char msg[512];
	snprintf(msg, sizeof msg, "edge node %s: %s", f->node, why);
	detach(f, false, 0, NULL);
	if (f->state == CS_FRONT_CLOSING || f->state == CS_FRONT_HEAD)
		return;
	fail(f, 502, CS_ERR_EDGE_GONE, msg);
}

void cs_front_pod_resolved(struct cs_front *f, bool ok, long http_status)
{
	(void)http_status;
	if (f->state != CS_FRONT_ROUTING)
		return;
	f->pod_lookup_ok = ok;
	f->state = CS_FRONT_HEAD;
	front_process(f); /* parses the kept head again; the route now comes from the cache */
}

/*
 * Base protocol: this stream's full queue has had the whole tunnel paused (no per-stream
 * credit) for --stall-timeout without draining to its low mark, and every other stream of the
 * node waited with it: cut it (its connection closed, REMOVE to the edge) and read the tunnel
 * again. What counts is how long the others wait, not whether this client still trickles: a
 * reader that drains its queue within the stall time is never cut.
 */
static void on_stall_check(lws_sorted_usec_list_t *sul)
{
	struct cs_front *f = lws_container_of(sul, struct cs_front, sul_stall);
	struct cs_server *srv = f->srv;
	if (!f->blocking_tunnel || f->tun == NULL)
		return;
	srv->m.stall_cuts++;
	st_log(srv->m.stall_cuts == 1 ? ST_LOG_WARN : ST_LOG_INFO, front_node(f), f->sid,
	       "stream cut: the tunnel to this base-protocol edge was paused for it for %llu ms "
	       "and its apiserver connection did not drain it (--stall-timeout; counted in "
	       "cloudstream_stream_stall_cuts_total)",
	       (unsigned long long)srv->cfg.stall_timeout_ms);
	detach(f, true, ST_EXT_ERR_TIMEOUT, "the apiserver side stopped reading");
	/* Nothing more reaches that client: drop what waits for it and close. */
	srv->buffered -= st_buf_len(&f->out);
	st_buf_cleanup(&f->out);
	f->state = CS_FRONT_CLOSING;
	f->keep_alive = false;
	lws_set_timeout(f->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
	cs_server_budget_changed(srv);
}

void cs_front_on_writable(struct cs_front *f)
{
	lws_callback_on_writable(f->wsi); /* input waiting for room is fed from WRITEABLE */
}

static void on_answer_timeout(lws_sorted_usec_list_t *sul)
{
	struct cs_front *f = lws_container_of(sul, struct cs_front, sul_answer);
	if (f->state != CS_FRONT_WAIT)
		return;
	char msg[512];
	snprintf(msg, sizeof msg, "edge node %s did not answer within %llu ms", f->node,
	         (unsigned long long)f->srv->cfg.answer_timeout_ms);
	detach(f, true, ST_EXT_ERR_TIMEOUT, "no answer in time");
	fail(f, 504, CS_ERR_TIMEOUT, msg);
}

/* ---- toward the edge ------------------------------------------------------------------- */

/* Request bytes (body or upgraded stream) into the stream. Returns bytes taken (0: the stream
 * is full or the body has ended), or -1 after failing the request. */
static ssize_t forward(struct cs_front *f, const uint8_t *p, size_t len)
{
	struct cs_tunnel *t = f->tun;
	if (t == NULL || f->sid == 0)
		return f->plan.upgrade ? (ssize_t)len : 0; /* stream over: upgraded bytes drop */
	if (!f->plan.upgrade && f->req_body.done)
		return 0; /* what follows is the next request: it waits */
	size_t space = st_session_write_space(t->sess, f->sid);
	size_t take = len < space ? len : space;
	if (!f->plan.upgrade) {
		ssize_t b = cs_body_feed(&f->req_body, p, take);
		if (b < 0) {
			detach(f, true, ST_EXT_ERR_BAD_REQUEST, "malformed request body");
			fail(f, 400, CS_ERR_BAD_REQUEST, "malformed chunked request body");
			return -1;
		}
		take = (size_t)b;
	}
	ssize_t w = take ? st_session_write(t->sess, f->sid, p, take) : 0;
	/* The room, not the input, was the limit: nothing else wakes a connection whose input
	 * waits for room (an upload gets no answer bytes that would), so ask for on_writable. */
	if (w >= 0 && take == space && space < len && (f->plan.upgrade || !f->req_body.done)) {
		f->srv->m.stream_stalls++;
		st_session_notify_writable(t->sess, f->sid);
	}
	if (w < 0) {
		detach(f, false, 0, NULL);
		fail(f, 502, CS_ERR_EDGE_GONE, "the stream to the edge closed");
		return -1;
	}
	f->srv->m.bytes_to_edge += (uint64_t)w;
	if (!f->plan.upgrade && f->req_body.done)
		st_session_shutdown(t->sess, f->sid); /* HALF_CLOSE for our edges */
	cs_tunnel_kick(t);
	return w;
}

/* ---- a new request --------------------------------------------------------------------- */

static void *lookup_by_ip(const char *ip, size_t len, const char **node, void *user)
{
	return cs_registry_get_by_ip(((struct cs_server *)user)->reg, ip, len, node);
}

static void *lookup_by_name(const char *name, size_t len, void *user)
{
	return cs_registry_get(((struct cs_server *)user)->reg, name, len);
}

static void header_view(const struct st_http_request *req, const char *name, const char **p,
                        size_t *len)
{
	ssize_t i = st_http_header_find(req->headers, req->num_headers, name, 0);
	*p = i >= 0 ? req->headers[i].value : NULL;
	*len = i >= 0 ? req->headers[i].value_len : 0;
}

static int lookup_pod(const char *ns, size_t ns_len, const char *pod, size_t pod_len,
                      const char **node, size_t *node_len, void *user)
{
	struct cs_server *srv = user;
	return cs_podcache_get(srv->pods, ns, ns_len, pod, pod_len, cs_now_ms(), node, node_len);
}

/* Starts @req (a view into f->in). Returns false when it must wait for a pod lookup: the head
 * then stays in f->in and is parsed again once the answer is in. */
static bool start_request(struct cs_front *f, const struct st_http_request *req)
{
	struct cs_server *srv = f->srv;
	f->wrote_any = false;
	f->node[0] = '\0';
	lws_set_timeout(f->wsi, NO_PENDING_TIMEOUT, 0);
	const char *why;
	int status = cs_plan_request(req, &f->plan, &why); /* first: it sets plan.err_form */
	if (srv->draining) {
		fail(f, 503, CS_ERR_DRAINING, "cloudstream is shutting down; retry");
		return true;
	}
	if (status) {
		fail(f, status, CS_ERR_BAD_REQUEST, why);
		return true;
	}
	f->keep_alive = f->plan.keep_alive;

	struct cs_route_input in = {0};
	if (f->orig_dst[0]) {
		in.orig_dst_ip = f->orig_dst;
		in.orig_dst_ip_len = strlen(f->orig_dst);
	}
	header_view(req, "Host", &in.host, &in.host_len);
	header_view(req, "X-Forwarded-Uri", &in.forwarded_uri, &in.forwarded_uri_len);
	if (f->plan.path.kind != ST_KUBELET_OTHER) {
		in.pod_namespace = f->plan.path.namespace_.p;
		in.pod_namespace_len = f->plan.path.namespace_.len;
		in.pod_name = f->plan.path.pod.p;
		in.pod_name_len = f->plan.path.pod.len;
	}
	struct cs_route_lookup lk = {.by_ip = lookup_by_ip,
	                             .by_name = lookup_by_name,
	                             .pod_node = srv->pods ? lookup_pod : NULL,
	                             .user = srv};
	struct cs_route_result r;
	if (cs_route_resolve(&in, &lk, &r) < 0) {
		fail(f, 400, CS_ERR_BAD_REQUEST,
		     "malformed routing header (Host or X-Forwarded-Uri)");
		return true;
	}
	snprintf(f->node, sizeof f->node, "%s", r.node);
	char msg[512];
	if (r.need_pod_lookup && !f->pod_looked_up) {
		f->pod_looked_up = true;
		int rc = cs_pod_lookup_start(srv, f->ordinal, in.pod_namespace,
		                             in.pod_namespace_len, in.pod_name, in.pod_name_len);
		if (rc == 0) {
			f->state = CS_FRONT_ROUTING;
			return false;
		}
		f->pod_lookup_ok = false;
	}
	if (r.node[0] == '\0') {
		if (f->pod_looked_up && !f->pod_lookup_ok) {
			snprintf(msg, sizeof msg,
			         "cloudstream could not ask the apiserver which node runs pod "
			         "%.*s/%.*s",
			         (int)in.pod_namespace_len, in.pod_namespace, (int)in.pod_name_len,
			         in.pod_name);
			fail(f, 503, CS_ERR_NO_ROUTE, msg);
			return true;
		}
		fail(f, 503, CS_ERR_NO_ROUTE,
		     "cloudstream cannot tell which edge node this request is for (no DNAT'd "
		     "destination, node Host or X-Forwarded-Uri)");
		return true;
	}
	struct cs_tunnel *t = r.session;
	if (t == NULL) {
		snprintf(msg, sizeof msg,
		         "edge node %s is not connected to this cloudstream (no tunnel session)",
		         r.node);
		fail(f, 503, CS_ERR_NO_SESSION, msg);
		return true;
	}
	snprintf(f->node, sizeof f->node, "%s", t->node);
	ssize_t jn = cs_connect_json(req, t->next_stream_id, srv->cfg.edge_target_host,
	                             srv->scratch, ST_MAX_CONNECT_JSON_BYTES);
	if (jn < 0) {
		fail(f, jn == -EMSGSIZE ? 431 : 400, CS_ERR_BAD_REQUEST,
		     "request head cannot be carried to the edge (over the connect limits)");
		return true;
	}
	if ((t->caps & ST_CAP_FLOW) && (t->buffered >= srv->cfg.session_buffer_bytes ||
	                                srv->buffered >= srv->cfg.process_buffer_bytes)) {
		/* With credit flow control a budget never pauses the tunnel (that would hold up
		 * every stream of the node, and its liveness): it refuses new streams until the
		 * apiserver connections that do not read have gone or drained. */
		bool node = t->buffered >= srv->cfg.session_buffer_bytes;
		snprintf(msg, sizeof msg,
		         "edge node %s: %llu bytes are queued toward apiserver connections that do "
		         "not read (the %s budget is %llu bytes); try again later",
		         t->node, (unsigned long long)(node ? t->buffered : srv->buffered),
		         node ? "node's" : "process's",
		         (unsigned long long)(node ? srv->cfg.session_buffer_bytes
		                                   : srv->cfg.process_buffer_bytes));
		fail(f, 503, CS_ERR_LIMIT, msg);
		return true;
	}
	uint64_t sid = t->next_stream_id;
	int rc = srv->n_streams >= srv->cfg.max_streams
	                 ? -EAGAIN
	                 : st_session_open(t->sess, sid, f->plan.connect_type,
	                                   (const uint8_t *)srv->scratch, (size_t)jn);
	if (rc < 0) {
		snprintf(msg, sizeof msg, "edge node %s: too many streams open (%s)", t->node,
		         st_strerror(rc));
		fail(f, 503, CS_ERR_LIMIT, msg);
		return true;
	}
	t->next_stream_id++;
	st_session_set_stream_user(t->sess, sid, f);
	f->sid = sid;
	tun_link(f, t);
	f->mode = (f->plan.connect_type == ST_MSG_LOGS_CONNECT ||
	           f->plan.connect_type == ST_MSG_METRIC_CONNECT) &&
	                          !(t->caps & ST_CAP_RAW_RESPONSE)
	                  ? CS_MODE_BODY_ONLY
	                  : CS_MODE_RAW;
	cs_body_init(&f->req_body, f->plan.body, f->plan.body_length);
	cs_resp_init(&f->resp, f->plan.is_head);
	f->credit_debt = 0;
	f->state = CS_FRONT_WAIT;
	f->started_ms = cs_now_ms();
	f->counted_stream = true;
	srv->n_streams++;
	srv->m.streams_total[f->plan.path.kind]++;
	srv->m.streams_open[f->plan.path.kind]++;
	if (!f->plan.upgrade && f->req_body.done)
		st_session_shutdown(t->sess, sid);
	/* A quiet `logs -f` through a base edge sends nothing until a line appears: no deadline. */
	if (!(f->mode == CS_MODE_BODY_ONLY && f->plan.follow))
		lws_sul_schedule(srv->ctx, 0, &f->sul_answer, on_answer_timeout,
		                 (lws_usec_t)srv->cfg.answer_timeout_ms * LWS_US_PER_MS);
	st_log(ST_LOG_DEBUG, t->node, sid, "%.*s %.*s -> %s (%s)", (int)req->method_len,
	       req->method, (int)req->path_len, req->path, st_msg_type_name(f->plan.connect_type),
	       f->mode == CS_MODE_RAW ? "raw" : "body-only");
	cs_tunnel_kick(t);
	return true;
}

/* ---- input ----------------------------------------------------------------------------- */

static void in_consume(struct cs_front *f, size_t n)
{
	memmove(f->in, f->in + n, f->in_len - n);
	f->in_len -= n;
	if (f->in_len == 0) {
		free(f->in); /* idle connections hold no buffer */
		f->in = NULL;
	}
}

static int in_append(struct cs_front *f, const uint8_t *p, size_t n)
{
	if (n > FRONT_IN_CAP - f->in_len)
		return -EMSGSIZE;
	if (f->in == NULL) {
		f->in = malloc(FRONT_IN_CAP);
		if (f->in == NULL)
			return -ENOMEM;
	}
	memcpy(f->in + f->in_len, p, n);
	f->in_len += n;
	return 0;
}

static void update_rx(struct cs_front *f)
{
	/* Read while a head is incomplete; stop while input waits for the stream or the next
	 * request waits for this answer, and once we are closing. */
	bool pause = f->state == CS_FRONT_CLOSING || (f->state != CS_FRONT_HEAD && f->in_len > 0);
	if (pause == f->rx_paused)
		return;
	f->rx_paused = pause;
	lws_rx_flow_control(f->wsi, pause ? 0 : 1);
}

static void front_process(struct cs_front *f)
{
	while (f->in_len > 0) {
		if (f->state == CS_FRONT_HEAD) {
			struct st_http_request req;
			f->plan.err_form = ST_ERROR_FORM_STATUS; /* until this head is planned */
			ssize_t n = st_http_parse_request(f->in, f->in_len, &req);
			if (n == 0 && f->in_len < ST_MAX_HTTP_HEAD_BYTES)
				break;
			if (n <= 0) {
				bool big = n == 0 || n == -EMSGSIZE;
				fail(f, big ? 431 : 400, CS_ERR_BAD_REQUEST,
				     big ? "request head too large"
				         : "malformed HTTP request head");
				break;
			}
			if (!start_request(f, &req))
				break; /* waiting for the apiserver: the head stays in f->in */
			f->pod_looked_up = false;
			in_consume(f, (size_t)n); /* start_request copied what it keeps */
			continue;
		}
		if (f->state != CS_FRONT_WAIT && f->state != CS_FRONT_RESPONSE)
			break;
		ssize_t used = forward(f, f->in, f->in_len);
		if (used <= 0)
			break;
		in_consume(f, (size_t)used);
	}
	if (f->state == CS_FRONT_CLOSING && f->in_len > 0)
		in_consume(f, f->in_len); /* nothing more will be read */
	update_rx(f);
}

static int front_rx(struct cs_front *f, const uint8_t *p, size_t len)
{
	if (f->state == CS_FRONT_CLOSING)
		return 0;
	if (f->in_len == 0 && f->state != CS_FRONT_HEAD) {
		/* Relaying: straight into the stream, keeping only what does not fit. */
		ssize_t used = forward(f, p, len);
		if (used < 0)
			return 0;
		p += used;
		len -= (size_t)used;
	}
	if (len == 0)
		return 0;
	if (in_append(f, p, len) < 0) {
		fail(f, 431, CS_ERR_BAD_REQUEST, "request head too large");
		update_rx(f);
		return 0;
	}
	front_process(f);
	return 0;
}

/* ---- connection ------------------------------------------------------------------------ */

static void find_orig_dst(struct cs_front *f)
{
	int fd = lws_get_socket_fd(f->wsi);
	struct sockaddr_storage orig, local;
	socklen_t olen = sizeof orig, llen = sizeof local;
	memset(&orig, 0, sizeof orig);
	bool got = getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &orig, &olen) == 0;
	if (!got) {
		olen = sizeof orig;
		got = getsockopt(fd, SOL_IPV6, IP6T_SO_ORIGINAL_DST, &orig, &olen) == 0;
	}
	if (!got || getsockname(fd, (struct sockaddr *)&local, &llen) != 0)
		return; /* no conntrack entry: not DNAT'd (or no netfilter) */
	char o[INET6_ADDRSTRLEN] = "", l[INET6_ADDRSTRLEN] = "";
	if (orig.ss_family == AF_INET)
		inet_ntop(AF_INET, &((struct sockaddr_in *)&orig)->sin_addr, o, sizeof o);
	else if (orig.ss_family == AF_INET6)
		inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&orig)->sin6_addr, o, sizeof o);
	if (local.ss_family == AF_INET)
		inet_ntop(AF_INET, &((struct sockaddr_in *)&local)->sin_addr, l, sizeof l);
	else if (local.ss_family == AF_INET6)
		inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&local)->sin6_addr, l, sizeof l);
	/* An IPv4 peer on a dual-stack socket shows up as ::ffff:a.b.c.d. */
	const char *lp = strncmp(l, "::ffff:", 7) == 0 ? l + 7 : l;
	if (o[0] && strcmp(o, lp) != 0)
		snprintf(f->orig_dst, sizeof f->orig_dst, "%s", o);
}

/* The client certificate passed the CA check in the handshake; apply the subject allow-list. */
static bool client_allowed(struct cs_front *f)
{
	SSL *ssl = lws_get_ssl(f->wsi);
	X509 *x = ssl ? SSL_get_peer_certificate(ssl) : NULL;
	if (x == NULL || SSL_get_verify_result(ssl) != X509_V_OK) {
		X509_free(x);
		return false;
	}
	const struct st_strlist *allow = &f->srv->cfg.stream_allowed_subjects;
	if (allow->n == 0) {
		X509_free(x);
		return true;
	}
	struct certs_identity id;
	int rc = certs_x509_identity(x, &id);
	X509_free(x);
	if (rc < 0)
		return false;
	for (size_t i = 0; i < allow->n; i++) {
		const char *a = allow->v[i];
		if (strncmp(a, "O=", 2) == 0) {
			for (size_t k = 0; k < id.num_orgs; k++)
				if (strcmp(id.orgs[k], a + 2) == 0)
					return true;
		} else if (strcmp(id.cn, strncmp(a, "CN=", 3) == 0 ? a + 3 : a) == 0) {
			return true;
		}
	}
	char peer[64] = "";
	lws_get_peer_simple(f->wsi, peer, sizeof peer);
	st_log(ST_LOG_WARN, NULL, 0, "stream client %s refused: CN \"%s\" not in the allow-list",
	       peer, id.cn);
	return false;
}

static void front_closed(struct cs_front *f)
{
	struct cs_server *srv = f->srv;
	detach(f, true, 0, NULL);
	lws_sul_cancel(&f->sul_stall);
	cs_resp_cleanup(&f->resp);
	srv->buffered -= st_buf_len(&f->out);
	st_buf_cleanup(&f->out);
	free(f->in);
	if (f->aprev)
		f->aprev->anext = f->anext;
	else
		srv->fronts = f->anext;
	if (f->anext)
		f->anext->aprev = f->aprev;
	srv->n_fronts--;
	free(f);
	cs_server_budget_changed(srv);
	cs_maybe_finish_drain(srv);
}

static int front_writeable(struct cs_front *f)
{
	struct cs_server *srv = f->srv;
	if (f->in_len > 0 && f->state != CS_FRONT_CLOSING)
		front_process(f);
	update_rx(f);
	const uint8_t *p;
	size_t n = st_buf_peek(&f->out, &p);
	if (n > 0) {
		memcpy(srv->tx + LWS_PRE, p, n);
		if (lws_write(f->wsi, srv->tx + LWS_PRE, n, LWS_WRITE_RAW) < 0)
			return -1;
		st_buf_consume(&f->out, n);
		srv->buffered -= n;
		if (f->tun) {
			f->tun->buffered -= n;
			if (f->credit_debt && f->sid) {
				size_t c = n < f->credit_debt ? n : (size_t)f->credit_debt;
				f->credit_debt -= c;
				st_session_consumed(f->tun->sess, f->sid, c);
				cs_tunnel_kick(f->tun);
			}
			if (f->blocking_tunnel && st_buf_below_low(&f->out))
				unblock_tunnel(f);
			else
				cs_tunnel_update_rx(f->tun);
		}
		cs_server_budget_changed(srv);
	}
	if (st_buf_len(&f->out) > 0) {
		lws_callback_on_writable(f->wsi);
		return 0;
	}
	if (f->state == CS_FRONT_CLOSING) {
		SSL *ssl = lws_get_ssl(f->wsi);
		if (ssl)
			SSL_shutdown(ssl); /* close_notify, so the apiserver reads a clean end */
		return -1;
	}
	return 0;
}

void cs_front_drain_idle(struct cs_server *srv)
{
	for (struct cs_front *f = srv->fronts; f; f = f->anext)
		if (f->state == CS_FRONT_HEAD && f->in_len == 0) {
			f->state = CS_FRONT_CLOSING;
			lws_callback_on_writable(f->wsi);
		}
}

static int cb_front(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                    size_t len)
{
	if (reason == LWS_CALLBACK_OPENSSL_PERFORM_CLIENT_CERT_VERIFICATION)
		return !len; /* fail closed (libwebsockets-notes §1); wsi is NULL here */
	if (reason == LWS_CALLBACK_OPENSSL_LOAD_EXTRA_SERVER_VERIFY_CERTS) {
		struct lws_vhost *vh = in;
		cs_reload_note_ctx(lws_get_vhost_user(vh), lws_get_vhost_name(vh), user);
		return 0;
	}
	struct cs_server *srv = lws_context_user(lws_get_context(wsi));
	struct cs_front **slot = user;
	struct cs_front *f = slot ? *slot : NULL;
	switch (reason) {
	case LWS_CALLBACK_RAW_ADOPT:
		f = calloc(1, sizeof *f);
		if (f == NULL)
			return -1;
		f->srv = srv;
		f->wsi = wsi;
		f->ordinal = ++srv->next_ordinal;
		f->state = CS_FRONT_HEAD;
		/* Room for a whole window (flow control) or the high mark plus one tunnel message
		 * (base protocol, which pauses the tunnel above the high mark). */
		st_buf_init(&f->out, (size_t)srv->cfg.stream_window_bytes +
		                             ST_RELAY_HIGH_WATER_BYTES + ST_MAX_MESSAGE_BYTES +
		                             4096);
		st_buf_set_watermarks(&f->out, ST_RELAY_HIGH_WATER_BYTES, ST_RELAY_LOW_WATER_BYTES);
		f->anext = srv->fronts;
		if (srv->fronts)
			srv->fronts->aprev = f;
		srv->fronts = f;
		srv->n_fronts++;
		srv->m.fronts_total++;
		*slot = f;
		return 0;
	case LWS_CALLBACK_RAW_RX:
		if (f == NULL)
			return -1;
		if (!f->verified) {
			if (!client_allowed(f)) {
				srv->m.fronts_refused_tls++;
				return -1;
			}
			f->verified = true;
			find_orig_dst(f);
			/* lws arms a 5 s timer at the handshake; ours is the idle/head timeout. */
			lws_set_timeout(wsi, PENDING_TIMEOUT_HTTP_KEEPALIVE_IDLE,
			                (int)(srv->cfg.idle_timeout_ms / 1000));
		}
		return front_rx(f, in, len);
	case LWS_CALLBACK_RAW_WRITEABLE:
		return f ? front_writeable(f) : -1;
	case LWS_CALLBACK_RAW_CLOSE:
		if (f) {
			front_closed(f);
			*slot = NULL;
		}
		return 0;
	default:
		return 0;
	}
}

const struct lws_protocols cs_front_protocols[2] = {
        {
                .name = "cs-stream",
                .callback = cb_front,
                .per_session_data_size = sizeof(struct cs_front *),
                .rx_buffer_size = 16384,
        },
        {0}, /* terminator */
};
