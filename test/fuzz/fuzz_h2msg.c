/* Fuzz target: the kubelet's HTTP/2 answer turned into the HTTP/1.1 head the relay sends on
 * (edgestream/src/h2msg.h), and the per-stream credit bookkeeping.
 *
 * Input: fields as "name\0value\0" pairs (a name starting with ':' is a pseudo-header, as
 * nghttp2 hands them), the first byte's low bit saying whether the request was a HEAD. Whatever
 * es_h2_head_field accepts, a head that es_h2_head_write produces must parse as one HTTP/1.1
 * response head of exactly its length (no field may smuggle a line break), carry the status
 * given, and say chunked exactly when it claims to. Then a run of flow steps from the same bytes:
 * the credit given back never exceeds what arrived. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <stream/http.h>

#include "h2msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void answer_head(const uint8_t *data, size_t size)
{
	if (size == 0)
		return;
	bool head_request = data[0] & 1;
	struct es_h2_head h;
	es_h2_head_init(&h);
	size_t off = 1;
	while (off < size) {
		const uint8_t *name = data + off;
		const uint8_t *nul = memchr(name, 0, size - off);
		if (nul == NULL)
			break;
		size_t name_len = (size_t)(nul - name);
		off += name_len + 1;
		const uint8_t *value = data + off;
		nul = memchr(value, 0, size - off);
		size_t value_len = nul ? (size_t)(nul - value) : size - off;
		off += value_len + (nul ? 1 : 0);
		if (es_h2_head_field(&h, name, name_len, value, value_len) < 0)
			break;
	}
	static char out[ST_MAX_HTTP_HEAD_BYTES + 4096];
	bool chunked = false;
	ssize_t n = es_h2_head_write(&h, head_request, out, sizeof out, &chunked);
	if (n > 0) {
		struct st_http_response r;
		ssize_t parsed = st_http_parse_response((const uint8_t *)out, (size_t)n, &r);
		if (parsed != n || r.status != h.status)
			abort(); /* a field broke the head: smuggling */
		bool says_chunked = false;
		for (size_t i = 0; i < r.num_headers; i++)
			if (r.headers[i].name_len == 17 &&
			    strncasecmp(r.headers[i].name, "Transfer-Encoding", 17) == 0)
				says_chunked = true;
		if (says_chunked != chunked)
			abort();
		if (chunked && (head_request || h.has_length))
			abort();
	}
	es_h2_head_cleanup(&h);
}

static void flow(const uint8_t *data, size_t size)
{
	struct es_h2_flow f = {0};
	uint64_t arrived = 0, returned = 0;
	for (size_t i = 0; i < size; i++) {
		uint8_t b = data[i];
		if (b & 0x80) {
			returned += es_h2_flow_drained(&f);
		} else {
			size_t n = (size_t)(b & 0x3f) * 256u;
			arrived += n;
			returned += es_h2_flow_received(&f, n, b & 0x40);
		}
		if (returned > arrived)
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	answer_head(data, size);
	flow(data, size);
	return 0;
}
