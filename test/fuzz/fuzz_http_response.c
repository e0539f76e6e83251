/* Fuzz target: HTTP/1.x response head parsing (stream/http.h). Checks that every view lies inside
 * the input and inside the head, and exercises the body-framing (for a GET and for a HEAD) and
 * keep-alive helpers. */
#include "fuzz_http_head.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct st_http_response m;
	ssize_t n = st_http_parse_response(data, size, &m);
	if (!fuzz_http_head_parsed(n, size))
		return 0;
	size_t head = (size_t)n;
	fuzz_http_check_headers(data, head, m.minor_version, m.headers, m.num_headers);
	fuzz_http_check_view(data, head, m.reason, m.reason_len);
	if (m.status < 100 || m.status > 999)
		abort();
	enum st_http_body_kind kind;
	uint64_t length;
	for (int is_head = 0; is_head < 2; is_head++) {
		int rc = st_http_response_body(&m, is_head, &kind, &length);
		if (rc != 0 && rc != -EBADMSG)
			abort();
	}
	return 0;
}
