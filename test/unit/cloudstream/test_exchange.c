/* Unit tests for request plans and framing trackers (cloudstream/src/exchange.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stream/connect.h>
#include <stream/frame.h>

#include "exchange.h"
#include "failmalloc.h"
#include "guard.h"

/* Feeds @in to a response tracker in pieces of @step (0: at once), each through a guard page.
 * Returns the bytes that belonged to the response, or the first error. */
static ssize_t resp_feed_all(struct cs_resp *r, const char *in, size_t len, size_t step)
{
	size_t pos = 0;
	while (pos < len && !cs_resp_done(r)) {
		size_t piece = step ? step : len - pos;
		if (piece > len - pos)
			piece = len - pos;
		struct guard_buf g;
		assert_int_equal(guard_new(&g, in + pos, piece), 0);
		ssize_t n = cs_resp_feed(r, g.data, piece);
		guard_free(&g);
		if (n < 0)
			return n;
		pos += (size_t)n;
		if ((size_t)n < piece)
			break; /* the rest follows the response */
	}
	return (ssize_t)pos;
}

static void test_cs_resp_feed__length_any_split(void **state)
{
	(void)state;
	const char *in = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloNEXT";
	size_t len = strlen(in);
	for (size_t step = 0; step <= len; step++) {
		struct cs_resp r;
		cs_resp_init(&r, false);
		ssize_t n = resp_feed_all(&r, in, len, step);
		assert_int_equal(n, (ssize_t)(len - 4)); /* NEXT is not part of it */
		assert_true(cs_resp_done(&r));
		assert_int_equal(r.status, 200);
		assert_true(r.keep_alive);
		assert_false(r.upgraded);
		cs_resp_cleanup(&r);
	}
}

static void test_cs_resp_feed__chunked_any_split(void **state)
{
	(void)state;
	const char *in = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
	                 "5\r\nhello\r\n3;x=y\r\nabc\r\n0\r\nTrailer: 1\r\n\r\nGET / HTTP/1.1";
	size_t len = strlen(in);
	size_t resp_len = len - strlen("GET / HTTP/1.1");
	for (size_t step = 0; step <= len; step++) {
		struct cs_resp r;
		cs_resp_init(&r, false);
		assert_int_equal(resp_feed_all(&r, in, len, step), (ssize_t)resp_len);
		assert_true(cs_resp_done(&r));
		assert_int_equal(r.bytes, resp_len);
		cs_resp_cleanup(&r);
	}
}

static void test_cs_resp_feed__upgrade_takes_everything(void **state)
{
	(void)state;
	const char *in = "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n"
	                 "Upgrade: SPDY/3.1\r\n\r\n\x80\x03\x00\x01 frames";
	struct cs_resp r;
	cs_resp_init(&r, false);
	assert_int_equal(resp_feed_all(&r, in, strlen(in), 3), (ssize_t)strlen(in));
	assert_true(r.upgraded);
	assert_false(r.keep_alive);
	assert_false(cs_resp_done(&r)); /* ends only with the stream */
	assert_int_equal(cs_resp_feed(&r, (const uint8_t *)"more", 4), 4);
	cs_resp_cleanup(&r);
}

static void test_cs_resp_feed__refused_upgrade_has_an_end(void **state)
{
	(void)state;
	/* kubelet refusing a websocket upgrade (kubectl >= 1.30 then falls back to SPDY): the
	 * answer has a length, so cloudstream can close the apiserver side at once. */
	const char *in = "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
	                 "Content-Length: 2\r\n\r\n{}";
	struct cs_resp r;
	cs_resp_init(&r, false);
	assert_int_equal(resp_feed_all(&r, in, strlen(in), 0), (ssize_t)strlen(in));
	assert_true(cs_resp_done(&r));
	assert_int_equal(r.status, 400);
	cs_resp_cleanup(&r);
}

static void test_cs_resp_feed__head_and_no_body_statuses(void **state)
{
	(void)state;
	const char *in = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n";
	struct cs_resp r;
	cs_resp_init(&r, true); /* HEAD: no body whatever Content-Length says */
	assert_int_equal(resp_feed_all(&r, in, strlen(in), 0), (ssize_t)strlen(in));
	assert_true(cs_resp_done(&r));
	cs_resp_cleanup(&r);
	const char *nc = "HTTP/1.1 204 No Content\r\n\r\nX";
	cs_resp_init(&r, false);
	assert_int_equal(resp_feed_all(&r, nc, strlen(nc), 0), (ssize_t)strlen(nc) - 1);
	assert_true(cs_resp_done(&r));
	cs_resp_cleanup(&r);
}

