/* Fuzz target: chunked decoding (stream/chunked.h). The first byte picks a split point; the
 * result (consumed bytes, body, done, error) must be the same whole, split, and byte by byte. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <stream/chunked.h>
#include <stream/err.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct result {
	ssize_t rc; /* consumed, or the error */
	bool done;
	uint64_t body_len;
	uint64_t body_hash;
};

static void run(const uint8_t *in, size_t len, size_t step, struct result *r)
{
	struct st_chunked_decoder d;
	st_chunked_init(&d);
	memset(r, 0, sizeof *r); /* padding too: results are compared with memcmp */
	uint64_t h = 1469598103934665603ull;
	size_t pos = 0;
	r->rc = 0;
	while (pos < len && !st_chunked_done(&d)) {
		size_t end = step ? pos + step : len;
		if (end > len)
			end = len;
		const uint8_t *body;
		size_t body_len;
		ssize_t n = st_chunked_decode(&d, in + pos, end - pos, &body, &body_len);
		if (n < 0) {
			r->rc = n;
			break;
		}
		if (n == 0)
			break;
		if ((size_t)n > end - pos || body_len > (size_t)n)
			abort();
		for (size_t i = 0; i < body_len; i++)
			h = (h ^ body[i]) * 1099511628211ull;
		pos += (size_t)n;
		r->rc = (ssize_t)pos;
	}
	r->done = st_chunked_done(&d);
	r->body_len = d.body_bytes;
	r->body_hash = h;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t step = data[0] % 17;
	data++;
	size--;
	struct result whole, split, bytes;
	run(data, size, 0, &whole);
	run(data, size, step, &split);
	run(data, size, 1, &bytes);
	if (memcmp(&whole, &split, sizeof whole) != 0 || memcmp(&whole, &bytes, sizeof whole) != 0)
		abort();
	if (whole.rc < 0 && whole.rc != -EBADMSG && whole.rc != -EMSGSIZE)
		abort();
	return 0;
}
