/*
 * cloudstream/src/authz.c — the kubelet's authentication and authorization decisions (see
 * authz.h): pure, no I/O, clock or logging.
 */
#include "authz.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <json-c/json.h>

#include <stream/hex.h>

#define PATH_DECODE_MAX 8192u /* longer paths are mapped to proxy alone */
#define JSON_DEPTH      8

/* ---- request → attributes -------------------------------------------------------------- */

/* Go's URL.Path: %XX decoded. -EBADMSG for a bad escape. */
static int path_decode(const char *p, size_t len, char *out, size_t *out_len)
{
	size_t n = 0;
	for (size_t i = 0; i < len; i++) {
		if (p[i] != '%') {
			out[n++] = p[i];
			continue;
		}
		if (i + 2 >= len)
			return -EBADMSG;
		int hi = st_hex_value((unsigned char)p[i + 1]),
		    lo = st_hex_value((unsigned char)p[i + 2]);
		if (hi < 0 || lo < 0)
			return -EBADMSG;
		out[n++] = (char)(hi * 16 + lo);
		i += 2;
	}
	*out_len = n;
	return 0;
}

/* Has the decoded path a "." or ".." segment? */
static bool has_dot_segment(const char *p, size_t len)
{
	size_t start = 0;
	for (size_t i = 0; i <= len; i++) {
		if (i < len && p[i] != '/')
			continue;
		size_t seg = i - start;
		if ((seg == 1 && p[start] == '.') ||
		    (seg == 2 && p[start] == '.' && p[start + 1] == '.'))
			return true;
		start = i + 1;
	}
	return false;
}

/* The kubelet's isSubpath(@sub, @base): @base without a trailing '/' equals @sub or is a
 * prefix of it followed by '/'. */
static bool is_subpath(const char *sub, size_t len, const char *base)
{
	size_t b = strlen(base);
	if (b > 0 && base[b - 1] == '/')
		b--;
	if (len < b || memcmp(sub, base, b) != 0)
		return false;
	return len == b || sub[b] == '/';
}

static const char *verb_of(const char *m, size_t len)
{
	static const struct {
		const char *method, *verb;
	} verbs[] = {{"POST", "create"},
	             {"GET", "get"},
	             {"PUT", "update"},
	             {"PATCH", "patch"},
	             {"DELETE", "delete"}};
	for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
		if (strlen(verbs[i].method) == len && memcmp(verbs[i].method, m, len) == 0)
			return verbs[i].verb;
	return ""; /* HEAD, OPTIONS, ...: the kubelet's switch has no case for them */
}

int cs_authz_attrs_of(const char *method, size_t method_len, const char *path, size_t path_len,
                      struct cs_authz_attrs *out)
{
	memset(out, 0, sizeof *out);
	out->verb = verb_of(method, method_len);
	out->subresource[0] = "proxy";
	out->n = 1;
	if (path_len > PATH_DECODE_MAX)
		return 0;
	char p[PATH_DECODE_MAX];
	size_t len;
	if (path_decode(path, path_len, p, &len) < 0)
		return -EBADMSG;
	if (has_dot_segment(p, len))
		return 0;
	/* KubeletFineGrainedAuthz: a specific subresource first, then proxy. */
	static const struct {
		const char *path, *sub;
	} fine[] = {{"/pods", "pods"},
	            {"/healthz", "healthz"},
	            {"/configz", "configz"},
	            {"/statusz", "statusz"},
	            {"/runningpods/", "pods"}};
	for (size_t i = 0; i < sizeof fine / sizeof fine[0]; i++)
		if (is_subpath(p, len, fine[i].path)) {
			out->subresource[0] = fine[i].sub;
			out->subresource[1] = "proxy";
			out->n = 2;
			return 0;
		}
	static const struct {
		const char *path, *sub;
	} coarse[] = {{"/stats/", "stats"},
	              {"/metrics", "metrics"},
	              {"/logs/", "log"},
	              {"/checkpoint/", "checkpoint"}};
	for (size_t i = 0; i < sizeof coarse / sizeof coarse[0]; i++)
		if (is_subpath(p, len, coarse[i].path)) {
			out->subresource[0] = coarse[i].sub;
			return 0;
		}
	return 0;
}

