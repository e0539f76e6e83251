/* Unit tests for the JSON connect request (stream/connect.h), with the spec's golden example. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stream/connect.h>
#include <stream/err.h>

#include "failmalloc.h"
#include "guard.h"

/* The spec's example (kubeedge-tunnel.md), as Go's encoding/json writes it: one line. */
static const char golden[] =
        "{\"MessID\":7,\"url\":{\"Scheme\":\"http\",\"Opaque\":\"\",\"User\":null,"
        "\"Host\":\"127.0.0.1:10350\",\"Path\":\"/exec/default/nginx/nginx\",\"RawPath\":\"\","
        "\"OmitHost\":false,\"ForceQuery\":false,"
        "\"RawQuery\":\"command=sh\\u0026input=1\\u0026output=1\\u0026tty=1\",\"Fragment\":\"\","
        "\"RawFragment\":\"\"},\"header\":{\"Connection\":[\"Upgrade\"],\"Upgrade\":[\"SPDY/3.1\"],"
        "\"X-Stream-Protocol-Version\":[\"v4.channel.k8s.io\",\"v3.channel.k8s.io\"]},"
        "\"method\":\"POST\"}";

#define V(s) ((struct st_connect_view){(s), sizeof(s) - 1})

static int decode_str(const char *json, struct st_connect_req *req)
{
	return st_connect_req_decode((const uint8_t *)json, strlen(json), req);
}

static void test_golden_decode(void **state)
{
	(void)state;
	struct st_connect_req req;
	assert_int_equal(decode_str(golden, &req), 0);
	assert_true(req.connect_id == 7);
	assert_string_equal(req.method, "POST");
	assert_string_equal(req.scheme, "http");
	assert_string_equal(req.host, "127.0.0.1:10350");
	assert_string_equal(req.path, "/exec/default/nginx/nginx");
	assert_string_equal(req.raw_query, "command=sh&input=1&output=1&tty=1");
	assert_int_equal(req.num_headers, 4);
	assert_string_equal(st_connect_req_header(&req, "upgrade"), "SPDY/3.1");
	assert_string_equal(st_connect_req_header(&req, "CONNECTION"), "Upgrade");
	assert_string_equal(st_connect_req_header(&req, "X-Stream-Protocol-Version"),
	                    "v4.channel.k8s.io");
	assert_null(st_connect_req_header(&req, "Host"));
	/* Both values of the repeated header, in order. */
	int seen = 0;
	for (size_t i = 0; i < req.num_headers; i++)
		if (strcmp(req.headers[i].name, "X-Stream-Protocol-Version") == 0)
			assert_string_equal(req.headers[i].value, seen++ == 0
			                                                  ? "v4.channel.k8s.io"
			                                                  : "v3.channel.k8s.io");
	assert_int_equal(seen, 2);
	st_connect_req_cleanup(&req);
	st_connect_req_cleanup(&req); /* idempotent */
	st_connect_req_cleanup(NULL);
}

static void test_golden_encode(void **state)
{
	(void)state;
	/* Names in any case and order, as an HTTP parser hands them over. */
	const struct st_connect_field headers[] = {
	        {V("x-stream-protocol-version"), V("v4.channel.k8s.io")},
	        {V("upgrade"), V("SPDY/3.1")},
	        {V("CONNECTION"), V("Upgrade")},
	        {V("X-STREAM-PROTOCOL-VERSION"), V("v3.channel.k8s.io")},
	};
	const struct st_connect_parts parts = {
	        .connect_id = 7,
	        .method = V("POST"),
	        .scheme = V("http"),
	        .host = V("127.0.0.1:10350"),
	        .path = V("/exec/default/nginx/nginx"),
	        .raw_query = V("command=sh&input=1&output=1&tty=1"),
	        .headers = headers,
	        .num_headers = 4,
	};
	struct st_connect_req req;
	assert_int_equal(st_connect_req_build(&req, &parts), 0);
	char out[2048];
	ssize_t n = st_connect_req_encode(out, sizeof out, &req);
	assert_int_equal(n, (ssize_t)strlen(golden));
	assert_memory_equal(out, golden, (size_t)n);
	/* Capacity: one byte short fails, exact fits. */
	assert_int_equal(st_connect_req_encode(out, (size_t)n - 1, &req), -EMSGSIZE);
	assert_int_equal(st_connect_req_encode(out, (size_t)n, &req), n);
	st_connect_req_cleanup(&req);
}

