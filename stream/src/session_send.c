/*
 * One tunnel session (stream/session.h): the send path.
 *
 * Opening a stream (cloud), acknowledging a dial (edge), half-closing and ending one, and
 * st_session_pack(), which produces at most one message per call: tunnel-level messages first
 * (HELLO, RECONNECT/CLOSE_CONNECT, peer messages, REMOVE answers), then one message from the
 * stream at the head of the ready ring, which then moves on (round robin).
 *
 * Base protocol endings. KubeEdge's cloud, once the apiserver side of an exec/attach ends,
 * sends REMOVE in a tight loop until the edge's REMOVE arrives (cloudstream's
 * containerexec_connection.go Serve, v1.15), and KubeEdge's edge answers every REMOVE with its
 * own. So each stream ends with one REMOVE each way: the peer's REMOVE keeps the stream in the
 * table (closed, without its user object) until our answer is packed; ours, if still queued
 * when the peer's crosses it, goes at once; and a small ring (session_tunnel.c) remembers the
 * IDs we sent REMOVE for, so the peer's repeats cost nothing and a REMOVE for an ID we never
 * answered gets one. Internals: session_int.h.
 */
#include <stream/buf.h>
#include <stream/err.h>
#include <stream/ext.h>
#include <stream/frame.h>
#include <stream/session.h>
#include <stream/window.h>
#include <stream/wsframe.h>

#include <stdlib.h>
#include <string.h>

#include "session_int.h"

/* ---- queueing ------------------------------------------------------------------------------ */

int st_session_open(struct st_session *s, uint64_t id, uint64_t type, const uint8_t *payload,
                    size_t len)
{
	if (s->cfg.role != ST_SESSION_CLOUD || id == 0 || !st_msg_type_is_connect(type))
		return -EINVAL;
	if (type == ST_MSG_TCP_CONNECT && !st__session_has_cap(s, ST_CAP_TCP))
		return -ENOTSUP;
	if (st__session_find(s, id) != NULL)
		return -EEXIST;
	if (s->nstreams >= s->cfg.max_streams)
		return -EAGAIN;
	if (len > st_msg_max_payload(id, type))
		return -EMSGSIZE;
	uint8_t *copy = NULL;
	if (len > 0) {
		copy = malloc(len);
		if (copy == NULL)
			return -ENOMEM;
		memcpy(copy, payload, len);
	}
	struct stream *st = st__session_stream_new(s, id);
	if (st == NULL) {
		free(copy);
		return -ENOMEM;
	}
	if (st__session_window_reserve(s, st, type) < 0) {
		st__session_stream_free(s, st);
		s->stats.streams_total--; /* it never existed for the peer */
		free(copy);
		return -ENOSPC;
	}
	st->state = ST_STREAM_S_OPEN;
	st->connect = copy;
	st->connect_len = len;
	st->connect_type = type;
	st->connect_pending = true;
	st->tcp = type == ST_MSG_TCP_CONNECT;
	st->await_opened = st->tcp && st__session_has_cap(s, ST_CAP_OPENED);
	st__session_update_ready(s, st);
	return 0;
}

int st_session_opened(struct st_session *s, uint64_t id)
{
	if (s->cfg.role != ST_SESSION_EDGE)
		return -EINVAL;
	struct stream *st = st__session_find(s, id);
	if (st == NULL)
		return -ENOENT;
	if (!st->tcp || !st__session_has_cap(s, ST_CAP_OPENED))
		return -ENOTSUP;
	if (!st->opened_due)
		return -EALREADY;
	if (st->close_pending || st->state == ST_STREAM_S_CLOSED)
		return -EPIPE;
	st->opened_due = false;
	st->opened_pending = true;
	st__session_update_ready(s, st);
	return 0;
}

int st_session_shutdown(struct st_session *s, uint64_t id)
{
	struct stream *st = st__session_find(s, id);
	if (st == NULL)
		return -ENOENT;
	if (st->local_shut)
		return -EPIPE;
	st->local_shut = true;
	if (st__session_has_cap(s, ST_CAP_HALF_CLOSE))
		st->half_close_pending = true;
	st__session_update_ready(s, st);
	return 0;
}

int st_session_close(struct st_session *s, uint64_t id, uint64_t code, const char *reason)
{
	struct stream *st = st__session_find(s, id);
	if (st == NULL)
		return -ENOENT;
	if (st->close_pending)
		return 0;
	st__session_mark_close(s, st, code, reason, false);
	return 0;
}