static void test_cs_resp_feed__until_close(void **state)
{
	(void)state;
	const char *in = "HTTP/1.0 200 OK\r\n\r\nbody until the end";
	struct cs_resp r;
	cs_resp_init(&r, false);
	assert_int_equal(resp_feed_all(&r, in, strlen(in), 5), (ssize_t)strlen(in));
	assert_false(cs_resp_done(&r));
	assert_false(r.keep_alive);
	cs_resp_cleanup(&r);
}

/* RFC 9110 §15.2: any number of interim heads (1xx but 101) before the final one, e.g. 100
 * Continue to "Expect: 100-continue": all of them belong to the response (relayed as they came)
 * and the framing is the final head's, however the input is split. */
static void test_cs_resp_feed__interim_heads_any_split(void **state)
{
	(void)state;
	const char *in = "HTTP/1.1 100 Continue\r\n\r\n"
	                 "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"
	                 "HTTP/1.1 100 Continue\r\n\r\n"
	                 "HTTP/1.1 201 Created\r\nContent-Length: 5\r\n\r\nhelloNEXT";
	size_t len = strlen(in);
	for (size_t step = 0; step <= len; step++) {
		struct cs_resp r;
		cs_resp_init(&r, false);
		assert_int_equal(resp_feed_all(&r, in, len, step), (ssize_t)(len - 4));
		assert_true(cs_resp_done(&r));
		assert_int_equal(r.status, 201);
		assert_int_equal(r.interim, 3);
		assert_int_equal(r.bytes, len - 4);
		assert_true(r.keep_alive);
		cs_resp_cleanup(&r);
	}
	/* Only interim heads so far: every byte taken, the answer not over, no status yet. */
	const char *part = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 2";
	struct cs_resp r;
	cs_resp_init(&r, false);
	assert_int_equal(cs_resp_feed(&r, (const uint8_t *)part, strlen(part)),
	                 (ssize_t)strlen(part));
	assert_false(r.head_done);
	assert_false(cs_resp_done(&r));
	assert_int_equal(r.interim, 1);
	const char *rest = "04 No Content\r\n\r\nX";
	assert_int_equal(cs_resp_feed(&r, (const uint8_t *)rest, strlen(rest)),
	                 (ssize_t)strlen(rest) - 1);
	assert_true(cs_resp_done(&r));
	assert_int_equal(r.status, 204);
	cs_resp_cleanup(&r);
}

/* 101 is no interim head: it is the upgrade, after interim heads as well. */
static void test_cs_resp_feed__interim_then_upgrade(void **state)
{
	(void)state;
	const char *in = "HTTP/1.1 100 Continue\r\n\r\n"
	                 "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n"
	                 "Upgrade: websocket\r\n\r\nHTTP/1.1 200 OK\r\n\r\n raw";
	size_t len = strlen(in);
	for (size_t step = 0; step <= len; step++) {
		struct cs_resp r;
		cs_resp_init(&r, false);
		assert_int_equal(resp_feed_all(&r, in, len, step), (ssize_t)len);
		assert_true(r.upgraded);
		assert_int_equal(r.status, 101);
		assert_int_equal(r.interim, 1);
		assert_false(cs_resp_done(&r));
		cs_resp_cleanup(&r);
	}
}

static void test_cs_resp_feed__malformed(void **state)
{
	(void)state;
	static const char *const bad[] = {
	        "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
	        "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
	        "NOT HTTP\r\n\r\n",
	        /* interim heads are parsed as strictly as the final one */
	        "HTTP/1.1 100 Continue\r\nBad Header\r\n\r\n",
	        "HTTP/1.1 1x0 Continue\r\n\r\n",
	        "HTTP/1.1 100 Continue\r\n\r\nNOT HTTP\r\n\r\n",
	        "HTTP/1.1 103 Early Hints\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
	        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		for (size_t step = 0; step < 3; step++) {
			struct cs_resp r;
			cs_resp_init(&r, false);
			assert_int_equal(resp_feed_all(&r, bad[i], strlen(bad[i]), step), -EBADMSG);
			cs_resp_cleanup(&r);
		}
	}
}

static void test_cs_resp_feed__head_limit(void **state)
{
	(void)state;
	size_t len = ST_MAX_HTTP_HEAD_BYTES + 100;
	char *in = malloc(len);
	assert_non_null(in);
	memcpy(in, "HTTP/1.1 200 OK\r\nX: ", 20);
	memset(in + 20, 'a', len - 20);
	struct cs_resp r;
	cs_resp_init(&r, false);
	assert_int_equal(resp_feed_all(&r, in, len, 1000), -EMSGSIZE);
	cs_resp_cleanup(&r);
	free(in);
}

