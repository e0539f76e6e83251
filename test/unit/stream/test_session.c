/* Unit tests for the tunnel session (stream/session.h): a cloud and an edge session wired
 * back to back, in the base protocol and with every extension. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include <stream/err.h>
#include <stream/ext.h>
#include <stream/frame.h>
#include <stream/limits.h>
#include <stream/session.h>
#include <stream/wsframe.h>

#include "failmalloc.h"

#define MAX_IDS 8

/* What one side saw. */
struct side {
	struct st_session *s;
	int opens;
	uint64_t open_type[MAX_IDS];
	char open_payload[MAX_IDS][64];
	int refuse_with; /* on_open returns this */
	uint64_t bytes[MAX_IDS];
	bool consume;               /* call st_session_consumed at once */
	bool consume_only[MAX_IDS]; /* ... only for these ids, when any is set */
	bool any_only;
	int half_closes[MAX_IDS];
	int closes[MAX_IDS];
	uint64_t close_code[MAX_IDS];
	char close_reason[MAX_IDS][128];
	int writable[MAX_IDS];
	int tunnel_closes;
	void *close_user[MAX_IDS]; /* stream user handed to on_close */
	int opened[MAX_IDS];       /* on_opened calls */
	int peer_msgs;             /* on_peer calls */
	uint64_t peer_type[8];
	size_t peer_len[8];
	int peer_refuse; /* on_peer returns this */
	uint64_t bytes_at_opened[MAX_IDS];
	int reconnects; /* on_reconnect calls */
	uint64_t reconnect_drain_ms;
	char tunnel_close_text[64];
};

static int on_open(struct st_session *s, uint64_t id, uint64_t type, const uint8_t *p, size_t len,
                   void *user)
{
	(void)s;
	struct side *d = user;
	d->opens++;
	if (id < MAX_IDS) {
		d->open_type[id] = type;
		memcpy(d->open_payload[id], p, len < 63 ? len : 63);
	}
	return d->refuse_with;
}

static int on_data(struct st_session *s, uint64_t id, const uint8_t *p, size_t len, void *user)
{
	(void)p;
	struct side *d = user;
	if (id < MAX_IDS)
		d->bytes[id] += len;
	if (d->consume && (!d->any_only || (id < MAX_IDS && d->consume_only[id])))
		st_session_consumed(s, id, len);
	return 0;
}

static void on_half_close(struct st_session *s, uint64_t id, void *user)
{
	(void)s;
	struct side *d = user;
	if (id < MAX_IDS)
		d->half_closes[id]++;
}

static void on_close(struct st_session *s, uint64_t id, void *stream_user, uint64_t code,
                     const char *reason, size_t len, void *user)
{
	(void)s;
	struct side *d = user;
	if (id < MAX_IDS) {
		d->close_user[id] = stream_user;
		d->closes[id]++;
		d->close_code[id] = code;
		memcpy(d->close_reason[id], reason, len < 127 ? len : 127);
	}
}

static void on_writable(struct st_session *s, uint64_t id, void *user)
{
	(void)s;
	struct side *d = user;
	if (id < MAX_IDS)
		d->writable[id]++;
}

static void on_opened(struct st_session *s, uint64_t id, void *user)
{
	(void)s;
	struct side *d = user;
	if (id < MAX_IDS) {
		d->opened[id]++;
		d->bytes_at_opened[id] = d->bytes[id];
	}
}

static void on_tunnel_close(struct st_session *s, const char *text, size_t len, void *user)
{
	(void)s;
	struct side *d = user;
	d->tunnel_closes++;
	memcpy(d->tunnel_close_text, text, len < 63 ? len : 63);
}

static void on_reconnect(struct st_session *s, uint64_t drain_ms, void *user)
{
	(void)s;
	struct side *d = user;
	d->reconnects++;
	d->reconnect_drain_ms = drain_ms;
}

static int on_peer(struct st_session *s, uint64_t type, const uint8_t *p, size_t len, void *user)
{
	(void)s;
	(void)p;
	struct side *d = user;
	if (d->peer_msgs < 8) {
		d->peer_type[d->peer_msgs] = type;
		d->peer_len[d->peer_msgs] = len;
	}
	d->peer_msgs++;
	return d->peer_refuse;
}

static const struct st_session_callbacks callbacks = {
        .on_peer = on_peer,
        .on_open = on_open,
        .on_data = on_data,
        .on_half_close = on_half_close,
        .on_close = on_close,
        .on_writable = on_writable,
        .on_tunnel_close = on_tunnel_close,
        .on_opened = on_opened,
        .on_reconnect = on_reconnect,
};

static uint8_t wire[ST_MAX_MESSAGE_BYTES];

/* Every other message pump() moves is packed masked (st_session_pack_masked, as an edge's
 * tunnel writer packs them) with a key that changes each time, and unmasked here: every test
 * that pumps checks the masked packing too (DATA masked as it is copied out of the queue, every
 * other message masked whole). */
static unsigned pump_count;

static ssize_t pack_either(struct st_session *s, bool *binary)
{
	unsigned c = pump_count++;
	if ((c & 1) == 0)
		return st_session_pack(s, wire, sizeof wire, binary);
	const uint8_t key[4] = {(uint8_t)(0x9d + c), (uint8_t)(c * 7), 0x5a, (uint8_t)(c >> 3 | 1)};
	ssize_t len = st_session_pack_masked(s, wire, sizeof wire, binary, key);
	if (len > 0)
		st_ws_mask(wire, (size_t)len, key); /* as the receiving end unmasks */
	return len;
}

/* Moves up to @max messages from @from to @to; returns how many. Checks base-protocol rules. */
static int pump(struct side *from, struct side *to, int max, bool base)
{
	int n = 0;
	while (n < max) {
		bool binary;
		ssize_t len = pack_either(from->s, &binary);
		assert_true(len >= 0);
		if (len == 0)
			break;
		struct st_msg m;
		assert_int_equal(st_msg_decode(wire, (size_t)len, &m), 0);
		if (base) {
			assert_false(binary);
			assert_true(st_msg_type_is_base(m.type)); /* never an extension type */
		}
		assert_int_equal(st_session_recv(to->s, wire, (size_t)len), 0);
		n++;
	}
	return n;
}

static void make_pair(struct side *cloud, struct side *edge, uint32_t caps, uint64_t window,
                      size_t out_bytes)
{
	memset(cloud, 0, sizeof *cloud);
	memset(edge, 0, sizeof *edge);
	struct st_session_config cc = {.role = ST_SESSION_CLOUD,
	                               .caps = caps,
	                               .send_window_bytes = window,
	                               .recv_window_bytes = window,
	                               .stream_out_bytes = out_bytes,
	                               .max_streams = 4};
	struct st_session_config ec = cc;
	ec.role = ST_SESSION_EDGE;
	assert_int_equal(st_session_new(&cloud->s, &cc, &callbacks, cloud), 0);
	assert_int_equal(st_session_new(&edge->s, &ec, &callbacks, edge), 0);
}

static void free_pair(struct side *a, struct side *b)
{
	st_session_free(a->s);
	st_session_free(b->s);
}

static const uint8_t json[] = "{\"MessID\":1,\"url\":{\"Path\":\"/exec/ns/pod/c\"}}";

static void test_base_protocol_exchange(void **state)
{
	(void)state;
	struct side cloud, edge;
	make_pair(&cloud, &edge, 0, 0, 0);
	assert_int_equal(st_session_hello(cloud.s, "x"), -ENOTSUP);
	assert_int_equal(st_session_open(cloud.s, 1, ST_MSG_EXEC_CONNECT, json, sizeof json - 1),
	                 0);
	assert_int_equal(st_session_open(cloud.s, 1, ST_MSG_EXEC_CONNECT, json, 3), -EEXIST);
	assert_int_equal(st_session_open(cloud.s, 2, ST_MSG_TCP_CONNECT, json, 3), -ENOTSUP);
	assert_int_equal(st_session_open(cloud.s, 2, ST_MSG_DATA, json, 3), -EINVAL);
	assert_int_equal(st_session_open(edge.s, 2, ST_MSG_EXEC_CONNECT, json, 3), -EINVAL);
	/* Bytes queued right after the connect go after it. */
	assert_int_equal(st_session_write(cloud.s, 1, (const uint8_t *)"stdin", 5), 5);
	assert_int_equal(pump(&cloud, &edge, 10, true), 2);
	assert_int_equal(edge.opens, 1);
	assert_true(edge.open_type[1] == ST_MSG_EXEC_CONNECT);
	assert_memory_equal(edge.open_payload[1], json, 20);
	assert_true(edge.bytes[1] == 5);
	/* The edge answers and ends the stream: the cloud sees the bytes, then a clean close. */
	assert_int_equal(st_session_write(edge.s, 1, (const uint8_t *)"HTTP/1.1 101 ...", 16), 16);
	assert_int_equal(st_session_shutdown(edge.s, 1), 0); /* base: nothing on the wire */
	assert_int_equal(st_session_write(edge.s, 1, (const uint8_t *)"x", 1), -EPIPE);
	assert_int_equal(st_session_close(edge.s, 1, ST_EXT_ERR_UNREACHABLE, "ignored in base"), 0);
	assert_int_equal(pump(&edge, &cloud, 10, true), 2);
	assert_true(cloud.bytes[1] == 16);
	assert_int_equal(cloud.closes[1], 1);
	assert_true(cloud.close_code[1] == 0); /* REMOVE: the base protocol has no codes */
	/* The cloud answers the edge's REMOVE with its own, once; the edge knows it as answered. */
	assert_true(st_session_stream_exists(cloud.s, 1));
	assert_null(st_session_stream_user(cloud.s, 1));
	assert_int_equal(pump(&cloud, &edge, 10, true), 1);
	assert_int_equal(pump(&edge, &cloud, 10, true), 0);
	assert_int_equal(cloud.closes[1], 1);
	assert_int_equal(edge.closes[1], 0); /* the edge ended it itself: no callback */
	assert_false(st_session_stream_exists(cloud.s, 1));
	assert_false(st_session_stream_exists(edge.s, 1));
	/* Late DATA for a finished stream and extension types are ignored in the base protocol. */
	uint8_t msg[32];
	ssize_t n = st_msg_encode(msg, sizeof msg, 1, ST_MSG_DATA, (const uint8_t *)"late", 4);
	assert_int_equal(st_session_recv(cloud.s, msg, (size_t)n), 0);
	n = st_msg_encode(msg, sizeof msg, 0, ST_MSG_HELLO, (const uint8_t *)"\x01", 1);
	assert_int_equal(st_session_recv(edge.s, msg, (size_t)n), 0);
	n = st_msg_encode(msg, sizeof msg, 0, 99, NULL, 0);
	assert_int_equal(st_session_recv(edge.s, msg, (size_t)n), 0);
	struct st_session_stats stats;
	st_session_get_stats(edge.s, &stats);
	assert_true(stats.ignored_msgs == 2);
	/* CLOSE_CONNECT reaches the edge's callback. */
	n = st_msg_encode(msg, sizeof msg, 0, ST_MSG_CLOSE_CONNECT, (const uint8_t *)"bye", 3);
	assert_int_equal(st_session_recv(edge.s, msg, (size_t)n), 0);
	assert_int_equal(edge.tunnel_closes, 1);
	free_pair(&cloud, &edge);
}

