/* Unit tests for the tunnel message codec (stream/frame.h), with KubeEdge's golden vectors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include <stream/err.h>
#include <stream/frame.h>

#include "guard.h"
#include "testutil.h"

struct varint_vector {
	uint64_t value;
	const char *hex;
};

/* Values and their Go binary.PutUvarint encodings. */
static const struct varint_vector varint_vectors[] = {
        {0, "00"},
        {1, "01"},
        {127, "7f"},
        {128, "80 01"},
        {300, "ac 02"},
        {16383, "ff 7f"},
        {16384, "80 80 01"},
        {UINT32_MAX, "ff ff ff ff 0f"},
        {(uint64_t)1 << 63, "80 80 80 80 80 80 80 80 80 01"},
        {UINT64_MAX, "ff ff ff ff ff ff ff ff ff 01"},
};

static void test_uvarint_vectors(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof varint_vectors / sizeof varint_vectors[0]; i++) {
		uint8_t want[ST_MAX_UVARINT_BYTES], got[ST_MAX_UVARINT_BYTES];
		long wn = hex_decode(varint_vectors[i].hex, want, sizeof want);
		assert_true(wn > 0);
		size_t n = st_uvarint_encode(got, varint_vectors[i].value);
		assert_int_equal(n, (size_t)wn);
		assert_int_equal(st_uvarint_len(varint_vectors[i].value), n);
		assert_memory_equal(got, want, n);

		uint64_t v = 0;
		assert_int_equal(st_uvarint_decode(want, n, &v), (ssize_t)n);
		assert_true(v == varint_vectors[i].value);
		/* Every proper prefix is incomplete, and leaves the output alone. */
		for (size_t k = 0; k < n; k++) {
			uint64_t untouched = 0x5a5a;
			assert_int_equal(st_uvarint_decode(want, k, &untouched), 0);
			assert_true(untouched == 0x5a5a);
		}
	}
}

static void test_uvarint_overflow(void **state)
{
	(void)state;
	uint8_t buf[16];
	uint64_t v;
	/* 10th byte 02: bit 64 would be set -> Go's "overflow". */
	long n = hex_decode("ff ff ff ff ff ff ff ff ff 02", buf, sizeof buf);
	assert_int_equal(st_uvarint_decode(buf, (size_t)n, &v), -EBADMSG);
	/* 10th byte with the continuation bit: an 11-byte varint. */
	n = hex_decode("80 80 80 80 80 80 80 80 80 81 00", buf, sizeof buf);
	assert_int_equal(st_uvarint_decode(buf, (size_t)n, &v), -EBADMSG);
	/* Ten continuation bytes, nothing else: still rejected (not "incomplete" forever). */
	n = hex_decode("80 80 80 80 80 80 80 80 80 80", buf, sizeof buf);
	assert_int_equal(st_uvarint_decode(buf, (size_t)n, &v), -EBADMSG);
	/* Nine continuation bytes is a legal prefix. */
	assert_int_equal(st_uvarint_decode(buf, 9, &v), 0);
}

static void test_uvarint_non_minimal(void **state)
{
	(void)state;
	/* Go accepts non-minimal encodings; so do we (a KubeEdge peer never sends them anyway). */
	const uint8_t buf[] = {0x80, 0x00};
	uint64_t v = 1;
	assert_int_equal(st_uvarint_decode(buf, sizeof buf, &v), 2);
	assert_true(v == 0);
}

static void test_golden_ac0203(void **state)
{
	(void)state;
	/* The spec's golden vector: ConnectID 300 + DATA. */
	uint8_t out[32];
	ssize_t n = st_msg_encode(out, sizeof out, 300, ST_MSG_DATA, NULL, 0);
	assert_int_equal(n, 3);
	const uint8_t want[] = {0xac, 0x02, 0x03};
	assert_memory_equal(out, want, 3);

	struct st_msg m;
	assert_int_equal(st_msg_decode(want, sizeof want, &m), 0);
	assert_true(m.connect_id == 300);
	assert_true(m.type == ST_MSG_DATA);
	assert_int_equal(m.payload_len, 0);
	assert_null(m.payload);
}

