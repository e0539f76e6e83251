/* Unit tests for the DNAT controller's rules (cloudstream/src/dnat_rules.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "dnat_rules.h"

static int parse(const char *json, uint16_t def, struct cs_dnat_node *out)
{
	struct json_object *o = json_tokener_parse(json);
	int rc = cs_dnat_node_parse(o, def, out);
	json_object_put(o);
	return rc;
}

static void test_cs_dnat_node_parse__addresses_and_port(void **state)
{
	(void)state;
	struct cs_dnat_node n;
	assert_int_equal(parse("{\"kind\":\"Node\",\"metadata\":{\"name\":\"edge-5\"},\"status\":{"
	                       "\"addresses\":[{\"type\":\"Hostname\",\"address\":\"edge-5\"},"
	                       "{\"type\":\"InternalIP\",\"address\":\"10.0.0.5\"},"
	                       "{\"type\":\"InternalIP\",\"address\":\"fd00::5\"},"
	                       "{\"type\":\"ExternalIP\",\"address\":\"203.0.113.5\"},"
	                       "{\"type\":\"InternalIP\",\"address\":\"10.0.0.5\"},"
	                       "{\"type\":\"InternalIP\",\"address\":\"10.0.1.5\"}],"
	                       "\"daemonEndpoints\":{\"kubeletEndpoint\":{\"Port\":10250}}}}",
	                       10350, &n),
	                 0);
	assert_string_equal(n.name, "edge-5");
	assert_int_equal(n.n_ips, 2); /* IPv6, ExternalIP and the duplicate skipped */
	assert_string_equal(n.ips[0], "10.0.0.5");
	assert_string_equal(n.ips[1], "10.0.1.5");
	assert_int_equal(n.port, 10250);
}

static void test_cs_dnat_node_parse__default_port_and_bad(void **state)
{
	(void)state;
	struct cs_dnat_node n;
	assert_int_equal(parse("{\"metadata\":{\"name\":\"a\"},\"status\":{\"daemonEndpoints\":{"
	                       "\"kubeletEndpoint\":{\"Port\":0}}}}",
	                       10350, &n),
	                 0);
	assert_int_equal(n.port, 10350);
	assert_int_equal(n.n_ips, 0);
	assert_int_equal(parse("{\"metadata\":{\"name\":\"a\"},\"status\":{\"daemonEndpoints\":{"
	                       "\"kubeletEndpoint\":{\"Port\":70000}}}}",
	                       10350, &n),
	                 0);
	assert_int_equal(n.port, 10350);
	assert_int_equal(parse("{\"metadata\":{}}", 1, &n), -EBADMSG);
	assert_int_equal(parse("{\"metadata\":{\"name\":\"Bad Name\"}}", 1, &n), -EBADMSG);
	assert_int_equal(parse("[]", 1, &n), -EBADMSG);
	assert_int_equal(cs_dnat_node_parse(NULL, 1, &n), -EINVAL);
	/* Not dotted quads. */
	assert_int_equal(parse("{\"metadata\":{\"name\":\"a\"},\"status\":{\"addresses\":["
	                       "{\"type\":\"InternalIP\",\"address\":\"10.0.0.256\"},"
	                       "{\"type\":\"InternalIP\",\"address\":\"10.0.0\"},"
	                       "{\"type\":\"InternalIP\",\"address\":\"10.0.0.1 -j ACCEPT\"},"
	                       "{\"type\":\"InternalIP\",\"address\":\"1.2.3.4.5\"}]}}",
	                       1, &n),
	                 0);
	assert_int_equal(n.n_ips, 0);
}

static struct cs_dnat_node node(const char *name, const char *ip, uint16_t port)
{
	struct cs_dnat_node n;
	memset(&n, 0, sizeof n);
	strncpy(n.name, name, sizeof n.name - 1);
	if (ip) {
		strncpy(n.ips[0], ip, sizeof n.ips[0] - 1);
		n.n_ips = 1;
	}
	n.port = port;
	return n;
}

