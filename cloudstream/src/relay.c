/*
 * cloudstream/src/relay.c — HTTP/1 relay decisions for one apiserver request (pure; see
 * relay.h).
 */
#include "relay.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <stream/ext.h>
#include <stream/frame.h>
#include <stream/limits.h>
#include <stream/status.h>

static const char *const err_reason_names[CS_ERR_COUNT] = {
        [CS_ERR_BAD_REQUEST] = "bad_request",   [CS_ERR_NO_ROUTE] = "no_route",
        [CS_ERR_NO_SESSION] = "no_session",     [CS_ERR_LIMIT] = "limit",
        [CS_ERR_EDGE_REFUSED] = "edge_refused", [CS_ERR_EDGE_GONE] = "edge_gone",
        [CS_ERR_TIMEOUT] = "timeout",           [CS_ERR_BAD_RESPONSE] = "bad_response",
        [CS_ERR_DRAINING] = "draining",         [CS_ERR_UNAUTHORIZED] = "unauthorized",
        [CS_ERR_FORBIDDEN] = "forbidden",
};

static const int err_reason_status[CS_ERR_COUNT] = {
        [CS_ERR_BAD_REQUEST] = 400,  [CS_ERR_NO_ROUTE] = 503,     [CS_ERR_NO_SESSION] = 503,
        [CS_ERR_LIMIT] = 503,        [CS_ERR_EDGE_REFUSED] = 502, [CS_ERR_EDGE_GONE] = 502,
        [CS_ERR_TIMEOUT] = 504,      [CS_ERR_BAD_RESPONSE] = 502, [CS_ERR_DRAINING] = 503,
        [CS_ERR_UNAUTHORIZED] = 401, [CS_ERR_FORBIDDEN] = 403,
};

/* What a kubelet answers a logs or metrics request with, for a base edge that relays only the
 * body: the body follows chunked, so neither its length nor its end need be known. */
static const char body_only_head[] = "HTTP/1.1 200 OK\r\n"
                                     "Content-Type: text/plain; charset=utf-8\r\n"
                                     "Transfer-Encoding: chunked\r\n\r\n";

const char *cs_err_reason_name(enum cs_err_reason r)
{
	return (unsigned)r < CS_ERR_COUNT ? err_reason_names[r] : "unknown";
}

int cs_err_reason_status(enum cs_err_reason r)
{
	return (unsigned)r < CS_ERR_COUNT ? err_reason_status[r] : 500;
}

void cs_relay_init(struct cs_relay *r)
{
	memset(r, 0, sizeof *r);
	r->plan.err_form = ST_ERROR_FORM_STATUS;
}

void cs_relay_cleanup(struct cs_relay *r)
{
	cs_resp_cleanup(&r->resp);
	cs_relay_init(r);
}

int cs_relay_begin(struct cs_relay *r, const struct st_http_request *req, const char **why)
{
	r->answered = false;
	return cs_plan_request(req, &r->plan, why);
}

void cs_relay_start(struct cs_relay *r, uint32_t caps)
{
	/* A base edge (no raw-response) relays only the body of what it fetches for LOGS and
	 * METRIC; upgrades (EXEC/ATTACH) come back raw from every edge. */
	bool body_only = (r->plan.connect_type == ST_MSG_LOGS_CONNECT ||
	                  r->plan.connect_type == ST_MSG_METRIC_CONNECT) &&
	                 !(caps & ST_CAP_RAW_RESPONSE);
	r->mode = body_only ? CS_RELAY_BODY_ONLY : CS_RELAY_RAW;
	cs_body_init(&r->req_body, r->plan.body, r->plan.body_length);
	cs_resp_init(&r->resp, r->plan.is_head);
}

ssize_t cs_relay_request(struct cs_relay *r, const uint8_t *p, size_t len)
{
	if (r->plan.upgrade)
		return (ssize_t)len;
	return cs_body_feed(&r->req_body, p, len);
}

bool cs_relay_request_done(const struct cs_relay *r)
{
	return !r->plan.upgrade && r->req_body.done;
}

