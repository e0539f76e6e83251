/*
 * cloudstream/src/tunnel_link.c — peer links as a kind of tunnel (tunnel.h): a link another
 * replica dialled to us carries streams exactly as an edge's tunnel does (this replica is the
 * cloud role on it), so it is a struct cs_tunnel, and everything that knows that struct stays
 * in the tunnel module. The peer code (peer_accept.c) creates and frees it here, and hears of
 * it through its link ops; the session I/O is tunnel_io.c's and the streams tunnel_stream.c's,
 * as for any tunnel. Unlike an edge's tunnel it is never registered for a node, never in the
 * tunnel set, never drained, and it has no node budget (the streams it carries are charged on
 * the nodes' own tunnels). Loop thread only.
 */
#include "tunnel_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stream/limits.h>
#include <stream/log.h>
#include <stream/tunnelread.h>

/* 64 KiB less the masked 4-byte-length websocket header (8) and a DATA header with a 3-byte
 * ConnectID (4): frames of 65,528..65,536 bytes, two or three per batch (tunnelwrite.h). */
#define LINK_DATA_PAYLOAD_BYTES (65536u - 8u - 4u)

size_t cs_tunnel_link_data_payload(const struct cs_server *srv)
{
	size_t n = srv->cfg.data_payload_bytes ? srv->cfg.data_payload_bytes
	                                       : ST_DEFAULT_DATA_PAYLOAD_BYTES;
	return n < LINK_DATA_PAYLOAD_BYTES ? n : LINK_DATA_PAYLOAD_BYTES;
}

uint64_t cs_tunnel_link_window_max(const struct cs_server *srv)
{
	uint64_t first = cs_tunnel_first_window(srv), max = srv->cfg.peer_stream_window_bytes;
	return max > first ? max : first;
}

uint64_t cs_tunnel_window_cap(const struct cs_server *srv)
{
	uint64_t link = cs_tunnel_link_window_max(srv);
	return link > srv->cfg.stream_window_bytes ? link : srv->cfg.stream_window_bytes;
}

int cs_tunnel_link_new(struct cs_tunnel **out, struct cs_server *srv, struct lws *wsi,
                       const char *replica, uint32_t caps, uint32_t send_window_bytes,
                       const struct cs_tunnel_link_ops *ops, void *user)
{
	size_t node_len = strnlen(replica, CS_NODE_NAME_MAX_BYTES);
	struct cs_tunnel *t = calloc(1, sizeof *t + node_len + 1);
	if (t == NULL)
		return -ENOMEM;
	struct st_session_config sc = {
	        .role = ST_SESSION_CLOUD,
	        .caps = caps,
	        .send_window_bytes =
	                send_window_bytes ? send_window_bytes : ST_DEFAULT_STREAM_WINDOW_BYTES,
	        .recv_window_bytes = cs_tunnel_first_window(srv),
	        .recv_window_max_bytes = cs_tunnel_link_window_max(srv),
	        .process_budget = &srv->tun.budget,
	        .max_streams = srv->cfg.max_streams,
	        .stream_out_bytes = srv->cfg.stream_queue_bytes,
	        .max_data_payload = cs_tunnel_link_data_payload(srv),
	        .totals = &srv->m.sessions,
	};
	int rc = st_session_new(&t->sess, &sc, &cs__tunnel_session_cbs, t);
	if (rc < 0) {
		free(t);
		return rc;
	}
	t->srv = srv;
	t->wsi = wsi;
	t->link_ops = ops;
	t->link_user = user;
	t->caps = sc.caps;
	t->ordinal = ++srv->next_ordinal;
	t->next_stream_id = 1;
	st_budget_init(&t->budget, 0);
	t->connected_ms = st_now_ms();
	memcpy(t->node, replica, node_len);
	t->node[node_len] = '\0';
	st_liveness_init(&t->live, t->connected_ms);
	st_wsctl_init(&t->ctl, CS_TUNNEL_PING, t->connected_ms);
	st_session_hello(t->sess, srv->replica);
	cs__tunnel_kick(t);
	cs__tunnel_read_own(t); /* a forwarded transfer's bytes come this way (issue 13) */
	*out = t;
	return 0;
}

void *cs_tunnel_link_user(const struct cs_tunnel *t)
{
	return t->link_user;
}

void cs_tunnel_link_free(struct cs_tunnel *t)
{
	if (t == NULL)
		return;
	st_tunnel_reader_free(t->reader);
	st_session_free(t->sess);
	st_reasm_cleanup(&t->rx);
	free(t);
}

void cs_tunnel_link_drop(struct cs_tunnel *t, const char *why)
{
	cs__tunnel_end_streams(t, why);
	if (t->wsi)
		lws_set_timeout(t->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
}

/* tunnel.c's CLOSED for a link: the streams it carried end first, so that their endpoints
 * (requests forwarded to the replica behind it) fail while the link's owner still knows it; the
 * owner then forgets the link and frees it. */
void cs__tunnel_link_closed(struct cs_tunnel *t)
{
	t->wsi = NULL; /* lws is closing it: no more writes, and cs_tunnel_is_up() is false */
	cs__tunnel_end_streams(t, "the link to the replica holding the node was lost");
	t->link_ops->closed(t->link_user);
}

/* The peer code's one sweep over every link, both ways (peer_dial.c: why links are pinged at
 * all), calls this for each link it accepted: the tunnel's liveness is the tunnel module's. */
void cs_tunnel_link_liveness(struct cs_tunnel *t, uint64_t now_ms, uint64_t ping_ms,
                             uint64_t dead_ms)
{
	if (t->wsi && st_tunnel_liveness(&t->live, &t->ctl, t->wsi, now_ms, ping_ms, dead_ms) ==
	                      ST_LIVENESS_DEAD)
		st_warn("peers: link from %s silent for %llu ms (--peer-dead-timeout): dropped",
		        t->node, (unsigned long long)(now_ms - t->live.last_rx_ms));
}
