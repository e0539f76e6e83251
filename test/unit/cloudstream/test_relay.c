/* Unit tests for the HTTP/1 relay decisions (cloudstream/src/relay.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stream/ext.h>
#include <stream/frame.h>
#include <stream/http.h>

#include "failmalloc.h"
#include "guard.h"
#include "relay.h"

/* A request head parsed from @text; the relay's plan keeps views into @text. */
static void begin(struct cs_relay *r, const char *text, int want_status)
{
	struct st_http_request req;
	ssize_t n = st_http_parse_request((const uint8_t *)text, strlen(text), &req);
	assert_true(n > 0);
	const char *why = NULL;
	assert_int_equal(cs_relay_begin(r, &req, &why), want_status);
	if (want_status)
		assert_non_null(why);
}

#define LOGS_REQ                                                                                   \
	"GET /containerLogs/default/demo/app HTTP/1.1\r\nHost: 10.0.0.7:10350\r\n"                 \
	"X-Forwarded-Uri: /api/v1/nodes/n/proxy/containerLogs/default/demo/app\r\n\r\n"
#define POD_LOG_REQ "GET /containerLogs/default/demo/app?follow=true HTTP/1.1\r\nHost: h\r\n\r\n"
#define METRICS_REQ "GET /metrics HTTP/1.1\r\nHost: h\r\n\r\n"
#define EXEC_REQ                                                                                   \
	"POST /exec/default/demo/app?command=sh HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\n"    \
	"Upgrade: SPDY/3.1\r\n\r\n"

/* Everything one emission asks to queue, concatenated into @out. Returns its length. */
static size_t emitted(const struct cs_relay_emit *e, const uint8_t *in, char *out, size_t cap)
{
	size_t n = 0;
	const struct {
		const void *p;
		size_t len;
	} parts[] = {{e->head, e->head_len},
	             {e->chunk, e->chunk_len},
	             {in, e->take},
	             {e->trailer, e->trailer_len}};
	for (size_t i = 0; i < 4; i++) {
		assert_true(n + parts[i].len <= cap);
		if (parts[i].len)
			memcpy(out + n, parts[i].p, parts[i].len);
		n += parts[i].len;
	}
	return n;
}

static void test_cs_err_reason__names_and_statuses(void **state)
{
	(void)state;
	assert_string_equal(cs_err_reason_name(CS_ERR_BAD_REQUEST), "bad_request");
	assert_string_equal(cs_err_reason_name(CS_ERR_DRAINING), "draining");
	assert_string_equal(cs_err_reason_name(CS_ERR_UNAUTHORIZED), "unauthorized");
	assert_string_equal(cs_err_reason_name(CS_ERR_FORBIDDEN), "forbidden");
	assert_string_equal(cs_err_reason_name(CS_ERR_COUNT), "unknown");
	const int want[CS_ERR_COUNT] = {400, 503, 503, 503, 502, 502, 504, 502, 503, 401, 403};
	for (int r = 0; r < CS_ERR_COUNT; r++)
		assert_int_equal(cs_err_reason_status((enum cs_err_reason)r), want[r]);
}

static void test_cs_relay_begin__plan_and_error_form(void **state)
{
	(void)state;
	struct cs_relay r;
	cs_relay_init(&r);
	assert_int_equal(r.plan.err_form, ST_ERROR_FORM_STATUS);
	begin(&r, POD_LOG_REQ, 0);
	assert_int_equal(r.plan.err_form, ST_ERROR_FORM_POD_LOG); /* no X-Forwarded-Uri */
	assert_int_equal(r.plan.connect_type, ST_MSG_LOGS_CONNECT);
	assert_true(r.plan.follow);
	assert_false(r.answered);
	begin(&r, LOGS_REQ, 0);
	assert_int_equal(r.plan.err_form, ST_ERROR_FORM_STATUS); /* the node proxy's */
	begin(&r, "CONNECT h:1 HTTP/1.1\r\nHost: h\r\n\r\n", 405);
	begin(&r, "GET /containerLogs/x HTTP/1.1\r\nHost: h\r\n\r\n", 400);
	cs_relay_cleanup(&r);
}

