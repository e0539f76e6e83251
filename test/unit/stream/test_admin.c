/* Unit tests for the metrics text both daemons' admin ports write (stream/admin.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include <libwebsockets.h> /* admin.h names struct lws_protocols */

#include <stream/admin.h>

static char buf[256];

/* An empty text over buf. */
static struct st_text fresh(void)
{
	return (struct st_text){.p = buf, .cap = sizeof buf};
}

/* @t holds exactly @want and has not overflowed. */
static void assert_text(const struct st_text *t, const char *want)
{
	assert_false(t->overflow);
	assert_int_equal(t->len, strlen(want));
	assert_memory_equal(t->p, want, t->len);
}

static void test_st_text_counter__family(void **state)
{
	(void)state;
	struct st_text t = fresh();
	st_text_counter(&t, "x_total", "Things done.", UINT64_MAX);
	assert_text(&t, "# HELP x_total Things done.\n# TYPE x_total counter\n"
	                "x_total 18446744073709551615\n");
}

static void test_st_text_gauge__family(void **state)
{
	(void)state;
	struct st_text t = fresh();
	st_text_gauge(&t, "x_bytes", "Bytes held now.", 0);
	assert_text(&t, "# HELP x_bytes Bytes held now.\n# TYPE x_bytes gauge\nx_bytes 0\n");
}

/* The same bytes as st_text_metric() followed by its sample line, which it replaces. */
static void test_st_text_counter__same_as_metric_and_put(void **state)
{
	(void)state;
	char a[256], b[256];
	struct st_text ta = {.p = a, .cap = sizeof a}, tb = {.p = b, .cap = sizeof b};
	st_text_counter(&ta, "y_total", "Why.", 42);
	st_text_metric(&tb, "y_total", "counter", "Why.");
	st_text_put(&tb, "y_total %llu\n", 42ull);
	assert_int_equal(ta.len, tb.len);
	assert_memory_equal(a, b, ta.len);
}

static void test_st_text_labelled__family(void **state)
{
	(void)state;
	struct st_text t = fresh();
	st_text_labelled(&t, "z_total", "counter", "By result.", "result",
	                 (const struct st_text_sample[]){{"ok", 3}, {"failed", 0}, {NULL, 9}});
	assert_text(&t, "# HELP z_total By result.\n# TYPE z_total counter\n"
	                "z_total{result=\"ok\"} 3\nz_total{result=\"failed\"} 0\n");
}

/* No samples: the family's two lines alone, as st_text_metric() writes them. */
static void test_st_text_labelled__empty(void **state)
{
	(void)state;
	struct st_text t = fresh();
	st_text_labelled(&t, "z", "gauge", "None.", "k", (const struct st_text_sample[]){{0}});
	assert_text(&t, "# HELP z None.\n# TYPE z gauge\n");
}

/* A family that does not fit marks the text overflowed (/metrics answers 500). */
static void test_st_text_counter__overflow(void **state)
{
	(void)state;
	char small[40];
	struct st_text t = {.p = small, .cap = sizeof small};
	st_text_counter(&t, "x_total", "Things done.", 7);
	assert_true(t.overflow);
	size_t len = t.len;
	st_text_gauge(&t, "g", "G.", 1); /* nothing more once overflowed */
	assert_true(t.overflow);
	assert_int_equal(t.len, len);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_st_text_counter__family),
	        cmocka_unit_test(test_st_text_gauge__family),
	        cmocka_unit_test(test_st_text_counter__same_as_metric_and_put),
	        cmocka_unit_test(test_st_text_labelled__family),
	        cmocka_unit_test(test_st_text_labelled__empty),
	        cmocka_unit_test(test_st_text_counter__overflow),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