/* Feeds @n REMOVEs for @id to @d, as KubeEdge's cloud does in its loop. */
static void send_removes(struct side *d, uint64_t id, int n)
{
	uint8_t msg[32];
	ssize_t len = st_msg_encode(msg, sizeof msg, id, ST_MSG_REMOVE_CONNECT, NULL, 0);
	assert_true(len > 0);
	for (int i = 0; i < n; i++)
		assert_int_equal(st_session_recv(d->s, msg, (size_t)len), 0);
}

/* Packs everything @d has to send; returns how many messages, checks each is REMOVE(@id)
 * when @id is not 0. */
static int drain_removes(struct side *d, uint64_t id)
{
	int n = 0;
	for (;;) {
		bool binary;
		ssize_t len = st_session_pack(d->s, wire, sizeof wire, &binary);
		assert_true(len >= 0);
		if (len == 0)
			return n;
		struct st_msg m;
		assert_int_equal(st_msg_decode(wire, (size_t)len, &m), 0);
		if (id != 0) {
			assert_true(m.type == ST_MSG_REMOVE_CONNECT);
			assert_true(m.connect_id == id);
		}
		n++;
	}
}

/* KubeEdge's cloud resends REMOVE until the edge's arrives: the edge answers the first once
 * and absorbs the rest, at no cost. */
static void test_base_remove_answered_exactly_once(void **state)
{
	(void)state;
	struct side cloud, edge;
	make_pair(&cloud, &edge, 0, 0, 0);
	assert_int_equal(st_session_open(cloud.s, 1, ST_MSG_EXEC_CONNECT, json, sizeof json - 1),
	                 0);
	assert_int_equal(pump(&cloud, &edge, 10, true), 1);
	assert_int_equal(st_session_write(edge.s, 1, (const uint8_t *)"HTTP/1.1 101 ...", 16), 16);
	assert_int_equal(pump(&edge, &cloud, 10, true), 1);
	/* The apiserver side ended: the cloud's loop sends 1000 REMOVEs before it reads ours. */
	send_removes(&edge, 1, 1000);
	assert_int_equal(edge.closes[1], 1);
	assert_true(edge.close_code[1] == 0);
	assert_true(st_session_want_write(edge.s));
	/* The caller cannot write on it any more: it was told the stream is over. */
	assert_int_equal(st_session_write(edge.s, 1, (const uint8_t *)"x", 1), -EPIPE);
	assert_int_equal(st_session_close(edge.s, 1, 0, NULL), 0);
	assert_int_equal(drain_removes(&edge, 1), 1);
	assert_false(st_session_want_write(edge.s));
	/* More of the loop in flight: absorbed, nothing sent. */
	send_removes(&edge, 1, 500);
	assert_int_equal(drain_removes(&edge, 0), 0);
	assert_int_equal(edge.closes[1], 1);
	struct st_session_stats stats;
	st_session_get_stats(edge.s, &stats);
	assert_true(stats.removes_answered == 1);
	assert_true(stats.removes_repeated == 1499);
	assert_true(stats.removes_crossed == 0);
	assert_true(stats.streams_open == 0);
	free_pair(&cloud, &edge);
}

/* Our REMOVE still queued (behind bytes the tunnel has no room for) when the peer's arrives:
 * ours goes at once, without the bytes, and counts as the answer; and the other order: ours
 * went first, so the peer's is absorbed. */
static void test_base_crossing_removes(void **state)
{
	(void)state;
	struct side cloud, edge;
	make_pair(&cloud, &edge, 0, 0, 0);
	for (uint64_t id = 1; id <= 2; id++)
		assert_int_equal(
		        st_session_open(cloud.s, id, ST_MSG_EXEC_CONNECT, json, sizeof json - 1),
		        0);
	assert_int_equal(pump(&cloud, &edge, 10, true), 2);
	/* Stream 1: the backend ended; its last bytes and REMOVE are queued, not packed. */
	assert_int_equal(st_session_write(edge.s, 1, (const uint8_t *)"last words", 10), 10);
	assert_int_equal(st_session_close(edge.s, 1, 0, NULL), 0);
	send_removes(&edge, 1, 3);
	assert_int_equal(edge.closes[1], 0); /* the edge had ended it itself */
	assert_int_equal(drain_removes(&edge, 1), 1);
	/* Stream 2: the edge's REMOVE is on the wire when the cloud's loop starts. */
	assert_int_equal(st_session_close(edge.s, 2, 0, NULL), 0);
	assert_int_equal(drain_removes(&edge, 2), 1);
	send_removes(&edge, 2, 3);
	assert_int_equal(drain_removes(&edge, 0), 0);
	struct st_session_stats stats;
	st_session_get_stats(edge.s, &stats);
	assert_true(stats.removes_crossed == 1);
	assert_true(stats.removes_answered == 0);
	assert_true(stats.removes_repeated == 5);
	assert_true(stats.data_bytes_out == 0); /* "last words" were dropped, nobody reads them */
	/* The same on the cloud side, facing a KubeEdge edge: its REMOVE crosses ours. */
	assert_int_equal(st_session_open(cloud.s, 3, ST_MSG_LOGS_CONNECT, json, sizeof json - 1),
	                 0);
	assert_int_equal(pump(&cloud, &edge, 10, true), 1);
	assert_int_equal(st_session_close(cloud.s, 3, 0, NULL), 0);
	send_removes(&cloud, 3, 1);
	assert_int_equal(drain_removes(&cloud, 3), 1);
	st_session_get_stats(cloud.s, &stats);
	assert_true(stats.removes_crossed == 1);
	free_pair(&cloud, &edge);
}

/* A REMOVE for an ID we do not know is answered once per ID; the ring of remembered IDs is
 * bounded, and an answer that has no slot yet is given when the peer asks again. */
static void test_base_unknown_remove_answered_once(void **state)
{
	(void)state;
	struct side cloud, edge;
	make_pair(&cloud, &edge, 0, 0, 0);
	send_removes(&edge, 77, 2);
	send_removes(&edge, 0, 1); /* ConnectID 0 is never a stream */
	assert_int_equal(drain_removes(&edge, 77), 1);
	send_removes(&edge, 77, 5);
	assert_int_equal(drain_removes(&edge, 0), 0);
	/* Every slot owes an answer: one more unknown ID waits for the peer's next REMOVE. */
	for (uint64_t id = 1000; id < 1000 + ST_BASE_ENDED_IDS + 1; id++)
		send_removes(&edge, id, 1);
	assert_int_equal(drain_removes(&edge, 0), (int)ST_BASE_ENDED_IDS);
	send_removes(&edge, 1000 + ST_BASE_ENDED_IDS, 1);
	assert_int_equal(drain_removes(&edge, 1000 + ST_BASE_ENDED_IDS), 1);
	struct st_session_stats stats;
	st_session_get_stats(edge.s, &stats);
	assert_true(stats.removes_answered == 1 + ST_BASE_ENDED_IDS + 1);
	assert_true(stats.removes_repeated == 6);
	assert_true(stats.ignored_msgs == 2);
	free_pair(&cloud, &edge);
}

/* With extensions negotiated nothing answers a REMOVE: our own peers do not loop. */
static void test_ext_remove_not_answered(void **state)
{
	(void)state;
	struct side cloud, edge;
	make_pair(&cloud, &edge, ST_CAP_ALL, 1 << 20, 0);
	assert_int_equal(st_session_open(cloud.s, 1, ST_MSG_EXEC_CONNECT, json, sizeof json - 1),
	                 0);
	assert_int_equal(pump(&cloud, &edge, 10, false), 1);
	send_removes(&edge, 1, 2);
	send_removes(&edge, 9, 1);
	assert_int_equal(edge.closes[1], 1);
	assert_int_equal(drain_removes(&edge, 0), 0);
	assert_false(st_session_stream_exists(edge.s, 1));
	free_pair(&cloud, &edge);
}

