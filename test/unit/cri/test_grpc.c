/* Unit tests for gRPC framing and status (cri/grpc.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include <cri/grpc.h>

static void test_cri_grpc__frame_and_unframe(void **state)
{
	(void)state;
	uint8_t body[64];
	cri_grpc_prefix(body, 20);
	const uint8_t want[5] = {0, 0, 0, 0, 0x14};
	assert_memory_equal(body, want, 5);
	memset(body + 5, 'x', 20);
	const uint8_t *msg;
	size_t n;
	assert_int_equal(cri_grpc_unframe(body, 25, &msg, &n), 0);
	assert_ptr_equal(msg, body + 5);
	assert_int_equal(n, 20);
	for (size_t cut = 1; cut < 25; cut++) /* split anywhere: wait for the rest */
		assert_int_equal(cri_grpc_unframe(body, cut, &msg, &n), -EAGAIN);
	assert_int_equal(cri_grpc_unframe(body, 0, &msg, &n), -ENODATA);
	assert_int_equal(cri_grpc_unframe(body, 26, &msg, &n), -EBADMSG); /* a second message */
	body[0] = 1;
	assert_int_equal(cri_grpc_unframe(body, 25, &msg, &n), -EBADMSG); /* compressed */
	cri_grpc_prefix(body, CRI_GRPC_MAX_MESSAGE_BYTES + 1);
	assert_int_equal(cri_grpc_unframe(body, 25, &msg, &n), -EMSGSIZE);
	cri_grpc_prefix(body, 0); /* an empty message (an all-defaults response) is fine */
	assert_int_equal(cri_grpc_unframe(body, 5, &msg, &n), 0);
	assert_int_equal(n, 0);
}

static void test_cri_grpc__status_and_message(void **state)
{
	(void)state;
	assert_int_equal(cri_grpc_parse_status("0", 1), 0);
	assert_int_equal(cri_grpc_parse_status(" 5\r", 3), 5);
	assert_int_equal(cri_grpc_parse_status("16", 2), 16);
	assert_int_equal(cri_grpc_parse_status("", 0), -EBADMSG);
	assert_int_equal(cri_grpc_parse_status("1x", 2), -EBADMSG);
	assert_int_equal(cri_grpc_parse_status("-1", 2), -EBADMSG);
	assert_int_equal(cri_grpc_parse_status("1234567890", 10), -EBADMSG);
	char out[64];
	const char *m = "container %22web%22 not found%3A %E2%9C%93 %zz %4";
	size_t n = cri_grpc_decode_message(m, strlen(m), out, sizeof out);
	assert_string_equal(out, "container \"web\" not found: \xe2\x9c\x93 %zz %4");
	assert_int_equal(n, strlen(out));
	assert_int_equal(cri_grpc_decode_message("%00", 3, out, sizeof out), 1);
	assert_string_equal(out, "?"); /* never an embedded NUL */
	assert_int_equal(cri_grpc_decode_message("abcdef", 6, out, 4), 3); /* cut, terminated */
	assert_string_equal(out, "abc");
	assert_string_equal(cri_grpc_code_name(5), "NOT_FOUND");
	assert_string_equal(cri_grpc_code_name(17), "UNKNOWN_CODE");
	assert_int_equal(cri_grpc_errno(CRI_GRPC_NOT_FOUND), -ENOENT);
	assert_int_equal(cri_grpc_errno(CRI_GRPC_DEADLINE_EXCEEDED), -ETIMEDOUT);
	assert_int_equal(cri_grpc_errno(CRI_GRPC_OK), 0);
	assert_int_equal(cri_grpc_errno(99), -EPROTO);
}

static void test_cri_grpc__timeout(void **state)
{
	(void)state;
	char t[16];
	cri_grpc_timeout(t, sizeof t, 1500);
	assert_string_equal(t, "1500m");
	cri_grpc_timeout(t, sizeof t, 120000);
	assert_string_equal(t, "120000m");
	cri_grpc_timeout(t, sizeof t, 100000000);
	assert_string_equal(t, "100000S");
	cri_grpc_timeout(t, sizeof t, UINT64_MAX);
	assert_string_equal(t, "99999999S"); /* at most 8 digits */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_cri_grpc__frame_and_unframe),
	        cmocka_unit_test(test_cri_grpc__status_and_message),
	        cmocka_unit_test(test_cri_grpc__timeout),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
