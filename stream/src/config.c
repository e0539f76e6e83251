/*
 * stream/src/config.c — option values from text and from JSON (pure; see stream/config.h).
 */
#include <stream/config.h>

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "config_int.h"

const char *const st_log_level_names[] = {"error", "warn", "info", "debug", NULL};
const char *const st_sandbox_mode_names[] = {"off", "log", "errno", "kill", NULL};
const char *const st_log_format_names[] = {"text", "json", NULL};
const char *const st_on_off_names[] = {"off", "on", NULL};

static void msg(char *err, size_t err_len, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static void msg(char *err, size_t err_len, const char *fmt, ...)
{
	if (err == NULL || err_len == 0)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, err_len, fmt, ap);
	va_end(ap);
}

static void *field(const struct st_opt *o, void *cfg)
{
	return (char *)cfg + o->offset;
}

static const struct st_opt *find(const struct st_config_spec *spec, const char *name, size_t len)
{
	for (size_t i = 0; i < spec->num_opts; i++)
		if (strlen(spec->opts[i].name) == len && memcmp(spec->opts[i].name, name, len) == 0)
			return &spec->opts[i];
	return NULL;
}

/* A plain decimal; false for anything else or overflow. */
static bool parse_dec(const char *s, size_t len, uint64_t *out)
{
	if (len == 0 || len > 20)
		return false;
	uint64_t v = 0;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		uint64_t d = (uint64_t)(s[i] - '0');
		if (v > (UINT64_MAX - d) / 10)
			return false;
		v = v * 10 + d;
	}
	*out = v;
	return true;
}

/* "<digits><unit>" with a unit table; false for unknown units or overflow. */
static bool parse_scaled(const char *s, const char *const *units, const uint64_t *scale,
                         uint64_t *out)
{
	size_t n = 0;
	while (s[n] >= '0' && s[n] <= '9')
		n++;
	uint64_t v;
	if (!parse_dec(s, n, &v))
		return false;
	const char *unit = s + n;
	for (size_t i = 0; units[i]; i++)
		if (strcmp(unit, units[i]) == 0) {
			if (scale[i] && v > UINT64_MAX / scale[i])
				return false;
			*out = v * scale[i];
			return true;
		}
	return false;
}

static const char *const duration_units[] = {"", "ms", "s", "m", "h", NULL};
static const uint64_t duration_scale[] = {1, 1, 1000, 60000, 3600000};
static const char *const byte_units[] = {"", "B", "KiB", "MiB", "GiB", "TiB", NULL};
static const uint64_t byte_scale[] = {1, 1, 1ull << 10, 1ull << 20, 1ull << 30, 1ull << 40};

static int check_range(const struct st_opt *o, uint64_t v, const char *text, char *err,
                       size_t err_len)
{
	if (v < o->min || (o->max && v > o->max)) {
		msg(err, err_len, "--%s %s: out of range (%llu..%llu%s)", o->name, text,
		    (unsigned long long)o->min, (unsigned long long)o->max,
		    o->type == ST_OPT_DURATION_MS ? " ms"
		    : o->type == ST_OPT_BYTES     ? " bytes"
		                                  : "");
		return -EINVAL;
	}
	return 0;
}

static int list_append(struct st_strlist *l, const char *p, size_t len)
{
	if (l->n >= ST_CONFIG_MAX_LIST)
		return -E2BIG;
	char **v = realloc(l->v, (l->n + 1) * sizeof *v);
	if (v == NULL)
		return -ENOMEM;
	l->v = v;
	char *s = malloc(len + 1);
	if (s == NULL)
		return -ENOMEM;
	memcpy(s, p, len);
	s[len] = '\0';
	l->v[l->n++] = s;
	return 0;
}

static void list_clear(struct st_strlist *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
	l->v = NULL;
	l->n = 0;
}

