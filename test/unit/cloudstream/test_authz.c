/* Unit tests for the kubelet's authentication and authorization decisions
 * (cloudstream/src/authz.h): request → attributes, review bodies, answer parsing, the cache. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "authz.h"
#include "failmalloc.h"
#include "guard.h"

/* ---- request → attributes ---------------------------------------------------------------- */

static void attrs(const char *method, const char *path, int want_rc, const char *verb,
                  const char *sub0, const char *sub1)
{
	struct cs_authz_attrs a;
	int rc = cs_authz_attrs_of(method, strlen(method), path, strlen(path), &a);
	assert_int_equal(rc, want_rc);
	if (rc < 0)
		return;
	assert_string_equal(a.verb, verb);
	assert_string_equal(a.subresource[0], sub0);
	if (sub1) {
		assert_int_equal(a.n, 2);
		assert_string_equal(a.subresource[1], sub1);
	} else {
		assert_int_equal(a.n, 1);
	}
}

static void test_cs_authz_attrs_of__kubelet_table(void **state)
{
	(void)state;
	/* verbs: the kubelet's switch, HEAD and others have none */
	attrs("GET", "/metrics", 0, "get", "metrics", NULL);
	attrs("POST", "/exec/ns/pod/c", 0, "create", "proxy", NULL);
	attrs("PUT", "/x", 0, "update", "proxy", NULL);
	attrs("PATCH", "/x", 0, "patch", "proxy", NULL);
	attrs("DELETE", "/x", 0, "delete", "proxy", NULL);
	attrs("HEAD", "/metrics", 0, "", "metrics", NULL);
	attrs("OPTIONS", "/", 0, "", "proxy", NULL);
	attrs("get", "/metrics", 0, "", "metrics", NULL); /* Go's methods are case-sensitive */
	/* websocket upgrades of exec/attach/portForward are GET: get on proxy */
	attrs("GET", "/exec/ns/pod/c?command=sh", 0, "get", "proxy", NULL);
	attrs("GET", "/attach/ns/pod/c", 0, "get", "proxy", NULL);
	attrs("POST", "/portForward/ns/pod", 0, "create", "proxy", NULL);
	attrs("GET", "/containerLogs/ns/pod/c", 0, "get", "proxy", NULL);
	/* subpaths */
	attrs("GET", "/metrics/cadvisor", 0, "get", "metrics", NULL);
	attrs("GET", "/metrics/resource", 0, "get", "metrics", NULL);
	attrs("GET", "/metricsx", 0, "get", "proxy", NULL);
	attrs("GET", "/stats/summary", 0, "get", "stats", NULL);
	attrs("GET", "/stats", 0, "get", "stats", NULL);
	attrs("GET", "/statsx", 0, "get", "proxy", NULL);
	attrs("GET", "/logs/", 0, "get", "log", NULL);
	attrs("GET", "/logs/syslog", 0, "get", "log", NULL);
	attrs("POST", "/checkpoint/ns/pod/c", 0, "create", "checkpoint", NULL);
	/* fine-grained (KubeletFineGrainedAuthz): specific first, then proxy */
	attrs("GET", "/pods", 0, "get", "pods", "proxy");
	attrs("GET", "/pods/", 0, "get", "pods", "proxy");
	attrs("GET", "/podsx", 0, "get", "proxy", NULL);
	attrs("GET", "/runningpods/", 0, "get", "pods", "proxy");
	attrs("GET", "/runningpods", 0, "get", "pods", "proxy");
	attrs("GET", "/healthz", 0, "get", "healthz", "proxy");
	attrs("GET", "/healthz/syncloop", 0, "get", "healthz", "proxy");
	attrs("GET", "/configz", 0, "get", "configz", "proxy");
	attrs("GET", "/statusz", 0, "get", "statusz", "proxy");
	/* the path is decoded as Go's URL.Path */
	attrs("GET", "/%6detrics", 0, "get", "metrics", NULL);
	attrs("GET", "/metrics%2Fcadvisor", 0, "get", "metrics", NULL);
	attrs("GET", "/%", -EBADMSG, NULL, NULL, NULL);
	attrs("GET", "/%4", -EBADMSG, NULL, NULL, NULL);
	attrs("GET", "/%zz", -EBADMSG, NULL, NULL, NULL);
	/* dot segments: proxy alone, whatever the prefix */
	attrs("GET", "/metrics/../exec/a/b/c", 0, "get", "proxy", NULL);
	attrs("GET", "/metrics/%2e%2e/exec", 0, "get", "proxy", NULL);
	attrs("GET", "/stats/./x", 0, "get", "proxy", NULL);
	attrs("GET", "/stats/..x", 0, "get", "stats", NULL);
	attrs("GET", "", 0, "get", "proxy", NULL);
}

