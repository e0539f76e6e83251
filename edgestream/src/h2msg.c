/*
 * edgestream/src/h2msg.c — requests as HTTP/2 fields, answers back as HTTP/1.1, and the
 * stream flow mapping (h2msg.h). Pure.
 */
#include "h2msg.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <stream/http.h>
#include <stream/limits.h>
#include <stream/status.h>

/* ---- the request ----------------------------------------------------------------------- */

static bool has_ctl(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] == '\r' || s[i] == '\n' || s[i] == '\0')
			return true;
	return false;
}

/* Fields HTTP/2 forbids (RFC 9113 §8.2.2), and Host (it is :authority). */
static bool dropped_request_field(const char *name, const char *value)
{
	static const char *const names[] = {
	        "host",   "connection", "keep-alive", "proxy-connection", "transfer-encoding",
	        "upgrade"};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (strcasecmp(name, names[i]) == 0)
			return true;
	return strcasecmp(name, "te") == 0 && strcasecmp(value, "trailers") != 0;
}

struct out {
	char *p;
	size_t len, cap;
	bool overflow;
};

/* Appends @n bytes; returns where they went (NULL on overflow). */
static const char *put(struct out *o, const char *s, size_t n)
{
	if (o->overflow || n > o->cap - o->len) {
		o->overflow = true;
		return NULL;
	}
	char *at = o->p + o->len;
	memcpy(at, s, n);
	o->len += n;
	return at;
}

static void field(struct es_h2_field *f, const char *name, size_t nl, const char *value, size_t vl)
{
	f->name = name;
	f->name_len = nl;
	f->value = value;
	f->value_len = vl;
}

ssize_t es_h2_request_fields(struct es_h2_field *f, char *buf, size_t cap,
                             const struct st_connect_req *req, const char *path, size_t path_len,
                             const char *authority)
{
	const char *method = req->method[0] ? req->method : "GET";
	if (path_len == 0 || has_ctl(path, path_len) || memchr(path, ' ', path_len) ||
	    has_ctl(method, strlen(method)) || has_ctl(req->raw_query, strlen(req->raw_query)) ||
	    strchr(req->raw_query, ' '))
		return -EBADMSG;
	struct out o = {.p = buf, .cap = cap};
	size_t n = 0;
	field(&f[n++], ":method", 7, method, strlen(method));
	field(&f[n++], ":scheme", 7, "https", 5);
	field(&f[n++], ":authority", 10, authority, strlen(authority));
	const char *p = put(&o, path, path_len);
	size_t pl = path_len;
	if (req->raw_query[0]) {
		put(&o, "?", 1);
		put(&o, req->raw_query, strlen(req->raw_query));
		pl += 1 + strlen(req->raw_query);
	}
	field(&f[n++], ":path", 5, p, pl);
	for (size_t i = 0; i < req->num_headers && n < ES_H2_MAX_FIELDS; i++) {
		const struct st_connect_header *h = &req->headers[i];
		size_t nl = strlen(h->name), vl = strlen(h->value);
		if (nl == 0 || has_ctl(h->name, nl) || has_ctl(h->value, vl) ||
		    strpbrk(h->name, " \t:") != NULL)
			return -EBADMSG;
		if (dropped_request_field(h->name, h->value))
			continue;
		const char *name = o.overflow ? NULL : o.p + o.len;
		for (size_t k = 0; k < nl; k++) {
			char c = h->name[k];
			if (c >= 'A' && c <= 'Z')
				c = (char)(c - 'A' + 'a');
			put(&o, &c, 1);
		}
		const char *value = put(&o, h->value, vl);
		field(&f[n++], name, nl, vl ? value : "", vl);
	}
	if (o.overflow)
		return -EMSGSIZE;
	return (ssize_t)n;
}

bool es_h2_request_fits(const struct st_connect_req *req)
{
	const char *m = req->method[0] ? req->method : "GET";
	if (strcmp(m, "GET") != 0 && strcmp(m, "HEAD") != 0)
		return false;
	for (size_t i = 0; i < req->num_headers; i++) {
		const struct st_connect_header *h = &req->headers[i];
		if (strcasecmp(h->name, "Transfer-Encoding") == 0 ||
		    strcasecmp(h->name, "Upgrade") == 0 ||
		    (strcasecmp(h->name, "Content-Length") == 0 && strcmp(h->value, "0") != 0))
			return false;
	}
	return true;
}

/* ---- the answer ------------------------------------------------------------------------ */

void es_h2_head_init(struct es_h2_head *h)
{
	memset(h, 0, sizeof *h);
}

void es_h2_head_cleanup(struct es_h2_head *h)
{
	free(h->lines);
	es_h2_head_init(h);
}

