/*
 * cloudstream/src/peer_forward.c — streams over peer links (peer_int.h; PROTOCOL.md §7), both
 * ways. Ours: a request for a node another replica holds opens its stream on the link that
 * replica dialled to us (a tunnel, tunnel.h), its payload prefixed with the node's name. Theirs:
 * a stream the other replica opens on a link we dialled is relayed to the named node's tunnel
 * as one more stream endpoint (struct pstream), with the same per-stream credit on both hops:
 * bytes one hop cannot take yet wait in a bounded buffer and are acknowledged on the other hop
 * only as they leave. Loop thread only.
 */
#include "peer_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stream/connect.h>
#include <stream/ext.h>
#include <stream/frame.h>
#include <stream/limits.h>

/* Bytes one hop did not take yet: [off, off + len) of p. Bounded by the sender's credit
 * (the caller checks); grown by doubling, compacted only when the tail is full. */
struct pbuf {
	uint8_t *p;
	size_t off, len, cap;
};

static int pbuf_append(struct pbuf *b, const uint8_t *p, size_t n)
{
	if (b->off + b->len + n > b->cap) {
		if (b->off > 0) {
			memmove(b->p, b->p + b->off, b->len);
			b->off = 0;
		}
		if (b->len + n > b->cap) {
			size_t cap = b->cap ? b->cap : 65536;
			while (cap < b->len + n)
				cap *= 2;
			uint8_t *nb = realloc(b->p, cap);
			if (nb == NULL)
				return -ENOMEM;
			b->p = nb;
			b->cap = cap;
		}
	}
	memcpy(b->p + b->off + b->len, p, n);
	b->len += n;
	return 0;
}

static void pbuf_consume(struct pbuf *b, size_t n)
{
	b->off += n;
	b->len -= n;
	if (b->len == 0)
		b->off = 0;
}

/* A stream relayed from an accepted link to a node's tunnel. */
struct pstream {
	struct cs_endpoint ep; /* toward the node's tunnel */
	struct in_link *l;     /* NULL once the link is gone */
	uint64_t id;           /* the stream's id on the link; 0 once that side ended */
	struct pbuf down;      /* edge → link bytes the link's session did not take yet */
	struct pbuf up;        /* link → edge bytes the tunnel did not take yet */
	bool up_half_close;    /* the link half-closed: shut the edge side once @up is out */
	bool down_end;         /* the edge ended: close the link side once @down is out */
	uint64_t down_code;
	char down_reason[128];
	uint64_t started_ms;
	struct pstream *next, *prev; /* in l->streams */
};

/* ---- streams we forward: opened on the link the node's holder dialled to us ---------------- */

struct cs_tunnel *cs_peer_lookup(struct cs_server *srv, const char *node, size_t len,
                                 uint32_t *caps, const char **replica)
{
	struct cs_peers *p = peers_of(srv);
	struct cs_peerdir_hit h;
	if (p == NULL || p->dir == NULL || cs_peerdir_get(p->dir, node, len, &h) < 0)
		return NULL;
	struct accepted_link *a = p->slot_owner[h.slot];
	/* A link whose streams are ending (it is closing) takes no new one. */
	if (a == NULL || !cs_tunnel_is_up(a->t))
		return NULL;
	*caps = h.caps;
	if (replica)
		*replica = h.replica;
	return a->t;
}

struct cs_tunnel *cs_peer_lookup_ip(struct cs_server *srv, const char *ip, size_t len,
                                    const char **node, uint32_t *caps)
{
	struct cs_peers *p = peers_of(srv);
	struct cs_peerdir_hit h;
	if (p == NULL || p->dir == NULL || cs_peerdir_get_by_ip(p->dir, ip, len, &h) < 0)
		return NULL;
	*node = h.node;
	return cs_peer_lookup(srv, h.node, strlen(h.node), caps, NULL);
}

struct wrap_args {
	const char *node;
	cs_connect_payload_cb inner;
	void *user;
};

/* The payload on a peer link: the node's name, then what the edge would get. */
static ssize_t wrapped_payload(uint64_t id, char *out, size_t cap, void *user)
{
	const struct wrap_args *a = user;
	size_t nl = strlen(a->node);
	size_t hl = st_uvarint_len(nl);
	if (cap < hl + nl)
		return -EMSGSIZE;
	st_uvarint_encode((uint8_t *)out, nl);
	memcpy(out + hl, a->node, nl);
	ssize_t n = a->inner(id, out + hl + nl, cap - hl - nl, a->user);
	return n < 0 ? n : n + (ssize_t)(hl + nl);
}