static void test_cs_authz_attrs_of__long_path(void **state)
{
	(void)state;
	size_t n = 9000;
	char *p = malloc(n + 1);
	memset(p, 'a', n);
	memcpy(p, "/metrics/", 9);
	p[n] = '\0';
	attrs("GET", p, 0, "get", "proxy", NULL); /* over the decode limit: proxy alone */
	free(p);
	/* a guard-page path: nothing is read past its end */
	const char *g = "/stats/summary";
	struct guard_buf gb;
	assert_int_equal(guard_new(&gb, g, strlen(g)), 0);
	struct cs_authz_attrs a;
	assert_int_equal(cs_authz_attrs_of("GET", 3, (const char *)gb.data, gb.len, &a), 0);
	assert_string_equal(a.subresource[0], "stats");
	guard_free(&gb);
}

static void test_cs_authz_forbidden_message__kubelet_text(void **state)
{
	(void)state;
	struct cs_authz_attrs a;
	char msg[256];
	cs_authz_attrs_of("POST", 4, "/exec/a/b/c", 11, &a);
	cs_authz_forbidden_message("system:node:edge-1", &a, msg, sizeof msg);
	assert_string_equal(msg, "Forbidden (user=system:node:edge-1, verb=create, resource=nodes, "
	                         "subresource(s)=[proxy])");
	cs_authz_attrs_of("GET", 3, "/pods", 5, &a);
	cs_authz_forbidden_message("u", &a, msg, sizeof msg);
	assert_string_equal(msg, "Forbidden (user=u, verb=get, resource=nodes, "
	                         "subresource(s)=[pods proxy])");
	assert_int_equal(cs_authz_forbidden_message("u", &a, msg, 10), 9);
	assert_string_equal(msg, "Forbidden");
}

/* ---- credentials and users --------------------------------------------------------------- */

static int bearer(const char *v, char *tok)
{
	const char *t;
	size_t n;
	int rc = cs_authz_bearer(v, strlen(v), &t, &n);
	if (rc == 0) {
		memcpy(tok, t, n);
		tok[n] = '\0';
	}
	return rc;
}

static void test_cs_authz_bearer__forms(void **state)
{
	(void)state;
	char tok[64];
	assert_int_equal(bearer("Bearer abc.def", tok), 0);
	assert_string_equal(tok, "abc.def");
	assert_int_equal(bearer("bearer abc", tok), 0);
	assert_string_equal(tok, "abc");
	assert_int_equal(bearer(" \t BEARER abc \r\n", tok), 0);
	assert_string_equal(tok, "abc");
	/* Go's SplitN(auth, " ", 3): the second part is the token */
	assert_int_equal(bearer("Bearer a b", tok), 0);
	assert_string_equal(tok, "a");
	assert_int_equal(bearer("Bearer  abc", tok), -ENOENT); /* an empty second part */
	assert_int_equal(bearer("Bearer", tok), -ENOENT);
	assert_int_equal(bearer("Bearer ", tok), -ENOENT);
	assert_int_equal(bearer("Bearer\tabc", tok), -ENOENT);
	assert_int_equal(bearer("Basic YWxhZGRpbjpvcGVuc2VzYW1l", tok), -ENOENT);
	assert_int_equal(bearer("Bearerabc", tok), -ENOENT);
	size_t n = CS_AUTHZ_MAX_TOKEN_BYTES + 8;
	char *big = malloc(n + 1);
	memcpy(big, "Bearer ", 7);
	memset(big + 7, 'x', n - 7);
	big[n] = '\0';
	const char *t;
	size_t tl;
	assert_int_equal(cs_authz_bearer(big, n, &t, &tl), -EMSGSIZE);
	assert_int_equal(cs_authz_bearer(big, 7 + CS_AUTHZ_MAX_TOKEN_BYTES, &t, &tl), 0);
	free(big);
}

