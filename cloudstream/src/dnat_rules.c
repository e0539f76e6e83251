/*
 * cloudstream/src/dnat_rules.c — Node objects → the CLOUDSTREAM-DNAT chain (dnat_rules.h). Pure.
 */
#include "dnat_rules.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

static bool ipv4_ok(const char *s)
{
	unsigned parts = 0, val = 0, digits = 0;
	for (;; s++) {
		if (*s >= '0' && *s <= '9') {
			val = val * 10u + (unsigned)(*s - '0');
			if (++digits > 3 || val > 255)
				return false;
		} else if (*s == '.' || *s == '\0') {
			if (digits == 0)
				return false;
			parts++;
			val = 0;
			digits = 0;
			if (*s == '\0')
				return parts == 4;
			if (parts == 4)
				return false;
		} else {
			return false;
		}
	}
}

static bool name_ok(const char *s, size_t n)
{
	if (n == 0 || n > CS_DNAT_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.'))
			return false;
	}
	return true;
}

int cs_dnat_node_parse(struct json_object *node, uint16_t default_port, struct cs_dnat_node *out)
{
	struct json_object *meta, *name, *status, *addrs, *de, *ke, *port;
	if (node == NULL || out == NULL)
		return -EINVAL;
	memset(out, 0, sizeof *out);
	if (!json_object_is_type(node, json_type_object) ||
	    !json_object_object_get_ex(node, "metadata", &meta) ||
	    !json_object_object_get_ex(meta, "name", &name) ||
	    !json_object_is_type(name, json_type_string))
		return -EBADMSG;
	const char *nm = json_object_get_string(name);
	size_t nl = (size_t)json_object_get_string_len(name);
	if (!name_ok(nm, nl))
		return -EBADMSG;
	memcpy(out->name, nm, nl);
	out->port = default_port;
	if (!json_object_object_get_ex(node, "status", &status))
		return 0;
	if (json_object_object_get_ex(status, "addresses", &addrs) &&
	    json_object_is_type(addrs, json_type_array)) {
		size_t n = json_object_array_length(addrs);
		for (size_t i = 0; i < n && out->n_ips < CS_DNAT_IPS_MAX; i++) {
			struct json_object *a = json_object_array_get_idx(addrs, i), *t, *v;
			if (!json_object_object_get_ex(a, "type", &t) ||
			    !json_object_object_get_ex(a, "address", &v) ||
			    strcmp(json_object_get_string(t), "InternalIP") != 0)
				continue;
			const char *ip = json_object_get_string(v);
			if (!ipv4_ok(ip))
				continue;
			bool dup = false;
			for (size_t k = 0; k < out->n_ips; k++)
				dup |= strcmp(out->ips[k], ip) == 0;
			if (!dup)
				snprintf(out->ips[out->n_ips++], CS_DNAT_IP_TEXT_BYTES, "%s", ip);
		}
	}
	if (json_object_object_get_ex(status, "daemonEndpoints", &de) &&
	    json_object_object_get_ex(de, "kubeletEndpoint", &ke) &&
	    json_object_object_get_ex(ke, "Port", &port) &&
	    json_object_is_type(port, json_type_int)) {
		int64_t p = json_object_get_int64(port);
		if (p >= 1 && p <= 65535)
			out->port = (uint16_t)p;
	}
	return 0;
}

void cs_dnat_set_init(struct cs_dnat_set *s)
{
	memset(s, 0, sizeof *s);
}

void cs_dnat_set_cleanup(struct cs_dnat_set *s)
{
	free(s->v);
	memset(s, 0, sizeof *s);
}

void cs_dnat_set_clear(struct cs_dnat_set *s)
{
	s->n = 0;
}

/* Index of @name, or where it would go (*found false). */
static size_t find(const struct cs_dnat_set *s, const char *name, bool *found)
{
	size_t lo = 0, hi = s->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(s->v[mid].name, name);
		if (c == 0) {
			*found = true;
			return mid;
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	*found = false;
	return lo;
}

int cs_dnat_set_put(struct cs_dnat_set *s, const struct cs_dnat_node *n)
{
	bool found;
	size_t i = find(s, n->name, &found);
	if (found) {
		if (memcmp(&s->v[i], n, sizeof *n) == 0)
			return 0;
		s->v[i] = *n;
		return 1;
	}
	if (s->n >= CS_DNAT_NODES_MAX)
		return -EMSGSIZE;
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 16;
		if (cap > CS_DNAT_NODES_MAX)
			cap = CS_DNAT_NODES_MAX;
		struct cs_dnat_node *v = realloc(s->v, cap * sizeof *v);
		if (v == NULL)
			return -ENOMEM;
		s->v = v;
		s->cap = cap;
	}
	memmove(&s->v[i + 1], &s->v[i], (s->n - i) * sizeof *s->v);
	s->v[i] = *n;
	s->n++;
	return 1;
}

int cs_dnat_set_remove(struct cs_dnat_set *s, const char *name)
{
	bool found;
	size_t i = find(s, name, &found);
	if (!found)
		return 0;
	memmove(&s->v[i], &s->v[i + 1], (s->n - i - 1) * sizeof *s->v);
	s->n--;
	return 1;
}

struct out {
	char *p;
	size_t len, cap;
	bool over;
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct out *o, const char *fmt, ...)
{
	if (o->over)
		return;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(o->p + o->len, o->cap - o->len, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= o->cap - o->len) {
		o->over = true;
		return;
	}
	o->len += (size_t)n;
}

ssize_t cs_dnat_rules(const struct cs_dnat_set *s, const char *to_ip, uint16_t to_port,
                      const char *const *local, size_t n_local, char *out, size_t cap)
{
	if (cap == 0)
		return -EMSGSIZE;
	struct out o = {.p = out, .cap = cap};
	out[0] = '\0';
	put(&o, "*nat\n:" CS_DNAT_CHAIN " - [0:0]\n");
	put(&o, "-A " CS_DNAT_CHAIN " -d 127.0.0.0/8 -m comment --comment \"" CS_DNAT_TAG
	        ": not loopback\" -j RETURN\n");
	put(&o,
	    "-A " CS_DNAT_CHAIN " -m addrtype --dst-type LOCAL -m comment --comment \"" CS_DNAT_TAG
	    ": not this host\" -j RETURN\n");
	for (size_t i = 0; i < s->n; i++) {
		const struct cs_dnat_node *n = &s->v[i];
		for (size_t k = 0; k < n->n_ips; k++) {
			bool own = strncmp(n->ips[k], "127.", 4) == 0 ||
			           strncmp(n->ips[k], "0.", 2) == 0;
			for (size_t l = 0; l < n_local && !own; l++)
				own = strcmp(local[l], n->ips[k]) == 0;
			if (own)
				continue;
			put(&o,
			    "-A " CS_DNAT_CHAIN " -d %s/32 -p tcp -m tcp --dport %u -m comment "
			    "--comment \"" CS_DNAT_TAG
			    ": node %s\" -j DNAT --to-destination %s:%u\n",
			    n->ips[k], (unsigned)n->port, n->name, to_ip, (unsigned)to_port);
		}
	}
	put(&o, "COMMIT\n");
	if (o.over)
		return -EMSGSIZE;
	return (ssize_t)o.len;
}
