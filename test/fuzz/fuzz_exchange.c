/* Fuzz target: cloudstream's response tracker and request planning (cloudstream/src/exchange.h).
 * Byte 0 picks a split size and whether the request was HEAD; the tracker must give the same
 * verdict (bytes belonging to the response, done, status, or the error) however the input is
 * split, interim 1xx heads before the final one included (counted the same, never a status).
 * The same bytes are also planned as a request head. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <stream/http.h>

#include "exchange.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct verdict {
	ssize_t rc;
	bool done, upgraded, keep_alive;
	int status;
	unsigned interim;
};

static void run(const uint8_t *in, size_t len, size_t step, bool head, struct verdict *v)
{
	struct cs_resp r;
	cs_resp_init(&r, head);
	memset(v, 0, sizeof *v);
	size_t pos = 0;
	while (pos < len && !cs_resp_done(&r)) {
		size_t piece = step && step < len - pos ? step : len - pos;
		ssize_t n = cs_resp_feed(&r, in + pos, piece);
		if (n < 0) {
			v->rc = n;
			cs_resp_cleanup(&r);
			return;
		}
		if ((size_t)n > piece)
			abort();
		pos += (size_t)n;
		if ((size_t)n < piece)
			break;
	}
	v->rc = (ssize_t)pos;
	v->done = cs_resp_done(&r);
	v->upgraded = r.upgraded;
	v->keep_alive = r.keep_alive;
	v->status = r.status;
	v->interim = r.interim;
	if (r.head_done && r.bytes != pos)
		abort();
	if (!r.head_done && (r.status != 0 || r.upgraded)) /* interim heads set neither */
		abort();
	cs_resp_cleanup(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t step = (size_t)(data[0] & 0x7f) + 1;
	bool head = data[0] & 0x80;
	data++;
	size--;
	struct verdict whole, split;
	run(data, size, 0, head, &whole);
	run(data, size, step, head, &split);
	if (whole.rc != split.rc || whole.done != split.done || whole.status != split.status ||
	    whole.upgraded != split.upgraded || whole.keep_alive != split.keep_alive ||
	    whole.interim != split.interim)
		abort();

	struct st_http_request req;
	if (st_http_parse_request(data, size, &req) > 0) {
		struct cs_plan plan;
		const char *why = NULL;
		int st = cs_plan_request(&req, &plan, &why);
		if (st != 0 && why == NULL)
			abort();
		if (st == 0) {
			static char json[ST_MAX_CONNECT_JSON_BYTES];
			(void)cs_connect_json(&req, 1, "127.0.0.1:10350", json, sizeof json);
		}
	}
	return 0;
}
