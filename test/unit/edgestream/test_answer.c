/* Unit tests for backend request heads and the body-only relay (edgestream/src/answer.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "answer.h"
#include "failmalloc.h"

#define V(s)                                                                                       \
	{                                                                                          \
		(s), sizeof(s) - 1                                                                 \
	}

static void make_req(struct st_connect_req *req, const char *method, const char *query,
                     const struct st_connect_field *h, size_t nh)
{
	struct st_connect_parts parts = {
	        .connect_id = 7,
	        .method = {method, strlen(method)},
	        .scheme = V("http"),
	        .host = V("127.0.0.1:10350"),
	        .path = V("/ignored"),
	        .raw_query = {query, strlen(query)},
	        .headers = h,
	        .num_headers = nh,
	};
	assert_int_equal(st_connect_req_build(req, &parts), 0);
}

static void test_es_request_head__plain_request_closes(void **state)
{
	(void)state;
	const struct st_connect_field h[] = {
	        {V("Host"), V("127.0.0.1:6443")},  {V("Connection"), V("keep-alive")},
	        {V("Keep-Alive"), V("timeout=5")}, {V("X-Forwarded-For"), V("10.0.0.1")},
	        {V("Accept"), V("*/*")},           {V("Accept"), V("text/plain")},
	};
	struct st_connect_req req;
	make_req(&req, "GET", "tailLines=5&follow=true", h, 6);
	char out[1024];
	bool upgrade = true;
	ssize_t n = es_request_head(out, sizeof out, &req, "/containerLogs/ns/p/c", 21,
	                            "127.0.0.1:10250", true, false, &upgrade);
	assert_true(n > 0);
	const char want[] = "GET /containerLogs/ns/p/c?tailLines=5&follow=true HTTP/1.1\r\n"
	                    "Host: 127.0.0.1:10250\r\n"
	                    "X-Forwarded-For: 10.0.0.1\r\n"
	                    "Accept: */*\r\n"
	                    "Accept: text/plain\r\n"
	                    "Connection: close\r\n\r\n";
	assert_int_equal(n, sizeof want - 1);
	assert_memory_equal(out, want, sizeof want - 1);
	assert_false(upgrade);
	/* Kept alive for the next request: the same head without Connection: close. */
	n = es_request_head(out, sizeof out, &req, "/containerLogs/ns/p/c", 21, "127.0.0.1:10250",
	                    true, true, &upgrade);
	assert_int_equal(n, sizeof want - 1 - strlen("Connection: close\r\n"));
	assert_memory_equal(out, want, (size_t)n - 2);
	assert_memory_equal(out + n - 2, "\r\n", 2);
	/* Too small a buffer: refused whole. */
	assert_int_equal(es_request_head(out, 40, &req, "/x", 2, "h", true, false, &upgrade),
	                 -EMSGSIZE);
	st_connect_req_cleanup(&req);
}

static void test_es_request_head__upgrade_keeps_connection(void **state)
{
	(void)state;
	const struct st_connect_field h[] = {
	        {V("Connection"), V("Upgrade")},
	        {V("Upgrade"), V("SPDY/3.1")},
	        {V("X-Stream-Protocol-Version"), V("v4.channel.k8s.io")},
	};
	struct st_connect_req req;
	make_req(&req, "POST", "", h, 3);
	char out[1024];
	bool upgrade = false;
	ssize_t n = es_request_head(out, sizeof out, &req, "/exec/ns/p/c", 12, "kubelet:10250",
	                            true, false, &upgrade);
	assert_true(n > 0);
	assert_true(upgrade);
	out[n] = '\0';
	assert_non_null(strstr(out, "POST /exec/ns/p/c HTTP/1.1\r\nHost: kubelet:10250\r\n"));
	assert_non_null(strstr(out, "\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"));
	assert_null(strstr(out, "close"));
	/* to a runtime's streaming URL: the token's path, no query */
	n = es_request_head(out, sizeof out, &req, "/exec/Xy3_Ab9Q", 14, "127.0.0.1:35001", false,
	                    false, &upgrade);
	assert_true(n > 0);
	out[n] = '\0';
	assert_non_null(strstr(out, "POST /exec/Xy3_Ab9Q HTTP/1.1\r\nHost: 127.0.0.1:35001\r\n"));
	st_connect_req_cleanup(&req);
}

static void test_es_request_head__refuses_head_splitting(void **state)
{
	(void)state;
	char out[1024];
	bool upgrade;
	struct st_connect_req req;
	const struct st_connect_field bad_value[] = {{V("X-A"), V("a\r\nX-Injected: 1")}};
	make_req(&req, "GET", "", bad_value, 1);
	assert_int_equal(
	        es_request_head(out, sizeof out, &req, "/x", 2, "h", true, false, &upgrade),
	        -EBADMSG);
	st_connect_req_cleanup(&req);
	const struct st_connect_field bad_name[] = {{V("X A"), V("1")}};
	make_req(&req, "GET", "", bad_name, 1);
	assert_int_equal(
	        es_request_head(out, sizeof out, &req, "/x", 2, "h", true, false, &upgrade),
	        -EBADMSG);
	st_connect_req_cleanup(&req);
	make_req(&req, "GET", "a=1 HTTP/1.0", NULL, 0);
	assert_int_equal(
	        es_request_head(out, sizeof out, &req, "/x", 2, "h", true, false, &upgrade),
	        -EBADMSG);
	st_connect_req_cleanup(&req);
	make_req(&req, "GET", "", NULL, 0);
	assert_int_equal(
	        es_request_head(out, sizeof out, &req, "/x y", 4, "h", true, false, &upgrade),
	        -EBADMSG);
	st_connect_req_cleanup(&req);
}

