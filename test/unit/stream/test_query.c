/* Unit tests for query strings, Kubernetes parameters and kubelet paths (stream/query.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include <stream/err.h>
#include <stream/query.h>

#include "guard.h"

#define S(s) (s), (sizeof(s) - 1)

static void test_iterate(void **state)
{
	(void)state;
	const char q[] = "command=sh&&command=-c&flag&=v&error=1";
	struct st_query_iter it;
	const char *k, *v;
	size_t kl, vl;
	const char *want[][2] = {
	        {"command", "sh"}, {"command", "-c"}, {"flag", ""}, {"", "v"}, {"error", "1"}};
	st_query_iter_init(&it, q, strlen(q));
	for (size_t i = 0; i < 5; i++) {
		assert_true(st_query_next(&it, &k, &kl, &v, &vl));
		assert_int_equal(kl, strlen(want[i][0]));
		assert_memory_equal(k, want[i][0], kl);
		assert_int_equal(vl, strlen(want[i][1]));
		assert_memory_equal(v, want[i][1], vl);
	}
	assert_false(st_query_next(&it, &k, &kl, &v, &vl));
	st_query_iter_init(&it, NULL, 0);
	assert_false(st_query_next(&it, &k, &kl, &v, &vl));
}

static void test_pct_decode(void **state)
{
	(void)state;
	char out[32];
	assert_int_equal(st_pct_decode(out, sizeof out, S("echo+a%20b%2Fc%3a"), true), 11);
	assert_memory_equal(out, "echo a b/c:", 11);
	assert_int_equal(st_pct_decode(out, sizeof out, S("a+b"), false), 3);
	assert_memory_equal(out, "a+b", 3);
	assert_int_equal(st_pct_decode(out, sizeof out, S("%"), true), -EBADMSG);
	assert_int_equal(st_pct_decode(out, sizeof out, S("%4"), true), -EBADMSG);
	assert_int_equal(st_pct_decode(out, sizeof out, S("%4g"), true), -EBADMSG);
	assert_int_equal(st_pct_decode(out, sizeof out, S("%00"), true), 1);
	/* cap -1/0/+1 */
	assert_int_equal(st_pct_decode(out, 2, S("abc"), true), -EMSGSIZE);
	assert_int_equal(st_pct_decode(out, 3, S("abc"), true), 3);
	assert_int_equal(st_pct_decode(out, 4, S("abc"), true), 3);
	/* Truncated escape at a guard page: no over-read. */
	struct guard_buf g;
	assert_int_equal(guard_new(&g, "ab%4", 4), 0);
	assert_int_equal(st_pct_decode(out, sizeof out, (const char *)g.data, g.len, true),
	                 -EBADMSG);
	guard_free(&g);
}

static void test_get_and_count(void **state)
{
	(void)state;
	const char q[] = "follow=true&sinceTime=2026-11-22T10%3A00%3A00Z&tail%4cines=3&command=a&"
	                 "command=b";
	char out[64];
	assert_int_equal(st_query_get(S(q), "sinceTime", out, sizeof out), 20);
	assert_memory_equal(out, "2026-11-22T10:00:00Z", 20);
	assert_int_equal(st_query_get(S(q), "tailLines", out, sizeof out), 1); /* key decoded */
	assert_int_equal(st_query_get(S(q), "command", out, sizeof out), 1);
	assert_int_equal(out[0], 'a');
	assert_int_equal(st_query_get(S(q), "limitBytes", out, sizeof out), -ENOENT);
	assert_int_equal(st_query_get(S(q), "sinceTime", out, 4), -EMSGSIZE);
	assert_int_equal(st_query_count(S(q), "command"), 2);
	assert_int_equal(st_query_count(S(q), "follow"), 1);
	assert_int_equal(st_query_count(S(q), "nope"), 0);
}

static void test_k8s_bool(void **state)
{
	(void)state;
	assert_false(st_k8s_bool(false, NULL, 0));
	assert_false(st_k8s_bool(true, S("0")));
	assert_false(st_k8s_bool(true, S("false")));
	assert_false(st_k8s_bool(true, S("FaLsE")));
	assert_true(st_k8s_bool(true, S("")));
	assert_true(st_k8s_bool(true, S("1")));
	assert_true(st_k8s_bool(true, S("true")));
	assert_true(st_k8s_bool(true, S("yes")));
	assert_true(st_k8s_bool(true, S("no")));
	assert_true(st_k8s_bool(true, S("falsy")));
	assert_true(st_k8s_bool(true, S("00")));
	/* the same rules on a query parameter */
	const char q[] = "a=false&b&c=%46ALSE&d=a-value-longer-than-sixteen-bytes&e=%zz&f=1";
	assert_false(st_query_k8s_flag(q, sizeof q - 1, "a"));
	assert_true(st_query_k8s_flag(q, sizeof q - 1, "b"));
	assert_false(st_query_k8s_flag(q, sizeof q - 1, "c"));
	assert_true(st_query_k8s_flag(q, sizeof q - 1, "d"));
	assert_true(st_query_k8s_flag(q, sizeof q - 1, "e"));
	assert_true(st_query_k8s_flag(q, sizeof q - 1, "f"));
	assert_false(st_query_k8s_flag(q, sizeof q - 1, "g"));
}