static int lines_put(struct es_h2_head *h, const char *s, size_t n)
{
	if (n > ST_MAX_HTTP_HEAD_BYTES - h->len)
		return -EMSGSIZE;
	if (h->len + n > h->cap) {
		size_t cap = h->cap ? h->cap : 256;
		while (cap < h->len + n)
			cap *= 2;
		char *p = realloc(h->lines, cap);
		if (p == NULL)
			return -ENOMEM;
		h->lines = p;
		h->cap = cap;
	}
	memcpy(h->lines + h->len, s, n);
	h->len += n;
	return 0;
}

static bool name_is(const uint8_t *name, size_t len, const char *what)
{
	return len == strlen(what) && strncasecmp((const char *)name, what, len) == 0;
}

int es_h2_head_field(struct es_h2_head *h, const uint8_t *name, size_t name_len,
                     const uint8_t *value, size_t value_len)
{
	if (has_ctl((const char *)name, name_len) || has_ctl((const char *)value, value_len)) {
		h->bad = true;
		return -EBADMSG;
	}
	if (name_is(name, name_len, ":status")) {
		int s = 0;
		for (size_t i = 0; i < value_len; i++) {
			if (value[i] < '0' || value[i] > '9' || value_len != 3) {
				h->bad = true;
				return -EBADMSG;
			}
			s = s * 10 + (value[i] - '0');
		}
		if (s < 100) {
			h->bad = true;
			return -EBADMSG;
		}
		h->status = s;
		return 0;
	}
	if (name_len == 0 || name[0] == ':')
		return 0; /* other pseudo-fields: none belongs in an HTTP/1.1 head */
	/* What the cloud's relay would refuse in the head (nghttp2 checks names and values
	 * already; this side must not depend on it): the field cannot go, the answer is bad. */
	if (!st_http_field_name_ok((const char *)name, name_len) ||
	    !st_http_field_value_ok((const char *)value, value_len)) {
		h->bad = true;
		return -EBADMSG;
	}
	/* Connection-specific: HTTP/2 has none (a peer that sends them anyway is ignored). */
	if (name_is(name, name_len, "connection") || name_is(name, name_len, "keep-alive") ||
	    name_is(name, name_len, "transfer-encoding") || name_is(name, name_len, "upgrade") ||
	    name_is(name, name_len, "proxy-connection"))
		return 0;
	if (name_is(name, name_len, "content-length"))
		h->has_length = true;
	/* HTTP/1.1's usual casing, as Go's server writes its HTTP/1.1 heads. */
	char canon[128];
	const char *nm = (const char *)name;
	if (name_len < sizeof canon) {
		bool up = true;
		for (size_t i = 0; i < name_len; i++) {
			char c = nm[i];
			canon[i] = up && c >= 'a' && c <= 'z' ? (char)(c - 'a' + 'A') : c;
			up = c == '-';
		}
		nm = canon;
	}
	/* One field is kept free for Transfer-Encoding: chunked. */
	if (h->fields + 1 >= ST_MAX_HTTP_HEADERS) {
		h->bad = true;
		return -EMSGSIZE;
	}
	h->fields++;
	int rc;
	if ((rc = lines_put(h, nm, name_len)) < 0 || (rc = lines_put(h, ": ", 2)) < 0 ||
	    (rc = lines_put(h, (const char *)value, value_len)) < 0 ||
	    (rc = lines_put(h, "\r\n", 2)) < 0) {
		h->bad = true;
		return rc;
	}
	return 0;
}

static const char *reason(int status)
{
	switch (status) {
	case 200:
		return "OK";
	case 201:
		return "Created";
	case 202:
		return "Accepted";
	case 204:
		return "No Content";
	case 206:
		return "Partial Content";
	case 301:
		return "Moved Permanently";
	case 302:
		return "Found";
	case 304:
		return "Not Modified";
	case 307:
		return "Temporary Redirect";
	case 308:
		return "Permanent Redirect";
	default:
		return st_http_reason_phrase(status);
	}
}

ssize_t es_h2_head_write(const struct es_h2_head *h, bool no_body, char *out, size_t cap,
                         bool *chunked)
{
	if (h->status < 100 || h->status > 999 || h->bad)
		return -EBADMSG;
	bool body = !no_body && h->status >= 200 && h->status != 204 && h->status != 304;
	*chunked = body && !h->has_length;
	char line[80];
	int n = snprintf(line, sizeof line, "HTTP/1.1 %d %s\r\n", h->status, reason(h->status));
	const char *te = *chunked ? "Transfer-Encoding: chunked\r\n" : "";
	size_t need = (size_t)n + h->len + strlen(te) + 2;
	if (need > cap || need > ST_MAX_HTTP_HEAD_BYTES)
		return -EMSGSIZE;
	size_t off = 0;
	memcpy(out, line, (size_t)n);
	off += (size_t)n;
	if (h->len)
		memcpy(out + off, h->lines, h->len);
	off += h->len;
	memcpy(out + off, te, strlen(te));
	off += strlen(te);
	memcpy(out + off, "\r\n", 2);
	return (ssize_t)(off + 2);
}

