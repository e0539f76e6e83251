/* Fuzz target: HTTP/1.x request head parsing (stream/http.h). Checks that every view lies inside
 * the input and inside the head, and exercises the body-framing and keep-alive helpers. */
#include <stdint.h>
#include <stdlib.h>

#include <stream/err.h>
#include <stream/http.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_view(const uint8_t *data, size_t head, const char *p, size_t len)
{
	if (len == 0)
		return;
	if ((const uint8_t *)p < data || (const uint8_t *)p + len > data + head)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct st_http_request m;
	ssize_t n = st_http_parse_request(data, size, &m);
	if (n < 0) {
		if (n != -EBADMSG && n != -EMSGSIZE)
			abort();
		return 0;
	}
	if (n == 0)
		return 0;
	if ((size_t)n > size || (size_t)n > ST_MAX_HTTP_HEAD_BYTES ||
	    m.num_headers > ST_MAX_HTTP_HEADERS)
		abort();
	for (size_t i = 0; i < m.num_headers; i++) {
		if (m.headers[i].name_len == 0)
			abort();
		check_view(data, (size_t)n, m.headers[i].name, m.headers[i].name_len);
		check_view(data, (size_t)n, m.headers[i].value, m.headers[i].value_len);
	}
	enum st_http_body_kind kind;
	uint64_t length;
	(void)st_http_keep_alive(m.minor_version, m.headers, m.num_headers);
	(void)st_http_header_has_token(m.headers, m.num_headers, "connection", "upgrade");
	check_view(data, (size_t)n, m.method, m.method_len);
	check_view(data, (size_t)n, m.target, m.target_len);
	check_view(data, (size_t)n, m.path, m.path_len);
	if (m.query != NULL)
		check_view(data, (size_t)n, m.query, m.query_len);
	if (m.method_len == 0 || m.target_len == 0 ||
	    m.path_len + (m.query ? m.query_len + 1 : 0) != m.target_len)
		abort();
	int rc = st_http_request_body(&m, &kind, &length);
	if (rc != 0 && rc != -EBADMSG)
		abort();
	return 0;
}
