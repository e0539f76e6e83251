/*
 * cloudstream/src/door_conn.c — the CONNECT on a front-door connection (door.h, door_int.h):
 * the head, the TCP_CONNECT stream as a stream endpoint (tunnel.h) once door_route.c has
 * found the node, the 200 at the edge's OPENED or an error answer with its reason phrase, then
 * the relay both ways.
 *
 * Bounds: the head is read into at most CS_DOOR_MAX_HEAD_BYTES; afterwards the input holds at
 * most what one read brings past the stream's room (reading pauses while anything waits); the
 * output toward the apiserver holds what the edge's credit allows (the stream's window). Every
 * CONNECT is answered within --front-door-dial-timeout. Loop thread only.
 */
#include "peer.h"
#include "door_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stream/err.h>
#include <stream/log.h>

const char *const cs__door_result_names[DOOR_R_COUNT] = {
        "ok",    "bad_request",  "forbidden", "no_route",  "no_session", "base_edge",
        "limit", "edge_refused", "timeout",   "edge_gone", "draining",
};

/* ---- the answer and the access log ---------------------------------------------------- */

void cs__door_access_line(struct door *d, const char *outcome)
{
	if (d->logged || d->target[0] == '\0')
		return;
	d->logged = true;
	if (!d->srv->cfg.access_log) /* --access-log off */
		return;
	st_log(ST_LOG_INFO, d->node[0] ? d->node : NULL, d->ep.sid,
	       "access: CONNECT %s %d %s caller=%s to_edge=%llu to_client=%llu %llu ms%s%.0llu%s",
	       d->target, d->status, outcome, d->caller[0] ? d->caller : "-",
	       (unsigned long long)d->to_edge, (unsigned long long)d->to_client,
	       (unsigned long long)(st_now_ms() - d->started_ms),
	       d->rc_waited_ms ? " waited_for_node=" : "", (unsigned long long)d->rc_waited_ms,
	       d->rc_waited_ms ? " ms" : "");
}

static int queue_out(struct door *d, const void *p, size_t n)
{
	int rc = st_buf_append(&d->out, p, n);
	if (rc < 0)
		return rc;
	d->to_client += n;
	cs_endpoint_queued(&d->ep, n);
	lws_callback_on_writable(d->wsi);
	return 0;
}

void cs__door_update_rx(struct door *d)
{
	/* Read while the head is incomplete; stop while input waits for the stream's room, and
	 * once closing. */
	bool pause = d->state == DOOR_CLOSING || (d->state != DOOR_HEAD && d->in_len > 0);
	if (pause == d->rx_paused)
		return;
	d->rx_paused = pause;
	lws_rx_flow_control(d->wsi, pause ? 0 : 1);
}

/* Our own answer before the 200 (@status with the reason phrase @why), then close. */
void cs__door_fail(struct door *d, int status, enum door_result r, const char *why)
{
	struct door_set *ds = cs__door_set(d->srv);
	lws_sul_cancel(&d->sul_dial);
	ds->results[r]++;
	d->status = status;
	st_log(r == DOOR_R_BAD_REQUEST ? ST_LOG_INFO : ST_LOG_WARN, d->node[0] ? d->node : NULL,
	       d->ep.sid, "front door: CONNECT %s from %s: %d %s", d->target[0] ? d->target : "?",
	       d->caller[0] ? d->caller : "-", status, why);
	cs__door_access_line(d, cs__door_result_names[r]);
	char buf[CS_DOOR_MAX_REASON_BYTES + 128];
	ssize_t n = cs_door_answer(buf, sizeof buf, status, why);
	if (n > 0)
		queue_out(d, buf, (size_t)n);
	d->state = DOOR_CLOSING;
	cs__door_update_rx(d);
	lws_callback_on_writable(d->wsi);
}

/* The relay is over (either side): write what is queued, then close. */
static void finish(struct door *d, const char *outcome)
{
	struct door_set *ds = cs__door_set(d->srv);
	if (d->state == DOOR_RELAY)
		ds->relays--;
	cs__door_access_line(d, outcome);
	d->state = DOOR_CLOSING;
	cs__door_update_rx(d);
	lws_callback_on_writable(d->wsi);
}

/* ---- input toward the edge ------------------------------------------------------------ */

static void in_consume(struct door *d, size_t n)
{
	memmove(d->in, d->in + n, d->in_len - n);
	d->in_len -= n;
	if (d->in_len == 0) {
		free(d->in); /* an idle tunnel holds no input buffer */
		d->in = NULL;
	}
}