/* Sets @o from @text. */
static int set_value(const struct st_opt *o, void *cfg, const char *text, char *err, size_t err_len)
{
	void *f = field(o, cfg);
	size_t len = strlen(text);
	if (len > ST_CONFIG_MAX_VALUE_BYTES) {
		msg(err, err_len, "--%s: value over %u bytes", o->name, ST_CONFIG_MAX_VALUE_BYTES);
		return -EINVAL;
	}
	uint64_t v;
	switch (o->type) {
	case ST_OPT_STRING: {
		char *s = strdup(text);
		if (s == NULL)
			return -ENOMEM;
		free(*(char **)f);
		*(char **)f = s;
		return 0;
	}
	case ST_OPT_U64:
		if (!parse_dec(text, len, &v)) {
			msg(err, err_len, "--%s \"%.64s\": not a number", o->name, text);
			return -EINVAL;
		}
		if (check_range(o, v, text, err, err_len) < 0)
			return -EINVAL;
		*(uint64_t *)f = v;
		return 0;
	case ST_OPT_BOOL:
		if (strcmp(text, "true") == 0 || strcmp(text, "1") == 0)
			*(bool *)f = true;
		else if (strcmp(text, "false") == 0 || strcmp(text, "0") == 0)
			*(bool *)f = false;
		else {
			msg(err, err_len, "--%s \"%.64s\": expected true or false", o->name, text);
			return -EINVAL;
		}
		return 0;
	case ST_OPT_ENUM:
		for (int i = 0; o->enum_names[i]; i++)
			if (strcmp(o->enum_names[i], text) == 0) {
				*(int *)f = i;
				return 0;
			}
		{
			char names[256] = "";
			size_t n = 0;
			for (int i = 0; o->enum_names[i] && n < sizeof names; i++) {
				int w = snprintf(names + n, sizeof names - n, "%s%s", i ? ", " : "",
				                 o->enum_names[i]);
				if (w < 0)
					break;
				n += (size_t)w;
			}
			msg(err, err_len, "--%s \"%.64s\": expected one of %s", o->name, text,
			    names);
		}
		return -EINVAL;
	case ST_OPT_DURATION_MS:
		if (!parse_scaled(text, duration_units, duration_scale, &v)) {
			msg(err, err_len,
			    "--%s \"%.64s\": not a duration (examples: 250ms, 5s, 2m, 1h)", o->name,
			    text);
			return -EINVAL;
		}
		if (check_range(o, v, text, err, err_len) < 0)
			return -EINVAL;
		*(uint64_t *)f = v;
		return 0;
	case ST_OPT_BYTES:
		if (!parse_scaled(text, byte_units, byte_scale, &v)) {
			msg(err, err_len,
			    "--%s \"%.64s\": not a byte size (examples: 65536, 64KiB, 1MiB, 1GiB)",
			    o->name, text);
			return -EINVAL;
		}
		if (check_range(o, v, text, err, err_len) < 0)
			return -EINVAL;
		*(uint64_t *)f = v;
		return 0;
	case ST_OPT_STRING_LIST: {
		/* Comma-separated; empty items are skipped. */
		struct st_strlist *l = f;
		const char *p = text;
		while (*p) {
			const char *comma = strchr(p, ',');
			size_t n = comma ? (size_t)(comma - p) : strlen(p);
			if (n) {
				int rc = list_append(l, p, n);
				if (rc == -E2BIG) {
					msg(err, err_len, "--%s: more than %u values", o->name,
					    ST_CONFIG_MAX_LIST);
					return -EINVAL;
				}
				if (rc < 0)
					return rc;
			}
			p += n + (comma != NULL);
		}
		return 0;
	}
	}
	return -EINVAL;
}

int st_config_set(const struct st_config_spec *spec, void *cfg, const char *name, const char *value,
                  char *err, size_t err_len)
{
	const struct st_opt *o = find(spec, name, strlen(name));
	if (o == NULL) {
		msg(err, err_len, "unknown option --%s", name);
		return -ENOENT;
	}
	return set_value(o, cfg, value, err, err_len);
}

