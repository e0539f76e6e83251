/*
 * cloudstream/src/tunnel_int.h — the tunnel module's own view of a tunnel, shared by tunnel.c
 * (the edge's websocket: its callback, tunnel up and down), tunnel_io.c (reassembly, session
 * I/O, liveness), tunnel_drain.c (the edges' moves at SIGTERM) and tunnel_stream.c (streams
 * for endpoints, budgets, pausing), with admission.c and join_srv.c (which judges a
 * renewal's certificate as admission does). The rest of cloudstream sees struct cs_tunnel as
 * opaque (tunnel.h).
 *
 * Loop thread only.
 */
#ifndef CLOUDSTREAM_TUNNEL_INT_H
#define CLOUDSTREAM_TUNNEL_INT_H

#include "cs.h"
#include <certs/certs.h>
#include <stream/ext.h>
#include <stream/wsctl.h>

#include "denylist.h"

/* One edge node's tunnel. Created at ESTABLISHED, freed at CLOSED. */
struct cs_tunnel {
	struct cs_server *srv;
	struct lws *wsi; /* NULL once lws is closing it: no more writes or flow control */
	struct st_session *sess;
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
	bool revoked;            /* closed by cs_tunnel_revoke: no wait for its redial */
	struct st_liveness live; /* any frame received counts; paused = our silence */
	size_t live_slot;        /* its slot in srv->tun.live (edges' tunnels only) */
	bool kill;               /* cs_tunnel_close: the next WRITEABLE closes it */
	/* Our own reading of the edge's frames (stream/tunnelread.h; NULL: lws reads, on its
	 * poll loop). Then PINGs and CLOSE reach us, not lws, and we answer them: */
	struct st_tunnel_reader *reader;
	/* The PING the sweep asks for, the PONG we owe, the edge's CLOSE (stream/wsctl.h; its
	 * clock is st_now_ms). The next WRITEABLE sends what is owed; with @kill, the echo. */
	struct st_wsctl ctl;
	/* The edge's pong-within (PROTOCOL.md §5.1): it hears from us at least this often, so a
	 * PING may wait for its PONG until then, coalesced with the next ones. 0: answered at
	 * once (a KubeEdge edge, or an edge that offered none). */
	uint32_t pong_within_ms;
	struct cs_tunnel *all_next, *all_prev; /* in srv->tun.all */
	uint64_t connected_ms;
	uint64_t bytes_in, bytes_out;
	char *replica; /* the edge's replica id from its offer (owned), NULL when none */
	/* Peer links (tunnel.h, tunnel_link.c): set, the tunnel is a link another replica
	 * dialled to us, not an edge's tunnel; its owner (peer.h) hears of it through these. */
	const struct cs_tunnel_link_ops *link_ops;
	void *link_user;
	uint64_t gen_ms; /* wall-clock admission time: the node's generation (PROTOCOL §7) */
	char *ips; /* the node's IPs, comma-separated (owned; NULL: none, or neither --peers nor
	                  * --node-reconnect-grace) */
	/* Draining (PROTOCOL.md §5.6): the edge was asked to move (RECONNECT, or CLOSE_CONNECT
	 * once no stream is left); counted in srv->tun.moving until it closes or its move is
	 * given up (its new tunnels keep coming back here: no other replica takes it). */
	bool moving;
	bool close_sent; /* CLOSE_CONNECT queued (the base way to move) */
	bool moved;      /* moving, and a peer holds the node's newer tunnel: unregistered, still
	             * serves its streams and requests forwarded by peers whose directory was
	             * behind; closed once it carried none for CS_MOVED_LINGER_MS */
	unsigned move_refusals;          /* its new tunnels refused here while draining */
	lws_sorted_usec_list_t sul_move; /* CLOSE_CONNECT off the stream callbacks */
	/* The node's name (a link's: the replica's), NUL-terminated, allocated to its length with
	 * the tunnel: names are far shorter than the 253 bytes allowed. */
	char node[];
};

#define CS_TUNNEL_PATH "/v1/kubeedge/connect"
/* Our PING's payload on edge tunnels and accepted peer links (stream/wsctl.h: not empty). */
#define CS_TUNNEL_PING "cloudstream"

