/* Unit tests for kubelet streaming request → CRI call (edgestream/src/cri_plan.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cri_plan.h"

static int plan(struct es_cri_plan *p, const char *path, const char *query, char *why)
{
	struct st_kubelet_path kp;
	assert_int_equal(st_kubelet_path_parse(path, strlen(path), &kp), 0);
	return es_cri_plan_make(p, &kp, query, query ? strlen(query) : 0, why, 128);
}

static void test_es_cri_plan__exec(void **state)
{
	(void)state;
	static struct es_cri_plan p;
	char why[128];
	assert_int_equal(plan(&p, "/exec/default/web/uid-1/app",
	                      "command=sh&command=-c&command=echo%20a%26b&input=1&output=1&tty=1",
	                      why),
	                 0);
	assert_int_equal(p.kind, ST_KUBELET_EXEC);
	assert_string_equal(p.namespace_, "default");
	assert_string_equal(p.pod, "web");
	assert_string_equal(p.uid, "uid-1");
	assert_string_equal(p.container, "app");
	assert_int_equal(p.ncmd, 3);
	assert_string_equal(p.cmd[2], "echo a&b");
	assert_true(p.in && p.out && p.tty && !p.err);
	/* a copy works once re-pointed */
	static struct es_cri_plan q;
	memcpy(&q, &p, sizeof q);
	es_cri_plan_fix(&q);
	assert_ptr_equal(q.cmd[0], q.cmd_bytes);
	assert_string_equal(q.cmd[1], "-c");
}

static void test_es_cri_plan__kubelet_refusals(void **state)
{
	(void)state;
	static struct es_cri_plan p;
	char why[128];
	assert_int_equal(plan(&p, "/exec/ns/pod/c", "output=1", why), -EINVAL);
	assert_string_equal(why, "missing required command parameter");
	assert_int_equal(plan(&p, "/exec/ns/pod/c", "command=ls", why), -EINVAL);
	assert_non_null(strstr(why, "at least 1 of stdin, stdout, stderr"));
	assert_int_equal(plan(&p, "/attach/ns/pod/c", "output=1&error=1&tty=true", why), -EINVAL);
	assert_non_null(strstr(why, "tty and stderr"));
	assert_int_equal(plan(&p, "/attach/ns/pod/c", "output=0&error=false", why), -EINVAL);
	assert_int_equal(plan(&p, "/attach/ns/pod/c", "output", why), 0); /* bare key is true */
	assert_true(p.out);
	assert_int_equal(plan(&p, "/exec/ns/pod/c", "command=a%00b&output=1", why), -EINVAL);
	assert_int_equal(plan(&p, "/exec/ns/pod/c", "command=%zz&output=1", why), -EINVAL);
	assert_int_equal(plan(&p, "/run/ns/pod/c", "cmd=ls", why), -ENOTSUP);
	/* containerLogs: the names only (the log options are cri/logs.h's) */
	assert_int_equal(plan(&p, "/containerLogs/ns/pod/c", "tailLines=x", why), 0);
	assert_int_equal(p.kind, ST_KUBELET_CONTAINER_LOGS);
	assert_string_equal(p.namespace_, "ns");
	assert_string_equal(p.pod, "pod");
	assert_string_equal(p.container, "c");
}

static void test_es_cri_plan__port_forward_and_limits(void **state)
{
	(void)state;
	static struct es_cri_plan p;
	char why[128];
	assert_int_equal(plan(&p, "/portForward/ns/pod", "port=8080&port=53", why), 0);
	assert_int_equal(p.nports, 2);
	assert_int_equal(p.ports[0], 8080);
	assert_int_equal(plan(&p, "/portForward/ns/pod", NULL, why), 0);
	assert_int_equal(p.nports, 0);
	assert_int_equal(plan(&p, "/portForward/ns/pod", "port=0", why), -EINVAL);
	assert_int_equal(plan(&p, "/portForward/ns/pod", "port=65536", why), -EINVAL);
	static char q[40000];
	size_t n = 0;
	for (int i = 0; i < 300; i++)
		n += (size_t)snprintf(q + n, sizeof q - n, "command=x&");
	snprintf(q + n, sizeof q - n, "output=1");
	assert_int_equal(plan(&p, "/exec/ns/pod/c", q, why), -EMSGSIZE); /* over 256 arguments */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_es_cri_plan__exec),
	        cmocka_unit_test(test_es_cri_plan__kubelet_refusals),
	        cmocka_unit_test(test_es_cri_plan__port_forward_and_limits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
