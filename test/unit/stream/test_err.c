/* Unit tests for stream/err.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include <stream/err.h>

static void test_names(void **state)
{
	(void)state;
	assert_string_equal(st_strerror(0), "ok");
	assert_string_equal(st_strerror(-EBADMSG), "malformed message");
	assert_string_equal(st_strerror(-EMSGSIZE), "over limit");
	assert_string_equal(st_strerror(-12345), "error");
}

static void test_fatal_split(void **state)
{
	(void)state;
	assert_true(st_err_is_fatal(-EBADMSG));
	assert_true(st_err_is_fatal(-EMSGSIZE));
	assert_true(st_err_is_fatal(-EPROTO));
	assert_true(st_err_is_fatal(-ENOMEM));
	assert_false(st_err_is_fatal(-EAGAIN));
	assert_false(st_err_is_fatal(-EACCES));
	assert_false(st_err_is_fatal(-ENOENT));
	assert_false(st_err_is_fatal(-ECONNRESET));
	assert_false(st_err_is_fatal(0));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_names),
	        cmocka_unit_test(test_fatal_split),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
