/* Unit tests for the Node events' correlator and rate limits (cloudstream/src/events.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "events.h"

#define NS 1000000000ull
#define T0 (1764000000ull * NS) /* 2025-11-24T16:00:00Z */

static void test_cs_events_next__create_then_patch_with_counts(void **state)
{
	(void)state;
	struct cs_events *ev;
	assert_int_equal(cs_events_new(&ev), 0);
	struct cs_event_call c;
	assert_int_equal(cs_events_next(ev, 0, &c), 0); /* nothing yet */
	assert_int_equal(cs_events_note(ev, "edge-1", CS_EVENT_TUNNEL_REFUSED, "denied: serial 1",
	                                1000, T0 + 5),
	                 0);
	assert_int_equal(cs_events_next(ev, 1000, &c), 1);
	assert_true(c.create);
	assert_string_equal(c.node, "edge-1");
	assert_string_equal(c.name, "edge-1.187afca767ca0005"); /* node "." hex nanoseconds */
	assert_string_equal(c.reason, "TunnelRefused");
	assert_int_equal(c.count, 1);
	/* in flight: no second call for the key; occurrences meanwhile are counted */
	for (int i = 0; i < 4; i++)
		assert_int_equal(cs_events_note(ev, "edge-1", CS_EVENT_TUNNEL_REFUSED,
		                                "denied: serial 2", 1100 + (uint64_t)i,
		                                T0 + 2 * NS),
		                 0);
	struct cs_event_call c2;
	assert_int_equal(cs_events_next(ev, 1200, &c2), 0);
	cs_events_done(ev, c.id, 0, 1300);
	/* one call per key per interval */
	assert_int_equal(cs_events_next(ev, 1300 + CS_EVENTS_KEY_INTERVAL_MS - 1, &c2), 0);
	assert_int_equal(cs_events_next(ev, 1300 + CS_EVENTS_KEY_INTERVAL_MS, &c2), 1);
	assert_false(c2.create);
	assert_string_equal(c2.name, c.name);
	assert_int_equal(c2.count, 5);
	assert_string_equal(c2.message, "denied: serial 2");
	assert_int_equal(c2.first_s, T0 / NS);
	assert_int_equal(c2.last_s, T0 / NS + 2);
	cs_events_done(ev, c2.id, 0, 20000);
	assert_int_equal(cs_events_next(ev, 90000, &c2), 0); /* nothing new: no call */
	struct cs_events_stats st;
	cs_events_stats(ev, &st);
	assert_int_equal(st.created, 1);
	assert_int_equal(st.patched, 1);
	cs_events_free(ev);
	cs_events_free(NULL);
}

static void test_cs_events_done__expired_and_failed(void **state)
{
	(void)state;
	struct cs_events *ev;
	assert_int_equal(cs_events_new(&ev), 0);
	struct cs_event_call c;
	cs_events_note(ev, "edge-2", CS_EVENT_TUNNEL_REFUSED, "x", 0, T0);
	assert_int_equal(cs_events_next(ev, 0, &c), 1);
	cs_events_done(ev, c.id, -EIO, 10); /* failed: retried after CS_EVENTS_RETRY_MS */
	assert_int_equal(cs_events_next(ev, 10 + CS_EVENTS_RETRY_MS - 1, &c), 0);
	assert_int_equal(cs_events_next(ev, 10 + CS_EVENTS_RETRY_MS, &c), 1);
	assert_true(c.create);
	char first[CS_EVENTS_NAME_MAX + 1];
	snprintf(first, sizeof first, "%s", c.name);
	cs_events_done(ev, c.id, 0, 40000);
	cs_events_note(ev, "edge-2", CS_EVENT_TUNNEL_REFUSED, "y", 50000, T0 + 3600 * NS);
	assert_int_equal(cs_events_next(ev, 50000, &c), 1);
	assert_false(c.create);
	cs_events_done(ev, c.id, -ENOENT, 50001); /* the Event expired: a new one */
	assert_int_equal(cs_events_next(ev, 50001, &c), 1);
	assert_true(c.create);
	assert_int_equal(c.count, 1); /* what was not told yet */
	assert_string_not_equal(c.name, first);
	assert_int_equal(c.first_s, T0 / NS + 3600);
	cs_events_done(ev, 999999, 0, 1); /* unknown id: ignored */
	struct cs_events_stats st;
	cs_events_stats(ev, &st);
	assert_int_equal(st.failed, 1);
	assert_int_equal(st.created, 1);
	cs_events_free(ev);
}

static void test_cs_events_next__process_rate_limit(void **state)
{
	(void)state;
	struct cs_events *ev;
	assert_int_equal(cs_events_new(&ev), 0);
	char node[32];
	for (unsigned i = 0; i < 100; i++) {
		snprintf(node, sizeof node, "edge-%u", i);
		assert_int_equal(cs_events_note(ev, node, CS_EVENT_TUNNEL_REFUSED, "m", 0, T0), 0);
	}
	struct cs_event_call c;
	unsigned calls = 0;
	while (cs_events_next(ev, 0, &c) == 1)
		calls++;
	assert_int_equal(calls, CS_EVENTS_BURST); /* the burst, then the bucket is empty */
	assert_int_equal(cs_events_next(ev, 1000 / CS_EVENTS_PER_S - 1, &c), 0);
	assert_int_equal(cs_events_next(ev, 1000 / CS_EVENTS_PER_S, &c), 1);
	calls = 0;
	while (cs_events_next(ev, 1000, &c) == 1) /* one second: CS_EVENTS_PER_S more */
		calls++;
	assert_int_equal(calls, CS_EVENTS_PER_S - 1);
	cs_events_free(ev);
}

