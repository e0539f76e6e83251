/*
 * cloudstream/src/tunnel_int.h — the tunnel module's own view of a tunnel, shared by tunnel.c
 * (the edge's websocket: admission, reassembly, session I/O, liveness) and tunnel_stream.c
 * (streams for endpoints, budgets, pausing). Nothing outside those two files includes it: the
 * rest of cloudstream sees struct cs_tunnel as opaque (tunnel.h).
 *
 * Loop thread only.
 */
#ifndef CLOUDSTREAM_TUNNEL_INT_H
#define CLOUDSTREAM_TUNNEL_INT_H

#include "cs.h"
#include "denylist.h"

/* One edge node's tunnel. Created at ESTABLISHED, freed at CLOSED. */
struct cs_tunnel {
	struct cs_server *srv;
	struct lws *wsi; /* NULL once lws is closing it: no more writes or flow control */
	struct st_session *sess;
	char node[CS_NODE_NAME_MAX_BYTES + 1];
	char serial[CS_SERIAL_MAX_HEX + 2]; /* the client certificate's, hex (the deny list) */
	uint64_t ordinal;
	uint32_t caps;           /* agreed extensions; 0 = base protocol */
	uint64_t next_stream_id; /* ids are never reused within a session */
	struct cs_endpoint *eps; /* endpoints with a stream here (list) */
	struct st_reasm rx;      /* reassembly of a fragmented message */
	struct st_budget budget; /* base protocol: the node budget, bytes its endpoints hold (with
	                          * credit the session keeps the node budget of windows) */
	unsigned blocking_eps;   /* base protocol: endpoints over their high mark */
	bool rx_paused;          /* lws_rx_flow_control(wsi, 0) is in effect */
	bool on_paused_list;     /* in srv->tun.paused: resumes with the process budget */
	bool pause_logged;       /* the first pause was logged at WARN */
	struct cs_tunnel *paused_next, *paused_prev;
	bool registered;         /* the registry points at it */
	struct st_liveness live; /* any frame received counts; paused = our silence */
	bool want_ping;          /* the sweep asked for a PING: next WRITEABLE sends it */
	struct cs_tunnel *all_next, *all_prev; /* in srv->tun.all */
	uint64_t connected_ms;
	uint64_t bytes_in, bytes_out;
};

/* tunnel_stream.c: the session's callbacks, which hand each stream's events to its endpoint. */
extern const struct st_session_callbacks cs__tunnel_session_cbs;

/* Ask for WRITEABLE when the session has a message to send. */
void cs__tunnel_kick(struct cs_tunnel *t);

/* The credit window each stream to an edge with flow control starts with (announced to the
 * edge): the budgets size it from there (budget.h). */
uint64_t cs__tunnel_first_window(const struct cs_server *srv);

/* Pause or resume reading @t by the budgets (base protocol only; see budget.h). */
void cs__tunnel_update_rx(struct cs_tunnel *t);

/* @t is going away (@why: "the edge node disconnected", ...): every endpoint with a stream on
 * it loses its stream (ops->gone). */
void cs__tunnel_end_streams(struct cs_tunnel *t, const char *why);

/* @t leaves the list of tunnels paused for the process budget (when on it). */
void cs__tunnel_paused_remove(struct cs_tunnel *t);

#endif /* CLOUDSTREAM_TUNNEL_INT_H */
