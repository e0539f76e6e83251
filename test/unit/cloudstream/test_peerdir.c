/* Unit tests for the peer directory (cloudstream/src/peerdir.h): the NODE_UP / NODE_DOWN entry
 * codec, generations (newest wins), link loss, resync after a partition, the IP index, the
 * bounds, and the bytes per node it costs (printed for the README's arithmetic). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stream/frame.h>

#include "failmalloc.h"
#include "guard.h"
#include "peerdir.h"

static struct cs_peerdir_entry entry(const char *node, uint64_t gen, const char *ip)
{
	struct cs_peerdir_entry e = {.node = node, .node_len = strlen(node), .gen_ms = gen};
	e.caps = 0x7f;
	if (ip) {
		e.n_ips = 1;
		e.ips[0] = ip;
		e.ip_lens[0] = strlen(ip);
	}
	return e;
}

static void test_cs_peerdir_entry_encode__bytes(void **state)
{
	(void)state;
	uint8_t out[128];
	struct cs_peerdir_entry e = entry("edge-1", 300, "10.0.0.7");
	ssize_t n = cs_peerdir_entry_encode(out, sizeof out, true, &e);
	static const uint8_t want[] = {0x06, 'e',  'd', 'g', 'e', '-', '1', 0xac, 0x02, 0x7f,
	                               0x01, 0x08, '1', '0', '.', '0', '.', '0',  '.',  '7'};
	assert_int_equal(n, sizeof want);
	assert_memory_equal(out, want, sizeof want);
	n = cs_peerdir_entry_encode(out, sizeof out, false, &e);
	assert_int_equal(n, 9);
	assert_memory_equal(out, want, 9);
	/* Every cap too small by one byte or more: -EMSGSIZE. */
	for (size_t cap = 0; cap < sizeof want; cap++)
		assert_int_equal(cs_peerdir_entry_encode(out, cap, true, &e), -EMSGSIZE);
	struct cs_peerdir_entry bad = entry("Edge", 1, NULL);
	assert_int_equal(cs_peerdir_entry_encode(out, sizeof out, true, &bad), -EINVAL);
	bad = entry("", 1, NULL);
	assert_int_equal(cs_peerdir_entry_encode(out, sizeof out, true, &bad), -EINVAL);
	bad = entry("a", 1, "10.0.0.1/8");
	assert_int_equal(cs_peerdir_entry_encode(out, sizeof out, true, &bad), -EINVAL);
}

static void test_cs_peerdir_entry_decode__round_trip_and_prefixes(void **state)
{
	(void)state;
	uint8_t buf[512];
	struct cs_peerdir_entry e = entry("node.example-9", 1732460000123ull, "fd00::1");
	e.n_ips = 2;
	e.ips[1] = "192.168.1.1";
	e.ip_lens[1] = 11;
	ssize_t n = cs_peerdir_entry_encode(buf, sizeof buf, true, &e);
	assert_true(n > 0);
	struct guard_buf g;
	assert_int_equal(guard_new(&g, buf, (size_t)n), 0);
	struct cs_peerdir_entry d;
	assert_int_equal(cs_peerdir_entry_decode(g.data, g.len, true, &d), n);
	assert_int_equal(d.node_len, e.node_len);
	assert_memory_equal(d.node, e.node, e.node_len);
	assert_int_equal(d.gen_ms, e.gen_ms);
	assert_int_equal(d.caps, 0x7f);
	assert_int_equal(d.n_ips, 2);
	assert_memory_equal(d.ips[1], "192.168.1.1", 11);
	guard_free(&g);
	/* Every proper prefix of a whole payload is malformed (payloads arrive whole). */
	for (size_t k = 0; k < (size_t)n; k++) {
		assert_int_equal(guard_new(&g, buf, k), 0);
		assert_int_equal(cs_peerdir_entry_decode(g.data, k, true, &d), -EBADMSG);
		guard_free(&g);
	}
}

