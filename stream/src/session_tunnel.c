/*
 * One tunnel session (stream/session.h): tunnel-level messages.
 *
 * What is not a stream's: our HELLO (the extension negotiation's answer, with the capabilities
 * and window agreed), the cloud's RECONNECT or CLOSE_CONNECT (once per session), the queue of
 * peer messages (ST_CAP_PEER: NODE_UP/NODE_DOWN/SYNC/SYNC_END between replicas), and, in the base
 * protocol, the ring of stream IDs whose REMOVE was sent or is owed. st_session_pack()
 * (session_send.c) sends them before any stream's message. Internals: session_int.h.
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

/* ---- base protocol: remembered endings ------------------------------------------------------ */

struct ended_id *st__session_ended_find(struct st_session *s, uint64_t id)
{
	/* 64 entries, looked at only for a REMOVE of an ID not in the table: a scan is cheaper
	 * than keeping an index. */
	for (size_t i = 0; i < s->ended_used; i++)
		if (s->ended[i].id == id)
			return &s->ended[i];
	return NULL;
}

/* Remembers @id, overwriting the oldest entry; false (nothing written) when that entry still
 * owes its answer, or the ring cannot be allocated: a peer that wants an answer asks again. */
bool st__session_ended_add(struct st_session *s, uint64_t id, bool answer_pending)
{
	if (s->ended == NULL) {
		s->ended = calloc(ST_BASE_ENDED_IDS, sizeof *s->ended);
		if (s->ended == NULL)
			return false;
	}
	struct ended_id *e = &s->ended[s->ended_next];
	if (s->ended_used == ST_BASE_ENDED_IDS && e->answer_pending)
		return false;
	e->id = id;
	e->answer_pending = answer_pending;
	s->ended_next = (s->ended_next + 1) % ST_BASE_ENDED_IDS;
	if (s->ended_used < ST_BASE_ENDED_IDS)
		s->ended_used++;
	if (answer_pending)
		s->answers_pending++;
	return true;
}

/* ---- tunnel-level messages ------------------------------------------------------------------- */

int st_session_hello(struct st_session *s, const char *replica_id)
{
	if (s->cfg.caps == 0)
		return -ENOTSUP; /* never to a base peer */
	size_t n = replica_id ? strlen(replica_id) : 0;
	if (n > ST_MAX_REPLICA_ID_BYTES)
		return -EMSGSIZE;
	memcpy(s->replica, replica_id ? replica_id : "", n);
	s->replica[n] = '\0';
	s->hello_pending = true;
	return 0;
}

int st_session_reconnect(struct st_session *s, uint64_t drain_ms)
{
	if (s->cfg.role != ST_SESSION_CLOUD)
		return -EINVAL;
	if (!st__session_has_cap(s, ST_CAP_RECONNECT))
		return -ENOTSUP;
	if (s->tunnel_ctl_done)
		return -EALREADY;
	uint8_t v[ST_MAX_UVARINT_BYTES];
	size_t n = st_uvarint_encode(v, drain_ms);
	if ((s->tunnel_ctl = malloc(n)) == NULL)
		return -ENOMEM;
	memcpy(s->tunnel_ctl, v, n);
	s->tunnel_ctl_type = ST_MSG_RECONNECT;
	s->tunnel_ctl_len = n;
	s->tunnel_ctl_done = true;
	return 0;
}

int st_session_close_tunnel(struct st_session *s, const char *text)
{
	if (s->cfg.role != ST_SESSION_CLOUD)
		return -EINVAL;
	size_t n = text ? strlen(text) : 0;
	if (n > ST_MAX_EXT_PAYLOAD_BYTES)
		return -EMSGSIZE;
	if (s->tunnel_ctl_done)
		return -EALREADY;
	if (n > 0 && (s->tunnel_ctl = malloc(n)) == NULL)
		return -ENOMEM;
	s->tunnel_ctl_type = ST_MSG_CLOSE_CONNECT;
	if (n > 0)
		memcpy(s->tunnel_ctl, text, n);
	s->tunnel_ctl_len = n;
	s->tunnel_ctl_done = true;
	return 0;
}

size_t st_session_peer_space(const struct st_session *s)
{
	if (!st__session_has_cap(s, ST_CAP_PEER))
		return 0;
	size_t used = s->peerq_len - s->peerq_head;
	size_t room = ST_PEER_QUEUE_BYTES - used;
	if (room <= 3)
		return 0;
	room -= 3;
	return room < ST_MAX_EXT_PAYLOAD_BYTES ? room : ST_MAX_EXT_PAYLOAD_BYTES;
}

int st_session_send_peer(struct st_session *s, uint64_t type, const uint8_t *payload, size_t len)
{
	if (type < ST_MSG_NODE_UP || type > ST_MSG_SYNC_END)
		return -EINVAL;
	if (!st__session_has_cap(s, ST_CAP_PEER))
		return -ENOTSUP;
	if (len > ST_MAX_EXT_PAYLOAD_BYTES)
		return -EMSGSIZE;
	if (s->peerq == NULL) {
		s->peerq = malloc(ST_PEER_QUEUE_BYTES);
		if (s->peerq == NULL)
			return -ENOMEM;
	}
	if (st_session_peer_space(s) < len)
		return -EAGAIN;
	if (s->peerq_head > 0) { /* compact: what is unsent moves to the front */
		memmove(s->peerq, s->peerq + s->peerq_head, s->peerq_len - s->peerq_head);
		s->peerq_len -= s->peerq_head;
		s->peerq_head = 0;
	}
	uint8_t *q = s->peerq + s->peerq_len;
	q[0] = (uint8_t)type;
	q[1] = (uint8_t)(len >> 8);
	q[2] = (uint8_t)len;
	if (len > 0)
		memcpy(q + 3, payload, len);
	s->peerq_len += 3 + len;
	return 0;
}
