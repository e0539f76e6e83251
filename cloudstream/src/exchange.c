/*
 * cloudstream/src/exchange.c — request plans and body/response framing trackers (pure).
 */
#include "exchange.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <stream/connect.h>
#include <stream/frame.h>
#include <stream/limits.h>

void cs_body_init(struct cs_body *b, enum st_http_body_kind kind, uint64_t length)
{
	memset(b, 0, sizeof *b);
	b->kind = kind;
	b->remaining = length;
	if (kind == ST_HTTP_BODY_CHUNKED)
		st_chunked_init(&b->ch);
	b->done = kind == ST_HTTP_BODY_NONE || (kind == ST_HTTP_BODY_LENGTH && length == 0);
}

ssize_t cs_body_feed(struct cs_body *b, const uint8_t *p, size_t len)
{
	if (b->done || len == 0)
		return 0;
	switch (b->kind) {
	case ST_HTTP_BODY_LENGTH: {
		size_t n = len;
		if ((uint64_t)n > b->remaining)
			n = (size_t)b->remaining;
		b->remaining -= n;
		b->done = b->remaining == 0;
		return (ssize_t)n;
	}
	case ST_HTTP_BODY_CHUNKED: {
		size_t used = 0;
		/* The decoder stops after each run of data: loop until the input or the body ends. */
		while (used < len && !st_chunked_done(&b->ch)) {
			const uint8_t *data;
			size_t data_len;
			ssize_t n =
			        st_chunked_decode(&b->ch, p + used, len - used, &data, &data_len);
			if (n < 0)
				return n;
			if (n == 0)
				break;
			used += (size_t)n;
		}
		b->done = st_chunked_done(&b->ch);
		return (ssize_t)used;
	}
	case ST_HTTP_BODY_UNTIL_CLOSE:
	case ST_HTTP_BODY_UPGRADE:
		return (ssize_t)len;
	case ST_HTTP_BODY_NONE:
	default:
		return 0;
	}
}

void cs_resp_init(struct cs_resp *r, bool request_was_head)
{
	memset(r, 0, sizeof *r);
	r->request_was_head = request_was_head;
}

void cs_resp_cleanup(struct cs_resp *r)
{
	free(r->head);
	r->head = NULL;
	r->head_len = 0;
}

/* The head was parsed from @buf: record what it says. Returns 0 for the final head, 1 for an
 * interim one (1xx but 101: RFC 9110 §15.2 allows any number before the final answer, e.g. 100
 * Continue to a request with "Expect: 100-continue"; it is relayed as it came, has no body and
 * the next head follows), or a negative errno. */
static int resp_on_head(struct cs_resp *r, const uint8_t *buf, size_t head_len)
{
	struct st_http_response resp;
	ssize_t n = st_http_parse_response(buf, head_len, &resp);
	if (n <= 0)
		return n < 0 ? (int)n : -EBADMSG;
	if (resp.status >= 100 && resp.status < 200 && resp.status != 101) {
		r->interim++;
		return 1;
	}
	enum st_http_body_kind kind;
	uint64_t length = 0;
	int rc = st_http_response_body(&resp, r->request_was_head, &kind, &length);
	if (rc < 0)
		return rc;
	r->head_done = true;
	r->status = resp.status;
	r->upgraded = resp.status == 101;
	r->keep_alive = !r->upgraded && kind != ST_HTTP_BODY_UNTIL_CLOSE &&
	                st_http_keep_alive(resp.minor_version, resp.headers, resp.num_headers);
	cs_body_init(&r->body, kind, length);
	return 0;
}

/* Follows one head from @p (@len > 0): how many of these bytes it took (all of them while the
 * head is incomplete; up to its end once it is whole, then r->head_done says whether it was
 * the final one), or a negative errno. */
static ssize_t head_feed(struct cs_resp *r, const uint8_t *p, size_t len)
{
	struct st_http_response probe;
	ssize_t n;
	int rc;
	if (r->head_len == 0) {
		/* Common case: the whole head is in this input; no copy. */
		n = st_http_parse_response(p, len, &probe);
		if (n < 0)
			return n;
		if (n > 0) {
			rc = resp_on_head(r, p, (size_t)n);
			return rc < 0 ? rc : n;
		}
	}
	/* Gather the head; parse what we have after each input. */
	if (r->head == NULL) {
		r->head = malloc(ST_MAX_HTTP_HEAD_BYTES);
		if (r->head == NULL)
			return -ENOMEM;
	}
	size_t room = ST_MAX_HTTP_HEAD_BYTES - r->head_len;
	size_t take = len < room ? len : room;
	memcpy(r->head + r->head_len, p, take);
	size_t before = r->head_len;
	r->head_len += take;
	n = st_http_parse_response(r->head, r->head_len, &probe);
	if (n < 0)
		return n;
	if (n == 0)
		return r->head_len == ST_MAX_HTTP_HEAD_BYTES ? -EMSGSIZE : (ssize_t)take;
	rc = resp_on_head(r, r->head, (size_t)n);
	if (rc < 0)
		return rc;
	/* What the gathered bytes held past this head is parsed again from @p. */
	if (rc == 0)
		cs_resp_cleanup(r);
	else
		r->head_len = 0;    /* the buffer serves the next head */
	return n - (ssize_t)before; /* bytes of this input that completed the head */
}