/* With credit flow control the receive windows are charged to a node budget and a process
 * budget, each with the stream's output floor (ST_STREAM_OUT_FLOOR_BYTES): a stream whose
 * first window does not fit is refused (cloud: -ENOSPC; edge: ERROR limit), a window grows
 * while its consumer drains and the budgets have room, shrinks while one is tight, output
 * beyond the floor is queued only as far as the budgets have room, and everything is credited
 * back when streams end. */
static void test_flow_budgets(void **state)
{
	(void)state;
	const uint64_t floor_bytes = ST_STREAM_OUT_FLOOR_BYTES;
	const uint64_t first = 8 * 1024 + floor_bytes; /* a first window and its floor */
	struct side cloud, edge;
	memset(&cloud, 0, sizeof cloud);
	memset(&edge, 0, sizeof edge);
	struct st_budget proc;
	st_budget_init(&proc, 5 * first);
	struct st_session_config cc = {.role = ST_SESSION_CLOUD,
	                               .caps = ST_CAP_ALL,
	                               .send_window_bytes = 64 * 1024,
	                               .recv_window_bytes = 8 * 1024,
	                               .recv_window_max_bytes = 16 * 1024,
	                               .node_budget_bytes = 3 * first,
	                               .process_budget = &proc,
	                               .max_streams = 8};
	struct st_session_config ec = {.role = ST_SESSION_EDGE,
	                               .caps = ST_CAP_ALL,
	                               .send_window_bytes = 8 * 1024,
	                               .recv_window_bytes = 64 * 1024,
	                               .max_streams = 8};
	assert_int_equal(st_session_new(&cloud.s, &cc, &callbacks, &cloud), 0);
	assert_int_equal(st_session_new(&edge.s, &ec, &callbacks, &edge), 0);
	/* Three first windows with their floors fill the node's budget; the fourth is refused. */
	for (uint64_t id = 1; id <= 3; id++)
		assert_int_equal(
		        st_session_open(cloud.s, id, ST_MSG_EXEC_CONNECT, json, sizeof json - 1),
		        0);
	assert_int_equal(st_session_open(cloud.s, 4, ST_MSG_EXEC_CONNECT, json, sizeof json - 1),
	                 -ENOSPC);
	assert_false(st_session_stream_exists(cloud.s, 4));
	struct st_session_stats stats;
	st_session_get_stats(cloud.s, &stats);
	assert_true(stats.budget_refusals == 1 && stats.window_bytes == 3 * first);
	assert_true(stats.streams_total == 3);
	assert_true(proc.used_bytes == 3 * first);
	assert_int_equal(pump(&cloud, &edge, 10, false), 3); /* the connects */
	/* Stream 1 drains: its window would double, but the node budget is full, so it stays. */
	cloud.consume = true;
	uint8_t blob[8 * 1024];
	memset(blob, 'x', sizeof blob);
	assert_int_equal(st_session_write(edge.s, 1, blob, sizeof blob), (ssize_t)sizeof blob);
	while (pump(&edge, &cloud, 10, false) + pump(&cloud, &edge, 10, false) > 0)
		;
	assert_true(cloud.bytes[1] == sizeof blob);
	st_session_get_stats(cloud.s, &stats);
	assert_true(stats.window_bytes == 3 * first);
	/* The budget is full: what stream 1 may queue toward the edge is its floor, no more. */
	assert_true(st_session_write_space(cloud.s, 1) == floor_bytes);
	/* Streams 2 and 3 end: the budget has room, stream 1 grows by doubling while it drains,
	 * up to its maximum. */
	assert_int_equal(st_session_close(cloud.s, 2, 0, NULL), 0);
	assert_int_equal(st_session_close(cloud.s, 3, 0, NULL), 0);
	while (pump(&cloud, &edge, 10, false) + pump(&edge, &cloud, 10, false) > 0)
		;
	st_session_get_stats(cloud.s, &stats);
	assert_true(stats.window_bytes == first);
	for (int round = 0; round < 4; round++) {
		assert_int_equal(st_session_write(edge.s, 1, blob, sizeof blob),
		                 (ssize_t)sizeof blob);
		while (pump(&edge, &cloud, 10, false) + pump(&cloud, &edge, 10, false) > 0)
			;
	}
	st_session_get_stats(cloud.s, &stats);
	assert_true(stats.window_bytes == 16 * 1024 + floor_bytes);
	assert_true(cloud.bytes[1] == 5 * sizeof blob);
	/* A new stream makes the budgets tight: stream 1 shrinks back as it drains. */
	assert_int_equal(st_session_open(cloud.s, 5, ST_MSG_EXEC_CONNECT, json, sizeof json - 1),
	                 0);
	st_session_get_stats(cloud.s, &stats);
	assert_true(stats.window_bytes == 16 * 1024 + floor_bytes + first);
	assert_int_equal(pump(&cloud, &edge, 10, false), 1);
	assert_int_equal(st_session_write(edge.s, 1, blob, sizeof blob), (ssize_t)sizeof blob);
	while (pump(&edge, &cloud, 10, false) + pump(&cloud, &edge, 10, false) > 0)
		;
	st_session_get_stats(cloud.s, &stats);
	assert_true(stats.window_bytes == 2 * first);
	/* Bytes queued toward the peer beyond the floor are charged while they wait, credited
	 * once packed... */
	uint64_t windows = proc.used_bytes;
	assert_int_equal(st_session_write(cloud.s, 1, blob, sizeof blob), (ssize_t)sizeof blob);
	assert_true(proc.used_bytes == windows + sizeof blob - floor_bytes);
	while (pump(&cloud, &edge, 10, false) + pump(&edge, &cloud, 10, false) > 0)
		;
	assert_true(proc.used_bytes == windows);
	/* ...never past the budget: the queue takes the floor and the node budget's room, and the
	 * writer is told when the room comes back... */
	static uint8_t big[64 * 1024];
	uint64_t room = 3 * first - windows;
	assert_int_equal(st_session_write(cloud.s, 1, big, sizeof big),
	                 (ssize_t)(floor_bytes + room));
	st_session_get_stats(cloud.s, &stats);
	assert_true(stats.window_bytes == 3 * first && proc.used_bytes == 3 * first);
	/* ...while another stream can still queue its floor. */
	assert_true(st_session_write_space(cloud.s, 5) == floor_bytes);
	int wakes = cloud.writable[1];
	pump(&cloud, &edge, 10, false);
	assert_true(proc.used_bytes == windows);
	pump(&cloud, &edge, 10, false);
	assert_int_equal(cloud.writable[1], wakes + 1);
	/* ...or when the stream goes with them still queued. */
	assert_int_equal(st_session_write(cloud.s, 1, blob, sizeof blob), (ssize_t)sizeof blob);
	assert_true(proc.used_bytes == windows + sizeof blob - floor_bytes);
	/* Everything goes back when the session ends; the process budget is shared. */
	st_session_free(cloud.s);
	assert_true(proc.used_bytes == 0);
	assert_true(proc.peak_bytes == 3 * first);
	st_session_free(edge.s);
}

/* The edge refuses a stream whose first window does not fit its process budget with ERROR
 * limit, and reads nothing of it. */
static void test_flow_budget_edge_refusal(void **state)
{
	(void)state;
	struct side cloud, edge;
	memset(&cloud, 0, sizeof cloud);
	memset(&edge, 0, sizeof edge);
	struct st_budget proc;
	st_budget_init(&proc, 100 * 1024);
	struct st_session_config cc = {.role = ST_SESSION_CLOUD,
	                               .caps = ST_CAP_ALL,
	                               .send_window_bytes = 64 * 1024,
	                               .recv_window_bytes = 64 * 1024,
	                               .max_streams = 8};
	struct st_session_config ec = {.role = ST_SESSION_EDGE,
	                               .caps = ST_CAP_ALL,
	                               .send_window_bytes = 64 * 1024,
	                               .recv_window_bytes = 64 * 1024,
	                               .process_budget = &proc,
	                               .max_streams = 8};
	assert_int_equal(st_session_new(&cloud.s, &cc, &callbacks, &cloud), 0);
	assert_int_equal(st_session_new(&edge.s, &ec, &callbacks, &edge), 0);
	assert_int_equal(st_session_open(cloud.s, 1, ST_MSG_EXEC_CONNECT, json, sizeof json - 1),
	                 0);
	assert_int_equal(st_session_open(cloud.s, 2, ST_MSG_EXEC_CONNECT, json, sizeof json - 1),
	                 0);
	assert_int_equal(pump(&cloud, &edge, 10, false), 2);
	assert_int_equal(edge.opens, 1); /* the second never reached on_open */
	assert_int_equal(pump(&edge, &cloud, 10, false), 1);
	assert_int_equal(cloud.closes[2], 1);
	assert_true(cloud.close_code[2] == ST_EXT_ERR_LIMIT);
	assert_string_equal(cloud.close_reason[2], "memory budget spent");
	assert_true(proc.used_bytes == 64 * 1024 + ST_STREAM_OUT_FLOOR_BYTES && proc.refused == 1);
	free_pair(&cloud, &edge);
	assert_true(proc.used_bytes == 0);
}

