/* Unit tests for the pod -> node cache (cloudstream/src/podcache.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "failmalloc.h"
#include "podcache.h"

static int get(struct cs_podcache *c, const char *ns, const char *pod, uint64_t now, char *node_out)
{
	const char *node = NULL;
	size_t len = 0;
	int rc = cs_podcache_get(c, ns, strlen(ns), pod, strlen(pod), now, &node, &len);
	if (rc == 1) {
		memcpy(node_out, node, len);
		node_out[len] = '\0';
	}
	return rc;
}

static int put(struct cs_podcache *c, const char *ns, const char *pod, const char *node,
               uint64_t exp)
{
	return cs_podcache_put(c, ns, strlen(ns), pod, strlen(pod), node, node ? strlen(node) : 0,
	                       exp);
}

static void test_cs_podcache__hit_absent_expiry(void **state)
{
	(void)state;
	struct cs_podcache *c;
	assert_int_equal(cs_podcache_new(&c, 16), 0);
	char node[300];
	assert_int_equal(get(c, "default", "nginx", 0, node), 0);
	assert_int_equal(put(c, "default", "nginx", "edge-1", 1000), 0);
	assert_int_equal(get(c, "default", "nginx", 999, node), 1);
	assert_string_equal(node, "edge-1");
	assert_int_equal(get(c, "default", "nginx", 1000, node), 0); /* expired */
	assert_int_equal(get(c, "other", "nginx", 10, node), 0);     /* namespace matters */
	assert_int_equal(put(c, "default", "gone", NULL, 500), 0);
	assert_int_equal(get(c, "default", "gone", 10, node), -ENOENT);
	assert_int_equal(put(c, "default", "nginx", "edge-2", 2000), 0); /* update in place */
	assert_int_equal(get(c, "default", "nginx", 1500, node), 1);
	assert_string_equal(node, "edge-2");
	cs_podcache_free(c);
}

static void test_cs_podcache__bounded(void **state)
{
	(void)state;
	struct cs_podcache *c;
	assert_int_equal(cs_podcache_new(&c, 16), 0);
	char pod[32], node[300];
	/* Far more pods than slots: every put succeeds, the newest are found, memory is fixed. */
	for (int i = 0; i < 10000; i++) {
		snprintf(pod, sizeof pod, "pod-%d", i);
		assert_int_equal(put(c, "ns", pod, "edge-1", 1000000 + (uint64_t)i), 0);
	}
	assert_int_equal(get(c, "ns", "pod-9999", 0, node), 1);
	int found = 0;
	for (int i = 0; i < 10000; i++) {
		snprintf(pod, sizeof pod, "pod-%d", i);
		found += get(c, "ns", pod, 0, node) == 1;
	}
	assert_true(found <= 16);
	cs_podcache_free(c);
}

static void test_cs_podcache__limits(void **state)
{
	(void)state;
	struct cs_podcache *c;
	assert_int_equal(cs_podcache_new(&c, 0), -EINVAL);
	assert_int_equal(cs_podcache_new(&c, 8), 0);
	char longname[300];
	memset(longname, 'a', sizeof longname - 1);
	longname[sizeof longname - 1] = '\0';
	assert_int_equal(put(c, "ns", longname, "edge-1", 10), -EINVAL);
	assert_int_equal(put(c, "", "pod", "edge-1", 10), -EINVAL);
	assert_int_equal(put(c, "ns", "pod", longname, 10), -EINVAL);
	assert_int_equal(put(c, "ns", "pod", "edge-1", 0), -EINVAL);
	char node[300];
	assert_int_equal(get(c, "ns", longname, 0, node), 0);
	cs_podcache_free(c);
	cs_podcache_free(NULL);
}

static void test_cs_podcache__alloc_failure(void **state)
{
	(void)state;
	for (int n = 0; n < 2; n++) {
		struct cs_podcache *c = NULL;
		failmalloc_fail_after(n);
		int rc = cs_podcache_new(&c, 64);
		failmalloc_off();
		assert_int_equal(rc, -ENOMEM);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_cs_podcache__hit_absent_expiry),
	        cmocka_unit_test(test_cs_podcache__bounded),
	        cmocka_unit_test(test_cs_podcache__limits),
	        cmocka_unit_test(test_cs_podcache__alloc_failure),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
