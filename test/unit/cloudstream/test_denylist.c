/* Unit tests for the revocation list (cloudstream/src/denylist.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "denylist.h"
#include "failmalloc.h"
#include "guard.h"

static int parse(const char *text, struct cs_denylist **d, struct cs_denylist_error *err)
{
	return cs_denylist_parse(text, strlen(text), d, err);
}

static void test_cs_denylist_parse__entries_and_comments(void **state)
{
	(void)state;
	const char *text = "# revoked 2026-11-24\n"
	                   "\n"
	                   "serial 4a:3b:00:ff   # the laptop\n"
	                   "  node edge-17\r\n"
	                   "serial 0x00000000000000000000000000000000000000000000007F\n"
	                   "node a.b-c.d\n"
	                   "\tserial 0\n"
	                   "node last"; /* no final newline */
	struct cs_denylist *d = NULL;
	struct cs_denylist_error err;
	assert_int_equal(parse(text, &d, &err), 0);
	assert_int_equal(cs_denylist_serials(d), 3);
	assert_int_equal(cs_denylist_nodes(d), 3);
	assert_true(cs_denylist_has_serial(d, "4A3B00FF", 8));
	assert_true(cs_denylist_has_serial(d, "004a3b00ff", 10));
	assert_true(cs_denylist_has_serial(d, "7f", 2));
	assert_true(cs_denylist_has_serial(d, "00", 2));
	assert_false(cs_denylist_has_serial(d, "4A3B00FE", 8));
	assert_false(cs_denylist_has_serial(d, "xyz", 3));
	assert_true(cs_denylist_has_node(d, "edge-17", 7));
	assert_true(cs_denylist_has_node(d, "a.b-c.d", 7));
	assert_true(cs_denylist_has_node(d, "last", 4));
	assert_false(cs_denylist_has_node(d, "edge-1", 6));
	assert_false(cs_denylist_has_node(d, "EDGE-17", 7));
	cs_denylist_free(d);
	/* the empty file and comments only: an empty list */
	assert_int_equal(parse("", &d, &err), 0);
	assert_int_equal(cs_denylist_serials(d) + cs_denylist_nodes(d), 0);
	assert_false(cs_denylist_has_node(d, "x", 1));
	cs_denylist_free(d);
	assert_int_equal(parse("# nothing\n\n   \n", &d, &err), 0);
	cs_denylist_free(d);
	/* a NULL list lists nothing */
	assert_false(cs_denylist_has_serial(NULL, "01", 2));
	assert_false(cs_denylist_has_node(NULL, "a", 1));
	cs_denylist_free(NULL);
}

static void test_cs_denylist_parse__bad_lines(void **state)
{
	(void)state;
	static const struct {
		const char *text;
		size_t line;
	} bad[] = {
	        {"serial\n", 1},
	        {"node edge-1\nserial xyz\n", 2},
	        {"node Edge-1\n", 1},
	        {"node -edge\n", 1},
	        {"node edge-\n", 1},
	        {"node a..b\n", 1},
	        {"node a.-b\n", 1},
	        {"node edge-1 edge-2\n", 1},
	        {"edge-1\n", 1},
	        {"serials 01\n", 1},
	        {"\n\nnodes x\n", 3},
	        {"serial 0x\n", 1},
	        /* 41 significant hex digits: over 20 octets */
	        {"serial 10000000000000000000000000000000000000000\n", 1},
	        {"serial 01#c\n", 1}, /* '#' inside a value is not a comment */
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct cs_denylist *d = (struct cs_denylist *)1;
		struct cs_denylist_error err = {0};
		assert_int_equal(parse(bad[i].text, &d, &err), -EBADMSG);
		assert_int_equal(err.line, bad[i].line);
		assert_non_null(err.why);
		assert_ptr_equal(d, (struct cs_denylist *)1); /* untouched */
	}
	/* a NUL byte */
	struct cs_denylist *d = NULL;
	struct cs_denylist_error err;
	assert_int_equal(cs_denylist_parse("node a\0b\n", 9, &d, &err), -EBADMSG);
}