static void test_cs_relay_start__mode_by_type_and_caps(void **state)
{
	(void)state;
	const struct {
		const char *req;
		uint32_t caps;
		enum cs_relay_mode mode;
	} cases[] = {
	        {LOGS_REQ, 0, CS_RELAY_BODY_ONLY},
	        {METRICS_REQ, 0, CS_RELAY_BODY_ONLY},
	        {EXEC_REQ, 0, CS_RELAY_RAW},
	        {LOGS_REQ, ST_CAP_RAW_RESPONSE, CS_RELAY_RAW},
	        {METRICS_REQ, ST_CAP_FLOW | ST_CAP_RAW_RESPONSE, CS_RELAY_RAW},
	        {METRICS_REQ, ST_CAP_FLOW, CS_RELAY_BODY_ONLY},
	        {EXEC_REQ, ST_CAP_ALL, CS_RELAY_RAW},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct cs_relay r;
		cs_relay_init(&r);
		begin(&r, cases[i].req, 0);
		cs_relay_start(&r, cases[i].caps);
		assert_int_equal(r.mode, cases[i].mode);
		cs_relay_cleanup(&r);
	}
}

static void test_cs_relay_answer__body_only_framed_chunked(void **state)
{
	(void)state;
	struct cs_relay r;
	cs_relay_init(&r);
	begin(&r, METRICS_REQ, 0);
	cs_relay_start(&r, 0);
	char out[256];
	struct cs_relay_emit e;
	struct guard_buf g;
	assert_int_equal(guard_new(&g, "hello", 5), 0);
	assert_int_equal(cs_relay_answer(&r, g.data, 5, &e), 0);
	size_t n = emitted(&e, g.data, out, sizeof out);
	const char want1[] = "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\n"
	                     "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n";
	assert_int_equal(n, sizeof want1 - 1);
	assert_memory_equal(out, want1, n);
	assert_false(e.done);
	guard_free(&g);
	cs_relay_sent(&r);

	/* Later pieces: a chunk each, no head; 17 bytes is chunk size "11" in hex. */
	const char *more = "0123456789abcdefg";
	assert_int_equal(cs_relay_answer(&r, (const uint8_t *)more, 17, &e), 0);
	n = emitted(&e, (const uint8_t *)more, out, sizeof out);
	assert_int_equal(n, 4 + 17 + 2);
	assert_memory_equal(out, "11\r\n0123456789abcdefg\r\n", n);

	/* REMOVE ends it with the last chunk; the connection may serve another request. */
	struct cs_relay_end end;
	cs_relay_on_end(&r, 0, &end);
	assert_int_equal(end.verdict, CS_RELAY_DONE);
	assert_int_equal(end.last_len, 5);
	assert_memory_equal(end.last, "0\r\n\r\n", 5);
	assert_true(cs_relay_keep_alive(&r));
	cs_relay_cleanup(&r);
}

static void test_cs_relay_answer__body_only_empty_first_message(void **state)
{
	(void)state;
	struct cs_relay r;
	cs_relay_init(&r);
	begin(&r, METRICS_REQ, 0);
	cs_relay_start(&r, 0);
	struct cs_relay_emit e;
	assert_int_equal(cs_relay_answer(&r, (const uint8_t *)"", 0, &e), 0);
	assert_true(e.head_len > 0); /* the head alone */
	assert_int_equal(e.chunk_len + e.take + e.trailer_len, 0);
	/* Until it is queued (cs_relay_sent) the head is offered again. */
	assert_int_equal(cs_relay_answer(&r, (const uint8_t *)"", 0, &e), 0);
	assert_true(e.head_len > 0);
	cs_relay_sent(&r);
	assert_int_equal(cs_relay_answer(&r, (const uint8_t *)"", 0, &e), 0);
	assert_int_equal(e.head_len + e.chunk_len + e.take + e.trailer_len, 0);
	cs_relay_cleanup(&r);
}

