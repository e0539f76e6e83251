/* Unit tests for the protocol extensions (stream/ext.h): negotiation, payloads, stream states. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include <stream/err.h>
#include <stream/ext.h>

#include "guard.h"

static int parse(const char *s, struct st_ext_offer *o)
{
	return st_ext_offer_parse(s, strlen(s), o);
}

static void test_offer_parse(void **state)
{
	(void)state;
	struct st_ext_offer o;
	assert_int_equal(parse("v=1; caps=flow,half-close,error,binary,tcp,raw-response,opened,"
	                       "reconnect; "
	                       "window=1048576; replica=cs-0",
	                       &o),
	                 0);
	assert_int_equal(o.version, 1);
	assert_int_equal(o.caps, ST_CAP_ALL);
	assert_int_equal(o.window_bytes, 1048576);
	assert_string_equal(o.replica_id, "cs-0");

	/* Tolerant: spaces, unknown caps and keys, empty parameters, any order. */
	assert_int_equal(
	        parse("  caps = flow , future-thing ,binary ;; x-new=whatever; v = 2 ", &o), 0);
	assert_int_equal(o.version, 2);
	assert_int_equal(o.caps, ST_CAP_FLOW | ST_CAP_BINARY);
	assert_int_equal(o.window_bytes, 0);
	assert_string_equal(o.replica_id, "");
	assert_int_equal(parse("v=1", &o), 0);
	assert_int_equal(o.caps, 0);

	static const char *const bad[] = {
	        "",
	        "caps=flow",
	        "v=0",
	        "v=x",
	        "v=",
	        "v=4294967296",
	        "v=1; window=1023",
	        "v=1; window=16777217",
	        "v=1; window=abc",
	        "v=1; replica=a b",
	        "v=1; replica=a/b",
	        "v=1; pong-within=999",
	        "v=1; pong-within=3600001",
	        "v=1; pong-within=",
	        "v=1; pong-within=1s",
	        "v=1; noequals",
	        "v=1; =x",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		if (parse(bad[i], &o) != -EBADMSG)
			fail_msg("accepted '%s'", bad[i]);
	/* Window limits: 1024 and ST_MAX accepted. */
	assert_int_equal(parse("v=1; window=1024", &o), 0);
	assert_int_equal(parse("v=1; window=16777216", &o), 0);
	/* pong-within limits, and absent means 0 (every PING answered at once). */
	assert_int_equal(o.pong_within_ms, 0);
	assert_int_equal(parse("v=1; pong-within=1000", &o), 0);
	assert_int_equal(o.pong_within_ms, 1000);
	assert_int_equal(parse("v=1; pong-within=3600000", &o), 0);
	assert_int_equal(o.pong_within_ms, 3600000);
	/* Replica id length: limit ok, +1 refused. */
	char buf[ST_EXT_HEADER_MAX_BYTES + 8];
	int n = snprintf(buf, sizeof buf, "v=1; replica=");
	memset(buf + n, 'r', ST_MAX_REPLICA_ID_BYTES);
	buf[n + ST_MAX_REPLICA_ID_BYTES] = '\0';
	assert_int_equal(parse(buf, &o), 0);
	assert_int_equal(strlen(o.replica_id), ST_MAX_REPLICA_ID_BYTES);
	buf[n + ST_MAX_REPLICA_ID_BYTES] = 'r';
	buf[n + ST_MAX_REPLICA_ID_BYTES + 1] = '\0';
	assert_int_equal(parse(buf, &o), -EBADMSG);
	/* Header value length: cap ok, +1 refused. */
	memset(buf, ' ', sizeof buf);
	memcpy(buf, "v=1", 3);
	assert_int_equal(st_ext_offer_parse(buf, ST_EXT_HEADER_MAX_BYTES, &o), 0);
	assert_int_equal(st_ext_offer_parse(buf, ST_EXT_HEADER_MAX_BYTES + 1, &o), -EMSGSIZE);
}

