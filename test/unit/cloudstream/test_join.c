/* Unit tests for join tokens and signing-request checks (cloudstream/src/join.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "failmalloc.h"
#include "guard.h"
#include "join.h"

#define HASH_A "sha256:00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF"

static int parse(const char *text, struct cs_join_tokens **t, struct cs_join_error *err)
{
	return cs_join_tokens_parse(text, strlen(text), t, err);
}

static void test_cs_join_tokens_parse__entries_and_comments(void **state)
{
	(void)state;
	const char *text =
	        "# join tokens\n"
	        "\n"
	        "token k3x9qa " HASH_A " expires=1764003600 uses=5 node=edge-17 # site 4\r\n"
	        "\ttoken abcdef " HASH_A " uses=1 expires=1\n"
	        "token 000000 " HASH_A " expires=9223372036854775807 uses=1000000"; /* no NL */
	struct cs_join_tokens *t = NULL;
	struct cs_join_error err;
	assert_int_equal(parse(text, &t, &err), 0);
	assert_int_equal(t->n, 3);
	const struct cs_join_token *k = cs_join_tokens_find(t, "k3x9qa");
	assert_non_null(k);
	assert_string_equal(k->node, "edge-17");
	assert_int_equal(k->expires, 1764003600);
	assert_int_equal(k->uses, 5);
	assert_int_equal(k->hash[0], 0x00);
	assert_int_equal(k->hash[31], 0xff);
	assert_int_equal(k->hash[15], 0xff);
	const struct cs_join_token *a = cs_join_tokens_find(t, "abcdef");
	assert_non_null(a);
	assert_string_equal(a->node, "");
	assert_int_equal(a->expires, 1);
	assert_int_equal(cs_join_tokens_find(t, "000000")->uses, 1000000);
	assert_null(cs_join_tokens_find(t, "zzzzzz"));
	assert_null(cs_join_tokens_find(t, "abcde"));
	cs_join_tokens_free(t);
	/* an empty file is no tokens */
	assert_int_equal(parse("", &t, &err), 0);
	assert_int_equal(t->n, 0);
	assert_null(cs_join_tokens_find(t, "abcdef"));
	cs_join_tokens_free(t);
	cs_join_tokens_free(NULL);
}

static void test_cs_join_tokens_parse__bad_lines(void **state)
{
	(void)state;
	static const struct {
		const char *text;
		size_t line;
	} bad[] = {
	        {"tokens abcdef " HASH_A " expires=1 uses=1\n", 1},
	        {"\ntoken ABCDEF " HASH_A " expires=1 uses=1\n", 2},
	        {"token abcde " HASH_A " expires=1 uses=1\n", 1},
	        {"token abcdefg " HASH_A " expires=1 uses=1\n", 1},
	        {"token abcdef sha256:0011 expires=1 uses=1\n", 1},
	        {"token abcdef sha1:" HASH_A " expires=1 uses=1\n", 1},
	        {"token abcdef " HASH_A " uses=1\n", 1},                     /* no expiry */
	        {"token abcdef " HASH_A " expires=1\n", 1},                  /* no uses */
	        {"token abcdef " HASH_A " expires=0 uses=1\n", 1},           /* 0 */
	        {"token abcdef " HASH_A " expires=1 uses=0\n", 1},           /* 0 uses */
	        {"token abcdef " HASH_A " expires=1 uses=1000001\n", 1},     /* over */
	        {"token abcdef " HASH_A " expires=1 uses=1 uses=2\n", 1},    /* twice */
	        {"token abcdef " HASH_A " expires=1 uses=1 node=Edge\n", 1}, /* not DNS-1123 */
	        {"token abcdef " HASH_A " expires=1 uses=1 node=a,b\n", 1},
	        {"token abcdef " HASH_A " expires=1 uses=1 node=a node=b\n", 1},
	        {"token abcdef " HASH_A " expires=1x uses=1\n", 1},
	        {"token abcdef " HASH_A " expires=99999999999999999999 uses=1\n", 1},
	        {"token abcdef " HASH_A " expires=1 uses=1 ttl=5\n", 1},
	        {"token abcdef "
	         "sha256:g0112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
	         " expires=1 uses=1\n",
	         1},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct cs_join_tokens *t = (void *)1;
		struct cs_join_error err;
		assert_int_equal(parse(bad[i].text, &t, &err), -EBADMSG);
		assert_null(t);
		assert_non_null(err.why);
		assert_int_equal(err.line, bad[i].line);
	}
	/* an id twice */
	struct cs_join_tokens *t;
	struct cs_join_error err;
	assert_int_equal(parse("token abcdef " HASH_A " expires=1 uses=1\n"
	                       "token abcdef " HASH_A " expires=2 uses=1\n",
	                       &t, &err),
	                 -EBADMSG);
	assert_string_equal(err.why, "a token id is listed twice");
}