static void test_cs_peerdir_entry_decode__limits(void **state)
{
	(void)state;
	uint8_t buf[600];
	char name[CS_NODE_NAME_MAX_BYTES + 2];
	memset(name, 'a', sizeof name);
	struct cs_peerdir_entry d, e = entry("x", 1, NULL);
	/* name at the limit: fine; one over: refused both ways */
	e.node = name;
	e.node_len = CS_NODE_NAME_MAX_BYTES;
	ssize_t n = cs_peerdir_entry_encode(buf, sizeof buf, false, &e);
	assert_true(n > 0);
	assert_int_equal(cs_peerdir_entry_decode(buf, (size_t)n, false, &d), n);
	e.node_len++;
	assert_int_equal(cs_peerdir_entry_encode(buf, sizeof buf, false, &e), -EINVAL);
	static const uint8_t long_name[] = {0xfe, 0x01}; /* 254 */
	assert_int_equal(cs_peerdir_entry_decode(long_name, sizeof long_name, false, &d), -EBADMSG);
	/* IP count: 8 fine, 9 refused */
	static const uint8_t nine_ips[] = {0x01, 'a', 0x01, 0x00, 0x09};
	assert_int_equal(cs_peerdir_entry_decode(nine_ips, sizeof nine_ips, true, &d), -EBADMSG);
	/* forbidden bytes in a name and an IP */
	static const uint8_t upper[] = {0x01, 'A', 0x01};
	assert_int_equal(cs_peerdir_entry_decode(upper, sizeof upper, false, &d), -EBADMSG);
	static const uint8_t badip[] = {0x01, 'a', 0x01, 0x00, 0x01, 0x01, 'z'};
	assert_int_equal(cs_peerdir_entry_decode(badip, sizeof badip, true, &d), -EBADMSG);
	static const uint8_t empty_name[] = {0x00, 0x01};
	assert_int_equal(cs_peerdir_entry_decode(empty_name, sizeof empty_name, false, &d),
	                 -EBADMSG);
	/* caps over 32 bits */
	static const uint8_t bigcaps[] = {0x01, 'a', 0x01, 0x80, 0x80, 0x80, 0x80, 0x10, 0x00};
	assert_int_equal(cs_peerdir_entry_decode(bigcaps, sizeof bigcaps, true, &d), -EBADMSG);
}

static void test_cs_peerdir_gen_cmp__order(void **state)
{
	(void)state;
	assert_int_equal(cs_peerdir_gen_cmp(1, "b", 2, "a"), -1);
	assert_int_equal(cs_peerdir_gen_cmp(2, "a", 1, "b"), 1);
	assert_int_equal(cs_peerdir_gen_cmp(5, "a", 5, "b"), -1);
	assert_int_equal(cs_peerdir_gen_cmp(5, "b", 5, "a"), 1);
	assert_int_equal(cs_peerdir_gen_cmp(5, "a", 5, "a"), 0);
}

/* Builds a whole NODE_UP / NODE_DOWN payload of @n entries. */
static size_t payload(uint8_t *out, size_t cap, bool up, const struct cs_peerdir_entry *es,
                      size_t n)
{
	size_t pos = 0;
	for (size_t i = 0; i < n; i++) {
		ssize_t k = cs_peerdir_entry_encode(out + pos, cap - pos, up, &es[i]);
		assert_true(k > 0);
		pos += (size_t)k;
	}
	return pos;
}

struct ups {
	int n;
	char last_node[64];
	char last_replica[64];
	uint64_t last_gen;
};

static void on_up(const char *node, size_t len, uint64_t gen, const char *replica, void *user)
{
	struct ups *u = user;
	if (u == NULL)
		return;
	u->n++;
	snprintf(u->last_node, sizeof u->last_node, "%.*s", (int)len, node);
	snprintf(u->last_replica, sizeof u->last_replica, "%s", replica);
	u->last_gen = gen;
}

static const struct cs_peerdir_cbs cbs = {.on_up = on_up};

static void up(struct cs_peerdir *d, int slot, const char *node, uint64_t gen, const char *ip,
               struct ups *u)
{
	uint8_t buf[256];
	struct cs_peerdir_entry e = entry(node, gen, ip);
	size_t n = payload(buf, sizeof buf, true, &e, 1);
	assert_int_equal(cs_peerdir_recv(d, slot, ST_MSG_NODE_UP, buf, n, &cbs, u), 0);
}

static void down(struct cs_peerdir *d, int slot, const char *node, uint64_t gen)
{
	uint8_t buf[256];
	struct cs_peerdir_entry e = entry(node, gen, NULL);
	size_t n = payload(buf, sizeof buf, false, &e, 1);
	assert_int_equal(cs_peerdir_recv(d, slot, ST_MSG_NODE_DOWN, buf, n, &cbs, NULL), 0);
}

