/*
 * edgestream/src/answer.c — backend request heads and body-only relay (answer.h). Pure.
 */
#include "answer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <stream/limits.h>

struct out {
	char *p;
	size_t len, cap;
	bool overflow;
};

static void put(struct out *o, const char *s, size_t n)
{
	if (o->overflow || n > o->cap - o->len) {
		o->overflow = true;
		return;
	}
	memcpy(o->p + o->len, s, n);
	o->len += n;
}

static void puts_(struct out *o, const char *s)
{
	put(o, s, strlen(s));
}

static bool splits_head(const char *s)
{
	return strpbrk(s, "\r\n") != NULL;
}

static bool has_token(const char *value, const char *token)
{
	size_t tl = strlen(token);
	const char *p = value;
	while (*p) {
		while (*p == ' ' || *p == '\t' || *p == ',')
			p++;
		const char *start = p;
		while (*p && *p != ',')
			p++;
		const char *end = p;
		while (end > start && (end[-1] == ' ' || end[-1] == '\t'))
			end--;
		if ((size_t)(end - start) == tl && strncasecmp(start, token, tl) == 0)
			return true;
	}
	return false;
}

ssize_t es_request_head(char *out, size_t cap, const struct st_connect_req *req, const char *path,
                        size_t path_len, const char *host_header, bool keep_query, bool keep_alive,
                        bool *upgrade)
{
	bool conn_upgrade = false, has_upgrade = false;
	for (size_t i = 0; i < req->num_headers; i++) {
		const struct st_connect_header *h = &req->headers[i];
		if (splits_head(h->name) || splits_head(h->value) || h->name[0] == '\0' ||
		    strpbrk(h->name, " \t:") != NULL)
			return -EBADMSG;
		if (strcasecmp(h->name, "Connection") == 0 && has_token(h->value, "upgrade"))
			conn_upgrade = true;
		if (strcasecmp(h->name, "Upgrade") == 0 && h->value[0])
			has_upgrade = true;
	}
	if (splits_head(req->method) || strpbrk(req->method, " \t") ||
	    splits_head(req->raw_query) || strpbrk(req->raw_query, " \t") ||
	    memchr(path, '\r', path_len) || memchr(path, '\n', path_len) ||
	    memchr(path, ' ', path_len))
		return -EBADMSG;
	*upgrade = conn_upgrade && has_upgrade;
	struct out o = {.p = out, .cap = cap};
	puts_(&o, req->method[0] ? req->method : "GET");
	put(&o, " ", 1);
	put(&o, path, path_len);
	if (keep_query && req->raw_query[0]) {
		put(&o, "?", 1);
		puts_(&o, req->raw_query);
	}
	puts_(&o, " HTTP/1.1\r\nHost: ");
	puts_(&o, host_header);
	puts_(&o, "\r\n");
	for (size_t i = 0; i < req->num_headers; i++) {
		const struct st_connect_header *h = &req->headers[i];
		if (strcasecmp(h->name, "Host") == 0)
			continue;
		/* Hop-by-hop: the edge speaks for itself on this connection. */
		if (!*upgrade && (strcasecmp(h->name, "Connection") == 0 ||
		                  strcasecmp(h->name, "Keep-Alive") == 0 ||
		                  strcasecmp(h->name, "Proxy-Connection") == 0))
			continue;
		puts_(&o, h->name);
		puts_(&o, ": ");
		puts_(&o, h->value);
		puts_(&o, "\r\n");
	}
	if (!*upgrade && !keep_alive)
		puts_(&o, "Connection: close\r\n");
	puts_(&o, "\r\n");
	return o.overflow ? -EMSGSIZE : (ssize_t)o.len;
}

void es_body_only_init(struct es_body_only *b)
{
	memset(b, 0, sizeof *b);
	st_chunked_init(&b->ch);
}

void es_body_only_cleanup(struct es_body_only *b)
{
	free(b->head);
	b->head = NULL;
}

/* Body bytes of @in after the head; returns what was written to @out or a negative errno. */
static ssize_t body(struct es_body_only *b, const uint8_t *in, size_t len, uint8_t *out, size_t cap)
{
	size_t w = 0;
	switch (b->kind) {
	case ST_HTTP_BODY_NONE:
		b->done = true;
		return 0;
	case ST_HTTP_BODY_LENGTH: {
		size_t n = len < b->remaining ? len : (size_t)b->remaining;
		if (n > cap)
			n = cap;
		if (out)
			memcpy(out, in, n);
		b->remaining -= n;
		b->done = b->remaining == 0;
		return (ssize_t)n;
	}
	case ST_HTTP_BODY_CHUNKED:
		while (len > 0 && !b->done) {
			const uint8_t *data;
			size_t dlen;
			ssize_t used = st_chunked_decode(&b->ch, in, len, &data, &dlen);
			if (used < 0)
				return used;
			if (used == 0)
				break;
			if (dlen > cap - w)
				return -EMSGSIZE; /* cannot happen: body bytes never exceed input */
			if (dlen && out)
				memcpy(out + w, data, dlen);
			w += dlen;
			in += used;
			len -= (size_t)used;
			b->done = st_chunked_done(&b->ch);
		}
		return (ssize_t)w;
	default: /* until close (an upgrade does not come this way) */
		if (len > cap)
			len = cap;
		if (out)
			memcpy(out, in, len);
		return (ssize_t)len;
	}
}