/* An edge with a quiet window announces it (HELLO) and gives it to LOGS, METRIC and TCP streams;
 * an upload stream (EXEC) gets the whole first window at open, reserved in one charge with
 * its output floor, the
 * difference granted in a WINDOW before anything else of it. Each refused whole or admitted. */
static void test_st_session_window_reserve__quiet_first_window(void **state)
{
	(void)state;
	struct side cloud, edge;
	memset(&cloud, 0, sizeof cloud);
	memset(&edge, 0, sizeof edge);
	struct st_budget proc;
	st_budget_init(&proc, 100 * 1024);
	struct st_session_config cc = {.role = ST_SESSION_CLOUD,
	                               .caps = ST_CAP_ALL,
	                               .send_window_bytes = 4096, /* what the edge announced */
	                               .recv_window_bytes = 64 * 1024,
	                               .max_streams = 8};
	struct st_session_config ec = {.role = ST_SESSION_EDGE,
	                               .caps = ST_CAP_ALL,
	                               .send_window_bytes = 64 * 1024,
	                               .recv_window_bytes = 64 * 1024,
	                               .recv_window_quiet_bytes = 4096,
	                               .recv_window_max_bytes = 64 * 1024,
	                               .process_budget = &proc,
	                               .max_streams = 8};
	assert_int_equal(st_session_new(&cloud.s, &cc, &callbacks, &cloud), 0);
	assert_int_equal(st_session_new(&edge.s, &ec, &callbacks, &edge), 0);
	/* HELLO announces the quiet window. */
	assert_int_equal(st_session_hello(edge.s, "e"), 0);
	bool binary;
	ssize_t len = st_session_pack(edge.s, wire, sizeof wire, &binary);
	struct st_msg m;
	assert_true(len > 0);
	assert_int_equal(st_msg_decode(wire, (size_t)len, &m), 0);
	assert_true(m.type == ST_MSG_HELLO);
	struct st_ext_hello hello;
	assert_int_equal(st_ext_hello_decode(m.payload, m.payload_len, &hello), 0);
	assert_true(hello.window_bytes == 4096);
	assert_int_equal(st_session_recv(cloud.s, wire, (size_t)len), 0);

	assert_int_equal(st_session_open(cloud.s, 1, ST_MSG_LOGS_CONNECT, json, sizeof json - 1),
	                 0);
	assert_int_equal(st_session_open(cloud.s, 2, ST_MSG_EXEC_CONNECT, json, sizeof json - 1),
	                 0);
	assert_int_equal(pump(&cloud, &edge, 10, false), 2);
	assert_int_equal(edge.opens, 2);
	/* Each stream's first window and its output floor (ST_STREAM_OUT_FLOOR_BYTES). */
	assert_true(proc.used_bytes == (4096 + 4096) + (64 * 1024 + 4096));
	/* The edge's first message: WINDOW for stream 2, 60 KiB (02 41 80 e0 03). */
	len = st_session_pack(edge.s, wire, sizeof wire, &binary);
	static const uint8_t want[] = {0x02, 0x41, 0x80, 0xe0, 0x03};
	assert_int_equal(len, sizeof want);
	assert_memory_equal(wire, want, sizeof want);
	assert_int_equal(st_session_recv(cloud.s, wire, (size_t)len), 0);
	assert_int_equal(st_session_pack(edge.s, wire, sizeof wire, &binary), 0);
	/* The cloud may send 64 KiB on the exec stream and 4 KiB on the logs stream. */
	static uint8_t body[80 * 1024];
	assert_int_equal(st_session_write(cloud.s, 2, body, sizeof body), 64 * 1024);
	assert_int_equal(st_session_write(cloud.s, 1, body, 8192), 4096);
	/* 24 KiB left: another exec stream is refused whole (ERROR limit), a logs stream fits. */
	assert_int_equal(st_session_open(cloud.s, 3, ST_MSG_EXEC_CONNECT, json, sizeof json - 1),
	                 0);
	assert_int_equal(st_session_open(cloud.s, 4, ST_MSG_LOGS_CONNECT, json, sizeof json - 1),
	                 0);
	pump(&cloud, &edge, 100, false);
	assert_int_equal(edge.opens, 3);
	assert_true(edge.bytes[2] == 64 * 1024 && edge.bytes[1] == 4096);
	assert_true(proc.used_bytes == (4096 + 4096) + (64 * 1024 + 4096) + (4096 + 4096) &&
	            proc.refused == 1);
	pump(&edge, &cloud, 100, false);
	assert_int_equal(cloud.closes[3], 1);
	assert_true(cloud.close_code[3] == ST_EXT_ERR_LIMIT);
	assert_int_equal(cloud.closes[4], 0);
	/* A TCP stream (the front door's CONNECT: opaque here) starts at the quiet window too:
	 * 16 KiB left, so it fits where an exec stream did not, and the cloud may send 4 KiB. */
	assert_int_equal(st_session_open(cloud.s, 5, ST_MSG_TCP_CONNECT, json, sizeof json - 1), 0);
	pump(&cloud, &edge, 100, false);
	assert_int_equal(edge.opens, 4);
	assert_true(proc.used_bytes == (4096 + 4096) + (64 * 1024 + 4096) + 2 * (4096 + 4096));
	pump(&edge, &cloud, 100, false);
	assert_int_equal(cloud.closes[5], 0);
	assert_int_equal(st_session_write(cloud.s, 5, body, 8192), 4096);
	free_pair(&cloud, &edge);
	assert_true(proc.used_bytes == 0);
}

/* Without a quiet window (or on the cloud, which never receives connects) every stream starts
 * at recv_window_bytes and HELLO announces it. */
static void test_st_session_window_reserve__no_quiet_window(void **state)
{
	(void)state;
	struct side cloud, edge;
	make_pair(&cloud, &edge, ST_CAP_ALL, 16 * 1024, 0);
	assert_int_equal(st_session_hello(edge.s, "e"), 0);
	bool binary;
	ssize_t len = st_session_pack(edge.s, wire, sizeof wire, &binary);
	struct st_msg m;
	assert_int_equal(st_msg_decode(wire, (size_t)len, &m), 0);
	struct st_ext_hello hello;
	assert_int_equal(st_ext_hello_decode(m.payload, m.payload_len, &hello), 0);
	assert_true(hello.window_bytes == 16 * 1024);
	assert_int_equal(st_session_open(cloud.s, 1, ST_MSG_EXEC_CONNECT, json, sizeof json - 1),
	                 0);
	pump(&cloud, &edge, 10, false);
	assert_int_equal(st_session_pack(edge.s, wire, sizeof wire, &binary), 0); /* no WINDOW */
	free_pair(&cloud, &edge);
}

static void test_refusals_and_codes(void **state)
{
	(void)state;
	for (int ext = 0; ext < 2; ext++) {
		struct side cloud, edge;
		make_pair(&cloud, &edge, ext ? ST_CAP_ALL : 0, 65536, 0);
		edge.refuse_with = -EACCES;
		assert_int_equal(st_session_open(cloud.s, 3, ST_MSG_METRIC_CONNECT, json, 10), 0);
		pump(&cloud, &edge, 10, !ext);
		pump(&edge, &cloud, 10, !ext);
		assert_int_equal(cloud.closes[3], 1);
		if (ext) {
			assert_true(cloud.close_code[3] == ST_EXT_ERR_REFUSED);
			assert_string_equal(cloud.close_reason[3], "access denied");
		} else {
			assert_true(cloud.close_code[3] == 0);
		}
		assert_false(st_session_stream_exists(edge.s, 3));
		free_pair(&cloud, &edge);
	}
}

static void test_protocol_errors(void **state)
{
	(void)state;
	struct side cloud, edge;
	make_pair(&cloud, &edge, ST_CAP_ALL, 4096, 0);
	uint8_t msg[64];
	/* A connect toward the cloud, and a connect reusing a live ID, are fatal. */
	ssize_t n = st_msg_encode(msg, sizeof msg, 5, ST_MSG_EXEC_CONNECT, json, 5);
	assert_int_equal(st_session_recv(cloud.s, msg, (size_t)n), -EPROTO);
	assert_int_equal(st_session_recv(edge.s, msg, (size_t)n), 0);
	assert_int_equal(st_session_recv(edge.s, msg, (size_t)n), -EPROTO);
	n = st_msg_encode(msg, sizeof msg, 0, ST_MSG_EXEC_CONNECT, json, 5);
	assert_int_equal(st_session_recv(edge.s, msg, (size_t)n), -EPROTO);
	/* Malformed messages and extension payloads are fatal. */
	const uint8_t bad[] = {0x80};
	assert_int_equal(st_session_recv(edge.s, bad, 1), -EBADMSG);
	n = st_msg_encode(msg, sizeof msg, 5, ST_MSG_WINDOW, (const uint8_t *)"\x00", 1);
	assert_int_equal(st_session_recv(edge.s, msg, (size_t)n), -EPROTO);
	/* DATA beyond the window resets that stream only, with a protocol error. */
	static uint8_t big[8192], filler[4097];
	n = st_msg_encode(big, sizeof big, 5, ST_MSG_DATA, filler, sizeof filler);
	assert_int_equal(st_session_recv(edge.s, big, (size_t)n), 0);
	assert_int_equal(edge.closes[5], 1);
	assert_true(edge.close_code[5] == ST_EXT_ERR_PROTOCOL);
	/* ... and the cloud gets the ERROR for it. */
	assert_int_equal(st_session_open(cloud.s, 5, ST_MSG_EXEC_CONNECT, json, 5), 0);
	pump(&edge, &cloud, 10, false);
	assert_int_equal(cloud.closes[5], 1);
	assert_true(cloud.close_code[5] == ST_EXT_ERR_PROTOCOL);
	/* HALF_CLOSE twice from the peer is a stream-level error. */
	n = st_msg_encode(msg, sizeof msg, 6, ST_MSG_EXEC_CONNECT, json, 5);
	assert_int_equal(st_session_recv(edge.s, msg, (size_t)n), 0);
	n = st_msg_encode(msg, sizeof msg, 6, ST_MSG_HALF_CLOSE, NULL, 0);
	assert_int_equal(st_session_recv(edge.s, msg, (size_t)n), 0);
	assert_int_equal(edge.half_closes[6], 1);
	assert_int_equal(st_session_recv(edge.s, msg, (size_t)n), 0);
	assert_int_equal(edge.closes[6], 1);
	assert_true(edge.close_code[6] == ST_EXT_ERR_PROTOCOL);
	free_pair(&cloud, &edge);
}