size_t cs_authz_forbidden_message(const char *user, const struct cs_authz_attrs *a, char *out,
                                  size_t cap)
{
	/* Go's %v of a []string: [a b]. */
	int n = snprintf(out, cap,
	                 "Forbidden (user=%s, verb=%s, resource=nodes, subresource(s)=[%s%s%s])",
	                 user, a->verb, a->subresource[0], a->n > 1 ? " " : "",
	                 a->n > 1 ? a->subresource[1] : "");
	if (n < 0)
		return 0;
	return (size_t)n < cap ? (size_t)n : cap - 1;
}

/* ---- JSON out ---------------------------------------------------------------------------- */

struct out {
	char *p;
	size_t len, cap;
	bool over;
};

static void put(struct out *o, const char *s, size_t n)
{
	if (o->over || n >= o->cap - o->len) {
		o->over = true;
		return;
	}
	memcpy(o->p + o->len, s, n);
	o->len += n;
	o->p[o->len] = '\0';
}

static void puts_(struct out *o, const char *s)
{
	put(o, s, strlen(s));
}

/* A JSON string of @s (@n bytes). */
static void put_str(struct out *o, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	put(o, "\"", 1);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\') {
			char e[2] = {'\\', (char)c};
			put(o, e, 2);
		} else if (c < 0x20 || c == 0x7f) {
			char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
			put(o, e, 6);
		} else {
			put(o, (const char *)&s[i], 1);
		}
	}
	put(o, "\"", 1);
}

ssize_t cs_authz_token_review_body(const char *token, size_t len, char *out, size_t cap)
{
	if (cap == 0)
		return -EMSGSIZE;
	struct out o = {out, 0, cap, false};
	out[0] = '\0';
	puts_(&o, "{\"kind\":\"TokenReview\",\"apiVersion\":\"authentication.k8s.io/v1\","
	          "\"metadata\":{\"creationTimestamp\":null},\"spec\":{\"token\":");
	put_str(&o, token, len);
	puts_(&o, "},\"status\":{\"user\":{}}}");
	return o.over ? -EMSGSIZE : (ssize_t)o.len;
}

ssize_t cs_authz_sar_body(const struct cs_authz_user *user, const char *verb,
                          const char *subresource, const char *node, char *out, size_t cap)
{
	if (cap == 0)
		return -EMSGSIZE;
	struct out o = {out, 0, cap, false};
	out[0] = '\0';
	puts_(&o, "{\"kind\":\"SubjectAccessReview\",\"apiVersion\":\"authorization.k8s.io/v1\","
	          "\"metadata\":{\"creationTimestamp\":null},\"spec\":{\"resourceAttributes\":{"
	          "\"verb\":");
	put_str(&o, verb, strlen(verb));
	puts_(&o, ",\"version\":\"v1\",\"resource\":\"nodes\",\"subresource\":");
	put_str(&o, subresource, strlen(subresource));
	puts_(&o, ",\"name\":");
	put_str(&o, node, strlen(node));
	puts_(&o, "},");
	put(&o, user->json, user->json_len);
	puts_(&o, "},\"status\":{\"allowed\":false}}");
	return o.over ? -EMSGSIZE : (ssize_t)o.len;
}

/* ---- users ------------------------------------------------------------------------------- */

static void set_name(struct cs_authz_user *u, const char *name)
{
	snprintf(u->name, sizeof u->name, "%s", name);
}

/* The user's SAR fields from @obj ({"user":..,...}), braces dropped. */
static int user_json(struct json_object *obj, struct cs_authz_user *u)
{
	const char *s = json_object_to_json_string_ext(obj, JSON_C_TO_STRING_PLAIN |
	                                                            JSON_C_TO_STRING_NOSLASHESCAPE);
	if (s == NULL)
		return -ENOMEM;
	size_t n = strlen(s);
	if (n < 2)
		return -EBADMSG;
	if (n - 2 >= sizeof u->json)
		return -EMSGSIZE;
	memcpy(u->json, s + 1, n - 2);
	u->json_len = n - 2;
	u->json[u->json_len] = '\0';
	return 0;
}

static bool adds_authenticated(const char *name, struct json_object *groups)
{
	if (strcmp(name, "system:anonymous") == 0)
		return false;
	size_t n = json_object_array_length(groups);
	for (size_t i = 0; i < n; i++) {
		const char *g = json_object_get_string(json_object_array_get_idx(groups, i));
		if (strcmp(g, CS_AUTHZ_AUTHENTICATED) == 0 ||
		    strcmp(g, "system:unauthenticated") == 0)
			return false;
	}
	return true;
}

static int add_string(struct json_object *arr, const char *s)
{
	struct json_object *v = json_object_new_string(s);
	if (v == NULL || json_object_array_add(arr, v) < 0) {
		json_object_put(v);
		return -ENOMEM;
	}
	return 0;
}