int st_config_defaults(const struct st_config_spec *spec, void *cfg, char *err, size_t err_len)
{
	for (size_t i = 0; i < spec->num_opts; i++) {
		const struct st_opt *o = &spec->opts[i];
		if (o->default_value == NULL)
			continue;
		int rc = set_value(o, cfg, o->default_value, err, err_len);
		if (rc < 0)
			return rc;
	}
	return 0;
}

void st_config_cleanup(const struct st_config_spec *spec, void *cfg)
{
	for (size_t i = 0; i < spec->num_opts; i++) {
		const struct st_opt *o = &spec->opts[i];
		if (o->type == ST_OPT_STRING) {
			free(*(char **)field(o, cfg));
			*(char **)field(o, cfg) = NULL;
		} else if (o->type == ST_OPT_STRING_LIST) {
			list_clear(field(o, cfg));
		}
	}
}

static int json_value(const struct st_opt *o, void *cfg, struct json_object *v, const char *src,
                      char *err, size_t err_len)
{
	char num[32];
	switch (json_object_get_type(v)) {
	case json_type_string:
		if (o->type == ST_OPT_STRING_LIST) {
			msg(err, err_len, "%s: key \"%s\": expected an array of strings", src,
			    o->name);
			return -EINVAL;
		}
		return set_value(o, cfg, json_object_get_string(v), err, err_len);
	case json_type_int: {
		int64_t n = json_object_get_int64(v);
		if (n < 0 || o->type == ST_OPT_STRING || o->type == ST_OPT_STRING_LIST ||
		    o->type == ST_OPT_ENUM || o->type == ST_OPT_BOOL)
			break;
		snprintf(num, sizeof num, "%lld", (long long)n);
		return set_value(o, cfg, num, err, err_len);
	}
	case json_type_boolean:
		if (o->type != ST_OPT_BOOL)
			break;
		return set_value(o, cfg, json_object_get_boolean(v) ? "true" : "false", err,
		                 err_len);
	case json_type_array: {
		if (o->type != ST_OPT_STRING_LIST)
			break;
		struct st_strlist *l = field(o, cfg);
		list_clear(l); /* the file replaces the default list */
		size_t n = json_object_array_length(v);
		if (n > ST_CONFIG_MAX_LIST) {
			msg(err, err_len, "%s: key \"%s\": more than %u values", src, o->name,
			    ST_CONFIG_MAX_LIST);
			return -EINVAL;
		}
		for (size_t i = 0; i < n; i++) {
			struct json_object *e = json_object_array_get_idx(v, i);
			if (!json_object_is_type(e, json_type_string)) {
				msg(err, err_len, "%s: key \"%s\"[%zu]: expected a string", src,
				    o->name, i);
				return -EINVAL;
			}
			const char *s = json_object_get_string(e);
			size_t sl = strlen(s);
			if (sl > ST_CONFIG_MAX_VALUE_BYTES) {
				msg(err, err_len, "%s: key \"%s\"[%zu]: over %u bytes", src,
				    o->name, i, ST_CONFIG_MAX_VALUE_BYTES);
				return -EINVAL;
			}
			int rc = list_append(l, s, sl);
			if (rc < 0)
				return rc;
		}
		return 0;
	}
	default:
		break;
	}
	msg(err, err_len, "%s: key \"%s\": wrong type (%s)", src, o->name,
	    json_type_to_name(json_object_get_type(v)));
	return -EINVAL;
}

/*
 * A key the top-level object of @json has twice, as it is written (quotes excluded): json-c
 * keeps the last one silently, and a file that sets an option twice is a mistake to report.
 * Returns its length with *@key pointing at it, 0 when every key is unique, or 1 with *@key
 * NULL for a single quote outside a string. Only called on text json-c accepted, so the scan
 * can trust its shape.
 */