static void test_half_close_both_ways(void **state)
{
	(void)state;
	struct side cloud, edge;
	make_pair(&cloud, &edge, ST_CAP_ALL, 65536, 0);
	assert_int_equal(st_session_hello(cloud.s, "cloudstream-0"), 0);
	assert_int_equal(st_session_open(cloud.s, 1, ST_MSG_EXEC_CONNECT, json, 10), 0);
	assert_int_equal(st_session_write(cloud.s, 1, (const uint8_t *)"abc", 3), 3);
	assert_int_equal(st_session_shutdown(cloud.s, 1), 0);
	assert_int_equal(st_session_shutdown(cloud.s, 1), -EPIPE);
	assert_int_equal(pump(&cloud, &edge, 10, false), 4); /* HELLO, connect, DATA, HALF_CLOSE */
	assert_true(edge.bytes[1] == 3);
	assert_int_equal(edge.half_closes[1], 1);
	/* The edge still writes, then shuts down: both directions done, both sides close. */
	assert_int_equal(st_session_write(edge.s, 1, (const uint8_t *)"out", 3), 3);
	assert_int_equal(st_session_shutdown(edge.s, 1), 0);
	assert_int_equal(pump(&edge, &cloud, 10, false), 2);
	assert_true(cloud.bytes[1] == 3);
	assert_int_equal(edge.closes[1], 1);
	assert_int_equal(cloud.closes[1], 1);
	assert_true(edge.close_code[1] == 0 && cloud.close_code[1] == 0);
	assert_false(st_session_stream_exists(edge.s, 1));
	assert_false(st_session_stream_exists(cloud.s, 1));
	free_pair(&cloud, &edge);
}

/* The edge sends as much as it can on streams 1 and 2 for @rounds; the cloud consumes stream 1
 * only. Returns the bytes each stream delivered. */
static void test_flow_control_isolation(void **state)
{
	(void)state;
	struct side cloud, edge;
	const uint64_t window = 64 * 1024;
	make_pair(&cloud, &edge, ST_CAP_ALL, window, 128 * 1024);
	cloud.consume = true;
	cloud.any_only = true;
	cloud.consume_only[1] = true; /* nobody reads stream 2 */
	assert_int_equal(st_session_open(cloud.s, 1, ST_MSG_LOGS_CONNECT, json, 5), 0);
	assert_int_equal(st_session_open(cloud.s, 2, ST_MSG_LOGS_CONNECT, json, 5), 0);
	pump(&cloud, &edge, 10, false);
	static uint8_t chunk[16384];
	memset(chunk, 'z', sizeof chunk);
	uint64_t written[3] = {0};
	const uint64_t total = 8 * 1024 * 1024;
	for (int round = 0; round < 100000 && written[1] < total; round++) {
		for (uint64_t id = 1; id <= 2; id++) {
			ssize_t w = st_session_write(edge.s, id, chunk, sizeof chunk);
			assert_true(w >= 0);
			written[id] += (uint64_t)w;
		}
		pump(&edge, &cloud, 4, false);
		pump(&cloud, &edge, 4, false); /* WINDOW grants */
	}
	pump(&edge, &cloud, 1000, false);
	/* Stream 1 went through completely; stream 2 stopped at its window, and the session took
	 * nothing beyond the credit (a stalled stream holds no bytes in its queue). */
	assert_true(cloud.bytes[1] >= total);
	assert_true(cloud.bytes[2] == window);
	assert_true(written[2] == window);
	assert_int_equal(st_session_write(edge.s, 2, chunk, 1), 0);
	assert_int_equal(st_session_write_space(edge.s, 2), 0);
	/* Once stream 2 is read, its writer is woken (on_writable, in the edge's next pack round)
	 * and it moves again. */
	st_session_consumed(cloud.s, 2, (size_t)window);
	pump(&cloud, &edge, 10, false);
	pump(&edge, &cloud, 10, false);
	assert_true(edge.writable[2] >= 1);
	assert_true(st_session_write(edge.s, 2, chunk, sizeof chunk) > 0);
	pump(&edge, &cloud, 10, false);
	assert_true(cloud.bytes[2] > window);
	free_pair(&cloud, &edge);
}

/* A writer that sizes its writes by st_session_write_space() never writes short, so it asks for
 * on_writable itself (an upload that gets no answer bytes hung without it). */
static void test_notify_writable_without_a_short_write(void **state)
{
	(void)state;
	struct side cloud, edge;
	make_pair(&cloud, &edge, ST_CAP_ALL, 64 * 1024, 16 * 1024);
	cloud.consume = true;
	assert_int_equal(st_session_open(cloud.s, 1, ST_MSG_EXEC_CONNECT, json, 5), 0);
	pump(&cloud, &edge, 10, false);
	static uint8_t chunk[16 * 1024];
	size_t space = st_session_write_space(cloud.s, 1);
	assert_int_equal(space, sizeof chunk);
	assert_int_equal(st_session_write(cloud.s, 1, chunk, space), (ssize_t)space); /* exact */
	assert_int_equal(st_session_write_space(cloud.s, 1), 0);
	pump(&cloud, &edge, 10, false);
	assert_int_equal(cloud.writable[1], 0); /* nobody asked */
	assert_int_equal(st_session_write(cloud.s, 1, chunk, space), (ssize_t)space);
	st_session_notify_writable(cloud.s, 1);
	st_session_notify_writable(cloud.s, 99); /* unknown: ignored */
	pump(&cloud, &edge, 10, false);
	assert_int_equal(cloud.writable[1], 1);
	free_pair(&cloud, &edge);
}

/* Writes are bounded by the peer's credit: a write takes what the credit covers, the rest
 * waits in the writer; WINDOW wakes it (on_writable) with as much room as it granted. A stream
 * closed gracefully sends what it queued, then REMOVE. */
static void test_writes_follow_the_credit(void **state)
{
	(void)state;
	struct side cloud, edge;
	const uint64_t window = 16 * 1024;
	make_pair(&cloud, &edge, ST_CAP_ALL, window, 128 * 1024);
	assert_int_equal(st_session_open(cloud.s, 1, ST_MSG_METRIC_CONNECT, json, 5), 0);
	pump(&cloud, &edge, 10, false);
	static uint8_t chunk[100 * 1024];
	for (size_t i = 0; i < sizeof chunk; i++)
		chunk[i] = (uint8_t)(i * 7u);
	size_t sent = 0;
	for (int round = 0; round < 100; round++) {
		size_t space = st_session_write_space(edge.s, 1);
		ssize_t w = st_session_write(edge.s, 1, chunk + sent, sizeof chunk - sent);
		size_t left = sizeof chunk - sent;
		/* exactly what the credit covered */
		assert_true(w >= 0 && (size_t)w == (space < left ? space : left));
		assert_true(w > 0 && (size_t)w <= window);
		sent += (size_t)w;
		if (sent == sizeof chunk)
			break;
		int wakes = edge.writable[1];
		pump(&edge, &cloud, 100, false);
		assert_int_equal(cloud.bytes[1], sent); /* no more than the credit went */
		st_session_consumed(cloud.s, 1, (size_t)w);
		pump(&cloud, &edge, 10, false); /* the WINDOW... */
		pump(&edge, &cloud, 10, false); /* ...wakes the short writer in the next round */
		assert_int_equal(edge.writable[1], wakes + 1);
	}
	assert_int_equal(sent, sizeof chunk);
	/* The last bytes queued, then closed at once: the bytes first, then REMOVE. */
	assert_int_equal(st_session_close(edge.s, 1, 0, NULL), 0);
	pump(&edge, &cloud, 100, false);
	assert_int_equal(cloud.bytes[1], sizeof chunk);
	assert_int_equal(cloud.closes[1], 1);
	assert_int_equal(cloud.close_code[1], 0);
	free_pair(&cloud, &edge);
}