/* A raw answer fed in pieces of @step: the bytes relayed and where it ends do not depend on the
 * split. */
static void test_cs_relay_answer__raw_any_split(void **state)
{
	(void)state;
	const char *in = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloEXTRA";
	size_t len = strlen(in), resp_len = len - 5;
	for (size_t step = 1; step <= len; step++) {
		struct cs_relay r;
		cs_relay_init(&r);
		begin(&r, LOGS_REQ, 0);
		cs_relay_start(&r, ST_CAP_RAW_RESPONSE);
		size_t pos = 0, relayed = 0;
		bool done = false;
		while (pos < len && !done) {
			size_t piece = step < len - pos ? step : len - pos;
			struct guard_buf g;
			assert_int_equal(guard_new(&g, in + pos, piece), 0);
			struct cs_relay_emit e;
			assert_int_equal(cs_relay_answer(&r, g.data, piece, &e), 0);
			guard_free(&g);
			assert_int_equal(e.head_len + e.chunk_len + e.trailer_len, 0);
			assert_true(e.take <= piece);
			relayed += e.take;
			done = e.done;
			pos += piece;
			if (e.take)
				cs_relay_sent(&r);
		}
		assert_true(done);
		assert_int_equal(relayed, resp_len);
		assert_true(cs_relay_keep_alive(&r));
		struct cs_relay_end end;
		cs_relay_on_end(&r, 0, &end);
		assert_int_equal(end.verdict, CS_RELAY_DONE);
		assert_int_equal(end.last_len, 0);
		cs_relay_cleanup(&r);
	}
}

static void test_cs_relay_answer__raw_malformed(void **state)
{
	(void)state;
	struct cs_relay r;
	cs_relay_init(&r);
	begin(&r, LOGS_REQ, 0);
	cs_relay_start(&r, ST_CAP_RAW_RESPONSE);
	struct cs_relay_emit e;
	const char *bad = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n";
	assert_true(cs_relay_answer(&r, (const uint8_t *)bad, strlen(bad), &e) < 0);
	cs_relay_cleanup(&r);
	/* An interim 1xx (RFC 9110 §15.2) goes to the client as it came; the final head after
	 * it frames the answer. A malformed interim head is refused like any other. */
	cs_relay_init(&r);
	begin(&r, LOGS_REQ, 0);
	cs_relay_start(&r, ST_CAP_RAW_RESPONSE);
	const char *interim = "HTTP/1.1 100 Continue\r\n\r\n";
	assert_int_equal(cs_relay_answer(&r, (const uint8_t *)interim, strlen(interim), &e), 0);
	assert_int_equal(e.take, strlen(interim));
	assert_int_equal(e.head_len, 0); /* relayed raw: no head of ours */
	assert_false(e.done);
	const char *final = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokNEXT";
	assert_int_equal(cs_relay_answer(&r, (const uint8_t *) final, strlen(final), &e), 0);
	assert_int_equal(e.take, strlen(final) - 4);
	assert_true(e.done);
	cs_relay_cleanup(&r);
	cs_relay_init(&r);
	begin(&r, LOGS_REQ, 0);
	cs_relay_start(&r, ST_CAP_RAW_RESPONSE);
	const char *bad_interim = "HTTP/1.1 100 Continue\r\nNo colon\r\n\r\n";
	assert_int_equal(cs_relay_answer(&r, (const uint8_t *)bad_interim, strlen(bad_interim), &e),
	                 -EBADMSG);
	cs_relay_cleanup(&r);
}