#define DUP_SCAN_MAX_KEYS 256u
static size_t duplicate_key(const char *json, size_t len, const char **key)
{
	const char *keys[DUP_SCAN_MAX_KEYS];
	size_t lens[DUP_SCAN_MAX_KEYS], n = 0;
	int depth = 0;
	bool expect_key = false;
	for (size_t i = 0; i < len; i++) {
		char c = json[i];
		if (c == '"') {
			size_t start = ++i;
			while (i < len && json[i] != '"')
				i += json[i] == '\\' ? 2 : 1;
			if (depth == 1 && expect_key && i <= len) {
				size_t klen = i - start;
				for (size_t k = 0; k < n; k++)
					if (lens[k] == klen &&
					    memcmp(keys[k], json + start, klen) == 0) {
						*key = json + start;
						return klen ? klen : 1;
					}
				if (n < DUP_SCAN_MAX_KEYS) {
					keys[n] = json + start;
					lens[n++] = klen;
				}
			}
			expect_key = false;
		} else if (c == '{' || c == '[') {
			depth++;
			expect_key = c == '{' && depth == 1;
		} else if (c == '}' || c == ']') {
			depth--;
		} else if (c == ',' && depth == 1) {
			expect_key = true;
		} else if (c == '\'') {
			/* json-c takes single-quoted strings even when strict; JSON does not. */
			*key = NULL;
			return 1;
		}
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
 * only for plain keys), or 0 when it cannot be found. Same shape trust as duplicate_key(). */
static size_t json_key_line(const char *json, size_t len, const char *key)
{
	size_t klen = strlen(key);
	int depth = 0;
	bool expect_key = false;
	for (size_t i = 0; i < len; i++) {
		char c = json[i];
		if (c == '"') {
			size_t start = ++i;
			while (i < len && json[i] != '"')
				i += json[i] == '\\' ? 2 : 1;
			if (depth == 1 && expect_key && i <= len && i - start == klen &&
			    memcmp(json + start, key, klen) == 0)
				return line_at(json, start);
			expect_key = false;
		} else if (c == '{' || c == '[') {
			depth++;
			expect_key = c == '{' && depth == 1;
		} else if (c == '}' || c == ']') {
			depth--;
		} else if (c == ',' && depth == 1) {
			expect_key = true;
		}
	}
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
		msg(err, err_len, "%s: key \"%s\": expected a string", at, key);
		return -EINVAL;
	}
	if (strcmp(json_object_get_string(v), want) != 0) {
		msg(err, err_len, "%s: key \"%s\": \"%.64s\", expected \"%s\"", at, key,
		    json_object_get_string(v), want);
		return -EINVAL;
	}
	return 0;
}

int st_config_parse_json(const struct st_config_spec *spec, void *cfg, const char *json, size_t len,
                         const char *source, char *err, size_t err_len)
{
	if (len > ST_CONFIG_MAX_FILE_BYTES) {
		msg(err, err_len, "%s: over %u bytes", source, ST_CONFIG_MAX_FILE_BYTES);
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
		msg(err, err_len, "%s: not valid JSON (%s)", source,
		    root == NULL && jerr == json_tokener_success ? "empty"
		                                                 : json_tokener_error_desc(jerr));
		return -EINVAL;
	}
	for (; used < len; used++)
		if (json[used] != ' ' && json[used] != '\n' && json[used] != '\t' &&
		    json[used] != '\r') {
			json_object_put(root);
			msg(err, err_len, "%s: trailing bytes after the JSON object", source);
			return -EINVAL;
		}
	if (!json_object_is_type(root, json_type_object)) {
		json_object_put(root);
		msg(err, err_len, "%s: expected a JSON object of option names", source);
		return -EINVAL;
	}
	const char *dup;
	size_t dup_len = duplicate_key(json, len, &dup);
	if (dup_len) {
		json_object_put(root);
		if (dup == NULL)
			msg(err, err_len, "%s: not valid JSON (single quotes)", source);
		else
			msg(err, err_len, "%s:%zu: key \"%.*s\" appears more than once", source,
			    line_at(json, (size_t)(dup - json)), (int)(dup_len > 64 ? 64 : dup_len),
			    dup);
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
		const struct st_opt *o = find(spec, key, strlen(key));
		if (o == NULL) {
			msg(err, err_len, "%s: unknown key \"%.64s\"", at, key);
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
				msg(err, err_len, "%s: key \"%s\": %s", at, o->name, tmp);
			}
			break;
		}
	}
	json_object_put(root);
	return rc;
}