static void test_cs_resp_feed__alloc_failure(void **state)
{
	(void)state;
	const char *in = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
	struct cs_resp r;
	cs_resp_init(&r, false);
	failmalloc_fail_after(0);
	/* A split head needs the gathering buffer: its allocation failure is -ENOMEM. */
	assert_int_equal(cs_resp_feed(&r, (const uint8_t *)in, 5), -ENOMEM);
	failmalloc_off();
	cs_resp_cleanup(&r);
}

static void test_cs_body_feed__length_chunked_none(void **state)
{
	(void)state;
	struct cs_body b;
	cs_body_init(&b, ST_HTTP_BODY_LENGTH, 3);
	assert_int_equal(cs_body_feed(&b, (const uint8_t *)"abcdef", 6), 3);
	assert_true(b.done);
	assert_int_equal(cs_body_feed(&b, (const uint8_t *)"def", 3), 0);
	cs_body_init(&b, ST_HTTP_BODY_NONE, 0);
	assert_true(b.done);
	cs_body_init(&b, ST_HTTP_BODY_LENGTH, 0);
	assert_true(b.done);
	cs_body_init(&b, ST_HTTP_BODY_CHUNKED, 0);
	const char *ch = "2\r\nab\r\n0\r\n\r\nrest";
	for (size_t i = 0; i < strlen(ch) - 4; i++)
		assert_int_equal(cs_body_feed(&b, (const uint8_t *)ch + i, 1), 1);
	assert_true(b.done);
	cs_body_init(&b, ST_HTTP_BODY_UPGRADE, 0);
	assert_int_equal(cs_body_feed(&b, (const uint8_t *)"xyz", 3), 3);
	assert_false(b.done);
}

static void plan_of(const char *head, struct cs_plan *p, int want_status)
{
	struct st_http_request req;
	assert_true(st_http_parse_request((const uint8_t *)head, strlen(head), &req) > 0);
	const char *why = NULL;
	assert_int_equal(cs_plan_request(&req, p, &why), want_status);
	if (want_status)
		assert_non_null(why);
}

static void test_cs_plan_request__kinds(void **state)
{
	(void)state;
	struct cs_plan p;
	plan_of("POST /exec/ns/pod/c?command=sh&input=1 HTTP/1.1\r\nConnection: Upgrade\r\n"
	        "Upgrade: SPDY/3.1\r\n\r\n",
	        &p, 0);
	assert_int_equal(p.connect_type, ST_MSG_EXEC_CONNECT);
	assert_true(p.upgrade);
	assert_false(p.keep_alive);
	plan_of("GET /attach/ns/pod/c HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: "
	        "websocket\r\n\r\n",
	        &p, 0);
	assert_int_equal(p.connect_type, ST_MSG_ATTACH_CONNECT);
	plan_of("POST /portForward/ns/pod HTTP/1.1\r\nConnection: Upgrade\r\n"
	        "Upgrade: SPDY/3.1\r\n\r\n",
	        &p, 0);
	assert_int_equal(p.connect_type, ST_MSG_EXEC_CONNECT);
	plan_of("GET /containerLogs/ns/pod/c?follow=true&tailLines=5 HTTP/1.1\r\n\r\n", &p, 0);
	assert_int_equal(p.connect_type, ST_MSG_LOGS_CONNECT);
	assert_true(p.follow);
	assert_true(p.keep_alive);
	plan_of("GET /containerLogs/ns/pod/c?follow=false HTTP/1.1\r\n\r\n", &p, 0);
	assert_false(p.follow);
	plan_of("GET /metrics/cadvisor HTTP/1.1\r\nConnection: close\r\n\r\n", &p, 0);
	assert_int_equal(p.connect_type, ST_MSG_METRIC_CONNECT);
	assert_false(p.keep_alive);
	plan_of("HEAD /healthz HTTP/1.1\r\n\r\n", &p, 0);
	assert_true(p.is_head);
	plan_of("POST /run/ns/pod/c?cmd=ls HTTP/1.1\r\nContent-Length: 0\r\n\r\n", &p, 0);
	assert_int_equal(p.connect_type, ST_MSG_METRIC_CONNECT);
}

static void test_cs_plan_request__refusals(void **state)
{
	(void)state;
	struct cs_plan p;
	plan_of("GET /exec/ns/../c HTTP/1.1\r\n\r\n", &p, 400);
	plan_of("GET /containerLogs/ns/pod HTTP/1.1\r\n\r\n", &p, 400);
	plan_of("CONNECT /metrics HTTP/1.1\r\n\r\n", &p, 405);
	plan_of("TRACE /metrics HTTP/1.1\r\n\r\n", &p, 405);
}