static void test_cs_relay_answer__failmalloc_split_head(void **state)
{
	(void)state;
	struct cs_relay r;
	cs_relay_init(&r);
	begin(&r, LOGS_REQ, 0);
	cs_relay_start(&r, ST_CAP_RAW_RESPONSE);
	struct cs_relay_emit e;
	failmalloc_fail_after(0);
	/* Half a head must be gathered: its buffer cannot be had. */
	assert_int_equal(cs_relay_answer(&r, (const uint8_t *)"HTTP/1.1 2", 10, &e), -ENOMEM);
	failmalloc_off();
	assert_int_equal(cs_relay_answer(&r, (const uint8_t *)"HTTP/1.1 2", 10, &e), 0);
	assert_int_equal(e.take, 10);
	cs_relay_cleanup(&r); /* frees the gathered head: LSan checks */
	assert_null(r.resp.head);
}

static void test_cs_relay_on_end__verdicts(void **state)
{
	(void)state;
	struct cs_relay r;
	struct cs_relay_end end;
	/* Nothing answered: an error of ours, by the edge's code. */
	const struct {
		uint64_t code;
		int status;
		enum cs_err_reason why;
	} fails[] = {
	        {0, 502, CS_ERR_EDGE_REFUSED},
	        {ST_EXT_ERR_REFUSED, 403, CS_ERR_EDGE_REFUSED},
	        {ST_EXT_ERR_NOT_FOUND, 404, CS_ERR_EDGE_REFUSED},
	        {ST_EXT_ERR_TIMEOUT, 504, CS_ERR_TIMEOUT},
	        {ST_EXT_ERR_LIMIT, 503, CS_ERR_EDGE_REFUSED},
	        {999, 502, CS_ERR_EDGE_REFUSED},
	};
	for (size_t i = 0; i < sizeof fails / sizeof fails[0]; i++) {
		cs_relay_init(&r);
		begin(&r, METRICS_REQ, 0);
		cs_relay_start(&r, 0);
		cs_relay_on_end(&r, fails[i].code, &end);
		assert_int_equal(end.verdict, CS_RELAY_FAIL);
		assert_int_equal(end.status, fails[i].status);
		assert_int_equal(end.why, fails[i].why);
		cs_relay_cleanup(&r);
	}
	/* Body-only, answered, ended by an ERROR: cut short. */
	cs_relay_init(&r);
	begin(&r, METRICS_REQ, 0);
	cs_relay_start(&r, 0);
	cs_relay_sent(&r);
	cs_relay_on_end(&r, ST_EXT_ERR_INTERNAL, &end);
	assert_int_equal(end.verdict, CS_RELAY_CLOSE);
	assert_true(end.cut_short);
	assert_true(cs_relay_cut_short(&r, 0)); /* a last chunk that cannot be queued, too */
	cs_relay_cleanup(&r);

	/* Raw: an upgrade and a body until close end with the stream, cleanly; a body whose length
	 * was not reached is cut short. */
	const struct {
		const char *resp;
		bool cut;
	} raws[] = {
	        {"HTTP/1.1 101 Switching Protocols\r\nUpgrade: SPDY/3.1\r\n\r\nxx", false},
	        {"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nbody", false},
	        {"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nbody", true},
	};
	for (size_t i = 0; i < sizeof raws / sizeof raws[0]; i++) {
		cs_relay_init(&r);
		begin(&r, EXEC_REQ, 0);
		cs_relay_start(&r, 0);
		struct cs_relay_emit e;
		assert_int_equal(cs_relay_answer(&r, (const uint8_t *)raws[i].resp,
		                                 strlen(raws[i].resp), &e),
		                 0);
		assert_false(e.done);
		cs_relay_sent(&r);
		cs_relay_on_end(&r, 0, &end);
		assert_int_equal(end.verdict, CS_RELAY_CLOSE);
		assert_int_equal(end.cut_short, raws[i].cut);
		cs_relay_on_end(&r, ST_EXT_ERR_INTERNAL, &end);
		assert_true(end.cut_short); /* any ERROR after an answer */
		cs_relay_cleanup(&r);
	}
}

