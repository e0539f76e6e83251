/* Unit tests for websocket framing and masking (stream/wsframe.h). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <stream/wsframe.h>

/* Length forms at their edges (RFC 6455 §5.2): 7-bit up to 125, 16-bit up to 65535, then 64. */
static void test_st_ws_header_len__length_forms(void **state)
{
	(void)state;
	assert_int_equal(st_ws_header_len(0, false), 2);
	assert_int_equal(st_ws_header_len(125, false), 2);
	assert_int_equal(st_ws_header_len(126, false), 4);
	assert_int_equal(st_ws_header_len(65535, false), 4);
	assert_int_equal(st_ws_header_len(65536, false), 10);
	assert_int_equal(st_ws_header_len(125, true), 6);
	assert_int_equal(st_ws_header_len(126, true), 8);
	assert_int_equal(st_ws_header_len(65536, true), ST_WS_MAX_HEADER_BYTES);
}

/* Byte-exact headers, the examples of RFC 6455 §5.7 among them. */
static void test_st_ws_header_encode__golden(void **state)
{
	(void)state;
	uint8_t h[ST_WS_MAX_HEADER_BYTES];
	/* "Hello", unmasked text: 0x81 0x05 */
	assert_int_equal(st_ws_header_encode(h, ST_WS_TEXT, 5, NULL), 2);
	assert_memory_equal(h, "\x81\x05", 2);
	/* "Hello", masked with 37 fa 21 3d: 0x81 0x85 0x37 0xfa 0x21 0x3d */
	static const uint8_t key[4] = {0x37, 0xfa, 0x21, 0x3d};
	assert_int_equal(st_ws_header_encode(h, ST_WS_TEXT, 5, key), 6);
	assert_memory_equal(h, "\x81\x85\x37\xfa\x21\x3d", 6);
	/* 256 bytes binary: 0x82 0x7E 0x01 0x00 */
	assert_int_equal(st_ws_header_encode(h, ST_WS_BINARY, 256, NULL), 4);
	assert_memory_equal(h, "\x82\x7e\x01\x00", 4);
	/* 64 KiB binary: 0x82 0x7F 0x00 0x00 0x00 0x00 0x00 0x01 0x00 0x00 */
	assert_int_equal(st_ws_header_encode(h, ST_WS_BINARY, 65536, NULL), 10);
	assert_memory_equal(h, "\x82\x7f\x00\x00\x00\x00\x00\x01\x00\x00", 10);
	/* 16,402 bytes masked (a full DATA message): 0x82 0xFE 0x40 0x12 + key */
	assert_int_equal(st_ws_header_encode(h, ST_WS_BINARY, 16402, key), 8);
	assert_memory_equal(h, "\x82\xfe\x40\x12\x37\xfa\x21\x3d", 8);
}

/* The masked "Hello" of RFC 6455 §5.7 byte for byte, and the inverse. */
static void test_st_ws_mask__rfc_example(void **state)
{
	(void)state;
	static const uint8_t key[4] = {0x37, 0xfa, 0x21, 0x3d};
	uint8_t p[5] = {'H', 'e', 'l', 'l', 'o'};
	st_ws_mask(p, sizeof p, key);
	assert_memory_equal(p, "\x7f\x9f\x4d\x51\x58", 5);
	st_ws_mask(p, sizeof p, key);
	assert_memory_equal(p, "Hello", 5);
}

/* The eight-byte steps give what the byte-at-a-time definition gives, for every length around
 * the step and every alignment of the buffer. */
static void test_st_ws_mask__same_as_bytewise_any_alignment(void **state)
{
	(void)state;
	static const uint8_t key[4] = {0xa1, 0x02, 0xf3, 0x7c};
	uint8_t src[80], got[96], want[80];
	for (size_t i = 0; i < sizeof src; i++)
		src[i] = (uint8_t)(i * 37 + 11);
	for (size_t align = 0; align < 8; align++) {
		for (size_t len = 0; len <= 72; len++) {
			memcpy(got + align, src, len);
			got[align + len] = 0xee; /* a guard byte that must stay */
			st_ws_mask(got + align, len, key);
			for (size_t i = 0; i < len; i++)
				want[i] = src[i] ^ key[i & 3];
			assert_memory_equal(got + align, want, len);
			assert_int_equal(got[align + len], 0xee);
		}
	}
}