static void test_round_robin(void **state)
{
	(void)state;
	struct side cloud, edge;
	make_pair(&cloud, &edge, 0, 0, 1024 * 1024);
	for (uint64_t id = 1; id <= 3; id++)
		assert_int_equal(st_session_open(cloud.s, id, ST_MSG_EXEC_CONNECT, json, 5), 0);
	static uint8_t data[200 * 1024];
	for (uint64_t id = 1; id <= 3; id++)
		assert_int_equal(st_session_write(cloud.s, id, data, sizeof data),
		                 (ssize_t)sizeof data);
	/* After the three connects, DATA messages take turns: 1 2 3 1 2 3 ... */
	uint64_t expect = 1;
	for (int i = 0; i < 12; i++) {
		bool binary;
		ssize_t n = st_session_pack(cloud.s, wire, sizeof wire, &binary);
		assert_true(n > 0);
		struct st_msg m;
		assert_int_equal(st_msg_decode(wire, (size_t)n, &m), 0);
		assert_true(m.connect_id == expect);
		if (i >= 3) {
			assert_true(m.type == ST_MSG_DATA);
			assert_true(m.payload_len == ST_DEFAULT_DATA_PAYLOAD_BYTES);
		}
		expect = expect % 3 + 1;
	}
	/* A buffer too small for one full DATA message is refused. */
	bool binary;
	assert_int_equal(st_session_pack(cloud.s, wire, 1000, &binary), -EMSGSIZE);
	free_pair(&cloud, &edge);
}

/* The stream table starts small and grows with the streams: a thousand streams are all found
 * (each gets its own bytes), close in any order, and the table takes more again after. */
static void test_stream_table_grows(void **state)
{
	(void)state;
	struct st_session *s;
	struct side d;
	memset(&d, 0, sizeof d);
	struct st_session_config c = {.role = ST_SESSION_CLOUD, .max_streams = 1000};
	assert_int_equal(st_session_new(&s, &c, &callbacks, &d), 0);
	for (uint64_t id = 1; id <= 1000; id++)
		assert_int_equal(st_session_open(s, id * 7919, ST_MSG_LOGS_CONNECT, json, 5), 0);
	assert_int_equal(st_session_open(s, 1, ST_MSG_LOGS_CONNECT, json, 5), -EAGAIN);
	for (uint64_t id = 1; id <= 1000; id++) {
		assert_true(st_session_stream_exists(s, id * 7919));
		assert_int_equal(st_session_set_stream_user(s, id * 7919, &d), 0);
	}
	assert_false(st_session_stream_exists(s, 7918));
	/* Every other one ends; the rest are still found; new ones fit again. */
	for (uint64_t id = 2; id <= 1000; id += 2)
		assert_int_equal(st_session_close(s, id * 7919, 0, NULL), 0);
	bool binary;
	while (st_session_pack(s, wire, sizeof wire, &binary) > 0)
		;
	for (uint64_t id = 1; id <= 1000; id++)
		assert_int_equal(st_session_stream_exists(s, id * 7919), id % 2 == 1);
	for (uint64_t id = 1; id <= 500; id++)
		assert_int_equal(st_session_open(s, 9000000 + id, ST_MSG_LOGS_CONNECT, json, 5), 0);
	assert_true(st_session_stream_exists(s, 9000500));
	st_session_free(s);
}

static void test_stream_limit(void **state)
{
	(void)state;
	struct side cloud, edge;
	make_pair(&cloud, &edge, ST_CAP_ALL, 65536, 0);
	for (uint64_t id = 1; id <= 4; id++)
		assert_int_equal(st_session_open(cloud.s, id, ST_MSG_EXEC_CONNECT, json, 5), 0);
	assert_int_equal(st_session_open(cloud.s, 5, ST_MSG_EXEC_CONNECT, json, 5), -EAGAIN);
	pump(&cloud, &edge, 10, false);
	/* The edge refuses a fifth stream with "limit"; past twice the limit it is a flood. */
	uint8_t msg[64];
	ssize_t n = st_msg_encode(msg, sizeof msg, 7, ST_MSG_EXEC_CONNECT, json, 5);
	assert_int_equal(st_session_recv(edge.s, msg, (size_t)n), 0);
	assert_int_equal(edge.opens, 4);
	for (uint64_t id = 8; id <= 10; id++) {
		n = st_msg_encode(msg, sizeof msg, id, ST_MSG_EXEC_CONNECT, json, 5);
		assert_int_equal(st_session_recv(edge.s, msg, (size_t)n), 0);
	}
	n = st_msg_encode(msg, sizeof msg, 11, ST_MSG_EXEC_CONNECT, json, 5);
	assert_int_equal(st_session_recv(edge.s, msg, (size_t)n), -EMSGSIZE);
	bool binary;
	n = st_session_pack(edge.s, wire, sizeof wire, &binary);
	struct st_msg m;
	assert_int_equal(st_msg_decode(wire, (size_t)n, &m), 0);
	assert_true(m.type == ST_MSG_ERROR);
	struct st_ext_error e;
	assert_int_equal(st_ext_error_decode(m.payload, m.payload_len, &e), 0);
	assert_true(e.code == ST_EXT_ERR_LIMIT);
	free_pair(&cloud, &edge);
}

static void test_stream_user(void **state)
{
	(void)state;
	struct side cloud, edge;
	make_pair(&cloud, &edge, ST_CAP_ALL, 65536, 0);
	static int tag_a, tag_b;
	assert_int_equal(
	        st_session_open(cloud.s, 1, ST_MSG_METRIC_CONNECT, (const uint8_t *)"{}", 2), 0);
	assert_int_equal(
	        st_session_open(cloud.s, 2, ST_MSG_METRIC_CONNECT, (const uint8_t *)"{}", 2), 0);
	assert_int_equal(st_session_set_stream_user(cloud.s, 1, &tag_a), 0);
	assert_int_equal(st_session_set_stream_user(cloud.s, 2, &tag_b), 0);
	assert_int_equal(st_session_set_stream_user(cloud.s, 3, &tag_a), -ENOENT);
	assert_ptr_equal(st_session_stream_user(cloud.s, 1), &tag_a);
	assert_null(st_session_stream_user(cloud.s, 3));
	pump(&cloud, &edge, 10, false);
	/* The edge ends both: on_close gets each stream's user although it left the table. */
	assert_int_equal(st_session_close(edge.s, 1, 0, NULL), 0);
	assert_int_equal(st_session_close(edge.s, 2, ST_EXT_ERR_UNREACHABLE, "down"), 0);
	pump(&edge, &cloud, 10, false);
	assert_int_equal(cloud.closes[1], 1);
	assert_ptr_equal(cloud.close_user[1], &tag_a);
	assert_ptr_equal(cloud.close_user[2], &tag_b);
	assert_int_equal(cloud.close_code[2], ST_EXT_ERR_UNREACHABLE);
	assert_null(st_session_stream_user(cloud.s, 1));
	free_pair(&cloud, &edge);
}

static const uint8_t tcp_payload[] = {0x9a, 0x50, 'k', 'u', 'b', 'e', 'l', 'e', 't'};

/* Sends one hand-made message of @type for @id into @to's session; its return code. */
static int inject(struct side *to, uint64_t id, uint64_t type, const uint8_t *p, size_t len)
{
	uint8_t msg[64];
	ssize_t n = st_msg_encode(msg, sizeof msg, id, type, p, len);
	assert_true(n > 0);
	return st_session_recv(to->s, msg, (size_t)n);
}

/* OPENED: the edge's DATA waits behind it, the cloud hears of it once, before the bytes. */
static void test_opened_acknowledges_the_dial(void **state)
{
	(void)state;
	struct side cloud, edge;
	make_pair(&cloud, &edge, ST_CAP_ALL, 65536, 0);
	assert_int_equal(
	        st_session_open(cloud.s, 1, ST_MSG_TCP_CONNECT, tcp_payload, sizeof tcp_payload),
	        0);
	assert_int_equal(st_session_open(cloud.s, 2, ST_MSG_EXEC_CONNECT, json, sizeof json - 1),
	                 0);
	/* The cloud may send the client's first bytes at once; the edge holds them. */
	assert_int_equal(st_session_write(cloud.s, 1, (const uint8_t *)"hello", 5), 5);
	assert_int_equal(pump(&cloud, &edge, 10, false), 3);
	assert_int_equal(edge.opens, 2);
	assert_true(edge.bytes[1] == 5);
	/* Only a TCP_CONNECT stream is acknowledged, once. */
	assert_int_equal(st_session_opened(edge.s, 2), -ENOTSUP);
	assert_int_equal(st_session_opened(edge.s, 7), -ENOENT);
	assert_int_equal(st_session_opened(cloud.s, 1), -EINVAL);
	/* Bytes written before the acknowledgement wait for it. */
	assert_int_equal(st_session_write(edge.s, 1, (const uint8_t *)"early", 5), 5);
	assert_int_equal(pump(&edge, &cloud, 10, false), 0);
	assert_int_equal(st_session_opened(edge.s, 1), 0);
	assert_int_equal(st_session_opened(edge.s, 1), -EALREADY);
	/* OPENED first, exactly once, then the DATA. */
	bool binary;
	ssize_t len = st_session_pack(edge.s, wire, sizeof wire, &binary);
	assert_int_equal(len, 2);
	assert_memory_equal(wire, "\x01\x45", 2);
	assert_int_equal(st_session_recv(cloud.s, wire, (size_t)len), 0);
	assert_int_equal(cloud.opened[1], 1);
	assert_true(cloud.bytes_at_opened[1] == 0);
	assert_int_equal(pump(&edge, &cloud, 10, false), 1);
	assert_true(cloud.bytes[1] == 5);
	assert_int_equal(cloud.opened[1], 1);
	assert_int_equal(cloud.opened[2], 0);
	free_pair(&cloud, &edge);
}