static void test_cs_relay_end_message__text(void **state)
{
	(void)state;
	char msg[128];
	cs_relay_end_message(msg, sizeof msg, "edge-1", 0, NULL, 0);
	assert_string_equal(msg, "edge node edge-1 closed the stream without answering");
	cs_relay_end_message(msg, sizeof msg, "edge-1", ST_EXT_ERR_NOT_FOUND, "no pod xyz", 6);
	assert_string_equal(msg, "edge node edge-1: not found: no pod");
	char big[2048];
	memset(big, 'a', sizeof big);
	char out[1200];
	int n = cs_relay_end_message(out, sizeof out, "n", ST_EXT_ERR_INTERNAL, big, sizeof big);
	assert_int_equal(n, (int)strlen("edge node n: internal: ") + 1024); /* reason capped */
}

static void test_cs_relay_keep_alive__matrix(void **state)
{
	(void)state;
	struct cs_relay r;
	/* HTTP/1.0 without keep-alive: never. */
	cs_relay_init(&r);
	begin(&r, "GET /metrics HTTP/1.0\r\nHost: h\r\n\r\n", 0);
	cs_relay_start(&r, 0);
	assert_false(cs_relay_keep_alive(&r));
	cs_relay_cleanup(&r);
	/* A request body not read to its end leaves the connection out of sync. */
	cs_relay_init(&r);
	begin(&r, "POST /metrics HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n\r\n", 0);
	cs_relay_start(&r, 0);
	assert_false(cs_relay_keep_alive(&r));
	assert_int_equal(cs_relay_request(&r, (const uint8_t *)"abcdGET", 7), 4);
	assert_true(cs_relay_request_done(&r));
	assert_true(cs_relay_keep_alive(&r)); /* body-only: its framing is ours */
	cs_relay_cleanup(&r);
	/* Raw: the backend's response decides. */
	cs_relay_init(&r);
	begin(&r, METRICS_REQ, 0);
	cs_relay_start(&r, ST_CAP_RAW_RESPONSE);
	struct cs_relay_emit e;
	const char *closing = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
	assert_int_equal(cs_relay_answer(&r, (const uint8_t *)closing, strlen(closing), &e), 0);
	assert_true(e.done);
	assert_false(cs_relay_keep_alive(&r));
	cs_relay_cleanup(&r);
}

static void test_cs_relay_request__upgrade_and_chunked(void **state)
{
	(void)state;
	struct cs_relay r;
	cs_relay_init(&r);
	begin(&r, EXEC_REQ, 0);
	cs_relay_start(&r, 0);
	assert_int_equal(cs_relay_request(&r, (const uint8_t *)"anything", 8), 8);
	assert_false(cs_relay_request_done(&r)); /* an upgrade never ends by framing */
	cs_relay_cleanup(&r);

	cs_relay_init(&r);
	begin(&r, "POST /metrics HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n", 0);
	cs_relay_start(&r, 0);
	const char *body = "3\r\nabc\r\n0\r\n\r\nNEXT";
	for (size_t i = 0; i < strlen(body) - 4; i++) /* byte by byte */
		assert_int_equal(cs_relay_request(&r, (const uint8_t *)body + i, 1), 1);
	assert_true(cs_relay_request_done(&r));
	assert_int_equal(cs_relay_request(&r, (const uint8_t *)"NEXT", 4), 0);
	cs_relay_cleanup(&r);

	cs_relay_init(&r);
	begin(&r, "POST /metrics HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n", 0);
	cs_relay_start(&r, 0);
	assert_true(cs_relay_request(&r, (const uint8_t *)"zz\r\n", 4) < 0);
	cs_relay_cleanup(&r);
}