static void test_cs_authz_user_from_cert__groups(void **state)
{
	(void)state;
	struct cs_authz_user *u = malloc(sizeof *u);
	const char *orgs[] = {"system:nodes"};
	assert_int_equal(cs_authz_user_from_cert("system:node:edge-1", orgs, 1, u), 0);
	assert_string_equal(u->name, "system:node:edge-1");
	assert_string_equal(u->json, "\"user\":\"system:node:edge-1\",\"groups\":[\"system:nodes\","
	                             "\"system:authenticated\"]");
	assert_int_equal(u->json_len, strlen(u->json));
	const char *already[] = {"system:authenticated", "a/b"};
	assert_int_equal(cs_authz_user_from_cert("x\"y", already, 2, u), 0);
	assert_string_equal(u->json, "\"user\":\"x\\\"y\",\"groups\":[\"system:authenticated\","
	                             "\"a/b\"]");
	assert_int_equal(cs_authz_user_from_cert("", NULL, 0, u), -EINVAL);
	free(u);
}

/* ---- bodies ------------------------------------------------------------------------------- */

static void test_cs_authz_token_review_body__exact(void **state)
{
	(void)state;
	char out[512];
	ssize_t n = cs_authz_token_review_body("abc\"\\\x01", 6, out, sizeof out);
	const char *want = "{\"kind\":\"TokenReview\",\"apiVersion\":\"authentication.k8s.io/v1\","
	                   "\"metadata\":{\"creationTimestamp\":null},\"spec\":{\"token\":"
	                   "\"abc\\\"\\\\\\u0001\"},\"status\":{\"user\":{}}}";
	assert_int_equal(n, (ssize_t)strlen(want));
	assert_string_equal(out, want);
	for (size_t cap = 0; cap <= strlen(want); cap++)
		assert_int_equal(cs_authz_token_review_body("abc\"\\\x01", 6, out, cap), -EMSGSIZE);
}

static void test_cs_authz_sar_body__exact(void **state)
{
	(void)state;
	struct cs_authz_user *u = malloc(sizeof *u);
	const char *orgs[] = {"system:masters"};
	assert_int_equal(cs_authz_user_from_cert("kube-apiserver-kubelet-client", orgs, 1, u), 0);
	char out[1024];
	ssize_t n = cs_authz_sar_body(u, "get", "proxy", "edge-1", out, sizeof out);
	const char *want =
	        "{\"kind\":\"SubjectAccessReview\",\"apiVersion\":\"authorization.k8s.io/v1\","
	        "\"metadata\":{\"creationTimestamp\":null},\"spec\":{\"resourceAttributes\":{"
	        "\"verb\":\"get\",\"version\":\"v1\",\"resource\":\"nodes\",\"subresource\":"
	        "\"proxy\",\"name\":\"edge-1\"},\"user\":\"kube-apiserver-kubelet-client\","
	        "\"groups\":[\"system:masters\",\"system:authenticated\"]},\"status\":{"
	        "\"allowed\":false}}";
	assert_int_equal(n, (ssize_t)strlen(want));
	assert_string_equal(out, want);
	for (size_t cap = 0; cap <= strlen(want); cap++)
		assert_int_equal(cs_authz_sar_body(u, "get", "proxy", "edge-1", out, cap),
		                 -EMSGSIZE);
	free(u);
}

/* ---- answers ------------------------------------------------------------------------------ */

static int review(const char *body, bool *ok, struct cs_authz_user *u, char *reason)
{
	return cs_authz_parse_token_review(body, strlen(body), ok, u, reason, 64);
}

