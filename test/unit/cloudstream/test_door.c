/* Unit tests for the front door's pure part (cloudstream/src/door.h): the CONNECT head
 * kube-apiserver's egress dialer sends, our answers, the edge's codes and the TCP_CONNECT
 * payload. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <stream/ext.h>

#include "door.h"
#include "guard.h"

/* egress_selector.go, tunnelHTTPConnect, byte for byte. */
static const char apiserver_head[] = "CONNECT 10.0.3.7:10250 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

static void test_cs_door_parse__apiserver_bytes(void **state)
{
	(void)state;
	struct cs_door_req r;
	int status = 0;
	const char *why = NULL;
	size_t n = sizeof apiserver_head - 1;
	struct guard_buf g;
	assert_int_equal(guard_new(&g, apiserver_head, n), 0);
	assert_int_equal(cs_door_parse(g.data, g.len, &r, &status, &why), (ssize_t)n);
	assert_int_equal(r.host_len, 8);
	assert_memory_equal(r.host, "10.0.3.7", 8);
	assert_true(r.host_is_ip);
	assert_int_equal(r.port, 10250);
	assert_int_equal(r.minor_version, 1);
	guard_free(&g);
	/* Every proper prefix is incomplete, and says nothing. */
	for (size_t k = 0; k < n; k++) {
		assert_int_equal(guard_new(&g, apiserver_head, k), 0);
		assert_int_equal(cs_door_parse(g.data, k, &r, &status, &why), 0);
		guard_free(&g);
	}
	/* Bytes after the head (a client that did not wait) are not part of it. */
	char more[128];
	snprintf(more, sizeof more, "%s\x16\x03\x01", apiserver_head);
	assert_int_equal(cs_door_parse((const uint8_t *)more, n + 3, &r, &status, &why),
	                 (ssize_t)n);
}

static ssize_t parse_str(const char *s, struct cs_door_req *r, int *status, const char **why)
{
	*status = 0;
	return cs_door_parse((const uint8_t *)s, strlen(s), r, status, why);
}

static void test_cs_door_parse__targets(void **state)
{
	(void)state;
	struct cs_door_req r;
	int status;
	const char *why;
	assert_true(parse_str("CONNECT edge-1:10350 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", &r,
	                      &status, &why) > 0);
	assert_false(r.host_is_ip);
	assert_int_equal(r.host_len, 6);
	assert_int_equal(r.port, 10350);
	assert_true(parse_str("CONNECT [fd00::7]:10250 HTTP/1.0\r\n\r\n", &r, &status, &why) > 0);
	assert_true(r.host_is_ip);
	assert_int_equal(r.host_len, 7);
	assert_memory_equal(r.host, "fd00::7", 7);
	assert_int_equal(r.minor_version, 0);
	assert_true(parse_str("CONNECT 1.2.3.4:1 HTTP/1.1\r\n\r\n", &r, &status, &why) > 0);
	assert_true(parse_str("CONNECT a:65535 HTTP/1.1\r\n\r\n", &r, &status, &why) > 0);
	assert_int_equal(r.port, 65535);
	/* A name that looks almost like an address is a name. */
	assert_true(parse_str("CONNECT 1.2.3:80 HTTP/1.1\r\n\r\n", &r, &status, &why) > 0);
	assert_false(r.host_is_ip);
	static const char *const bad[] = {
	        "CONNECT 1.2.3.4 HTTP/1.1\r\n\r\n",      /* no port */
	        "CONNECT :80 HTTP/1.1\r\n\r\n",          /* no host */
	        "CONNECT a:0 HTTP/1.1\r\n\r\n",          /* port 0 */
	        "CONNECT a:65536 HTTP/1.1\r\n\r\n",      /* port over */
	        "CONNECT a:123456 HTTP/1.1\r\n\r\n",     /* port digits */
	        "CONNECT a:8x HTTP/1.1\r\n\r\n",         /* port text */
	        "CONNECT a: HTTP/1.1\r\n\r\n",           /* empty port */
	        "CONNECT a_b:80 HTTP/1.1\r\n\r\n",       /* not a host byte */
	        "CONNECT [fd00::7:80 HTTP/1.1\r\n\r\n",  /* no ] */
	        "CONNECT []:80 HTTP/1.1\r\n\r\n",        /* empty v6 */
	        "CONNECT [fd00::g]:80 HTTP/1.1\r\n\r\n", /* not hex */
	        "CONNECT [fd00::7]80 HTTP/1.1\r\n\r\n",  /* no : */
	        "CONNECT /x:80 HTTP/1.1\r\n\r\n",        /* a path */
	        "CONNECT http://a:80 HTTP/1.1\r\n\r\n",  /* absolute form */
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		assert_int_equal(parse_str(bad[i], &r, &status, &why), -EBADMSG);
		assert_int_equal(status, 400);
		assert_string_equal(why, "malformed CONNECT target: expected host:port");
	}
	/* The longest host name, and one byte more. */
	char head[400], host[260];
	memset(host, 'a', 254);
	host[253] = '\0';
	snprintf(head, sizeof head, "CONNECT %s:1 HTTP/1.1\r\n\r\n", host);
	assert_true(parse_str(head, &r, &status, &why) > 0);
	host[253] = 'a';
	host[254] = '\0';
	snprintf(head, sizeof head, "CONNECT %s:1 HTTP/1.1\r\n\r\n", host);
	assert_int_equal(parse_str(head, &r, &status, &why), -EBADMSG);
}