/* What admission found out about a websocket upgrade (admission.c). */
struct cs_admission {
	int status;             /* 0 = admitted, else the HTTP status to refuse with */
	enum cs_refusal reason; /* when refused */
	char detail[512];       /* reason with specifics */
	char node[CS_NODE_NAME_MAX_BYTES + 1];
	char serial[CS_SERIAL_MAX_HEX + 2]; /* the certificate's, upper-case hex */
	const char *ips[CS_REGISTRY_MAX_IPS];
	uint8_t claims[CS_REGISTRY_MAX_IPS]; /* enum cs_ip_claim of each */
	size_t n_ips;
	bool verify_header_ip; /* node-address policy: ask the Node object about header_ip */
	struct certs_identity id;
	char header_ip[CERTS_IP_TEXT_BYTES];
	bool has_offer;
	struct st_ext_offer offer; /* the edge's, when has_offer */
};

/* admission.c: judge the upgrade on @wsi into @a (status 0: admitted). */
void cs__tunnel_admit(struct lws *wsi, struct cs_server *srv, struct cs_admission *a);
/* admission.c: the client certificate alone (verified, names a node, not denied, Node not
 * deleted) into @a: what a renewal (join_srv.c) needs too. Needs a zeroed @a. */
void cs__tunnel_admit_cert(struct lws *wsi, struct cs_server *srv, struct cs_admission *a);
/* admission.c: refuse the upgrade with @a's status and reason (logged, counted). Returns what
 * LWS_CALLBACK_HTTP_CONFIRM_UPGRADE returns. */
int cs__tunnel_refuse(struct lws *wsi, struct cs_server *srv, const struct cs_admission *a);

/* tunnel_stream.c: the session's callbacks, which hand each stream's events to its endpoint. */
extern const struct st_session_callbacks cs__tunnel_session_cbs;

/* tunnel_drain.c: a stream of @t ended (tunnel_stream.c): a draining tunnel may be told to go. */
void cs__tunnel_stream_ended(struct cs_tunnel *t);
/* tunnel_drain.c: @t no longer counts as moving (it closed, or its move is not waited for). */
void cs__tunnel_move_over(struct cs_tunnel *t);

/* tunnel_io.c: the liveness sweep looks at @t no later than @due_ms (a PONG owed then). */
void cs__tunnel_live_due(struct cs_tunnel *t, uint64_t due_ms);

/* Ask for WRITEABLE when the session has a message to send. */
void cs__tunnel_kick(struct cs_tunnel *t);

/* Pause or resume reading @t by the budgets (base protocol only; see budget.h). */
void cs__tunnel_update_rx(struct cs_tunnel *t);

/* @t is going away (@why: "the edge node disconnected", ...): every endpoint with a stream on
 * it loses its stream (ops->gone). */
void cs__tunnel_end_streams(struct cs_tunnel *t, const char *why);

/* tunnel_io.c: one websocket message fragment from @t's peer; 0, or -1 to drop the connection. */
int cs__tunnel_receive(struct cs_tunnel *t, const uint8_t *in, size_t len, bool first, bool final);
/* tunnel_io.c: may a WARN line about one tunnel's end be written now? One budget for them all
 * (20 per 10 s); the first line of a new window says how many were not. Loop thread. */
bool cs__tunnel_warn_allowed(void);
/* tunnel_io.c: @t's WRITEABLE (server or client); 0, or -1 to drop the connection. */
int cs__tunnel_writeable(struct cs_tunnel *t);
/* tunnel_io.c: read the edge's frames ourselves from now on (stream/tunnelread.h), when the
 * loop allows; else lws goes on reading (RECEIVE). Call when @t is set up (ESTABLISHED). */
void cs__tunnel_read_own(struct cs_tunnel *t);
/* tunnel_io.c: @t (an edge's tunnel, liveness initialised) joins the liveness sweep, checked
 * at the next sweep: 0 or -ENOMEM. Leaves it with cs__tunnel_live_remove (a tunnel that never
 * joined is fine). */
int cs__tunnel_live_add(struct cs_tunnel *t);
void cs__tunnel_live_remove(struct cs_tunnel *t);

/* tunnel_link.c: a peer link's CLOSED (instead of an edge tunnel's). */
void cs__tunnel_link_closed(struct cs_tunnel *t);

/* @t leaves the list of tunnels paused for the process budget (when on it). */
void cs__tunnel_paused_remove(struct cs_tunnel *t);

#endif /* CLOUDSTREAM_TUNNEL_INT_H */
