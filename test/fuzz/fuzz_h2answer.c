/* Fuzz target: an HTTP/1.1 answer as an HTTP/2 stream's answer (cloudstream/src/h2answer.h).
 * Byte 0 picks whether the request was HEAD and a split size; the rest is the answer. Whatever
 * the split: the same result (error or not), the same head (status, fields, none forbidden by
 * RFC 9113 §8.2.2, names in lower case), the same body bytes, the same end; at most one head;
 * never a body after a head that said there is none. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "h2answer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct outcome {
	ssize_t rc;
	int heads, status;
	bool has_body, done, end_ok;
	uint8_t head[ST_MAX_HTTP_HEAD_BYTES + 1024];
	size_t head_len;
	uint8_t *body;
	size_t body_len;
};

static void put(uint8_t *dst, size_t *len, size_t cap, const void *p, size_t n)
{
	if (*len + n > cap)
		abort();
	memcpy(dst + *len, p, n);
	*len += n;
}

static int on_head(void *user, int status, const struct st_http_header *h, size_t n, bool has_body)
{
	struct outcome *o = user;
	if (o->heads++ > 0)
		abort();
	o->status = status;
	o->has_body = has_body;
	for (size_t i = 0; i < n; i++) {
		for (size_t k = 0; k < h[i].name_len; k++)
			if (h[i].name[k] >= 'A' && h[i].name[k] <= 'Z')
				abort();
		if ((h[i].name_len == 10 && memcmp(h[i].name, "connection", 10) == 0) ||
		    (h[i].name_len == 17 && memcmp(h[i].name, "transfer-encoding", 17) == 0))
			abort();
		put(o->head, &o->head_len, sizeof o->head, h[i].name, h[i].name_len);
		put(o->head, &o->head_len, sizeof o->head, ":", 1);
		put(o->head, &o->head_len, sizeof o->head, h[i].value, h[i].value_len);
		put(o->head, &o->head_len, sizeof o->head, "\n", 1);
	}
	return 0;
}

static int on_body(void *user, const uint8_t *p, size_t n)
{
	struct outcome *o = user;
	if (o->heads != 1 || !o->has_body || n == 0)
		abort();
	put(o->body, &o->body_len, 1u << 20, p, n);
	return 0;
}

static const struct cs_h2ans_cbs cbs = {.on_head = on_head, .on_body = on_body};

static void run(const uint8_t *in, size_t len, size_t step, bool head, struct outcome *o)
{
	struct cs_h2ans a;
	cs_h2ans_init(&a, head);
	size_t pos = 0;
	o->rc = 0;
	while (pos < len) {
		size_t n = len - pos < step ? len - pos : step;
		ssize_t r = cs_h2ans_feed(&a, in + pos, n, &cbs, o);
		if (r < 0) {
			o->rc = r;
			break;
		}
		if ((size_t)r > n)
			abort();
		pos += (size_t)r;
		if ((size_t)r < n) {
			if (!cs_h2ans_done(&a))
				abort(); /* only the end leaves bytes */
			break;
		}
	}
	if (o->rc == 0)
		o->rc = (ssize_t)pos;
	o->done = cs_h2ans_done(&a);
	o->end_ok = cs_h2ans_end_ok(&a);
	cs_h2ans_cleanup(&a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > (1u << 20))
		return 0;
	bool head = data[0] & 1;
	size_t step = (size_t)(data[0] >> 1) + 1;
	static struct outcome whole, split;
	memset(&whole, 0, offsetof(struct outcome, head_len));
	memset(&split, 0, offsetof(struct outcome, head_len));
	whole.head_len = split.head_len = 0;
	whole.body_len = split.body_len = 0;
	whole.body = malloc(1u << 20);
	split.body = malloc(1u << 20);
	if (whole.body == NULL || split.body == NULL)
		abort();
	run(data + 1, size - 1, size, head, &whole);
	run(data + 1, size - 1, step, head, &split);
	/* The same outcome whatever the split (an error may come at the same point or not). */
	if ((whole.rc < 0) != (split.rc < 0))
		abort();
	if (whole.rc >= 0) {
		if (whole.rc != split.rc || whole.heads != split.heads ||
		    whole.status != split.status || whole.has_body != split.has_body ||
		    whole.done != split.done || whole.end_ok != split.end_ok ||
		    whole.head_len != split.head_len || whole.body_len != split.body_len ||
		    memcmp(whole.head, split.head, whole.head_len) != 0 ||
		    memcmp(whole.body, split.body, whole.body_len) != 0)
			abort();
		if (whole.body_len > (size_t)whole.rc)
			abort();
	}
	free(whole.body);
	free(split.body);
	return 0;
}