/* A failed dial: ERROR instead of OPENED, and the DATA behind it never goes. */
static void test_opened_replaced_by_error(void **state)
{
	(void)state;
	struct side cloud, edge;
	make_pair(&cloud, &edge, ST_CAP_ALL, 65536, 0);
	assert_int_equal(
	        st_session_open(cloud.s, 1, ST_MSG_TCP_CONNECT, tcp_payload, sizeof tcp_payload),
	        0);
	assert_int_equal(pump(&cloud, &edge, 10, false), 1);
	assert_int_equal(st_session_write(edge.s, 1, (const uint8_t *)"x", 1), 1);
	assert_int_equal(st_session_shutdown(edge.s, 1), 0);
	assert_int_equal(st_session_close(edge.s, 1, ST_EXT_ERR_UNREACHABLE, "connection refused"),
	                 0);
	assert_int_equal(st_session_opened(edge.s, 1), -EPIPE);
	assert_int_equal(pump(&edge, &cloud, 10, false), 1);
	assert_int_equal(cloud.opened[1], 0);
	assert_true(cloud.bytes[1] == 0);
	assert_int_equal(cloud.closes[1], 1);
	assert_true(cloud.close_code[1] == ST_EXT_ERR_UNREACHABLE);
	assert_string_equal(cloud.close_reason[1], "connection refused");
	assert_false(st_session_stream_exists(edge.s, 1));
	free_pair(&cloud, &edge);
}

/* The cloud's side of the table: what breaks the "opening" state. */
static void test_opened_protocol_errors(void **state)
{
	(void)state;
	struct side cloud, edge;
	make_pair(&cloud, &edge, ST_CAP_ALL, 65536, 0);
	for (uint64_t id = 1; id <= 3; id++)
		assert_int_equal(st_session_open(cloud.s, id, ST_MSG_TCP_CONNECT, tcp_payload,
		                                 sizeof tcp_payload),
		                 0);
	assert_int_equal(st_session_open(cloud.s, 4, ST_MSG_METRIC_CONNECT, json, sizeof json - 1),
	                 0);
	assert_int_equal(pump(&cloud, &edge, 10, false), 4);
	/* DATA before OPENED resets the stream (ERROR protocol). */
	assert_int_equal(inject(&cloud, 1, ST_MSG_DATA, (const uint8_t *)"x", 1), 0);
	assert_int_equal(cloud.closes[1], 1);
	assert_true(cloud.close_code[1] == ST_EXT_ERR_PROTOCOL);
	assert_string_equal(cloud.close_reason[1], "DATA before OPENED");
	/* HALF_CLOSE before OPENED too. */
	assert_int_equal(inject(&cloud, 2, ST_MSG_HALF_CLOSE, NULL, 0), 0);
	assert_string_equal(cloud.close_reason[2], "HALF_CLOSE before OPENED");
	/* OPENED twice, and OPENED for a stream that is not a TCP_CONNECT. */
	assert_int_equal(inject(&cloud, 3, ST_MSG_OPENED, NULL, 0), 0);
	assert_int_equal(cloud.opened[3], 1);
	assert_int_equal(inject(&cloud, 3, ST_MSG_OPENED, NULL, 0), 0);
	assert_int_equal(cloud.closes[3], 1);
	assert_string_equal(cloud.close_reason[3], "OPENED for a stream that is not opening");
	assert_int_equal(inject(&cloud, 4, ST_MSG_OPENED, NULL, 0), 0);
	assert_int_equal(cloud.closes[4], 1);
	assert_true(cloud.close_code[4] == ST_EXT_ERR_PROTOCOL);
	/* For an unknown stream it is ignored; with a payload, or toward the edge, fatal. */
	assert_int_equal(inject(&cloud, 6, ST_MSG_OPENED, NULL, 0), 0);
	assert_int_equal(inject(&cloud, 6, ST_MSG_OPENED, (const uint8_t *)"x", 1), -EPROTO);
	assert_int_equal(inject(&edge, 1, ST_MSG_OPENED, NULL, 0), -EPROTO);
	free_pair(&cloud, &edge);

	/* Not negotiated: no OPENED is expected, and one that comes is ignored. */
	make_pair(&cloud, &edge, ST_CAP_ALL & ~(uint32_t)ST_CAP_OPENED, 65536, 0);
	assert_int_equal(
	        st_session_open(cloud.s, 1, ST_MSG_TCP_CONNECT, tcp_payload, sizeof tcp_payload),
	        0);
	assert_int_equal(pump(&cloud, &edge, 10, false), 1);
	assert_int_equal(st_session_opened(edge.s, 1), -ENOTSUP);
	assert_int_equal(st_session_write(edge.s, 1, (const uint8_t *)"ok", 2), 2);
	assert_int_equal(pump(&edge, &cloud, 10, false), 1);
	assert_true(cloud.bytes[1] == 2);
	assert_int_equal(inject(&cloud, 1, ST_MSG_OPENED, NULL, 0), 0);
	assert_int_equal(cloud.opened[1], 0);
	assert_int_equal(cloud.closes[1], 0);
	free_pair(&cloud, &edge);
}

static void test_failmalloc(void **state)
{
	(void)state;
	/* Every allocation of a session's life fails in turn; errors are clean and nothing leaks. */
	for (int k = 0;; k++) {
		struct side cloud, edge;
		memset(&cloud, 0, sizeof cloud);
		memset(&edge, 0, sizeof edge);
		struct st_session_config cc = {.role = ST_SESSION_CLOUD};
		struct st_session_config ec = {.role = ST_SESSION_EDGE};
		failmalloc_fail_after(k);
		int rc1 = st_session_new(&cloud.s, &cc, &callbacks, &cloud);
		int rc2 = rc1 == 0 ? st_session_new(&edge.s, &ec, &callbacks, &edge) : -ENOMEM;
		int rc3 = rc2 == 0 ? st_session_open(cloud.s, 1, ST_MSG_EXEC_CONNECT, json, 5)
		                   : -ENOMEM;
		ssize_t rc4 = rc3 == 0 ? st_session_write(cloud.s, 1, json, 5) : -ENOMEM;
		int rc5 = -ENOMEM;
		if (rc4 >= 0) {
			bool binary;
			ssize_t n = st_session_pack(cloud.s, wire, sizeof wire, &binary);
			rc5 = n > 0 ? st_session_recv(edge.s, wire, (size_t)n) : (int)n;
		}
		int failed = failmalloc_failures();
		failmalloc_off();
		st_session_free(cloud.s);
		st_session_free(edge.s);
		if (!failed) {
			assert_int_equal(rc5, 0);
			break;
		}
		assert_true(rc1 == -ENOMEM || rc2 == -ENOMEM || rc3 == -ENOMEM || rc4 == -ENOMEM ||
		            rc5 == -ENOMEM);
	}
}

/* A peer link: NODE_UP .. SYNC_END go first, in order, bounded by ST_PEER_QUEUE_BYTES; without
 * the capability they are refused to send and ignored when received. */
static void test_st_session_send_peer__queue(void **state)
{
	(void)state;
	struct side a, b;
	uint32_t caps = ST_CAP_FLOW | ST_CAP_ERROR | ST_CAP_PEER;
	make_pair(&a, &b, caps, 65536, 0);
	static uint8_t big[ST_MAX_EXT_PAYLOAD_BYTES + 1];
	assert_int_equal(st_session_send_peer(b.s, ST_MSG_DATA, big, 1), -EINVAL);
	assert_int_equal(st_session_send_peer(b.s, ST_MSG_NODE_UP, big, sizeof big), -EMSGSIZE);
	assert_int_equal(st_session_send_peer(b.s, ST_MSG_SYNC, NULL, 0), 0);
	/* the stream's connect is queued first, the peer messages still go before it */
	assert_int_equal(st_session_open(a.s, 1, ST_MSG_EXEC_CONNECT, json, sizeof json - 1), 0);
	int queued = 1;
	while (st_session_peer_space(b.s) >= ST_MAX_EXT_PAYLOAD_BYTES) {
		assert_int_equal(
		        st_session_send_peer(b.s, ST_MSG_NODE_UP, big, ST_MAX_EXT_PAYLOAD_BYTES),
		        0);
		queued++;
	}
	assert_int_equal(queued, 4); /* the SYNC and three full NODE_UPs */
	assert_int_equal(st_session_send_peer(b.s, ST_MSG_NODE_UP, big, ST_MAX_EXT_PAYLOAD_BYTES),
	                 -EAGAIN);
	size_t room = st_session_peer_space(b.s);
	assert_true(room > 0);
	assert_int_equal(st_session_send_peer(b.s, ST_MSG_SYNC_END, NULL, 0), 0);
	assert_true(st_session_want_write(b.s));
	assert_int_equal(pump(&b, &a, 100, false), 5);
	assert_int_equal(a.peer_msgs, 5);
	assert_true(a.peer_type[0] == ST_MSG_SYNC && a.peer_len[0] == 0);
	assert_true(a.peer_type[1] == ST_MSG_NODE_UP && a.peer_len[1] == ST_MAX_EXT_PAYLOAD_BYTES);
	assert_true(a.peer_type[4] == ST_MSG_SYNC_END);
	assert_int_equal(st_session_peer_space(b.s), ST_MAX_EXT_PAYLOAD_BYTES);
	/* exact bytes of a SYNC on the wire: ConnectID 0, type 72, empty */
	assert_int_equal(st_session_send_peer(b.s, ST_MSG_SYNC, NULL, 0), 0);
	bool binary;
	assert_int_equal(st_session_pack(b.s, wire, sizeof wire, &binary), 2);
	assert_memory_equal(wire, "\x00\x48", 2);
	/* a refusing on_peer, or a peer message on a stream id: the link fails */
	a.peer_refuse = -EBADMSG;
	assert_int_equal(st_session_recv(a.s, wire, 2), -EPROTO);
	a.peer_refuse = 0;
	static const uint8_t on_stream[] = {0x01, 0x48};
	assert_int_equal(st_session_recv(a.s, on_stream, 2), -EPROTO);
	free_pair(&a, &b);
	/* without the capability: refused to send, ignored when received */
	make_pair(&a, &b, ST_CAP_FLOW, 65536, 0);
	assert_int_equal(st_session_send_peer(b.s, ST_MSG_SYNC, NULL, 0), -ENOTSUP);
	assert_int_equal(st_session_peer_space(b.s), 0);
	assert_int_equal(st_session_recv(a.s, wire, 2), 0);
	assert_int_equal(a.peer_msgs, 0);
	free_pair(&a, &b);
	/* the capability without on_peer is a caller bug */
	struct st_session *s;
	struct st_session_config c = {.role = ST_SESSION_EDGE, .caps = ST_CAP_PEER};
	struct st_session_callbacks no_peer = callbacks;
	no_peer.on_peer = NULL;
	assert_int_equal(st_session_new(&s, &c, &no_peer, NULL), -EINVAL);
}