static void test_cs_peerdir_recv__newest_wins(void **state)
{
	(void)state;
	struct cs_peerdir *d;
	assert_int_equal(cs_peerdir_new(&d, 0), 0);
	int a = cs_peerdir_peer_add(d, "cs-a"), b = cs_peerdir_peer_add(d, "cs-b");
	assert_int_equal(a, 0);
	assert_int_equal(b, 1);
	assert_int_equal(cs_peerdir_peer_add(d, "cs-a"), a); /* same replica, same slot */
	struct ups u = {0};
	up(d, a, "n1", 100, "10.0.0.1", &u);
	assert_int_equal(u.n, 1);
	assert_string_equal(u.last_replica, "cs-a");
	struct cs_peerdir_hit h;
	assert_int_equal(cs_peerdir_get(d, "n1", 2, &h), 0);
	assert_int_equal(h.slot, a);
	assert_string_equal(h.node, "n1");
	assert_int_equal(h.gen_ms, 100);
	assert_int_equal(h.caps, 0x7f);
	/* n1 reconnected to cs-b later: b wins */
	up(d, b, "n1", 200, "10.0.0.1", &u);
	assert_int_equal(u.n, 2);
	assert_int_equal(cs_peerdir_get(d, "n1", 2, &h), 0);
	assert_string_equal(h.replica, "cs-b");
	/* a's late NODE_UP of the old tunnel is superseded; its NODE_DOWN does not touch b's */
	up(d, a, "n1", 100, "10.0.0.1", &u);
	assert_int_equal(u.n, 2);
	down(d, a, "n1", 100);
	assert_int_equal(cs_peerdir_get(d, "n1", 2, &h), 0);
	assert_string_equal(h.replica, "cs-b");
	/* same time: the replica id breaks the tie, the same way everywhere */
	up(d, a, "n2", 300, NULL, &u);
	up(d, b, "n2", 300, NULL, &u);
	assert_int_equal(cs_peerdir_get(d, "n2", 2, &h), 0);
	assert_string_equal(h.replica, "cs-b");
	up(d, a, "n2", 300, NULL, &u);
	assert_int_equal(cs_peerdir_get(d, "n2", 2, &h), 0);
	assert_string_equal(h.replica, "cs-b");
	/* NODE_DOWN by the holder removes it */
	down(d, b, "n1", 200);
	assert_int_equal(cs_peerdir_get(d, "n1", 2, &h), -ENOENT);
	assert_int_equal(cs_peerdir_get_by_ip(d, "10.0.0.1", 8, &h), -ENOENT);
	struct cs_peerdir_stats st;
	cs_peerdir_get_stats(d, &st);
	assert_int_equal(st.entries, 1);
	assert_int_equal(st.peers, 2);
	assert_int_equal(st.superseded, 2);
	cs_peerdir_free(d);
}

struct downs {
	int n;
	char last_node[64];
	char last_ip[64];
	size_t last_n_ips;
};

static void on_down(const struct cs_peerdir_entry *e, void *user)
{
	struct downs *w = user;
	w->n++;
	snprintf(w->last_node, sizeof w->last_node, "%.*s", (int)e->node_len, e->node);
	w->last_n_ips = e->n_ips;
	snprintf(w->last_ip, sizeof w->last_ip, "%.*s", e->n_ips ? (int)e->ip_lens[0] : 0,
	         e->n_ips ? e->ips[0] : "");
}

/* Every way an entry goes is reported, with its name and IPs (a node between tunnels:
 * requests for it wait for its redial, cloudstream/src/recent.h); a superseded NODE_DOWN is
 * not. */