ssize_t cs_resp_feed(struct cs_resp *r, const uint8_t *p, size_t len)
{
	if (len == 0 || cs_resp_done(r))
		return 0;
	size_t used = 0;
	/* Interim heads, then the final one: each belongs to the response, relayed as is. */
	while (!r->head_done && used < len) {
		ssize_t n = head_feed(r, p + used, len - used);
		if (n < 0)
			return n;
		used += (size_t)n;
	}
	if (r->head_done) {
		ssize_t b = cs_body_feed(&r->body, p + used, len - used);
		if (b < 0)
			return b;
		used += (size_t)b;
	}
	r->bytes += used;
	return (ssize_t)used;
}

bool cs_resp_done(const struct cs_resp *r)
{
	return r->head_done && !r->upgraded && r->body.done;
}

static bool method_is(const struct st_http_request *req, const char *m)
{
	size_t n = strlen(m);
	return req->method_len == n && memcmp(req->method, m, n) == 0;
}

int cs_plan_request(const struct st_http_request *req, struct cs_plan *out, const char **reason)
{
	memset(out, 0, sizeof *out);
	if (method_is(req, "CONNECT") || method_is(req, "TRACE")) {
		*reason = "method not allowed on the kubelet API";
		return 405;
	}
	if (st_kubelet_path_parse(req->path, req->path_len, &out->path) < 0) {
		*reason = "malformed kubelet API path";
		return 400;
	}
	out->err_form = st_error_form_for(
	        out->path.kind == ST_KUBELET_CONTAINER_LOGS,
	        st_http_header_find(req->headers, req->num_headers, "X-Forwarded-Uri", 0) >= 0);
	if (st_http_request_body(req, &out->body, &out->body_length) < 0) {
		*reason = "ambiguous request body framing";
		return 400;
	}
	out->upgrade = out->body == ST_HTTP_BODY_UPGRADE;
	out->is_head = method_is(req, "HEAD");
	out->keep_alive = !out->upgrade &&
	                  st_http_keep_alive(req->minor_version, req->headers, req->num_headers);
	switch (out->path.kind) {
	case ST_KUBELET_EXEC:
	case ST_KUBELET_PORT_FORWARD:
		/* A KubeEdge edge relays any upgrade sent as EXEC_CONNECT, port-forward included. */
		out->connect_type = ST_MSG_EXEC_CONNECT;
		break;
	case ST_KUBELET_ATTACH:
		out->connect_type = ST_MSG_ATTACH_CONNECT;
		break;
	case ST_KUBELET_CONTAINER_LOGS: {
		out->connect_type = ST_MSG_LOGS_CONNECT;
		char v[16];
		ssize_t n =
		        req->query ? st_query_get(req->query, req->query_len, "follow", v, sizeof v)
		                   : -ENOENT;
		out->follow = n >= 0 && st_k8s_bool(true, v, (size_t)n);
		break;
	}
	case ST_KUBELET_RUN:
	case ST_KUBELET_OTHER:
	default:
		/* Upgrades on other paths still need a raw relay: only EXEC/ATTACH give one with a
		 * KubeEdge edge. */
		out->connect_type = out->upgrade ? ST_MSG_EXEC_CONNECT : ST_MSG_METRIC_CONNECT;
		break;
	}
	return 0;
}

ssize_t cs_connect_json(const struct st_http_request *req, uint64_t id, const char *edge_host,
                        char *out, size_t cap)
{
	struct st_connect_field fields[ST_MAX_HTTP_HEADERS];
	size_t n = req->num_headers;
	if (n > ST_MAX_CONNECT_HEADERS)
		return -EMSGSIZE;
	for (size_t i = 0; i < n; i++) {
		fields[i].name.p = req->headers[i].name;
		fields[i].name.len = req->headers[i].name_len;
		fields[i].value.p = req->headers[i].value;
		fields[i].value.len = req->headers[i].value_len;
	}
	struct st_connect_parts parts = {
	        .connect_id = id,
	        .method = {req->method, req->method_len},
	        .scheme = {"http", 4},
	        .host = {edge_host, strlen(edge_host)},
	        .path = {req->path, req->path_len},
	        .raw_query = {req->query ? req->query : "", req->query ? req->query_len : 0},
	        .headers = fields,
	        .num_headers = n,
	};
	struct st_connect_req c;
	int rc = st_connect_req_build(&c, &parts);
	if (rc < 0)
		return rc;
	ssize_t len = st_connect_req_encode(out, cap, &c);
	st_connect_req_cleanup(&c);
	return len;
}
