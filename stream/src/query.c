/* Query strings, Kubernetes parameters and kubelet paths (stream/query.h). */
#include <stream/err.h>
#include <stream/hex.h>
#include <stream/query.h>

#include <string.h>

void st_query_iter_init(struct st_query_iter *it, const char *q, size_t len)
{
	it->q = q;
	it->len = q ? len : 0;
	it->pos = 0;
}

bool st_query_next(struct st_query_iter *it, const char **key, size_t *key_len, const char **value,
                   size_t *value_len)
{
	while (it->pos < it->len) {
		const char *start = it->q + it->pos;
		const char *amp = memchr(start, '&', it->len - it->pos);
		size_t n = amp ? (size_t)(amp - start) : it->len - it->pos;
		it->pos += n + (amp ? 1 : 0);
		if (n == 0)
			continue;
		const char *eq = memchr(start, '=', n);
		*key = start;
		*key_len = eq ? (size_t)(eq - start) : n;
		*value = eq ? eq + 1 : start + n;
		*value_len = eq ? n - *key_len - 1 : 0;
		return true;
	}
	return false;
}

ssize_t st_pct_decode(char *out, size_t cap, const char *in, size_t len, bool plus_is_space)
{
	size_t o = 0;
	for (size_t i = 0; i < len; i++) {
		char c = in[i];
		if (c == '%') {
			int hi = i + 1 < len ? st_hex_value((unsigned char)in[i + 1]) : -1;
			int lo = i + 2 < len ? st_hex_value((unsigned char)in[i + 2]) : -1;
			if (hi < 0 || lo < 0)
				return -EBADMSG;
			c = (char)(hi << 4 | lo);
			i += 2;
		} else if (c == '+' && plus_is_space) {
			c = ' ';
		}
		if (o == cap)
			return -EMSGSIZE;
		out[o++] = c;
	}
	return (ssize_t)o;
}

/* Does the raw key @k equal @key once decoded? Keys we look up are short and plain. */
static bool key_matches(const char *k, size_t klen, const char *key)
{
	char buf[64];
	ssize_t n = st_pct_decode(buf, sizeof buf, k, klen, true);
	return n >= 0 && (size_t)n == strlen(key) && memcmp(buf, key, (size_t)n) == 0;
}

ssize_t st_query_get(const char *q, size_t len, const char *key, char *out, size_t cap)
{
	struct st_query_iter it;
	const char *k, *v;
	size_t klen, vlen;
	st_query_iter_init(&it, q, len);
	while (st_query_next(&it, &k, &klen, &v, &vlen))
		if (key_matches(k, klen, key))
			return st_pct_decode(out, cap, v, vlen, true);
	return -ENOENT;
}

size_t st_query_count(const char *q, size_t len, const char *key)
{
	struct st_query_iter it;
	const char *k, *v;
	size_t klen, vlen, n = 0;
	st_query_iter_init(&it, q, len);
	while (st_query_next(&it, &k, &klen, &v, &vlen))
		if (key_matches(k, klen, key))
			n++;
	return n;
}

bool st_k8s_bool(bool present, const char *value, size_t len)
{
	if (!present)
		return false;
	if (len == 1 && value[0] == '0')
		return false;
	if (len == 5) {
		static const char f[] = "false";
		for (size_t i = 0; i < 5; i++) {
			char c = value[i];
			if (c >= 'A' && c <= 'Z')
				c = (char)(c - 'A' + 'a');
			if (c != f[i])
				return true;
		}
		return false;
	}
	return true;
}

