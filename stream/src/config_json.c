/*
 * stream/src/config_json.c — a configuration file in JSON (pure; see stream/config.h).
 *
 * Strict JSON through json-c (depth 8, no trailing commas or single quotes), one flat object of
 * option names; each value goes through the same parser as its flag (config.c), so a file and a
 * flag can never disagree. json-c keeps the last of two equal keys silently, so the text is
 * scanned for them, and errors name the file, the key's line and the key. apiVersion and kind
 * are optional here (files from before the version load), right when given.
 */
#include <stream/config.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "config_int.h"

static int json_value(const struct st_opt *o, void *cfg, struct json_object *v, const char *src,
                      char *err, size_t err_len)
{
	char num[32];
	switch (json_object_get_type(v)) {
	case json_type_string:
		if (o->type == ST_OPT_STRING_LIST) {
			st__config_msg(err, err_len, "%s: key \"%s\": expected an array of strings",
			               src, o->name);
			return -EINVAL;
		}
		return st__config_set_value(o, cfg, json_object_get_string(v), err, err_len);
	case json_type_int: {
		int64_t n = json_object_get_int64(v);
		if (n < 0 || o->type == ST_OPT_STRING || o->type == ST_OPT_STRING_LIST ||
		    o->type == ST_OPT_ENUM || o->type == ST_OPT_BOOL)
			break;
		snprintf(num, sizeof num, "%lld", (long long)n);
		return st__config_set_value(o, cfg, num, err, err_len);
	}
	case json_type_boolean:
		if (o->type != ST_OPT_BOOL)
			break;
		return st__config_set_value(o, cfg, json_object_get_boolean(v) ? "true" : "false",
		                            err, err_len);
	case json_type_array: {
		if (o->type != ST_OPT_STRING_LIST)
			break;
		st__config_list_clear(o, cfg); /* the file replaces the default list */
		size_t n = json_object_array_length(v);
		if (n > ST_CONFIG_MAX_LIST) {
			st__config_msg(err, err_len, "%s: key \"%s\": more than %u values", src,
			               o->name, ST_CONFIG_MAX_LIST);
			return -EINVAL;
		}
		for (size_t i = 0; i < n; i++) {
			struct json_object *e = json_object_array_get_idx(v, i);
			if (!json_object_is_type(e, json_type_string)) {
				st__config_msg(err, err_len,
				               "%s: key \"%s\"[%zu]: expected a string", src,
				               o->name, i);
				return -EINVAL;
			}
			const char *s = json_object_get_string(e);
			size_t sl = strlen(s);
			if (sl > ST_CONFIG_MAX_VALUE_BYTES) {
				st__config_msg(err, err_len, "%s: key \"%s\"[%zu]: over %u bytes",
				               src, o->name, i, ST_CONFIG_MAX_VALUE_BYTES);
				return -EINVAL;
			}
			int rc = st__config_list_append(o, cfg, s, sl);
			if (rc < 0)
				return rc;
		}
		return 0;
	}
	default:
		break;
	}
	st__config_msg(err, err_len, "%s: key \"%s\": wrong type (%s)", src, o->name,
	               json_type_to_name(json_object_get_type(v)));
	return -EINVAL;
}

/*
 * The top-level keys of a JSON object, in the order they are written. Only used on text json-c
 * accepted, so the scan can trust its shape: strings are skipped by their quotes and escapes,
 * and a key is the first string of the object or the first after a comma at depth 1.
 */
struct key_scan {
	const char *json;
	size_t len, i;
	int depth;
	bool expect_key;
};

/* The next key: 1 with *@key and *@klen set (quotes excluded), 0 at the end, or -1 at a single
 * quote outside a string (json-c takes single-quoted strings even when strict; JSON does not). */
static int next_key(struct key_scan *s, const char **key, size_t *klen)
{
	for (; s->i < s->len; s->i++) {
		char c = s->json[s->i];
		if (c == '"') {
			size_t start = ++s->i;
			while (s->i < s->len && s->json[s->i] != '"')
				s->i += s->json[s->i] == '\\' ? 2 : 1;
			bool is_key = s->depth == 1 && s->expect_key && s->i <= s->len;
			s->expect_key = false;
			if (is_key) {
				*key = s->json + start;
				*klen = s->i - start;
				s->i++; /* past the closing quote */
				return 1;
			}
		} else if (c == '{' || c == '[') {
			s->depth++;
			s->expect_key = c == '{' && s->depth == 1;
		} else if (c == '}' || c == ']') {
			s->depth--;
		} else if (c == ',' && s->depth == 1) {
			s->expect_key = true;
		} else if (c == '\'') {
			return -1;
		}
	}
	return 0;
}

/*
 * A key the top-level object of @json has twice, as it is written (quotes excluded): json-c
 * keeps the last one silently, and a file that sets an option twice is a mistake to report.
 * Returns its length with *@key pointing at it, 0 when every key is unique, or 1 with *@key
 * NULL for a single quote outside a string.
 */
#define DUP_SCAN_MAX_KEYS 256u
static size_t duplicate_key(const char *json, size_t len, const char **key)
{
	const char *keys[DUP_SCAN_MAX_KEYS];
	size_t lens[DUP_SCAN_MAX_KEYS], n = 0;
	struct key_scan scan = {.json = json, .len = len};
	const char *k;
	size_t klen;
	int rc;
	while ((rc = next_key(&scan, &k, &klen)) > 0) {
		for (size_t i = 0; i < n; i++)
			if (lens[i] == klen && memcmp(keys[i], k, klen) == 0) {
				*key = k;
				return klen ? klen : 1;
			}
		if (n < DUP_SCAN_MAX_KEYS) {
			keys[n] = k;
			lens[n++] = klen;
		}
	}
	if (rc < 0) {
		*key = NULL;
		return 1;
	}
	return 0;
}