/* ---- for the other parsers (config_int.h) ----------------------------------------------- */

const struct st_opt *st__config_find(const struct st_config_spec *spec, const char *name,
                                     size_t len)
{
	return find(spec, name, len);
}

int st__config_set_value(const struct st_opt *o, void *cfg, const char *text, char *err,
                         size_t err_len)
{
	return set_value(o, cfg, text, err, err_len);
}

int st__config_list_append(const struct st_opt *o, void *cfg, const char *p, size_t len)
{
	return list_append(field(o, cfg), p, len);
}

void st__config_list_clear(const struct st_opt *o, void *cfg)
{
	list_clear(field(o, cfg));
}

/* ---- comparing and copying (SIGHUP) ------------------------------------------------------ */

static bool str_eq(const char *a, const char *b)
{
	return a == b || (a && b && strcmp(a, b) == 0);
}

static bool opt_equal(const struct st_opt *o, const void *a, const void *b)
{
	const void *fa = (const char *)a + o->offset, *fb = (const char *)b + o->offset;
	switch (o->type) {
	case ST_OPT_STRING:
		return str_eq(*(char *const *)fa, *(char *const *)fb);
	case ST_OPT_BOOL:
		return *(const bool *)fa == *(const bool *)fb;
	case ST_OPT_ENUM:
		return *(const int *)fa == *(const int *)fb;
	case ST_OPT_U64:
	case ST_OPT_DURATION_MS:
	case ST_OPT_BYTES:
		return *(const uint64_t *)fa == *(const uint64_t *)fb;
	case ST_OPT_STRING_LIST: {
		const struct st_strlist *la = fa, *lb = fb;
		if (la->n != lb->n)
			return false;
		for (size_t i = 0; i < la->n; i++)
			if (!str_eq(la->v[i], lb->v[i]))
				return false;
		return true;
	}
	}
	return false;
}

size_t st_config_diff(const struct st_config_spec *spec, const void *a, const void *b,
                      st_config_diff_cb cb, void *user)
{
	size_t n = 0;
	for (size_t i = 0; i < spec->num_opts; i++)
		if (!opt_equal(&spec->opts[i], a, b)) {
			n++;
			if (cb)
				cb(&spec->opts[i], user);
		}
	return n;
}

int st_config_copy_opt(const struct st_opt *o, void *dst, const void *src)
{
	void *fd = field(o, dst);
	const void *fs = (const char *)src + o->offset;
	switch (o->type) {
	case ST_OPT_STRING: {
		const char *s = *(char *const *)fs;
		char *copy = NULL;
		if (s) {
			size_t n = strlen(s) + 1;
			if ((copy = malloc(n)) == NULL)
				return -ENOMEM;
			memcpy(copy, s, n);
		}
		free(*(char **)fd);
		*(char **)fd = copy;
		return 0;
	}
	case ST_OPT_STRING_LIST: {
		const struct st_strlist *ls = fs;
		struct st_strlist l = {0};
		for (size_t i = 0; i < ls->n; i++)
			if (list_append(&l, ls->v[i], strlen(ls->v[i])) < 0) {
				list_clear(&l);
				return -ENOMEM;
			}
		list_clear(fd);
		*(struct st_strlist *)fd = l;
		return 0;
	}
	case ST_OPT_BOOL:
		*(bool *)fd = *(const bool *)fs;
		return 0;
	case ST_OPT_ENUM:
		*(int *)fd = *(const int *)fs;
		return 0;
	case ST_OPT_U64:
	case ST_OPT_DURATION_MS:
	case ST_OPT_BYTES:
		*(uint64_t *)fd = *(const uint64_t *)fs;
		return 0;
	}
	return -EINVAL;
}