static void test_parse_u64(void **state)
{
	(void)state;
	uint64_t v;
	assert_int_equal(st_parse_u64(S("0"), 10, &v), 0);
	assert_true(v == 0);
	assert_int_equal(st_parse_u64(S("9"), 10, &v), 0);
	assert_int_equal(st_parse_u64(S("10"), 10, &v), 0);
	assert_int_equal(st_parse_u64(S("11"), 10, &v), -ERANGE);
	assert_int_equal(st_parse_u64(S("18446744073709551615"), UINT64_MAX, &v), 0);
	assert_true(v == UINT64_MAX);
	assert_int_equal(st_parse_u64(S("18446744073709551616"), UINT64_MAX, &v), -ERANGE);
	assert_int_equal(st_parse_u64(S(""), 10, &v), -EBADMSG);
	assert_int_equal(st_parse_u64(S("-1"), 10, &v), -EBADMSG);
	assert_int_equal(st_parse_u64(S("+1"), 10, &v), -EBADMSG);
	assert_int_equal(st_parse_u64(S(" 1"), 10, &v), -EBADMSG);
	assert_int_equal(st_parse_u64(S("1x"), 10, &v), -EBADMSG);
}

static void assert_seg(struct st_segment s, const char *want)
{
	assert_int_equal(s.len, strlen(want));
	assert_memory_equal(s.p, want, s.len);
}

static void test_kubelet_paths(void **state)
{
	(void)state;
	struct st_kubelet_path kp;
	assert_int_equal(st_kubelet_path_parse(S("/exec/default/demo/loop"), &kp), 0);
	assert_int_equal(kp.kind, ST_KUBELET_EXEC);
	assert_seg(kp.namespace_, "default");
	assert_seg(kp.pod, "demo");
	assert_seg(kp.container, "loop");
	assert_int_equal(kp.uid.len, 0);
	assert_string_equal(st_kubelet_kind_name(kp.kind), "exec");
	assert_string_equal(st_kubelet_kind_label(kp.kind), "exec");
	assert_string_equal(st_kubelet_kind_label(ST_KUBELET_PORT_FORWARD), "portforward");
	assert_string_equal(st_kubelet_kind_label(ST_KUBELET_CONTAINER_LOGS), "logs");
	assert_string_equal(st_kubelet_kind_label((enum st_kubelet_kind)99), "other");

	assert_int_equal(st_kubelet_path_parse(S("/attach/ns/p/1234-abcd/c"), &kp), 0);
	assert_int_equal(kp.kind, ST_KUBELET_ATTACH);
	assert_seg(kp.uid, "1234-abcd");
	assert_seg(kp.container, "c");

	assert_int_equal(st_kubelet_path_parse(S("/portForward/default/demo"), &kp), 0);
	assert_int_equal(kp.kind, ST_KUBELET_PORT_FORWARD);
	assert_int_equal(kp.container.len, 0);
	assert_int_equal(st_kubelet_path_parse(S("/portForward/default/demo/uid-1"), &kp), 0);
	assert_seg(kp.uid, "uid-1");

	assert_int_equal(st_kubelet_path_parse(S("/containerLogs/kube-system/etcd-0/etcd"), &kp),
	                 0);
	assert_int_equal(kp.kind, ST_KUBELET_CONTAINER_LOGS);
	assert_seg(kp.container, "etcd");
	assert_int_equal(st_kubelet_path_parse(S("/run/ns/pod/c"), &kp), 0);
	assert_int_equal(kp.kind, ST_KUBELET_RUN);

	static const char *const other[] = {"/metrics",
	                                    "/metrics/cadvisor",
	                                    "/stats/summary",
	                                    "/pods",
	                                    "/healthz",
	                                    "/logs/",
	                                    "/",
	                                    "",
	                                    "metrics",
	                                    "/execs/a/b/c",
	                                    "/configz"};
	for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) {
		assert_int_equal(st_kubelet_path_parse(other[i], strlen(other[i]), &kp), 0);
		assert_int_equal(kp.kind, ST_KUBELET_OTHER);
	}
	static const char *const bad[] = {
	        "/exec",
	        "/exec/",
	        "/exec/ns/pod",
	        "/exec/ns/pod/",
	        "/exec/ns//c",
	        "/exec/ns/pod/uid/c/extra",
	        "/exec/../pod/c",
	        "/exec/ns/./c",
	        "/exec/ns/p%2Fx/c",
	        "/exec/ns/p od/c",
	        "/containerLogs/ns/pod/uid/c",
	        "/portForward/ns",
	        "/portForward/ns/pod/uid/x",
	        "/attach/a/b/c/d/e/f/g",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		if (st_kubelet_path_parse(bad[i], strlen(bad[i]), &kp) != -EBADMSG)
			fail_msg("accepted %s", bad[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_iterate),       cmocka_unit_test(test_pct_decode),
	        cmocka_unit_test(test_get_and_count), cmocka_unit_test(test_k8s_bool),
	        cmocka_unit_test(test_parse_u64),     cmocka_unit_test(test_kubelet_paths),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