static void test_cs_join_tokens_parse__limits(void **state)
{
	(void)state;
	struct cs_join_tokens *t;
	struct cs_join_error err;
	char *big = calloc(1, CS_JOIN_MAX_FILE_BYTES + 2);
	memset(big, '#', CS_JOIN_MAX_FILE_BYTES + 1);
	assert_int_equal(cs_join_tokens_parse(big, CS_JOIN_MAX_FILE_BYTES + 1, &t, &err),
	                 -EMSGSIZE);
	assert_int_equal(cs_join_tokens_parse(big, CS_JOIN_MAX_FILE_BYTES, &t, &err), 0);
	cs_join_tokens_free(t);
	free(big);
	/* a node name of 253 bytes is one; 254 is not */
	char line[512], name[256];
	memset(name, 'a', 254);
	name[254] = '\0';
	snprintf(line, sizeof line, "token abcdef %s expires=1 uses=1 node=%.253s\n", HASH_A, name);
	assert_int_equal(parse(line, &t, &err), 0);
	assert_int_equal(strlen(t->v[0].node), 253);
	cs_join_tokens_free(t);
	snprintf(line, sizeof line, "token abcdef %s expires=1 uses=1 node=%s\n", HASH_A, name);
	assert_int_equal(parse(line, &t, &err), -EBADMSG);
}

static void test_cs_join_tokens_parse__guard_page(void **state)
{
	(void)state;
	const char *text = "token abcdef " HASH_A " expires=12 uses=3 node=n1";
	for (size_t len = 0; len <= strlen(text); len++) {
		struct guard_buf g;
		assert_int_equal(guard_new(&g, text, len), 0);
		struct cs_join_tokens *t = NULL;
		struct cs_join_error err;
		int rc = cs_join_tokens_parse((const char *)g.data, g.len, &t, &err);
		assert_true(rc == 0 || rc == -EBADMSG);
		if (rc == 0)
			cs_join_tokens_free(t);
		guard_free(&g);
	}
}

static void test_cs_join_tokens_parse__alloc_failure(void **state)
{
	(void)state;
	const char *text = "token abcdef " HASH_A " expires=1 uses=1\n";
	for (int n = 0;; n++) {
		struct cs_join_tokens *t = NULL;
		struct cs_join_error err;
		failmalloc_fail_after(n);
		int rc = parse(text, &t, &err);
		failmalloc_off();
		if (rc == 0) {
			assert_non_null(cs_join_tokens_find(t, "abcdef"));
			cs_join_tokens_free(t);
			break;
		}
		assert_int_equal(rc, -ENOMEM);
	}
}

/* The uses file round trip; bad lines named by number; a use at 0 is not written. */
static void test_cs_join_uses__parse_and_format(void **state)
{
	(void)state;
	static const char text[] = "use abc123 2\n\nuse zz0001 0\nuse 9x9x9x 1000000\n";
	struct cs_join_use *u;
	size_t n;
	struct cs_join_error err;
	assert_int_equal(cs_join_uses_parse(text, sizeof text - 1, &u, &n, &err), 0);
	assert_int_equal(n, 3);
	assert_string_equal(u[0].id, "abc123");
	assert_int_equal(u[0].used, 2);
	assert_int_equal(u[2].used, 1000000);
	char out[128];
	size_t len = cs_join_uses_format(u, n, out, sizeof out);
	assert_string_equal(out, "use abc123 2\nuse 9x9x9x 1000000\n");
	assert_int_equal(len, strlen(out));
	assert_int_equal(cs_join_uses_format(u, n, NULL, 0), len); /* the size asked first */
	free(u);
	static const char *const bad[] = {
	        "use abc12 1\n",   "use abc123\n",         "use abc123 1 x\n", "use ABC123 1\n",
	        "uses abc123 1\n", "use abc123 1000001\n", "use abc123 -1\n"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		assert_int_equal(cs_join_uses_parse(bad[i], strlen(bad[i]), &u, &n, &err),
		                 -EBADMSG);
		assert_int_equal(err.line, 1);
		assert_null(u);
	}
	assert_int_equal(cs_join_uses_parse("", 0, &u, &n, &err), 0);
	assert_int_equal(n, 0);
	assert_null(u);
}

