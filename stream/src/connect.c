/*
 * JSON connect request (stream/connect.h).
 *
 * Decoding uses json-c with a depth limit: the payload comes from the peer, and a maintained JSON
 * parser is a better bet than a hand-written one for Go's full escape set (\uXXXX, surrogate
 * pairs). What json-c returns is copied into one exactly-sized allocation, so a request costs one
 * malloc whatever its header count. Encoding is hand-written because the output must match Go's
 * encoding/json byte for byte (field order, canonical header names, sorted keys, HTML escaping).
 */
#include <stream/connect.h>
#include <stream/err.h>

#include "jsonw.h"

#include <json-c/json.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- plan: views of every string, then one copy ------------------------------------------ */

struct plan {
	bool sanitize_utf8; /* decode path: invalid UTF-8 becomes U+FFFD, as Go's decoder does */
	uint64_t connect_id;
	struct st_connect_view method, scheme, host, path, raw_query;
	struct st_connect_field headers[ST_MAX_CONNECT_HEADERS];
	size_t num_headers;
};

/* Bytes @v takes once copied: each byte that starts no valid UTF-8 sequence becomes U+FFFD
 * (3 bytes) when sanitizing. */
static size_t view_size(const struct plan *pl, struct st_connect_view v)
{
	if (!pl->sanitize_utf8)
		return v.len;
	size_t size = 0;
	for (size_t i = 0; i < v.len;) {
		uint32_t cp;
		size_t n = st__utf8_valid_len((const uint8_t *)v.p + i, v.len - i, &cp);
		size += n ? n : 3;
		i += n ? n : 1;
	}
	return size;
}

/* Bytes the strings need with their NULs; -EMSGSIZE over the cap, -EBADMSG on an embedded NUL. */
static int plan_size(const struct plan *pl, size_t *size)
{
	const struct st_connect_view *v[] = {&pl->method, &pl->scheme, &pl->host, &pl->path,
	                                     &pl->raw_query};
	size_t total = 0;
	for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
		if (memchr(v[i]->p, '\0', v[i]->len) != NULL)
			return -EBADMSG;
		total += view_size(pl, *v[i]) + 1;
		if (total > ST_MAX_CONNECT_STRINGS_BYTES)
			return -EMSGSIZE;
	}
	for (size_t i = 0; i < pl->num_headers; i++) {
		const struct st_connect_field *f = &pl->headers[i];
		if (memchr(f->name.p, '\0', f->name.len) || memchr(f->value.p, '\0', f->value.len))
			return -EBADMSG;
		total += view_size(pl, f->name) + 1 + view_size(pl, f->value) + 1;
		if (total > ST_MAX_CONNECT_STRINGS_BYTES)
			return -EMSGSIZE;
	}
	*size = total;
	return 0;
}

static const char *copy_view(const struct plan *pl, char **cursor, struct st_connect_view v)
{
	char *dst = *cursor;
	size_t o = 0;
	if (!pl->sanitize_utf8) {
		if (v.len > 0)
			memcpy(dst, v.p, v.len);
		o = v.len;
	} else {
		for (size_t i = 0; i < v.len;) {
			uint32_t cp;
			size_t n = st__utf8_valid_len((const uint8_t *)v.p + i, v.len - i, &cp);
			if (n == 0) {
				memcpy(dst + o, "\xef\xbf\xbd", 3);
				o += 3;
				i++;
			} else {
				memcpy(dst + o, v.p + i, n);
				o += n;
				i += n;
			}
		}
	}
	dst[o] = '\0';
	*cursor += o + 1;
	return dst;
}

