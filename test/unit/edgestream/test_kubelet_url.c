/* Unit tests for --kubelet-url (edgestream/src/kubelet_url.h): https anywhere, plain http to a
 * loopback IP only (KubeEdge edged's read-only port). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "kubelet_url.h"

static void test_es_kubelet_url_parse__https(void **state)
{
	(void)state;
	struct es_kubelet_url u;
	const char *why;
	assert_int_equal(es_kubelet_url_parse("https://127.0.0.1:10250", &u, &why), 0);
	assert_false(u.plain);
	assert_string_equal(u.host, "127.0.0.1");
	assert_int_equal(u.port, 10250);
	assert_int_equal(es_kubelet_url_parse("https://kubelet.local", &u, &why), 0);
	assert_string_equal(u.host, "kubelet.local");
	assert_int_equal(u.port, 10250);
	assert_int_equal(es_kubelet_url_parse("https://[fd00::5]:11250/", &u, &why), 0);
	assert_string_equal(u.host, "fd00::5");
	assert_int_equal(u.port, 11250);
}

static void test_es_kubelet_url_parse__plain_loopback_only(void **state)
{
	(void)state;
	struct es_kubelet_url u;
	const char *why = NULL;
	assert_int_equal(es_kubelet_url_parse("http://127.0.0.1:10350", &u, &why), 0);
	assert_true(u.plain);
	assert_string_equal(u.host, "127.0.0.1");
	assert_int_equal(u.port, 10350);
	assert_int_equal(es_kubelet_url_parse("http://127.0.0.1", &u, &why), 0);
	assert_int_equal(u.port, 10350); /* edged's read-only port */
	assert_int_equal(es_kubelet_url_parse("http://127.3.4.5:8080/", &u, &why), 0);
	assert_int_equal(es_kubelet_url_parse("http://[::1]:10350", &u, &why), 0);
	assert_string_equal(u.host, "::1");
	assert_int_equal(es_kubelet_url_parse("http://[::ffff:127.0.0.1]:10350", &u, &why), 0);
	static const char *const refused[] = {
	        "http://10.0.0.5:10350",          "http://localhost:10350",
	        "http://[fd00::1]:10350",         "http://128.0.0.1:10350",
	        "http://0.0.0.0:10350",           "http://[::]:10350",
	        "http://[::ffff:10.0.0.1]:10350",
	};
	for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
		why = NULL;
		assert_int_equal(es_kubelet_url_parse(refused[i], &u, &why), -EINVAL);
		assert_non_null(why);
		assert_non_null(strstr(why, "loopback"));
	}
}

static void test_es_kubelet_url_parse__malformed(void **state)
{
	(void)state;
	struct es_kubelet_url u;
	const char *why;
	static const char *const bad[] = {
	        "",         "ftp://127.0.0.1",    "127.0.0.1:10250", "http://",
	        "https://", "http://127.0.0.1:0", "https://h:99999", "http://[::1:10350"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		why = NULL;
		assert_int_equal(es_kubelet_url_parse(bad[i], &u, &why), -EINVAL);
		assert_non_null(why);
	}
	assert_int_equal(es_kubelet_url_parse(NULL, &u, &why), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_es_kubelet_url_parse__https),
	        cmocka_unit_test(test_es_kubelet_url_parse__plain_loopback_only),
	        cmocka_unit_test(test_es_kubelet_url_parse__malformed),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
