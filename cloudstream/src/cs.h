/*
 * cloudstream/src/cs.h — the daemon's private types: the server (one per process), a tunnel (one
 * edge node's websocket session) and a front (one apiserver connection on the stream port).
 *
 * Everything here is owned by and touched only from the loop thread, except what the worker
 * pool's jobs copy in and out (documented where it happens).
 */
#ifndef CLOUDSTREAM_CS_H
#define CLOUDSTREAM_CS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libwebsockets.h>

#include <stream/admin.h>
#include <stream/buf.h>
#include <stream/ext.h>
#include <stream/liveness.h>
#include <stream/reasm.h>
#include <stream/session.h>

#include "config.h"
#include "exchange.h"
#include "podcache.h"
#include "registry.h"

/* Why a request failed: the label of cloudstream_request_errors_total. */
enum cs_err_reason {
	CS_ERR_BAD_REQUEST = 0, /* malformed head, bad kubelet path (400/405/431) */
	CS_ERR_NO_ROUTE,        /* nothing in the request names a node (503) */
	CS_ERR_NO_SESSION,      /* the node has no tunnel (503) */
	CS_ERR_LIMIT,           /* a stream or memory limit (503) */
	CS_ERR_EDGE_REFUSED,    /* the edge refused or failed the request (ERROR/REMOVE: 4xx/5xx) */
	CS_ERR_EDGE_GONE,       /* the tunnel went away during the request (502) */
	CS_ERR_TIMEOUT,         /* no answer in time (504) */
	CS_ERR_BAD_RESPONSE,    /* the edge's response was malformed (502 or cut) */
	CS_ERR_DRAINING,        /* shutting down (503) */
	CS_ERR_COUNT,
};

/* Counters behind /metrics. Gauges are computed when scraped. */
struct cs_metrics {
	uint64_t sessions_total[2]; /* [0] base protocol, [1] extensions */
	uint64_t sessions_replaced; /* a reconnect replaced a live session */
	uint64_t sessions_rejected; /* refused upgrades (identity, path, limits) */
	uint64_t streams_total[6];  /* by enum st_kubelet_kind */
	uint64_t streams_open[6];
	uint64_t bytes_to_edge, bytes_from_edge;
	uint64_t request_errors[CS_ERR_COUNT];
	uint64_t tunnel_pauses; /* a tunnel's reading paused for buffer limits */
	uint64_t stream_stalls; /* a front's reading paused: its stream was full */
	uint64_t stall_cuts;    /* base protocol: streams cut for pausing the tunnel too long */
	uint64_t fronts_total, fronts_refused_tls;
	struct st_session_totals sessions; /* every tunnel session's REMOVE bookkeeping */
};

struct cs_tunnel;
struct cs_front;

struct cs_server {
	struct cs_config cfg;
	struct lws_context *ctx;
	struct lws_vhost *vh_tunnel, *vh_stream, *vh_admin, *vh_aux;
	struct cs_registry *reg;
	struct cs_podcache *pods; /* pod → node answers from the apiserver (when configured) */
	struct st_workq *wq;
	struct st_loop_signals *sig;
	struct cs_metrics m;
	struct st_admin_ops admin_ops;
	uint8_t *tx;       /* one write buffer for the loop: LWS_PRE + ST_MAX_MESSAGE_BYTES */
	char *scratch;     /* JSON connect requests are built here (ST_MAX_CONNECT_JSON_BYTES) */
	uint64_t buffered; /* bytes queued toward apiservers, all fronts */
	size_t n_tunnels, n_fronts, n_streams;
	struct cs_tunnel *paused;  /* tunnels paused for the process budget (list) */
	struct cs_front *fronts;   /* every apiserver connection (list) */
	struct cs_tunnel *tunnels; /* every tunnel (list): the liveness sweep walks it */
	lws_sorted_usec_list_t sul_liveness;
	uint64_t next_ordinal;
	bool draining, stop, ready;
	lws_sorted_usec_list_t sul_drain;
	uint32_t our_caps;
	char replica[ST_MAX_REPLICA_ID_BYTES + 1];
};

/* One edge node's tunnel. Created at ESTABLISHED, freed at CLOSED. */
struct cs_tunnel {
	struct cs_server *srv;
	struct lws *wsi;
	struct st_session *sess;
	char node[CS_NODE_NAME_MAX_BYTES + 1];
	uint64_t ordinal;
	uint32_t caps; /* agreed extensions; 0 = base protocol */
	uint64_t next_stream_id;
	struct cs_front *fronts;  /* apiserver connections with a stream here (list) */
	struct st_reasm rx;       /* reassembly of a fragmented message */
	uint64_t buffered;        /* bytes of its streams queued toward apiservers */
	unsigned blocking_fronts; /* base protocol: fronts whose queue is above the high mark */
	bool rx_paused;           /* lws_rx_flow_control(wsi, 0) is in effect */
	bool on_paused_list;
	bool pause_logged; /* the first pause was logged at WARN */
	struct cs_tunnel *paused_next, *paused_prev;
	bool registered;         /* the registry points at it */
	struct st_liveness live; /* any frame received counts; paused = our silence */
	bool want_ping;          /* the sweep asked for a PING: next WRITEABLE sends it */
	struct cs_tunnel *all_next, *all_prev; /* in srv->tunnels */
	uint64_t connected_ms;
	uint64_t bytes_in, bytes_out;
};

