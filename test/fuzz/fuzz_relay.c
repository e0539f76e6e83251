/* Fuzz target: cloudstream's relay decisions over an edge's answer (cloudstream/src/relay.h).
 * Byte 0 picks the mode (raw backend response, or a base edge's body that we frame chunked),
 * whether the request was HEAD, and a split size; the rest is the answer. Whatever the split:
 * the same verdict (error, done, keep-alive, what an end of stream means) and the same bytes
 * toward the client; a raw answer is relayed unchanged up to its end; a body-only answer comes
 * out as one well-formed chunked body carrying exactly the input. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <stream/chunked.h>
#include <stream/ext.h>
#include <stream/http.h>

#include "relay.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct outcome {
	int rc;
	bool done, keep_alive;
	size_t taken; /* input bytes relayed */
	uint8_t *out; /* every byte queued toward the client */
	size_t out_len, out_cap;
	struct cs_relay_end end;
};

static void put(struct outcome *o, const void *p, size_t n)
{
	if (n == 0)
		return;
	if (o->out_len + n > o->out_cap)
		abort(); /* the emission is bounded: framing is at most a head and 20 bytes a piece */
	memcpy(o->out + o->out_len, p, n);
	o->out_len += n;
}

static void run(const uint8_t *in, size_t len, size_t step, bool raw, bool head, struct outcome *o)
{
	const char *text = head ? "HEAD /metrics HTTP/1.1\r\nHost: h\r\n\r\n"
	                        : "GET /metrics HTTP/1.1\r\nHost: h\r\n\r\n";
	struct st_http_request req;
	if (st_http_parse_request((const uint8_t *)text, strlen(text), &req) <= 0)
		abort();
	struct cs_relay r;
	cs_relay_init(&r);
	const char *why;
	if (cs_relay_begin(&r, &req, &why) != 0)
		abort();
	cs_relay_start(&r, raw ? ST_CAP_RAW_RESPONSE : 0);
	if (r.mode != (raw ? CS_RELAY_RAW : CS_RELAY_BODY_ONLY))
		abort();
	size_t pos = 0;
	while (pos < len && !o->done) {
		size_t piece = step && step < len - pos ? step : len - pos;
		struct cs_relay_emit e;
		int rc = cs_relay_answer(&r, in + pos, piece, &e);
		if (rc < 0) {
			o->rc = rc;
			break;
		}
		if (e.take > piece || (e.head_len && r.answered))
			abort();
		put(o, e.head, e.head_len);
		put(o, e.chunk, e.chunk_len);
		put(o, in + pos, e.take);
		put(o, e.trailer, e.trailer_len);
		if (o->out_len)
			cs_relay_sent(&r);
		o->taken += e.take;
		o->done = e.done;
		pos += piece;
		if (e.take < piece && !e.done)
			abort(); /* bytes are dropped only after the end */
	}
	o->keep_alive = o->done && cs_relay_keep_alive(&r);
	if (o->rc == 0) {
		cs_relay_on_end(&r, len % 10, &o->end);
		if ((o->end.verdict == CS_RELAY_FAIL) != !r.answered)
			abort(); /* an error of ours only before any answer byte */
		if (o->end.verdict == CS_RELAY_DONE && raw != (o->end.last_len == 0))
			abort();
	}
	cs_relay_cleanup(&r);
	if (r.answered || r.resp.head != NULL)
		abort();
}

/* A body-only answer must be a 200 head and a chunked body carrying exactly @in. */
static void check_body_only(const struct outcome *o, const uint8_t *in, size_t len)
{
	if (len == 0)
		return;
	struct st_http_response resp;
	ssize_t h = st_http_parse_response(o->out, o->out_len, &resp);
	if (h <= 0 || resp.status != 200)
		abort();
	struct st_chunked_decoder d;
	st_chunked_init(&d);
	size_t pos = (size_t)h, got = 0;
	while (pos < o->out_len) {
		const uint8_t *p;
		size_t n;
		ssize_t used = st_chunked_decode(&d, o->out + pos, o->out_len - pos, &p, &n);
		if (used <= 0)
			abort();
		if (n && (got + n > len || memcmp(in + got, p, n) != 0))
			abort();
		got += n;
		pos += (size_t)used;
	}
	if (got != len || st_chunked_done(&d))
		abort(); /* the last chunk comes with the end of the stream */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	bool raw = data[0] & 1, head = data[0] & 2;
	size_t step = (size_t)(data[0] >> 2) + 1;
	data++;
	size--;
	size_t cap = size + 256 + (size + 1) * 24;
	struct outcome whole = {.out = malloc(cap), .out_cap = cap};
	struct outcome split = {.out = malloc(cap), .out_cap = cap};
	if (whole.out == NULL || split.out == NULL)
		abort();
	run(data, size, 0, raw, head, &whole);
	run(data, size, step, raw, head, &split);
	if (whole.rc != split.rc || whole.done != split.done ||
	    whole.keep_alive != split.keep_alive || whole.end.verdict != split.end.verdict ||
	    whole.end.cut_short != split.end.cut_short)
		abort();
	/* Raw: relayed unchanged, a prefix of the input (up to an error, if any). */
	if (raw && (whole.out_len != whole.taken || split.out_len != split.taken ||
	            memcmp(whole.out, data, whole.taken) != 0 ||
	            memcmp(split.out, data, split.taken) != 0))
		abort();
	if (whole.rc == 0) {
		if (whole.taken != split.taken)
			abort();
		if (!raw) {
			check_body_only(&whole, data, size);
			check_body_only(&split, data, size);
		}
	}
	free(whole.out);
	free(split.out);
	return 0;
}
