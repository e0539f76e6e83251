/* Unit tests for request routing (cloudstream/src/route.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "route.h"

/* A fake world: edge-1 (10.0.0.1, fd00::1) and edge-2 have sessions; pod default/web runs on
 * edge-2, default/gone does not exist, default/new is not cached. */
static int s1, s2;

static void *by_ip(const char *ip, size_t len, const char **node, void *user)
{
	(void)user;
	if ((len == 8 && memcmp(ip, "10.0.0.1", 8) == 0) ||
	    (len == 7 && memcmp(ip, "fd00::1", 7) == 0)) {
		*node = "edge-1";
		return &s1;
	}
	return NULL;
}

static void *by_name(const char *name, size_t len, void *user)
{
	(void)user;
	if (len == 6 && memcmp(name, "edge-1", 6) == 0)
		return &s1;
	if (len == 6 && memcmp(name, "edge-2", 6) == 0)
		return &s2;
	return NULL;
}

static int pod_node(const char *ns, size_t ns_len, const char *pod, size_t pod_len,
                    const char **node, size_t *node_len, void *user)
{
	(void)user;
	(void)ns_len;
	if (strncmp(ns, "default", 7) != 0)
		return 0;
	if (pod_len == 3 && memcmp(pod, "web", 3) == 0) {
		*node = "edge-2";
		*node_len = 6;
		return 1;
	}
	if (pod_len == 4 && memcmp(pod, "gone", 4) == 0)
		return -ENOENT;
	return 0;
}

/* 10.9.9.9 is shared by edge-1 and edge-2 (both verified): by_ip knows no one node for it. */
static size_t ip_owners(const char *ip, size_t len, const char **names, size_t cap, void *user)
{
	(void)user;
	if (len == 8 && memcmp(ip, "10.9.9.9", 8) == 0) {
		static const char *const both[2] = {"edge-1", "edge-2"};
		for (size_t i = 0; i < cap && i < 2; i++)
			names[i] = both[i];
		return 2;
	}
	return by_ip(ip, len, &(const char *){NULL}, NULL) ? 1 : 0;
}

static struct cs_route_lookup lk = {
        .by_ip = by_ip, .by_name = by_name, .ip_owners = ip_owners, .pod_node = pod_node};

static struct cs_route_result route(const char *orig, const char *host, const char *fwd,
                                    const char *pod)
{
	struct cs_route_input in = {0};
	if (orig) {
		in.orig_dst_ip = orig;
		in.orig_dst_ip_len = strlen(orig);
	}
	if (host) {
		in.host = host;
		in.host_len = strlen(host);
	}
	if (fwd) {
		in.forwarded_uri = fwd;
		in.forwarded_uri_len = strlen(fwd);
	}
	if (pod) {
		in.pod_namespace = "default";
		in.pod_namespace_len = 7;
		in.pod_name = pod;
		in.pod_name_len = strlen(pod);
	}
	struct cs_route_result r;
	assert_int_equal(cs_route_resolve(&in, &lk, &r), 0);
	return r;
}

static void test_cs_route_resolve__orig_dst_first(void **state)
{
	(void)state;
	struct cs_route_result r = route("10.0.0.1", "edge-2", NULL, "web");
	assert_int_equal(r.source, CS_ROUTE_ORIG_DST);
	assert_ptr_equal(r.session, &s1);
	assert_string_equal(r.node, "edge-1");
	r = route("10.0.0.99", "edge-2", NULL, NULL); /* DNAT'd to a node without a session */
	assert_null(r.session);
	assert_string_equal(r.node, "10.0.0.99");
}

static void test_cs_route_resolve__host(void **state)
{
	(void)state;
	struct cs_route_result r = route(NULL, "10.0.0.1:10350", NULL, NULL);
	assert_int_equal(r.source, CS_ROUTE_HOST_IP);
	assert_ptr_equal(r.session, &s1);
	r = route(NULL, "[fd00::1]:10350", NULL, NULL);
	assert_ptr_equal(r.session, &s1);
	r = route(NULL, "fd00::1", NULL, NULL);
	assert_ptr_equal(r.session, &s1);
	r = route(NULL, "edge-2:10350", NULL, NULL);
	assert_int_equal(r.source, CS_ROUTE_HOST_NAME);
	assert_ptr_equal(r.session, &s2);
	/* The client's Host on upgrades: loopback is never a node. */
	r = route(NULL, "127.0.0.1:6443", NULL, NULL);
	assert_int_equal(r.source, CS_ROUTE_NONE);
	assert_string_equal(r.node, "");
	r = route(NULL, "[::1]:6443", NULL, NULL);
	assert_string_equal(r.node, "");
	/* A name without a session is not taken for a node. */
	r = route(NULL, "kubernetes.default.svc", NULL, NULL);
	assert_string_equal(r.node, "");
	/* An IP without a session still names it, for the 503. */
	r = route(NULL, "10.0.0.77:10350", NULL, NULL);
	assert_null(r.session);
	assert_string_equal(r.node, "10.0.0.77");
	/* So does a name at a kubelet port: "edge node edge-9 is not connected", not "cannot
	 * tell which node"; at another port, or none, a name is nobody's. */
	r = route(NULL, "edge-9:10350", NULL, NULL);
	assert_int_equal(r.source, CS_ROUTE_HOST_NAME);
	assert_null(r.session);
	assert_string_equal(r.node, "edge-9");
	r = route(NULL, "edge-9:10250", NULL, NULL);
	assert_string_equal(r.node, "edge-9");
	r = route(NULL, "edge-9:6443", NULL, NULL);
	assert_string_equal(r.node, "");
	r = route(NULL, "edge-9:110250", NULL, NULL);
	assert_string_equal(r.node, "");
	r = route(NULL, "edge-9", NULL, NULL);
	assert_string_equal(r.node, "");
	r = route(NULL, ":10350", NULL, NULL);
	assert_string_equal(r.node, "");
	/* A connected node named by X-Forwarded-Uri still wins over a stale Host name. */
	r = route(NULL, "edge-9:10350", "/api/v1/nodes/edge-1/proxy/metrics", NULL);
	assert_ptr_equal(r.session, &s1);
}

