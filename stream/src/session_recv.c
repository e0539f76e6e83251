/*
 * One tunnel session (stream/session.h): the receive path.
 *
 * st_session_recv() decodes one message and hands it to the handler for its type: a connect
 * opens a stream (edge), DATA goes to on_data within the stream's window, REMOVE/ERROR end a
 * stream, WINDOW/HALF_CLOSE/OPENED move its state, tunnel-level messages go to their callbacks.
 * A type that is unknown or not negotiated is ignored, as upstream does. The peer breaking the
 * protocol on one stream resets that stream; only what cannot be tied to a stream (or a message
 * that does not decode) is an error for the whole tunnel. Internals: session_int.h.
 */
#include <stream/buf.h>
#include <stream/err.h>
#include <stream/ext.h>
#include <stream/frame.h>
#include <stream/session.h>
#include <stream/window.h>

#include <stdlib.h>
#include <string.h>

#include "session_int.h"

/* The ERROR code that best describes a refusal given as a negative errno. */
static uint64_t error_code_of(int rc)
{
	switch (rc) {
	case -EACCES:
	case -EPERM:
		return ST_EXT_ERR_REFUSED;
	case -ENOENT:
		return ST_EXT_ERR_NOT_FOUND;
	case -ECONNREFUSED:
	case -EHOSTUNREACH:
	case -ENETUNREACH:
	case -ECONNRESET:
		return ST_EXT_ERR_UNREACHABLE;
	case -ETIMEDOUT:
		return ST_EXT_ERR_TIMEOUT;
	case -EAGAIN:
	case -EMSGSIZE:
	case -ENOSPC:
		return ST_EXT_ERR_LIMIT;
	case -EBADMSG:
	case -EINVAL:
		return ST_EXT_ERR_BAD_REQUEST;
	case -EPROTO:
		return ST_EXT_ERR_PROTOCOL;
	default:
		return ST_EXT_ERR_INTERNAL;
	}
}

/* The peer broke the protocol on one stream: tell the caller, answer ERROR/REMOVE, drop it
 * from our side (incoming messages for it are dropped until it is forgotten). */
static void reset_by_peer(struct st_session *s, struct stream *st, const char *reason)
{
	s->stats.stream_resets++;
	st->state = ST_STREAM_S_CLOSED;
	s->cb->on_close(s, st->id, st->user, ST_EXT_ERR_PROTOCOL, reason, strlen(reason), s->user);
	/* on_close may have asked for a close itself; either way one REMOVE/ERROR goes out. */
	if (st__session_find(s, st->id) == st)
		st__session_mark_close(s, st, ST_EXT_ERR_PROTOCOL, reason, true);
}

/* ---- receiving ----------------------------------------------------------------------------- */

static int recv_connect(struct st_session *s, const struct st_msg *m)
{
	if (s->cfg.role != ST_SESSION_EDGE || m->connect_id == 0)
		return -EPROTO; /* only the cloud opens streams, never with ID 0 */
	if (st__session_find(s, m->connect_id) != NULL)
		return -EPROTO; /* IDs are not reused while known */
	/* Refusals still take a table slot until their REMOVE is packed; past twice the limit the
	 * peer is flooding us. */
	if (s->nstreams >= 2 * s->cfg.max_streams)
		return -EMSGSIZE;
	struct stream *st = st__session_stream_new(s, m->connect_id);
	if (st == NULL)
		return -ENOMEM;
	st->state = ST_STREAM_S_OPEN;
	st->tcp = m->type == ST_MSG_TCP_CONNECT;
	st->opened_due = st->tcp && st__session_has_cap(s, ST_CAP_OPENED);
	int rc;
	if (s->nstreams > s->cfg.max_streams) {
		rc = -EAGAIN;
		if (s->cfg.totals)
			s->cfg.totals->refused_limit++;
	} else if (st__session_window_reserve(s, st, m->type) < 0) {
		rc = -ENOSPC; /* the cloud gets ERROR limit; nothing of it was read yet */
		if (s->cfg.totals)
			s->cfg.totals->refused_budget++;
	} else
		rc = s->cb->on_open(s, m->connect_id, m->type, m->payload, m->payload_len, s->user);
	if (rc < 0 && st__session_find(s, m->connect_id) == st) {
		s->stats.stream_resets++;
		st__session_mark_close(s, st, error_code_of(rc), st_strerror(rc), true);
	}
	return 0;
}

