/*
 * stream/src/config_yaml.c — the YAML config file (pure; see stream/config.h).
 *
 * libyaml's event parser, not its document loader: the loader would build the whole tree first,
 * aliases expanded by whoever walks it (the "billion laughs"). Events let us refuse what a flat
 * option file never needs — anchors, aliases, tags, nested mappings, a second document — at the
 * event that brings it, so the work is bounded by the input's size and nothing is expanded.
 * Scalars stay text and go through the same parser as flags, so "5s", "64KiB" and "true" mean
 * what they mean on the command line; YAML 1.1's implicit types (yes/on booleans, octal, null)
 * play no part.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <yaml.h>

#include "config_int.h"

#define YAML_MAX_OPTS 256u /* options a table may have: the duplicate-key bitmap's size */

struct yaml_in {
	const struct st_config_spec *spec;
	void *cfg;
	const char *source;
	char *err;
	size_t err_len;
	yaml_parser_t parser;
	uint64_t seen[YAML_MAX_OPTS / 64]; /* options already set by this file */
	bool have_api_version, have_kind;
};

static void yfail(struct yaml_in *in, size_t line, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static void yfail(struct yaml_in *in, size_t line, const char *fmt, ...)
{
	if (in->err == NULL || in->err_len == 0)
		return;
	int n = snprintf(in->err, in->err_len, "%s:%zu: ", in->source, line);
	if (n < 0 || (size_t)n >= in->err_len)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(in->err + n, in->err_len - (size_t)n, fmt, ap);
	va_end(ap);
}

static size_t line_of(const yaml_event_t *ev)
{
	return ev->start_mark.line + 1;
}

/* The next event, or -EINVAL with libyaml's reason (and its line) in the message. */
static int next(struct yaml_in *in, yaml_event_t *ev)
{
	if (yaml_parser_parse(&in->parser, ev))
		return 0;
	if (in->parser.error == YAML_MEMORY_ERROR)
		return -ENOMEM;
	yfail(in, in->parser.problem_mark.line + 1, "not valid YAML (%s%s%s)",
	      in->parser.problem ? in->parser.problem : "syntax error",
	      in->parser.context ? " " : "", in->parser.context ? in->parser.context : "");
	return -EINVAL;
}

/* Anchors, aliases and tags: refused wherever they appear (stream/config.h). */
static int refuse_extras(struct yaml_in *in, const yaml_event_t *ev, const char *key)
{
	const yaml_char_t *anchor = NULL, *tag = NULL;
	switch (ev->type) {
	case YAML_ALIAS_EVENT:
		yfail(in, line_of(ev), "%s%s%saliases (*%.32s) are not accepted",
		      key ? "key \"" : "", key ? key : "", key ? "\": " : "",
		      (const char *)ev->data.alias.anchor);
		return -EINVAL;
	case YAML_SCALAR_EVENT:
		anchor = ev->data.scalar.anchor;
		tag = ev->data.scalar.tag;
		break;
	case YAML_SEQUENCE_START_EVENT:
		anchor = ev->data.sequence_start.anchor;
		tag = ev->data.sequence_start.tag;
		break;
	case YAML_MAPPING_START_EVENT:
		anchor = ev->data.mapping_start.anchor;
		tag = ev->data.mapping_start.tag;
		break;
	default:
		return 0;
	}
	if (anchor) {
		yfail(in, line_of(ev), "%s%s%sanchors (&%.32s) are not accepted",
		      key ? "key \"" : "", key ? key : "", key ? "\": " : "", (const char *)anchor);
		return -EINVAL;
	}
	if (tag) {
		yfail(in, line_of(ev), "%s%s%stags (%.32s) are not accepted", key ? "key \"" : "",
		      key ? key : "", key ? "\": " : "", (const char *)tag);
		return -EINVAL;
	}
	return 0;
}

/* A scalar's text, refused when it holds a NUL (it would be cut there silently) or is a plain
 * empty/null value (an option named and left empty is a mistake: write "" for empty). */
static const char *scalar_text(struct yaml_in *in, const yaml_event_t *ev, const char *key)
{
	const char *v = (const char *)ev->data.scalar.value;
	size_t len = ev->data.scalar.length;
	if (strlen(v) != len) {
		yfail(in, line_of(ev), "key \"%s\": a NUL byte in the value", key);
		return NULL;
	}
	if (ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
	    (len == 0 || strcmp(v, "~") == 0 || strcmp(v, "null") == 0)) {
		yfail(in, line_of(ev), "key \"%s\": no value (write \"\" for an empty string)",
		      key);
		return NULL;
	}
	return v;
}

/* apiVersion or kind: must be exactly what the spec says. */
static int check_header(struct yaml_in *in, const char *key, const yaml_event_t *ev,
                        const char *want, bool *have)
{
	if (ev->type != YAML_SCALAR_EVENT) {
		yfail(in, line_of(ev), "key \"%s\": expected a string", key);
		return -EINVAL;
	}
	const char *v = scalar_text(in, ev, key);
	if (v == NULL)
		return -EINVAL;
	if (*have) {
		yfail(in, line_of(ev), "key \"%s\" appears more than once", key);
		return -EINVAL;
	}
	*have = true;
	if (strcmp(v, want) != 0) {
		yfail(in, line_of(ev), "key \"%s\": \"%.64s\", expected \"%s\"", key, v, want);
		return -EINVAL;
	}
	return 0;
}

/* A value error from the flag parser ("--name value: why"): prefixed with where it was. */
static int value_error(struct yaml_in *in, size_t line, const char *key, int rc)
{
	if (rc != -EINVAL || in->err == NULL)
		return rc;
	char why[384];
	snprintf(why, sizeof why, "%s", in->err);
	yfail(in, line, "key \"%s\": %s", key, why);
	return rc;
}

/* The value of option @o: a scalar, or a sequence of scalars for a list. */
static int option_value(struct yaml_in *in, const struct st_opt *o, yaml_event_t *ev)
{
	int rc = refuse_extras(in, ev, o->name);
	if (rc < 0)
		return rc;
	if (ev->type == YAML_SCALAR_EVENT) {
		if (o->type == ST_OPT_STRING_LIST) {
			yfail(in, line_of(ev), "key \"%s\": expected a list ([a, b] or - items)",
			      o->name);
			return -EINVAL;
		}
		const char *v = scalar_text(in, ev, o->name);
		if (v == NULL)
			return -EINVAL;
		return value_error(in, line_of(ev), o->name,
		                   st__config_set_value(o, in->cfg, v, in->err, in->err_len));
	}
	if (ev->type != YAML_SEQUENCE_START_EVENT || o->type != ST_OPT_STRING_LIST) {
		yfail(in, line_of(ev), "key \"%s\": expected %s", o->name,
		      o->type == ST_OPT_STRING_LIST ? "a list of strings" : "a single value");
		return -EINVAL;
	}
	st__config_list_clear(o, in->cfg); /* the file replaces the default list */
	for (;;) {
		yaml_event_t item;
		if ((rc = next(in, &item)) < 0)
			return rc;
		if (item.type == YAML_SEQUENCE_END_EVENT) {
			yaml_event_delete(&item);
			return 0;
		}
		rc = refuse_extras(in, &item, o->name);
		if (rc == 0 && item.type != YAML_SCALAR_EVENT) {
			yfail(in, line_of(&item), "key \"%s\": expected a list of strings",
			      o->name);
			rc = -EINVAL;
		}
		const char *v = rc == 0 ? scalar_text(in, &item, o->name) : NULL;
		if (rc == 0 && v == NULL)
			rc = -EINVAL;
		if (rc == 0 && item.data.scalar.length > ST_CONFIG_MAX_VALUE_BYTES) {
			yfail(in, line_of(&item), "key \"%s\": an item over %u bytes", o->name,
			      ST_CONFIG_MAX_VALUE_BYTES);
			rc = -EINVAL;
		}
		if (rc == 0) {
			rc = st__config_list_append(o, in->cfg, v, item.data.scalar.length);
			if (rc == -E2BIG) {
				yfail(in, line_of(&item), "key \"%s\": more than %u values",
				      o->name, ST_CONFIG_MAX_LIST);
				rc = -EINVAL;
			}
		}
		yaml_event_delete(&item);
		if (rc < 0)
			return rc;
	}
}

/* One key and its value; @key_ev is the key's scalar event. */
static int mapping_entry(struct yaml_in *in, const yaml_event_t *key_ev)
{
	int rc = refuse_extras(in, key_ev, NULL);
	if (rc < 0)
		return rc;
	if (key_ev->type != YAML_SCALAR_EVENT) {
		yfail(in, line_of(key_ev), "expected an option name (a key is a plain string)");
		return -EINVAL;
	}
	const char *key = (const char *)key_ev->data.scalar.value;
	size_t klen = key_ev->data.scalar.length;
	char shown[72];
	snprintf(shown, sizeof shown, "%.*s", (int)(klen > 64 ? 64 : klen), key);

	yaml_event_t val;
	if ((rc = next(in, &val)) < 0)
		return rc;
	const struct st_config_spec *spec = in->spec;
	if (spec->kind && strcmp(shown, "apiVersion") == 0 && klen == 10)
		rc = check_header(in, "apiVersion", &val, ST_CONFIG_API_VERSION,
		                  &in->have_api_version);
	else if (spec->kind && strcmp(shown, "kind") == 0 && klen == 4)
		rc = check_header(in, "kind", &val, spec->kind, &in->have_kind);
	else {
		const struct st_opt *o = st__config_find(spec, key, klen);
		if (o == NULL) {
			yfail(in, line_of(key_ev), "unknown key \"%s\"", shown);
			rc = -EINVAL;
		} else {
			size_t i = (size_t)(o - spec->opts);
			if (in->seen[i / 64] & (1ull << (i % 64))) {
				yfail(in, line_of(key_ev), "key \"%s\" appears more than once",
				      shown);
				rc = -EINVAL;
			} else {
				in->seen[i / 64] |= 1ull << (i % 64);
				rc = option_value(in, o, &val);
			}
		}
	}
	yaml_event_delete(&val);
	return rc;
}

/* STREAM-START DOCUMENT-START MAPPING-START (key value)* MAPPING-END DOCUMENT-END STREAM-END */
static int parse_stream(struct yaml_in *in)
{
	yaml_event_t ev;
	int rc;
	enum { WANT_STREAM, WANT_DOC, WANT_MAP, IN_MAP, WANT_DOC_END, WANT_END } st = WANT_STREAM;
	for (;;) {
		if ((rc = next(in, &ev)) < 0)
			return rc;
		size_t line = line_of(&ev);
		rc = -EINVAL;
		switch (st) {
		case WANT_STREAM: /* libyaml always starts with it */
			rc = 0;
			st = WANT_DOC;
			break;
		case WANT_DOC:
			if (ev.type == YAML_STREAM_END_EVENT)
				yfail(in, line, "empty: expected a mapping of option names");
			else {
				rc = 0;
				st = WANT_MAP;
			}
			break;
		case WANT_MAP:
			if ((rc = refuse_extras(in, &ev, NULL)) < 0)
				break;
			rc = -EINVAL;
			if (ev.type != YAML_MAPPING_START_EVENT)
				yfail(in, line, "expected a mapping of option names (key: value)");
			else {
				rc = 0;
				st = IN_MAP;
			}
			break;
		case IN_MAP:
			if (ev.type == YAML_MAPPING_END_EVENT) {
				rc = 0;
				st = WANT_DOC_END;
			} else
				rc = mapping_entry(in, &ev);
			break;
		case WANT_DOC_END: /* a mapping is all a document can hold */
			rc = 0;
			st = WANT_END;
			break;
		case WANT_END:
			if (ev.type == YAML_STREAM_END_EVENT) {
				yaml_event_delete(&ev);
				return 0;
			}
			yfail(in, line, "a second document (one file, one configuration)");
			break;
		}
		yaml_event_delete(&ev);
		if (rc < 0)
			return rc;
	}
}

int st_config_parse_yaml(const struct st_config_spec *spec, void *cfg, const char *yaml, size_t len,
                         const char *source, char *err, size_t err_len)
{
	if (len > ST_CONFIG_MAX_FILE_BYTES) {
		if (err && err_len)
			snprintf(err, err_len, "%s: over %u bytes", source,
			         ST_CONFIG_MAX_FILE_BYTES);
		return -EMSGSIZE;
	}
	if (spec->num_opts > YAML_MAX_OPTS)
		return -EINVAL; /* a table this large is a bug */
	struct yaml_in in = {
	        .spec = spec, .cfg = cfg, .source = source, .err = err, .err_len = err_len};
	if (!yaml_parser_initialize(&in.parser))
		return -ENOMEM;
	/* libyaml asserts a non-NULL input, even an empty one */
	yaml_parser_set_input_string(&in.parser, (const unsigned char *)(yaml ? yaml : ""), len);
	int rc = parse_stream(&in);
	yaml_parser_delete(&in.parser);
	if (rc == 0 && spec->kind && (!in.have_api_version || !in.have_kind)) {
		if (err && err_len)
			snprintf(err, err_len,
			         "%s: no \"%s\" key (a YAML config starts with "
			         "apiVersion: %s and kind: %s)",
			         source, in.have_api_version ? "kind" : "apiVersion",
			         ST_CONFIG_API_VERSION, spec->kind);
		rc = -EINVAL;
	}
	return rc;
}

int st_config_parse(const struct st_config_spec *spec, void *cfg, const char *text, size_t len,
                    const char *source, char *err, size_t err_len)
{
	size_t i = 0;
	while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r'))
		i++;
	if (i < len && text[i] == '{')
		return st_config_parse_json(spec, cfg, text, len, source, err, err_len);
	return st_config_parse_yaml(spec, cfg, text, len, source, err, err_len);
}