static void test_cs_route_resolve__forwarded_uri(void **state)
{
	(void)state;
	struct cs_route_result r =
	        route(NULL, "127.0.0.1:6443", "/api/v1/nodes/edge-2/proxy/metrics", NULL);
	assert_int_equal(r.source, CS_ROUTE_FORWARDED_URI);
	assert_ptr_equal(r.session, &s2);
	r = route(NULL, NULL, "/api/v1/nodes/https:edge-1:10250/proxy/stats/summary", NULL);
	assert_ptr_equal(r.session, &s1);
	r = route(NULL, NULL, "/api/v1/nodes/edge-9/proxy/metrics", NULL);
	assert_null(r.session);
	assert_string_equal(r.node, "edge-9");
	r = route(NULL, NULL, "/api/v1/namespaces/x/pods/y/proxy", NULL);
	assert_string_equal(r.node, "");
	struct cs_route_input in = {.forwarded_uri = "/api/v1/nodes/EVIL_/proxy/x",
	                            .forwarded_uri_len = 27};
	assert_int_equal(cs_route_resolve(&in, &lk, &r), -EBADMSG);
}

static void test_cs_route_resolve__pod(void **state)
{
	(void)state;
	struct cs_route_result r = route(NULL, "127.0.0.1:6443", NULL, "web");
	assert_int_equal(r.source, CS_ROUTE_POD);
	assert_ptr_equal(r.session, &s2);
	r = route(NULL, "127.0.0.1:6443", NULL, "new");
	assert_true(r.need_pod_lookup);
	assert_string_equal(r.node, "");
	r = route(NULL, "127.0.0.1:6443", NULL, "gone");
	assert_false(r.need_pod_lookup);
	assert_string_equal(r.node, "");
	/* Feature off: no lookup asked for. */
	struct cs_route_lookup off = lk;
	off.pod_node = NULL;
	struct cs_route_input in = {.pod_namespace = "default",
	                            .pod_namespace_len = 7,
	                            .pod_name = "new",
	                            .pod_name_len = 3};
	assert_int_equal(cs_route_resolve(&in, &off, &r), 0);
	assert_false(r.need_pod_lookup);
}

static void test_cs_route_resolve__shared_ip(void **state)
{
	(void)state;
	/* addressed only by the shared IP: no session, both names, never one of them */
	struct cs_route_result r = route("10.9.9.9", NULL, NULL, NULL);
	assert_true(r.shared);
	assert_null(r.session);
	assert_int_equal(r.source, CS_ROUTE_ORIG_DST);
	assert_string_equal(r.node, "10.9.9.9");
	assert_string_equal(r.shared_ip, "10.9.9.9");
	assert_string_equal(r.shared_by[0], "edge-1");
	assert_string_equal(r.shared_by[1], "edge-2");
	r = route(NULL, "10.9.9.9:10350", NULL, NULL);
	assert_true(r.shared);
	assert_int_equal(r.source, CS_ROUTE_HOST_IP);
	/* something else names the node: routed by that */
	r = route("10.9.9.9", NULL, "/api/v1/nodes/edge-2/proxy/metrics", NULL);
	assert_false(r.shared);
	assert_ptr_equal(r.session, &s2);
	r = route(NULL, "10.9.9.9:10350", NULL, "web");
	assert_false(r.shared);
	assert_ptr_equal(r.session, &s2);
	/* the pod is not cached yet: ask, do not refuse */
	r = route(NULL, "10.9.9.9:10350", NULL, "new");
	assert_false(r.shared);
	assert_true(r.need_pod_lookup);
	/* an IP one node holds is unchanged */
	r = route("10.0.0.1", NULL, NULL, NULL);
	assert_false(r.shared);
	assert_ptr_equal(r.session, &s1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_cs_route_resolve__orig_dst_first),
	        cmocka_unit_test(test_cs_route_resolve__host),
	        cmocka_unit_test(test_cs_route_resolve__forwarded_uri),
	        cmocka_unit_test(test_cs_route_resolve__pod),
	        cmocka_unit_test(test_cs_route_resolve__shared_ip),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