static void test_roundtrip_escapes(void **state)
{
	(void)state;
	/* Control bytes, quotes, HTML characters, U+2028, a 4-byte character, invalid UTF-8. */
	const struct st_connect_field headers[] = {
	        {V("X-Odd"), V("a\"b\\c\n\t<&>\x01 \xe2\x80\xa8 \xf0\x9f\x98\x80")},
	        {V("X-Bad-Utf8"), V("\xff\xc3")},
	};
	const struct st_connect_parts parts = {
	        .connect_id = UINT64_MAX,
	        .method = V("GET"),
	        .path = V("/containerLogs/ns/pod/c"),
	        .raw_query = V("follow=true&sinceTime=2024-05-01T10%3A00%3A00Z"),
	        .headers = headers,
	        .num_headers = 2,
	};
	struct st_connect_req req, back;
	assert_int_equal(st_connect_req_build(&req, &parts), 0);
	char out[2048];
	ssize_t n = st_connect_req_encode(out, sizeof out, &req);
	assert_true(n > 0);
	out[n] = '\0';
	assert_non_null(strstr(out, "\"X-Odd\":[\"a\\\"b\\\\c\\n\\t\\u003c\\u0026\\u003e\\u0001 "
	                            "\\u2028 \xf0\x9f\x98\x80\"]"));
	assert_non_null(strstr(out, "\"X-Bad-Utf8\":[\"\\ufffd\\ufffd\"]"));
	assert_non_null(strstr(out, "\"MessID\":18446744073709551615,"));
	assert_int_equal(st_connect_req_decode((const uint8_t *)out, (size_t)n, &back), 0);
	assert_true(back.connect_id == UINT64_MAX);
	assert_string_equal(back.raw_query, req.raw_query);
	assert_string_equal(back.path, req.path);
	assert_string_equal(st_connect_req_header(&back, "x-odd"), req.headers[0].value);
	/* Invalid UTF-8 comes back as U+FFFD, as it would from Go. */
	assert_string_equal(st_connect_req_header(&back, "x-bad-utf8"), "\xef\xbf\xbd\xef\xbf\xbd");
	st_connect_req_cleanup(&req);
	st_connect_req_cleanup(&back);
}

static void test_decode_variants(void **state)
{
	(void)state;
	struct st_connect_req req;
	/* Keys in another order, unknown keys, no method (logs/metrics), header null. */
	assert_int_equal(
	        decode_str("{\"header\":null,\"extra\":[1,{}],\"url\":{\"Path\":\"/metrics\","
	                   "\"User\":null},\"MessID\":0}",
	                   &req),
	        0);
	assert_true(req.connect_id == 0);
	assert_string_equal(req.method, "GET");
	assert_string_equal(req.path, "/metrics");
	assert_string_equal(req.host, "");
	assert_int_equal(req.num_headers, 0);
	st_connect_req_cleanup(&req);

	/* Surrogate pair and escaped slash. */
	assert_int_equal(
	        decode_str("{\"MessID\":1,\"url\":{\"Path\":\"\\/a\\ud83d\\ude00\"}}", &req), 0);
	assert_string_equal(req.path, "/a\xf0\x9f\x98\x80");
	st_connect_req_cleanup(&req);

	/* Raw invalid UTF-8 becomes U+FFFD per byte, as Go's decoder does. */
	assert_int_equal(decode_str("{\"MessID\":1,\"url\":{\"Path\":\"/a\xff\xc3"
	                            "b\"}}",
	                            &req),
	                 0);
	assert_string_equal(req.path, "/a\xef\xbf\xbd\xef\xbf\xbd"
	                              "b");
	st_connect_req_cleanup(&req);

	/* Whitespace around everything is fine. */
	assert_int_equal(
	        decode_str(" \n{ \"MessID\" : 2 , \"url\" : { \"Path\" : \"/x\" } }\n ", &req), 0);
	st_connect_req_cleanup(&req);
}

