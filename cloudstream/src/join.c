/*
 * cloudstream/src/join.c — join tokens and signing requests (join.h): pure.
 */
#include "join.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <stream/hex.h>

#include "denylist.h" /* cs_node_name_valid */

static bool is_token_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* [a-z0-9]{6}.[a-z0-9]{16}, exactly. */
static bool token_syntax(const char *p, size_t len)
{
	if (len != CS_JOIN_TOKEN_BYTES || p[CS_JOIN_TOKEN_ID_BYTES] != '.')
		return false;
	for (size_t i = 0; i < len; i++)
		if (i != CS_JOIN_TOKEN_ID_BYTES && !is_token_char(p[i]))
			return false;
	return true;
}

static bool id_syntax(const char *p, size_t len)
{
	if (len != CS_JOIN_TOKEN_ID_BYTES)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!is_token_char(p[i]))
			return false;
	return true;
}

/* A decimal in [lo, hi] from @len bytes; false when it is not one. */
static bool parse_dec(const char *p, size_t len, uint64_t lo, uint64_t hi, uint64_t *out)
{
	if (len == 0 || len > 19)
		return false;
	uint64_t v = 0;
	for (size_t i = 0; i < len; i++) {
		if (p[i] < '0' || p[i] > '9')
			return false;
		v = v * 10u + (uint64_t)(p[i] - '0');
	}
	if (v < lo || v > hi)
		return false;
	*out = v;
	return true;
}

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\r';
}

/* Splits the next whitespace-separated word off [*p, end). */
static bool next_word(const char **p, const char *end, const char **w, size_t *wlen)
{
	while (*p < end && is_space(**p))
		(*p)++;
	if (*p == end)
		return false;
	*w = *p;
	while (*p < end && !is_space(**p))
		(*p)++;
	*wlen = (size_t)(*p - *w);
	return true;
}

static bool has_prefix(const char *w, size_t len, const char *prefix, size_t plen)
{
	return len >= plen && memcmp(w, prefix, plen) == 0;
}

/* One "token ..." line into @t; a static reason when it is not one. */
static const char *parse_line(const char *p, const char *end, struct cs_join_token *t)
{
	const char *w;
	size_t n;
	memset(t, 0, sizeof *t);
	if (!next_word(&p, end, &w, &n) || n != 5 || memcmp(w, "token", 5) != 0)
		return "expected \"token ID sha256:HASH expires=UNIX uses=N [node=NAME]\"";
	if (!next_word(&p, end, &w, &n) || !id_syntax(w, n))
		return "the token id is not 6 characters of [a-z0-9]";
	memcpy(t->id, w, n);
	if (!next_word(&p, end, &w, &n) || n != 7 + 64 || memcmp(w, "sha256:", 7) != 0)
		return "expected sha256: and 64 hex digits";
	for (size_t i = 0; i < 32; i++) {
		int hi = st_hex_value((unsigned char)w[7 + 2 * i]),
		    lo = st_hex_value((unsigned char)w[8 + 2 * i]);
		if (hi < 0 || lo < 0)
			return "expected sha256: and 64 hex digits";
		t->hash[i] = (uint8_t)(hi << 4 | lo);
	}
	bool have_expires = false, have_uses = false;
	while (next_word(&p, end, &w, &n)) {
		uint64_t v;
		if (has_prefix(w, n, "expires=", 8)) {
			if (have_expires || !parse_dec(w + 8, n - 8, 1, INT64_MAX, &v))
				return "expires= wants unix seconds, once";
			t->expires = (int64_t)v;
			have_expires = true;
		} else if (has_prefix(w, n, "uses=", 5)) {
			if (have_uses || !parse_dec(w + 5, n - 5, 1, CS_JOIN_MAX_USES, &v))
				return "uses= wants 1..1000000, once";
			t->uses = (uint32_t)v;
			have_uses = true;
		} else if (has_prefix(w, n, "node=", 5)) {
			if (t->node[0] || n - 5 > CS_JOIN_NODE_MAX_BYTES ||
			    !cs_node_name_valid(w + 5, n - 5))
				return "node= wants one node name (DNS-1123 subdomain)";
			memcpy(t->node, w + 5, n - 5);
			t->node[n - 5] = '\0';
		} else {
			return "unknown field (expires=, uses=, node=)";
		}
	}
	if (!have_expires || !have_uses)
		return "expires= and uses= are required";
	return NULL;
}

static int cmp_token(const void *a, const void *b)
{
	return strcmp(((const struct cs_join_token *)a)->id, ((const struct cs_join_token *)b)->id);
}