static void test_offer_format_roundtrip(void **state)
{
	(void)state;
	struct st_ext_offer o = {
	        .version = 1, .caps = ST_CAP_ALL, .window_bytes = 65536, .pong_within_ms = 15000};
	memcpy(o.replica_id, "cloudstream-1", 14);
	char out[ST_EXT_HEADER_MAX_BYTES];
	ssize_t n = st_ext_offer_format(out, sizeof out, &o);
	const char *want =
	        "v=1; caps=flow,half-close,error,binary,tcp,raw-response,opened,reconnect; "
	        "window=65536; replica=cloudstream-1; pong-within=15000";
	assert_int_equal(n, (ssize_t)strlen(want));
	assert_memory_equal(out, want, (size_t)n);
	assert_int_equal(st_ext_offer_format(out, (size_t)n - 1, &o), -EMSGSIZE);
	struct st_ext_offer back;
	assert_int_equal(st_ext_offer_parse(out, (size_t)n, &back), 0);
	assert_memory_equal(&back, &o, sizeof o);
	/* Minimal offer. */
	struct st_ext_offer min = {.version = 1};
	n = st_ext_offer_format(out, sizeof out, &min);
	assert_int_equal(n, 3);
	assert_memory_equal(out, "v=1", 3);
}

static void test_negotiation(void **state)
{
	(void)state;
	struct st_ext_offer cloud = {.version = 1, .caps = ST_CAP_ALL, .window_bytes = 1 << 20};
	struct st_ext_offer edge = {.version = 3,
	                            .caps = ST_CAP_FLOW | ST_CAP_ERROR | (1u << 30),
	                            .window_bytes = 4096};
	struct st_ext_offer agreed;
	assert_int_equal(st_ext_negotiate(&cloud, &edge, &agreed), 0);
	assert_int_equal(agreed.version, 1);
	assert_int_equal(agreed.caps, ST_CAP_FLOW | ST_CAP_ERROR);
	assert_int_equal(agreed.window_bytes, 1 << 20); /* the cloud's own window */
	/* The edge accepts that echo; not one that adds a cap or raises the version. */
	edge.version = 1;
	assert_int_equal(st_ext_check_echo(&edge, &agreed), 0);
	agreed.caps |= ST_CAP_TCP;
	assert_int_equal(st_ext_check_echo(&edge, &agreed), -EPROTO);
	agreed.caps &= ~(uint32_t)ST_CAP_TCP;
	agreed.version = 2;
	assert_int_equal(st_ext_check_echo(&edge, &agreed), -EPROTO);
}

static void test_hello(void **state)
{
	(void)state;
	uint8_t buf[512];
	struct st_ext_hello h = {.version = 1,
	                         .caps = ST_CAP_ALL,
	                         .window_bytes = 1 << 20,
	                         .replica_id = "cs-0",
	                         .replica_id_len = 4};
	ssize_t n = st_ext_hello_encode(buf, sizeof buf, &h);
	/* 01 | ff 02 (0x17f) | 80 80 40 | 04 "cs-0" */
	const uint8_t want[] = {0x01, 0xff, 0x02, 0x80, 0x80, 0x40, 0x04, 'c', 's', '-', '0'};
	assert_int_equal(n, sizeof want);
	assert_memory_equal(buf, want, sizeof want);
	struct st_ext_hello back;
	assert_int_equal(st_ext_hello_decode(buf, (size_t)n, &back), 0);
	assert_true(back.version == 1 && back.caps == ST_CAP_ALL && back.window_bytes == 1 << 20);
	assert_int_equal(back.replica_id_len, 4);
	assert_memory_equal(back.replica_id, "cs-0", 4);
	/* Every proper prefix is malformed (payloads arrive whole); so are trailing bytes. */
	for (size_t k = 0; k < (size_t)n; k++) {
		struct guard_buf g;
		assert_int_equal(guard_new(&g, buf, k), 0);
		assert_int_equal(st_ext_hello_decode(g.data, g.len, &back), -EBADMSG);
		guard_free(&g);
	}
	buf[n] = 'x';
	assert_int_equal(st_ext_hello_decode(buf, (size_t)n + 1, &back), -EBADMSG);
	/* Version 0 and windows over the max are refused. */
	const uint8_t v0[] = {0x00, 0x00, 0x00, 0x00};
	assert_int_equal(st_ext_hello_decode(v0, sizeof v0, &back), -EBADMSG);
	const uint8_t bigwin[] = {0x01, 0x00, 0x81, 0x80, 0x80, 0x08, 0x00}; /* 2^24 + 1 */
	assert_int_equal(st_ext_hello_decode(bigwin, sizeof bigwin, &back), -EBADMSG);
	h.replica_id_len = ST_MAX_REPLICA_ID_BYTES + 1;
	assert_int_equal(st_ext_hello_encode(buf, sizeof buf, &h), -EMSGSIZE);
	assert_int_equal(
	        st_ext_hello_encode(buf, 3,
	                            &(struct st_ext_hello){.version = 1, .window_bytes = 1 << 20}),
	        -EMSGSIZE);
}