bool st_session_want_write(const struct st_session *s)
{
	return s->hello_pending || s->tunnel_ctl_type != 0 || s->answers_pending > 0 ||
	       s->ready != NULL || s->peerq_head < s->peerq_len;
}

/* ---- packing ------------------------------------------------------------------------------- */

static ssize_t pack_control(uint8_t *out, size_t cap, uint64_t id, uint64_t type,
                            const uint8_t *payload, size_t len)
{
	return st_msg_encode(out, cap, id, type, payload, len);
}

/* One message from @st into @out; *gone when the stream was forgotten. With @key, a DATA
 * message's payload is masked as it is copied and *@masked set (its header is left to the
 * caller, with every other message). */
static ssize_t pack_stream(struct st_session *s, struct stream *st, uint8_t *out, size_t cap,
                           bool *gone, const uint8_t *key, bool *masked)
{
	uint8_t payload[ST_MAX_EXT_PAYLOAD_BYTES];
	*gone = false;
	if (st->window_grant > 0) {
		uint64_t inc = st->window_grant;
		if (inc > ST_MAX_STREAM_WINDOW_BYTES)
			inc = ST_MAX_STREAM_WINDOW_BYTES;
		ssize_t pl = st_ext_window_encode(payload, sizeof payload, inc);
		if (pl < 0)
			return pl;
		ssize_t n = pack_control(out, cap, st->id, ST_MSG_WINDOW, payload, (size_t)pl);
		if (n > 0)
			st->window_grant -= inc;
		return n;
	}
	if (st->opened_pending) {
		ssize_t n = pack_control(out, cap, st->id, ST_MSG_OPENED, NULL, 0);
		if (n > 0)
			st->opened_pending = false;
		return n;
	}
	if (st->connect_pending) {
		ssize_t n = pack_control(out, cap, st->id, st->connect_type, st->connect,
		                         st->connect_len);
		if (n > 0) {
			st->connect_pending = false;
			free(st->connect);
			st->connect = NULL;
		}
		return n;
	}
	if (st__session_may_send_data(s, st)) {
		size_t want = st_buf_len(&st->out);
		if (want > s->cfg.max_data_payload)
			want = s->cfg.max_data_payload;
		if (st__session_has_cap(s, ST_CAP_FLOW))
			want = st_window_sendable(&st->win, want);
		ssize_t h = st_msg_header_encode(out, cap, st->id, ST_MSG_DATA);
		if (h < 0 || want > cap - (size_t)h)
			return -EMSGSIZE;
		size_t copied = 0;
		uint64_t queued_before = st_buf_len(&st->out);
		while (copied < want) {
			const uint8_t *p;
			size_t n = st_buf_peek(&st->out, &p);
			if (n > want - copied)
				n = want - copied;
			if (key)
				st_ws_mask_copy(out + h + copied, p, n, key, (size_t)h + copied);
			else
				memcpy(out + h + copied, p, n);
			st_buf_consume(&st->out, n);
			copied += n;
		}
		st__session_out_packed(s, st, queued_before);
		if (st__session_has_cap(s, ST_CAP_FLOW))
			st_window_on_sent(&st->win, copied);
		s->stats.data_bytes_out += copied;
		if (key) {
			st_ws_mask(out, (size_t)h, key);
			*masked = true;
		}
		return h + (ssize_t)copied;
	}
	if (st_buf_len(&st->out) > 0 && !st->opened_due)
		return 0; /* waiting for credit */
	if (st->close_pending) {
		ssize_t n;
		if (st->close_code != 0 && st__session_has_cap(s, ST_CAP_ERROR)) {
			struct st_ext_error e = {
			        .code = st->close_code,
			        .reason = st->close_reason ? st->close_reason : "",
			        .reason_len = st->close_reason ? strlen(st->close_reason) : 0};
			ssize_t pl = st_ext_error_encode(payload, sizeof payload, &e);
			if (pl < 0)
				return pl;
			n = pack_control(out, cap, st->id, ST_MSG_ERROR, payload, (size_t)pl);
		} else {
			n = pack_control(out, cap, st->id, ST_MSG_REMOVE_CONNECT, NULL, 0);
		}
		if (n > 0) {
			if (st__session_is_base(s))
				st__session_ended_add(
				        s, st->id,
				        false); /* so the peer's REMOVE is known as answered */
			st__session_stream_free(s, st);
			*gone = true;
		}
		return n;
	}
	if (st->half_close_pending && !st->opened_due) {
		ssize_t n = pack_control(out, cap, st->id, ST_MSG_HALF_CLOSE, NULL, 0);
		if (n <= 0)
			return n;
		st->half_close_pending = false;
		enum st_stream_state next;
		if (st_stream_next(st->state, ST_STREAM_E_SEND_HALF_CLOSE, &next) == 0)
			st->state = next;
		if (st->state == ST_STREAM_S_CLOSED) {
			/* The peer had finished already: the stream ends gracefully. */
			uint64_t id = st->id;
			void *stream_user = st->user;
			st__session_stream_free(s, st);
			*gone = true;
			s->cb->on_close(s, id, stream_user, 0, "", 0, s->user);
		}
		return n;
	}
	return 0;
}