static void test_cs_authz_parse_token_review__authenticated(void **state)
{
	(void)state;
	struct cs_authz_user *u = malloc(sizeof *u);
	char reason[64];
	bool ok;
	const char *body =
	        "{\"kind\":\"TokenReview\",\"apiVersion\":\"authentication.k8s.io/v1\","
	        "\"metadata\":{\"creationTimestamp\":null},\"spec\":{\"token\":\"t\"},"
	        "\"status\":{\"authenticated\":true,\"user\":{\"username\":"
	        "\"system:serviceaccount:monitoring:prometheus\",\"uid\":\"42\",\"groups\":["
	        "\"system:serviceaccounts\",\"system:serviceaccounts:monitoring\","
	        "\"system:authenticated\"],\"extra\":{\"authentication.kubernetes.io/pod-name\":["
	        "\"prom-0\"]}},\"audiences\":[\"https://kubernetes.default.svc\"]}}";
	assert_int_equal(review(body, &ok, u, reason), 0);
	assert_true(ok);
	assert_string_equal(u->name, "system:serviceaccount:monitoring:prometheus");
	assert_string_equal(
	        u->json, "\"user\":\"system:serviceaccount:monitoring:prometheus\",\"groups\":["
	                 "\"system:serviceaccounts\",\"system:serviceaccounts:monitoring\","
	                 "\"system:authenticated\"],\"extra\":{"
	                 "\"authentication.kubernetes.io/pod-name\":[\"prom-0\"]},\"uid\":\"42\"");
	/* no groups: system:authenticated is added */
	assert_int_equal(
	        review("{\"status\":{\"authenticated\":true,\"user\":{\"username\":\"a\"}}}", &ok,
	               u, reason),
	        0);
	assert_true(ok);
	assert_string_equal(u->json, "\"user\":\"a\",\"groups\":[\"system:authenticated\"]");
	free(u);
}

static void test_cs_authz_parse_token_review__refusals(void **state)
{
	(void)state;
	struct cs_authz_user *u = malloc(sizeof *u);
	char reason[64];
	bool ok = true;
	assert_int_equal(review("{\"kind\":\"TokenReview\",\"status\":{\"authenticated\":false,"
	                        "\"error\":\"token expired\"}}",
	                        &ok, u, reason),
	                 0);
	assert_false(ok);
	assert_string_equal(reason, "token expired");
	assert_int_equal(
	        review("{\"kind\":\"TokenReview\",\"status\":{\"user\":{}}}", &ok, u, reason), 0);
	assert_false(ok);
	assert_int_equal(review("{\"kind\":\"TokenReview\"}", &ok, u, reason), 0);
	assert_false(ok);
	/* malformed */
	const char *bad[] = {
	        "",
	        "[]",
	        "not json",
	        "{\"kind\":\"Status\",\"status\":{\"authenticated\":true}}",
	        "{\"status\":{\"authenticated\":\"yes\"}}",
	        "{\"status\":{\"authenticated\":true}}",
	        "{\"status\":{\"authenticated\":true,\"user\":{}}}",
	        "{\"status\":{\"authenticated\":true,\"user\":{\"username\":\"\"}}}",
	        "{\"status\":{\"authenticated\":true,\"user\":{\"username\":\"a\",\"groups\":[1]}}"
	        "}",
	        "{\"status\":{\"authenticated\":true,\"user\":{\"username\":\"a\",\"extra\":{"
	        "\"k\":\"v\"}}}}",
	        "{\"status\":[]}",
	        "{\"status\":{\"authenticated\":true,\"user\":{\"username\":\"a\"}}} trailing",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		ok = true;
		assert_int_equal(review(bad[i], &ok, u, reason), -EBADMSG);
		assert_false(ok);
	}
	/* every proper prefix of a good answer is malformed, never a crash or a success */
	const char *good = "{\"status\":{\"authenticated\":true,\"user\":{\"username\":\"a\"}}}";
	for (size_t n = 0; n < strlen(good); n++) {
		struct guard_buf g;
		assert_int_equal(guard_new(&g, good, n), 0);
		assert_int_equal(
		        cs_authz_parse_token_review((const char *)g.data, n, &ok, u, reason, 64),
		        -EBADMSG);
		assert_false(ok);
		guard_free(&g);
	}
	/* a user over the limit */
	size_t big = CS_AUTHZ_MAX_USER_JSON + 100;
	char *b = malloc(big + 100);
	int k = snprintf(b, big + 100,
	                 "{\"status\":{\"authenticated\":true,\"user\":{\"username\":\"");
	memset(b + k, 'u', big);
	snprintf(b + k + big, 100, "\"}}}");
	assert_int_equal(review(b, &ok, u, reason), -EMSGSIZE);
	assert_false(ok);
	free(b);
	free(u);
}