static int plan_materialize(const struct plan *pl, struct st_connect_req *out)
{
	size_t size;
	int rc = plan_size(pl, &size);
	if (rc < 0)
		return rc;
	char *storage = malloc(size);
	if (storage == NULL)
		return -ENOMEM;
	char *cur = storage;
	memset(out, 0, sizeof *out);
	out->storage = storage;
	out->connect_id = pl->connect_id;
	out->method = copy_view(pl, &cur, pl->method);
	out->scheme = copy_view(pl, &cur, pl->scheme);
	out->host = copy_view(pl, &cur, pl->host);
	out->path = copy_view(pl, &cur, pl->path);
	out->raw_query = copy_view(pl, &cur, pl->raw_query);
	for (size_t i = 0; i < pl->num_headers; i++) {
		out->headers[i].name = copy_view(pl, &cur, pl->headers[i].name);
		out->headers[i].value = copy_view(pl, &cur, pl->headers[i].value);
	}
	out->num_headers = pl->num_headers;
	return 0;
}

/* ---- decode -------------------------------------------------------------------------------- */

/* A string member, or an empty view when absent or null. -EBADMSG for any other type. */
static int get_string(struct json_object *obj, const char *key, struct st_connect_view *v,
                      bool *present)
{
	struct json_object *m;
	v->p = "";
	v->len = 0;
	if (present)
		*present = false;
	if (!json_object_object_get_ex(obj, key, &m) || m == NULL)
		return 0;
	if (!json_object_is_type(m, json_type_string))
		return -EBADMSG;
	v->p = json_object_get_string(m);
	v->len = (size_t)json_object_get_string_len(m);
	if (present)
		*present = true;
	return 0;
}

static int decode_headers(struct json_object *hdr, struct plan *pl)
{
	if (hdr == NULL)
		return 0; /* Go writes a nil map as null */
	if (!json_object_is_type(hdr, json_type_object))
		return -EBADMSG;
	json_object_object_foreach(hdr, key, values)
	{
		if (values == NULL)
			continue; /* "X": null decodes to a nil slice in Go */
		if (!json_object_is_type(values, json_type_array))
			return -EBADMSG;
		size_t n = json_object_array_length(values);
		for (size_t i = 0; i < n; i++) {
			struct json_object *val = json_object_array_get_idx(values, i);
			if (val == NULL || !json_object_is_type(val, json_type_string))
				return -EBADMSG;
			if (pl->num_headers == ST_MAX_CONNECT_HEADERS)
				return -EMSGSIZE;
			struct st_connect_field *f = &pl->headers[pl->num_headers++];
			f->name.p = key;
			f->name.len =
			        strlen(key); /* json-c keys cannot hold NULs: a \u0000 cuts them */
			f->value.p = json_object_get_string(val);
			f->value.len = (size_t)json_object_get_string_len(val);
		}
	}
	return 0;
}

static int decode_tree(struct json_object *root, struct plan *pl)
{
	if (!json_object_is_type(root, json_type_object))
		return -EBADMSG;
	struct json_object *id, *url, *hdr = NULL;
	if (!json_object_object_get_ex(root, "MessID", &id) || id == NULL ||
	    !json_object_is_type(id, json_type_int) || json_object_get_int64(id) < 0)
		return -EBADMSG;
	pl->connect_id = json_object_get_uint64(id);
	if (!json_object_object_get_ex(root, "url", &url) || url == NULL ||
	    !json_object_is_type(url, json_type_object))
		return -EBADMSG;
	int rc;
	bool has_path, has_method;
	if ((rc = get_string(url, "Scheme", &pl->scheme, NULL)) < 0 ||
	    (rc = get_string(url, "Host", &pl->host, NULL)) < 0 ||
	    (rc = get_string(url, "Path", &pl->path, &has_path)) < 0 ||
	    (rc = get_string(url, "RawQuery", &pl->raw_query, NULL)) < 0 ||
	    (rc = get_string(root, "method", &pl->method, &has_method)) < 0)
		return rc;
	if (!has_path || pl->path.len == 0)
		return -EBADMSG;
	if (!has_method || pl->method.len == 0) {
		pl->method.p = "GET";
		pl->method.len = 3;
	}
	json_object_object_get_ex(root, "header", &hdr);
	return decode_headers(hdr, pl);
}

