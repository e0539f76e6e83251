/* Unit tests for HTTP/1.x head parsing (stream/http.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stream/err.h>
#include <stream/http.h>

#include "guard.h"

/* What kube-apiserver 1.26 sends for a kubectl 1.27 exec (lab README §6.2). */
static const char exec_req[] =
        "POST /exec/default/demo/loop?command=sh&command=-c&command=echo+a+b&error=1&output=1 "
        "HTTP/1.1\r\n"
        "Host: 127.0.0.1:16443\r\n"
        "X-Forwarded-For: 127.0.0.1\r\n"
        "Upgrade: SPDY/3.1\r\n"
        "Connection: Upgrade\r\n"
        "Content-Length: 0\r\n"
        "User-Agent: kubectl.1.27/v1.27.16 (linux/amd64) kubernetes/cbb86e0\r\n"
        "X-Stream-Protocol-Version: v4.channel.k8s.io\r\n"
        "X-Stream-Protocol-Version: v3.channel.k8s.io\r\n"
        "\r\n";

static const char logs_resp[] = "HTTP/1.1 200 OK\r\n"
                                "Content-Type: text/plain; charset=utf-8\r\n"
                                "Transfer-Encoding: chunked\r\n"
                                "\r\n";

static ssize_t req_str(const char *s, struct st_http_request *r)
{
	return st_http_parse_request((const uint8_t *)s, strlen(s), r);
}

static ssize_t resp_str(const char *s, struct st_http_response *r)
{
	return st_http_parse_response((const uint8_t *)s, strlen(s), r);
}

static void assert_view(const char *p, size_t len, const char *want)
{
	assert_int_equal(len, strlen(want));
	assert_memory_equal(p, want, len);
}

static void test_exec_request(void **state)
{
	(void)state;
	struct st_http_request r;
	/* Trailing bytes after the head (the upgraded stream) are not part of it. */
	char buf[1024];
	int n = snprintf(buf, sizeof buf, "%s%s", exec_req, "\x80\x03\x00\x01");
	assert_int_equal(st_http_parse_request((uint8_t *)buf, (size_t)n, &r),
	                 (ssize_t)strlen(exec_req));
	assert_view(r.method, r.method_len, "POST");
	assert_view(r.path, r.path_len, "/exec/default/demo/loop");
	assert_view(r.query, r.query_len,
	            "command=sh&command=-c&command=echo+a+b&error=1&output=1");
	assert_int_equal(r.minor_version, 1);
	assert_int_equal(r.num_headers, 8);
	assert_view(r.headers[0].name, r.headers[0].name_len, "Host");
	assert_view(r.headers[0].value, r.headers[0].value_len, "127.0.0.1:16443");
	ssize_t i = st_http_header_find(r.headers, r.num_headers, "x-stream-protocol-version", 0);
	assert_int_equal(i, 6);
	assert_int_equal(st_http_header_find(r.headers, r.num_headers, "X-Stream-Protocol-Version",
	                                     (size_t)i + 1),
	                 7);
	assert_int_equal(st_http_header_find(r.headers, r.num_headers, "x-absent", 0), -1);
	assert_true(st_http_header_has_token(r.headers, r.num_headers, "connection", "upgrade"));
	enum st_http_body_kind kind;
	uint64_t len;
	assert_int_equal(st_http_request_body(&r, &kind, &len), 0);
	assert_int_equal(kind, ST_HTTP_BODY_UPGRADE);
	assert_true(st_http_keep_alive(r.minor_version, r.headers, r.num_headers));
}

static void test_methods_and_forms(void **state)
{
	(void)state;
	static const char *const methods[] = {"GET",     "POST",     "PUT",
	                                      "PATCH",   "DELETE",   "HEAD",
	                                      "OPTIONS", "M-SEARCH", "X!#$%&'*+.^_`|~"};
	for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
		char buf[256];
		snprintf(buf, sizeof buf, "%s /metrics HTTP/1.0\r\n\r\n", methods[i]);
		struct st_http_request r;
		assert_int_equal(req_str(buf, &r), (ssize_t)strlen(buf));
		assert_view(r.method, r.method_len, methods[i]);
		assert_int_equal(r.minor_version, 0);
		assert_null(r.query);
		assert_int_equal(r.num_headers, 0);
		assert_false(st_http_keep_alive(0, r.headers, r.num_headers));
	}
	struct st_http_request r;
	/* Empty query, bare LF line endings, one leading empty line, OWS trimmed. */
	assert_int_equal(req_str("\r\nGET /a? HTTP/1.1\nX:  v w \t\n\n", &r), 30);
	assert_view(r.query, r.query_len, "");
	assert_view(r.headers[0].value, r.headers[0].value_len, "v w");
	/* Empty value and obs-text in a value. */
	assert_true(req_str("GET / HTTP/1.1\r\nA:\r\nB: \xc3\xa9\r\n\r\n", &r) > 0);
	assert_int_equal(r.headers[0].value_len, 0);
	assert_view(r.headers[1].value, r.headers[1].value_len, "\xc3\xa9");
}