int cs_authz_user_from_cert(const char *cn, const char *const *orgs, size_t n,
                            struct cs_authz_user *out)
{
	if (cn == NULL || cn[0] == '\0')
		return -EINVAL;
	int rc = -ENOMEM;
	struct json_object *obj = json_object_new_object();
	struct json_object *groups = json_object_new_array();
	struct json_object *name = json_object_new_string(cn);
	if (obj == NULL || groups == NULL || name == NULL)
		goto fail;
	json_object_object_add(obj, "user", name);
	name = NULL;
	for (size_t i = 0; i < n; i++)
		if ((rc = add_string(groups, orgs[i])) < 0)
			goto fail;
	if (adds_authenticated(cn, groups) && (rc = add_string(groups, CS_AUTHZ_AUTHENTICATED)) < 0)
		goto fail;
	json_object_object_add(obj, "groups", groups);
	groups = NULL;
	rc = user_json(obj, out);
	if (rc == 0)
		set_name(out, cn);
fail:
	json_object_put(name);
	json_object_put(groups);
	json_object_put(obj);
	return rc;
}

static bool go_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

int cs_authz_bearer(const char *v, size_t len, const char **tok, size_t *tok_len)
{
	/* The apiserver's bearertoken authenticator: strings.TrimSpace, SplitN(" ", 3), "bearer"
	 * in any case, and the token is the second part: what follows a second space is
	 * ignored, and an empty token (two spaces) is no token. */
	while (len > 0 && go_space(v[0])) {
		v++;
		len--;
	}
	while (len > 0 && go_space(v[len - 1]))
		len--;
	if (len < 7 || strncasecmp(v, "bearer", 6) != 0 || v[6] != ' ')
		return -ENOENT;
	const char *t = v + 7;
	const char *end = memchr(t, ' ', len - 7);
	size_t n = end ? (size_t)(end - t) : len - 7;
	if (n == 0)
		return -ENOENT;
	if (n > CS_AUTHZ_MAX_TOKEN_BYTES)
		return -EMSGSIZE;
	*tok = t;
	*tok_len = n;
	return 0;
}

/* ---- answers ----------------------------------------------------------------------------- */

static struct json_object *parse(const char *body, size_t len)
{
	if (len > CS_AUTHZ_MAX_ANSWER_BYTES || len > 0x7fffffff)
		return NULL;
	struct json_tokener *tok = json_tokener_new_ex(JSON_DEPTH);
	if (tok == NULL)
		return NULL;
	struct json_object *o = json_tokener_parse_ex(tok, body, (int)len);
	if (o && json_tokener_get_error(tok) != json_tokener_success) {
		json_object_put(o);
		o = NULL;
	}
	/* Go's decoder refuses anything but white space after the value. */
	for (size_t i = o ? json_tokener_get_parse_end(tok) : len; i < len; i++)
		if (body[i] != ' ' && body[i] != '\t' && body[i] != '\n' && body[i] != '\r') {
			json_object_put(o);
			o = NULL;
			break;
		}
	json_tokener_free(tok);
	if (o && !json_object_is_type(o, json_type_object)) {
		json_object_put(o);
		o = NULL;
	}
	return o;
}

/* Member @key of @o when it has type @t: 1; absent or null: 0; another type: -EBADMSG. */
static int member(struct json_object *o, const char *key, enum json_type t,
                  struct json_object **out)
{
	*out = NULL;
	struct json_object *v;
	if (!json_object_object_get_ex(o, key, &v) || v == NULL)
		return 0;
	if (!json_object_is_type(v, t))
		return -EBADMSG;
	*out = v;
	return 1;
}

static int check_kind(struct json_object *o, const char *kind)
{
	struct json_object *k;
	int rc = member(o, "kind", json_type_string, &k);
	if (rc < 0)
		return rc;
	return rc == 0 || strcmp(json_object_get_string(k), kind) == 0 ? 0 : -EBADMSG;
}

static void copy_reason(struct json_object *s, char *reason, size_t cap)
{
	if (reason && cap)
		snprintf(reason, cap, "%s", s ? json_object_get_string(s) : "");
}

static bool all_strings(struct json_object *arr)
{
	size_t n = json_object_array_length(arr);
	for (size_t i = 0; i < n; i++)
		if (!json_object_is_type(json_object_array_get_idx(arr, i), json_type_string))
			return false;
	return true;
}

