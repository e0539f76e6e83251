/* Unit tests for the pure half of the kubelet's HTTP/2 path (edgestream/src/h2msg.h): the
 * request as HTTP/2 fields, the answer back as HTTP/1.1 bytes, the flow mapping. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "h2msg.h"

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
	        .scheme = {"http", 4},
	        .host = {"127.0.0.1:10350", 15},
	        .path = {"/containerLogs/ns/pod/ctr", 25},
	        .raw_query = {query, strlen(query)},
	        .headers = h,
	        .num_headers = nh,
	};
	assert_int_equal(st_connect_req_build(req, &parts), 0);
}

static bool field_is(const struct es_h2_field *f, const char *name, const char *value)
{
	return f->name_len == strlen(name) && memcmp(f->name, name, f->name_len) == 0 &&
	       f->value_len == strlen(value) && memcmp(f->value, value, f->value_len) == 0;
}

static void test_es_h2__request_fields_pseudo_first_lower_case_hop_by_hop_dropped(void **state)
{
	(void)state;
	const struct st_connect_field h[] = {
	        {V("Host"), V("apiserver-side:10250")},
	        {V("Accept"), V("*/*")},
	        {V("Connection"), V("close")},
	        {V("X-Remote-User"), V("alice")},
	        {V("TE"), V("gzip")},
	        {V("Keep-Alive"), V("5")},
	        {V("Transfer-Encoding"), V("chunked")},
	        {V("Te"), V("trailers")},
	};
	struct st_connect_req req;
	make_req(&req, "GET", "follow=true&tailLines=1", h, sizeof h / sizeof h[0]);
	struct es_h2_field f[ES_H2_MAX_FIELDS];
	char buf[1024];
	const char *path = "/containerLogs/ns/pod/ctr";
	ssize_t n = es_h2_request_fields(f, buf, sizeof buf, &req, path, strlen(path),
	                                 "127.0.0.1:10250");
	assert_int_equal(n, 7);
	assert_true(field_is(&f[0], ":method", "GET"));
	assert_true(field_is(&f[1], ":scheme", "https"));
	assert_true(field_is(&f[2], ":authority", "127.0.0.1:10250"));
	assert_true(field_is(&f[3], ":path", "/containerLogs/ns/pod/ctr?follow=true&tailLines=1"));
	assert_true(field_is(&f[4], "accept", "*/*"));
	assert_true(field_is(&f[5], "x-remote-user", "alice"));
	assert_true(field_is(&f[6], "te", "trailers"));
	/* Too small a buffer: refused, not cut. */
	assert_int_equal(es_h2_request_fields(f, buf, 20, &req, path, strlen(path), "k"),
	                 -EMSGSIZE);
	st_connect_req_cleanup(&req);
}

static void test_es_h2__request_that_could_split_refused(void **state)
{
	(void)state;
	const struct st_connect_field h[] = {{V("X-Evil"), V("a\r\nInjected: 1")}};
	struct st_connect_req req;
	make_req(&req, "GET", "", h, 1);
	struct es_h2_field f[ES_H2_MAX_FIELDS];
	char buf[512];
	assert_int_equal(es_h2_request_fields(f, buf, sizeof buf, &req, "/pods", 5, "k"), -EBADMSG);
	st_connect_req_cleanup(&req);
	make_req(&req, "GET", "", NULL, 0);
	assert_int_equal(es_h2_request_fields(f, buf, sizeof buf, &req, "/a b", 4, "k"), -EBADMSG);
	st_connect_req_cleanup(&req);
}

static void test_es_h2__only_bodiless_gets_fit(void **state)
{
	(void)state;
	struct st_connect_req req;
	make_req(&req, "GET", "", NULL, 0);
	assert_true(es_h2_request_fits(&req));
	st_connect_req_cleanup(&req);
	make_req(&req, "HEAD", "", NULL, 0);
	assert_true(es_h2_request_fits(&req));
	st_connect_req_cleanup(&req);
	make_req(&req, "POST", "", NULL, 0);
	assert_false(es_h2_request_fits(&req));
	st_connect_req_cleanup(&req);
	const struct st_connect_field up[] = {{V("Connection"), V("Upgrade")},
	                                      {V("Upgrade"), V("SPDY/3.1")}};
	make_req(&req, "GET", "", up, 2);
	assert_false(es_h2_request_fits(&req));
	st_connect_req_cleanup(&req);
	const struct st_connect_field body[] = {{V("Content-Length"), V("5")}};
	make_req(&req, "GET", "", body, 1);
	assert_false(es_h2_request_fits(&req));
	st_connect_req_cleanup(&req);
}