int st_connect_req_decode(const uint8_t *json, size_t len, struct st_connect_req *out)
{
	if (len > ST_MAX_CONNECT_JSON_BYTES)
		return -EMSGSIZE;
	struct json_tokener *tok = json_tokener_new_ex((int)ST_MAX_CONNECT_JSON_DEPTH);
	if (tok == NULL)
		return -ENOMEM;
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
	struct json_object *root = json_tokener_parse_ex(tok, (const char *)json, (int)len);
	int rc = 0;
	if (root == NULL) {
		enum json_tokener_error e = json_tokener_get_error(tok);
		rc = e == json_tokener_error_depth ? -EMSGSIZE : -EBADMSG;
	} else if (json_tokener_get_parse_end(tok) != len) {
		rc = -EBADMSG; /* trailing bytes after the object */
	}
	json_tokener_free(tok);
	if (rc < 0) {
		json_object_put(root);
		return rc;
	}
	/* The plan holds views into json-c's tree; it is big (headers), so keep it off the stack. */
	struct plan *pl = calloc(1, sizeof *pl);
	if (pl == NULL) {
		json_object_put(root);
		return -ENOMEM;
	}
	pl->sanitize_utf8 = true;
	rc = decode_tree(root, pl);
	if (rc == 0)
		rc = plan_materialize(pl, out);
	free(pl);
	json_object_put(root);
	return rc;
}

int st_connect_req_build(struct st_connect_req *out, const struct st_connect_parts *parts)
{
	if (parts->path.len == 0)
		return -EINVAL;
	if (parts->num_headers > ST_MAX_CONNECT_HEADERS)
		return -EMSGSIZE;
	struct plan *pl = calloc(1, sizeof *pl);
	if (pl == NULL)
		return -ENOMEM;
	pl->connect_id = parts->connect_id;
	pl->method = parts->method;
	pl->scheme = parts->scheme;
	pl->host = parts->host;
	pl->path = parts->path;
	pl->raw_query = parts->raw_query;
	/* A NULL pointer with length 0 is a valid empty view; give memchr/memcpy a real pointer. */
	struct st_connect_view *v[] = {&pl->method, &pl->scheme, &pl->host, &pl->raw_query};
	for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
		if (v[i]->p == NULL) {
			v[i]->p = "";
			v[i]->len = 0;
		}
	if (parts->num_headers > 0)
		memcpy(pl->headers, parts->headers, parts->num_headers * sizeof parts->headers[0]);
	pl->num_headers = parts->num_headers;
	int rc = plan_materialize(pl, out);
	free(pl);
	return rc;
}

void st_connect_req_cleanup(struct st_connect_req *req)
{
	if (req == NULL)
		return;
	free(req->storage);
	memset(req, 0, sizeof *req);
}

const char *st_connect_req_header(const struct st_connect_req *req, const char *name)
{
	for (size_t i = 0; i < req->num_headers; i++)
		if (strcasecmp(req->headers[i].name, name) == 0)
			return req->headers[i].value;
	return NULL;
}

/* ---- encode -------------------------------------------------------------------------------- */

/* Go's textproto.CanonicalMIMEHeaderKey: names made only of token characters get an upper-case
 * letter first and after each '-', lower case elsewhere; any other name is left as it is. */