static void test_cs_plan_request__err_form(void **state)
{
	(void)state;
	struct cs_plan p;
	/* kube-apiserver's pods/log client: containerLogs, no X-Forwarded-Uri. */
	plan_of("GET /containerLogs/ns/pod/c HTTP/1.1\r\nHost: 10.0.0.5:10350\r\n"
	        "User-Agent: Go-http-client/1.1\r\n\r\n",
	        &p, 0);
	assert_int_equal(p.err_form, ST_ERROR_FORM_POD_LOG);
	/* The same path through the node proxy, whose client decodes a Status. */
	plan_of("GET /containerLogs/ns/pod/c HTTP/1.1\r\n"
	        "x-forwarded-uri: /api/v1/nodes/n/proxy/containerLogs/ns/pod/c\r\n\r\n",
	        &p, 0);
	assert_int_equal(p.err_form, ST_ERROR_FORM_STATUS);
	plan_of("POST /exec/ns/pod/c?command=sh&output=1 HTTP/1.1\r\nConnection: Upgrade\r\n"
	        "Upgrade: SPDY/3.1\r\n\r\n",
	        &p, 0);
	assert_int_equal(p.err_form, ST_ERROR_FORM_STATUS);
	plan_of("GET /metrics HTTP/1.1\r\n\r\n", &p, 0);
	assert_int_equal(p.err_form, ST_ERROR_FORM_STATUS);
	/* A refusal after the path was read keeps the form of that path. */
	plan_of("GET /containerLogs/ns/pod/c HTTP/1.1\r\nContent-Length: 1\r\n"
	        "Transfer-Encoding: chunked\r\n\r\n",
	        &p, 400);
	assert_int_equal(p.err_form, ST_ERROR_FORM_POD_LOG);
	plan_of("GET /containerLogs/ns/pod HTTP/1.1\r\n\r\n", &p, 400);
	assert_int_equal(p.err_form, ST_ERROR_FORM_STATUS);
}

static void test_cs_connect_json__like_kubeedge(void **state)
{
	(void)state;
	const char *head = "POST /exec/default/nginx/nginx?command=sh&input=1 HTTP/1.1\r\n"
	                   "Host: 127.0.0.1:6443\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
	                   "X-Stream-Protocol-Version: v4.channel.k8s.io\r\n"
	                   "X-Stream-Protocol-Version: v3.channel.k8s.io\r\n\r\n";
	struct st_http_request req;
	assert_true(st_http_parse_request((const uint8_t *)head, strlen(head), &req) > 0);
	char out[4096];
	ssize_t n = cs_connect_json(&req, 7, "127.0.0.1:10350", out, sizeof out);
	assert_true(n > 0);
	struct st_connect_req c;
	assert_int_equal(st_connect_req_decode((const uint8_t *)out, (size_t)n, &c), 0);
	assert_int_equal(c.connect_id, 7);
	assert_string_equal(c.path, "/exec/default/nginx/nginx");
	assert_string_equal(c.raw_query, "command=sh&input=1");
	assert_string_equal(c.method, "POST");
	assert_string_equal(c.host, "127.0.0.1:10350");
	assert_string_equal(st_connect_req_header(&c, "upgrade"), "SPDY/3.1");
	st_connect_req_cleanup(&c);
	assert_int_equal(cs_connect_json(&req, 7, "127.0.0.1:10350", out, 100), -EMSGSIZE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_cs_resp_feed__length_any_split),
	        cmocka_unit_test(test_cs_resp_feed__chunked_any_split),
	        cmocka_unit_test(test_cs_resp_feed__upgrade_takes_everything),
	        cmocka_unit_test(test_cs_resp_feed__refused_upgrade_has_an_end),
	        cmocka_unit_test(test_cs_resp_feed__head_and_no_body_statuses),
	        cmocka_unit_test(test_cs_resp_feed__until_close),
	        cmocka_unit_test(test_cs_resp_feed__interim_heads_any_split),
	        cmocka_unit_test(test_cs_resp_feed__interim_then_upgrade),
	        cmocka_unit_test(test_cs_resp_feed__malformed),
	        cmocka_unit_test(test_cs_resp_feed__head_limit),
	        cmocka_unit_test(test_cs_resp_feed__alloc_failure),
	        cmocka_unit_test(test_cs_body_feed__length_chunked_none),
	        cmocka_unit_test(test_cs_plan_request__kinds),
	        cmocka_unit_test(test_cs_plan_request__refusals),
	        cmocka_unit_test(test_cs_plan_request__err_form),
	        cmocka_unit_test(test_cs_connect_json__like_kubeedge),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