static int in_append(struct door *d, const uint8_t *p, size_t n)
{
	if (n > DOOR_IN_CAP - d->in_len)
		return -EMSGSIZE;
	if (d->in == NULL) {
		d->in = malloc(DOOR_IN_CAP);
		if (d->in == NULL)
			return -ENOMEM;
	}
	memcpy(d->in + d->in_len, p, n);
	d->in_len += n;
	return 0;
}

/* Bytes into the stream as its room allows; returns how many were taken, -1 when the stream
 * is gone (the connection was ended). */
static ssize_t to_edge(struct door *d, const uint8_t *p, size_t len)
{
	if (d->ep.tun == NULL) {
		finish(d, "edge gone");
		return -1;
	}
	size_t space = cs_stream_space(&d->ep);
	ssize_t w = cs_stream_write(&d->ep, p, len < space ? len : space);
	if (w < 0) {
		cs_stream_detach(&d->ep);
		finish(d, "edge gone");
		return -1;
	}
	d->to_edge += (uint64_t)w;
	if ((size_t)w < len)
		cs_stream_wait_writable(&d->ep); /* ->writable feeds the rest */
	return w;
}

static void push_in(struct door *d)
{
	while (d->in_len > 0 && (d->state == DOOR_DIALING || d->state == DOOR_RELAY)) {
		ssize_t w = to_edge(d, d->in, d->in_len);
		if (w <= 0)
			break;
		in_consume(d, (size_t)w);
	}
	if (d->state == DOOR_CLOSING && d->in_len > 0)
		in_consume(d, d->in_len);
	cs__door_update_rx(d);
}

/* ---- the stream endpoint ---------------------------------------------------------------- */

static struct door *door_of(struct cs_endpoint *ep)
{
	return lws_container_of(ep, struct door, ep);
}

static void ep_opened(struct cs_endpoint *ep)
{
	struct door *d = door_of(ep);
	struct door_set *ds = cs__door_set(d->srv);
	if (d->state != DOOR_DIALING)
		return;
	lws_sul_cancel(&d->sul_dial);
	char buf[64];
	ssize_t n = cs_door_answer(buf, sizeof buf, 200, NULL);
	d->status = 200;
	d->state = DOOR_RELAY;
	ds->relays++;
	ds->results[DOOR_R_OK]++;
	ds->dial_ms_sum += st_now_ms() - d->started_ms;
	ds->dial_count++;
	if (n < 0 || queue_out(d, buf, (size_t)n) < 0) {
		cs_stream_close(&d->ep, ST_EXT_ERR_INTERNAL, "out of memory");
		finish(d, "internal");
		return;
	}
	push_in(d);
}

static int ep_data(struct cs_endpoint *ep, const uint8_t *p, size_t len)
{
	struct door *d = door_of(ep);
	if (d->state != DOOR_RELAY)
		return 0; /* the session resets DATA before OPENED; after a close it is dropped */
	if (queue_out(d, p, len) < 0)
		return -ENOMEM; /* more than the credit allows: the session resets the stream */
	return 0;
}

static void ep_end(struct cs_endpoint *ep, uint64_t code, const char *reason, size_t len)
{
	struct door *d = door_of(ep);
	if (d->state == DOOR_DIALING) {
		char why[CS_DOOR_MAX_REASON_BYTES];
		if (code == 0)
			snprintf(why, sizeof why,
			         "edge node %s closed the stream before its dial was "
			         "done",
			         d->node);
		else
			snprintf(why, sizeof why, "edge node %s: %s: %.*s", d->node,
			         st_ext_error_name(code), (int)(len > 300 ? 300 : len), reason);
		cs__door_fail(d, cs_door_error_status(code),
		              code == ST_EXT_ERR_TIMEOUT ? DOOR_R_TIMEOUT : DOOR_R_EDGE_REFUSED,
		              why);
		return;
	}
	if (d->state == DOOR_RELAY)
		finish(d, code ? "ended by the edge with an error" : "done");
}

static void ep_writable(struct cs_endpoint *ep)
{
	lws_callback_on_writable(door_of(ep)->wsi); /* the waiting input is fed there */
}

static void ep_gone(struct cs_endpoint *ep, const char *why)
{
	struct door *d = door_of(ep);
	if (d->state == DOOR_DIALING) {
		char msg[CS_DOOR_MAX_REASON_BYTES];
		snprintf(msg, sizeof msg, "edge node %s: %s", d->node, why);
		cs__door_fail(d, 502, DOOR_R_EDGE_GONE, msg);
	} else if (d->state == DOOR_RELAY) {
		finish(d, "tunnel gone");
	}
}

