/*
 * stream/src/config.c — option values from text (pure; see stream/config.h).
 *
 * Owns what every source of options shares: the option table's defaults and cleanup, parsing a
 * value as a flag gives it (integers with their range, durations, byte sizes, enums, booleans,
 * lists), and comparing or copying options for SIGHUP (st_config_diff, st_config_copy_opt). The
 * file formats are their own files on top of this one (config_int.h): config_json.c (JSON) and
 * config_yaml.c (YAML).
 */
#include <stream/config.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_int.h"

const char *const st_log_level_names[] = {"error", "warn", "info", "debug", NULL};
const char *const st_sandbox_mode_names[] = {"off", "log", "errno", "kill", NULL};
const char *const st_log_format_names[] = {"text", "json", NULL};
const char *const st_on_off_names[] = {"off", "on", NULL};
const char *const st_node_name_from_names[] = {"system-node-cn", "cn", NULL};

void st__config_msg(char *err, size_t err_len, const char *fmt, ...)
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
		st__config_msg(err, err_len, "--%s %s: out of range (%llu..%llu%s)", o->name, text,
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
		st__config_msg(err, err_len, "--%s: value over %u bytes", o->name,
		               ST_CONFIG_MAX_VALUE_BYTES);
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
			st__config_msg(err, err_len, "--%s \"%.64s\": not a number", o->name, text);
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
			st__config_msg(err, err_len, "--%s \"%.64s\": expected true or false",
			               o->name, text);
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
			st__config_msg(err, err_len, "--%s \"%.64s\": expected one of %s", o->name,
			               text, names);
		}
		return -EINVAL;
	case ST_OPT_DURATION_MS:
		if (!parse_scaled(text, duration_units, duration_scale, &v)) {
			st__config_msg(
			        err, err_len,
			        "--%s \"%.64s\": not a duration (examples: 250ms, 5s, 2m, 1h)",
			        o->name, text);
			return -EINVAL;
		}
		if (check_range(o, v, text, err, err_len) < 0)
			return -EINVAL;
		*(uint64_t *)f = v;
		return 0;
	case ST_OPT_BYTES:
		if (!parse_scaled(text, byte_units, byte_scale, &v)) {
			st__config_msg(err, err_len,
			               "--%s \"%.64s\": not a byte size (examples: 65536, 64KiB, "
			               "1MiB, 1GiB)",
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
					st__config_msg(err, err_len, "--%s: more than %u values",
					               o->name, ST_CONFIG_MAX_LIST);
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
		st__config_msg(err, err_len, "unknown option --%s", name);
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