static void test_cs_peerdir_recv__on_down_reported(void **state)
{
	(void)state;
	static const struct cs_peerdir_cbs dcbs = {.on_down = on_down};
	struct cs_peerdir *d;
	assert_int_equal(cs_peerdir_new(&d, 0), 0);
	int a = cs_peerdir_peer_add(d, "cs-a"), b = cs_peerdir_peer_add(d, "cs-b");
	struct downs w = {0};
	uint8_t buf[256];
	up(d, a, "n1", 100, "10.0.0.1", NULL);
	up(d, b, "n1", 200, "10.0.0.1", NULL); /* moved to b */
	/* a's NODE_DOWN of its older tunnel: b's entry stays, nothing reported */
	struct cs_peerdir_entry e = entry("n1", 100, NULL);
	size_t n = payload(buf, sizeof buf, false, &e, 1);
	assert_int_equal(cs_peerdir_recv(d, a, ST_MSG_NODE_DOWN, buf, n, &dcbs, &w), 0);
	assert_int_equal(w.n, 0);
	/* b's NODE_DOWN: reported with the node's IP */
	e = entry("n1", 200, NULL);
	n = payload(buf, sizeof buf, false, &e, 1);
	assert_int_equal(cs_peerdir_recv(d, b, ST_MSG_NODE_DOWN, buf, n, &dcbs, &w), 0);
	assert_int_equal(w.n, 1);
	assert_string_equal(w.last_node, "n1");
	assert_int_equal(w.last_n_ips, 1);
	assert_string_equal(w.last_ip, "10.0.0.1");
	/* a resync that no longer names n2 */
	up(d, a, "n2", 300, NULL, NULL);
	up(d, a, "n3", 300, NULL, NULL);
	assert_int_equal(cs_peerdir_recv(d, a, ST_MSG_SYNC, NULL, 0, &dcbs, &w), 0);
	e = entry("n3", 300, NULL);
	n = payload(buf, sizeof buf, true, &e, 1);
	assert_int_equal(cs_peerdir_recv(d, a, ST_MSG_NODE_UP, buf, n, &dcbs, &w), 0);
	assert_int_equal(cs_peerdir_recv(d, a, ST_MSG_SYNC_END, NULL, 0, &dcbs, &w), 0);
	assert_int_equal(w.n, 2);
	assert_string_equal(w.last_node, "n2");
	assert_int_equal(w.last_n_ips, 0);
	/* the link to a lost: n3 */
	assert_int_equal(cs_peerdir_peer_drop(d, a, &dcbs, &w), 1);
	assert_int_equal(w.n, 3);
	assert_string_equal(w.last_node, "n3");
	cs_peerdir_free(d);
}

static void test_cs_peerdir_peer_drop__link_loss(void **state)
{
	(void)state;
	struct cs_peerdir *d;
	assert_int_equal(cs_peerdir_new(&d, 0), 0);
	int a = cs_peerdir_peer_add(d, "cs-a"), b = cs_peerdir_peer_add(d, "cs-b");
	char name[32];
	for (int i = 0; i < 1000; i++) {
		snprintf(name, sizeof name, "node-%d", i);
		up(d, i % 2 ? a : b, name, (uint64_t)i, NULL, NULL);
	}
	assert_int_equal(cs_peerdir_peer_drop(d, a, NULL, NULL), 500);
	struct cs_peerdir_hit h;
	assert_int_equal(cs_peerdir_get(d, "node-1", 6, &h), -ENOENT);
	assert_int_equal(cs_peerdir_get(d, "node-2", 6, &h), 0);
	assert_int_equal(cs_peerdir_peer_drop(d, a, NULL, NULL), 0); /* gone already */
	assert_int_equal(cs_peerdir_recv(d, a, ST_MSG_SYNC, NULL, 0, &cbs, NULL), -EINVAL);
	/* the freed slot is reused by the next peer */
	assert_int_equal(cs_peerdir_peer_add(d, "cs-c"), a);
	cs_peerdir_free(d);
}

