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

/* Which statuses kube-apiserver's pods/log path shows the body of (GenericHttpResponseChecker +
 * NewGenericServerResponse, v1.26-v1.33), and where ours move on that path. */
static void test_status_for_form__pod_log(void **state)
{
	(void)state;
	static const struct {
		int code, shows, pod_log;
	} cases[] = {
	        {400, 1, 400}, {401, 0, 400}, {403, 1, 403}, {404, 0, 400}, {405, 0, 400},
	        {406, 1, 406}, {409, 0, 400}, {413, 0, 400}, {415, 1, 415}, {422, 0, 400},
	        {429, 0, 400}, {431, 0, 400}, {500, 1, 500}, {501, 1, 501}, {502, 1, 502},
	        {503, 0, 502}, {504, 0, 502}, {505, 1, 505}, {599, 1, 599},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		int c = cases[i].code;
		assert_int_equal(st_status_apiserver_shows_body(c), cases[i].shows);
		assert_int_equal(st_status_for_form(ST_ERROR_FORM_POD_LOG, c), cases[i].pod_log);
		assert_int_equal(st_status_for_form(ST_ERROR_FORM_STATUS, c), c);
	}
}

static void test_error_form_for__cases(void **state)
{
	(void)state;
	assert_int_equal(st_error_form_for(true, false), ST_ERROR_FORM_POD_LOG);
	assert_int_equal(st_error_form_for(true, true), ST_ERROR_FORM_STATUS); /* node proxy */
	assert_int_equal(st_error_form_for(false, false), ST_ERROR_FORM_STATUS);
	assert_int_equal(st_error_form_for(false, true), ST_ERROR_FORM_STATUS);
}

static void test_http_error_answer__pod_log_exact(void **state)
{
	(void)state;
	char out[512];
	const char *msg = "container \"ghost\" in pod \"demo\" is not available";
	ssize_t n = st_http_error_answer(out, sizeof out, ST_ERROR_FORM_POD_LOG, 400, msg);
	const char *want = "HTTP/1.1 400 Bad Request\r\n"
	                   "Content-Type: text/plain; charset=utf-8\r\n"
	                   "Content-Length: 48\r\n"
	                   "Connection: close\r\n\r\n"
	                   "container \"ghost\" in pod \"demo\" is not available";
	assert_int_equal(n, (ssize_t)strlen(want));
	assert_memory_equal(out, want, (size_t)n);
	/* 503 (swallowed by the apiserver) becomes 502, whose body it quotes. */
	n = st_http_error_answer(out, sizeof out, ST_ERROR_FORM_POD_LOG, 503, "no tunnel");
	want = "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain; charset=utf-8\r\n"
	       "Content-Length: 9\r\nConnection: close\r\n\r\nno tunnel";
	assert_int_equal(n, (ssize_t)strlen(want));
	assert_memory_equal(out, want, (size_t)n);
	/* Every proper prefix of the buffer is too small; the exact size fits. */
	for (size_t cap = 0; cap < (size_t)n; cap++)
		assert_int_equal(
		        st_http_error_answer(out, cap, ST_ERROR_FORM_POD_LOG, 503, "no tunnel"),
		        -EMSGSIZE);
	assert_int_equal(
	        st_http_error_answer(out, (size_t)n, ST_ERROR_FORM_POD_LOG, 503, "no tunnel"), n);
	/* A NULL message is an empty body. */
	n = st_http_error_answer(out, sizeof out, ST_ERROR_FORM_POD_LOG, 500, NULL);
	assert_true(n > 0);
	assert_memory_equal(out + n - 4, "\r\n\r\n", 4);
}

static void test_http_error_answer__status_form_is_status_json(void **state)
{
	(void)state;
	char a[1024], b[1024];
	ssize_t na = st_http_error_answer(a, sizeof a, ST_ERROR_FORM_STATUS, 503, "no tunnel");
	ssize_t nb = st_http_error_response(b, sizeof b, 503, "no tunnel");
	assert_true(na > 0);
	assert_int_equal(na, nb);
	assert_memory_equal(a, b, (size_t)na);
}

static void test_http_error_answer__long_message_capped(void **state)
{
	(void)state;
	static char msg[ST_MAX_STATUS_JSON_BYTES * 2];
	memset(msg, 'm', sizeof msg - 1);
	msg[sizeof msg - 1] = '\0';
	static char out[ST_MAX_STATUS_JSON_BYTES * 3];
	ssize_t n = st_http_error_answer(out, sizeof out, ST_ERROR_FORM_POD_LOG, 400, msg);
	assert_true(n > 0);
	struct st_http_response r;
	ssize_t head = st_http_parse_response((uint8_t *)out, (size_t)n, &r);
	assert_true(head > 0);
	enum st_http_body_kind kind;
	uint64_t len;
	assert_int_equal(st_http_response_body(&r, false, &kind, &len), 0);
	assert_int_equal(kind, ST_HTTP_BODY_LENGTH);
	assert_int_equal(len, ST_MAX_STATUS_JSON_BYTES);
	assert_int_equal((size_t)head + len, (size_t)n);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_status_json_exact),
	        cmocka_unit_test(test_status_is_valid_json),
	        cmocka_unit_test(test_status_capacity),
	        cmocka_unit_test(test_error_response_parses),
	        cmocka_unit_test(test_status_for_form__pod_log),
	        cmocka_unit_test(test_error_form_for__cases),
	        cmocka_unit_test(test_http_error_answer__pod_log_exact),
	        cmocka_unit_test(test_http_error_answer__status_form_is_status_json),
	        cmocka_unit_test(test_http_error_answer__long_message_capped),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
