/*
 * cloudstream/src/cs.h — the daemon's private types: the server (one per process) with its
 * metrics, and what each module keeps in it. A tunnel (tunnel.h, opaque), a stream endpoint
 * (tunnel.h) and an apiserver connection (front.h) have their own headers.
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
#include <stream/clock.h>
#include <stream/drain.h>
#include <stream/ext.h>
#include <stream/heaptrim.h>
#include <stream/hist.h>
#include <stream/liveness.h>
#include <stream/reasm.h>
#include <stream/session.h>
#include <stream/tunnelwrite.h>

#include "budget.h"
#include "config.h"
#include "events.h"
#include "identity.h"
#include "podcache.h"
#include "registry.h"
#include "relay.h"
#include "tunnel.h"

/* How a request that waited for its node's redial ended (cloudstream_node_reconnect_waits_total). */
enum cs_reconnect_outcome {
	CS_RECONNECT_BACK_LOCAL = 0, /* the node's tunnel came up here */
	CS_RECONNECT_BACK_PEER,      /* a peer announced the node: forwarded there */
	CS_RECONNECT_GAVE_UP,        /* the grace ended: 503 */
	CS_RECONNECT_REFUSED,        /* too many waited already: 503 without waiting */
	CS_RECONNECT_CLIENT_GONE,    /* the apiserver closed the connection while it waited */
	CS_RECONNECT_OUTCOMES,
};

/* Counters behind /metrics. Gauges are computed when scraped. */
struct cs_metrics {
	uint64_t sessions_total[2]; /* [0] base protocol, [1] extensions */
	uint64_t sessions_replaced; /* a reconnect replaced a live session */
	uint64_t drain_moves
	        [2]; /* draining: edges asked to move, [0] CLOSE_CONNECT, [1] RECONNECT */
	uint64_t sessions_rejected;                /* refused upgrades (identity, path, limits) */
	uint64_t tunnel_refusals[CS_REFUSE_COUNT]; /* the same, by reason (identity.h) */
	uint64_t tunnels_closed_denied;            /* closed by a deny-list reload */
	uint64_t tunnels_closed_admin;             /* closed by POST /nodes/<name>/close */
	uint64_t tunnels_closed_node_deleted;      /* --node-watch: the Node was deleted */
	uint64_t tunnels_closed_edge_closed; /* the edge closed it (CLOSE frame, close_notify) */
	uint64_t tunnels_closed_edge_gone;   /* the edge went away without closing (EOF, reset) */
	uint64_t tunnels_closed_edge_error;  /* a TLS error, a malformed frame, a message refused */
	uint64_t tunnels_closed_dead;        /* nothing received for --dead-peer-timeout */
	uint64_t shared_ips;                 /* times an IP became held by 2+ nodes */
	uint64_t shared_ip_refusals;         /* requests refused: addressed by a shared IP */
	uint64_t node_ip_verified, node_ip_unlisted; /* node-address policy: Node lookups */
	uint64_t streams_total[6];                   /* by enum st_kubelet_kind */
	uint64_t streams_open[6];
	uint64_t bytes_to_edge, bytes_from_edge;
	uint64_t request_errors[CS_ERR_COUNT];
	uint64_t tunnel_pauses;   /* a tunnel's reading paused for buffer limits */
	uint64_t stream_stalls;   /* a front's reading paused: its stream was full */
	uint64_t stall_cuts;      /* base protocol: streams cut for pausing the tunnel too long */
	uint64_t budget_refusals; /* streams refused: their first window did not fit a budget */
	uint64_t fronts_total, fronts_refused_tls;
	uint64_t h2_connections_total; /* stream-port connections that chose HTTP/2 */
	uint64_t h2_streams_total;     /* HTTP/2 streams taken as requests */
	uint64_t h2_streams_refused;   /* ... refused (REFUSED_STREAM: over the limit, draining) */
	/* requests that waited for their node's redial (--node-reconnect-grace), by how it
	 * ended (enum cs_reconnect_outcome) */
	uint64_t reconnect_waits[CS_RECONNECT_OUTCOMES];
	struct st_session_totals sessions; /* every tunnel session's REMOVE bookkeeping */
	/* Latency histograms (stream/hist.h), loop thread; set up by cs_metrics_init(). */
	struct st_hist ttfb[6];    /* request head in → first answer byte queued, by kind */
	struct st_hist pod_lookup; /* a pod's node asked of the apiserver, submit → answer */
	struct st_hist review[2];  /* [0] TokenReview, [1] SubjectAccessReview, submit → answer */
};

struct cs_front;
struct door_set;

/* When the liveness sweep next needs to look at a tunnel (tunnel_io.c). */
struct cs_live_slot {
	uint64_t due_ms;
	struct cs_tunnel *t;
};

/* The tunnel module's part of the server (tunnel.c, tunnel_stream.c own it; read-only
 * elsewhere). */