static int recv_data(struct st_session *s, const struct st_msg *m)
{
	struct stream *st = st__session_find(s, m->connect_id);
	if (st == NULL || st->state == ST_STREAM_S_CLOSED) {
		s->stats.ignored_msgs++; /* in flight when the stream ended */
		return 0;
	}
	enum st_stream_state next;
	if (st_stream_next(st->state, ST_STREAM_E_RECV_DATA, &next) < 0) {
		reset_by_peer(s, st, "DATA after the peer's HALF_CLOSE");
		return 0;
	}
	if (st->await_opened) {
		reset_by_peer(s, st, "DATA before OPENED");
		return 0;
	}
	if (st__session_has_cap(s, ST_CAP_FLOW) &&
	    st_window_on_received(&st->win, m->payload_len) < 0) {
		reset_by_peer(s, st, "DATA beyond the flow-control window");
		return 0;
	}
	st->state = next;
	s->stats.data_bytes_in += m->payload_len;
	int rc = s->cb->on_data(s, st->id, m->payload, m->payload_len, s->user);
	if (rc < 0 && st__session_find(s, m->connect_id) == st) {
		s->stats.stream_resets++;
		st__session_mark_close(s, st, error_code_of(rc), st_strerror(rc), true);
	}
	return 0;
}

/* A base-protocol REMOVE for an ID not in the table: absorbed when we sent ours for it lately
 * (the peer's repeat, or its answer to ours), else answered once. */
static void recv_remove_unknown(struct st_session *s, uint64_t id)
{
	if (id == 0) {
		s->stats.ignored_msgs++; /* never a stream */
		return;
	}
	if (st__session_ended_find(s, id) != NULL) {
		COUNT_REMOVE(s, removes_repeated);
		return;
	}
	if (st__session_ended_add(s, id, true))
		COUNT_REMOVE(s, removes_answered);
	else
		s->stats.ignored_msgs++; /* every slot owes an answer: the peer will ask again */
}

/* REMOVE or ERROR from the peer: the stream is over. */
static void recv_end(struct st_session *s, uint64_t id, uint64_t code, const char *reason,
                     size_t reason_len)
{
	struct stream *st = st__session_find(s, id);
	if (st == NULL) {
		if (st__session_is_base(s))
			recv_remove_unknown(s, id);
		else
			s->stats.ignored_msgs++;
		return;
	}
	bool notify = st->state != ST_STREAM_S_CLOSED && !st->close_pending;
	void *stream_user = st->user;
	if (st__session_is_base(s)) {
		if (st->peer_removed) {
			COUNT_REMOVE(s, removes_repeated); /* our answer is queued already */
			return;
		}
		/* Our REMOVE answers it: queued already (crossing) or queued now. Either way it goes
		 * without the bytes before it, which the peer will not read. */
		st->peer_removed = true;
		if (st->close_pending)
			COUNT_REMOVE(s, removes_crossed);
		else
			COUNT_REMOVE(s, removes_answered);
		st->state = ST_STREAM_S_CLOSED;
		st->user = NULL;
		st__session_mark_close(s, st, 0, NULL, true);
	} else {
		st__session_stream_free(s, st);
	}
	if (notify)
		s->cb->on_close(s, id, stream_user, code, reason, reason_len, s->user);
}

static int recv_window(struct st_session *s, const struct st_msg *m)
{
	uint64_t inc;
	if (st_ext_window_decode(m->payload, m->payload_len, &inc) < 0)
		return -EPROTO;
	struct stream *st = st__session_find(s, m->connect_id);
	/* A stream closing gracefully still has queued bytes to send before its REMOVE: they
	 * need the credit. Only a stream with nothing left to send ignores it. */
	if (st == NULL || (st->close_pending && st_buf_len(&st->out) == 0)) {
		s->stats.ignored_msgs++;
		return 0;
	}
	if (st_window_on_grant(&st->win, inc) < 0) {
		reset_by_peer(s, st, "WINDOW beyond the maximum window");
		return 0;
	}
	st__session_update_ready(s, st);
	return 0;
}

static int recv_half_close(struct st_session *s, const struct st_msg *m)
{
	if (m->payload_len != 0)
		return -EPROTO;
	struct stream *st = st__session_find(s, m->connect_id);
	if (st == NULL || st->state == ST_STREAM_S_CLOSED) {
		s->stats.ignored_msgs++;
		return 0;
	}
	enum st_stream_state next;
	if (st_stream_next(st->state, ST_STREAM_E_RECV_HALF_CLOSE, &next) < 0) {
		reset_by_peer(s, st, "HALF_CLOSE twice");
		return 0;
	}
	if (st->await_opened) {
		reset_by_peer(s, st, "HALF_CLOSE before OPENED");
		return 0;
	}
	st->state = next;
	if (next == ST_STREAM_S_CLOSED && !st->close_pending) {
		/* Both directions are done: the stream ends gracefully. */
		uint64_t id = st->id;
		void *stream_user = st->user;
		st__session_stream_free(s, st);
		s->cb->on_close(s, id, stream_user, 0, "", 0, s->user);
		return 0;
	}
	if (s->cb->on_half_close)
		s->cb->on_half_close(s, st->id, s->user);
	return 0;
}