static void test_cs_door_parse__not_connect_and_limits(void **state)
{
	(void)state;
	struct cs_door_req r;
	int status;
	const char *why;
	assert_int_equal(parse_str("GET /healthz HTTP/1.1\r\n\r\n", &r, &status, &why), -ENOTSUP);
	assert_int_equal(status, 405);
	assert_int_equal(parse_str("connect a:1 HTTP/1.1\r\n\r\n", &r, &status, &why), -ENOTSUP);
	assert_int_equal(parse_str("CONNECT a:1 HTTP/2\r\n\r\n", &r, &status, &why), -EBADMSG);
	assert_int_equal(status, 400);
	assert_int_equal(parse_str("\x01\x02\r\n\r\n", &r, &status, &why), -EBADMSG);
	/* A head that never ends within CS_DOOR_MAX_HEAD_BYTES: 431, not a wait forever. */
	static char big[CS_DOOR_MAX_HEAD_BYTES + 64];
	int k = snprintf(big, sizeof big, "CONNECT a:1 HTTP/1.1\r\nX: ");
	memset(big + k, 'x', sizeof big - (size_t)k);
	assert_int_equal(
	        cs_door_parse((const uint8_t *)big, CS_DOOR_MAX_HEAD_BYTES - 1, &r, &status, &why),
	        0);
	assert_int_equal(
	        cs_door_parse((const uint8_t *)big, CS_DOOR_MAX_HEAD_BYTES, &r, &status, &why),
	        -EMSGSIZE);
	assert_int_equal(status, 431);
	assert_int_equal(cs_door_parse((const uint8_t *)big, sizeof big, &r, &status, &why),
	                 -EMSGSIZE);
}

static void test_cs_door_answer(void **state)
{
	(void)state;
	char out[600];
	const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
	assert_int_equal(cs_door_answer(out, sizeof out, 200, "ignored"), (ssize_t)sizeof ok - 1);
	assert_memory_equal(out, ok, sizeof ok - 1);
	assert_int_equal(cs_door_answer(out, sizeof ok - 1, 200, NULL), -EMSGSIZE);
	const char no[] = "HTTP/1.1 503 edge node n2 is not connected\r\nContent-Length: "
	                  "0\r\nConnection: close\r\n\r\n";
	assert_int_equal(cs_door_answer(out, sizeof out, 503, "edge node n2 is not connected"),
	                 (ssize_t)sizeof no - 1);
	assert_memory_equal(out, no, sizeof no - 1);
	/* The reason phrase can never split the head: control bytes and non-ASCII are '?'. */
	assert_true(cs_door_answer(out, sizeof out, 502, "a\r\nX: y\xc3\xa9") > 0);
	assert_memory_equal(out, "HTTP/1.1 502 a??X: y??\r\n", 24);
	assert_true(cs_door_answer(out, sizeof out, 502, "") > 0);
	assert_memory_equal(out, "HTTP/1.1 502 error\r\n", 20);
	assert_true(cs_door_answer(out, sizeof out, 42, "x") > 0);
	assert_memory_equal(out, "HTTP/1.1 502 x\r\n", 16);
	/* Cut at CS_DOOR_MAX_REASON_BYTES. */
	char longr[CS_DOOR_MAX_REASON_BYTES + 50];
	memset(longr, 'r', sizeof longr - 1);
	longr[sizeof longr - 1] = '\0';
	ssize_t n = cs_door_answer(out, sizeof out, 504, longr);
	assert_int_equal(n, 13 + CS_DOOR_MAX_REASON_BYTES + 2 + 38 + 2);
}

