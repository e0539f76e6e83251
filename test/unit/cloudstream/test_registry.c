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

static void test_cs_registry_put__verified_ip_shared(void **state)
{
	(void)state;
	struct cs_registry *r;
	assert_int_equal(cs_registry_new(&r, 10, 1), 0);
	int a, b;
	void *old;
	const char *ip[] = {"10.0.0.9"};
	assert_int_equal(put(r, "edge-a", ip, 1, &a, &old), 0);
	assert_int_equal(put(r, "edge-b", ip, 1, &b, &old), 0); /* both verified: shared */
	const char *node = NULL;
	assert_null(by_ip(r, "10.0.0.9", &node)); /* no one node is meant */
	const char *names[4];
	assert_int_equal(cs_registry_ip_owners(r, "10.0.0.9", 8, names, 4), 2);
	assert_string_equal(names[0], "edge-a");
	assert_string_equal(names[1], "edge-b");
	assert_int_equal(cs_registry_ip_owners(r, "10.0.0.9", 8, names, 1), 2);
	assert_int_equal(cs_registry_ip_owners(r, "10.0.0.8", 8, names, 4), 0);
	/* edge-a leaving does not take edge-b's IP with it. */
	assert_true(cs_registry_remove_if(r, "edge-a", 6, &a));
	assert_ptr_equal(by_ip(r, "10.0.0.9", &node), &b);
	assert_string_equal(node, "edge-b");
	const char *dup[] = {"10.0.0.7", "10.0.0.7"};
	assert_int_equal(put(r, "edge-c", dup, 2, &a, &old), 0);
	assert_true(cs_registry_remove_if(r, "edge-c", 6, &a));
	assert_null(by_ip(r, "10.0.0.7", NULL));
	cs_registry_free(r);
}

static void test_cs_ip_decide__table(void **state)
{
	(void)state;
	assert_int_equal(cs_ip_decide(CS_IP_CLAIM_NONE, CS_IP_CLAIM_HEADER), CS_IP_TAKE);
	assert_int_equal(cs_ip_decide(CS_IP_CLAIM_NONE, CS_IP_CLAIM_VERIFIED), CS_IP_TAKE);
	assert_int_equal(cs_ip_decide(CS_IP_CLAIM_HEADER, CS_IP_CLAIM_HEADER), CS_IP_TAKE);
	assert_int_equal(cs_ip_decide(CS_IP_CLAIM_HEADER, CS_IP_CLAIM_VERIFIED), CS_IP_TAKE);
	assert_int_equal(cs_ip_decide(CS_IP_CLAIM_VERIFIED, CS_IP_CLAIM_HEADER), CS_IP_REFUSE);
	assert_int_equal(cs_ip_decide(CS_IP_CLAIM_VERIFIED, CS_IP_CLAIM_VERIFIED), CS_IP_SHARE);
}