/* OPENED from the edge: the TCP_CONNECT's dial succeeded (PROTOCOL.md §5.4, "opening"). */
static int recv_opened(struct st_session *s, const struct st_msg *m)
{
	if (s->cfg.role != ST_SESSION_CLOUD || m->payload_len != 0 || m->connect_id == 0)
		return -EPROTO; /* only the edge acknowledges, with an empty payload */
	struct stream *st = st__session_find(s, m->connect_id);
	if (st == NULL || st->state == ST_STREAM_S_CLOSED || st->close_pending) {
		s->stats.ignored_msgs++; /* in flight when the stream ended */
		return 0;
	}
	if (!st->await_opened) {
		reset_by_peer(s, st, "OPENED for a stream that is not opening");
		return 0;
	}
	st->await_opened = false;
	if (s->cb->on_opened)
		s->cb->on_opened(s, st->id, s->user);
	return 0;
}

int st_session_recv(struct st_session *s, const uint8_t *msg, size_t len)
{
	struct st_msg m;
	int rc = st_msg_decode(msg, len, &m);
	if (rc < 0)
		return rc;
	s->stats.msgs_in++;
	bool ext = s->cfg.caps != 0;
	switch (m.type) {
	case ST_MSG_LOGS_CONNECT:
	case ST_MSG_EXEC_CONNECT:
	case ST_MSG_METRIC_CONNECT:
	case ST_MSG_ATTACH_CONNECT:
		return recv_connect(s, &m);
	case ST_MSG_TCP_CONNECT:
		if (!st__session_has_cap(s, ST_CAP_TCP))
			break;
		return recv_connect(s, &m);
	case ST_MSG_DATA:
		return recv_data(s, &m);
	case ST_MSG_REMOVE_CONNECT:
		recv_end(s, m.connect_id, 0, "", 0);
		return 0;
	case ST_MSG_CLOSE_CONNECT:
		if (s->cfg.role == ST_SESSION_EDGE && s->cb->on_tunnel_close)
			s->cb->on_tunnel_close(s, (const char *)m.payload, m.payload_len, s->user);
		return 0;
	case ST_MSG_RECONNECT: {
		if (!st__session_has_cap(s, ST_CAP_RECONNECT))
			break;
		/* Only the cloud asks, only on ConnectID 0, with exactly one uvarint. */
		uint64_t drain_ms = 0;
		ssize_t n =
		        m.payload_len ? st_uvarint_decode(m.payload, m.payload_len, &drain_ms) : 0;
		if (s->cfg.role != ST_SESSION_EDGE || m.connect_id != 0 || n <= 0 ||
		    (size_t)n != m.payload_len)
			return -EPROTO;
		if (s->cb->on_reconnect)
			s->cb->on_reconnect(s, drain_ms, s->user);
		return 0;
	}
	case ST_MSG_HELLO: {
		if (!ext)
			break;
		struct st_ext_hello h;
		if (m.connect_id != 0 || st_ext_hello_decode(m.payload, m.payload_len, &h) < 0)
			return -EPROTO;
		return 0;
	}
	case ST_MSG_WINDOW:
		if (!st__session_has_cap(s, ST_CAP_FLOW))
			break;
		return recv_window(s, &m);
	case ST_MSG_HALF_CLOSE:
		if (!st__session_has_cap(s, ST_CAP_HALF_CLOSE))
			break;
		return recv_half_close(s, &m);
	case ST_MSG_OPENED:
		if (!st__session_has_cap(s, ST_CAP_OPENED))
			break;
		return recv_opened(s, &m);
	case ST_MSG_NODE_UP:
	case ST_MSG_NODE_DOWN:
	case ST_MSG_SYNC:
	case ST_MSG_SYNC_END:
		if (!st__session_has_cap(s, ST_CAP_PEER))
			break;
		if (m.connect_id != 0 || m.payload_len > ST_MAX_EXT_PAYLOAD_BYTES ||
		    s->cb->on_peer(s, m.type, m.payload, m.payload_len, s->user) < 0)
			return -EPROTO;
		return 0;
	case ST_MSG_ERROR: {
		if (!st__session_has_cap(s, ST_CAP_ERROR))
			break;
		struct st_ext_error e;
		if (st_ext_error_decode(m.payload, m.payload_len, &e) < 0)
			return -EPROTO;
		/* code 0 would read as a clean REMOVE: an ERROR is never clean */
		recv_end(s, m.connect_id, e.code ? e.code : ST_EXT_ERR_INTERNAL, e.reason,
		         e.reason_len);
		return 0;
	}
	default:
		break;
	}
	s->stats.ignored_msgs++; /* unknown or not negotiated: ignored, as upstream does */
	return 0;
}