static void test_all_types_roundtrip(void **state)
{
	(void)state;
	const uint64_t types[] = {ST_MSG_LOGS_CONNECT,
	                          ST_MSG_EXEC_CONNECT,
	                          ST_MSG_METRIC_CONNECT,
	                          ST_MSG_DATA,
	                          ST_MSG_REMOVE_CONNECT,
	                          ST_MSG_CLOSE_CONNECT,
	                          ST_MSG_ATTACH_CONNECT,
	                          ST_MSG_HELLO,
	                          ST_MSG_WINDOW,
	                          ST_MSG_HALF_CLOSE,
	                          ST_MSG_ERROR,
	                          ST_MSG_TCP_CONNECT,
	                          1000 /* unknown: decodes, caller ignores */};
	const uint64_t ids[] = {0, 1, 127, 128, 300, UINT32_MAX, UINT64_MAX};
	const uint8_t payload[] = "hello\0world\xff";
	for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
			uint8_t buf[64];
			ssize_t n = st_msg_encode(buf, sizeof buf, ids[i], types[t], payload,
			                          sizeof payload);
			assert_true(n > 0);
			struct st_msg m;
			assert_int_equal(st_msg_decode(buf, (size_t)n, &m), 0);
			assert_true(m.connect_id == ids[i]);
			assert_true(m.type == types[t]);
			assert_int_equal(m.payload_len, sizeof payload);
			assert_memory_equal(m.payload, payload, sizeof payload);
			/* Header decode agrees, and every proper prefix of the header is incomplete. */
			uint64_t id2, t2;
			ssize_t hl = st_msg_header_decode(buf, (size_t)n, &id2, &t2);
			assert_int_equal(hl, n - (ssize_t)sizeof payload);
			for (ssize_t k = 0; k < hl; k++) {
				assert_int_equal(st_msg_header_decode(buf, (size_t)k, &id2, &t2),
				                 0);
				assert_int_equal(st_msg_decode(buf, (size_t)k, &m), -EBADMSG);
			}
		}
	}
}

static void test_byte_by_byte_header(void **state)
{
	(void)state;
	/* Feeding the header one byte more at a time: 0 until complete, then the full length. */
	uint8_t buf[32];
	ssize_t n = st_msg_header_encode(buf, sizeof buf, UINT64_MAX, ST_MSG_TCP_CONNECT);
	assert_int_equal(n, 11);
	uint64_t id, type;
	for (size_t k = 1; k <= (size_t)n; k++) {
		ssize_t r = st_msg_header_decode(buf, k, &id, &type);
		assert_int_equal(r, k == (size_t)n ? n : 0);
	}
	assert_true(id == UINT64_MAX);
	assert_true(type == ST_MSG_TCP_CONNECT);
}

static void test_message_size_limit(void **state)
{
	(void)state;
	size_t cap = ST_MAX_MESSAGE_BYTES + 16;
	uint8_t *buf = calloc(1, cap);
	uint8_t *payload = calloc(1, cap);
	assert_non_null(buf);
	assert_non_null(payload);
	size_t maxp = st_msg_max_payload(300, ST_MSG_DATA);
	assert_int_equal(maxp, ST_MAX_MESSAGE_BYTES - 3);
	/* limit - 1, limit: accepted; limit + 1: refused, nothing truncated. */
	assert_int_equal(st_msg_encode(buf, cap, 300, ST_MSG_DATA, payload, maxp - 1),
	                 (ssize_t)ST_MAX_MESSAGE_BYTES - 1);
	assert_int_equal(st_msg_encode(buf, cap, 300, ST_MSG_DATA, payload, maxp),
	                 (ssize_t)ST_MAX_MESSAGE_BYTES);
	assert_int_equal(st_msg_encode(buf, cap, 300, ST_MSG_DATA, payload, maxp + 1), -EMSGSIZE);

	struct st_msg m;
	assert_int_equal(st_msg_decode(buf, ST_MAX_MESSAGE_BYTES - 1, &m), 0);
	assert_int_equal(st_msg_decode(buf, ST_MAX_MESSAGE_BYTES, &m), 0);
	assert_int_equal(m.payload_len, maxp);
	assert_int_equal(st_msg_decode(buf, ST_MAX_MESSAGE_BYTES + 1, &m), -EMSGSIZE);
	free(buf);
	free(payload);
}