/* Where a parse of a file (@len bytes) starts: no error yet; -EMSGSIZE, with why, over
 * CS_JOIN_MAX_FILE_BYTES. */
static int parse_start(size_t len, struct cs_join_error *err)
{
	err->line = 0;
	err->why = NULL;
	if (len > CS_JOIN_MAX_FILE_BYTES) {
		err->why = "file too large";
		return -EMSGSIZE;
	}
	return 0;
}

int cs_join_uses_parse(const char *text, size_t len, struct cs_join_use **out, size_t *n,
                       struct cs_join_error *err)
{
	*out = NULL;
	*n = 0;
	int rc = parse_start(len, err);
	if (rc < 0)
		return rc;
	struct cs_join_use *v = NULL;
	size_t used = 0, cap = 0, line = 0;
	const char *p = text, *end = text + len;
	while (p < end && rc == 0) {
		line++;
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		const char *le = eol ? eol : end;
		const char *q = p, *w;
		size_t wn;
		p = eol ? eol + 1 : end;
		if (!next_word(&q, le, &w, &wn))
			continue; /* a blank line */
		uint64_t count;
		const char *id;
		size_t idn;
		if (wn != 3 || memcmp(w, "use", 3) != 0 || !next_word(&q, le, &id, &idn) ||
		    !id_syntax(id, idn) || !next_word(&q, le, &w, &wn) ||
		    !parse_dec(w, wn, 0, CS_JOIN_MAX_USES, &count) || next_word(&q, le, &w, &wn)) {
			err->line = line;
			err->why = "expected \"use ID N\"";
			rc = -EBADMSG;
			break;
		}
		if (used == CS_JOIN_MAX_TOKENS) {
			err->line = line;
			err->why = "too many tokens";
			rc = -EMSGSIZE;
			break;
		}
		if (used == cap) {
			size_t ncap = cap ? cap * 2 : 16;
			struct cs_join_use *nv = realloc(v, ncap * sizeof *nv);
			if (nv == NULL) {
				rc = -ENOMEM;
				break;
			}
			v = nv;
			cap = ncap;
		}
		memcpy(v[used].id, id, idn);
		v[used].id[idn] = '\0';
		v[used].used = (uint32_t)count;
		used++;
	}
	if (rc < 0) {
		free(v);
		return rc;
	}
	*out = v;
	*n = used;
	return 0;
}

size_t cs_join_uses_format(const struct cs_join_use *u, size_t n, char *out, size_t cap)
{
	size_t len = 0;
	for (size_t i = 0; i < n; i++) {
		if (u[i].used == 0)
			continue; /* nothing to remember */
		int w = snprintf(cap > len ? out + len : NULL, cap > len ? cap - len : 0,
		                 "use %s %u\n", u[i].id, (unsigned)u[i].used);
		if (w > 0)
			len += (size_t)w;
	}
	if (cap > 0 && len < cap)
		out[len] = '\0';
	return len;
}

int cs_join_tokens_parse(const char *text, size_t len, struct cs_join_tokens **out,
                         struct cs_join_error *err)
{
	*out = NULL;
	int rc = parse_start(len, err);
	if (rc < 0)
		return rc;
	struct cs_join_tokens *t = calloc(1, sizeof *t);
	if (t == NULL)
		return -ENOMEM;
	size_t cap = 0, line = 0;
	const char *p = text, *end = text + len;
	while (p < end) {
		line++;
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		const char *le = eol ? eol : end;
		/* A comment: '#' first on the line, or after a blank. */
		for (const char *c = p; c < le; c++)
			if (*c == '#' && (c == p || is_space(c[-1]))) {
				le = c;
				break;
			}
		const char *w;
		size_t wn;
		const char *q = p;
		if (next_word(&q, le, &w, &wn)) {
			if (t->n == CS_JOIN_MAX_TOKENS) {
				err->line = line;
				err->why = "too many tokens";
				rc = -EMSGSIZE;
				break;
			}
			if (t->n == cap) {
				size_t ncap = cap ? cap * 2 : 16;
				struct cs_join_token *v = realloc(t->v, ncap * sizeof *v);
				if (v == NULL) {
					rc = -ENOMEM;
					break;
				}
				t->v = v;
				cap = ncap;
			}
			const char *why = parse_line(p, le, &t->v[t->n]);
			if (why) {
				err->line = line;
				err->why = why;
				rc = -EBADMSG;
				break;
			}
			t->n++;
		}
		p = eol ? eol + 1 : end;
	}
	if (rc == 0 && t->n > 1) {
		qsort(t->v, t->n, sizeof *t->v, cmp_token);
		for (size_t i = 1; i < t->n; i++)
			if (strcmp(t->v[i - 1].id, t->v[i].id) == 0) {
				err->why = "a token id is listed twice";
				rc = -EBADMSG;
			}
	}
	if (rc < 0) {
		cs_join_tokens_free(t);
		return rc;
	}
	*out = t;
	return 0;
}