static void add(struct es_h2_head *h, const char *name, const char *value)
{
	assert_int_equal(es_h2_head_field(h, (const uint8_t *)name, strlen(name),
	                                  (const uint8_t *)value, strlen(value)),
	                 0);
}

static void test_es_h2__answer_without_length_becomes_chunked(void **state)
{
	(void)state;
	struct es_h2_head h;
	es_h2_head_init(&h);
	add(&h, ":status", "200");
	add(&h, "content-type", "text/plain");
	add(&h, "date", "Tue, 24 Nov 2026 15:00:00 GMT");
	add(&h, "connection", "keep-alive"); /* connection-specific: dropped */
	char out[512];
	bool chunked = false;
	ssize_t n = es_h2_head_write(&h, false, out, sizeof out, &chunked);
	const char *want = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
	                   "Date: Tue, 24 Nov 2026 15:00:00 GMT\r\n"
	                   "Transfer-Encoding: chunked\r\n\r\n";
	assert_int_equal(n, (ssize_t)strlen(want));
	assert_memory_equal(out, want, strlen(want));
	assert_true(chunked);
	/* Too small: refused. */
	assert_int_equal(es_h2_head_write(&h, false, out, 20, &chunked), -EMSGSIZE);
	es_h2_head_cleanup(&h);
	/* The chunk framing the body gets. */
	char line[ES_H2_CHUNK_START_MAX];
	size_t k = es_h2_chunk_start(line, 0x1a2b);
	assert_int_equal(k, 6);
	assert_memory_equal(line, "1a2b\r\n", 6);
}

static void test_es_h2__answer_with_length_or_no_body_is_not_chunked(void **state)
{
	(void)state;
	struct es_h2_head h;
	es_h2_head_init(&h);
	add(&h, ":status", "404");
	add(&h, "content-length", "27");
	char out[512];
	bool chunked = true;
	ssize_t n = es_h2_head_write(&h, false, out, sizeof out, &chunked);
	const char *want = "HTTP/1.1 404 Not Found\r\nContent-Length: 27\r\n\r\n";
	assert_int_equal(n, (ssize_t)strlen(want));
	assert_memory_equal(out, want, strlen(want));
	assert_false(chunked);
	es_h2_head_cleanup(&h);
	/* 204, 304 and a HEAD answer carry no body: never chunked. */
	const char *codes[] = {"204", "304", "200"};
	for (int i = 0; i < 3; i++) {
		es_h2_head_init(&h);
		add(&h, ":status", codes[i]);
		chunked = true;
		assert_true(es_h2_head_write(&h, i == 2, out, sizeof out, &chunked) > 0);
		assert_false(chunked);
		es_h2_head_cleanup(&h);
	}
}

static void test_es_h2__bad_answers_refused(void **state)
{
	(void)state;
	struct es_h2_head h;
	char out[512];
	bool chunked;
	es_h2_head_init(&h); /* no :status at all */
	add(&h, "content-type", "x");
	assert_int_equal(es_h2_head_write(&h, false, out, sizeof out, &chunked), -EBADMSG);
	es_h2_head_cleanup(&h);
	es_h2_head_init(&h);
	assert_int_equal(
	        es_h2_head_field(&h, (const uint8_t *)":status", 7, (const uint8_t *)"2x0", 3),
	        -EBADMSG);
	es_h2_head_cleanup(&h);
	es_h2_head_init(&h); /* a value that would split the HTTP/1.1 head */
	add(&h, ":status", "200");
	assert_int_equal(
	        es_h2_head_field(&h, (const uint8_t *)"x-a", 3, (const uint8_t *)"1\r\nX-B: 2", 9),
	        -EBADMSG);
	assert_int_equal(es_h2_head_write(&h, false, out, sizeof out, &chunked), -EBADMSG);
	es_h2_head_cleanup(&h);
}

static void test_es_h2__flow_withholds_credit_only_while_the_cloud_is_full(void **state)
{
	(void)state;
	struct es_h2_flow f = {0};
	assert_int_equal(es_h2_flow_received(&f, 1000, false), 1000); /* taken: credit back */
	assert_int_equal(es_h2_flow_received(&f, 700, true), 0);      /* full: withheld */
	assert_int_equal(es_h2_flow_received(&f, 300, true), 0);
	assert_int_equal(es_h2_flow_drained(&f), 1000); /* drained: all of it back at once */
	assert_int_equal(es_h2_flow_drained(&f), 0);
	assert_int_equal(es_h2_flow_received(&f, 5, true), 0);
	assert_int_equal(es_h2_flow_received(&f, 5, false), 10); /* not full again: both */
}

