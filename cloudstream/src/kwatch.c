/*
 * cloudstream/src/kwatch.c — the pure part of list and watch (kwatch.h): a watch event line
 * parsed, a watch stream split into bounded lines. No I/O, no logging.
 */
#include "kwatch.h"

#include <string.h>

#include <json-c/json.h>

enum cs_kwatch_type cs_kwatch_type_of(const char *name)
{
	static const char *const names[] = {"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (strcmp(name, names[i]) == 0)
			return (enum cs_kwatch_type)i;
	return CS_KWATCH_OTHER;
}

struct json_object *cs_kwatch_event_parse(const char *line, size_t len, struct cs_kwatch_event *ev)
{
	if (len > (size_t)INT32_MAX)
		return NULL;
	struct json_tokener *tok = json_tokener_new_ex(64);
	struct json_object *root = tok ? json_tokener_parse_ex(tok, line, (int)len) : NULL;
	json_tokener_free(tok);
	struct json_object *type, *obj, *meta, *rv, *code;
	if (root == NULL || !json_object_object_get_ex(root, "type", &type) ||
	    !json_object_is_type(type, json_type_string) ||
	    !json_object_object_get_ex(root, "object", &obj) ||
	    !json_object_is_type(obj, json_type_object)) {
		json_object_put(root);
		return NULL;
	}
	ev->type_name = json_object_get_string(type);
	ev->type = cs_kwatch_type_of(ev->type_name);
	ev->object = obj;
	ev->rv = json_object_object_get_ex(obj, "metadata", &meta) &&
	                         json_object_object_get_ex(meta, "resourceVersion", &rv) &&
	                         json_object_is_type(rv, json_type_string)
	                 ? json_object_get_string(rv)
	                 : NULL;
	ev->code = ev->type == CS_KWATCH_ERROR && json_object_object_get_ex(obj, "code", &code)
	                   ? json_object_get_int(code)
	                   : 0;
	return root;
}

void cs_kwatch_lines_init(struct cs_kwatch_lines *l, char *buf, size_t cap)
{
	*l = (struct cs_kwatch_lines){.buf = buf, .cap = buf ? cap : 0};
}

void cs_kwatch_lines_feed(struct cs_kwatch_lines *l, const char *p, size_t n, cs_kwatch_line_cb cb,
                          void *user)
{
	while (n > 0) {
		const char *nl = memchr(p, '\n', n);
		size_t take = nl ? (size_t)(nl - p) : n;
		if (l->skip) {
			/* the rest of an over-long line: dropped */
		} else if (l->len == 0 && nl) { /* whole in this piece: no copy */
			if (take > l->cap)
				l->over++;
			else if (take > 0)
				cb(user, p, take);
		} else if (take > l->cap - l->len) {
			l->over++;
			l->skip = true;
			l->len = 0;
		} else {
			memcpy(l->buf + l->len, p, take);
			l->len += take;
			if (nl && l->len > 0)
				cb(user, l->buf, l->len);
		}
		if (nl == NULL)
			return;
		l->len = 0;
		l->skip = false;
		p += take + 1;
		n -= take + 1;
	}
}

void cs_kwatch_lines_end(struct cs_kwatch_lines *l, cs_kwatch_line_cb cb, void *user)
{
	if (!l->skip && l->len > 0)
		cb(user, l->buf, l->len);
	l->len = 0;
	l->skip = false;
}