static bool header_token_byte(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static bool header_name_canonicalizable(const char *name)
{
	if (*name == '\0')
		return false;
	for (; *name; name++)
		if (!header_token_byte((unsigned char)*name))
			return false;
	return true;
}

/* The canonical form of name[i], given the byte before it. */
static char canonical_at(const char *name, size_t i, bool canonicalizable)
{
	char c = name[i];
	if (!canonicalizable)
		return c;
	bool upper = i == 0 || name[i - 1] == '-';
	if (upper && c >= 'a' && c <= 'z')
		return (char)(c - 'a' + 'A');
	if (!upper && c >= 'A' && c <= 'Z')
		return (char)(c - 'A' + 'a');
	return c;
}

/* strcmp of the canonical forms, computed on the fly (no buffers). */
static int canonical_cmp(const char *a, const char *b)
{
	bool ca = header_name_canonicalizable(a), cb = header_name_canonicalizable(b);
	for (size_t i = 0;; i++) {
		unsigned char x = (unsigned char)canonical_at(a, i, ca);
		unsigned char y = (unsigned char)canonical_at(b, i, cb);
		if (x != y || x == 0)
			return x < y ? -1 : x > y ? 1 : 0;
	}
}

/* The canonical name as a JSON string. Canonicalizable names are ASCII tokens, so only '&'
 * needs Go's HTML escape; other names go through the general escaper unchanged. */
static void put_canonical_name(struct st__jw *o, const char *name)
{
	if (!header_name_canonicalizable(name)) {
		st__jw_string(o, name);
		return;
	}
	st__jw_put(o, "\"", 1);
	for (size_t i = 0; name[i]; i++) {
		char c = canonical_at(name, i, true);
		if (c == '&')
			st__jw_put(o, "\\u0026", 6);
		else
			st__jw_put(o, &c, 1);
	}
	st__jw_put(o, "\"", 1);
}

ssize_t st_connect_req_encode(char *out, size_t cap, const struct st_connect_req *req)
{
	struct st__jw o = {.p = out, .cap = cap};
	st__jw_puts(&o, "{\"MessID\":");
	st__jw_u64(&o, req->connect_id);
	st__jw_puts(&o, ",\"url\":{\"Scheme\":");
	st__jw_string(&o, req->scheme ? req->scheme : "");
	st__jw_puts(&o, ",\"Opaque\":\"\",\"User\":null,\"Host\":");
	st__jw_string(&o, req->host ? req->host : "");
	st__jw_puts(&o, ",\"Path\":");
	st__jw_string(&o, req->path ? req->path : "");
	st__jw_puts(&o, ",\"RawPath\":\"\",\"OmitHost\":false,\"ForceQuery\":false,\"RawQuery\":");
	st__jw_string(&o, req->raw_query ? req->raw_query : "");
	st__jw_puts(&o, ",\"Fragment\":\"\",\"RawFragment\":\"\"},\"header\":{");

	/* A stable insertion sort of indices by canonical name (n <= 64), so values of one name
	 * keep their order; equal neighbours merge into one array, as Go's map of slices does. */
	size_t order[ST_MAX_CONNECT_HEADERS];
	size_t n = req->num_headers;
	for (size_t i = 0; i < n; i++) {
		size_t cur = i, j = i;
		while (j > 0 &&
		       canonical_cmp(req->headers[order[j - 1]].name, req->headers[cur].name) > 0) {
			order[j] = order[j - 1];
			j--;
		}
		order[j] = cur;
	}
	for (size_t i = 0; i < n; i++) {
		const char *name = req->headers[order[i]].name;
		bool first = i == 0 || canonical_cmp(req->headers[order[i - 1]].name, name) != 0;
		bool last = i + 1 == n || canonical_cmp(req->headers[order[i + 1]].name, name) != 0;
		if (first) {
			if (i > 0)
				st__jw_put(&o, ",", 1);
			put_canonical_name(&o, name);
			st__jw_put(&o, ":[", 2);
		} else {
			st__jw_put(&o, ",", 1);
		}
		st__jw_string(&o, req->headers[order[i]].value);
		if (last)
			st__jw_put(&o, "]", 1);
	}
	st__jw_puts(&o, "},\"method\":");
	st__jw_string(&o, req->method && *req->method ? req->method : "GET");
	st__jw_put(&o, "}", 1);
	if (o.overflow)
		return -EMSGSIZE;
	return (ssize_t)o.len;
}
