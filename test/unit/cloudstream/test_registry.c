/* Unit tests for the session registry (cloudstream/src/registry.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "failmalloc.h"
#include "registry.h"

static int put(struct cs_registry *r, const char *node, const char *const *ips, size_t n, void *v,
               void **old)
{
	return cs_registry_put(r, node, strlen(node), ips, n, v, old);
}

static void *by_ip(struct cs_registry *r, const char *ip, const char **node)
{
	return cs_registry_get_by_ip(r, ip, strlen(ip), node);
}

static void test_cs_registry_put__get_replace_remove(void **state)
{
	(void)state;
	struct cs_registry *r;
	assert_int_equal(cs_registry_new(&r, 10, 42), 0);
	int a, b, c;
	void *old = &c;
	const char *ips_a[] = {"10.0.0.1", "fd00::1"};
	assert_int_equal(put(r, "edge-1", ips_a, 2, &a, &old), 0);
	assert_null(old);
	assert_ptr_equal(cs_registry_get(r, "edge-1", 6), &a);
	assert_null(cs_registry_get(r, "edge-2", 6));
	const char *node = NULL;
	assert_ptr_equal(by_ip(r, "fd00::1", &node), &a);
	assert_string_equal(node, "edge-1");
	/* A reconnect replaces the value and the IPs. */
	const char *ips_b[] = {"10.0.0.2"};
	assert_int_equal(put(r, "edge-1", ips_b, 1, &b, &old), 0);
	assert_ptr_equal(old, &a);
	assert_null(by_ip(r, "10.0.0.1", NULL));
	assert_ptr_equal(by_ip(r, "10.0.0.2", NULL), &b);
	/* Compare-and-delete: the old session's close removes nothing. */
	assert_false(cs_registry_remove_if(r, "edge-1", 6, &a));
	assert_ptr_equal(cs_registry_get(r, "edge-1", 6), &b);
	assert_true(cs_registry_remove_if(r, "edge-1", 6, &b));
	assert_null(cs_registry_get(r, "edge-1", 6));
	assert_null(by_ip(r, "10.0.0.2", NULL));
	assert_int_equal(cs_registry_count(r), 0);
	cs_registry_free(r);
}

static void test_cs_registry_put__ip_moves(void **state)
{
	(void)state;
	struct cs_registry *r;
	assert_int_equal(cs_registry_new(&r, 10, 1), 0);
	int a, b;
	void *old;
	const char *ip[] = {"10.0.0.9"};
	assert_int_equal(put(r, "edge-a", ip, 1, &a, &old), 0);
	assert_int_equal(put(r, "edge-b", ip, 1, &b, &old), 0); /* newest verified wins */
	const char *node;
	assert_ptr_equal(by_ip(r, "10.0.0.9", &node), &b);
	assert_string_equal(node, "edge-b");
	/* edge-a leaving does not take edge-b's IP with it. */
	assert_true(cs_registry_remove_if(r, "edge-a", 6, &a));
	assert_ptr_equal(by_ip(r, "10.0.0.9", NULL), &b);
	const char *dup[] = {"10.0.0.7", "10.0.0.7"};
	assert_int_equal(put(r, "edge-c", dup, 2, &a, &old), 0);
	assert_true(cs_registry_remove_if(r, "edge-c", 6, &a));
	assert_null(by_ip(r, "10.0.0.7", NULL));
	cs_registry_free(r);
}

static void test_cs_registry_put__limits(void **state)
{
	(void)state;
	struct cs_registry *r;
	assert_int_equal(cs_registry_new(&r, 0, 1), -EINVAL);
	assert_int_equal(cs_registry_new(&r, 2, 1), 0);
	int v;
	void *old;
	assert_int_equal(put(r, "a", NULL, 0, &v, &old), 0);
	assert_int_equal(put(r, "b", NULL, 0, &v, &old), 0);
	assert_int_equal(put(r, "c", NULL, 0, &v, &old), -ENOSPC);
	assert_int_equal(put(r, "a", NULL, 0, &v, &old), 0); /* replacing is always possible */
	assert_int_equal(put(r, "", NULL, 0, &v, &old), -EINVAL);
	assert_int_equal(put(r, "x", NULL, 0, NULL, &old), -EINVAL);
	char name[CS_NODE_NAME_MAX_BYTES + 2];
	memset(name, 'a', sizeof name - 1);
	name[sizeof name - 1] = '\0';
	assert_int_equal(put(r, name, NULL, 0, &v, &old), -EINVAL);
	const char *nine[9] = {"1", "2", "3", "4", "5", "6", "7", "8", "9"};
	assert_int_equal(put(r, "a", nine, 9, &v, &old), -EINVAL);
	const char *longip[] = {"0000:0000:0000:0000:0000:ffff:255.255.255.255x"};
	assert_int_equal(put(r, "a", longip, 1, &v, &old), -EINVAL);
	cs_registry_free(r);
	cs_registry_free(NULL);
}

static void test_cs_registry_put__many_nodes(void **state)
{
	(void)state;
	enum { N = 20000 };
	struct cs_registry *r;
	assert_int_equal(cs_registry_new(&r, N, 7), 0);
	static int vals[N];
	char name[32], ip[32];
	void *old;
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof name, "edge-%d", i);
		snprintf(ip, sizeof ip, "10.%d.%d.%d", i >> 16, (i >> 8) & 255, i & 255);
		const char *ips[] = {ip};
		assert_int_equal(put(r, name, ips, 1, &vals[i], &old), 0);
	}
	assert_int_equal(cs_registry_count(r), N);
	for (int i = 0; i < N; i += 3) { /* remove a third: backward shifts keep the rest found */
		snprintf(name, sizeof name, "edge-%d", i);
		assert_true(cs_registry_remove_if(r, name, strlen(name), &vals[i]));
	}
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof name, "edge-%d", i);
		snprintf(ip, sizeof ip, "10.%d.%d.%d", i >> 16, (i >> 8) & 255, i & 255);
		void *want = i % 3 ? &vals[i] : NULL;
		assert_ptr_equal(cs_registry_get(r, name, strlen(name)), want);
		assert_ptr_equal(by_ip(r, ip, NULL), want);
	}
	cs_registry_free(r);
}

static void test_cs_registry_put__alloc_failure(void **state)
{
	(void)state;
	for (int n = 0; n < 40; n++) {
		struct cs_registry *r;
		assert_int_equal(cs_registry_new(&r, 1000, 3), 0);
		int v[64];
		void *old;
		char name[16];
		const char *ips[] = {"10.0.0.1", "10.0.0.2"};
		failmalloc_fail_after(n);
		int rc = 0, i;
		for (i = 0; i < 64 && rc == 0; i++) {
			snprintf(name, sizeof name, "n%d", i);
			rc = put(r, name, ips, 2, &v[i], &old);
		}
		failmalloc_off();
		/* Whatever failed left the registry consistent: every node put is there. */
		int present = rc == 0 ? i : i - 1;
		assert_int_equal(cs_registry_count(r), (size_t)present);
		if (rc < 0)
			assert_int_equal(rc, -ENOMEM);
		cs_registry_free(r);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_cs_registry_put__get_replace_remove),
	        cmocka_unit_test(test_cs_registry_put__ip_moves),
	        cmocka_unit_test(test_cs_registry_put__limits),
	        cmocka_unit_test(test_cs_registry_put__many_nodes),
	        cmocka_unit_test(test_cs_registry_put__alloc_failure),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
