/*
 * cloudstream/src/denylist.c — the revocation list (see denylist.h): a line parser and two
 * sorted arrays. Pure.
 *
 * Two passes over the text: the first validates every line and counts the entries (so a bad
 * file allocates nothing), the second fills arrays sized exactly, which are then sorted for
 * bsearch. Duplicates are harmless (bsearch finds either copy).
 */
#include "denylist.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <stream/hex.h>

#include "registry.h"

struct entry {
	uint16_t len;
	char text[CS_NODE_NAME_MAX_BYTES + 1]; /* a canonical serial or a node name */
};

struct cs_denylist {
	struct entry *serials, *nodes;
	size_t n_serials, n_nodes;
};

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\r';
}

int cs_denylist_serial_canon(const char *in, size_t len, char *out, size_t cap)
{
	static const char digits[] = "0123456789ABCDEF";
	if (len >= 2 && in[0] == '0' && (in[1] == 'x' || in[1] == 'X')) {
		in += 2;
		len -= 2;
	}
	size_t n = 0, seen = 0;
	for (size_t i = 0; i < len; i++) {
		if (in[i] == ':')
			continue;
		int v = st_hex_value((unsigned char)in[i]);
		if (v < 0)
			return -EBADMSG;
		seen++;
		if (n == 0 && v == 0)
			continue; /* leading zeros do not count */
		if (n >= CS_SERIAL_MAX_HEX)
			return -EBADMSG;
		if (n + 1 >= cap)
			return -EMSGSIZE;
		out[n++] = digits[v];
	}
	if (seen == 0)
		return -EBADMSG;
	if (n == 0) {
		if (cap < 2)
			return -EMSGSIZE;
		out[n++] = '0';
	}
	out[n] = '\0';
	return (int)n;
}

/* A Kubernetes node name: a DNS-1123 subdomain, each '.'-separated label non-empty and
 * starting and ending alphanumeric. */
bool cs_node_name_valid(const char *p, size_t len)
{
	if (len == 0 || len > CS_NODE_NAME_MAX_BYTES)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = p[i];
		bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
		bool edge = i == 0 || i + 1 == len || p[i - 1] == '.' || p[i + 1] == '.';
		if (alnum)
			continue;
		if (c == '.' && i > 0 && i + 1 < len && p[i - 1] != '.')
			continue;
		if (c == '-' && !edge)
			continue;
		return false;
	}
	return true;
}

enum line_kind { LINE_EMPTY, LINE_SERIAL, LINE_NODE };

/* One line (without its '\n') into its kind and canonical text. 0 or a static reason. */
static const char *parse_line(const char *p, size_t len, enum line_kind *kind, struct entry *e)
{
	/* a comment runs to the end: at the start, or after white space */
	for (size_t i = 0; i < len; i++)
		if (p[i] == '#' && (i == 0 || is_space(p[i - 1]))) {
			len = i;
			break;
		}
	while (len && is_space(p[0])) {
		p++;
		len--;
	}
	while (len && is_space(p[len - 1]))
		len--;
	*kind = LINE_EMPTY;
	if (len == 0)
		return NULL;
	size_t k = 0;
	while (k < len && !is_space(p[k]))
		k++;
	const char *val = p + k;
	size_t vlen = len - k;
	while (vlen && is_space(val[0])) {
		val++;
		vlen--;
	}
	for (size_t i = 0; i < vlen; i++)
		if (is_space(val[i]))
			return "one value per line";
	if (vlen == 0)
		return "a value is missing (\"serial HEX\" or \"node NAME\")";
	if (k == 6 && memcmp(p, "serial", 6) == 0) {
		int n = cs_denylist_serial_canon(val, vlen, e->text, sizeof e->text);
		if (n < 0)
			return "a serial is hex digits (':' separators allowed), at most 20 octets";
		e->len = (uint16_t)n;
		*kind = LINE_SERIAL;
		return NULL;
	}
	if (k == 4 && memcmp(p, "node", 4) == 0) {
		if (!cs_node_name_valid(val, vlen))
			return "not a node name (DNS-1123 subdomain, at most 253 bytes)";
		memcpy(e->text, val, vlen);
		e->text[vlen] = '\0';
		e->len = (uint16_t)vlen;
		*kind = LINE_NODE;
		return NULL;
	}
	return "expected \"serial HEX\" or \"node NAME\"";
}