int cs_relay_answer(struct cs_relay *r, const uint8_t *p, size_t len, struct cs_relay_emit *e)
{
	memset(e, 0, sizeof *e);
	if (r->mode == CS_RELAY_BODY_ONLY) {
		/* Frame the body as the kubelet would; the head goes with the first byte (or the
		 * first, empty, message), never before: until then an error can still be ours. */
		if (!r->answered) {
			e->head = body_only_head;
			e->head_len = sizeof body_only_head - 1;
		}
		if (len == 0)
			return 0;
		ssize_t h = st_chunked_encode_header(r->chunk, sizeof r->chunk, len);
		if (h < 0)
			return (int)h;
		e->chunk = r->chunk;
		e->chunk_len = (size_t)h;
		e->take = len;
		e->trailer = ST_CHUNK_TRAILER;
		e->trailer_len = sizeof ST_CHUNK_TRAILER - 1;
		return 0; /* a body-only answer ends only with the stream */
	}
	ssize_t n = cs_resp_feed(&r->resp, p, len);
	if (n < 0)
		return (int)n;
	e->take = (size_t)n;
	e->done = cs_resp_done(&r->resp);
	return 0;
}

void cs_relay_sent(struct cs_relay *r)
{
	r->answered = true;
}

bool cs_relay_cut_short(const struct cs_relay *r, uint64_t code)
{
	return code != 0 || (!r->resp.upgraded && r->resp.body.kind != ST_HTTP_BODY_UNTIL_CLOSE);
}

void cs_relay_on_end(const struct cs_relay *r, uint64_t code, struct cs_relay_end *out)
{
	memset(out, 0, sizeof *out);
	if (!r->answered) {
		out->verdict = CS_RELAY_FAIL;
		if (code == 0) {
			out->status = cs_err_reason_status(CS_ERR_EDGE_REFUSED);
			out->why = CS_ERR_EDGE_REFUSED;
		} else {
			out->status = st_ext_error_http_status(code);
			out->why =
			        code == ST_EXT_ERR_TIMEOUT ? CS_ERR_TIMEOUT : CS_ERR_EDGE_REFUSED;
		}
		return;
	}
	if (r->mode == CS_RELAY_BODY_ONLY && code == 0) {
		/* REMOVE ends a body-only answer: the last chunk tells the client. */
		out->verdict = CS_RELAY_DONE;
		out->last = ST_CHUNK_LAST;
		out->last_len = sizeof ST_CHUNK_LAST - 1;
		return;
	}
	if (r->mode == CS_RELAY_RAW && cs_resp_done(&r->resp)) {
		out->verdict = CS_RELAY_DONE;
		return;
	}
	/* An upgraded stream, a body until close, or an answer cut short: the client's side
	 * closes right after the queued bytes, so nobody waits for a dead stream. */
	out->verdict = CS_RELAY_CLOSE;
	out->cut_short = cs_relay_cut_short(r, code);
}

int cs_relay_end_message(char *out, size_t cap, const char *node, uint64_t code, const char *reason,
                         size_t reason_len)
{
	if (code == 0)
		return snprintf(out, cap, "edge node %s closed the stream without answering", node);
	return snprintf(out, cap, "edge node %s: %s: %.*s", node, st_ext_error_name(code),
	                (int)(reason_len > 1024 ? 1024 : reason_len), reason ? reason : "");
}

bool cs_relay_keep_alive(const struct cs_relay *r)
{
	return r->plan.keep_alive && r->req_body.done &&
	       (r->mode == CS_RELAY_BODY_ONLY || r->resp.keep_alive);
}

ssize_t cs_relay_error_answer(const struct cs_relay *r, int status, const char *message, char *out,
                              size_t cap)
{
	if (r->answered)
		return 0;
	return st_http_error_answer(out, cap, r->plan.err_form, status, message);
}

int cs_relay_head_error(ssize_t parse_rc, const char **message)
{
	bool big = parse_rc == 0 || parse_rc == -EMSGSIZE;
	*message = big ? "request head too large" : "malformed HTTP request head";
	return big ? 431 : 400;
}

int cs_relay_connect_error(ssize_t rc)
{
	return rc == -EMSGSIZE ? 431 : 400;
}

uint64_t cs_relay_answer_timeout_ms(const struct cs_relay *r, uint64_t timeout_ms)
{
	/* A quiet `logs -f` through a base edge sends nothing until a line appears. */
	if (r->mode == CS_RELAY_BODY_ONLY && r->plan.follow)
		return 0;
	return timeout_ms;
}
