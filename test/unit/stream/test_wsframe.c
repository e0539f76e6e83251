/* Unit tests for websocket framing and masking (stream/wsframe.h). */
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

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_st_ws_header_len__length_forms),
	        cmocka_unit_test(test_st_ws_header_encode__golden),
	        cmocka_unit_test(test_st_ws_mask__rfc_example),
	        cmocka_unit_test(test_st_ws_mask__same_as_bytewise_any_alignment),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