static void test_cs_door_error_status(void **state)
{
	(void)state;
	assert_int_equal(cs_door_error_status(ST_EXT_ERR_TIMEOUT), 504);
	assert_int_equal(cs_door_error_status(ST_EXT_ERR_LIMIT), 503);
	assert_int_equal(cs_door_error_status(ST_EXT_ERR_REFUSED), 502);
	assert_int_equal(cs_door_error_status(ST_EXT_ERR_UNREACHABLE), 502);
	assert_int_equal(cs_door_error_status(ST_EXT_ERR_NOT_FOUND), 502);
	assert_int_equal(cs_door_error_status(0), 502);
	assert_int_equal(cs_door_error_status(999), 502);
}

static void test_cs_door_payload(void **state)
{
	(void)state;
	uint8_t out[32];
	/* port 10250 as a uvarint (8a 50), then "kubelet" */
	const uint8_t kubelet[] = {0x8a, 0x50, 'k', 'u', 'b', 'e', 'l', 'e', 't'};
	assert_int_equal(cs_door_payload(out, sizeof out, CS_DOOR_TARGET_KUBELET, 10250, NULL),
	                 (ssize_t)sizeof kubelet);
	assert_memory_equal(out, kubelet, sizeof kubelet);
	struct st_ext_tcp_connect tc;
	assert_int_equal(st_ext_tcp_connect_decode(out, sizeof kubelet, &tc), 0);
	assert_true(tc.port == 10250 && tc.target_len == 7);
	const uint8_t port[] = {0xd6, 0x47};
	assert_int_equal(cs_door_payload(out, sizeof out, CS_DOOR_TARGET_PORT, 9174, NULL),
	                 (ssize_t)sizeof port);
	assert_memory_equal(out, port, sizeof port);
	assert_true(cs_door_payload(out, 1, CS_DOOR_TARGET_PORT, 9174, NULL) < 0);
	assert_true(cs_door_payload(out, sizeof out, CS_DOOR_TARGET_PORT, 0, NULL) < 0);
}

static void test_cs_door_payload__pod(void **state)
{
	(void)state;
	uint8_t out[32];
	/* 8443 = fb 41, then the pod's address as the target */
	const uint8_t pod[] = {0xfb, 0x41, '1', '0', '.', '2', '4', '4', '.', '3', '.', '7'};
	assert_int_equal(cs_door_payload(out, sizeof out, CS_DOOR_TARGET_POD, 8443, "10.244.3.7"),
	                 (ssize_t)sizeof pod);
	assert_memory_equal(out, pod, sizeof pod);
	/* Only a dotted IPv4 address: the edge's target grammar has no ':' */
	assert_int_equal(cs_door_payload(out, sizeof out, CS_DOOR_TARGET_POD, 8443, "fd00::7"),
	                 -EINVAL);
	assert_int_equal(cs_door_payload(out, sizeof out, CS_DOOR_TARGET_POD, 8443, NULL), -EINVAL);
	assert_int_equal(cs_door_payload(out, sizeof out, CS_DOOR_TARGET_POD, 8443, "kubelet"),
	                 -EINVAL);
}

static int pod_node(const char *json, const char *ip, char *node, size_t cap)
{
	return cs_door_pod_node(json, strlen(json), ip, node, cap);
}