/* Feeds @resp in pieces of @step bytes and returns the body (malloc'd) and its length. */
static ssize_t body_of(const char *resp, size_t len, size_t step, uint8_t **body,
                       struct es_body_only *b)
{
	es_body_only_init(b);
	*body = malloc(len + 1);
	size_t got = 0;
	uint8_t out[4096];
	for (size_t off = 0; off < len; off += step) {
		size_t n = len - off < step ? len - off : step;
		ssize_t r = es_body_only_feed(b, (const uint8_t *)resp + off, n, out, sizeof out);
		if (r < 0) {
			es_body_only_cleanup(b);
			free(*body);
			*body = NULL;
			return r;
		}
		memcpy(*body + got, out, (size_t)r);
		got += (size_t)r;
	}
	es_body_only_cleanup(b);
	return (ssize_t)got;
}

static void test_es_body_only__framings_split_anywhere(void **state)
{
	(void)state;
	static const struct {
		const char *resp;
		const char *body;
		bool done;
	} cases[] = {
	        {"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloNEXT", "hello", true},
	        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
	         "5\r\nline \r\n2;x=y\r\n1\n\r\n0\r\nTrailer: t\r\n\r\nNEXT",
	         "line 1\n", true},
	        {"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\n\r\nuntil close",
	         "until close", false},
	        {"HTTP/1.1 204 No Content\r\n\r\n", "", true},
	        {"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "", true},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		for (size_t step = 1; step <= strlen(cases[i].resp); step++) {
			uint8_t *body;
			struct es_body_only b;
			ssize_t n = body_of(cases[i].resp, strlen(cases[i].resp), step, &body, &b);
			assert_int_equal(n, strlen(cases[i].body));
			assert_memory_equal(body, cases[i].body, (size_t)n);
			assert_int_equal(b.done, cases[i].done);
			assert_true(b.head_done);
			free(body);
			/* Following the framing only (no output): the same end, found at once. */
			struct es_body_only t;
			es_body_only_init(&t);
			size_t len = strlen(cases[i].resp);
			for (size_t off = 0; off < len; off += step) {
				size_t k = len - off < step ? len - off : step;
				assert_true(es_body_only_feed(&t,
				                              (const uint8_t *)cases[i].resp + off,
				                              k, NULL, SIZE_MAX) >= 0);
			}
			assert_int_equal(t.done, cases[i].done);
			es_body_only_cleanup(&t);
		}
	}
}

/* Whether the kubelet lets its connection carry the next request: only then may the edge keep
 * it (HTTP/1.1 unless "Connection: close", HTTP/1.0 only with keep-alive, never a body that
 * ends with the close). Known once the head is complete, however it is split. */
static void test_es_body_only__keep_alive(void **state)
{
	(void)state;
	static const struct {
		const char *resp;
		bool keep;
	} cases[] = {
	        {"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", true},
	        {"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", false},
	        {"HTTP/1.1 200 OK\r\nconnection: Keep-Alive, CLOSE\r\nContent-Length: 2\r\n\r\nok",
	         false},
	        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
	         "0\r\n\r\n",
	         false},
	        {"HTTP/1.1 204 No Content\r\n\r\n", true},
	        {"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", false},
	        {"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok", true},
	        {"HTTP/1.1 200 OK\r\n\r\nuntil close", false},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		size_t len = strlen(cases[i].resp);
		for (size_t step = 1; step <= len; step++) {
			struct es_body_only b;
			es_body_only_init(&b);
			assert_false(b.keep_alive);
			for (size_t off = 0; off < len; off += step) {
				size_t k = len - off < step ? len - off : step;
				assert_true(es_body_only_feed(&b,
				                              (const uint8_t *)cases[i].resp + off,
				                              k, NULL, SIZE_MAX) >= 0);
			}
			assert_true(b.head_done);
			assert_int_equal(b.keep_alive, cases[i].keep);
			es_body_only_cleanup(&b);
		}
	}
}

/* A head that comes whole is parsed where it is: nothing is allocated. A split one is kept in a
 * buffer sized to it (not the 64 KiB a head may reach); failing that allocation is -ENOMEM
 * with nothing kept. */
