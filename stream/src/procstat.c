/*
 * stream/src/procstat.c — /proc/self/stat and /proc/stat's btime parsed (stream/procstat.h).
 * Pure: bytes in, numbers out.
 */
#include <stream/err.h>
#include <stream/procstat.h>

#include <stdbool.h>

/* A decimal number at p[*i..len) (after spaces); false when there is none or it overflows. */
static bool number(const char *p, size_t len, size_t *i, uint64_t *v)
{
	while (*i < len && p[*i] == ' ')
		(*i)++;
	if (*i >= len || p[*i] < '0' || p[*i] > '9')
		return false;
	uint64_t n = 0;
	for (; *i < len && p[*i] >= '0' && p[*i] <= '9'; (*i)++) {
		uint64_t d = (uint64_t)(p[*i] - '0');
		if (n > (UINT64_MAX - d) / 10u)
			return false;
		n = n * 10u + d;
	}
	*v = n;
	return true;
}

/* Skips one space-separated field (it may be negative: nice, priority). */
static bool skip(const char *p, size_t len, size_t *i)
{
	while (*i < len && p[*i] == ' ')
		(*i)++;
	if (*i >= len || p[*i] == '\n')
		return false;
	while (*i < len && p[*i] != ' ' && p[*i] != '\n')
		(*i)++;
	return true;
}

int st_proc_stat_parse(const char *buf, size_t len, struct st_proc_stat *out)
{
	size_t i = len;
	while (i > 0 && buf[i - 1] != ')')
		i--;
	if (i == 0)
		return -EBADMSG;
	/* After "pid (comm)": field 3 (state) is at index 0. utime is field 14, stime 15,
	 * starttime 22, rss 24 (proc(5)). */
	uint64_t v = 0;
	for (unsigned field = 3; field <= 24; field++) {
		bool want = field == 14 || field == 15 || field == 22 || field == 24;
		if (!want) {
			if (!skip(buf, len, &i))
				return -EBADMSG;
			continue;
		}
		if (!number(buf, len, &i, &v))
			return -EBADMSG;
		/* a field ends at a separator: a line cut inside a number is not that number */
		if (i >= len || (buf[i] != ' ' && buf[i] != '\n'))
			return -EBADMSG;
		if (field == 14)
			out->utime_ticks = v;
		else if (field == 15)
			out->stime_ticks = v;
		else if (field == 22)
			out->start_ticks = v;
		else
			out->rss_pages = v;
	}
	return 0;
}
