/* Unit tests for Kubernetes Status bodies and error responses (stream/status.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <json-c/json.h>
#include <string.h>

#include <stream/err.h>
#include <stream/http.h>
#include <stream/status.h>

static void test_status_json_exact(void **state)
{
	(void)state;
	char out[512];
	ssize_t n = st_status_json(out, sizeof out, 503, "node \"edge-1\" has no tunnel session");
	const char *want = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},"
	                   "\"status\":\"Failure\",\"message\":\"node \\\"edge-1\\\" has no tunnel "
	                   "session\",\"reason\":\"ServiceUnavailable\",\"code\":503}";
	assert_int_equal(n, (ssize_t)strlen(want));
	assert_memory_equal(out, want, (size_t)n);
	/* 502 has no StatusReason in apimachinery: the key is omitted. */
	n = st_status_json(out, sizeof out, 502, "backend unreachable");
	out[n] = '\0';
	assert_null(strstr(out, "reason"));
	assert_non_null(strstr(out, "\"code\":502}"));
}

static void test_status_is_valid_json(void **state)
{
	(void)state;
	const int codes[] = {400, 401, 403, 404, 405, 422, 429, 500, 502, 503, 504, 599};
	for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
		char out[512];
		ssize_t n = st_status_json(out, sizeof out - 1, codes[i], "a<b>&\"c\"\n\x01\xff");
		assert_true(n > 0);
		out[n] = '\0';
		struct json_object *o = json_tokener_parse(out);
		assert_non_null(o);
		struct json_object *f;
		assert_true(json_object_object_get_ex(o, "code", &f));
		assert_int_equal(json_object_get_int(f), codes[i]);
		assert_true(json_object_object_get_ex(o, "message", &f));
		assert_string_equal(json_object_get_string(f), "a<b>&\"c\"\n\x01\xef\xbf\xbd");
		assert_true(json_object_object_get_ex(o, "kind", &f));
		assert_string_equal(json_object_get_string(f), "Status");
		json_object_put(o);
	}
}

static void test_status_capacity(void **state)
{
	(void)state;
	char out[ST_MAX_STATUS_JSON_BYTES + 16];
	ssize_t n = st_status_json(out, sizeof out, 404, "x");
	assert_true(n > 0);
	assert_int_equal(st_status_json(out, (size_t)n - 1, 404, "x"), -EMSGSIZE);
	assert_int_equal(st_status_json(out, (size_t)n, 404, "x"), n);
	/* A message too long for the body cap is refused, not cut. */
	char msg[ST_MAX_STATUS_JSON_BYTES];
	memset(msg, 'm', sizeof msg - 1);
	msg[sizeof msg - 1] = '\0';
	assert_int_equal(st_status_json(out, sizeof out, 404, msg), -EMSGSIZE);
}

static void test_error_response_parses(void **state)
{
	(void)state;
	char out[1024];
	ssize_t n =
	        st_http_error_response(out, sizeof out, 504, "no answer from node edge-1 in 30s");
	assert_true(n > 0);
	struct st_http_response r;
	ssize_t head = st_http_parse_response((uint8_t *)out, (size_t)n, &r);
	assert_true(head > 0);
	assert_int_equal(r.status, 504);
	assert_int_equal(r.reason_len, strlen("Gateway Timeout"));
	enum st_http_body_kind kind;
	uint64_t len;
	assert_int_equal(st_http_response_body(&r, false, &kind, &len), 0);
	assert_int_equal(kind, ST_HTTP_BODY_LENGTH);
	assert_true((size_t)head + len == (size_t)n);
	assert_false(st_http_keep_alive(r.minor_version, r.headers, r.num_headers));
	assert_int_equal(st_http_error_response(out, (size_t)n - 1, 504,
	                                        "no answer from node edge-1 in 30s"),
	                 -EMSGSIZE);
	assert_int_equal(
	        st_http_error_response(out, (size_t)n, 504, "no answer from node edge-1 in 30s"),
	        n);
	assert_string_equal(st_http_reason_phrase(503), "Service Unavailable");
	assert_string_equal(st_http_reason_phrase(299), "Unknown");
	assert_string_equal(st_status_reason(404), "NotFound");
	assert_string_equal(st_status_reason(422), "Invalid");
	assert_string_equal(st_status_reason(502), "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_status_json_exact),
	        cmocka_unit_test(test_status_is_valid_json),
	        cmocka_unit_test(test_status_capacity),
	        cmocka_unit_test(test_error_response_parses),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