static void test_es_body_only__head_memory(void **state)
{
	(void)state;
	static const char resp[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
	uint8_t out[64];
	struct es_body_only b;
	es_body_only_init(&b);
	failmalloc_fail_after(0);
	ssize_t n = es_body_only_feed(&b, (const uint8_t *)resp, sizeof resp - 1, out, sizeof out);
	failmalloc_off();
	assert_int_equal(n, 2);
	assert_memory_equal(out, "ok", 2);
	assert_true(b.done && b.keep_alive);
	assert_null(b.head);
	es_body_only_cleanup(&b);

	es_body_only_init(&b);
	failmalloc_fail_after(0);
	assert_int_equal(es_body_only_feed(&b, (const uint8_t *)resp, 20, out, sizeof out),
	                 -ENOMEM);
	failmalloc_off();
	assert_null(b.head);
	assert_int_equal(b.head_len, 0);
	assert_int_equal(es_body_only_feed(&b, (const uint8_t *)resp, 20, out, sizeof out), 0);
	assert_non_null(b.head);
	assert_int_equal(b.head_cap, 1024);
	n = es_body_only_feed(&b, (const uint8_t *)resp + 20, sizeof resp - 21, out, sizeof out);
	assert_int_equal(n, 2);
	assert_memory_equal(out, "ok", 2);
	assert_null(b.head); /* freed once the head is parsed */
	es_body_only_cleanup(&b);
}

/* Interim heads (1xx but 101, RFC 9110 §15.2) before the final one: body-only they are dropped
 * (a KubeEdge cloud gets the body alone); following the framing only, they are passed over and
 * the final head's framing says where the answer ends. Split anywhere. */
static void test_es_body_only__interim_heads(void **state)
{
	(void)state;
	const char *resp = "HTTP/1.1 100 Continue\r\n\r\n"
	                   "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"
	                   "HTTP/1.1 100 Continue\r\n\r\n"
	                   "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloNEXT";
	size_t len = strlen(resp);
	for (size_t step = 1; step <= len; step++) {
		uint8_t *body;
		struct es_body_only b;
		ssize_t n = body_of(resp, len, step, &body, &b);
		assert_int_equal(n, 5);
		assert_memory_equal(body, "hello", 5);
		assert_true(b.done && b.head_done && b.keep_alive);
		assert_int_equal(b.status, 200);
		assert_int_equal(b.interim, 3);
		free(body);
		struct es_body_only t;
		es_body_only_init(&t);
		for (size_t off = 0; off < len; off += step) {
			size_t k = len - off < step ? len - off : step;
			assert_true(es_body_only_feed(&t, (const uint8_t *)resp + off, k, NULL,
			                              SIZE_MAX) >= 0);
		}
		assert_true(t.done && t.keep_alive);
		assert_int_equal(t.interim, 3);
		es_body_only_cleanup(&t);
	}
	/* Only an interim head so far: no body, not over. */
	struct es_body_only b;
	uint8_t out[64];
	es_body_only_init(&b);
	const char *part = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 20";
	assert_int_equal(
	        es_body_only_feed(&b, (const uint8_t *)part, strlen(part), out, sizeof out), 0);
	assert_false(b.head_done || b.done);
	assert_int_equal(b.interim, 1);
	const char *rest = "0 OK\r\nContent-Length: 2\r\n\r\nok";
	assert_int_equal(
	        es_body_only_feed(&b, (const uint8_t *)rest, strlen(rest), out, sizeof out), 2);
	assert_memory_equal(out, "ok", 2);
	assert_true(b.done);
	es_body_only_cleanup(&b);
}

static void test_es_body_only__malformed(void **state)
{
	(void)state;
	const char *bad[] = {
	        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
	        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
	        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n",
	        "NOT HTTP\r\n\r\n",
	        /* interim heads: as strict as the final one; 101 after them still refused */
	        "HTTP/1.1 100 Continue\r\nBad Header\r\n\r\nHTTP/1.1 200 OK\r\n\r\n",
	        "HTTP/1.1 100 Continue\r\n\r\nNOT HTTP\r\n\r\n",
	        ("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 101 Switching Protocols\r\n"
	         "Upgrade: x\r\nConnection: upgrade\r\n\r\n"),
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		uint8_t *body;
		struct es_body_only b;
		assert_int_equal(body_of(bad[i], strlen(bad[i]), 7, &body, &b), -EBADMSG);
	}
	/* A head that never ends: refused at the limit, not buffered for ever. */
	size_t len = ST_MAX_HTTP_HEAD_BYTES + 100;
	char *big = malloc(len);
	memcpy(big, "HTTP/1.1 200 OK\r\nX: ", 20);
	memset(big + 20, 'a', len - 20);
	uint8_t *body;
	struct es_body_only b;
	assert_int_equal(body_of(big, len, 4096, &body, &b), -EMSGSIZE);
	free(big);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_es_request_head__plain_request_closes),
	        cmocka_unit_test(test_es_request_head__upgrade_keeps_connection),
	        cmocka_unit_test(test_es_request_head__refuses_head_splitting),
	        cmocka_unit_test(test_es_body_only__framings_split_anywhere),
	        cmocka_unit_test(test_es_body_only__keep_alive),
	        cmocka_unit_test(test_es_body_only__head_memory),
	        cmocka_unit_test(test_es_body_only__interim_heads),
	        cmocka_unit_test(test_es_body_only__malformed),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