static void test_cs_join_bearer__forms(void **state)
{
	(void)state;
	char id[8], tok[CS_JOIN_TOKEN_BYTES + 1];
	const char *ok[] = {"Bearer abcdef.0123456789abcdef", "bearer abcdef.0123456789abcdef  ",
	                    "BEARER 000000.zzzzzzzzzzzzzzzz"};
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(cs_join_bearer(ok[i], strlen(ok[i]), id, tok), 0);
		assert_int_equal(strlen(id), 6);
		assert_int_equal(strlen(tok), 23);
	}
	assert_string_equal(id, "000000");
	const char *bad[] = {"",
	                     "Bearer",
	                     "Bearer ",
	                     "Basic abcdef.0123456789abcdef",
	                     "Bearer abcdef.0123456789abcde",
	                     "Bearer abcdef.0123456789abcdef0",
	                     "Bearer abcdef-0123456789abcdef",
	                     "Bearer ABCDEF.0123456789abcdef",
	                     "Bearer abcdef.0123456789abcdeF",
	                     "Bearer  abcdef.0123456789abcdef",
	                     "Bearerabcdef.0123456789abcdef"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		assert_int_equal(cs_join_bearer(bad[i], strlen(bad[i]), id, tok), -EBADMSG);
}

static void test_cs_join_token_check__reasons(void **state)
{
	(void)state;
	struct cs_join_token t;
	memset(&t, 0, sizeof t);
	t.expires = 1000;
	t.uses = 2;
	assert_int_equal(cs_join_token_check(NULL, true, 0, 0, "n"), CS_JOIN_UNKNOWN);
	assert_int_equal(cs_join_token_check(&t, false, 0, 0, "n"), CS_JOIN_UNKNOWN);
	assert_int_equal(cs_join_token_check(&t, true, 999, 0, "n"), CS_JOIN_OK);
	assert_int_equal(cs_join_token_check(&t, true, 999, 1, "n"), CS_JOIN_OK);
	assert_int_equal(cs_join_token_check(&t, true, 999, 2, "n"), CS_JOIN_USED_UP);
	assert_int_equal(cs_join_token_check(&t, true, 1000, 0, "n"), CS_JOIN_EXPIRED);
	snprintf(t.node, sizeof t.node, "edge-1");
	assert_int_equal(cs_join_token_check(&t, true, 999, 0, "edge-1"), CS_JOIN_OK);
	assert_int_equal(cs_join_token_check(&t, true, 999, 0, "edge-10"), CS_JOIN_FOREIGN_NODE);
	/* expired outranks everything but unknown: an old token says nothing more */
	assert_int_equal(cs_join_token_check(&t, true, 5000, 9, "x"), CS_JOIN_EXPIRED);
	assert_string_equal(cs_join_refusal_name(CS_JOIN_USED_UP), "reused");
	assert_string_equal(cs_join_refusal_name(CS_JOIN_FOREIGN_NODE), "foreign_node");
	assert_string_equal(cs_join_refusal_name(CS_JOIN_REFUSAL_COUNT), "?");
	for (int i = 0; i < CS_JOIN_REFUSAL_COUNT; i++) /* every reason has a name */
		assert_non_null(cs_join_refusal_name((enum cs_join_refusal)i));
}

/* A CSR made by the certs library, read back, judged. */
static void csr(const char *cn, const char *const *orgs, size_t n, char *out, size_t cap,
                size_t *len)
{
	EVP_PKEY *k = NULL;
	assert_int_equal(certs_csr_new(&k, cn, orgs, n, out, cap, len, NULL, 0), 0);
	EVP_PKEY_free(k);
}