int cs_peer_stream_open(struct cs_tunnel *link, const char *node, struct cs_endpoint *ep,
                        uint64_t type, cs_connect_payload_cb payload, void *user, char *msg,
                        size_t msg_cap)
{
	struct wrap_args a = {.node = node, .inner = payload, .user = user};
	int rc = cs_stream_open(link, ep, type, wrapped_payload, &a, msg, msg_cap);
	if (rc == 0) {
		struct accepted_link *l = cs_tunnel_link_user(link); /* from cs_peer_lookup */
		l->p->forwarded_out++;
	}
	return rc;
}

/* ---- streams the other replica opens on a link we dialled: relayed to our nodes ----------- */

static void ps_maybe_free(struct pstream *ps)
{
	if (ps->id != 0 || ps->ep.tun != NULL)
		return;
	cs_endpoint_cleanup(&ps->ep);
	if (ps->l) {
		if (ps->prev)
			ps->prev->next = ps->next;
		else
			ps->l->streams = ps->next;
		if (ps->next)
			ps->next->prev = ps->prev;
	}
	free(ps->down.p);
	free(ps->up.p);
	free(ps);
}

/* The link side ends (@code 0: REMOVE). */
static void ps_close_link(struct pstream *ps, uint64_t code, const char *reason)
{
	if (ps->id == 0 || ps->l == NULL)
		return;
	st_session_set_stream_user(ps->l->sess, ps->id, NULL);
	st_session_close(ps->l->sess, ps->id, code, reason);
	ps->id = 0;
	cs__peer_in_kick(ps->l);
}

/* edge → link: what waits goes into the link's session as far as it takes it. */
static void ps_flush_down(struct pstream *ps)
{
	if (ps->id == 0 || ps->l == NULL)
		return;
	if (ps->down.len > 0) {
		ssize_t w = st_session_write(ps->l->sess, ps->id, ps->down.p + ps->down.off,
		                             ps->down.len);
		if (w < 0) {
			cs_endpoint_dropped(&ps->ep, ps->down.len);
			pbuf_consume(&ps->down, ps->down.len);
			return;
		}
		pbuf_consume(&ps->down, (size_t)w);
		cs_endpoint_delivered(&ps->ep, (size_t)w);
		cs__peer_in_kick(ps->l);
	}
	if (ps->down.len == 0 && ps->down_end)
		ps_close_link(ps, ps->down_code, ps->down_reason);
}

/* link → edge: what waits goes into the node's tunnel as far as it takes it. */
static void ps_flush_up(struct pstream *ps)
{
	if (ps->up.len > 0 && ps->ep.tun) {
		size_t space = cs_stream_space(&ps->ep);
		size_t take = ps->up.len < space ? ps->up.len : space;
		ssize_t w = take ? cs_stream_write(&ps->ep, ps->up.p + ps->up.off, take) : 0;
		if (w > 0) {
			pbuf_consume(&ps->up, (size_t)w);
			if (ps->id && ps->l)
				st_session_consumed(ps->l->sess, ps->id, (size_t)w);
			if (ps->l)
				cs__peer_in_kick(ps->l);
		}
		if (ps->up.len > 0)
			cs_stream_wait_writable(&ps->ep);
	}
	if (ps->up.len == 0 && ps->up_half_close && ps->ep.tun) {
		ps->up_half_close = false;
		cs_stream_shutdown(&ps->ep);
	}
}

static int ep_data(struct cs_endpoint *ep, const uint8_t *p, size_t len)
{
	struct pstream *ps = (struct pstream *)ep;
	cs_endpoint_queued(ep, len);
	if (ps->id == 0) {
		cs_endpoint_dropped(ep, len);
		return 0;
	}
	if (ps->down.len == 0) {
		/* The common case: the link's session takes the bytes at once, no copy here. */
		ssize_t w = st_session_write(ps->l->sess, ps->id, p, len);
		if (w < 0) {
			cs_endpoint_dropped(ep, len);
			return 0; /* the link side is ending: its close follows */
		}
		cs_endpoint_delivered(ep, (size_t)w);
		cs__peer_in_kick(ps->l);
		p += w;
		len -= (size_t)w;
		if (len == 0)
			return 0;
	}
	if (ps->down.len + len > ST_MAX_STREAM_WINDOW_BYTES + ST_DEFAULT_STREAM_OUT_BYTES)
		return -EMSGSIZE; /* more than the edge's credit allows */
	return pbuf_append(&ps->down, p, len);
}

