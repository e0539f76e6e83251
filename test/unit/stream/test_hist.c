/* Unit tests for the Prometheus histograms (stream/hist.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include <stream/err.h>
#include <stream/hist.h>

static const struct st_hist_spec three = {.n = 3, .le_us = {1000, 250000, 2000000}};

static void test_st_hist_observe__bounds_are_le(void **state)
{
	(void)state;
	struct st_hist h;
	st_hist_init(&h, &three);
	/* each bound -1/0/+1 */
	const uint64_t v[] = {0, 999, 1000, 1001, 249999, 250000, 250001, 2000000, 2000001};
	for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
		st_hist_observe(&h, v[i]);
	assert_int_equal(h.bucket[0], 3); /* 0 999 1000 */
	assert_int_equal(h.bucket[1], 3); /* 1001 249999 250000 */
	assert_int_equal(h.bucket[2], 2); /* 250001 2000000 */
	assert_int_equal(h.bucket[3], 1); /* +Inf */
	assert_int_equal(h.count, 9);
	assert_int_equal(h.sum_us,
	                 0 + 999 + 1000 + 1001 + 249999 + 250000 + 250001 + 2000000 + 2000001);
}

static void test_st_hist_render__exact_text(void **state)
{
	(void)state;
	struct st_hist h;
	st_hist_init(&h, &three);
	st_hist_observe(&h, 500);
	st_hist_observe(&h, 1500);
	st_hist_observe(&h, 3000000);
	char out[1024];
	const char want[] = "x_seconds_bucket{kind=\"exec\",le=\"0.001\"} 1\n"
	                    "x_seconds_bucket{kind=\"exec\",le=\"0.25\"} 2\n"
	                    "x_seconds_bucket{kind=\"exec\",le=\"2\"} 2\n"
	                    "x_seconds_bucket{kind=\"exec\",le=\"+Inf\"} 3\n"
	                    "x_seconds_sum{kind=\"exec\"} 3.002\n"
	                    "x_seconds_count{kind=\"exec\"} 3\n";
	ssize_t n = st_hist_render(&h, "x_seconds", "kind=\"exec\"", out, sizeof out);
	assert_int_equal(n, sizeof want - 1);
	assert_string_equal(out, want);
	/* no labels: no braces on _sum and _count */
	const char bare[] = "y_bucket{le=\"0.001\"} 1\n"
	                    "y_bucket{le=\"0.25\"} 2\n"
	                    "y_bucket{le=\"2\"} 2\n"
	                    "y_bucket{le=\"+Inf\"} 3\n"
	                    "y_sum 3.002\n"
	                    "y_count 3\n";
	n = st_hist_render(&h, "y", "", out, sizeof out);
	assert_int_equal(n, sizeof bare - 1);
	assert_string_equal(out, bare);
	/* cap -1/0/+1 around the exact size (the NUL needs a byte) */
	assert_int_equal(st_hist_render(&h, "y", "", out, sizeof bare - 1), -EMSGSIZE);
	assert_string_equal(out, "");
	assert_int_equal(st_hist_render(&h, "y", "", out, sizeof bare), sizeof bare - 1);
	assert_int_equal(st_hist_render(&h, "y", "", out, sizeof bare + 1), sizeof bare - 1);
	assert_int_equal(st_hist_render(&h, "y", "", out, 0), -EMSGSIZE);
	assert_int_equal(st_hist_render(NULL, "y", "", out, sizeof out), -EINVAL);
	assert_int_equal(st_hist_render(&h, "y", NULL, out, sizeof out), -EINVAL);
}

static void test_st_hist_render__empty_and_fractions(void **state)
{
	(void)state;
	struct st_hist h;
	st_hist_init(&h, &st_hist_spec_ttfb);
	char out[2048];
	ssize_t n = st_hist_render(&h, "t", "", out, sizeof out);
	assert_true(n > 0);
	assert_non_null(strstr(out, "t_bucket{le=\"0.005\"} 0\n"));
	assert_non_null(strstr(out, "t_bucket{le=\"30\"} 0\n"));
	assert_non_null(strstr(out, "t_bucket{le=\"+Inf\"} 0\n"));
	assert_non_null(strstr(out, "t_sum 0\nt_count 0\n"));
	st_hist_observe(&h, 1);   /* one microsecond: six decimals kept */
	st_hist_observe(&h, 120); /* trailing zeros dropped */
	n = st_hist_render(&h, "t", "", out, sizeof out);
	assert_true(n > 0);
	assert_non_null(strstr(out, "t_sum 0.000121\n"));
}

static void test_st_hist_spec__increasing(void **state)
{
	(void)state;
	const struct st_hist_spec *s[] = {&st_hist_spec_ttfb, &st_hist_spec_call};
	for (size_t k = 0; k < 2; k++) {
		assert_true(s[k]->n > 0 && s[k]->n <= ST_HIST_BUCKETS_MAX);
		for (size_t i = 1; i < s[k]->n; i++)
			assert_true(s[k]->le_us[i] > s[k]->le_us[i - 1]);
	}
}

static void test_st_hist_observe__sum_saturates(void **state)
{
	(void)state;
	struct st_hist h;
	st_hist_init(&h, &three);
	st_hist_observe(&h, UINT64_MAX - 5);
	st_hist_observe(&h, 10);
	assert_int_equal(h.sum_us, UINT64_MAX);
	assert_int_equal(h.bucket[3], 1);
	assert_int_equal(h.count, 2);
}

static void test_st_hist_quantile_bound_us__buckets(void **state)
{
	(void)state;
	struct st_hist h;
	st_hist_init(&h, &three);
	assert_int_equal(st_hist_quantile_bound_us(&h, 990), 0);
	for (int i = 0; i < 98; i++)
		st_hist_observe(&h, 100);
	st_hist_observe(&h, 100000);
	st_hist_observe(&h, 9000000);
	assert_int_equal(st_hist_quantile_bound_us(&h, 500), 1000);
	assert_int_equal(st_hist_quantile_bound_us(&h, 980), 1000);
	assert_int_equal(st_hist_quantile_bound_us(&h, 990), 250000);
	assert_int_equal(st_hist_quantile_bound_us(&h, 1000), UINT64_MAX);
	assert_int_equal(st_hist_quantile_bound_us(&h, 0), 1000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_st_hist_observe__bounds_are_le),
	        cmocka_unit_test(test_st_hist_render__exact_text),
	        cmocka_unit_test(test_st_hist_render__empty_and_fractions),
	        cmocka_unit_test(test_st_hist_spec__increasing),
	        cmocka_unit_test(test_st_hist_observe__sum_saturates),
	        cmocka_unit_test(test_st_hist_quantile_bound_us__buckets),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