static void test_cs_relay_error_answer__forms(void **state)
{
	(void)state;
	struct cs_relay r;
	char out[4096];
	cs_relay_init(&r); /* idle: Status JSON */
	ssize_t n = cs_relay_error_answer(&r, 503, "no tunnel", out, sizeof out);
	assert_true(n > 0);
	assert_memory_equal(out, "HTTP/1.1 503 ", 13);
	assert_non_null(memmem(out, (size_t)n, "\"kind\":\"Status\"", 15));

	begin(&r, POD_LOG_REQ, 0); /* pods/log: text, a status kube-apiserver shows */
	n = cs_relay_error_answer(&r, 503, "no tunnel", out, sizeof out);
	assert_true(n > 0);
	assert_memory_equal(out, "HTTP/1.1 502 ", 13);
	assert_memory_equal(out + n - 9, "no tunnel", 9);
	assert_int_equal(cs_relay_error_answer(&r, 503, "x", out, 10), -EMSGSIZE);

	cs_relay_sent(&r); /* answered: nothing of ours may follow */
	assert_int_equal(cs_relay_error_answer(&r, 502, "cut", out, sizeof out), 0);

	/* The next request on the connection is answered again (idle after cleanup). */
	cs_relay_cleanup(&r);
	assert_false(r.answered);
	assert_int_equal(r.plan.err_form, ST_ERROR_FORM_STATUS);
	assert_true(cs_relay_error_answer(&r, 400, "bad head", out, sizeof out) > 0);
}

static void test_cs_relay_head_error__statuses(void **state)
{
	(void)state;
	const char *msg;
	assert_int_equal(cs_relay_head_error(0, &msg), 431);
	assert_string_equal(msg, "request head too large");
	assert_int_equal(cs_relay_head_error(-EMSGSIZE, &msg), 431);
	assert_int_equal(cs_relay_head_error(-EBADMSG, &msg), 400);
	assert_string_equal(msg, "malformed HTTP request head");
	assert_int_equal(cs_relay_connect_error(-EMSGSIZE), 431);
	assert_int_equal(cs_relay_connect_error(-EBADMSG), 400);
	assert_int_equal(cs_relay_connect_error(-ENOMEM), 400);
}

static void test_cs_relay_answer_timeout_ms__follow_through_base(void **state)
{
	(void)state;
	struct cs_relay r;
	cs_relay_init(&r);
	begin(&r, POD_LOG_REQ, 0); /* follow=true */
	cs_relay_start(&r, 0);
	assert_int_equal(cs_relay_answer_timeout_ms(&r, 30000), 0);
	cs_relay_cleanup(&r);
	cs_relay_init(&r);
	begin(&r, POD_LOG_REQ, 0);
	cs_relay_start(&r, ST_CAP_RAW_RESPONSE); /* raw: its head comes at once */
	assert_int_equal(cs_relay_answer_timeout_ms(&r, 30000), 30000);
	cs_relay_cleanup(&r);
	cs_relay_init(&r);
	begin(&r, LOGS_REQ, 0); /* not followed */
	cs_relay_start(&r, 0);
	assert_int_equal(cs_relay_answer_timeout_ms(&r, 250), 250);
	cs_relay_cleanup(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_cs_err_reason__names_and_statuses),
	        cmocka_unit_test(test_cs_relay_begin__plan_and_error_form),
	        cmocka_unit_test(test_cs_relay_start__mode_by_type_and_caps),
	        cmocka_unit_test(test_cs_relay_answer__body_only_framed_chunked),
	        cmocka_unit_test(test_cs_relay_answer__body_only_empty_first_message),
	        cmocka_unit_test(test_cs_relay_answer__raw_any_split),
	        cmocka_unit_test(test_cs_relay_answer__raw_malformed),
	        cmocka_unit_test(test_cs_relay_answer__failmalloc_split_head),
	        cmocka_unit_test(test_cs_relay_on_end__verdicts),
	        cmocka_unit_test(test_cs_relay_end_message__text),
	        cmocka_unit_test(test_cs_relay_keep_alive__matrix),
	        cmocka_unit_test(test_cs_relay_request__upgrade_and_chunked),
	        cmocka_unit_test(test_cs_relay_error_answer__forms),
	        cmocka_unit_test(test_cs_relay_head_error__statuses),
	        cmocka_unit_test(test_cs_relay_answer_timeout_ms__follow_through_base),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