static void ep_cut(struct cs_endpoint *ep)
{
	/* Base protocol only, and base edges get no front-door stream: never called. */
	struct door *d = door_of(ep);
	size_t n = st_buf_len(&d->out);
	st_buf_cleanup(&d->out);
	cs_endpoint_dropped(&d->ep, n);
	finish(d, "cut");
}

static void ep_info(const struct cs_endpoint *ep, struct cs_endpoint_info *out)
{
	const struct door *d = lws_container_of(ep, struct door, ep);
	out->kind = "connect";
	out->method = "CONNECT";
	out->path = d->target;
	out->caller = d->caller[0] ? d->caller : "-";
	out->started_ms = d->started_ms;
	out->to_edge = d->to_edge;
	out->to_client = d->to_client;
}

const struct cs_endpoint_ops cs__door_endpoint_ops = {
        .data = ep_data,
        .end = ep_end,
        .writable = ep_writable,
        .gone = ep_gone,
        .cut = ep_cut,
        .info = ep_info,
        .opened = ep_opened,
};

/* ---- a CONNECT ----------------------------------------------------------------------------- */

static void on_dial_timeout(lws_sorted_usec_list_t *sul)
{
	struct door *d = lws_container_of(sul, struct door, sul_dial);
	if (d->state != DOOR_DIALING)
		return;
	char why[CS_DOOR_MAX_REASON_BYTES];
	snprintf(why, sizeof why, "edge node %s did not answer the dial within %llu ms", d->node,
	         (unsigned long long)d->srv->cfg.front_door_dial_timeout_ms);
	cs_stream_close(&d->ep, ST_EXT_ERR_TIMEOUT, "no answer to TCP_CONNECT in time");
	cs__door_fail(d, 504, DOOR_R_TIMEOUT, why);
}

struct payload_args {
	enum cs_door_target target;
	uint16_t port;
	const char *pod_ip;
};

static ssize_t tcp_payload(uint64_t id, char *out, size_t cap, void *user)
{
	(void)id;
	const struct payload_args *a = user;
	return cs_door_payload((uint8_t *)out, cap, a->target, a->port, a->pod_ip);
}

/* Canonical text of an IP literal (the registry's keys are inet_ntop's), or false. */
static bool canonical_ip(const char *host, size_t len, char *out, size_t cap)
{
	char tmp[64];
	if (len >= sizeof tmp)
		return false;
	memcpy(tmp, host, len);
	tmp[len] = '\0';
	struct in6_addr a6;
	struct in_addr a4;
	if (inet_pton(AF_INET, tmp, &a4) == 1)
		return inet_ntop(AF_INET, &a4, out, (socklen_t)cap) != NULL;
	if (inet_pton(AF_INET6, tmp, &a6) == 1)
		return inet_ntop(AF_INET6, &a6, out, (socklen_t)cap) != NULL;
	return false;
}
/* The CONNECT's head was parsed into the door (ip or node, port): route it and open its
 * stream. Runs again once a pod lookup is answered. */