static void ep_end(struct cs_endpoint *ep, uint64_t code, const char *reason, size_t len)
{
	struct pstream *ps = (struct pstream *)ep;
	ps->down_end = true;
	ps->down_code = code;
	snprintf(ps->down_reason, sizeof ps->down_reason, "%.*s", (int)len, reason);
	pbuf_consume(&ps->up, ps->up.len);
	ps_flush_down(ps);
	if (ps->id != 0 && ps->l && ps->down.len > 0)
		return; /* closed once the rest is out (on_writable) */
	ps_maybe_free(ps);
}

static void ep_writable(struct cs_endpoint *ep)
{
	ps_flush_up((struct pstream *)ep);
}

static void ep_gone(struct cs_endpoint *ep, const char *why)
{
	struct pstream *ps = (struct pstream *)ep;
	cs_endpoint_dropped(ep, ps->down.len);
	pbuf_consume(&ps->down, ps->down.len);
	pbuf_consume(&ps->up, ps->up.len);
	ps_close_link(ps, ST_EXT_ERR_UNREACHABLE, why);
	ps_maybe_free(ps);
}

static void ep_cut(struct cs_endpoint *ep)
{
	ep_gone(ep, "the stream stalled the node's tunnel");
}

static void ep_info(const struct cs_endpoint *ep, struct cs_endpoint_info *out)
{
	const struct pstream *ps = (const struct pstream *)ep;
	out->kind = "peer";
	out->method = "";
	out->path = "";
	out->caller = ps->l ? ps->l->replica : "-";
	out->started_ms = ps->started_ms;
	out->to_edge = 0;
	out->to_client = 0;
}

static void ep_opened(struct cs_endpoint *ep)
{
	struct pstream *ps = (struct pstream *)ep;
	if (ps->id && ps->l) {
		st_session_opened(ps->l->sess, ps->id);
		cs__peer_in_kick(ps->l);
	}
}

static const struct cs_endpoint_ops pstream_ops = {
        .data = ep_data,
        .end = ep_end,
        .writable = ep_writable,
        .gone = ep_gone,
        .cut = ep_cut,
        .info = ep_info,
        .opened = ep_opened,
};

struct inner_args {
	uint64_t type;
	const uint8_t *p;
	size_t len;
};

/* The edge's payload with its MessID set to the tunnel's stream id. */
static ssize_t inner_payload(uint64_t id, char *out, size_t cap, void *user)
{
	const struct inner_args *a = user;
	if (a->type == ST_MSG_TCP_CONNECT) {
		if (a->len > cap)
			return -EMSGSIZE;
		memcpy(out, a->p, a->len);
		return (ssize_t)a->len;
	}
	struct st_connect_req req;
	int rc = st_connect_req_decode(a->p, a->len, &req);
	if (rc < 0)
		return rc;
	req.connect_id = id;
	ssize_t n = st_connect_req_encode(out, cap, &req);
	st_connect_req_cleanup(&req);
	return n;
}

static int in_on_open(struct st_session *s, uint64_t id, uint64_t type, const uint8_t *payload,
                      size_t len, void *user)
{
	(void)s;
	struct in_link *l = user;
	struct cs_server *srv = l->srv;
	uint64_t nl;
	ssize_t h = st_uvarint_decode(payload, len, &nl);
	if (h <= 0 || nl == 0 || nl > CS_NODE_NAME_MAX_BYTES || nl > len - (size_t)h)
		return -EBADMSG;
	const char *node = (const char *)payload + h;
	struct cs_tunnel *t = cs_registry_get(srv->reg, node, (size_t)nl);
	/* Draining: a tunnel still here (its edge is moving, or moved a moment ago) serves a
	 * request forwarded by a peer whose directory was behind (tunnel.c). */
	if (t == NULL)
		t = cs_tunnel_find_moved(srv, node, (size_t)nl);
	if (t == NULL)
		return -EHOSTUNREACH; /* ERROR unreachable: the directory was behind */
	struct pstream *ps = calloc(1, sizeof *ps);
	if (ps == NULL)
		return -ENOMEM;
	cs_endpoint_init(&ps->ep, &pstream_ops, srv);
	struct inner_args a = {
	        .type = type, .p = payload + (size_t)h + nl, .len = len - (size_t)h - (size_t)nl};
	char msg[256];
	int rc = cs_stream_open(t, &ps->ep, type, inner_payload, &a, msg, sizeof msg);
	if (rc < 0) {
		free(ps);
		return rc == -EAGAIN || rc == -ENOSPC ? -EAGAIN : rc;
	}
	ps->l = l;
	ps->id = id;
	ps->started_ms = st_now_ms();
	ps->next = l->streams;
	if (l->streams)
		l->streams->prev = ps;
	l->streams = ps;
	st_session_set_stream_user(l->sess, id, ps);
	peers_of(srv)->forwarded_in++;
	return 0;
}

