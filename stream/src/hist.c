/*
 * stream/src/hist.c — Prometheus histograms (stream/hist.h). Pure: the caller measures time and
 * writes the text where it wants it.
 */
#include <stream/err.h>
#include <stream/hist.h>

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Prometheus' default buckets, stretched: an exec through a tunnel takes a round trip to the
 * edge and one to its runtime, a logs request may wait on a worker. */
const struct st_hist_spec st_hist_spec_ttfb = {
        .n = 12,
        .le_us = {5000, 10000, 25000, 50000, 100000, 250000, 500000, 1000000, 2500000, 5000000,
                  10000000, 30000000},
};

/* An apiserver call: answered from its cache in a millisecond or two, 10 s is our timeout. */
const struct st_hist_spec st_hist_spec_call = {
        .n = 11,
        .le_us = {1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000, 1000000, 10000000},
};

void st_hist_init(struct st_hist *h, const struct st_hist_spec *spec)
{
	memset(h, 0, sizeof *h);
	h->spec = spec;
}

void st_hist_observe(struct st_hist *h, uint64_t us)
{
	size_t i = 0;
	while (i < h->spec->n && us > h->spec->le_us[i])
		i++;
	h->bucket[i]++;
	h->count++;
	h->sum_us = us > UINT64_MAX - h->sum_us ? UINT64_MAX : h->sum_us + us;
}

/* Seconds from microseconds, without trailing zeros: 5000 -> "0.005", 1000000 -> "1". */
static void seconds(char *buf, size_t cap, uint64_t us)
{
	unsigned long long whole = (unsigned long long)(us / 1000000u);
	unsigned long long frac = (unsigned long long)(us % 1000000u);
	if (frac == 0) {
		snprintf(buf, cap, "%llu", whole);
		return;
	}
	int n = snprintf(buf, cap, "%llu.%06llu", whole, frac);
	while (n > 0 && (size_t)n < cap && buf[n - 1] == '0')
		buf[--n] = '\0';
}

struct out {
	char *p;
	size_t cap, len;
	int overflow;
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct out *o, const char *fmt, ...)
{
	if (o->overflow)
		return;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(o->p + o->len, o->cap - o->len, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= o->cap - o->len)
		o->overflow = 1;
	else
		o->len += (size_t)n;
}

ssize_t st_hist_render(const struct st_hist *h, const char *name, const char *labels, char *out,
                       size_t cap)
{
	if (h == NULL || h->spec == NULL || name == NULL || labels == NULL || out == NULL)
		return -EINVAL;
	if (cap == 0)
		return -EMSGSIZE;
	struct out o = {.p = out, .cap = cap};
	const char *sep = labels[0] ? "," : "";
	uint64_t cum = 0;
	char le[32];
	for (size_t i = 0; i <= h->spec->n; i++) {
		cum += h->bucket[i];
		if (i < h->spec->n)
			seconds(le, sizeof le, h->spec->le_us[i]);
		else
			snprintf(le, sizeof le, "+Inf");
		put(&o, "%s_bucket{%s%sle=\"%s\"} %llu\n", name, labels, sep, le,
		    (unsigned long long)cum);
	}
	char sum[32];
	seconds(sum, sizeof sum, h->sum_us);
	if (labels[0]) {
		put(&o, "%s_sum{%s} %s\n", name, labels, sum);
		put(&o, "%s_count{%s} %llu\n", name, labels, (unsigned long long)h->count);
	} else {
		put(&o, "%s_sum %s\n", name, sum);
		put(&o, "%s_count %llu\n", name, (unsigned long long)h->count);
	}
	if (o.overflow) {
		out[0] = '\0';
		return -EMSGSIZE;
	}
	return (ssize_t)o.len;
}

uint64_t st_hist_quantile_bound_us(const struct st_hist *h, unsigned q_permille)
{
	if (h->count == 0)
		return 0;
	/* the rank of the quantile, rounded up: the smallest bucket holding that many */
	uint64_t rank = (h->count * (q_permille > 1000 ? 1000 : q_permille) + 999) / 1000;
	if (rank == 0)
		rank = 1;
	uint64_t cum = 0;
	for (size_t i = 0; i < h->spec->n; i++) {
		cum += h->bucket[i];
		if (cum >= rank)
			return h->spec->le_us[i];
	}
	return UINT64_MAX;
}
