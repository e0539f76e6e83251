/* Fuzz target: the apiserver's answers to a TokenReview and a SubjectAccessReview, and the
 * request → attributes mapping (cloudstream/src/authz.h). The first byte picks the parser; an
 * authenticated user must round-trip into a SubjectAccessReview body that is valid JSON. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "authz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Like assert(), but also in the fuzz build (RelWithDebInfo: NDEBUG). */
#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond))                                                                       \
			abort();                                                                   \
	} while (0)

static void check_sar_body(const struct cs_authz_user *u)
{
	static char body[CS_AUTHZ_MAX_USER_JSON + 1024];
	CHECK(strlen(u->json) == u->json_len);
	ssize_t n = cs_authz_sar_body(u, "get", "proxy", "edge-1", body, sizeof body);
	CHECK(n > 0);
	struct json_object *o = json_tokener_parse(body);
	CHECK(o != NULL);
	json_object_put(o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	const char *p = (const char *)data + 1;
	size_t len = size - 1;
	char reason[CS_AUTHZ_MAX_REASON_BYTES];
	switch (data[0] % 3) {
	case 0: {
		struct cs_authz_user *u = malloc(sizeof *u);
		bool ok = false;
		int rc = cs_authz_parse_token_review(p, len, &ok, u, reason, sizeof reason);
		CHECK(rc == 0 || !ok);
		if (ok)
			check_sar_body(u);
		free(u);
		break;
	}
	case 1: {
		enum cs_authz_verdict v;
		int rc = cs_authz_parse_sar(p, len, &v, reason, sizeof reason);
		CHECK(rc == 0 || v == CS_AUTHZ_NO_OPINION);
		break;
	}
	default: {
		/* "METHOD PATH" */
		const char *sp = memchr(p, ' ', len);
		size_t ml = sp ? (size_t)(sp - p) : len;
		struct cs_authz_attrs a;
		if (cs_authz_attrs_of(p, ml, sp ? sp + 1 : p + len, sp ? len - ml - 1 : 0, &a) == 0)
			CHECK(a.n >= 1 && a.n <= CS_AUTHZ_MAX_SUBRESOURCES && a.verb);
		const char *tok;
		size_t tl;
		if (cs_authz_bearer(p, len, &tok, &tl) == 0)
			CHECK(tl > 0 && tok >= p && tok + tl <= p + len);
		break;
	}
	}
	return 0;
}