/* The 1-based line of byte @at of @text. */
static size_t line_at(const char *text, size_t at)
{
	size_t line = 1;
	for (size_t i = 0; i < at; i++)
		line += text[i] == '\n';
	return line;
}

/* The line of the top-level key @key (as json-c gave it, compared with the text unescaped
 * only for plain keys), or 0 when it cannot be found. Called once duplicate_key() found no
 * single quote, so the scan sees every key. */
static size_t json_key_line(const char *json, size_t len, const char *key)
{
	size_t want = strlen(key), klen;
	struct key_scan scan = {.json = json, .len = len};
	const char *k;
	while (next_key(&scan, &k, &klen) > 0)
		if (klen == want && memcmp(k, key, klen) == 0)
			return line_at(json, (size_t)(k - json));
	return 0;
}

/* "SOURCE:LINE" for messages (":LINE" left out when the key was not found). */
static void where(char *buf, size_t cap, const char *source, const char *json, size_t len,
                  const char *key)
{
	size_t line = json_key_line(json, len, key);
	if (line)
		snprintf(buf, cap, "%s:%zu", source, line);
	else
		snprintf(buf, cap, "%s", source);
}

/* apiVersion and kind in JSON: optional (files from before the version), right when given. */
static int json_header(const struct st_config_spec *spec, const char *key, struct json_object *v,
                       const char *at, char *err, size_t err_len)
{
	const char *want = strcmp(key, "kind") == 0 ? spec->kind : ST_CONFIG_API_VERSION;
	if (!json_object_is_type(v, json_type_string)) {
		st__config_msg(err, err_len, "%s: key \"%s\": expected a string", at, key);
		return -EINVAL;
	}
	if (strcmp(json_object_get_string(v), want) != 0) {
		st__config_msg(err, err_len, "%s: key \"%s\": \"%.64s\", expected \"%s\"", at, key,
		               json_object_get_string(v), want);
		return -EINVAL;
	}
	return 0;
}

int st_config_parse_json(const struct st_config_spec *spec, void *cfg, const char *json, size_t len,
                         const char *source, char *err, size_t err_len)
{
	if (len > ST_CONFIG_MAX_FILE_BYTES) {
		st__config_msg(err, err_len, "%s: over %u bytes", source, ST_CONFIG_MAX_FILE_BYTES);
		return -EMSGSIZE;
	}
	struct json_tokener *tok = json_tokener_new_ex(8); /* a config is flat: depth 2 */
	if (tok == NULL)
		return -ENOMEM;
	/* Strict: no trailing commas, no single quotes, nothing JSON does not allow. */
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
	struct json_object *root = json_tokener_parse_ex(tok, json, (int)len);
	enum json_tokener_error jerr = json_tokener_get_error(tok);
	size_t used = json_tokener_get_parse_end(tok);
	json_tokener_free(tok);
	if (root == NULL || jerr != json_tokener_success) {
		json_object_put(root);
		st__config_msg(err, err_len, "%s: not valid JSON (%s)", source,
		               root == NULL && jerr == json_tokener_success
		                       ? "empty"
		                       : json_tokener_error_desc(jerr));
		return -EINVAL;
	}
	for (; used < len; used++)
		if (json[used] != ' ' && json[used] != '\n' && json[used] != '\t' &&
		    json[used] != '\r') {
			json_object_put(root);
			st__config_msg(err, err_len, "%s: trailing bytes after the JSON object",
			               source);
			return -EINVAL;
		}
	if (!json_object_is_type(root, json_type_object)) {
		json_object_put(root);
		st__config_msg(err, err_len, "%s: expected a JSON object of option names", source);
		return -EINVAL;
	}
	const char *dup;
	size_t dup_len = duplicate_key(json, len, &dup);
	if (dup_len) {
		json_object_put(root);
		if (dup == NULL)
			st__config_msg(err, err_len, "%s: not valid JSON (single quotes)", source);
		else
			st__config_msg(err, err_len, "%s:%zu: key \"%.*s\" appears more than once",
			               source, line_at(json, (size_t)(dup - json)),
			               (int)(dup_len > 64 ? 64 : dup_len), dup);
		return -EINVAL;
	}
	int rc = 0;
	char at[320];
	json_object_object_foreach(root, key, val)
	{
		where(at, sizeof at, source, json, len, key);
		if (spec->kind && (strcmp(key, "apiVersion") == 0 || strcmp(key, "kind") == 0)) {
			rc = json_header(spec, key, val, at, err, err_len);
			if (rc < 0)
				break;
			continue;
		}
		const struct st_opt *o = st__config_find(spec, key, strlen(key));
		if (o == NULL) {
			st__config_msg(err, err_len, "%s: unknown key \"%.64s\"", at, key);
			rc = -EINVAL;
			break;
		}
		rc = json_value(o, cfg, val, at, err, err_len);
		if (rc < 0) {
			/* Value errors are worded for flags: say which file, line and key. */
			size_t sl = strlen(source);
			if (err && err_len > sl + 2 && strncmp(err, source, sl) != 0) {
				char tmp[512];
				snprintf(tmp, sizeof tmp, "%s", err);
				st__config_msg(err, err_len, "%s: key \"%s\": %s", at, o->name,
				               tmp);
			}
			break;
		}
	}
	json_object_put(root);
	return rc;
}
