/* Fuzz target: JSON connect request (stream/connect.h). Decodes; on success encodes and decodes
 * again and requires the same fields (Go-style escaping must round-trip). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <stream/connect.h>
#include <stream/err.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int same(const char *a, const char *b)
{
	return strcmp(a, b) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct st_connect_req req;
	int rc = st_connect_req_decode(data, size, &req);
	if (rc != 0) {
		if (rc != -EBADMSG && rc != -EMSGSIZE && rc != -ENOMEM)
			abort();
		return 0;
	}
	if (req.path[0] == '\0' || req.method[0] == '\0' ||
	    req.num_headers > ST_MAX_CONNECT_HEADERS)
		abort();
	static char out[ST_MAX_CONNECT_JSON_BYTES];
	ssize_t n = st_connect_req_encode(out, sizeof out, &req);
	if (n > 0) {
		struct st_connect_req back;
		rc = st_connect_req_decode((const uint8_t *)out, (size_t)n, &back);
		/* Re-encoding may grow strings (\ufffd for invalid UTF-8) past a cap: -EMSGSIZE is
		 * the only acceptable failure. */
		if (rc == 0) {
			if (back.connect_id != req.connect_id || !same(back.path, req.path) ||
			    !same(back.method, req.method) || !same(back.host, req.host) ||
			    !same(back.raw_query, req.raw_query) ||
			    back.num_headers != req.num_headers)
				abort();
			st_connect_req_cleanup(&back);
		} else if (rc != -EMSGSIZE) {
			abort();
		}
	}
	st_connect_req_cleanup(&req);
	return 0;
}