static void test_es_h2__window_fits_the_relay_burst(void **state)
{
	(void)state;
	/* Past its queue's mark a stream can still get its whole window: chunk-framed, that must
	 * fit the kubelet backend's burst (ES_CONN_TO_CLOUD_BURST, conn.h: ES_READ_BYTES + 48 KiB)
	 * for frames of a log line or more. */
	assert_true(es_h2_flow_worst_burst(16384) <= ES_H2_STREAM_WINDOW + 4 * 8);
	assert_true(es_h2_flow_worst_burst(8) <= 64u * 1024u + 48u * 1024u);
	assert_true(es_h2_flow_worst_burst(1) > 64u * 1024u + 48u * 1024u); /* 1-byte frames not */
}

static void test_es_h2__bulk_window_doubles_to_the_bound_only_while_the_cloud_keeps_up(void **state)
{
	(void)state;
	struct es_h2_flow f;
	es_h2_flow_init(&f);
	assert_int_equal(f.window, ES_H2_STREAM_WINDOW);
	/* Not a whole window yet: stays. */
	es_h2_flow_received(&f, ES_H2_STREAM_WINDOW - 1, false);
	assert_int_equal(es_h2_flow_grow(&f, false), ES_H2_STREAM_WINDOW);
	/* The cloud fell behind once: the count starts again (the cloud is the bound). */
	es_h2_flow_received(&f, 1, true);
	assert_int_equal(es_h2_flow_grow(&f, false), ES_H2_STREAM_WINDOW);
	es_h2_flow_drained(&f);
	es_h2_flow_received(&f, ES_H2_STREAM_WINDOW, false);
	/* A whole window, every byte taken: doubles, unless the budget is tight. */
	assert_int_equal(es_h2_flow_grow(&f, true), ES_H2_STREAM_WINDOW);
	assert_int_equal(es_h2_flow_grow(&f, false), 2 * ES_H2_STREAM_WINDOW);
	es_h2_flow_grown(&f, 2 * ES_H2_STREAM_WINDOW);
	assert_int_equal(es_h2_flow_grow(&f, false), 2 * ES_H2_STREAM_WINDOW); /* count restarted */
	size_t steps = 1;
	while (f.window < ES_H2_STREAM_WINDOW_MAX) {
		es_h2_flow_received(&f, f.window, false);
		size_t next = es_h2_flow_grow(&f, false);
		assert_true(next > f.window && next <= ES_H2_STREAM_WINDOW_MAX);
		es_h2_flow_grown(&f, next);
		steps++;
	}
	assert_int_equal(steps, 4); /* 64 KiB → 128 → 256 → 512 → 1 MiB */
	es_h2_flow_received(&f, 4 * ES_H2_STREAM_WINDOW_MAX, false);
	assert_int_equal(es_h2_flow_grow(&f, false), ES_H2_STREAM_WINDOW_MAX); /* the bound */
}

static void test_es_h2__reservation_covers_the_window_as_it_reaches_the_relay(void **state)
{
	(void)state;
	assert_int_equal(es_h2_flow_reservation(ES_H2_STREAM_WINDOW_MAX, false),
	                 ES_H2_STREAM_WINDOW_MAX);
	/* Chunk-framed in 8-byte frames: "8\r\n" + 8 + "\r\n" per frame. */
	assert_int_equal(es_h2_flow_reservation(ES_H2_STREAM_WINDOW_MAX, true),
	                 ES_H2_STREAM_WINDOW_MAX / 8 * 13);
	assert_int_equal(es_h2_flow_reservation(ES_H2_STREAM_WINDOW, true),
	                 es_h2_flow_worst_burst(ES_H2_MIN_FRAME));
	/* Growing charges the difference: more for more window, never less than the bytes. */
	size_t a = es_h2_flow_reservation(2 * ES_H2_STREAM_WINDOW, true);
	size_t b = es_h2_flow_reservation(ES_H2_STREAM_WINDOW, true);
	assert_true(a - b >= ES_H2_STREAM_WINDOW);
}

/* Grows @f to the bound as a bulk stream would (a whole window each time), then ends the
 * period of that burst: a bulk one, the window stays. */