size_t es_h2_chunk_start(char *out, size_t n)
{
	int r = snprintf(out, ES_H2_CHUNK_START_MAX, "%zx\r\n", n);
	return r > 0 ? (size_t)r : 0;
}

/* ---- flow control ---------------------------------------------------------------------- */

void es_h2_flow_init(struct es_h2_flow *f)
{
	f->unacked = 0;
	f->window = ES_H2_STREAM_WINDOW;
	f->run = 0;
	f->period = 0;
	f->capw = ES_H2_STREAM_WINDOW;
	f->held = ES_H2_STREAM_WINDOW;
}

size_t es_h2_flow_received(struct es_h2_flow *f, size_t n, bool cloud_full)
{
	f->unacked += n;
	f->period += n;
	if (cloud_full) {
		f->run = 0;
		return 0;
	}
	f->run += n;
	size_t due = f->unacked;
	f->unacked = 0;
	return due;
}

size_t es_h2_flow_drained(struct es_h2_flow *f)
{
	size_t due = f->unacked;
	f->unacked = 0;
	return due;
}

static size_t framed(size_t window, size_t min_frame)
{
	if (min_frame == 0)
		min_frame = 1;
	size_t frames = (window + min_frame - 1) / min_frame;
	char tmp[ES_H2_CHUNK_START_MAX];
	/* each frame: its size line, its bytes, CRLF */
	return window + frames * (es_h2_chunk_start(tmp, min_frame) + 2);
}

size_t es_h2_flow_worst_burst(size_t min_frame)
{
	return framed(ES_H2_STREAM_WINDOW, min_frame);
}

size_t es_h2_flow_reservation(size_t window, bool chunked)
{
	return chunked ? framed(window, ES_H2_MIN_FRAME) : window;
}

size_t es_h2_flow_grow(const struct es_h2_flow *f, bool budget_tight)
{
	if (budget_tight || f->window >= ES_H2_STREAM_WINDOW_MAX || f->run < f->window)
		return f->window;
	size_t next = f->window * 2;
	return next > ES_H2_STREAM_WINDOW_MAX ? ES_H2_STREAM_WINDOW_MAX : next;
}

size_t es_h2_flow_grow_extra(const struct es_h2_flow *f, size_t next, bool chunked)
{
	if (next <= f->capw)
		return 0;
	return es_h2_flow_reservation(next, chunked) - es_h2_flow_reservation(f->capw, chunked);
}

void es_h2_flow_grown(struct es_h2_flow *f, size_t window)
{
	f->window = window;
	f->run = 0;
	if (window > f->capw)
		f->capw = f->held = window;
}

size_t es_h2_flow_touch(struct es_h2_flow *f, bool chunked)
{
	if (f->held >= f->capw)
		return 0;
	size_t extra =
	        es_h2_flow_reservation(f->capw, chunked) - es_h2_flow_reservation(f->held, chunked);
	f->held = f->capw;
	return extra;
}

size_t es_h2_flow_period_end(struct es_h2_flow *f, bool *silent)
{
	size_t got = f->period;
	f->period = 0;
	f->run = 0; /* growing needs a whole window within one period */
	*silent = got == 0;
	if (f->window <= ES_H2_STREAM_WINDOW)
		return f->window;
	if (got == 0)
		return ES_H2_STREAM_WINDOW;
	if (got >= f->window / 2)
		return f->window;
	size_t half = f->window / 2;
	return half < ES_H2_STREAM_WINDOW ? ES_H2_STREAM_WINDOW : half;
}

static size_t extra_of(size_t window, bool chunked)
{
	return es_h2_flow_reservation(window, chunked) -
	       es_h2_flow_reservation(ES_H2_STREAM_WINDOW, chunked);
}

struct es_h2_flow_keep es_h2_flow_release(const struct es_h2_flow *f, size_t credit,
                                          bool silent_empty, bool chunked)
{
	struct es_h2_flow_keep k;
	/* The cap allows for what the kubelet may still send, never more than it allowed. */
	k.capw = credit > f->window ? credit : f->window;
	if (k.capw > f->capw)
		k.capw = f->capw;
	k.held = f->held < k.capw ? f->held : k.capw;
	if (silent_empty)
		k.held = f->window; /* its old credit: charged again at its next byte */
	k.cap_extra = extra_of(k.capw, chunked);
	k.charged_extra = extra_of(k.held, chunked);
	return k;
}

void es_h2_flow_released(struct es_h2_flow *f, const struct es_h2_flow_keep *k)
{
	f->capw = k->capw;
	f->held = k->held;
}

size_t es_h2_flow_charged_extra(const struct es_h2_flow *f, bool chunked)
{
	return extra_of(f->held, chunked);
}