static void test_decode_rejects(void **state)
{
	(void)state;
	static const char *const bad[] = {
	        "",
	        "null",
	        "[]",
	        "\"str\"",
	        "{}",
	        "{\"MessID\":1}",                               /* no url */
	        "{\"url\":{\"Path\":\"/x\"}}",                  /* no MessID */
	        "{\"MessID\":-1,\"url\":{\"Path\":\"/x\"}}",    /* negative */
	        "{\"MessID\":1.5,\"url\":{\"Path\":\"/x\"}}",   /* not an integer */
	        "{\"MessID\":\"1\",\"url\":{\"Path\":\"/x\"}}", /* string */
	        "{\"MessID\":1,\"url\":{\"Path\":\"\"}}",       /* empty path */
	        "{\"MessID\":1,\"url\":{\"Path\":5}}",          /* wrong type */
	        "{\"MessID\":1,\"url\":\"/x\"}",                /* url not an object */
	        "{\"MessID\":1,\"url\":{\"Path\":\"/x\"},\"method\":1}",
	        "{\"MessID\":1,\"url\":{\"Path\":\"/x\"},\"header\":{\"A\":\"b\"}}", /* not an array */
	        "{\"MessID\":1,\"url\":{\"Path\":\"/x\"},\"header\":{\"A\":[1]}}",
	        "{\"MessID\":1,\"url\":{\"Path\":\"/x\"},\"header\":[]}",
	        "{\"MessID\":1,\"url\":{\"Path\":\"/x\\u0000y\"}}", /* NUL inside */
	        "{\"MessID\":1,\"url\":{\"Path\":\"/x\"}} x",       /* trailing bytes */
	        "{\"MessID\":1,\"url\":{\"Path\":\"/x\"}}{}",       /* two objects */
	        "{\"MessID\":1,\"url\":{\"Path\":\"/x\"},}",        /* trailing comma */
	        "{'MessID':1}",
	        "{\"MessID\":1,\"url\":{\"Path\":\"/x\"}", /* truncated */
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct st_connect_req req;
		memset(&req, 0x5a, sizeof req);
		int rc = decode_str(bad[i], &req);
		if (rc != -EBADMSG)
			fail_msg("input %zu (%s): rc %d", i, bad[i], rc);
		assert_true(req.connect_id == 0x5a5a5a5a5a5a5a5aull); /* untouched */
	}
}

static void test_every_prefix_incomplete(void **state)
{
	(void)state;
	/* A message is complete when it arrives; every proper prefix must be refused cleanly. */
	size_t len = strlen(golden);
	for (size_t k = 0; k < len; k++) {
		struct st_connect_req req;
		struct guard_buf g;
		assert_int_equal(guard_new(&g, golden, k), 0);
		assert_int_equal(st_connect_req_decode(g.data, g.len, &req), -EBADMSG);
		guard_free(&g);
	}
	struct guard_buf g;
	struct st_connect_req req;
	assert_int_equal(guard_new(&g, golden, len), 0);
	assert_int_equal(st_connect_req_decode(g.data, g.len, &req), 0);
	st_connect_req_cleanup(&req);
	guard_free(&g);
}

/* JSON with @n header entries (one name each) of @value_len bytes. */
static char *json_with_headers(size_t n, size_t value_len, size_t *len)
{
	size_t cap = 256 + n * (value_len + 32);
	char *buf = malloc(cap);
	assert_non_null(buf);
	size_t o =
	        (size_t)snprintf(buf, cap, "{\"MessID\":1,\"url\":{\"Path\":\"/p\"},\"header\":{");
	for (size_t i = 0; i < n; i++) {
		o += (size_t)snprintf(buf + o, cap - o, "%s\"H%zu\":[\"", i ? "," : "", i);
		memset(buf + o, 'v', value_len);
		o += value_len;
		o += (size_t)snprintf(buf + o, cap - o, "\"]");
	}
	o += (size_t)snprintf(buf + o, cap - o, "}}");
	*len = o;
	return buf;
}