static void grow_to_max(struct es_h2_flow *f)
{
	while (f->window < ES_H2_STREAM_WINDOW_MAX) {
		es_h2_flow_received(f, f->window, false);
		size_t next = es_h2_flow_grow(f, false);
		assert_true(next > f->window);
		es_h2_flow_grown(f, next);
	}
	bool silent;
	assert_int_equal(es_h2_flow_period_end(f, &silent), ES_H2_STREAM_WINDOW_MAX);
	assert_false(silent);
}

static void test_es_h2__a_window_shrinks_once_the_stream_is_no_longer_bulk(void **state)
{
	(void)state;
	struct es_h2_flow f;
	es_h2_flow_init(&f);
	bool silent;
	/* Never grown: a period changes nothing. */
	assert_int_equal(es_h2_flow_period_end(&f, &silent), ES_H2_STREAM_WINDOW);
	assert_true(silent);
	grow_to_max(&f);
	/* Still bulk (half its window or more in a period): kept. */
	es_h2_flow_received(&f, ES_H2_STREAM_WINDOW_MAX / 2, false);
	assert_int_equal(es_h2_flow_period_end(&f, &silent), ES_H2_STREAM_WINDOW_MAX);
	assert_false(silent);
	/* Slower (less than half): halves, down to the initial window at most. */
	es_h2_flow_received(&f, ES_H2_STREAM_WINDOW_MAX / 2 - 1, false);
	size_t next = es_h2_flow_period_end(&f, &silent);
	assert_int_equal(next, ES_H2_STREAM_WINDOW_MAX / 2);
	es_h2_flow_grown(&f, next);
	assert_int_equal(f.capw, ES_H2_STREAM_WINDOW_MAX); /* the cap still allows the old one */
	es_h2_flow_received(&f, 1, false);
	es_h2_flow_grown(&f, es_h2_flow_period_end(&f, &silent));
	assert_int_equal(f.window, ES_H2_STREAM_WINDOW_MAX / 4);
	/* Silent: straight back to the initial window. */
	es_h2_flow_grown(&f, es_h2_flow_period_end(&f, &silent));
	assert_true(silent);
	assert_int_equal(f.window, ES_H2_STREAM_WINDOW);
	/* A trickle never grows it again: a whole window is needed within one period. */
	for (int i = 0; i < 3; i++) {
		es_h2_flow_received(&f, ES_H2_STREAM_WINDOW / 2, false);
		assert_int_equal(es_h2_flow_grow(&f, false), ES_H2_STREAM_WINDOW);
		es_h2_flow_grown(&f, es_h2_flow_period_end(&f, &silent));
	}
	/* A new burst grows it again, without charging what is still reserved. */
	es_h2_flow_received(&f, ES_H2_STREAM_WINDOW, false);
	next = es_h2_flow_grow(&f, false);
	assert_int_equal(next, 2 * ES_H2_STREAM_WINDOW);
	assert_int_equal(es_h2_flow_grow_extra(&f, next, true), 0); /* capw is 1 MiB still */
}

static void test_es_h2__a_shrunk_window_gives_back_only_what_the_kubelet_spent(void **state)
{
	(void)state;
	struct es_h2_flow f;
	es_h2_flow_init(&f);
	grow_to_max(&f);
	size_t full = es_h2_flow_charged_extra(&f, true);
	assert_int_equal(full, es_h2_flow_reservation(ES_H2_STREAM_WINDOW_MAX, true) -
	                               es_h2_flow_reservation(ES_H2_STREAM_WINDOW, true));
	es_h2_flow_received(&f, 1000, false); /* a slow period: halved */
	bool silent;
	es_h2_flow_grown(&f, es_h2_flow_period_end(&f, &silent));
	assert_int_equal(f.window, ES_H2_STREAM_WINDOW_MAX / 2);
	/* The kubelet holds 900 KiB of credit still: the cap and the charge allow for that. */
	struct es_h2_flow_keep k = es_h2_flow_release(&f, 900u * 1024u, false, true);
	assert_int_equal(k.capw, 900u * 1024u);
	assert_int_equal(k.held, 900u * 1024u);
	assert_int_equal(k.cap_extra, es_h2_flow_reservation(900u * 1024u, true) -
	                                      es_h2_flow_reservation(ES_H2_STREAM_WINDOW, true));
	assert_int_equal(k.charged_extra, k.cap_extra);
	es_h2_flow_released(&f, &k);
	/* Spent down to within the window: the window is all that is kept. */
	k = es_h2_flow_release(&f, 1000, false, false);
	assert_int_equal(k.capw, ES_H2_STREAM_WINDOW_MAX / 2);
	assert_int_equal(k.charged_extra, ES_H2_STREAM_WINDOW_MAX / 2 - ES_H2_STREAM_WINDOW);
	/* Never more than it allowed before, whatever the credit says. */
	k = es_h2_flow_release(&f, 2 * ES_H2_STREAM_WINDOW_MAX, false, true);
	assert_int_equal(k.capw, 900u * 1024u);
}