static int in_on_data(struct st_session *s, uint64_t id, const uint8_t *data, size_t len,
                      void *user)
{
	(void)user;
	struct pstream *ps = st_session_stream_user(s, id);
	if (ps == NULL) {
		st_session_consumed(s, id, len);
		return 0;
	}
	if (ps->ep.tun == NULL) {
		st_session_consumed(s, id, len); /* the edge ended: nobody reads them */
		return 0;
	}
	if (ps->up.len == 0) {
		/* The common case: the node's tunnel takes the bytes at once, no copy here. */
		size_t space = cs_stream_space(&ps->ep);
		size_t take = len < space ? len : space;
		ssize_t w = take ? cs_stream_write(&ps->ep, data, take) : 0;
		if (w > 0) {
			st_session_consumed(s, id, (size_t)w);
			cs__peer_in_kick(ps->l);
			data += w;
			len -= (size_t)w;
		}
		if (len == 0)
			return 0;
		cs_stream_wait_writable(&ps->ep);
	}
	/* Bounded by the window we granted on the link. */
	return pbuf_append(&ps->up, data, len);
}

static void in_on_half_close(struct st_session *s, uint64_t id, void *user)
{
	(void)user;
	struct pstream *ps = st_session_stream_user(s, id);
	if (ps == NULL)
		return;
	ps->up_half_close = true;
	ps_flush_up(ps);
}

static void in_on_close(struct st_session *s, uint64_t id, void *stream_user, uint64_t code,
                        const char *reason, size_t len, void *user)
{
	(void)s;
	(void)id;
	(void)user;
	struct pstream *ps = stream_user;
	if (ps == NULL)
		return;
	ps->id = 0; /* the session forgot it */
	char why[128];
	snprintf(why, sizeof why, "%.*s", (int)len, reason);
	ps_flush_up(ps);
	cs_endpoint_dropped(&ps->ep, ps->down.len);
	pbuf_consume(&ps->down, ps->down.len);
	cs_stream_close(&ps->ep, code, why);
	ps_maybe_free(ps);
}

static void in_on_writable(struct st_session *s, uint64_t id, void *user)
{
	(void)user;
	struct pstream *ps = st_session_stream_user(s, id);
	if (ps != NULL) {
		ps_flush_down(ps);
		ps_maybe_free(ps);
	}
}

static int in_on_peer(struct st_session *s, uint64_t type, const uint8_t *payload, size_t len,
                      void *user)
{
	(void)s;
	(void)type;
	(void)payload;
	(void)len;
	(void)user;
	return 0; /* the dialler's directory goes on the link it accepted from us */
}

const struct st_session_callbacks cs__peer_relay_cbs = {
        .on_open = in_on_open,
        .on_data = in_on_data,
        .on_half_close = in_on_half_close,
        .on_close = in_on_close,
        .on_writable = in_on_writable,
        .on_peer = in_on_peer,
};

void cs__peer_relay_link_lost(struct in_link *l)
{
	while (l->streams) {
		struct pstream *ps = l->streams;
		l->streams = ps->next;
		ps->l = NULL;
		ps->id = 0;
		ps->prev = ps->next = NULL;
		cs_endpoint_dropped(&ps->ep, ps->down.len);
		pbuf_consume(&ps->down, ps->down.len);
		cs_stream_close(&ps->ep, ST_EXT_ERR_UNREACHABLE, "the peer link was lost");
		ps_maybe_free(ps);
	}
}
