/* Unit tests for request → backend mapping and the allow-list (edgestream/src/es_route.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <stream/ext.h>

#include "es_route.h"

static void allow(struct es_allow *a)
{
	char err[200];
	memset(a, 0, sizeof *a);
	assert_int_equal(es_allow_add(a, "node-exporter=9100", err, sizeof err), 0);
	assert_int_equal(es_allow_add(a, "app-debug=6060", err, sizeof err), 0);
}

static void test_es_allow_add__rejects_malformed_and_duplicates(void **state)
{
	(void)state;
	struct es_allow a;
	char err[200];
	allow(&a);
	assert_int_equal(es_allow_add(&a, "x", err, sizeof err), -EINVAL);
	assert_non_null(strstr(err, "NAME=PORT"));
	assert_int_equal(es_allow_add(&a, "=80", err, sizeof err), -EINVAL);
	assert_int_equal(es_allow_add(&a, "Web=80", err, sizeof err), -EINVAL);
	assert_int_equal(es_allow_add(&a, "web=0", err, sizeof err), -EINVAL);
	assert_int_equal(es_allow_add(&a, "web=65536", err, sizeof err), -EINVAL);
	assert_int_equal(es_allow_add(&a, "web=80x", err, sizeof err), -EINVAL);
	assert_int_equal(es_allow_add(&a, "web=+80", err, sizeof err), -EINVAL);
	assert_int_equal(es_allow_add(&a, "web=9100", err, sizeof err), -EEXIST);
	assert_int_equal(es_allow_add(&a, "app-debug=81", err, sizeof err), -EEXIST);
	assert_int_equal(a.n, 2);
	for (unsigned i = 2; i < ES_MAX_LOCAL_PORTS; i++) {
		char e[32];
		snprintf(e, sizeof e, "p%u=%u", i, 20000 + i);
		assert_int_equal(es_allow_add(&a, e, err, sizeof err), 0);
	}
	assert_int_equal(es_allow_add(&a, "last=30000", err, sizeof err), -ENOSPC);
}

static void test_es_route_request__kubelet_paths(void **state)
{
	(void)state;
	struct es_allow a;
	struct es_target t;
	allow(&a);
	const char *p = "/exec/default/pod/ctr";
	assert_int_equal(es_route_request(&a, true, false, p, strlen(p), &t), 0);
	assert_int_equal(t.kind, ES_TARGET_KUBELET);
	assert_ptr_equal(t.path, p);
	assert_int_equal(t.path_len, strlen(p));
	/* No kubelet backend: refused, never dialled. */
	assert_int_equal(es_route_request(&a, false, false, "/metrics", 8, &t), 0);
	assert_int_equal(t.kind, ES_TARGET_REFUSE);
	assert_int_equal(t.refuse_code, ST_EXT_ERR_REFUSED);
	assert_non_null(strstr(t.reason, "/metrics"));
	assert_int_equal(es_route_request(&a, true, false, "metrics", 7, &t), 0);
	assert_int_equal(t.kind, ES_TARGET_REFUSE);
	assert_int_equal(t.refuse_code, ST_EXT_ERR_BAD_REQUEST);
}

static void test_es_route_request__local_ports(void **state)
{
	(void)state;
	struct es_allow a;
	struct es_target t;
	allow(&a);
	const char *p = "/ports/node-exporter/metrics";
	assert_int_equal(es_route_request(&a, true, false, p, strlen(p), &t), 0);
	assert_int_equal(t.kind, ES_TARGET_LOCAL_PORT);
	assert_int_equal(t.port, 9100);
	assert_string_equal(t.local_name, "node-exporter");
	assert_int_equal(t.path_len, 8);
	assert_memory_equal(t.path, "/metrics", 8);
	/* By number, and with no rest of path. */
	p = "/ports/6060";
	assert_int_equal(es_route_request(&a, true, false, p, strlen(p), &t), 0);
	assert_int_equal(t.kind, ES_TARGET_LOCAL_PORT);
	assert_int_equal(t.port, 6060);
	assert_int_equal(t.path_len, 1);
	assert_memory_equal(t.path, "/", 1);
	/* Not listed: refused, whatever the kubelet setting. */
	const char *bad[] = {"/ports/22/", "/ports/ssh/x", "/ports//metrics", "/ports/9100x/m",
	                     "/ports/node-exporterx/metrics"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		assert_int_equal(es_route_request(&a, true, false, bad[i], strlen(bad[i]), &t), 0);
		assert_int_equal(t.kind, ES_TARGET_REFUSE);
		assert_int_equal(t.refuse_code, ST_EXT_ERR_REFUSED);
		assert_non_null(strstr(t.reason, "allow-list"));
	}
}