static void test_cs_events_note__bounded_table(void **state)
{
	(void)state;
	struct cs_events *ev;
	assert_int_equal(cs_events_new(&ev), 0);
	char node[32];
	struct cs_event_call c;
	/* fill the table with keys in flight: a new key has nowhere to go */
	for (unsigned i = 0; i < CS_EVENTS_MAX_KEYS; i++) {
		snprintf(node, sizeof node, "edge-%u", i);
		assert_int_equal(cs_events_note(ev, node, CS_EVENT_TUNNEL_REFUSED, "m", i, T0), 0);
		assert_int_equal(cs_events_next(ev, 1000000u * (i + 1), &c), 1);
	}
	assert_int_equal(cs_events_note(ev, "late", CS_EVENT_TUNNEL_REFUSED, "m", 5, T0), -ENOSPC);
	/* once one is idle, the least recently seen idle key makes room */
	cs_events_done(ev, c.id, 0, 1);
	assert_int_equal(cs_events_note(ev, "late", CS_EVENT_TUNNEL_REFUSED, "m", 5, T0), 0);
	assert_int_equal(cs_events_note(ev, "", CS_EVENT_TUNNEL_REFUSED, "m", 5, T0), -EINVAL);
	assert_int_equal(cs_events_note(ev, "a", CS_EVENT_REASON_COUNT, "m", 5, T0), -EINVAL);
	struct cs_events_stats st;
	cs_events_stats(ev, &st);
	assert_int_equal(st.dropped, 1);
	cs_events_free(ev);
}

static void test_cs_events_tunnel_up__flapping(void **state)
{
	(void)state;
	struct cs_events *ev;
	assert_int_equal(cs_events_new(&ev), 0);
	struct cs_event_call c;
	/* ups spread wider than the window never flap */
	for (unsigned i = 0; i < 10; i++)
		assert_int_equal(
		        cs_events_tunnel_up(ev, "calm", 1 + i * CS_EVENTS_FLAP_WINDOW_MS, T0), 1);
	assert_int_equal(cs_events_next(ev, 10 * CS_EVENTS_FLAP_WINDOW_MS, &c), 0);
	/* CS_EVENTS_FLAP_UPS within the window: one TunnelFlapping */
	uint64_t t = 20 * (uint64_t)CS_EVENTS_FLAP_WINDOW_MS;
	for (unsigned i = 1; i < CS_EVENTS_FLAP_UPS; i++)
		assert_int_equal(cs_events_tunnel_up(ev, "edge-9", t + i * 1000u, T0), i);
	assert_int_equal(cs_events_next(ev, t + 10000, &c), 0);
	assert_int_equal(cs_events_tunnel_up(ev, "edge-9", t + 20000, T0), CS_EVENTS_FLAP_UPS);
	assert_int_equal(cs_events_next(ev, t + 20000, &c), 1);
	assert_string_equal(c.reason, "TunnelFlapping");
	assert_string_equal(c.node, "edge-9");
	assert_string_equal(c.message, "the node's tunnel came up 4 times within 5 minutes");
	cs_events_free(ev);
}

static void test_cs_events_body__create_and_patch(void **state)
{
	(void)state;
	struct cs_event_call c = {.id = 1,
	                          .create = true,
	                          .node = "edge-1",
	                          .name = "edge-1.5",
	                          .reason = "TunnelRefused",
	                          .message = "say \"no\"",
	                          .count = 3,
	                          .first_s = T0 / NS,
	                          .last_s = T0 / NS + 61};
	char out[2048];
	const char want[] =
	        "{\"kind\":\"Event\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"edge-1.5\","
	        "\"namespace\":\"default\"},\"involvedObject\":{\"kind\":\"Node\",\"name\":"
	        "\"edge-1\",\"uid\":\"edge-1\",\"apiVersion\":\"v1\"},\"reason\":\"TunnelRefused\","
	        "\"message\":\"say \\\"no\\\"\",\"source\":{\"component\":\"cloudstream\",\"host\":"
	        "\"cs-0\"},\"firstTimestamp\":\"2025-11-24T16:00:00Z\",\"lastTimestamp\":"
	        "\"2025-11-24T16:01:01Z\",\"count\":3,\"type\":\"Warning\",\"reportingComponent\":"
	        "\"cloudstream\",\"reportingInstance\":\"cs-0\"}";
	assert_int_equal(cs_events_body(&c, "cloudstream", "cs-0", out, sizeof out),
	                 sizeof want - 1);
	assert_string_equal(out, want);
	assert_int_equal(cs_events_body(&c, "cloudstream", "cs-0", out, sizeof want - 1),
	                 -EMSGSIZE);
	c.create = false;
	const char patch[] =
	        "{\"count\":3,\"lastTimestamp\":\"2025-11-24T16:01:01Z\",\"message\":\"say "
	        "\\\"no\\\"\"}";
	assert_int_equal(cs_events_body(&c, "cloudstream", "cs-0", out, sizeof out),
	                 sizeof patch - 1);
	assert_string_equal(out, patch);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_cs_events_next__create_then_patch_with_counts),
	        cmocka_unit_test(test_cs_events_done__expired_and_failed),
	        cmocka_unit_test(test_cs_events_next__process_rate_limit),
	        cmocka_unit_test(test_cs_events_note__bounded_table),
	        cmocka_unit_test(test_cs_events_tunnel_up__flapping),
	        cmocka_unit_test(test_cs_events_body__create_and_patch),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