static void test_es_h2__a_silent_stream_gives_back_its_old_credit_until_it_speaks(void **state)
{
	(void)state;
	struct es_h2_flow f;
	es_h2_flow_init(&f);
	grow_to_max(&f);
	bool silent;
	es_h2_flow_grown(&f, es_h2_flow_period_end(&f, &silent)); /* silent: back to 64 KiB */
	assert_int_equal(f.window, ES_H2_STREAM_WINDOW);
	/* The kubelet kept its whole 1 MiB of credit: the cap allows for it, the budget not. */
	struct es_h2_flow_keep k =
	        es_h2_flow_release(&f, ES_H2_STREAM_WINDOW_MAX, silent /* and empty */, true);
	assert_int_equal(k.capw, ES_H2_STREAM_WINDOW_MAX);
	assert_int_equal(k.held, ES_H2_STREAM_WINDOW);
	assert_int_equal(k.charged_extra, 0);
	assert_true(k.cap_extra > 0);
	es_h2_flow_released(&f, &k);
	assert_int_equal(es_h2_flow_charged_extra(&f, true), 0);
	/* Not empty or not silent: the charge stays for what may come. */
	struct es_h2_flow_keep busy = es_h2_flow_release(&f, ES_H2_STREAM_WINDOW_MAX, false, true);
	assert_int_equal(busy.held, ES_H2_STREAM_WINDOW);
	/* Its next byte: the old credit's reservation is charged again, once. */
	size_t again = es_h2_flow_touch(&f, true);
	assert_int_equal(again, es_h2_flow_reservation(ES_H2_STREAM_WINDOW_MAX, true) -
	                                es_h2_flow_reservation(ES_H2_STREAM_WINDOW, true));
	assert_int_equal(es_h2_flow_touch(&f, true), 0);
	assert_int_equal(es_h2_flow_charged_extra(&f, true), again);
	/* Spent: nothing kept past the window. */
	k = es_h2_flow_release(&f, ES_H2_STREAM_WINDOW, false, true);
	es_h2_flow_released(&f, &k);
	assert_int_equal(k.cap_extra, 0);
	assert_int_equal(es_h2_flow_charged_extra(&f, true), 0);
	/* Regrowth from there charges again from the initial window. */
	es_h2_flow_received(&f, ES_H2_STREAM_WINDOW, false);
	size_t next = es_h2_flow_grow(&f, false);
	assert_int_equal(es_h2_flow_grow_extra(&f, next, false), next - ES_H2_STREAM_WINDOW);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(
	                test_es_h2__request_fields_pseudo_first_lower_case_hop_by_hop_dropped),
	        cmocka_unit_test(test_es_h2__request_that_could_split_refused),
	        cmocka_unit_test(test_es_h2__only_bodiless_gets_fit),
	        cmocka_unit_test(test_es_h2__answer_without_length_becomes_chunked),
	        cmocka_unit_test(test_es_h2__answer_with_length_or_no_body_is_not_chunked),
	        cmocka_unit_test(test_es_h2__bad_answers_refused),
	        cmocka_unit_test(test_es_h2__flow_withholds_credit_only_while_the_cloud_is_full),
	        cmocka_unit_test(test_es_h2__window_fits_the_relay_burst),
	        cmocka_unit_test(
	                test_es_h2__bulk_window_doubles_to_the_bound_only_while_the_cloud_keeps_up),
	        cmocka_unit_test(test_es_h2__reservation_covers_the_window_as_it_reaches_the_relay),
	        cmocka_unit_test(test_es_h2__a_window_shrinks_once_the_stream_is_no_longer_bulk),
	        cmocka_unit_test(
	                test_es_h2__a_shrunk_window_gives_back_only_what_the_kubelet_spent),
	        cmocka_unit_test(
	                test_es_h2__a_silent_stream_gives_back_its_old_credit_until_it_speaks),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
