/* What the HTTP/1.x request and response head fuzz targets check alike (stream/http.h): the
 * parser's result, and that every view it hands out lies inside the input's head. */
#ifndef FUZZ_HTTP_HEAD_H
#define FUZZ_HTTP_HEAD_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/types.h>

#include <stream/err.h>
#include <stream/http.h>

static inline void fuzz_http_check_view(const uint8_t *data, size_t head, const char *p, size_t len)
{
	if (len == 0)
		return;
	if ((const uint8_t *)p < data || (const uint8_t *)p + len > data + head)
		abort();
}

/* @n: what the parser returned for @size input bytes. True when a whole head of @n bytes was
 * parsed (go on checking it); false for "need more" or a refusal with an allowed error. */
static inline bool fuzz_http_head_parsed(ssize_t n, size_t size)
{
	if (n < 0) {
		if (n != -EBADMSG && n != -EMSGSIZE)
			abort();
		return false;
	}
	if ((size_t)n > size || (size_t)n > ST_MAX_HTTP_HEAD_BYTES)
		abort();
	return n > 0;
}

/* The header views of a parsed head of @head bytes, and the helpers that read headers. */
static inline void fuzz_http_check_headers(const uint8_t *data, size_t head, int minor_version,
                                           const struct st_http_header *headers, size_t num)
{
	if (num > ST_MAX_HTTP_HEADERS)
		abort();
	for (size_t i = 0; i < num; i++) {
		if (headers[i].name_len == 0)
			abort();
		fuzz_http_check_view(data, head, headers[i].name, headers[i].name_len);
		fuzz_http_check_view(data, head, headers[i].value, headers[i].value_len);
	}
	(void)st_http_keep_alive(minor_version, headers, num);
	(void)st_http_header_has_token(headers, num, "connection", "upgrade");
}

#endif