static int entry_cmp(const void *a, const void *b)
{
	const struct entry *x = a, *y = b;
	if (x->len != y->len)
		return x->len < y->len ? -1 : 1;
	return memcmp(x->text, y->text, x->len);
}

/* Walks the lines; with @d NULL it only validates and counts. */
static int walk(const char *text, size_t len, struct cs_denylist *d, size_t *n_serials,
                size_t *n_nodes, struct cs_denylist_error *err)
{
	size_t line = 0, off = 0;
	*n_serials = *n_nodes = 0;
	while (off < len) {
		const char *nl = memchr(text + off, '\n', len - off);
		size_t end = nl ? (size_t)(nl - text) : len;
		line++;
		enum line_kind kind;
		struct entry e;
		const char *why = parse_line(text + off, end - off, &kind, &e);
		if (why) {
			err->line = line;
			err->why = why;
			return -EBADMSG;
		}
		if (memchr(text + off, '\0', end - off)) {
			err->line = line;
			err->why = "a NUL byte";
			return -EBADMSG;
		}
		if (kind == LINE_SERIAL) {
			if (d)
				d->serials[*n_serials] = e;
			++*n_serials;
		} else if (kind == LINE_NODE) {
			if (d)
				d->nodes[*n_nodes] = e;
			++*n_nodes;
		}
		if (*n_serials + *n_nodes > CS_DENYLIST_MAX_ENTRIES) {
			err->line = line;
			err->why = "too many entries";
			return -EMSGSIZE;
		}
		off = end + 1;
	}
	return 0;
}

int cs_denylist_parse(const char *text, size_t len, struct cs_denylist **out,
                      struct cs_denylist_error *err)
{
	err->line = 0;
	err->why = "";
	if (len > CS_DENYLIST_MAX_FILE_BYTES) {
		err->why = "file too large";
		return -EMSGSIZE;
	}
	size_t ns, nn;
	int rc = walk(text, len, NULL, &ns, &nn, err);
	if (rc < 0)
		return rc;
	struct cs_denylist *d = calloc(1, sizeof *d);
	if (d == NULL)
		return -ENOMEM;
	d->serials = ns ? calloc(ns, sizeof *d->serials) : NULL;
	d->nodes = nn ? calloc(nn, sizeof *d->nodes) : NULL;
	if ((ns && d->serials == NULL) || (nn && d->nodes == NULL)) {
		cs_denylist_free(d);
		return -ENOMEM;
	}
	walk(text, len, d, &d->n_serials, &d->n_nodes, err); /* validated: cannot fail */
	if (d->n_serials)
		qsort(d->serials, d->n_serials, sizeof *d->serials, entry_cmp);
	if (d->n_nodes)
		qsort(d->nodes, d->n_nodes, sizeof *d->nodes, entry_cmp);
	*out = d;
	return 0;
}

void cs_denylist_free(struct cs_denylist *d)
{
	if (d == NULL)
		return;
	free(d->serials);
	free(d->nodes);
	free(d);
}

static bool has(const struct entry *arr, size_t n, const char *p, size_t len)
{
	if (n == 0 || len > CS_NODE_NAME_MAX_BYTES)
		return false;
	struct entry key = {.len = (uint16_t)len};
	memcpy(key.text, p, len);
	return bsearch(&key, arr, n, sizeof *arr, entry_cmp) != NULL;
}

bool cs_denylist_has_serial(const struct cs_denylist *d, const char *serial, size_t len)
{
	char canon[CS_SERIAL_MAX_HEX + 1];
	if (d == NULL)
		return false;
	int n = cs_denylist_serial_canon(serial, len, canon, sizeof canon);
	return n > 0 && has(d->serials, d->n_serials, canon, (size_t)n);
}

bool cs_denylist_has_node(const struct cs_denylist *d, const char *name, size_t len)
{
	return d != NULL && has(d->nodes, d->n_nodes, name, len);
}

size_t cs_denylist_serials(const struct cs_denylist *d)
{
	return d ? d->n_serials : 0;
}

size_t cs_denylist_nodes(const struct cs_denylist *d)
{
	return d ? d->n_nodes : 0;
}