/* The SAR user fields of TokenReview status.user @u (validated) into @out. */
static int user_from_review(struct json_object *u, struct cs_authz_user *out)
{
	struct json_object *name, *uid, *groups, *extra;
	if (member(u, "username", json_type_string, &name) < 0 ||
	    member(u, "uid", json_type_string, &uid) < 0 ||
	    member(u, "groups", json_type_array, &groups) < 0 ||
	    member(u, "extra", json_type_object, &extra) < 0)
		return -EBADMSG;
	if (name == NULL || json_object_get_string_len(name) == 0)
		return -EBADMSG;
	if (groups && !all_strings(groups))
		return -EBADMSG;
	if (extra) {
		json_object_object_foreach(extra, k, v)
		{
			(void)k;
			if (v && (!json_object_is_type(v, json_type_array) || !all_strings(v)))
				return -EBADMSG;
		}
	}
	int rc = -ENOMEM;
	struct json_object *obj = json_object_new_object();
	struct json_object *g = json_object_new_array();
	if (obj == NULL || g == NULL)
		goto out;
	json_object_object_add(obj, "user", json_object_get(name));
	size_t n = groups ? json_object_array_length(groups) : 0;
	for (size_t i = 0; i < n; i++)
		if (json_object_array_add(
		            g, json_object_get(json_object_array_get_idx(groups, i))) < 0)
			goto out;
	const char *nm = json_object_get_string(name);
	if (adds_authenticated(nm, g) && (rc = add_string(g, CS_AUTHZ_AUTHENTICATED)) < 0)
		goto out;
	json_object_object_add(obj, "groups", g);
	g = NULL;
	if (extra && json_object_object_length(extra) > 0)
		json_object_object_add(obj, "extra", json_object_get(extra));
	if (uid && json_object_get_string_len(uid) > 0)
		json_object_object_add(obj, "uid", json_object_get(uid));
	rc = user_json(obj, out);
	if (rc == 0)
		set_name(out, nm);
out:
	json_object_put(g);
	json_object_put(obj);
	return rc;
}

int cs_authz_parse_token_review(const char *body, size_t len, bool *authenticated,
                                struct cs_authz_user *out, char *reason, size_t reason_cap)
{
	*authenticated = false;
	copy_reason(NULL, reason, reason_cap);
	struct json_object *o = parse(body, len);
	if (o == NULL)
		return -EBADMSG;
	int rc = check_kind(o, "TokenReview");
	struct json_object *st = NULL, *ok = NULL, *err = NULL, *u = NULL;
	if (rc == 0 && (member(o, "status", json_type_object, &st) < 0 ||
	                (st && (member(st, "authenticated", json_type_boolean, &ok) < 0 ||
	                        member(st, "error", json_type_string, &err) < 0 ||
	                        member(st, "user", json_type_object, &u) < 0))))
		rc = -EBADMSG;
	if (rc == 0) {
		copy_reason(err, reason, reason_cap);
		if (ok && json_object_get_boolean(ok)) {
			rc = u ? user_from_review(u, out) : -EBADMSG;
			*authenticated = rc == 0;
		}
	}
	json_object_put(o);
	return rc;
}

int cs_authz_parse_sar(const char *body, size_t len, enum cs_authz_verdict *out, char *reason,
                       size_t reason_cap)
{
	*out = CS_AUTHZ_NO_OPINION;
	copy_reason(NULL, reason, reason_cap);
	struct json_object *o = parse(body, len);
	if (o == NULL)
		return -EBADMSG;
	int rc = check_kind(o, "SubjectAccessReview");
	struct json_object *st = NULL, *allowed = NULL, *denied = NULL, *why = NULL, *eval = NULL;
	if (rc == 0 && (member(o, "status", json_type_object, &st) < 0 ||
	                (st && (member(st, "allowed", json_type_boolean, &allowed) < 0 ||
	                        member(st, "denied", json_type_boolean, &denied) < 0 ||
	                        member(st, "reason", json_type_string, &why) < 0 ||
	                        member(st, "evaluationError", json_type_string, &eval) < 0))))
		rc = -EBADMSG;
	if (rc == 0) {
		copy_reason(why && json_object_get_string_len(why) ? why : eval, reason,
		            reason_cap);
		if (allowed && json_object_get_boolean(allowed))
			*out = CS_AUTHZ_ALLOW;
		else if (denied && json_object_get_boolean(denied))
			*out = CS_AUTHZ_DENY;
	}
	json_object_put(o);
	return rc;
}