static void test_cs_authz_parse_sar__verdicts(void **state)
{
	(void)state;
	enum cs_authz_verdict v;
	char reason[64];
#define SAR(s) cs_authz_parse_sar(s, strlen(s), &v, reason, sizeof reason)
	assert_int_equal(SAR("{\"kind\":\"SubjectAccessReview\",\"apiVersion\":"
	                     "\"authorization.k8s.io/v1\",\"status\":{\"allowed\":true,\"reason\":"
	                     "\"RBAC: allowed by ClusterRoleBinding\"}}"),
	                 0);
	assert_int_equal(v, CS_AUTHZ_ALLOW);
	assert_string_equal(reason, "RBAC: allowed by ClusterRoleBinding");
	assert_int_equal(SAR("{\"status\":{\"allowed\":false,\"denied\":true,\"reason\":\"no\"}}"),
	                 0);
	assert_int_equal(v, CS_AUTHZ_DENY);
	assert_int_equal(SAR("{\"status\":{\"allowed\":false}}"), 0);
	assert_int_equal(v, CS_AUTHZ_NO_OPINION);
	assert_string_equal(reason, "");
	assert_int_equal(SAR("{\"status\":{\"allowed\":false,\"evaluationError\":\"e\"}}"), 0);
	assert_string_equal(reason, "e");
	assert_int_equal(SAR("{}"), 0);
	assert_int_equal(v, CS_AUTHZ_NO_OPINION);
	assert_int_equal(SAR("{\"status\":{\"allowed\":1}}"), -EBADMSG);
	assert_int_equal(v, CS_AUTHZ_NO_OPINION);
	assert_int_equal(SAR("{\"kind\":\"TokenReview\",\"status\":{\"allowed\":true}}"), -EBADMSG);
	assert_int_equal(v, CS_AUTHZ_NO_OPINION);
	assert_int_equal(SAR("{\"status\":{\"allowed\":true}"), -EBADMSG);
	assert_int_equal(SAR("{\"status\":{\"reason\":5}}"), -EBADMSG);
	/* deeper than the parser's depth limit */
	assert_int_equal(SAR("{\"a\":[[[[[[[[[[[[1]]]]]]]]]]]]}"), -EBADMSG);
#undef SAR
}

/* ---- the cache ---------------------------------------------------------------------------- */

static void key_of(uint8_t key[CS_AUTHZ_KEY_BYTES], unsigned i)
{
	memset(key, 0, CS_AUTHZ_KEY_BYTES);
	memcpy(key, &i, sizeof i);
	key[31] = (uint8_t)(i * 7);
}

static void test_cs_authz_cache__hit_pending_expiry(void **state)
{
	(void)state;
	struct cs_authz_cache *c;
	assert_int_equal(cs_authz_cache_new(&c, 16), 0);
	uint8_t k[CS_AUTHZ_KEY_BYTES];
	key_of(k, 1);
	bool ok = false;
	const struct cs_authz_user *u = NULL;
	uint64_t job = 0;
	assert_int_equal(cs_authz_cache_get(c, k, 0, &ok, &u, &job), CS_AUTHZ_MISS);
	assert_int_equal(cs_authz_cache_pending(c, k, 0), -EINVAL);
	assert_int_equal(cs_authz_cache_pending(c, k, 9), 0);
	assert_int_equal(cs_authz_cache_get(c, k, 0, &ok, &u, &job), CS_AUTHZ_PENDING);
	assert_int_equal(job, 9);
	struct cs_authz_user *user = malloc(sizeof *user);
	assert_int_equal(cs_authz_user_from_cert("alice", NULL, 0, user), 0);
	assert_int_equal(cs_authz_cache_put(c, k, true, user, 1000), 0);
	free(user);
	assert_int_equal(cs_authz_cache_get(c, k, 999, &ok, &u, &job), CS_AUTHZ_HIT);
	assert_true(ok);
	assert_non_null(u);
	assert_string_equal(u->name, "alice");
	assert_string_equal(u->json, "\"user\":\"alice\",\"groups\":[\"system:authenticated\"]");
	assert_int_equal(cs_authz_cache_get(c, k, 1000, &ok, &u, &job), CS_AUTHZ_MISS);
	/* a denial without a user */
	assert_int_equal(cs_authz_cache_put(c, k, false, NULL, 2000), 0);
	u = (void *)1;
	assert_int_equal(cs_authz_cache_get(c, k, 1500, &ok, &u, &job), CS_AUTHZ_HIT);
	assert_false(ok);
	assert_null(u);
	/* expiry 0: an error, forgotten (pending or not) */
	assert_int_equal(cs_authz_cache_pending(c, k, 10), 0);
	assert_int_equal(cs_authz_cache_put(c, k, false, NULL, 0), 0);
	assert_int_equal(cs_authz_cache_get(c, k, 0, &ok, &u, &job), CS_AUTHZ_MISS);
	cs_authz_cache_free(c);
	cs_authz_cache_free(NULL);
	assert_int_equal(cs_authz_cache_new(&c, 0), -EINVAL);
}