struct cs_tunnel_set {
	struct cs_tunnel *all;    /* every edge tunnel (list; the admin listing, draining) */
	struct cs_tunnel *paused; /* base-protocol tunnels paused for the process budget (list) */
	size_t n;                 /* tunnels connected */
	size_t n_streams;         /* streams open, all tunnels */
	size_t moving;            /* draining: tunnels whose edges are moving (tunnel.c) */
	struct st_budget budget;  /* the process budget (budget.h): the windows of every stream
	                           * to an edge with credit, and the bytes endpoints hold toward
	                           * their consumers otherwise */
	lws_sorted_usec_list_t sul_liveness;
	/* The liveness sweep's schedule: one slot per tunnel in srv->tun.all, dense, so the
	 * sweep reads 16 bytes a tunnel and the tunnel itself only when its time came
	 * (st_liveness_next_check_ms). Slot i's tunnel has live_slot == i. */
	struct cs_live_slot *live;
	size_t live_n, live_cap;
	uint64_t live_ping_ms, live_dead_ms; /* the settings the slots' times were computed for */
};

struct cs_server {
	struct cs_config cfg;
	struct lws_context *ctx;
	struct st_loop *loop;           /* the epoll (or poll) loop under ctx (stream/loop.h) */
	struct cs_listener *lis;        /* the tunnel port's listening socket (listen.h) */
	struct cs_listener *lis_stream; /* the stream port's (listen.h) */
	struct lws_vhost *vh_tunnel, *vh_stream, *vh_admin, *vh_aux;
	struct cs_registry *reg;
	struct cs_podcache *pods; /* pod → node answers from the apiserver (when configured) */
	struct cs_authz *authz;   /* stream-port authentication and authorization (authz_req.c) */
	struct cs_certshare *certshare; /* the stream port's repeated client certificates */
	struct st_workq *wq;
	struct st_loop_signals *sig;
	struct st_certreload *certs; /* SIGHUP: both listeners' certificates, keys and CAs */
	void *ssl_ctx[3]; /* the tunnel, stream and front-door listeners' SSL_CTXs (lws owns them;
	                   * [2] NULL without --front-door-listen) */
	struct cs_metrics m;
	struct cs_identity *ident;      /* the deny list, Node answers (identity.c) */
	struct cs_nodewatch *nodewatch; /* --node-watch (nodewatch.c) */
	struct cs_servecert *sc;        /* --serving-certs (servecert.h); NULL: off */
	struct cs_join *join;           /* joins and renewals, when signing is on (join_srv.c) */
	struct st_admin_ops admin_ops;
	uint8_t *tx; /* one write buffer for the loop: LWS_PRE + ST_MAX_MESSAGE_BYTES */
	struct st_tunnel_writer tunnel_writer; /* every tunnel's frames (stream/tunnelwrite.h) */
	char *scratch; /* connect payloads are built here (ST_MAX_CONNECT_JSON_BYTES) */
	struct cs_tunnel_set tun;
	size_t n_fronts; /* apiserver connections (front.c) */
	/* requests waiting for their node's redial (front.c; recent.h) */
	struct cs_recent *recent; /* nodes whose tunnel went recently, here or on a peer */
	struct cs_front *reconnect_waiting; /* fronts waiting (list, f->wnext) */
	size_t n_reconnect_waiting;
	lws_sorted_usec_list_t sul_reconnect; /* armed while any waits: ends those past the grace */
	struct cs_front *fronts;              /* every apiserver connection (list; front.c) */
	struct door_set *door;                /* the front door's listeners and counters (door.c) */
	struct cs_peers *peers;         /* the other replicas (peer_int.h); NULL without --peers */
	struct cs_peerwatch *peerwatch; /* --peer-service (peerwatch.c); NULL without */
	uint64_t next_ordinal;
	bool draining, stop, ready; /* draining: drain.state is DRAINING or later */
	struct st_drain drain;      /* SIGTERM (stream/drain.h) */
	lws_sorted_usec_list_t sul_drain;
	struct st_heap_trimmer heap_trimmer; /* free pages back to the kernel after bursts */
	uint32_t our_caps;
	char replica[ST_MAX_REPLICA_ID_BYTES + 1];
	/* Node events (events_post.c), loop thread: NULL without --apiserver-url */
	struct cs_events *events;
	lws_sorted_usec_list_t sul_events;
	unsigned events_in_flight;
	bool events_failing; /* the last call failed: the next failure is not logged again */
};

/* ---- front.c, request.c, request_reconnect.c (front.h) -------------------------------- */
extern const struct lws_protocols cs_front_protocols[2];
/* Drain: connections idle between requests are closed. */
void cs_front_drain_idle(struct cs_server *srv);
/* The pod lookup for the front with @ordinal finished (@ok: the cache has the answer); that
 * front, if it is still there, routes its request again. */
void cs_front_pod_resolved(struct cs_server *srv, uint64_t ordinal, bool ok);
/* @node (@len bytes) lost its tunnel, here or on a peer: requests for it, by name or by one of
 * its @n_ips IPs (text, @ip_lens bytes each), wait for its redial for --node-reconnect-grace. */