static void test_cs_join_csr_node__subjects(void **state)
{
	(void)state;
	char pem[CERTS_MAX_CSR_BYTES], node[254];
	size_t len;
	const char *why;
	struct certs_csr_info info;
	const char *nodes[] = {"system:nodes"}, *masters[] = {"system:masters"},
	           *two[] = {"system:nodes", "system:masters"};

	csr("system:node:edge-1", nodes, 1, pem, sizeof pem, &len);
	assert_int_equal(certs_csr_read(pem, len, &info), 0);
	assert_int_equal(info.key_bits, 256);
	assert_false(info.has_extensions);
	assert_int_equal(cs_join_csr_node(&info, node, sizeof node, &why), CS_JOIN_OK);
	assert_string_equal(node, "edge-1");

	csr("system:node:edge-1", NULL, 0, pem, sizeof pem, &len);
	assert_int_equal(certs_csr_read(pem, len, &info), 0);
	assert_int_equal(cs_join_csr_node(&info, node, sizeof node, &why), CS_JOIN_OK);

	const struct {
		const char *cn;
		const char *const *orgs;
		size_t n;
	} bad[] = {
	        {"edge-1", nodes, 1},           {"system:node:", nodes, 1},
	        {"system:node:Edge", nodes, 1}, {"system:node:edge-1", masters, 1},
	        {"system:node:edge-1", two, 2}, {"system:node:a/b", nodes, 1},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		csr(bad[i].cn, bad[i].orgs, bad[i].n, pem, sizeof pem, &len);
		assert_int_equal(certs_csr_read(pem, len, &info), 0);
		assert_int_equal(cs_join_csr_node(&info, node, sizeof node, &why),
		                 CS_JOIN_CSR_NAME);
		assert_non_null(why);
	}
}

static void test_certs_csr_read__not_one_csr(void **state)
{
	(void)state;
	char pem[CERTS_MAX_CSR_BYTES], two[2 * CERTS_MAX_CSR_BYTES];
	size_t len;
	struct certs_csr_info info;
	const char *nodes[] = {"system:nodes"};
	csr("system:node:e", nodes, 1, pem, sizeof pem, &len);
	/* surrounding whitespace is fine */
	snprintf(two, sizeof two, "\n\n%s\n \n", pem);
	assert_int_equal(certs_csr_read(two, strlen(two), &info), 0);
	/* two requests, or anything else beside it, is not */
	snprintf(two, sizeof two, "%s%s", pem, pem);
	assert_int_equal(certs_csr_read(two, strlen(two), &info), -EBADMSG);
	snprintf(two, sizeof two, "x%s", pem);
	assert_int_equal(certs_csr_read(two, strlen(two), &info), -EBADMSG);
	snprintf(two, sizeof two, "%sx", pem);
	assert_int_equal(certs_csr_read(two, strlen(two), &info), -EBADMSG);
	/* a private key sent instead */
	const char *key = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
	assert_int_equal(certs_csr_read(key, strlen(key), &info), -EBADMSG);
	assert_int_equal(certs_csr_read("", 0, &info), -EBADMSG);
	/* a flipped byte in the signature: the requester does not hold the key */
	char *end = strstr(pem, "-----END");
	assert_non_null(end);
	end[-20] = end[-20] == 'A' ? 'B' : 'A';
	assert_int_equal(certs_csr_read(pem, len, &info), -EBADMSG);
	/* every prefix of a good one fails cleanly (but the one without the final newline) */
	csr("system:node:e", nodes, 1, pem, sizeof pem, &len);
	for (size_t i = 0; i + 1 < len; i++) {
		struct guard_buf g;
		assert_int_equal(guard_new(&g, pem, i), 0);
		assert_int_not_equal(certs_csr_read((const char *)g.data, g.len, &info), 0);
		guard_free(&g);
	}
	assert_int_equal(certs_csr_read(pem, CERTS_MAX_CSR_BYTES + 1, &info), -EMSGSIZE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_cs_join_tokens_parse__entries_and_comments),
	        cmocka_unit_test(test_cs_join_tokens_parse__bad_lines),
	        cmocka_unit_test(test_cs_join_tokens_parse__limits),
	        cmocka_unit_test(test_cs_join_tokens_parse__guard_page),
	        cmocka_unit_test(test_cs_join_tokens_parse__alloc_failure),
	        cmocka_unit_test(test_cs_join_uses__parse_and_format),
	        cmocka_unit_test(test_cs_join_bearer__forms),
	        cmocka_unit_test(test_cs_join_token_check__reasons),
	        cmocka_unit_test(test_cs_join_csr_node__subjects),
	        cmocka_unit_test(test_certs_csr_read__not_one_csr),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