static void test_window_msg(void **state)
{
	(void)state;
	uint8_t buf[16];
	uint64_t inc;
	assert_int_equal(st_ext_window_encode(buf, sizeof buf, 65536), 3);
	assert_int_equal(st_ext_window_decode(buf, 3, &inc), 0);
	assert_true(inc == 65536);
	assert_int_equal(st_ext_window_decode(buf, 2, &inc), -EBADMSG);
	assert_int_equal(st_ext_window_decode(buf, 0, &inc), -EBADMSG);
	assert_int_equal(st_ext_window_encode(buf, sizeof buf, 0), -EINVAL);
	assert_int_equal(st_ext_window_encode(buf, sizeof buf, ST_MAX_STREAM_WINDOW_BYTES), 4);
	assert_int_equal(st_ext_window_encode(buf, sizeof buf, ST_MAX_STREAM_WINDOW_BYTES + 1),
	                 -EINVAL);
	assert_int_equal(st_ext_window_encode(buf, 2, 65536), -EMSGSIZE);
	const uint8_t zero[] = {0x00};
	assert_int_equal(st_ext_window_decode(zero, 1, &inc), -EBADMSG);
	const uint8_t trailing[] = {0x01, 0x00};
	assert_int_equal(st_ext_window_decode(trailing, 2, &inc), -EBADMSG);
}

static void test_error_msg(void **state)
{
	(void)state;
	uint8_t buf[ST_MAX_ERROR_REASON_BYTES + 16];
	struct st_ext_error e = {.code = ST_EXT_ERR_REFUSED,
	                         .reason = "path /debug/pprof is not allowed",
	                         .reason_len = 32};
	ssize_t n = st_ext_error_encode(buf, sizeof buf, &e);
	assert_int_equal(n, 33);
	assert_int_equal(buf[0], 0x02);
	struct st_ext_error back;
	assert_int_equal(st_ext_error_decode(buf, (size_t)n, &back), 0);
	assert_true(back.code == ST_EXT_ERR_REFUSED);
	assert_int_equal(back.reason_len, 32);
	assert_memory_equal(back.reason, e.reason, 32);
	assert_int_equal(st_ext_error_decode(buf, 0, &back), -EBADMSG);
	/* Reason at the limit, and one byte over. */
	char reason[ST_MAX_ERROR_REASON_BYTES + 1];
	memset(reason, 'r', sizeof reason);
	e.reason = reason;
	e.reason_len = ST_MAX_ERROR_REASON_BYTES;
	n = st_ext_error_encode(buf, sizeof buf, &e);
	assert_true(n > 0);
	assert_int_equal(st_ext_error_decode(buf, (size_t)n, &back), 0);
	e.reason_len++;
	assert_int_equal(st_ext_error_encode(buf, sizeof buf, &e), -EMSGSIZE);
	buf[n] = 'r';
	assert_int_equal(st_ext_error_decode(buf, (size_t)n + 1, &back), -EMSGSIZE);
	/* Codes to HTTP statuses. */
	assert_int_equal(st_ext_error_http_status(ST_EXT_ERR_REFUSED), 403);
	assert_int_equal(st_ext_error_http_status(ST_EXT_ERR_UNREACHABLE), 502);
	assert_int_equal(st_ext_error_http_status(ST_EXT_ERR_TIMEOUT), 504);
	assert_int_equal(st_ext_error_http_status(ST_EXT_ERR_NOT_FOUND), 404);
	assert_int_equal(st_ext_error_http_status(ST_EXT_ERR_LIMIT), 503);
	assert_int_equal(st_ext_error_http_status(ST_EXT_ERR_INTERNAL), 500);
	assert_int_equal(st_ext_error_http_status(ST_EXT_ERR_BAD_REQUEST), 400);
	assert_int_equal(st_ext_error_http_status(0), 502);
	assert_int_equal(st_ext_error_http_status(999), 502);
	assert_string_equal(st_ext_error_name(ST_EXT_ERR_TIMEOUT), "timeout");
	assert_string_equal(st_ext_error_name(999), "unknown");
}