/* Keeps @len more bytes of a head that is not complete yet. The buffer grows by doubling from
 * 1 KiB, never past ST_MAX_HTTP_HEAD_BYTES (the caller bounds @len): most heads come whole in
 * the first piece and are parsed where they are, without a copy. */
static int gather(struct es_body_only *b, const uint8_t *in, size_t len)
{
	size_t need = b->head_len + len;
	if (need > b->head_cap) {
		size_t cap = b->head_cap ? b->head_cap : 1024;
		while (cap < need)
			cap *= 2;
		if (cap > ST_MAX_HTTP_HEAD_BYTES)
			cap = ST_MAX_HTTP_HEAD_BYTES;
		uint8_t *p = realloc(b->head, cap);
		if (p == NULL)
			return -ENOMEM;
		b->head = p;
		b->head_cap = cap;
	}
	memcpy(b->head + b->head_len, in, len);
	b->head_len += len;
	return 0;
}

/* Follows one head from @in (@len > 0): how many of these bytes it took (all of them while the
 * head is incomplete; up to its end once it is whole, then b->head_done says whether it was
 * the final one), or a negative errno. */
static ssize_t head_feed(struct es_body_only *b, const uint8_t *in, size_t len)
{
	struct st_http_response resp;
	ssize_t n;
	size_t used; /* bytes of @in that belong to the head */
	if (b->head_len == 0) {
		n = st_http_parse_response(in, len, &resp);
		if (n < 0)
			return n;
		if (n == 0) { /* a part: keep it, at most ST_MAX_HTTP_HEAD_BYTES */
			if (len >= ST_MAX_HTTP_HEAD_BYTES)
				return -EMSGSIZE;
			int rc = gather(b, in, len);
			return rc < 0 ? rc : (ssize_t)len;
		}
		used = (size_t)n;
	} else {
		size_t take = len;
		if (take > ST_MAX_HTTP_HEAD_BYTES - b->head_len)
			take = ST_MAX_HTTP_HEAD_BYTES - b->head_len;
		int rc = gather(b, in, take);
		if (rc < 0)
			return rc;
		n = st_http_parse_response(b->head, b->head_len, &resp);
		if (n < 0)
			return n;
		if (n == 0)
			return b->head_len >= ST_MAX_HTTP_HEAD_BYTES ? -EMSGSIZE : (ssize_t)take;
		used = (size_t)n - (b->head_len - take);
	}
	if (resp.status >= 100 && resp.status < 200 && resp.status != 101) {
		/* Interim (RFC 9110 §15.2: 100 Continue, 103 Early Hints, any number of them before
		 * the final answer). Body-only, it is dropped: a KubeEdge cloud gets the body alone,
		 * as its edge's Go HTTP client gives it (that client consumes 1xx heads itself), and
		 * the cloud writes the one head its client sees (stream/PROTOCOL.md, LOGS/METRIC).
		 * Relayed as is (@out NULL), the caller passes it on with the rest. Either way the
		 * final head is looked for after it. */
		b->interim++;
		b->head_len = 0; /* the buffer, if any, serves the next head */
		return (ssize_t)used;
	}
	int rc = st_http_response_body(&resp, false, &b->kind, &b->remaining);
	if (rc < 0)
		return rc;
	if (b->kind == ST_HTTP_BODY_UPGRADE)
		return -EBADMSG; /* a 101 to a logs or metrics request */
	b->status = resp.status;
	b->keep_alive = b->kind != ST_HTTP_BODY_UNTIL_CLOSE &&
	                st_http_keep_alive(resp.minor_version, resp.headers, resp.num_headers);
	b->head_done = true;
	free(b->head); /* @resp pointed into it: not used past here */
	b->head = NULL;
	b->head_len = 0;
	b->head_cap = 0;
	if (b->kind == ST_HTTP_BODY_NONE || (b->kind == ST_HTTP_BODY_LENGTH && b->remaining == 0))
		b->done = true;
	return (ssize_t)used;
}

ssize_t es_body_only_feed(struct es_body_only *b, const uint8_t *in, size_t len, uint8_t *out,
                          size_t cap)
{
	if (b->done || len == 0)
		return 0;
	while (!b->head_done && len > 0) {
		ssize_t n = head_feed(b, in, len);
		if (n < 0)
			return n;
		in += n;
		len -= (size_t)n;
	}
	if (!b->head_done || b->done || len == 0)
		return 0;
	return body(b, in, len, out, cap);
}