static void test_cs_authz_cache__bounded_never_evicts_pending(void **state)
{
	(void)state;
	struct cs_authz_cache *c;
	assert_int_equal(cs_authz_cache_new(&c, 8), 0); /* 8 slots: one probe window */
	uint8_t k[CS_AUTHZ_KEY_BYTES];
	bool ok;
	uint64_t job;
	for (unsigned i = 0; i < 8; i++) {
		key_of(k, i);
		assert_int_equal(cs_authz_cache_pending(c, k, 100 + i), 0);
	}
	key_of(k, 8);
	assert_int_equal(cs_authz_cache_pending(c, k, 200), -ENOSPC);
	assert_int_equal(cs_authz_cache_put(c, k, true, NULL, 50), -ENOSPC);
	for (unsigned i = 0; i < 8; i++) { /* every call in flight is still known */
		key_of(k, i);
		assert_int_equal(cs_authz_cache_get(c, k, 0, &ok, NULL, &job), CS_AUTHZ_PENDING);
		assert_int_equal(job, 100 + i);
		assert_int_equal(cs_authz_cache_put(c, k, true, NULL, 1000 + i), 0);
	}
	/* full of answers: a new one evicts the one closest to expiry (key 0) */
	key_of(k, 8);
	assert_int_equal(cs_authz_cache_put(c, k, true, NULL, 5000), 0);
	key_of(k, 0);
	assert_int_equal(cs_authz_cache_get(c, k, 0, &ok, NULL, &job), CS_AUTHZ_MISS);
	key_of(k, 1);
	assert_int_equal(cs_authz_cache_get(c, k, 0, &ok, NULL, &job), CS_AUTHZ_HIT);
	/* many more keys than slots: memory stays fixed (LeakSanitizer checks the users) */
	struct cs_authz_user *user = malloc(sizeof *user);
	assert_int_equal(cs_authz_user_from_cert("bob", NULL, 0, user), 0);
	for (unsigned i = 0; i < 1000; i++) {
		key_of(k, 1000 + i);
		assert_int_equal(cs_authz_cache_put(c, k, true, user, 10000 + i), 0);
	}
	free(user);
	cs_authz_cache_free(c);
}

static void test_cs_authz_cache__failmalloc(void **state)
{
	(void)state;
	struct cs_authz_user *user = malloc(sizeof *user);
	assert_int_equal(cs_authz_user_from_cert("carol", NULL, 0, user), 0);
	for (int n = 0;; n++) {
		struct cs_authz_cache *c = NULL;
		failmalloc_fail_after(n);
		int rc = cs_authz_cache_new(&c, 16);
		uint8_t k[CS_AUTHZ_KEY_BYTES];
		key_of(k, 3);
		if (rc == 0)
			rc = cs_authz_cache_put(c, k, true, user, 100);
		failmalloc_off();
		cs_authz_cache_free(c);
		if (rc == 0)
			break;
		assert_int_equal(rc, -ENOMEM);
	}
	free(user);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_cs_authz_attrs_of__kubelet_table),
	        cmocka_unit_test(test_cs_authz_attrs_of__long_path),
	        cmocka_unit_test(test_cs_authz_forbidden_message__kubelet_text),
	        cmocka_unit_test(test_cs_authz_bearer__forms),
	        cmocka_unit_test(test_cs_authz_user_from_cert__groups),
	        cmocka_unit_test(test_cs_authz_token_review_body__exact),
	        cmocka_unit_test(test_cs_authz_sar_body__exact),
	        cmocka_unit_test(test_cs_authz_parse_token_review__authenticated),
	        cmocka_unit_test(test_cs_authz_parse_token_review__refusals),
	        cmocka_unit_test(test_cs_authz_parse_sar__verdicts),
	        cmocka_unit_test(test_cs_authz_cache__hit_pending_expiry),
	        cmocka_unit_test(test_cs_authz_cache__bounded_never_evicts_pending),
	        cmocka_unit_test(test_cs_authz_cache__failmalloc),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