static void test_cs_registry_put_claims__header_never_displaces_verified(void **state)
{
	(void)state;
	struct cs_registry *r;
	assert_int_equal(cs_registry_new(&r, 10, 1), 0);
	int a, b, c;
	void *old;
	const char *ip[] = {"10.0.0.3"};
	const uint8_t verified[] = {CS_IP_CLAIM_VERIFIED}, header[] = {CS_IP_CLAIM_HEADER};
	assert_int_equal(cs_registry_put_claims(r, "edge-3", 6, ip, verified, 1, &a, &old), 0);
	const char *holder = NULL;
	assert_int_equal(
	        cs_registry_ip_check(r, "edge-1", 6, "10.0.0.3", CS_IP_CLAIM_HEADER, &holder),
	        CS_IP_REFUSE);
	assert_string_equal(holder, "edge-3");
	/* the node itself may claim its own IP again */
	assert_int_equal(
	        cs_registry_ip_check(r, "edge-3", 6, "10.0.0.3", CS_IP_CLAIM_HEADER, &holder),
	        CS_IP_TAKE);
	/* a put with the header claim anyway: skipped, edge-3 keeps it */
	assert_int_equal(cs_registry_put_claims(r, "edge-1", 6, ip, header, 1, &b, &old), 0);
	const char *node;
	assert_ptr_equal(by_ip(r, "10.0.0.3", &node), &a);
	assert_string_equal(node, "edge-3");
	/* header over header: the newest wins; a verified claim displaces both */
	const char *ip2[] = {"10.0.0.4"};
	assert_int_equal(cs_registry_put_claims(r, "edge-1", 6, ip2, header, 1, &b, &old), 0);
	assert_int_equal(cs_registry_put_claims(r, "edge-2", 6, ip2, header, 1, &c, &old), 0);
	assert_ptr_equal(by_ip(r, "10.0.0.4", NULL), &c);
	enum cs_ip_verdict v;
	assert_int_equal(
	        cs_registry_add_ip(r, "edge-1", 6, &b, "10.0.0.4", CS_IP_CLAIM_VERIFIED, &v), 0);
	assert_int_equal(v, CS_IP_TAKE);
	assert_ptr_equal(by_ip(r, "10.0.0.4", NULL), &b);
	const char *names[4];
	assert_int_equal(cs_registry_ip_owners(r, "10.0.0.4", 8, names, 4), 1);
	/* edge-2 lost it: leaving does not touch edge-1's */
	assert_true(cs_registry_remove_if(r, "edge-2", 6, &c));
	assert_ptr_equal(by_ip(r, "10.0.0.4", NULL), &b);
	/* add_ip: a verified claim on edge-3's verified IP shares it */
	assert_int_equal(
	        cs_registry_add_ip(r, "edge-1", 6, &b, "10.0.0.3", CS_IP_CLAIM_VERIFIED, &v), 0);
	assert_int_equal(v, CS_IP_SHARE);
	assert_null(by_ip(r, "10.0.0.3", NULL));
	/* a header claim by add_ip is refused and changes nothing */
	assert_int_equal(cs_registry_add_ip(r, "edge-2", 6, &c, "10.0.0.3", CS_IP_CLAIM_HEADER, &v),
	                 -ENOENT); /* edge-2 is gone */
	assert_int_equal(put(r, "edge-2", NULL, 0, &c, &old), 0);
	assert_int_equal(cs_registry_add_ip(r, "edge-2", 6, &c, "10.0.0.3", CS_IP_CLAIM_HEADER, &v),
	                 0);
	assert_int_equal(v, CS_IP_REFUSE);
	assert_int_equal(cs_registry_ip_owners(r, "10.0.0.3", 8, names, 4), 2);
	/* the wrong value (a replaced session) is not the node's */
	assert_int_equal(
	        cs_registry_add_ip(r, "edge-1", 6, &c, "10.0.0.5", CS_IP_CLAIM_VERIFIED, &v),
	        -ENOENT);
	/* a new IP by add_ip, then the node leaves: the key goes */
	assert_int_equal(
	        cs_registry_add_ip(r, "edge-2", 6, &c, "10.0.0.6", CS_IP_CLAIM_VERIFIED, &v), 0);
	assert_ptr_equal(by_ip(r, "10.0.0.6", NULL), &c);
	assert_true(cs_registry_remove_if(r, "edge-2", 6, &c));
	assert_null(by_ip(r, "10.0.0.6", NULL));
	assert_true(cs_registry_remove_if(r, "edge-1", 6, &b));
	assert_ptr_equal(by_ip(r, "10.0.0.3", NULL), &a);
	/* bad claims */
	const uint8_t none[] = {CS_IP_CLAIM_NONE};
	assert_int_equal(cs_registry_put_claims(r, "edge-9", 6, ip, none, 1, &b, &old), -EINVAL);
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
	        cmocka_unit_test(test_cs_registry_put__verified_ip_shared),
	        cmocka_unit_test(test_cs_ip_decide__table),
	        cmocka_unit_test(test_cs_registry_put_claims__header_never_displaces_verified),
	        cmocka_unit_test(test_cs_registry_put__limits),
	        cmocka_unit_test(test_cs_registry_put__many_nodes),
	        cmocka_unit_test(test_cs_registry_put__alloc_failure),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