static void test_es_route_request__cri(void **state)
{
	(void)state;
	struct es_allow a;
	struct es_target t;
	allow(&a);
	const char *streaming[] = {"/exec/ns/pod/ctr", "/attach/ns/pod/uid/ctr",
	                           "/portForward/ns/pod", "/containerLogs/ns/pod/ctr"};
	for (size_t i = 0; i < 4; i++) {
		assert_int_equal(
		        es_route_request(&a, true, true, streaming[i], strlen(streaming[i]), &t),
		        0);
		assert_int_equal(t.kind, ES_TARGET_CRI);
	}
	/* everything else stays with the kubelet (or the allow-list) */
	const char *other[] = {"/run/ns/pod/ctr", "/metrics", "/exec/ns/../x"};
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(es_route_request(&a, true, true, other[i], strlen(other[i]), &t),
		                 0);
		assert_int_equal(t.kind, ES_TARGET_KUBELET);
	}
	assert_int_equal(es_route_request(&a, true, true, "/ports/9100/x", 13, &t), 0);
	assert_int_equal(t.kind, ES_TARGET_LOCAL_PORT);
}

static void test_es_route_tcp(void **state)
{
	(void)state;
	struct es_allow a;
	struct es_target t;
	allow(&a);
	assert_int_equal(es_route_tcp(&a, true, 9100, NULL, 0, &t), 0);
	assert_int_equal(t.kind, ES_TARGET_LOCAL_PORT);
	assert_int_equal(t.port, 9100);
	assert_int_equal(es_route_tcp(&a, true, 6060, "app-debug", 9, &t), 0);
	assert_int_equal(t.kind, ES_TARGET_LOCAL_PORT);
	assert_int_equal(es_route_tcp(&a, true, 6060, "node-exporter", 13, &t), 0);
	assert_int_equal(t.kind, ES_TARGET_REFUSE);
	assert_int_equal(es_route_tcp(&a, true, 22, NULL, 0, &t), 0);
	assert_int_equal(t.kind, ES_TARGET_REFUSE);
	assert_true(t.refuse_code == ST_EXT_ERR_REFUSED);
	assert_string_equal(t.reason,
	                    "TCP port 22 is not in this node's allow-list (--local-port)");
}