void cs_front_node_gone(struct cs_server *srv, const char *node, size_t len, const char *const *ips,
                        const size_t *ip_lens, size_t n_ips);
/* A request for @key (a node name or IP) connected nowhere: true when it waits for the node's
 * redial (counted in n_reconnect_waiting, the tick armed; *@since_ms set at its first wait),
 * false to answer now, with @note (else "") saying it waited (@waited_ms) or could not. */
bool cs_reconnect_should_wait(struct cs_server *srv, const char *key, uint64_t *since_ms,
                              uint64_t waited_ms, char *note, size_t cap);
/* The same with the IPs comma-separated in @ips_csv (NULL: none). */
void cs_front_node_gone_csv(struct cs_server *srv, const char *node, const char *ips_csv);
/* @node's tunnel is up here, or a peer announced it: the requests waiting for it go on. */
void cs_front_node_back(struct cs_server *srv, const char *node, size_t len);

/* ---- door.c (door.h) ------------------------------------------------------------------ */
extern const struct lws_protocols cs_door_protocols[2];
/* The front door's counters on /metrics (admin.c). */
struct st_text;
void cs_door_metrics(struct st_text *t, const struct cs_server *srv);
void cs_door_free(struct cs_server *srv);
/* The pod-IP lookup for the front-door connection with @ordinal finished (@ok: the pod cache
 * has the answer); that connection, if it is still there, routes its CONNECT again. */
void cs_door_pod_resolved(struct cs_server *srv, uint64_t ordinal, bool ok);
/* Front-door CONNECTs waiting for a node's redial: @node (@len) is back, or (tick) those whose
 * grace is over get their answer. */
void cs_door_node_back(struct cs_server *srv, const char *node, size_t len);
void cs_door_reconnect_tick(struct cs_server *srv, uint64_t now_ms);

/* ---- authz_req.c ----------------------------------------------------------------------- */
/* Start-up: the secure default (refuses a stream port open to any certificate of its CA), the
 * CA warnings, the decision cache. 0, or -EINVAL/-ENOMEM after logging why. */
int cs_authz_start(struct cs_server *srv);
void cs_authz_stop(struct cs_server *srv);
/* The authz counters on /metrics (admin.c). */
struct st_text;
void cs_authz_metrics(struct st_text *t, const struct cs_server *srv);

/* ---- events_post.c: Node events for refused and flapping tunnels (events.h) ---------------- */
/* With --apiserver-url: the correlator and its 1 s sweep. 0 or -ENOMEM. */
int cs_node_events_start(struct cs_server *srv);
void cs_node_events_stop(struct cs_server *srv); /* before the worker pool goes */
void cs_node_events_free(struct cs_server *srv); /* after it */
/* One occurrence on @node (nothing without an apiserver or a node name). */
void cs_node_event(struct cs_server *srv, const char *node, enum cs_event_reason reason,
                   const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* @node's tunnel came up: TunnelFlapping when it keeps doing so. */
void cs_node_events_tunnel_up(struct cs_server *srv, const char *node);
void cs_node_events_metrics(struct st_text *t, const struct cs_server *srv);

/* ---- advertise.c: --advertise-kubelet-port ------------------------------------------- */
/* @node's tunnel came up: PATCH its Node's kubelet port on the worker pool (when on). */
void cs_advertise_node_up(struct cs_server *srv, const char *node);
/* Start-up: the option needs --apiserver-url. 0, or -EINVAL after logging. */
int cs_advertise_check(const struct cs_server *srv);
void cs_advertise_metrics(struct st_text *t, const struct cs_server *srv);

/* ---- admin.c --------------------------------------------------------------------------- */
/* Also sets up the histograms of srv->m (before any traffic). */
void cs_admin_ops_init(struct st_admin_ops *ops, struct cs_server *srv);

/* ---- main.c ---------------------------------------------------------------------------- */
void cs_maybe_finish_drain(struct cs_server *srv);

/* ---- vhosts.c: the listeners (main.c sequences them) ------------------------------------ */
/* A listener's SSL_CTX, from LWS_CALLBACK_OPENSSL_LOAD_EXTRA_SERVER_VERIFY_CERTS on the vhost
 * named @vhost_name ("tunnel" or "stream"): where SIGHUP swaps new certificates in. */
void cs_certs_note_ctx(struct cs_server *srv, const char *vhost_name, void *ssl_ctx);
/* Start-up, once the context exists: the tunnel, stream, admin (when set) and aux vhosts, the
 * front door's (door.c) and the tunnel port's listening socket (listen.h). 0, or -EINVAL /
 * -EADDRNOTAVAIL / -ENOMEM after logging why. */
int cs__create_vhosts(struct cs_server *srv);
/* Once the worker pool runs: SIGHUP's reload of the listeners' certificate files into their
 * SSL_CTXs (stream/certreload.h). 0 or a negative errno. */
int cs__certs_reload_new(struct cs_server *srv);
/* --ready-file, when set: the listeners' ports. 0, or a negative errno after logging. */
int cs__write_ready_file(struct cs_server *srv);

#endif /* CLOUDSTREAM_CS_H */
