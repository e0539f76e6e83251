/*
 * cri/src/logs.c — CRI log records and the kubelet's log options (logs.h). Pure: the clock
 * comes in as an argument.
 */
#include <cri/logs.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <stream/query.h>

static int digits(const char *s, size_t n, int *out)
{
	int v = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	*out = v;
	return 0;
}

/* Days from 1970-01-01 to y-m-d (proleptic Gregorian; Howard Hinnant's days_from_civil). */
static int64_t days_from_civil(int64_t y, int m, int d)
{
	y -= m <= 2;
	int64_t era = (y >= 0 ? y : y - 399) / 400;
	int64_t yoe = y - era * 400;
	int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

int cri_parse_rfc3339(const char *s, size_t len, int64_t *ns)
{
	int y, mo, d, h, mi, sec;
	if (len < 20 || s[4] != '-' || s[7] != '-' || (s[10] != 'T' && s[10] != 't') ||
	    s[13] != ':' || s[16] != ':' || digits(s, 4, &y) || digits(s + 5, 2, &mo) ||
	    digits(s + 8, 2, &d) || digits(s + 11, 2, &h) || digits(s + 14, 2, &mi) ||
	    digits(s + 17, 2, &sec))
		return -EBADMSG;
	if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60)
		return -EBADMSG;
	size_t i = 19;
	int64_t frac = 0;
	if (i < len && s[i] == '.') {
		size_t nd = 0;
		for (i++; i < len && s[i] >= '0' && s[i] <= '9'; i++, nd++)
			if (nd < 9)
				frac = frac * 10 + (s[i] - '0');
		if (nd == 0)
			return -EBADMSG;
		for (; nd < 9; nd++)
			frac *= 10;
	}
	int64_t offset_s = 0;
	if (i < len && (s[i] == 'Z' || s[i] == 'z')) {
		i++;
	} else if (i + 6 <= len && (s[i] == '+' || s[i] == '-') && s[i + 3] == ':') {
		int oh, om;
		if (digits(s + i + 1, 2, &oh) || digits(s + i + 4, 2, &om) || oh > 23 || om > 59)
			return -EBADMSG;
		offset_s = (int64_t)(oh * 3600 + om * 60) * (s[i] == '+' ? 1 : -1);
		i += 6;
	} else {
		return -EBADMSG;
	}
	if (i != len)
		return -EBADMSG;
	int64_t secs = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - offset_s;
	/* int64 nanoseconds span 1677..2262: anything else is not a log timestamp */
	if (secs <= INT64_MIN / 1000000000 + 1 || secs >= INT64_MAX / 1000000000 - 1)
		return -EBADMSG;
	*ns = secs * 1000000000 + frac;
	return 0;
}

int cri_log_parse_record(const char *line, size_t len, struct cri_log_record *r)
{
	const char *sp1 = memchr(line, ' ', len);
	if (sp1 == NULL)
		return -EBADMSG;
	if (cri_parse_rfc3339(line, (size_t)(sp1 - line), &r->time_ns) < 0)
		return -EBADMSG;
	const char *p = sp1 + 1;
	size_t left = len - (size_t)(p - line);
	if (left >= 7 && memcmp(p, "stdout ", 7) == 0)
		r->stream = CRI_LOG_STDOUT;
	else if (left >= 7 && memcmp(p, "stderr ", 7) == 0)
		r->stream = CRI_LOG_STDERR;
	else
		return -EBADMSG;
	p += 7;
	left -= 7;
	const char *sp3 = memchr(p, ' ', left);
	size_t tags_len = sp3 ? (size_t)(sp3 - p) : left;
	if (tags_len == 0 || (p[0] != 'P' && p[0] != 'F') || (tags_len > 1 && p[1] != ':'))
		return -EBADMSG;
	r->partial = p[0] == 'P';
	r->content = sp3 ? sp3 + 1 : p + tags_len;
	r->content_len = sp3 ? left - tags_len - 1 : 0;
	return 0;
}

static int fail(char *why, size_t why_len, int status, const char *text)
{
	snprintf(why, why_len, "%s", text);
	return status;
}