/* The kubelet is a name, not a port from the cloud; pod IPs only as configured. */
static void test_es_route_tcp__kubelet_and_pods(void **state)
{
	(void)state;
	struct es_allow a;
	struct es_target t;
	char err[200];
	allow(&a);
	assert_int_equal(es_route_tcp(&a, true, 10250, "kubelet", 7, &t), 0);
	assert_int_equal(t.kind, ES_TARGET_KUBELET_TCP);
	assert_int_equal(es_route_tcp(&a, true, 22, "kubelet", 7, &t), 0); /* port unused */
	assert_int_equal(t.kind, ES_TARGET_KUBELET_TCP);
	assert_int_equal(es_route_tcp(&a, false, 10250, "kubelet", 7, &t), 0);
	assert_int_equal(t.kind, ES_TARGET_REFUSE);
	assert_string_equal(t.reason, "no kubelet on this node (--kubelet-url is not set)");
	/* Pod IPs: off by default. */
	assert_int_equal(es_route_tcp(&a, true, 8443, "10.244.3.7", 10, &t), 0);
	assert_int_equal(t.kind, ES_TARGET_REFUSE);
	assert_string_equal(t.reason,
	                    "pod IP 10.244.3.7 refused: this node reaches no pod IPs (--pod-ports "
	                    "is empty)");
	assert_int_equal(es_allow_add_pod_port(&a, "8443", err, sizeof err), 0);
	assert_int_equal(es_allow_add_pod_port(&a, "8443", err, sizeof err), -EEXIST);
	assert_int_equal(es_allow_add_pod_port(&a, "0", err, sizeof err), -EINVAL);
	assert_int_equal(es_allow_add_pod_port(&a, "65536", err, sizeof err), -EINVAL);
	assert_int_equal(es_allow_add_pod_cidr(&a, "10.244.3.0/24", err, sizeof err), 0);
	assert_int_equal(es_allow_add_pod_cidr(&a, "10.244.3.0", err, sizeof err), -EINVAL);
	assert_int_equal(es_allow_add_pod_cidr(&a, "10.244.3.0/7", err, sizeof err), -EINVAL);
	assert_int_equal(es_allow_add_pod_cidr(&a, "10.244.3.0/33", err, sizeof err), -EINVAL);
	assert_int_equal(es_allow_add_pod_cidr(&a, "10.244.300.0/24", err, sizeof err), -EINVAL);
	assert_int_equal(es_route_tcp(&a, true, 8443, "10.244.3.7", 10, &t), 0);
	assert_int_equal(t.kind, ES_TARGET_POD);
	assert_string_equal(t.host, "10.244.3.7");
	assert_int_equal(t.port, 8443);
	assert_int_equal(es_route_tcp(&a, true, 22, "10.244.3.7", 10, &t), 0);
	assert_string_equal(t.reason, "pod port 22 is not in this node's --pod-ports");
	assert_int_equal(es_route_tcp(&a, true, 8443, "10.244.4.7", 10, &t), 0);
	assert_string_equal(t.reason, "IP 10.244.4.7 is not in this node's --pod-cidr");
	assert_int_equal(es_route_tcp(&a, true, 8443, "127.0.0.1", 9, &t), 0);
	assert_int_equal(t.kind, ES_TARGET_REFUSE);
	/* Not dotted quads: names, and refused as unknown entries. */
	assert_int_equal(es_route_tcp(&a, true, 8443, "10.244.3.07", 11, &t), 0);
	assert_int_equal(t.kind, ES_TARGET_REFUSE);
	assert_int_equal(es_route_tcp(&a, true, 8443, "10.244.3", 8, &t), 0);
	assert_int_equal(t.kind, ES_TARGET_REFUSE);
	/* "kubelet" and addresses are not allow-list names. */
	assert_int_equal(es_allow_add(&a, "kubelet=10250", err, sizeof err), -EINVAL);
	assert_int_equal(es_allow_add(&a, "1.2.3.4=80", err, sizeof err), -EINVAL);
}

static void test_es_parse_url(void **state)
{
	(void)state;
	char host[64], path[64];
	int port;
	assert_int_equal(es_parse_url("wss://cloud.example:10004/v1/kubeedge/connect", "wss", 443,
	                              host, sizeof host, &port, path, sizeof path),
	                 0);
	assert_string_equal(host, "cloud.example");
	assert_int_equal(port, 10004);
	assert_string_equal(path, "/v1/kubeedge/connect");
	assert_int_equal(es_parse_url("https://[::1]", "https", 10250, host, sizeof host, &port,
	                              path, sizeof path),
	                 0);
	assert_string_equal(host, "::1");
	assert_int_equal(port, 10250);
	assert_string_equal(path, "/");
	const char *bad[] = {"ws://a:1/",   "wss://:1/",    "wss://a:0/", "wss://a:65536/",
	                     "wss://a:1x/", "wss://[::1/",  "wss://u@a/", "wss://a/b c",
	                     "wss://a:/",   "https://a:1/", NULL};
	for (size_t i = 0; i + 1 < sizeof bad / sizeof bad[0]; i++)
		assert_int_equal(es_parse_url(bad[i], "wss", 443, host, sizeof host, &port, path,
		                              sizeof path),
		                 -EINVAL);
	assert_int_equal(
	        es_parse_url(NULL, "wss", 443, host, sizeof host, &port, path, sizeof path),
	        -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_es_allow_add__rejects_malformed_and_duplicates),
	        cmocka_unit_test(test_es_route_request__kubelet_paths),
	        cmocka_unit_test(test_es_route_request__local_ports),
	        cmocka_unit_test(test_es_route_request__cri),
	        cmocka_unit_test(test_es_route_tcp),
	        cmocka_unit_test(test_es_route_tcp__kubelet_and_pods),
	        cmocka_unit_test(test_es_parse_url),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