static void test_limits(void **state)
{
	(void)state;
	struct st_connect_req req;
	size_t len;
	/* Header count: limit accepted, limit + 1 refused. */
	char *j = json_with_headers(ST_MAX_CONNECT_HEADERS, 1, &len);
	assert_int_equal(st_connect_req_decode((uint8_t *)j, len, &req), 0);
	assert_int_equal(req.num_headers, ST_MAX_CONNECT_HEADERS);
	st_connect_req_cleanup(&req);
	free(j);
	j = json_with_headers(ST_MAX_CONNECT_HEADERS + 1, 1, &len);
	assert_int_equal(st_connect_req_decode((uint8_t *)j, len, &req), -EMSGSIZE);
	free(j);

	/* String bytes: method "GET"(4) + scheme(1) + host(1) + "/p"(3) + query(1) = 10, plus
	 * name "H0"(3) + value(v+1). Exactly the cap is accepted, one more is refused. */
	size_t fixed = 10 + 3 + 1;
	j = json_with_headers(1, ST_MAX_CONNECT_STRINGS_BYTES - fixed, &len);
	assert_int_equal(st_connect_req_decode((uint8_t *)j, len, &req), 0);
	st_connect_req_cleanup(&req);
	free(j);
	j = json_with_headers(1, ST_MAX_CONNECT_STRINGS_BYTES - fixed + 1, &len);
	assert_int_equal(st_connect_req_decode((uint8_t *)j, len, &req), -EMSGSIZE);
	free(j);

	/* Payload size: over ST_MAX_CONNECT_JSON_BYTES refused before parsing. */
	char *big = malloc(ST_MAX_CONNECT_JSON_BYTES + 1);
	assert_non_null(big);
	memset(big, ' ', ST_MAX_CONNECT_JSON_BYTES + 1);
	const char *doc = "{\"MessID\":1,\"url\":{\"Path\":\"/p\"}}";
	memcpy(big, doc, strlen(doc));
	assert_int_equal(st_connect_req_decode((uint8_t *)big, ST_MAX_CONNECT_JSON_BYTES, &req), 0);
	st_connect_req_cleanup(&req);
	assert_int_equal(st_connect_req_decode((uint8_t *)big, ST_MAX_CONNECT_JSON_BYTES + 1, &req),
	                 -EMSGSIZE);
	free(big);

	/* Depth: the tokenizer's depth limit counts nesting levels. */
	char deep[256];
	size_t o = (size_t)snprintf(deep, sizeof deep,
	                            "{\"MessID\":1,\"url\":{\"Path\":\"/p\"},\"x\":");
	for (unsigned i = 0; i < ST_MAX_CONNECT_JSON_DEPTH; i++)
		deep[o++] = '[';
	for (unsigned i = 0; i < ST_MAX_CONNECT_JSON_DEPTH; i++)
		deep[o++] = ']';
	deep[o++] = '}';
	assert_int_equal(st_connect_req_decode((uint8_t *)deep, o, &req), -EMSGSIZE);
	/* One level less (the object itself is a level) is fine. */
	o = (size_t)snprintf(deep, sizeof deep, "{\"MessID\":1,\"url\":{\"Path\":\"/p\"},\"x\":");
	for (unsigned i = 0; i + 1 < ST_MAX_CONNECT_JSON_DEPTH; i++)
		deep[o++] = '[';
	for (unsigned i = 0; i + 1 < ST_MAX_CONNECT_JSON_DEPTH; i++)
		deep[o++] = ']';
	deep[o++] = '}';
	assert_int_equal(st_connect_req_decode((uint8_t *)deep, o, &req), 0);
	st_connect_req_cleanup(&req);
}

static void test_build_rejects(void **state)
{
	(void)state;
	struct st_connect_req req;
	struct st_connect_parts parts = {.connect_id = 1, .path = {"", 0}};
	assert_int_equal(st_connect_req_build(&req, &parts), -EINVAL);
	parts.path = V("/a\0b");
	assert_int_equal(st_connect_req_build(&req, &parts), -EBADMSG);
	parts.path = V("/ok");
	parts.num_headers = ST_MAX_CONNECT_HEADERS + 1;
	assert_int_equal(st_connect_req_build(&req, &parts), -EMSGSIZE);
	/* Views left NULL are empty strings; method defaults only on decode, so encode says GET. */
	parts.num_headers = 0;
	assert_int_equal(st_connect_req_build(&req, &parts), 0);
	assert_string_equal(req.method, "");
	char out[512];
	ssize_t n = st_connect_req_encode(out, sizeof out, &req);
	assert_true(n > 0);
	out[n] = '\0';
	assert_non_null(strstr(out, ",\"header\":{},\"method\":\"GET\"}"));
	st_connect_req_cleanup(&req);
}

static void test_failmalloc(void **state)
{
	(void)state;
	/* Our own allocations (plan, storage) fail one after the other; nothing leaks (LSan). */
	for (int n = 0;; n++) {
		struct st_connect_req req;
		failmalloc_fail_after(n);
		int rc = decode_str(golden, &req);
		int failed = failmalloc_failures();
		failmalloc_off();
		if (failed == 0) {
			assert_int_equal(rc, 0);
			st_connect_req_cleanup(&req);
			break;
		}
		assert_int_equal(rc, -ENOMEM);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_golden_decode),
	        cmocka_unit_test(test_golden_encode),
	        cmocka_unit_test(test_roundtrip_escapes),
	        cmocka_unit_test(test_decode_variants),
	        cmocka_unit_test(test_decode_rejects),
	        cmocka_unit_test(test_every_prefix_incomplete),
	        cmocka_unit_test(test_limits),
	        cmocka_unit_test(test_build_rejects),
	        cmocka_unit_test(test_failmalloc),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