void cs__door_start(struct door *d)
{
	struct cs_server *srv = d->srv;
	struct door_set *ds = cs__door_set(srv);
	char why[CS_DOOR_MAX_REASON_BYTES];
	if (d->refused) {
		snprintf(why, sizeof why,
		         "client certificate CN \"%s\" is not in --front-door-allowed-subjects",
		         d->caller);
		cs__door_fail(d, 403, DOOR_R_FORBIDDEN, why);
		return;
	}
	if (srv->draining) {
		cs__door_fail(d, 503, DOOR_R_DRAINING, "cloudstream is shutting down; retry");
		return;
	}
	bool fwd;
	uint32_t caps;
	struct cs_tunnel *t = cs__door_resolve(d, &fwd, &caps);
	if (t == NULL)
		return;
	if (!fwd) {
		snprintf(d->node, sizeof d->node, "%s", cs_tunnel_node(t));
		caps = cs_tunnel_caps(t);
	}
	if (!(caps & ST_CAP_TCP) || !(caps & ST_CAP_OPENED)) {
		if (caps == 0)
			snprintf(why, sizeof why,
			         "edge node %s speaks KubeEdge's base protocol, which cannot carry "
			         "raw "
			         "TCP: the front door needs edgestream there (use the DNAT entry "
			         "for "
			         "this node)",
			         d->node);
		else
			snprintf(why, sizeof why,
			         "edge node %s's edgestream cannot carry front-door tunnels (no "
			         "'tcp' "
			         "and 'opened' extensions): upgrade it",
			         d->node);
		cs__door_fail(d, 502, DOOR_R_BASE_EDGE, why);
		return;
	}
	struct payload_args pa = {.target = CS_DOOR_TARGET_PORT, .port = d->port};
	if (d->pod) {
		pa.target = CS_DOOR_TARGET_POD;
		pa.pod_ip = d->ip;
	} else {
		for (size_t i = 0; i < ds->n_kubelet_ports; i++)
			if (ds->kubelet_ports[i] == d->port)
				pa.target = CS_DOOR_TARGET_KUBELET;
	}
	char msg[512];
	int rc = fwd ? cs_peer_stream_open(t, d->node, &d->ep, ST_MSG_TCP_CONNECT, tcp_payload, &pa,
	                                   msg, sizeof msg)
	             : cs_stream_open(t, &d->ep, ST_MSG_TCP_CONNECT, tcp_payload, &pa, msg,
	                              sizeof msg);
	if (rc == -ENOSPC || rc == -EAGAIN) {
		cs__door_fail(d, 503, DOOR_R_LIMIT, msg);
		return;
	}
	if (rc < 0) {
		snprintf(why, sizeof why, "edge node %s: cannot open a stream (%s)", d->node,
		         st_strerror(rc));
		cs__door_fail(d, 502, DOOR_R_LIMIT, why);
		return;
	}
	d->state = DOOR_DIALING;
	lws_sul_schedule(srv->ctx, 0, &d->sul_dial, on_dial_timeout,
	                 (lws_usec_t)srv->cfg.front_door_dial_timeout_ms * LWS_US_PER_MS);
	static const char *const kinds[] = {"kubelet", "port", "pod"};
	st_log(ST_LOG_DEBUG, d->node, d->ep.sid, "front door: CONNECT %s -> TCP_CONNECT %s",
	       d->target, kinds[pa.target]);
	push_in(d); /* what came after the head (nothing, from kube-apiserver) */
}

/* The head's target into the door; false after failing the connection. */
static bool take_target(struct door *d, const struct cs_door_req *req)
{
	bool v6 = req->host_is_ip && memchr(req->host, ':', req->host_len) != NULL;
	snprintf(d->target, sizeof d->target, "%s%.*s%s:%u", v6 ? "[" : "", (int)req->host_len,
	         req->host, v6 ? "]" : "", req->port);
	d->port = req->port;
	if (!req->host_is_ip) {
		snprintf(d->node, sizeof d->node, "%.*s", (int)req->host_len, req->host);
		return true;
	}
	if (!canonical_ip(req->host, req->host_len, d->ip, sizeof d->ip)) {
		cs__door_fail(d, 400, DOOR_R_BAD_REQUEST,
		              "malformed IP address in the CONNECT target");
		return false;
	}
	return true;
}

void cs__door_process(struct door *d)
{
	if (d->state == DOOR_HEAD && d->in_len > 0) {
		struct cs_door_req req;
		int status = 0;
		const char *why = "";
		ssize_t n = cs_door_parse(d->in, d->in_len, &req, &status, &why);
		if (n == 0) {
			cs__door_update_rx(d);
			return;
		}
		if (n < 0) {
			cs__door_fail(d, status, DOOR_R_BAD_REQUEST, why);
			in_consume(d, d->in_len);
			return;
		}
		d->started_ms = st_now_ms();
		bool ok = take_target(d, &req); /* copies what it keeps of the head */
		in_consume(d, (size_t)n);
		lws_set_timeout(d->wsi, NO_PENDING_TIMEOUT, 0);
		if (ok)
			cs__door_start(d);
		return;
	}
	push_in(d);
}

int cs__door_rx(struct door *d, const uint8_t *p, size_t len)
{
	if (d->state == DOOR_CLOSING)
		return 0;
	if (d->in_len == 0 && (d->state == DOOR_DIALING || d->state == DOOR_RELAY)) {
		ssize_t w = to_edge(d, p, len); /* straight in, keeping only what does not fit */
		if (w < 0)
			return 0;
		p += w;
		len -= (size_t)w;
	}
	if (len == 0)
		return 0;
	if (in_append(d, p, len) < 0) {
		if (d->state == DOOR_HEAD)
			cs__door_fail(d, 431, DOOR_R_BAD_REQUEST, "CONNECT head too large");
		else
			return -1; /* more than one read past a pause: lws broke its word */
		return 0;
	}
	cs__door_process(d);
	return 0;
}