static void test_bad_requests(void **state)
{
	(void)state;
	static const char *const bad[] = {
	        "GET  / HTTP/1.1\r\n\r\n", /* two spaces */
	        " GET / HTTP/1.1\r\n\r\n", /* leading space */
	        "GET / HTTP/1.2\r\n\r\n",  /* version */
	        "GET / HTTP/2.0\r\n\r\n",
	        "GET / http/1.1\r\n\r\n",
	        "GET /\r\n\r\n", /* HTTP/0.9 */
	        "GET / HTTP/1.1 \r\n\r\n",
	        "G(T / HTTP/1.1\r\n\r\n", /* non-token method */
	        "GET /a b HTTP/1.1\r\n\r\n",
	        "GET /\x01 HTTP/1.1\r\n\r\n",
	        "GET / HTTP/1.1\rX: y\r\n\r\n",         /* bare CR */
	        "GET / HTTP/1.1\r\nX : y\r\n\r\n",      /* space before colon */
	        "GET / HTTP/1.1\r\nX\r\n\r\n",          /* no colon */
	        "GET / HTTP/1.1\r\n: y\r\n\r\n",        /* empty name */
	        "GET / HTTP/1.1\r\nX: y\r\n z\r\n\r\n", /* obs-fold */
	        "GET / HTTP/1.1\r\nX: a\x00b\r\n\r\n",  /* NUL: only what strlen sees; see below */
	        "GET / HTTP/1.1\r\nX: a\x7f\r\n\r\n",   /* DEL */
	        "GET / HTTP/1.1\r\nX: a\rb\r\n\r\n",    /* CR inside */
	        "GET / HTTP/1.1\r\nX(: y\r\n\r\n",
	        "\r\n\r\nGET / HTTP/1.1\r\n\r\n", /* two leading empty lines */
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct st_http_request r;
		ssize_t rc = req_str(bad[i], &r);
		if (i == 15) /* strlen stops at the NUL, leaving an incomplete head */
			rc = st_http_parse_request((const uint8_t *)bad[i], 28, &r);
		if (rc != -EBADMSG)
			fail_msg("bad request %zu: rc %zd", i, rc);
	}
}

static void test_every_prefix_and_bytewise(void **state)
{
	(void)state;
	const char *inputs[] = {exec_req, logs_resp};
	for (int which = 0; which < 2; which++) {
		const char *s = inputs[which];
		size_t len = strlen(s);
		for (size_t k = 0; k <= len; k++) {
			struct guard_buf g;
			assert_int_equal(guard_new(&g, s, k), 0);
			ssize_t rc;
			if (which == 0) {
				struct st_http_request r;
				rc = st_http_parse_request(g.data, g.len, &r);
			} else {
				struct st_http_response r;
				rc = st_http_parse_response(g.data, g.len, &r);
			}
			guard_free(&g);
			assert_int_equal(rc, k == len ? (ssize_t)len : 0);
		}
	}
}