static ssize_t pack(struct st_session *s, uint8_t *out, size_t cap, bool *binary,
                    const uint8_t *key, bool *masked);

ssize_t st_session_pack(struct st_session *s, uint8_t *out, size_t cap, bool *binary)
{
	bool masked = false;
	return pack(s, out, cap, binary, NULL, &masked);
}

ssize_t st_session_pack_masked(struct st_session *s, uint8_t *out, size_t cap, bool *binary,
                               const uint8_t key[4])
{
	bool masked = false;
	ssize_t n = pack(s, out, cap, binary, key, &masked);
	if (n > 0 && !masked)
		st_ws_mask(out, (size_t)n, key);
	return n;
}

static ssize_t pack(struct st_session *s, uint8_t *out, size_t cap, bool *binary,
                    const uint8_t *key, bool *masked)
{
	*binary = st__session_has_cap(s, ST_CAP_BINARY);
	if (cap < ST_MAX_MESSAGE_HEADER_BYTES + s->cfg.max_data_payload)
		return -EMSGSIZE;
	if (s->hello_pending) {
		uint8_t payload[ST_MAX_EXT_PAYLOAD_BYTES];
		struct st_ext_hello h = {.version = ST_EXT_VERSION,
		                         .caps = s->cfg.caps,
		                         .window_bytes = st__session_announced_window(s),
		                         .replica_id = s->replica,
		                         .replica_id_len = strlen(s->replica)};
		ssize_t pl = st_ext_hello_encode(payload, sizeof payload, &h);
		if (pl < 0)
			return pl;
		s->hello_pending = false;
		s->stats.msgs_out++;
		return pack_control(out, cap, 0, ST_MSG_HELLO, payload, (size_t)pl);
	}
	if (s->tunnel_ctl_type != 0) {
		ssize_t n =
		        pack_control(out, cap, 0, s->tunnel_ctl_type,
		                     s->tunnel_ctl_len ? s->tunnel_ctl : NULL, s->tunnel_ctl_len);
		if (n > 0) {
			s->tunnel_ctl_type = 0;
			free(s->tunnel_ctl);
			s->tunnel_ctl = NULL;
			s->tunnel_ctl_len = 0;
			s->stats.msgs_out++;
		}
		return n;
	}
	if (s->peerq_head < s->peerq_len) {
		const uint8_t *q = s->peerq + s->peerq_head;
		size_t len = (size_t)q[1] << 8 | q[2];
		ssize_t n = pack_control(out, cap, 0, q[0], len ? q + 3 : NULL, len);
		if (n > 0) {
			s->peerq_head += 3 + len;
			if (s->peerq_head == s->peerq_len)
				s->peerq_head = s->peerq_len = 0;
			s->stats.msgs_out++;
		}
		return n;
	}
	if (s->answers_pending > 0) {
		for (size_t i = 0; i < s->ended_used; i++) {
			struct ended_id *e = &s->ended[i];
			if (!e->answer_pending)
				continue;
			ssize_t n = pack_control(out, cap, e->id, ST_MSG_REMOVE_CONNECT, NULL, 0);
			if (n > 0) {
				e->answer_pending = false;
				s->answers_pending--;
				s->stats.msgs_out++;
			}
			return n;
		}
	}
	/* Every stream on the ring has something it may send, so this ends within one round; the
	 * bound only guards that invariant. */
	for (size_t turns = 0; s->ready != NULL && turns <= s->nstreams; turns++) {
		struct stream *st = s->ready;
		s->ready = st->ready_next; /* the next stream goes first next time */
		bool gone;
		ssize_t n = pack_stream(s, st, out, cap, &gone, key, masked);
		if (n < 0)
			return n;
		if (!gone) {
			st__session_update_ready(s, st);
			if (st__session_writer_to_wake(s, st)) {
				st->blocked = false;
				st__session_update_ready(s, st);
				if (s->cb->on_writable)
					s->cb->on_writable(s, st->id, s->user);
			}
		}
		if (n > 0) {
			s->stats.msgs_out++;
			return n;
		}
	}
	return 0;
}