static void test_tcp_connect(void **state)
{
	(void)state;
	uint8_t buf[512];
	struct st_ext_tcp_connect t = {.port = 9100, .target = "node-exporter", .target_len = 13};
	ssize_t n = st_ext_tcp_connect_encode(buf, sizeof buf, &t);
	assert_int_equal(n, 15);
	struct st_ext_tcp_connect back;
	assert_int_equal(st_ext_tcp_connect_decode(buf, (size_t)n, &back), 0);
	assert_true(back.port == 9100);
	assert_memory_equal(back.target, "node-exporter", 13);
	/* Port bounds: 1 and 65535 ok; 0 and 65536 refused both ways. */
	t.target_len = 0;
	t.port = 1;
	assert_int_equal(st_ext_tcp_connect_encode(buf, sizeof buf, &t), 1);
	t.port = 65535;
	assert_int_equal(st_ext_tcp_connect_encode(buf, sizeof buf, &t), 3);
	t.port = 0;
	assert_int_equal(st_ext_tcp_connect_encode(buf, sizeof buf, &t), -EINVAL);
	t.port = 65536;
	assert_int_equal(st_ext_tcp_connect_encode(buf, sizeof buf, &t), -EINVAL);
	const uint8_t p0[] = {0x00}, p65536[] = {0x80, 0x80, 0x04};
	assert_int_equal(st_ext_tcp_connect_decode(p0, 1, &back), -EBADMSG);
	assert_int_equal(st_ext_tcp_connect_decode(p65536, 3, &back), -EBADMSG);
	/* Target names: no host:port, no upper case, no slash. */
	const uint8_t bad[] = {0x50, '1', '0', '.', '0', ':', '8'};
	assert_int_equal(st_ext_tcp_connect_decode(bad, sizeof bad, &back), -EBADMSG);
	t.port = 80;
	t.target = "Evil/host";
	t.target_len = 9;
	assert_int_equal(st_ext_tcp_connect_encode(buf, sizeof buf, &t), -EINVAL);
}

static void test_state_table(void **state)
{
	(void)state;
	/* Every cell, against the table in PROTOCOL.md: 'O' open, 'L'/'R' half-closed local/
	 * remote, 'C' closed, 'x' -EPROTO (peer's fault), 'b' -EINVAL (our bug). */
	static const char *const want[] = {
	        /*        sc rc sd rd sh rh sr rr se re */
	        [ST_STREAM_S_IDLE] = "OObxbxbxbx",
	        [ST_STREAM_S_OPEN] = "bxOOLRCCCC",
	        [ST_STREAM_S_HALF_CLOSED_LOCAL] = "bxbLbCCCCC",
	        [ST_STREAM_S_HALF_CLOSED_REMOTE] = "bxRxCxCCCC",
	        [ST_STREAM_S_CLOSED] = "bxbCbCbCbC",
	};
	const char letters[] = "?OLRC";
	for (int s = 0; s <= ST_STREAM_S_CLOSED; s++) {
		for (int e = 0; e < ST_STREAM_E_COUNT; e++) {
			enum st_stream_state next = ST_STREAM_S_IDLE;
			int rc = st_stream_next((enum st_stream_state)s, (enum st_stream_event)e,
			                        &next);
			char got = rc == -EPROTO ? 'x' : rc == -EINVAL ? 'b' : letters[next];
			if (got != want[s][e])
				fail_msg("state %s event %d: got %c want %c",
				         st_stream_state_name((enum st_stream_state)s), e, got,
				         want[s][e]);
		}
	}
	enum st_stream_state next;
	assert_int_equal(st_stream_next((enum st_stream_state)9, ST_STREAM_E_SEND_DATA, &next),
	                 -EINVAL);
	assert_string_equal(st_stream_state_name(ST_STREAM_S_HALF_CLOSED_REMOTE),
	                    "half-closed-remote");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_offer_parse), cmocka_unit_test(test_offer_format_roundtrip),
	        cmocka_unit_test(test_negotiation), cmocka_unit_test(test_hello),
	        cmocka_unit_test(test_window_msg),  cmocka_unit_test(test_error_msg),
	        cmocka_unit_test(test_tcp_connect), cmocka_unit_test(test_state_table),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
