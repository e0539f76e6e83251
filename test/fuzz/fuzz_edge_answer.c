/* Fuzz target: the edge's body-only relay and backend request heads (edgestream/src/answer.h).
 * The first byte picks the mode: even = the input after it is a backend response fed in pieces
 * whose sizes come from the input itself (the body can never exceed the input; interim 1xx heads
 * are passed over the same way however it is split, and give no status); odd = the input
 * is a JSON connect request whose backend head must parse back as a request with the same
 * method and no header split. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <stream/http.h>

#include "answer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Framing only (no output), the response fed at once: where it ended and what its heads said. */
static void follow_whole(const uint8_t *data, size_t size, struct es_body_only *w, ssize_t *rc)
{
	es_body_only_init(w);
	*rc = es_body_only_feed(w, data, size, NULL, SIZE_MAX);
	es_body_only_cleanup(w);
}

static void body_only(const uint8_t *data, size_t size)
{
	struct es_body_only b;
	es_body_only_init(&b);
	uint8_t out[4096];
	size_t total_out = 0, off = 0, i = 0;
	bool failed = false;
	while (off < size) {
		size_t step = 1 + (size_t)(data[i++ % size] % 200);
		if (step > size - off)
			step = size - off;
		ssize_t n = es_body_only_feed(&b, data + off, step, out, sizeof out);
		if (n < 0) {
			failed = true;
			break;
		}
		if ((size_t)n > step)
			abort();
		total_out += (size_t)n;
		off += step;
	}
	if (total_out > size)
		abort();
	if (!b.head_done && b.status != 0)
		abort(); /* an interim head is no answer */
	es_body_only_cleanup(&b);
	if (failed || size == 0)
		return;
	/* Split or whole, the same heads were seen. */
	struct es_body_only w;
	ssize_t rc;
	follow_whole(data, size, &w, &rc);
	if (rc < 0 || w.head_done != b.head_done || w.interim != b.interim ||
	    w.status != b.status || w.done != b.done)
		abort();
}

static void request_head(const uint8_t *data, size_t size)
{
	struct st_connect_req req;
	if (st_connect_req_decode(data, size, &req) < 0)
		return;
	static char out[ST_MAX_HTTP_HEAD_BYTES];
	bool upgrade;
	ssize_t n = es_request_head(out, sizeof out, &req, req.path, strlen(req.path),
	                            "127.0.0.1:10250", true, false, &upgrade);
	if (n > 0) {
		struct st_http_request r;
		ssize_t h = st_http_parse_request((const uint8_t *)out, (size_t)n, &r);
		/* Whatever the connect said, the head is one well-formed request or refused by
		 * our strict parser; it never carries bytes past its end (no smuggling). */
		if (h > 0 && h != n)
			abort();
		if (h > 0 && (r.method_len != strlen(req.method[0] ? req.method : "GET")))
			abort();
	}
	st_connect_req_cleanup(&req);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	if (data[0] & 1)
		request_head(data + 1, size - 1);
	else
		body_only(data + 1, size - 1);
	return 0;
}