static void test_encode_capacity(void **state)
{
	(void)state;
	uint8_t buf[8];
	/* Header needs 3 bytes: cap 2 fails, 3 fits. */
	assert_int_equal(st_msg_header_encode(buf, 2, 300, ST_MSG_DATA), -EMSGSIZE);
	assert_int_equal(st_msg_header_encode(buf, 3, 300, ST_MSG_DATA), 3);
	/* Payload of 5 with cap 7 (3 + 5 = 8) fails, cap 8 fits. */
	const uint8_t p[5] = {1, 2, 3, 4, 5};
	assert_int_equal(st_msg_encode(buf, 7, 300, ST_MSG_DATA, p, 5), -EMSGSIZE);
	assert_int_equal(st_msg_encode(buf, 8, 300, ST_MSG_DATA, p, 5), 8);
}

static void test_guard_page(void **state)
{
	(void)state;
	/* The input ends exactly at an unmapped page: any over-read faults. */
	const uint8_t incomplete[] = {0xff, 0xff, 0xff};
	struct guard_buf g;
	assert_int_equal(guard_new(&g, incomplete, sizeof incomplete), 0);
	uint64_t id, type;
	assert_int_equal(st_msg_header_decode(g.data, g.len, &id, &type), 0);
	struct st_msg m;
	assert_int_equal(st_msg_decode(g.data, g.len, &m), -EBADMSG);
	guard_free(&g);

	const uint8_t data[] = {0xac, 0x02, 0x03, 'x'};
	assert_int_equal(guard_new(&g, data, sizeof data), 0);
	assert_int_equal(st_msg_decode(g.data, g.len, &m), 0);
	assert_int_equal(m.payload_len, 1);
	assert_int_equal(m.payload[0], 'x');
	guard_free(&g);
}

static void test_type_names(void **state)
{
	(void)state;
	assert_string_equal(st_msg_type_name(ST_MSG_DATA), "DATA");
	assert_string_equal(st_msg_type_name(ST_MSG_ATTACH_CONNECT), "ATTACH_CONNECT");
	assert_string_equal(st_msg_type_name(ST_MSG_HELLO), "HELLO");
	assert_string_equal(st_msg_type_name(ST_MSG_TCP_CONNECT), "TCP_CONNECT");
	assert_string_equal(st_msg_type_name(ST_MSG_OPENED), "OPENED");
	assert_false(st_msg_type_is_connect(ST_MSG_OPENED));
	assert_string_equal(st_msg_type_name(7), "UNKNOWN");
	assert_string_equal(st_msg_type_name(UINT64_MAX), "UNKNOWN");
	assert_true(st_msg_type_is_base(ST_MSG_ATTACH_CONNECT));
	assert_false(st_msg_type_is_base(ST_MSG_HELLO));
	assert_true(st_msg_type_is_connect(ST_MSG_EXEC_CONNECT));
	assert_true(st_msg_type_is_connect(ST_MSG_TCP_CONNECT));
	assert_false(st_msg_type_is_connect(ST_MSG_DATA));
	assert_false(st_msg_type_is_connect(ST_MSG_REMOVE_CONNECT));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_uvarint_vectors),
	        cmocka_unit_test(test_uvarint_overflow),
	        cmocka_unit_test(test_uvarint_non_minimal),
	        cmocka_unit_test(test_golden_ac0203),
	        cmocka_unit_test(test_all_types_roundtrip),
	        cmocka_unit_test(test_byte_by_byte_header),
	        cmocka_unit_test(test_message_size_limit),
	        cmocka_unit_test(test_encode_capacity),
	        cmocka_unit_test(test_guard_page),
	        cmocka_unit_test(test_type_names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
