/* Fuzz target: HTTP/1.x request head parsing (stream/http.h). Checks that every view lies inside
 * the input and inside the head, and exercises the body-framing and keep-alive helpers. */
#include "fuzz_http_head.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct st_http_request m;
	ssize_t n = st_http_parse_request(data, size, &m);
	if (!fuzz_http_head_parsed(n, size))
		return 0;
	size_t head = (size_t)n;
	fuzz_http_check_headers(data, head, m.minor_version, m.headers, m.num_headers);
	fuzz_http_check_view(data, head, m.method, m.method_len);
	fuzz_http_check_view(data, head, m.target, m.target_len);
	fuzz_http_check_view(data, head, m.path, m.path_len);
	if (m.query != NULL)
		fuzz_http_check_view(data, head, m.query, m.query_len);
	if (m.method_len == 0 || m.target_len == 0 ||
	    m.path_len + (m.query ? m.query_len + 1 : 0) != m.target_len)
		abort();
	enum st_http_body_kind kind;
	uint64_t length;
	int rc = st_http_request_body(&m, &kind, &length);
	if (rc != 0 && rc != -EBADMSG)
		abort();
	return 0;
}