int st_parse_u64(const char *s, size_t len, uint64_t max, uint64_t *out)
{
	if (len == 0)
		return -EBADMSG;
	uint64_t v = 0;
	bool over = false;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EBADMSG;
		unsigned d = (unsigned)(s[i] - '0');
		if (v > (UINT64_MAX - d) / 10)
			over = true;
		else
			v = v * 10 + d;
	}
	if (over || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

/* A Kubernetes name segment: [A-Za-z0-9._-]+, not "." or "..". */
static bool name_ok(struct st_segment s)
{
	if (s.len == 0 || (s.len == 1 && s.p[0] == '.') ||
	    (s.len == 2 && s.p[0] == '.' && s.p[1] == '.'))
		return false;
	for (size_t i = 0; i < s.len; i++) {
		char c = s.p[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return false;
	}
	return true;
}

#define MAX_SEGMENTS 6

static const struct {
	const char *name;
	enum st_kubelet_kind kind;
	unsigned min_names, max_names; /* name segments after the kind */
} kinds[] = {
        {"exec", ST_KUBELET_EXEC, 3, 4},
        {"attach", ST_KUBELET_ATTACH, 3, 4},
        {"portForward", ST_KUBELET_PORT_FORWARD, 2, 3},
        {"containerLogs", ST_KUBELET_CONTAINER_LOGS, 3, 3},
        {"run", ST_KUBELET_RUN, 3, 4},
};

int st_kubelet_path_parse(const char *path, size_t len, struct st_kubelet_path *out)
{
	memset(out, 0, sizeof *out);
	out->kind = ST_KUBELET_OTHER;
	if (len == 0 || path[0] != '/')
		return 0;
	/* First segment decides the kind. */
	const char *p = path + 1;
	size_t rest = len - 1;
	const char *slash = memchr(p, '/', rest);
	size_t first = slash ? (size_t)(slash - p) : rest;
	size_t k;
	for (k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
		if (strlen(kinds[k].name) == first && memcmp(kinds[k].name, p, first) == 0)
			break;
	if (k == sizeof kinds / sizeof kinds[0])
		return 0;
	if (slash == NULL)
		return -EBADMSG;
	struct st_segment seg[MAX_SEGMENTS];
	unsigned n = 0;
	p = slash + 1;
	rest = len - (size_t)(p - path);
	for (;;) {
		if (n == MAX_SEGMENTS)
			return -EBADMSG;
		slash = memchr(p, '/', rest);
		size_t l = slash ? (size_t)(slash - p) : rest;
		seg[n].p = p;
		seg[n].len = l;
		if (!name_ok(seg[n]))
			return -EBADMSG; /* also catches empty segments and a trailing slash */
		n++;
		if (slash == NULL)
			break;
		p = slash + 1;
		rest -= l + 1;
	}
	if (n < kinds[k].min_names || n > kinds[k].max_names)
		return -EBADMSG;
	out->kind = kinds[k].kind;
	out->namespace_ = seg[0];
	out->pod = seg[1];
	if (out->kind == ST_KUBELET_PORT_FORWARD) {
		if (n == 3)
			out->uid = seg[2];
	} else {
		if (n == 4)
			out->uid = seg[2];
		out->container = seg[n - 1];
	}
	return 0;
}

const char *st_kubelet_kind_label(enum st_kubelet_kind kind)
{
	static const char *const labels[] = {"other",       "exec", "attach",
	                                     "portforward", "logs", "run"};
	unsigned k = (unsigned)kind;
	return k < sizeof labels / sizeof labels[0] ? labels[k] : "other";
}

const char *st_kubelet_kind_name(enum st_kubelet_kind kind)
{
	switch (kind) {
	case ST_KUBELET_EXEC:
		return "exec";
	case ST_KUBELET_ATTACH:
		return "attach";
	case ST_KUBELET_PORT_FORWARD:
		return "portForward";
	case ST_KUBELET_CONTAINER_LOGS:
		return "containerLogs";
	case ST_KUBELET_RUN:
		return "run";
	default:
		return "other";
	}
}

bool st_query_k8s_flag(const char *q, size_t len, const char *key)
{
	char v[16];
	ssize_t n = st_query_get(q, len, key, v, sizeof v);
	if (n == -ENOENT)
		return false;
	return st_k8s_bool(true, v, n > 0 ? (size_t)n : 0);
}