static void test_cs_peerdir_recv__resync_converges(void **state)
{
	(void)state;
	struct cs_peerdir *d;
	assert_int_equal(cs_peerdir_new(&d, 0), 0);
	int a = cs_peerdir_peer_add(d, "cs-a");
	up(d, a, "n1", 1, NULL, NULL);
	up(d, a, "n2", 1, NULL, NULL);
	assert_false(cs_peerdir_peer_synced(d, a));
	/* SYNC_END without SYNC is malformed */
	assert_int_equal(cs_peerdir_recv(d, a, ST_MSG_SYNC_END, NULL, 0, &cbs, NULL), -EBADMSG);
	/* a payload on SYNC is malformed */
	static const uint8_t one = 1;
	assert_int_equal(cs_peerdir_recv(d, a, ST_MSG_SYNC, &one, 1, &cbs, NULL), -EBADMSG);
	/* after a partition the full list names n2 and n3 only: n1 goes */
	assert_int_equal(cs_peerdir_recv(d, a, ST_MSG_SYNC, NULL, 0, &cbs, NULL), 0);
	struct cs_peerdir_hit h;
	assert_int_equal(cs_peerdir_get(d, "n1", 2, &h), 0); /* kept until the list ends */
	up(d, a, "n2", 1, NULL, NULL);
	up(d, a, "n3", 5, NULL, NULL);
	assert_int_equal(cs_peerdir_recv(d, a, ST_MSG_SYNC_END, NULL, 0, &cbs, NULL), 0);
	assert_true(cs_peerdir_peer_synced(d, a));
	assert_int_equal(cs_peerdir_get(d, "n1", 2, &h), -ENOENT);
	assert_int_equal(cs_peerdir_get(d, "n2", 2, &h), 0);
	assert_int_equal(cs_peerdir_get(d, "n3", 2, &h), 0);
	struct cs_peerdir_stats st;
	cs_peerdir_get_stats(d, &st);
	assert_int_equal(st.entries, 2);
	assert_int_equal(st.resync_gone, 1);
	/* a malformed entry after a good one: the good one applies, -EBADMSG */
	uint8_t buf[64];
	struct cs_peerdir_entry e = entry("n9", 1, NULL);
	size_t n = payload(buf, sizeof buf, true, &e, 1);
	buf[n++] = 0x05;
	assert_int_equal(cs_peerdir_recv(d, a, ST_MSG_NODE_UP, buf, n, &cbs, NULL), -EBADMSG);
	assert_int_equal(cs_peerdir_get(d, "n9", 2, &h), 0);
	assert_int_equal(cs_peerdir_recv(d, a, ST_MSG_DATA, buf, n, &cbs, NULL), -EINVAL);
	cs_peerdir_free(d);
}

static void test_cs_peerdir_get_by_ip__shared(void **state)
{
	(void)state;
	struct cs_peerdir *d;
	assert_int_equal(cs_peerdir_new(&d, 0), 0);
	int a = cs_peerdir_peer_add(d, "cs-a");
	up(d, a, "n1", 1, "10.1.0.1", NULL);
	struct cs_peerdir_hit h;
	assert_int_equal(cs_peerdir_get_by_ip(d, "10.1.0.1", 8, &h), 0);
	assert_string_equal(h.node, "n1");
	up(d, a, "n2", 1, "10.1.0.1", NULL);
	assert_int_equal(cs_peerdir_get_by_ip(d, "10.1.0.1", 8, &h), -ENOTUNIQ);
	/* the node re-announced with another IP: the old one is gone from the index */
	up(d, a, "n1", 2, "10.1.0.9", NULL);
	assert_int_equal(cs_peerdir_get_by_ip(d, "10.1.0.1", 8, &h), 0);
	assert_string_equal(h.node, "n2");
	cs_peerdir_free(d);
}

static void test_cs_peerdir_recv__bounds(void **state)
{
	(void)state;
	struct cs_peerdir *d;
	assert_int_equal(cs_peerdir_new(&d, 2), 0);
	int a = cs_peerdir_peer_add(d, "cs-a");
	up(d, a, "n1", 1, NULL, NULL);
	up(d, a, "n2", 1, NULL, NULL);
	up(d, a, "n3", 1, NULL, NULL);
	struct cs_peerdir_stats st;
	cs_peerdir_get_stats(d, &st);
	assert_int_equal(st.entries, 2);
	assert_int_equal(st.refused, 1);
	up(d, a, "n2", 2, NULL, NULL); /* a replacement still fits */
	cs_peerdir_get_stats(d, &st);
	assert_int_equal(st.refused, 1);
	char rep[16];
	for (int i = 1; i < CS_PEERDIR_MAX_PEERS; i++) {
		snprintf(rep, sizeof rep, "r%d", i);
		assert_int_equal(cs_peerdir_peer_add(d, rep), i);
	}
	assert_int_equal(cs_peerdir_peer_add(d, "one-more"), -ENOSPC);
	assert_int_equal(cs_peerdir_peer_add(d, ""), -EINVAL);
	cs_peerdir_free(d);
}