enum cs_front_state {
	CS_FRONT_HEAD = 0, /* reading a request head (idle keep-alive connections too) */
	CS_FRONT_ROUTING,  /* head kept in `in` while the apiserver says which node runs the pod */
	CS_FRONT_WAIT,     /* connect sent; relaying the request body; no answer byte yet */
	CS_FRONT_RESPONSE, /* answer bytes flowing to the apiserver */
	CS_FRONT_CLOSING,  /* write what is queued, then close */
};

/* How the edge's answer is carried (stream/PROTOCOL.md §4). */
enum cs_front_mode {
	CS_MODE_RAW = 0,   /* DATA carries the backend's raw response (upgrades; raw-response) */
	CS_MODE_BODY_ONLY, /* base-protocol LOGS/METRIC: DATA is the body; we frame it chunked */
};

/* One apiserver connection on the stream port. Created at RAW_ADOPT, freed at RAW_CLOSE. */
struct cs_front {
	struct cs_server *srv;
	struct lws *wsi;
	uint64_t ordinal;
	enum cs_front_state state;
	bool verified;      /* the client certificate was checked on the first bytes */
	bool rx_paused;     /* our lws_rx_flow_control(wsi, 0) is in effect */
	bool keep_alive;    /* serve another request after this answer */
	bool wrote_any;     /* answer bytes went out for this request */
	bool pod_looked_up; /* this request's pod was asked of the apiserver already */
	bool pod_lookup_ok; /* ... and the apiserver answered */
	uint8_t *in;        /* unprocessed input (head, or bytes the stream cannot take yet) */
	size_t in_len;
	struct st_buf out; /* toward the apiserver */
	/* the request in flight */
	struct cs_tunnel *tun;          /* NULL once detached */
	struct cs_front *tnext, *tprev; /* in tun->fronts */
	struct cs_front *anext, *aprev; /* in srv->fronts */
	char orig_dst[64];    /* SO_ORIGINAL_DST when the connection was DNAT'd, else "" */
	uint64_t credit_debt; /* DATA bytes received but not yet returned as credit */
	uint64_t sid;         /* stream id in tun's session; 0 when none */
	char node[CS_NODE_NAME_MAX_BYTES + 1];
	struct cs_plan plan;
	enum cs_front_mode mode;
	struct cs_body req_body;
	struct cs_resp resp;
	bool blocking_tunnel;             /* counted in tun->blocking_fronts */
	lws_sorted_usec_list_t sul_stall; /* armed while blocking_tunnel: cut when it fires */
	bool counted_stream;              /* counted in streams_open */
	uint64_t started_ms;
	lws_sorted_usec_list_t sul_answer;
};

/* ---- tunnel.c -------------------------------------------------------------------------- */
extern const struct lws_protocols cs_tunnel_protocols[2]; /* with terminator */
/* Session helpers the front side uses. */
void cs_tunnel_kick(struct cs_tunnel *t);             /* request WRITEABLE if there is output */
void cs_tunnel_update_rx(struct cs_tunnel *t);        /* pause/resume reading by the budgets */
void cs_server_budget_changed(struct cs_server *srv); /* the process budget may have room */
/* Starts the liveness sweep: one timer for all tunnels (any frame is a sign of life; a tunnel
 * we paused is never declared dead by us). Stopped by lws_sul_cancel(&srv->sul_liveness). */
void cs_tunnel_liveness_start(struct cs_server *srv);

/* ---- front.c --------------------------------------------------------------------------- */
const char *cs_err_reason_name(enum cs_err_reason r);
extern const struct lws_protocols cs_front_protocols[2];
/* The edge ended @f's stream (@code 0: REMOVE; else an ERROR code with @reason). */
void cs_front_on_stream_end(struct cs_front *f, uint64_t code, const char *reason, size_t len);
/* Answer bytes for @f's stream. Returns 0 or a negative errno (the stream is then reset). */
int cs_front_on_data(struct cs_front *f, const uint8_t *p, size_t len);
/* The stream can take more request bytes. */
void cs_front_on_writable(struct cs_front *f);
/* The tunnel is going away: fail the request. */
void cs_front_on_tunnel_gone(struct cs_front *f, const char *why);
/* The pod lookup for @f finished (@ok: the cache has the answer); @f routes its request again. */
void cs_front_pod_resolved(struct cs_front *f, bool ok, long http_status);
/* Drain: connections idle between requests are closed. */
void cs_front_drain_idle(struct cs_server *srv);

/* ---- admin.c --------------------------------------------------------------------------- */
void cs_admin_ops_init(struct st_admin_ops *ops, struct cs_server *srv);

/* ---- main.c ---------------------------------------------------------------------------- */
uint64_t cs_now_ms(void);
void cs_maybe_finish_drain(struct cs_server *srv);

#endif /* CLOUDSTREAM_CS_H */