static void test_responses(void **state)
{
	(void)state;
	struct st_http_response r;
	assert_int_equal(resp_str(logs_resp, &r), (ssize_t)strlen(logs_resp));
	assert_int_equal(r.status, 200);
	assert_view(r.reason, r.reason_len, "OK");
	enum st_http_body_kind kind;
	uint64_t len;
	assert_int_equal(st_http_response_body(&r, false, &kind, &len), 0);
	assert_int_equal(kind, ST_HTTP_BODY_CHUNKED);
	assert_int_equal(st_http_response_body(&r, true, &kind, &len), 0);
	assert_int_equal(kind, ST_HTTP_BODY_NONE);

	/* containerd's bare 403: no body length, so until close. */
	assert_true(resp_str("HTTP/1.1 403 Forbidden\r\n\r\n", &r) > 0);
	assert_int_equal(st_http_response_body(&r, false, &kind, &len), 0);
	assert_int_equal(kind, ST_HTTP_BODY_UNTIL_CLOSE);

	assert_true(resp_str("HTTP/1.1 101 Switching Protocols\r\nUpgrade: SPDY/3.1\r\n\r\n", &r) >
	            0);
	assert_int_equal(st_http_response_body(&r, false, &kind, &len), 0);
	assert_int_equal(kind, ST_HTTP_BODY_UPGRADE);

	assert_true(resp_str("HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n", &r) > 0);
	assert_int_equal(st_http_response_body(&r, false, &kind, &len), 0);
	assert_int_equal(kind, ST_HTTP_BODY_LENGTH);
	assert_true(len == 12);

	/* Reason may be absent or empty. */
	assert_true(resp_str("HTTP/1.0 204\r\n\r\n", &r) > 0);
	assert_int_equal(r.status, 204);
	assert_int_equal(r.reason_len, 0);
	assert_int_equal(st_http_response_body(&r, false, &kind, &len), 0);
	assert_int_equal(kind, ST_HTTP_BODY_NONE);
	assert_true(resp_str("HTTP/1.1 304 \r\n\r\n", &r) > 0);
	assert_int_equal(st_http_response_body(&r, false, &kind, &len), 0);
	assert_int_equal(kind, ST_HTTP_BODY_NONE);
	assert_true(resp_str("HTTP/1.1 100 Continue\r\n\r\n", &r) > 0);
	assert_int_equal(st_http_response_body(&r, false, &kind, &len), 0);
	assert_int_equal(kind, ST_HTTP_BODY_NONE);

	static const char *const bad[] = {
	        "HTTP/1.1 20 OK\r\n\r\n",  "HTTP/1.1 2000 OK\r\n\r\n",
	        "HTTP/1.1 099 X\r\n\r\n",  "HTTP/1.1  200 OK\r\n\r\n",
	        "HTTP/1.1 2x0 OK\r\n\r\n", "HTTP/1.3 200 OK\r\n\r\n",
	        "ICY 200 OK\r\n\r\n",      "HTTP/1.1 200 O\x01K\r\n\r\n",
	        "HTTP/1.1 200OK\r\n\r\n",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		if (resp_str(bad[i], &r) != -EBADMSG)
			fail_msg("bad response %zu accepted", i);
}

static void test_body_framing_rules(void **state)
{
	(void)state;
	struct {
		const char *head;
		int rc;
		enum st_http_body_kind kind;
		uint64_t len;
	} cases[] = {
	        {"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\n", 0, ST_HTTP_BODY_LENGTH, 5},
	        {"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", 0,
	         ST_HTTP_BODY_LENGTH, 5},
	        {"POST / HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n", 0, ST_HTTP_BODY_LENGTH, 5},
	        {"POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 0, ST_HTTP_BODY_NONE, 0},
	        {"GET / HTTP/1.1\r\n\r\n", 0, ST_HTTP_BODY_NONE, 0},
	        {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 0, ST_HTTP_BODY_CHUNKED,
	         0},
	        {"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 0,
	         ST_HTTP_BODY_CHUNKED, 0},
	        {"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", -EBADMSG, 0,
	         0},
	        {"POST / HTTP/1.1\r\nContent-Length: 5, 6\r\n\r\n", -EBADMSG, 0, 0},
	        {"POST / HTTP/1.1\r\nContent-Length: -5\r\n\r\n", -EBADMSG, 0, 0},
	        {"POST / HTTP/1.1\r\nContent-Length: 5x\r\n\r\n", -EBADMSG, 0, 0},
	        {"POST / HTTP/1.1\r\nContent-Length:\r\n\r\n", -EBADMSG, 0, 0},
	        {"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n", -EBADMSG, 0, 0},
	        {"POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
	         -EBADMSG, 0, 0},
	        {"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", -EBADMSG, 0, 0},
	        {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", -EBADMSG, 0, 0},
	        {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\n",
	         -EBADMSG, 0, 0},
	        {"POST / HTTP/1.1\r\nTransfer-Encoding:\r\n\r\n", -EBADMSG, 0, 0},
	        {"GET / HTTP/1.1\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\r\n",
	         0, ST_HTTP_BODY_UPGRADE, 0},
	        /* Upgrade without the Connection token is an ordinary request. */
	        {"GET / HTTP/1.1\r\nUpgrade: websocket\r\n\r\n", 0, ST_HTTP_BODY_NONE, 0},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct st_http_request r;
		assert_true(req_str(cases[i].head, &r) > 0);
		enum st_http_body_kind kind = 99;
		uint64_t len = 99;
		int rc = st_http_request_body(&r, &kind, &len);
		if (rc != cases[i].rc)
			fail_msg("case %zu: rc %d", i, rc);
		if (rc == 0 && (kind != cases[i].kind || len != cases[i].len))
			fail_msg("case %zu: kind %d len %llu", i, kind, (unsigned long long)len);
	}
	/* A response with chunked and a Content-Length is refused (smuggling). */
	struct st_http_response resp;
	enum st_http_body_kind kind;
	uint64_t len;
	assert_true(resp_str("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: "
	                     "chunked\r\n\r\n",
	                     &resp) > 0);
	assert_int_equal(st_http_response_body(&resp, false, &kind, &len), -EBADMSG);
	assert_true(resp_str("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", &resp) > 0);
	assert_int_equal(st_http_response_body(&resp, false, &kind, &len), 0);
	assert_int_equal(kind, ST_HTTP_BODY_UNTIL_CLOSE);
}

static void test_keep_alive(void **state)
{
	(void)state;
	struct st_http_request r;
	assert_true(req_str("GET / HTTP/1.1\r\nConnection: close\r\n\r\n", &r) > 0);
	assert_false(st_http_keep_alive(r.minor_version, r.headers, r.num_headers));
	assert_true(req_str("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", &r) > 0);
	assert_true(st_http_keep_alive(r.minor_version, r.headers, r.num_headers));
	assert_true(req_str("GET / HTTP/1.1\r\nConnection: foo,, CLOSE \r\n\r\n", &r) > 0);
	assert_false(st_http_keep_alive(r.minor_version, r.headers, r.num_headers));
	assert_false(st_http_header_has_token(r.headers, r.num_headers, "connection", "clos"));
}

/* A head with @n headers "H<i>: v". */
static char *head_with_headers(size_t n, size_t *len)
{
	size_t cap = 64 + n * 16;
	char *b = malloc(cap);
	assert_non_null(b);
	size_t o = (size_t)snprintf(b, cap, "GET / HTTP/1.1\r\n");
	for (size_t i = 0; i < n; i++)
		o += (size_t)snprintf(b + o, cap - o, "H%zu: v\r\n", i);
	o += (size_t)snprintf(b + o, cap - o, "\r\n");
	*len = o;
	return b;
}

static void test_limits(void **state)
{
	(void)state;
	struct st_http_request r;
	size_t len;
	char *h = head_with_headers(ST_MAX_HTTP_HEADERS, &len);
	assert_int_equal(st_http_parse_request((uint8_t *)h, len, &r), (ssize_t)len);
	assert_int_equal(r.num_headers, ST_MAX_HTTP_HEADERS);
	free(h);
	h = head_with_headers(ST_MAX_HTTP_HEADERS + 1, &len);
	assert_int_equal(st_http_parse_request((uint8_t *)h, len, &r), -EMSGSIZE);
	free(h);

	/* Head size: a header value that makes the head exactly the cap, and one byte more. */
	const char *pre = "GET / HTTP/1.1\r\nX: ";
	size_t fixed = strlen(pre) + 4; /* "\r\n\r\n" */
	char *big = malloc(ST_MAX_HTTP_HEAD_BYTES + 8);
	assert_non_null(big);
	for (int extra = -1; extra <= 1; extra++) {
		size_t vlen = ST_MAX_HTTP_HEAD_BYTES - fixed + (size_t)(long)extra;
		memcpy(big, pre, strlen(pre));
		memset(big + strlen(pre), 'v', vlen);
		memcpy(big + strlen(pre) + vlen, "\r\n\r\n", 4);
		size_t total = fixed + vlen;
		ssize_t rc = st_http_parse_request((uint8_t *)big, total, &r);
		assert_int_equal(rc, extra <= 0 ? (ssize_t)total : -EMSGSIZE);
	}
	/* No line end within the cap: refused rather than buffered forever. */
	memset(big, 'A', ST_MAX_HTTP_HEAD_BYTES);
	assert_int_equal(st_http_parse_request((uint8_t *)big, ST_MAX_HTTP_HEAD_BYTES - 1, &r), 0);
	assert_int_equal(st_http_parse_request((uint8_t *)big, ST_MAX_HTTP_HEAD_BYTES, &r),
	                 -EMSGSIZE);
	struct st_http_response resp;
	memcpy(big, "HTTP/1.1 200 OK\r\nX: ", 20);
	assert_int_equal(st_http_parse_response((uint8_t *)big, ST_MAX_HTTP_HEAD_BYTES, &resp),
	                 -EMSGSIZE);
	free(big);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_exec_request),
	        cmocka_unit_test(test_methods_and_forms),
	        cmocka_unit_test(test_bad_requests),
	        cmocka_unit_test(test_every_prefix_and_bytewise),
	        cmocka_unit_test(test_responses),
	        cmocka_unit_test(test_body_framing_rules),
	        cmocka_unit_test(test_keep_alive),
	        cmocka_unit_test(test_limits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