int cri_log_opts_parse(const char *query, size_t len, int64_t now_ns, struct cri_log_opts *o,
                       char *why, size_t why_len)
{
	memset(o, 0, sizeof *o);
	o->streams = CRI_LOG_ALL;
	if (query == NULL) {
		query = "";
		len = 0;
	}
	char v[64];
	ssize_t n;
	o->follow = st_query_k8s_flag(query, len, "follow");
	o->previous = st_query_k8s_flag(query, len, "previous");
	o->timestamps = st_query_k8s_flag(query, len, "timestamps");
	int64_t since = INT64_MIN;
	bool since_seconds = false;
	if ((n = st_query_get(query, len, "sinceSeconds", v, sizeof v)) >= 0) {
		uint64_t s;
		if (st_parse_u64(v, (size_t)n, INT64_MAX / 1000000000, &s) < 0 || s < 1)
			return fail(why, why_len, 422, "sinceSeconds must be a positive integer");
		since = now_ns - (int64_t)s * 1000000000;
		since_seconds = true;
	} else if (n == -EBADMSG || n == -EMSGSIZE) {
		return fail(why, why_len, 400, "Unable to decode query.");
	}
	if ((n = st_query_get(query, len, "sinceTime", v, sizeof v)) >= 0) {
		int64_t t;
		if (since_seconds)
			return fail(why, why_len, 422,
			            "at most one of sinceTime or sinceSeconds may be specified");
		if (cri_parse_rfc3339(v, (size_t)n, &t) < 0)
			return fail(why, why_len, 400, "Unable to decode query.");
		since = t;
	}
	if (since != INT64_MIN) {
		o->has_since = true;
		o->since_ns = since;
	}
	const char *tail_key = st_query_get(query, len, "tailLines", v, sizeof v) != -ENOENT
	                               ? "tailLines"
	                               : "tail";
	if ((n = st_query_get(query, len, tail_key, v, sizeof v)) >= 0) {
		if (!(strcmp(tail_key, "tail") == 0 && n == 3 && memcmp(v, "all", 3) == 0)) {
			uint64_t t;
			if (n > 0 && v[0] == '-')
				return fail(why, why_len, 422, "tailLines must be 0 or more");
			if (st_parse_u64(v, (size_t)n, UINT64_MAX, &t) < 0)
				return fail(why, why_len, 400, "Unable to decode query.");
			o->has_tail = true;
			o->tail_lines = t;
		}
	}
	if ((n = st_query_get(query, len, "limitBytes", v, sizeof v)) >= 0) {
		uint64_t l;
		if (n > 0 && v[0] == '-')
			return fail(why, why_len, 422, "limitBytes must be a positive integer");
		if (st_parse_u64(v, (size_t)n, UINT64_MAX, &l) < 0)
			return fail(why, why_len, 400, "Unable to decode query.");
		if (l < 1)
			return fail(why, why_len, 422, "limitBytes must be a positive integer");
		o->has_limit = true;
		o->limit_bytes = l;
	}
	if ((n = st_query_get(query, len, "stream", v, sizeof v)) >= 0) {
		if (n == 3 && memcmp(v, "All", 3) == 0)
			o->streams = CRI_LOG_ALL;
		else if (n == 6 && memcmp(v, "Stdout", 6) == 0)
			o->streams = CRI_LOG_STDOUT;
		else if (n == 6 && memcmp(v, "Stderr", 6) == 0)
			o->streams = CRI_LOG_STDERR;
		else
			return fail(why, why_len, 422, "stream must be All, Stdout or Stderr");
		if (o->streams != CRI_LOG_ALL && o->has_tail)
			return fail(why, why_len, 422,
			            "tailLines cannot be used with a single stream");
	}
	return 0;
}

void cri_log_writer_init(struct cri_log_writer *w, const struct cri_log_opts *o)
{
	memset(w, 0, sizeof *w);
	w->opts = *o;
}

/* RFC3339Nano with 9 fixed digits in UTC, as the kubelet prints it, plus a space. */
static size_t prefix(int64_t ns, char *out)
{
	int64_t secs = ns >= 0 ? ns / 1000000000 : -((-ns + 999999999) / 1000000000);
	int64_t frac = ns - secs * 1000000000;
	int64_t days = secs >= 0 ? secs / 86400 : -((-secs + 86399) / 86400);
	int64_t rem = secs - days * 86400;
	/* civil_from_days */
	int64_t z = days + 719468;
	int64_t era = (z >= 0 ? z : z - 146096) / 146097;
	int64_t doe = z - era * 146097;
	int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	int64_t y = yoe + era * 400;
	int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	int64_t mp = (5 * doy + 2) / 153;
	int64_t d = doy - (153 * mp + 2) / 5 + 1;
	int64_t m = mp + (mp < 10 ? 3 : -9);
	y += m <= 2;
	int n = snprintf(out, CRI_LOG_PREFIX_BYTES + 1,
	                 "%04lld-%02lld-%02lldT%02lld:%02lld:%02lld.%09lldZ ", (long long)y,
	                 (long long)m, (long long)d, (long long)(rem / 3600),
	                 (long long)(rem / 60 % 60), (long long)(rem % 60), (long long)frac);
	return n > 0 && (size_t)n <= CRI_LOG_PREFIX_BYTES ? (size_t)n : 0;
}

size_t cri_log_format(struct cri_log_writer *w, const struct cri_log_record *r, char *out)
{
	if (w->done || !(w->opts.streams & (int)r->stream))
		return 0;
	if (w->opts.has_since && r->time_ns < w->opts.since_ns)
		return 0;
	size_t n = 0;
	bool *mid = &w->mid_line[r->stream];
	if (w->opts.timestamps && !*mid)
		n = prefix(r->time_ns, out);
	memcpy(out + n, r->content, r->content_len);
	n += r->content_len;
	if (!r->partial)
		out[n++] = '\n';
	*mid = r->partial;
	if (w->opts.has_limit && w->written + n >= w->opts.limit_bytes) {
		n = (size_t)(w->opts.limit_bytes - w->written); /* the crossing record is cut */
		w->done = true;
	}
	w->written += n;
	return n;
}

size_t cri_log_tail_start(const char *buf, size_t len, uint64_t n)
{
	if (n == 0)
		return len;
	size_t end = len;
	/* an unterminated last line is not counted */
	while (end > 0 && buf[end - 1] != '\n')
		end--;
	uint64_t seen = 0;
	for (size_t i = end; i > 0; i--) {
		if (buf[i - 1] != '\n' || i == end)
			continue;
		if (++seen == n)
			return i;
	}
	return 0;
}