void cs_join_tokens_free(struct cs_join_tokens *t)
{
	if (t == NULL)
		return;
	free(t->v);
	free(t);
}

const struct cs_join_token *cs_join_tokens_find(const struct cs_join_tokens *t, const char *id)
{
	if (t == NULL || t->n == 0)
		return NULL;
	struct cs_join_token key;
	memset(&key, 0, sizeof key);
	if (strlen(id) != CS_JOIN_TOKEN_ID_BYTES)
		return NULL;
	memcpy(key.id, id, CS_JOIN_TOKEN_ID_BYTES);
	return bsearch(&key, t->v, t->n, sizeof *t->v, cmp_token);
}

int cs_join_bearer(const char *v, size_t len, char *id, char *token)
{
	static const char bearer[] = "bearer ";
	if (len < sizeof bearer - 1)
		return -EBADMSG;
	for (size_t i = 0; i < sizeof bearer - 1; i++) {
		char c = v[i];
		if (c >= 'A' && c <= 'Z')
			c = (char)(c - 'A' + 'a');
		if (c != bearer[i])
			return -EBADMSG;
	}
	v += sizeof bearer - 1;
	len -= sizeof bearer - 1;
	while (len > 0 && v[len - 1] == ' ')
		len--;
	if (!token_syntax(v, len))
		return -EBADMSG;
	memcpy(id, v, CS_JOIN_TOKEN_ID_BYTES);
	id[CS_JOIN_TOKEN_ID_BYTES] = '\0';
	memcpy(token, v, len);
	token[len] = '\0';
	return 0;
}

const char *cs_join_refusal_name(enum cs_join_refusal r)
{
	static const char *const names[CS_JOIN_REFUSAL_COUNT] = {
	        [CS_JOIN_OK] = "ok",
	        [CS_JOIN_NO_TOKEN] = "no_token",
	        [CS_JOIN_UNKNOWN] = "unknown",
	        [CS_JOIN_EXPIRED] = "expired",
	        [CS_JOIN_USED_UP] = "reused",
	        [CS_JOIN_FOREIGN_NODE] = "foreign_node",
	        [CS_JOIN_BAD_CSR] = "bad_csr",
	        [CS_JOIN_CSR_NAME] = "csr_name",
	        [CS_JOIN_DENIED] = "denied",
	        [CS_JOIN_CERT] = "certificate",
	        [CS_JOIN_CSR_DENIED] = "csr_denied",
	};
	return (unsigned)r < CS_JOIN_REFUSAL_COUNT ? names[r] : "?";
}

enum cs_join_refusal cs_join_token_check(const struct cs_join_token *t, bool secret_ok, int64_t now,
                                         uint32_t used, const char *node)
{
	if (t == NULL || !secret_ok)
		return CS_JOIN_UNKNOWN;
	if (now >= t->expires)
		return CS_JOIN_EXPIRED;
	if (t->node[0] && strcmp(t->node, node) != 0)
		return CS_JOIN_FOREIGN_NODE;
	if (used >= t->uses)
		return CS_JOIN_USED_UP;
	return CS_JOIN_OK;
}

enum cs_join_refusal cs_join_csr_node(const struct certs_csr_info *info, char *node, size_t cap,
                                      const char **why)
{
	static const char prefix[] = "system:node:";
	*why = NULL;
	if (strncmp(info->cn, prefix, sizeof prefix - 1) != 0) {
		*why = "the request's CN is not system:node:<name>";
		return CS_JOIN_CSR_NAME;
	}
	const char *name = info->cn + sizeof prefix - 1;
	size_t n = strlen(name);
	if (n == 0 || n > CS_JOIN_NODE_MAX_BYTES || n + 1 > cap || !cs_node_name_valid(name, n)) {
		*why = "the request's CN does not end in a node name (DNS-1123 subdomain)";
		return CS_JOIN_CSR_NAME;
	}
	if (info->num_orgs > 1 || (info->num_orgs == 1 && strcmp(info->orgs[0], "system:nodes"))) {
		*why = "the request asks for an O other than system:nodes";
		return CS_JOIN_CSR_NAME;
	}
	if (info->has_extensions) {
		*why = "the request asks for extensions (SANs, usages); a node certificate gets "
		       "none";
		return CS_JOIN_CSR_NAME;
	}
	memcpy(node, name, n + 1);
	return CS_JOIN_OK;
}