/* Lengths around the 64-byte vector steps and the CPU-specific loops (256 bytes and up), every
 * alignment: what the byte-at-a-time definition gives, nothing past the end touched. */
static void test_st_ws_mask__long_runs_same_as_bytewise(void **state)
{
	(void)state;
	static const uint8_t key[4] = {0x5c, 0x00, 0xe7, 0x19};
	enum { MAX = 1100 };
	static uint8_t src[MAX], got[MAX + 80], want[MAX];
	for (size_t i = 0; i < sizeof src; i++)
		src[i] = (uint8_t)(i * 53 + 7);
	static const size_t lens[] = {63,  64,  65,  127, 128, 191, 255,  256,  257,  319,
	                              320, 321, 383, 511, 512, 513, 1023, 1024, 1031, MAX};
	for (size_t align = 0; align < 65; align += 8) {
		for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
			size_t len = lens[l];
			memcpy(got + align, src, len);
			got[align + len] = 0xee;
			st_ws_mask(got + align, len, key);
			for (size_t i = 0; i < len; i++)
				want[i] = src[i] ^ key[i & 3];
			assert_memory_equal(got + align, want, len);
			assert_int_equal(got[align + len], 0xee);
		}
	}
}

/* The copy and the mask in one pass: the same bytes as a memcpy then st_ws_mask of the whole
 * payload, for a piece starting at any phase of the key, any length and alignment; the source
 * is left as it was and nothing past the end is written. */
static void test_st_ws_mask_copy__same_as_copy_then_mask(void **state)
{
	(void)state;
	static const uint8_t key[4] = {0xa1, 0x02, 0xf3, 0x7c};
	enum { MAX = 700 };
	static uint8_t src[MAX + 16], keep[MAX + 16], got[MAX + 80], want[MAX + 8];
	for (size_t i = 0; i < sizeof src; i++)
		src[i] = (uint8_t)(i * 29 + 3);
	memcpy(keep, src, sizeof src);
	for (size_t phase = 0; phase < 9; phase++) {
		for (size_t align = 0; align < 9; align += 3) {
			for (size_t len = 0; len <= MAX; len += len < 80 ? 1 : 61) {
				const uint8_t *in = src + align;
				got[align + len] = 0xee;
				st_ws_mask_copy(got + align, in, len, key, phase);
				/* the reference: the piece at offset @phase of a masked payload */
				memset(want, 0, phase);
				memcpy(want + phase % 4, in, len);
				st_ws_mask(want, phase % 4 + len, key);
				assert_memory_equal(got + align, want + phase % 4, len);
				assert_int_equal(got[align + len], 0xee);
			}
		}
	}
	assert_memory_equal(src, keep, sizeof src);
	static const uint8_t zero[4] = {0, 0, 0, 0};
	st_ws_mask_copy(got, src, 100, zero, 1);
	assert_memory_equal(got, src, 100);
}

/* The key 0 (a peer link's frames, stream/tunnelwrite.h zero_keys) leaves the bytes as they are,
 * and a key with one non-zero byte is still applied (the shortcut looks at all four). */
static void test_st_ws_mask__zero_key_is_identity(void **state)
{
	(void)state;
	static const uint8_t zero[4] = {0, 0, 0, 0};
	uint8_t p[40];
	for (size_t i = 0; i < sizeof p; i++)
		p[i] = (uint8_t)(i * 13 + 5);
	uint8_t want[40];
	memcpy(want, p, sizeof p);
	st_ws_mask(p, sizeof p, zero);
	assert_memory_equal(p, want, sizeof p);
	static const uint8_t last[4] = {0, 0, 0, 0x80};
	st_ws_mask(p, sizeof p, last);
	for (size_t i = 0; i < sizeof p; i++)
		assert_int_equal(p[i], want[i] ^ (i % 4 == 3 ? 0x80 : 0));
}

/* Encode -> decode round trips across the length forms, masked and not; every proper prefix
 * of a header is "incomplete" (0). */
