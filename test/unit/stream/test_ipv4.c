/* stream/ipv4.h: dotted quads as both daemons read them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <stream/ipv4.h>

static bool parse(const char *s, uint32_t *ip)
{
	return st_ipv4_parse(s, strlen(s), ip);
}

static void test_ipv4_valid(void **state)
{
	(void)state;
	uint32_t ip = 0;
	assert_true(parse("255.0.10.1", &ip));
	assert_true(ip == 0xff000a01u);
	assert_true(parse("0.0.0.0", &ip));
	assert_true(ip == 0);
	assert_true(parse("10.244.3.7", NULL));
	/* Only @len bytes are read: a port after the address is not part of it. */
	assert_true(st_ipv4_parse("1.2.3.4:10250", 7, &ip));
	assert_true(ip == 0x01020304u);
}

static void test_ipv4_refused(void **state)
{
	(void)state;
	uint32_t ip = 7;
	const char *bad[] = {"",        "1.2.3",     "1.2.3.4.", "1.2.3.4.5", "256.0.0.1",
	                     "1..2.3",  ".1.2.3",    "1.2.3.04", "010.0.0.1", "1.2.3.1000",
	                     "1.2.3.a", "1.2.3.4 ",  " 1.2.3.4", "0x1.2.3.4", "-1.2.3.4",
	                     "node-1",  "1.2.3.4/8", "::1"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		if (parse(bad[i], &ip))
			fail_msg("\"%s\" was read as an address", bad[i]);
	}
	assert_true(ip == 7); /* untouched on refusal */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_ipv4_valid),
	        cmocka_unit_test(test_ipv4_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
