/*
 * stream/hist.h — latency histograms in Prometheus' form, shared by both daemons: fixed bucket
 * bounds chosen per family, counts kept per bucket, rendered cumulative with _bucket{le=...},
 * _sum and _count lines. Values are microseconds (integers: no floating point on the hot path);
 * the text says seconds, the unit Prometheus names its durations in.
 *
 * Pure code: no clock (the caller measures), no allocation, no I/O. A histogram belongs to the
 * thread that observes into it (both daemons: the loop thread).
 */
#ifndef STREAM_HIST_H
#define STREAM_HIST_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define ST_HIST_BUCKETS_MAX 16u /* finite upper bounds per histogram (+Inf is implicit) */

/* A family's bucket bounds: @n strictly increasing upper bounds in microseconds. Static. */
struct st_hist_spec {
	size_t n;
	uint64_t le_us[ST_HIST_BUCKETS_MAX];
};

/* Time to the first byte of an answer: 5 ms .. 30 s (an exec's answer is a 101 from the runtime,
 * a log's the first line; an answer slower than 30 s is what the +Inf bucket counts). */
extern const struct st_hist_spec st_hist_spec_ttfb;
/* One apiserver call (pod lookup, TokenReview, SubjectAccessReview): 1 ms .. 10 s. */
extern const struct st_hist_spec st_hist_spec_call;

struct st_hist {
	const struct st_hist_spec *spec;          /* borrowed, static */
	uint64_t bucket[ST_HIST_BUCKETS_MAX + 1]; /* per bucket, not cumulative; [n] is +Inf */
	uint64_t count;
	uint64_t sum_us; /* saturates at UINT64_MAX (585,000 years of latency) */
};

/* st_hist_init() - an empty histogram with the bounds of @spec (borrowed, must be static). */
void st_hist_init(struct st_hist *h, const struct st_hist_spec *spec);

/* st_hist_observe() - count one value of @us microseconds (in the first bucket whose bound is
 * >= @us: Prometheus' buckets are "less than or equal"). */
void st_hist_observe(struct st_hist *h, uint64_t us);

/*
 * st_hist_render() - the sample lines of @h for family @name (no # HELP/# TYPE: one family has
 * a histogram per label set), into @out (@cap bytes, NUL-terminated when it fits):
 *   <name>_bucket{<labels>,le="0.005"} 3 ... <name>_bucket{<labels>,le="+Inf"} 7
 *   <name>_sum{<labels>} 0.123456
 *   <name>_count{<labels>} 7
 * @labels is "" or label pairs without braces (kind="exec"), written as given: the caller
 * escapes them. Returns the bytes written (without the NUL), -EMSGSIZE when they do not fit
 * (nothing usable in @out), -EINVAL for a NULL argument.
 */
ssize_t st_hist_render(const struct st_hist *h, const char *name, const char *labels, char *out,
                       size_t cap);

/*
 * st_hist_quantile_bound_us() - the upper bound of the bucket holding quantile @q_permille
 * (0..1000) of the observations: what histogram_quantile() can at best resolve to. UINT64_MAX
 * when it is in +Inf, 0 when the histogram is empty. For tests and logs.
 */
uint64_t st_hist_quantile_bound_us(const struct st_hist *h, unsigned q_permille);

#endif /* STREAM_HIST_H */