static void test_cs_dnat_set__put_remove_sorted(void **state)
{
	(void)state;
	struct cs_dnat_set s;
	cs_dnat_set_init(&s);
	struct cs_dnat_node b = node("b", "10.0.0.2", 10350), a = node("a", "10.0.0.1", 10250);
	assert_int_equal(cs_dnat_set_put(&s, &b), 1);
	assert_int_equal(cs_dnat_set_put(&s, &a), 1);
	assert_int_equal(cs_dnat_set_put(&s, &a), 0); /* the same again: no change */
	assert_int_equal(s.n, 2);
	assert_string_equal(s.v[0].name, "a");
	a.port = 10350;
	assert_int_equal(cs_dnat_set_put(&s, &a), 1);
	assert_int_equal(cs_dnat_set_remove(&s, "zz"), 0);
	assert_int_equal(cs_dnat_set_remove(&s, "a"), 1);
	assert_int_equal(s.n, 1);
	assert_string_equal(s.v[0].name, "b");
	cs_dnat_set_cleanup(&s);
	cs_dnat_set_cleanup(&s); /* twice is fine */
}

static void test_cs_dnat_rules__text_and_own_addresses(void **state)
{
	(void)state;
	struct cs_dnat_set s;
	cs_dnat_set_init(&s);
	struct cs_dnat_node e5 = node("edge-5", "10.232.0.5", 10350),
	                    e6 = node("edge-6", "10.232.0.6", 10250),
	                    self = node("self", "10.231.0.1", 10350),
	                    lo = node("lo", "127.0.0.2", 10350);
	cs_dnat_set_put(&s, &e6);
	cs_dnat_set_put(&s, &e5);
	cs_dnat_set_put(&s, &self);
	cs_dnat_set_put(&s, &lo);
	const char *local[] = {"10.231.0.1", "127.0.0.1"};
	char out[4096];
	ssize_t n = cs_dnat_rules(&s, "10.231.0.2", 31000, local, 2, out, sizeof out);
	const char *want =
	        "*nat\n"
	        ":CLOUDSTREAM-DNAT - [0:0]\n"
	        "-A CLOUDSTREAM-DNAT -d 127.0.0.0/8 -m comment --comment \"cloudstream-dnat: not "
	        "loopback\" -j RETURN\n"
	        "-A CLOUDSTREAM-DNAT -m addrtype --dst-type LOCAL -m comment --comment "
	        "\"cloudstream-dnat: not this host\" -j RETURN\n"
	        "-A CLOUDSTREAM-DNAT -d 10.232.0.5/32 -p tcp -m tcp --dport 10350 -m comment "
	        "--comment \"cloudstream-dnat: node edge-5\" -j DNAT --to-destination "
	        "10.231.0.2:31000\n"
	        "-A CLOUDSTREAM-DNAT -d 10.232.0.6/32 -p tcp -m tcp --dport 10250 -m comment "
	        "--comment \"cloudstream-dnat: node edge-6\" -j DNAT --to-destination "
	        "10.231.0.2:31000\n"
	        "COMMIT\n";
	assert_string_equal(out, want);
	assert_int_equal(n, (ssize_t)strlen(want));
	/* One byte short of the text and its NUL: -EMSGSIZE; exactly enough: the text. */
	assert_int_equal(cs_dnat_rules(&s, "10.231.0.2", 31000, local, 2, out, strlen(want)),
	                 -EMSGSIZE);
	assert_int_equal(cs_dnat_rules(&s, "10.231.0.2", 31000, local, 2, out, strlen(want) + 1),
	                 (ssize_t)strlen(want));
	assert_int_equal(cs_dnat_rules(&s, "10.231.0.2", 31000, local, 2, out, 0), -EMSGSIZE);
	cs_dnat_set_cleanup(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_cs_dnat_node_parse__addresses_and_port),
	        cmocka_unit_test(test_cs_dnat_node_parse__default_port_and_bad),
	        cmocka_unit_test(test_cs_dnat_set__put_remove_sorted),
	        cmocka_unit_test(test_cs_dnat_rules__text_and_own_addresses),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
