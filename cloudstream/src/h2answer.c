/*
 * cloudstream/src/h2answer.c — an HTTP/1.1 answer as an HTTP/2 stream's answer (h2answer.h).
 * Pure code: the head through stream/http.h's response parser, the body through its Content-Length
 * or stream/chunked.h's decoder, nothing allocated but the head buffer.
 */
#include "h2answer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void cs_h2ans_init(struct cs_h2ans *a, bool head_request)
{
	memset(a, 0, sizeof *a);
	a->state = CS_H2ANS_HEAD;
	a->head_request = head_request;
}

void cs_h2ans_cleanup(struct cs_h2ans *a)
{
	free(a->buf);
	cs_h2ans_init(a, false);
}

bool cs_h2ans_done(const struct cs_h2ans *a)
{
	return a->state == CS_H2ANS_DONE;
}

bool cs_h2ans_end_ok(const struct cs_h2ans *a)
{
	return a->state == CS_H2ANS_DONE || a->state == CS_H2ANS_UNTIL_END;
}

/* Connection-specific fields HTTP/2 forbids (RFC 9113 §8.2.2), and the framing HTTP/2 replaces. */
static bool field_dropped(const struct st_http_header *h)
{
	static const char *const names[] = {"connection",        "keep-alive", "proxy-connection",
	                                    "transfer-encoding", "upgrade",    "te"};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (strlen(names[i]) == h->name_len &&
		    strncasecmp(h->name, names[i], h->name_len) == 0)
			return true;
	return false;
}

/* A complete head of @n bytes in a->buf: skip an interim one, else report it and choose how the
 * body is read. */
static int on_full_head(struct cs_h2ans *a, const struct cs_h2ans_cbs *cbs, void *user)
{
	struct st_http_response resp;
	if (st_http_parse_response(a->buf, a->buf_len, &resp) <= 0)
		return -EBADMSG; /* the caller parsed it already */
	if (resp.status == 101)
		return -EBADMSG;
	if (resp.status >= 100 && resp.status < 200)
		return 0; /* interim: the final head follows */
	enum st_http_body_kind kind;
	uint64_t length = 0;
	if (st_http_response_body(&resp, a->head_request, &kind, &length) < 0)
		return -EBADMSG;
	size_t kept = 0;
	for (size_t i = 0; i < resp.num_headers; i++) {
		struct st_http_header h = resp.headers[i];
		if (field_dropped(&h))
			continue;
		/* The view points into a->buf, ours: lower case in place (RFC 9113 §8.2.1). */
		char *name = (char *)(uintptr_t)h.name;
		for (size_t k = 0; k < h.name_len; k++)
			if (name[k] >= 'A' && name[k] <= 'Z')
				name[k] = (char)(name[k] - 'A' + 'a');
		resp.headers[kept++] = h;
	}
	switch (kind) {
	case ST_HTTP_BODY_NONE:
		a->state = CS_H2ANS_DONE;
		break;
	case ST_HTTP_BODY_LENGTH:
		a->remaining = length;
		a->state = length ? CS_H2ANS_LENGTH : CS_H2ANS_DONE;
		break;
	case ST_HTTP_BODY_CHUNKED:
		st_chunked_init(&a->ck);
		a->state = CS_H2ANS_CHUNKED;
		break;
	case ST_HTTP_BODY_UNTIL_CLOSE:
		a->state = CS_H2ANS_UNTIL_END;
		break;
	default:
		return -EBADMSG; /* an upgrade */
	}
	return cbs->on_head(user, resp.status, resp.headers, kept, a->state != CS_H2ANS_DONE);
}

/* Head bytes: returns those of @p consumed (0 with the head incomplete and all taken is not
 * possible: then it returns @len), or < 0. */
static ssize_t feed_head(struct cs_h2ans *a, const uint8_t *p, size_t len,
                         const struct cs_h2ans_cbs *cbs, void *user)
{
	if (a->buf == NULL) {
		a->buf = malloc(ST_MAX_HTTP_HEAD_BYTES);
		if (a->buf == NULL)
			return -ENOMEM;
	}
	size_t old = a->buf_len;
	size_t room = ST_MAX_HTTP_HEAD_BYTES - old;
	size_t take = len < room ? len : room;
	memcpy(a->buf + old, p, take);
	a->buf_len += take;
	struct st_http_response resp;
	ssize_t n = st_http_parse_response(a->buf, a->buf_len, &resp);
	if (n < 0)
		return n;
	if (n == 0) {
		if (a->buf_len == ST_MAX_HTTP_HEAD_BYTES)
			return -EMSGSIZE;
		return (ssize_t)take;
	}
	a->buf_len = (size_t)n; /* the head alone */
	int rc = on_full_head(a, cbs, user);
	free(a->buf);
	a->buf = NULL;
	a->buf_len = 0;
	if (rc < 0)
		return rc;
	return (ssize_t)((size_t)n - old);
}

ssize_t cs_h2ans_feed(struct cs_h2ans *a, const uint8_t *p, size_t len,
                      const struct cs_h2ans_cbs *cbs, void *user)
{
	size_t done = 0;
	while (done < len && a->state != CS_H2ANS_DONE) {
		const uint8_t *in = p + done;
		size_t left = len - done;
		ssize_t n;
		int rc = 0;
		switch (a->state) {
		case CS_H2ANS_HEAD:
			n = feed_head(a, in, left, cbs, user);
			break;
		case CS_H2ANS_LENGTH: {
			size_t take = a->remaining < left ? (size_t)a->remaining : left;
			a->remaining -= take;
			if (a->remaining == 0)
				a->state = CS_H2ANS_DONE;
			rc = cbs->on_body(user, in, take);
			n = (ssize_t)take;
			break;
		}
		case CS_H2ANS_CHUNKED: {
			const uint8_t *data = NULL;
			size_t data_len = 0;
			n = st_chunked_decode(&a->ck, in, left, &data, &data_len);
			if (n == 0 || st_chunked_done(&a->ck))
				a->state = CS_H2ANS_DONE;
			if (n > 0 && data_len > 0)
				rc = cbs->on_body(user, data, data_len);
			break;
		}
		case CS_H2ANS_UNTIL_END:
			rc = cbs->on_body(user, in, left);
			n = (ssize_t)left;
			break;
		default:
			n = 0;
			break;
		}
		if (n < 0)
			return n;
		if (rc < 0)
			return rc;
		done += (size_t)n;
	}
	return (ssize_t)done;
}