static void test_cs_peerdir_new__failmalloc(void **state)
{
	(void)state;
	for (int n = 0;; n++) {
		struct cs_peerdir *d = NULL;
		failmalloc_fail_after(n);
		int rc = cs_peerdir_new(&d, 0);
		if (rc == 0) {
			int a = cs_peerdir_peer_add(d, "cs-a");
			char name[32];
			for (int i = 0; i < 200; i++) { /* grows: a failed growth keeps the table */
				snprintf(name, sizeof name, "n%d", i);
				up(d, a, name, 1, "10.0.0.1", NULL);
			}
		}
		int fails = failmalloc_failures();
		failmalloc_off();
		cs_peerdir_free(d);
		if (rc == 0 && fails == 0)
			break;
		if (rc != 0)
			assert_int_equal(rc, -ENOMEM);
	}
}

/* What the directory costs: 100,000 nodes spread over 5 replicas, measured on one of them
 * (it keeps the 80,000 the four others hold), and the wire bytes of a full resync. */
static void test_cs_peerdir__bytes_per_node(void **state)
{
	(void)state;
	struct cs_peerdir *d;
	assert_int_equal(cs_peerdir_new(&d, 0), 0);
	int slots[4];
	char rep[16];
	for (int i = 0; i < 4; i++) {
		snprintf(rep, sizeof rep, "cloudstream-%d", i + 1);
		slots[i] = cs_peerdir_peer_add(d, rep);
	}
	uint8_t *buf = malloc(ST_MAX_EXT_PAYLOAD_BYTES);
	assert_non_null(buf);
	size_t wire = 0, msgs = 0, pos = 0;
	char name[32], ip[32];
	for (int i = 0; i < 80000; i++) {
		snprintf(name, sizeof name, "edge-node-%05d", i);
		snprintf(ip, sizeof ip, "10.%d.%d.%d", (i >> 16) & 255, (i >> 8) & 255, i & 255);
		struct cs_peerdir_entry e = entry(name, 1764000000000ull + (uint64_t)i, ip);
		ssize_t k = cs_peerdir_entry_encode(buf + pos, ST_MAX_EXT_PAYLOAD_BYTES - pos, true,
		                                    &e);
		if (k == -EMSGSIZE) {
			assert_int_equal(cs_peerdir_recv(d, slots[i % 4], ST_MSG_NODE_UP, buf, pos,
			                                 &cbs, NULL),
			                 0);
			wire += pos + 3;
			msgs++;
			pos = 0;
			k = cs_peerdir_entry_encode(buf, ST_MAX_EXT_PAYLOAD_BYTES, true, &e);
		}
		assert_true(k > 0);
		pos += (size_t)k;
	}
	assert_int_equal(cs_peerdir_recv(d, slots[0], ST_MSG_NODE_UP, buf, pos, &cbs, NULL), 0);
	wire += pos + 3;
	msgs++;
	free(buf);
	struct cs_peerdir_stats st;
	cs_peerdir_get_stats(d, &st);
	assert_int_equal(st.entries, 80000);
	printf("peerdir: 80000 remote nodes (100000 nodes on 5 replicas, seen from one): "
	       "%zu bytes asked of malloc (entries, names, IPs and both tables), %.1f bytes per "
	       "node; "
	       "NODE_UP wire %.1f bytes per node (name 15, one IPv4), full resync of 20000 nodes "
	       "%zu bytes in %zu messages\n",
	       st.bytes, (double)st.bytes / 80000.0, (double)wire / 80000.0, wire / 4, msgs / 4);
	cs_peerdir_free(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_cs_peerdir_entry_encode__bytes),
	        cmocka_unit_test(test_cs_peerdir_entry_decode__round_trip_and_prefixes),
	        cmocka_unit_test(test_cs_peerdir_entry_decode__limits),
	        cmocka_unit_test(test_cs_peerdir_gen_cmp__order),
	        cmocka_unit_test(test_cs_peerdir_recv__newest_wins),
	        cmocka_unit_test(test_cs_peerdir_peer_drop__link_loss),
	        cmocka_unit_test(test_cs_peerdir_recv__on_down_reported),
	        cmocka_unit_test(test_cs_peerdir_recv__resync_converges),
	        cmocka_unit_test(test_cs_peerdir_get_by_ip__shared),
	        cmocka_unit_test(test_cs_peerdir_recv__bounds),
	        cmocka_unit_test(test_cs_peerdir_new__failmalloc),
	        cmocka_unit_test(test_cs_peerdir__bytes_per_node),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