static void test_cs_denylist_parse__limits(void **state)
{
	(void)state;
	/* a node name of 253 bytes is fine, 254 is not */
	char line[300] = "node ";
	memset(line + 5, 'a', 253);
	line[5 + 253] = '\0';
	struct cs_denylist *d = NULL;
	struct cs_denylist_error err;
	assert_int_equal(parse(line, &d, &err), 0);
	assert_int_equal(cs_denylist_nodes(d), 1);
	cs_denylist_free(d);
	line[5 + 253] = 'a';
	line[5 + 254] = '\0';
	assert_int_equal(parse(line, &d, &err), -EBADMSG);
	/* 40 significant digits are fine */
	assert_int_equal(parse("serial 1000000000000000000000000000000000000000", &d, &err), 0);
	cs_denylist_free(d);
	/* over the file size */
	assert_int_equal(cs_denylist_parse("", CS_DENYLIST_MAX_FILE_BYTES + 1, &d, &err),
	                 -EMSGSIZE);
	/* over the entry count */
	size_t n = CS_DENYLIST_MAX_ENTRIES + 1;
	char *big = malloc(n * 9 + 1);
	assert_non_null(big);
	for (size_t i = 0; i < n; i++)
		memcpy(big + i * 9, "serial 1\n", 9);
	assert_int_equal(cs_denylist_parse(big, n * 9, &d, &err), -EMSGSIZE);
	assert_int_equal(cs_denylist_parse(big, (n - 1) * 9, &d, &err), 0);
	assert_true(cs_denylist_has_serial(d, "01", 2));
	cs_denylist_free(d);
	free(big);
}

static void test_cs_denylist_serial_canon__forms(void **state)
{
	(void)state;
	char out[CS_SERIAL_MAX_HEX + 1];
	assert_int_equal(cs_denylist_serial_canon("0x00:0a:Bc", 10, out, sizeof out), 3);
	assert_string_equal(out, "ABC");
	assert_int_equal(cs_denylist_serial_canon("000", 3, out, sizeof out), 1);
	assert_string_equal(out, "0");
	assert_int_equal(cs_denylist_serial_canon(":", 1, out, sizeof out), -EBADMSG);
	assert_int_equal(cs_denylist_serial_canon("", 0, out, sizeof out), -EBADMSG);
	assert_int_equal(cs_denylist_serial_canon("12g", 3, out, sizeof out), -EBADMSG);
	assert_int_equal(cs_denylist_serial_canon("1234", 4, out, 4), -EMSGSIZE);
}

static void test_cs_node_name_valid__rules(void **state)
{
	(void)state;
	assert_true(cs_node_name_valid("a", 1));
	assert_true(cs_node_name_valid("edge-1.site-2", 13));
	assert_true(cs_node_name_valid("1-2", 3));
	assert_false(cs_node_name_valid("", 0));
	assert_false(cs_node_name_valid(".a", 2));
	assert_false(cs_node_name_valid("a.", 2));
	assert_false(cs_node_name_valid("a-.b", 4));
	assert_false(cs_node_name_valid("a.-b", 4));
	assert_false(cs_node_name_valid("a_b", 3));
	assert_false(cs_node_name_valid("a,b", 3));
	assert_false(cs_node_name_valid("a b", 3));
}

static void test_cs_denylist_parse__guard_page(void **state)
{
	(void)state;
	static const char *texts[] = {"serial 0a", "node x", "# c", "serial", "node a.b-", ""};
	for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
		struct guard_buf g;
		assert_int_equal(guard_new(&g, texts[i], strlen(texts[i])), 0);
		struct cs_denylist *d = NULL;
		struct cs_denylist_error err;
		int rc = cs_denylist_parse((const char *)g.data, g.len, &d, &err);
		assert_true(rc == 0 || rc == -EBADMSG);
		cs_denylist_free(rc == 0 ? d : NULL);
		guard_free(&g);
	}
}

static void test_cs_denylist_parse__alloc_failure(void **state)
{
	(void)state;
	const char *text = "serial 01\nnode a\n";
	for (int n = 0;; n++) {
		struct cs_denylist *d = NULL;
		struct cs_denylist_error err;
		failmalloc_fail_after(n);
		int rc = parse(text, &d, &err);
		failmalloc_off();
		if (rc == 0) {
			assert_true(cs_denylist_has_node(d, "a", 1));
			cs_denylist_free(d);
			break;
		}
		assert_int_equal(rc, -ENOMEM);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_cs_denylist_parse__entries_and_comments),
	        cmocka_unit_test(test_cs_denylist_parse__bad_lines),
	        cmocka_unit_test(test_cs_denylist_parse__limits),
	        cmocka_unit_test(test_cs_denylist_serial_canon__forms),
	        cmocka_unit_test(test_cs_node_name_valid__rules),
	        cmocka_unit_test(test_cs_denylist_parse__guard_page),
	        cmocka_unit_test(test_cs_denylist_parse__alloc_failure),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