static void test_cs_door_pod_node(void **state)
{
	(void)state;
	char node[64];
	/* kube-apiserver's PodList for fieldSelector=status.podIP=10.244.3.7: an ended pod that
	 * had the IP, a hostNetwork one (its IP is its node's), then the running one. */
	const char *list = "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{},\"items\":["
	                   "{\"metadata\":{\"name\":\"old\"},\"spec\":{\"nodeName\":\"n1\"},"
	                   "\"status\":{\"phase\":\"Succeeded\",\"podIP\":\"10.244.3.7\"}},"
	                   "{\"metadata\":{\"name\":\"hn\"},\"spec\":{\"nodeName\":\"n2\","
	                   "\"hostNetwork\":true},\"status\":{\"phase\":\"Running\",\"podIP\":\"10."
	                   "244.3.7\"}},"
	                   "{\"metadata\":{\"name\":\"web\"},\"spec\":{\"nodeName\":\"edge-7\"},"
	                   "\"status\":{\"phase\":\"Running\",\"podIP\":\"10.244.3.7\"}}]}";
	assert_int_equal(pod_node(list, "10.244.3.7", node, sizeof node), 1);
	assert_string_equal(node, "edge-7");
	/* Another IP in the answer (a selector the server ignored) is no match. */
	assert_int_equal(pod_node(list, "10.244.3.8", node, sizeof node), 0);
	/* The name must fit. */
	assert_int_equal(pod_node(list, "10.244.3.7", node, 6), -EMSGSIZE);
	assert_int_equal(pod_node(list, "10.244.3.7", node, 7), 1);
	/* None, a pod not scheduled yet, and no phase at all (counted as live). */
	assert_int_equal(
	        pod_node("{\"kind\":\"PodList\",\"items\":[]}", "1.2.3.4", node, sizeof node), 0);
	assert_int_equal(pod_node("{\"items\":[{\"spec\":{},\"status\":{\"podIP\":\"1.2.3.4\"}}]}",
	                          "1.2.3.4", node, sizeof node),
	                 0);
	assert_int_equal(pod_node("{\"items\":[{\"spec\":{\"nodeName\":\"a\"},\"status\":"
	                          "{\"podIP\":\"1.2.3.4\"}}]}",
	                          "1.2.3.4", node, sizeof node),
	                 1);
	/* Not a PodList. */
	static const char *const bad[] = {
	        "", "[]", "{}", "{\"items\":{}}", "{\"items\":[", "nul", "{\"items\":[]} x"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		assert_int_equal(pod_node(bad[i], "1.2.3.4", node, sizeof node), -EBADMSG);
	/* Odd items are skipped. */
	assert_int_equal(pod_node("{\"items\":[1,\"x\",{\"spec\":1,\"status\":{}}]}", "1.2.3.4",
	                          node, sizeof node),
	                 0);
}

static void test_cs_door_port_parse(void **state)
{
	(void)state;
	uint16_t p;
	assert_int_equal(cs_door_port_parse("10250", &p), 0);
	assert_int_equal(p, 10250);
	assert_int_equal(cs_door_port_parse("65535", &p), 0);
	assert_int_equal(cs_door_port_parse("0", &p), -EINVAL);
	assert_int_equal(cs_door_port_parse("65536", &p), -EINVAL);
	assert_int_equal(cs_door_port_parse("", &p), -EINVAL);
	assert_int_equal(cs_door_port_parse("80x", &p), -EINVAL);
	assert_int_equal(cs_door_port_parse("0000080", &p), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_cs_door_parse__apiserver_bytes),
	        cmocka_unit_test(test_cs_door_parse__targets),
	        cmocka_unit_test(test_cs_door_parse__not_connect_and_limits),
	        cmocka_unit_test(test_cs_door_answer),
	        cmocka_unit_test(test_cs_door_error_status),
	        cmocka_unit_test(test_cs_door_payload),
	        cmocka_unit_test(test_cs_door_payload__pod),
	        cmocka_unit_test(test_cs_door_pod_node),
	        cmocka_unit_test(test_cs_door_port_parse),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