static void test_st_ws_header_decode__round_trip_and_prefixes(void **state)
{
	(void)state;
	static const uint8_t key[4] = {0x37, 0xfa, 0x21, 0x3d};
	static const uint64_t lens[] = {0, 1, 125, 126, 65535, 65536, 1u << 20};
	for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
		for (int m = 0; m < 2; m++) {
			uint8_t b[ST_WS_MAX_HEADER_BYTES];
			size_t hl = st_ws_header_encode(b, ST_WS_BINARY, lens[i], m ? key : NULL);
			assert_int_equal(st_ws_header_need(b), hl);
			struct st_ws_header h;
			for (size_t k = 0; k < hl; k++)
				assert_int_equal(st_ws_header_decode(b, k, &h), 0);
			assert_int_equal(st_ws_header_decode(b, hl, &h), (ssize_t)hl);
			assert_int_equal(h.header_bytes, hl);
			assert_int_equal(h.len, lens[i]);
			assert_int_equal(h.opcode, ST_WS_BINARY);
			assert_true(h.fin);
			assert_int_equal(h.masked, m);
			if (m)
				assert_memory_equal(h.key, key, 4);
		}
}

/* The RFC 6455 §5.7 examples: a masked "Hello", a PING, a fragmented text's first frame. */
static void test_st_ws_header_decode__rfc_examples(void **state)
{
	(void)state;
	struct st_ws_header h;
	assert_int_equal(st_ws_header_decode((const uint8_t *)"\x81\x85\x37\xfa\x21\x3d", 6, &h),
	                 6);
	assert_int_equal(h.opcode, ST_WS_TEXT);
	assert_int_equal(h.len, 5);
	assert_true(h.masked);
	assert_int_equal(st_ws_header_decode((const uint8_t *)"\x89\x05", 2, &h), 2);
	assert_int_equal(h.opcode, ST_WS_PING);
	assert_int_equal(h.len, 5);
	assert_int_equal(st_ws_header_decode((const uint8_t *)"\x01\x03", 2, &h), 2);
	assert_false(h.fin);
	assert_int_equal(h.opcode, ST_WS_TEXT);
	/* an unknown opcode decodes; the caller refuses it */
	assert_int_equal(st_ws_header_decode((const uint8_t *)"\x83\x00", 2, &h), 2);
	assert_int_equal(h.opcode, 3);
}

/* Refused: reserved bits, a fragmented or long control frame, a 64-bit length's top bit. The
 * limits: a control frame of 125 bytes passes, 126 does not. */
static void test_st_ws_header_decode__refused(void **state)
{
	(void)state;
	struct st_ws_header h;
	assert_int_equal(st_ws_header_decode((const uint8_t *)"\xc2\x00", 2, &h), -EBADMSG);
	assert_int_equal(st_ws_header_decode((const uint8_t *)"\xa2\x00", 2, &h), -EBADMSG);
	assert_int_equal(st_ws_header_decode((const uint8_t *)"\x92\x00", 2, &h), -EBADMSG);
	assert_int_equal(st_ws_header_decode((const uint8_t *)"\x09\x00", 2, &h), -EBADMSG);
	assert_int_equal(st_ws_header_decode((const uint8_t *)"\x89\x7d", 2, &h), 2);
	assert_int_equal(st_ws_header_decode((const uint8_t *)"\x89\x7e\x00\x7e", 4, &h), -EBADMSG);
	assert_int_equal(
	        st_ws_header_decode((const uint8_t *)"\x82\x7f\x80\x00\x00\x00\x00\x00\x00\x00", 10,
	                            &h),
	        -EBADMSG);
	assert_int_equal(
	        st_ws_header_decode((const uint8_t *)"\x82\x7f\x7f\xff\xff\xff\xff\xff\xff\xff", 10,
	                            &h),
	        10);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_st_ws_header_len__length_forms),
	        cmocka_unit_test(test_st_ws_header_encode__golden),
	        cmocka_unit_test(test_st_ws_mask__rfc_example),
	        cmocka_unit_test(test_st_ws_mask__same_as_bytewise_any_alignment),
	        cmocka_unit_test(test_st_ws_mask__long_runs_same_as_bytewise),
	        cmocka_unit_test(test_st_ws_mask_copy__same_as_copy_then_mask),
	        cmocka_unit_test(test_st_ws_mask__zero_key_is_identity),
	        cmocka_unit_test(test_st_ws_header_decode__round_trip_and_prefixes),
	        cmocka_unit_test(test_st_ws_header_decode__rfc_examples),
	        cmocka_unit_test(test_st_ws_header_decode__refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