/* RECONNECT (PROTOCOL.md §5.6): the cloud's one tunnel-level message, after HELLO and before any
 * stream's; exact bytes; only cloud to edge, on ConnectID 0, one uvarint. */
static void test_st_session_reconnect__exchange(void **state)
{
	(void)state;
	struct side cloud, edge;
	make_pair(&cloud, &edge, ST_CAP_ALL, 65536, 0);
	assert_int_equal(st_session_reconnect(edge.s, 1000), -EINVAL);
	assert_int_equal(st_session_hello(cloud.s, "cs-0"), 0);
	assert_int_equal(st_session_open(cloud.s, 1, ST_MSG_EXEC_CONNECT, json, sizeof json - 1),
	                 0);
	assert_int_equal(st_session_reconnect(cloud.s, 30000), 0);
	assert_int_equal(st_session_reconnect(cloud.s, 30000), -EALREADY);
	assert_int_equal(st_session_close_tunnel(cloud.s, "x"), -EALREADY);
	bool binary;
	ssize_t n = st_session_pack(cloud.s, wire, sizeof wire, &binary); /* HELLO */
	assert_true(n > 0);
	assert_int_equal(st_session_recv(edge.s, wire, (size_t)n), 0);
	/* 30000 = 0xb0 0xea 0x01 as a uvarint; ConnectID 0, type 74 */
	n = st_session_pack(cloud.s, wire, sizeof wire, &binary);
	assert_int_equal(n, 5);
	assert_memory_equal(wire, "\x00\x4a\xb0\xea\x01", 5);
	assert_int_equal(st_session_recv(edge.s, wire, (size_t)n), 0);
	assert_int_equal(edge.reconnects, 1);
	assert_true(edge.reconnect_drain_ms == 30000);
	assert_int_equal(edge.opens, 0); /* the stream's connect comes after it */
	assert_int_equal(pump(&cloud, &edge, 10, false), 1);
	assert_int_equal(edge.opens, 1);
	/* Streams go on as before on the old tunnel. */
	assert_int_equal(st_session_write(edge.s, 1, (const uint8_t *)"out", 3), 3);
	assert_int_equal(pump(&edge, &cloud, 10, false), 1);
	assert_true(cloud.bytes[1] == 3);
	/* Malformed: trailing bytes, empty, on a stream id, sent to the cloud. */
	static const uint8_t trailing[] = {0x00, 0x4a, 0x01, 0x00};
	static const uint8_t empty[] = {0x00, 0x4a};
	static const uint8_t on_stream[] = {0x01, 0x4a, 0x01};
	static const uint8_t ok[] = {0x00, 0x4a, 0x00};
	assert_int_equal(st_session_recv(edge.s, trailing, sizeof trailing), -EPROTO);
	assert_int_equal(st_session_recv(edge.s, empty, sizeof empty), -EPROTO);
	assert_int_equal(st_session_recv(edge.s, on_stream, sizeof on_stream), -EPROTO);
	assert_int_equal(st_session_recv(cloud.s, ok, sizeof ok), -EPROTO);
	assert_int_equal(edge.reconnects, 1);
	free_pair(&cloud, &edge);
	/* Not agreed: never sent, ignored when received. */
	make_pair(&cloud, &edge, ST_CAP_ALL & ~ST_CAP_RECONNECT, 65536, 0);
	assert_int_equal(st_session_reconnect(cloud.s, 1), -ENOTSUP);
	assert_int_equal(st_session_recv(edge.s, ok, sizeof ok), 0);
	assert_int_equal(edge.reconnects, 0);
	free_pair(&cloud, &edge);
}

/* CLOSE_CONNECT from the cloud (the base protocol's drain): exact bytes, once per session. */
static void test_st_session_close_tunnel__base(void **state)
{
	(void)state;
	struct side cloud, edge;
	make_pair(&cloud, &edge, 0, 0, 0);
	assert_int_equal(st_session_close_tunnel(edge.s, "x"), -EINVAL);
	static char big[ST_MAX_EXT_PAYLOAD_BYTES + 2];
	memset(big, 'a', sizeof big - 1);
	assert_int_equal(st_session_close_tunnel(cloud.s, big), -EMSGSIZE);
	assert_int_equal(st_session_close_tunnel(cloud.s, "draining"), 0);
	assert_int_equal(st_session_close_tunnel(cloud.s, "draining"), -EALREADY);
	assert_true(st_session_want_write(cloud.s));
	bool binary;
	ssize_t n = st_session_pack(cloud.s, wire, sizeof wire, &binary);
	assert_int_equal(n, 10);
	assert_false(binary);
	assert_memory_equal(wire,
	                    "\x00\x05"
	                    "draining",
	                    10);
	assert_false(st_session_want_write(cloud.s));
	assert_int_equal(st_session_recv(edge.s, wire, (size_t)n), 0);
	assert_int_equal(edge.tunnel_closes, 1);
	assert_string_equal(edge.tunnel_close_text, "draining");
	free_pair(&cloud, &edge);
}

/* The RECONNECT/CLOSE_CONNECT payload is allocated when queued (an idle session holds none):
 * without memory nothing is queued and the call can be made again. */
static void test_st_session_close_tunnel__nomem(void **state)
{
	(void)state;
	struct side cloud, edge;
	make_pair(&cloud, &edge, ST_CAP_ALL, 65536, 0);
	failmalloc_fail_after(0);
	assert_int_equal(st_session_close_tunnel(cloud.s, "draining"), -ENOMEM);
	failmalloc_fail_after(0);
	assert_int_equal(st_session_reconnect(cloud.s, 30000), -ENOMEM);
	failmalloc_off();
	assert_false(st_session_want_write(cloud.s));
	assert_int_equal(st_session_reconnect(cloud.s, 30000), 0);
	bool binary;
	ssize_t n = st_session_pack(cloud.s, wire, sizeof wire, &binary);
	assert_int_equal(n, 5); /* ConnectID 0, RECONNECT, uvarint 30000 */
	assert_int_equal(st_session_recv(edge.s, wire, (size_t)n), 0);
	assert_int_equal(edge.reconnects, 1);
	assert_false(st_session_want_write(cloud.s));
	free_pair(&cloud, &edge);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_base_protocol_exchange),
	        cmocka_unit_test(test_base_remove_answered_exactly_once),
	        cmocka_unit_test(test_base_crossing_removes),
	        cmocka_unit_test(test_base_unknown_remove_answered_once),
	        cmocka_unit_test(test_ext_remove_not_answered),
	        cmocka_unit_test(test_flow_budgets),
	        cmocka_unit_test(test_flow_budget_edge_refusal),
	        cmocka_unit_test(test_refusals_and_codes),
	        cmocka_unit_test(test_protocol_errors),
	        cmocka_unit_test(test_half_close_both_ways),
	        cmocka_unit_test(test_flow_control_isolation),
	        cmocka_unit_test(test_notify_writable_without_a_short_write),
	        cmocka_unit_test(test_writes_follow_the_credit),
	        cmocka_unit_test(test_round_robin),
	        cmocka_unit_test(test_stream_table_grows),
	        cmocka_unit_test(test_stream_limit),
	        cmocka_unit_test(test_stream_user),
	        cmocka_unit_test(test_opened_acknowledges_the_dial),
	        cmocka_unit_test(test_opened_replaced_by_error),
	        cmocka_unit_test(test_opened_protocol_errors),
	        cmocka_unit_test(test_failmalloc),
	        cmocka_unit_test(test_st_session_close_tunnel__nomem),
	        cmocka_unit_test(test_st_session_window_reserve__quiet_first_window),
	        cmocka_unit_test(test_st_session_window_reserve__no_quiet_window),
	        cmocka_unit_test(test_st_session_send_peer__queue),
	        cmocka_unit_test(test_st_session_reconnect__exchange),
	        cmocka_unit_test(test_st_session_close_tunnel__base),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
