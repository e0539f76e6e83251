/*
 * cloudstream/src/tunnel.h — a node's tunnel as the rest of cloudstream sees it: something that
 * carries streams for stream endpoints (DESIGN D11; haproxy's connection / stream / stream
 * endpoint layering on top of the nghttp2-style st_session).
 *
 * The tunnel module (tunnel.c: the edge's websocket; tunnel_io.c: its bytes and liveness;
 * tunnel_drain.c: the moves at SIGTERM; tunnel_stream.c: streams and budgets) owns
 * each tunnel's st_session, its stream ids, its liveness and whether it is read, and the two
 * budgets of bytes queued toward consumers (budget.h). It never knows what is behind a stream:
 * an endpoint embeds a struct cs_endpoint, opens a stream with cs_stream_open() and from then
 * on is called through its ops table. An apiserver connection (front.c / request.c) is one
 * kind of endpoint; a peer link to another replica or a CONNECT tunnel of a front door would be
 * others, without a change here. A link another replica dialled to us is a tunnel of a second
 * kind (tunnel_link.c), created and freed by the peer code through cs_tunnel_link_new/free.
 *
 * Contract, both directions:
 *   - toward the edge, the endpoint writes with cs_stream_write() no more than
 *     cs_stream_space() allows, and waits for ops->writable once it asked with
 *     cs_stream_wait_writable();
 *   - toward its consumer, the endpoint queues what ops->data hands it, reports every byte it
 *     queues (cs_endpoint_queued), writes out (cs_endpoint_delivered) or throws away
 *     (cs_endpoint_dropped), and nothing else: the tunnel module turns that into the budgets,
 *     the credit returned to the edge, and pausing or resuming the tunnel;
 *   - a stream ends once, by whichever side comes first: the endpoint (cs_stream_close,
 *     cs_stream_detach) or the tunnel (ops->end, ops->gone, ops->cut, after which the endpoint
 *     has no stream). Callbacks never run after the endpoint's cs_endpoint_cleanup().
 *
 * Loop thread only, like everything that touches lws.
 */
#ifndef CLOUDSTREAM_TUNNEL_H
#define CLOUDSTREAM_TUNNEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <libwebsockets.h>

struct cs_server;
struct cs_tunnel; /* opaque outside the tunnel module */
struct cs_endpoint;

/* What an endpoint says about itself (ops->info), for the admin port. */
struct cs_endpoint_info {
	const char *kind;   /* "exec", "logs", ... or what it carries */
	const char *method; /* "GET", ... "" when it has none */
	const char *path;   /* what it asked for, without a query */
	const char *caller; /* who asked, "-" when unknown */
	uint64_t started_ms, to_edge, to_client;
};

/* What a tunnel calls on the endpoint of a stream. Every member is required. */
struct cs_endpoint_ops {
	/* @len bytes from the edge for the stream (borrowed, valid during the call). Return 0,
	 * or a negative errno to have the stream reset (the session then ends it: ->end). */
	int (*data)(struct cs_endpoint *ep, const uint8_t *p, size_t len);
	/* The edge ended the stream: @code 0 for REMOVE, else an ERROR code (stream/ext.h) with
	 * @reason (a view of @len bytes, valid during the call). The stream is gone already. */
	void (*end)(struct cs_endpoint *ep, uint64_t code, const char *reason, size_t len);
	/* The stream can take more bytes toward the edge (after cs_stream_wait_writable). */
	void (*writable)(struct cs_endpoint *ep);
	/* The tunnel went away (the edge disconnected, or reconnected and replaced it), saying
	 * @why (NUL-terminated, static). The stream is gone already. */
	void (*gone)(struct cs_endpoint *ep, const char *why);
	/* Base protocol only: what this endpoint holds kept the whole tunnel paused for
	 * --stall-timeout without draining to its low mark, so every other stream of the node
	 * waited with it. The stream was closed toward the edge (ERROR timeout) and is gone; the
	 * endpoint throws away what it holds (cs_endpoint_dropped) and closes. */
	void (*cut)(struct cs_endpoint *ep);
	/* What the endpoint is, for the admin port's stream listing: every field set (strings
	 * static or the endpoint's own, valid until it next changes). */
	void (*info)(const struct cs_endpoint *ep, struct cs_endpoint_info *out);
	/* Optional (NULL: the endpoint opens no TCP_CONNECT stream): the edge acknowledged the
	 * endpoint's TCP_CONNECT (OPENED): its dial succeeded and its bytes may follow. */
	void (*opened)(struct cs_endpoint *ep);
};

/*
 * The tunnel module's part of an endpoint, embedded in it. Set up by cs_endpoint_init(); the
 * fields are the tunnel module's, read-only for the endpoint (tun, sid, queued) or not to be
 * touched at all (the rest).
 */
struct cs_endpoint {
	const struct cs_endpoint_ops *ops;
	struct cs_server *srv;
	struct cs_tunnel *tun; /* read-only: the stream's tunnel, NULL when there is no stream */
	uint64_t sid;          /* read-only: the stream's id in that tunnel, 0 when none */
	uint64_t queued;       /* read-only: bytes held toward the consumer (charged) */
	/* private to the tunnel module */
	uint64_t credit_debt;              /* DATA bytes received, credit not yet returned */
	bool blocking;                     /* base: over the high mark, the tunnel is paused */
	lws_sorted_usec_list_t sul_stall;  /* armed while blocking: cut when it fires */
	struct cs_endpoint *tnext, *tprev; /* in the tunnel's list of endpoints */
};

/* cs_endpoint_init() - @ep (embedded in its owner, zeroed or not) gets @ops (static, borrowed)
 * and no stream. */
void cs_endpoint_init(struct cs_endpoint *ep, const struct cs_endpoint_ops *ops,
                      struct cs_server *srv);

/* cs_endpoint_cleanup() - the endpoint goes away: its stream, if any, is closed toward the edge
 * (REMOVE), what it still holds is credited, its timer cancelled. No callback follows. */
void cs_endpoint_cleanup(struct cs_endpoint *ep);

/* Writes the connect payload of stream @id into @out (at most @cap bytes): its length, or a
 * negative errno (the stream is then not opened). */
typedef ssize_t (*cs_connect_payload_cb)(uint64_t id, char *out, size_t cap, void *user);

/*
 * cs_stream_open() - open a stream on @t for @ep (which has none) with connect @type, its
 * payload written by @payload(@id, ..., @user) into the tunnel's scratch buffer. This is the
 * one place a stream is admitted: the process's stream limit, and with credit flow control the
 * node and process budgets (today a full budget refuses; st_session_open's -ENOSPC is where
 * that is going).
 * Returns 0 (the stream is open and @ep is called through its ops from now on); the payload
 * callback's error (-EMSGSIZE, -EBADMSG, ...: the request cannot be carried); -ENOSPC over a
 * budget or -EAGAIN over a stream limit, with a message for the client in @msg (@msg_cap
 * bytes).
 */
int cs_stream_open(struct cs_tunnel *t, struct cs_endpoint *ep, uint64_t type,
                   cs_connect_payload_cb payload, void *user, char *msg, size_t msg_cap);

/* cs_stream_space() - bytes cs_stream_write() takes now (0 without a stream). */
size_t cs_stream_space(const struct cs_endpoint *ep);

/* cs_stream_write() - queue @len bytes (copied) toward the edge. Returns the bytes taken (may
 * be short), or a negative errno when the stream is gone (-ENOENT without a stream, -EPIPE). */
ssize_t cs_stream_write(struct cs_endpoint *ep, const uint8_t *p, size_t len);

/* cs_stream_wait_writable() - call ops->writable once the stream has room again (the endpoint
 * holds bytes that did not fit, and nothing else would wake it). */
void cs_stream_wait_writable(struct cs_endpoint *ep);

/* cs_stream_shutdown() - no more bytes toward the edge (HALF_CLOSE with our edges). */
void cs_stream_shutdown(struct cs_endpoint *ep);

/* cs_stream_close() - end the stream from our side after its queued bytes: REMOVE (@code 0) or
 * ERROR(@code, @reason: NUL-terminated, copied). No callback follows. No-op without a stream. */
void cs_stream_close(struct cs_endpoint *ep, uint64_t code, const char *reason);

/* cs_stream_detach() - forget the stream without a word to the edge: for an endpoint whose
 * stream the session ended already. No-op without a stream. */
void cs_stream_detach(struct cs_endpoint *ep);

/* cs_endpoint_queued() - the endpoint queued @n more bytes toward its consumer. */
void cs_endpoint_queued(struct cs_endpoint *ep, size_t n);

/* cs_endpoint_delivered() - its consumer took @n of the queued bytes: the budgets are credited,
 * the edge gets its credit back (flow control), a paused tunnel may resume. */
void cs_endpoint_delivered(struct cs_endpoint *ep, size_t n);

/* cs_endpoint_dropped() - @n queued bytes were thrown away (a cut, a close): only the budgets
 * are credited. */
void cs_endpoint_dropped(struct cs_endpoint *ep, size_t n);

/* cs_tunnel_caps() - the extensions agreed with the tunnel's edge (stream/ext.h; 0 = base). */
uint32_t cs_tunnel_caps(const struct cs_tunnel *t);

/* cs_tunnel_node() - the tunnel's node name (valid while the tunnel lives). */
const char *cs_tunnel_node(const struct cs_tunnel *t);

/* cs_tunnel_serial() - the serial (hex) of the certificate the tunnel was admitted with. */
const char *cs_tunnel_serial(const struct cs_tunnel *t);

/* cs_tunnel_ordinal() - the tunnel's process-unique ordinal (never reused). */
uint64_t cs_tunnel_ordinal(const struct cs_tunnel *t);

/* cs_tunnel_next() - the tunnel after @t in the set (@t NULL: the first), or NULL. */
struct cs_tunnel *cs_tunnel_next(struct cs_server *srv, struct cs_tunnel *t);

/* A tunnel as the admin port lists it (cs_tunnel_get_info). */
struct cs_tunnel_info {
	const char *node;
	const char *replica;               /* the edge's replica id, "" when it gave none */
	bool extended;                     /* our extensions, else KubeEdge's base protocol */
	char remote[64];                   /* the edge's address */
	uint64_t connected_ms, last_rx_ms; /* st_now_ms() clock */
	size_t streams;
	uint64_t bytes_in, bytes_out;
	uint64_t rtt_us; /* the kernel's smoothed round-trip time of the tunnel's TCP connection
	                  * (TCP_INFO tcpi_rtt, measured on every segment and so on our PINGs and
	                  * the edge's PONGs too); 0 when unknown */
};
void cs_tunnel_get_info(struct cs_tunnel *t, struct cs_tunnel_info *out);
/* cs_tunnel_endpoint_next() - the endpoints with a stream on @t: the first (@ep NULL), then
 * the one after @ep; NULL at the end. */
struct cs_endpoint *cs_tunnel_endpoint_next(struct cs_tunnel *t, struct cs_endpoint *ep);

/*
 * cs_tunnel_close() - close @t now, for @why (NUL-terminated, static; logged and given to every
 * stream's endpoint): it leaves the registry at once (no request is routed to it any more), its
 * streams end, and lws drops the connection. Idempotent.
 */
void cs_tunnel_close(struct cs_tunnel *t, const char *why);
/* cs_tunnel_revoke() - cs_tunnel_close() for a node that may not come back (deny list, Node
 * deleted): requests for it are not kept waiting for a redial (--node-reconnect-grace). */
void cs_tunnel_revoke(struct cs_tunnel *t, const char *why);

/* ---- what the peer directory announces of an edge's tunnel (peer_directory.c) ---------------- */

/* cs_tunnel_holds_node() - @t is an edge's tunnel that requests for its node are routed to now
 * (registered, not closing): what NODE_UP / SYNC announce. */
bool cs_tunnel_holds_node(const struct cs_tunnel *t);

/* cs_tunnel_generation() - the wall-clock time (ms) @t was admitted at: its node's generation
 * (PROTOCOL.md §7), which decides between two replicas' tunnels of one node. */
uint64_t cs_tunnel_generation(const struct cs_tunnel *t);

/* cs_tunnel_ips() - @t's node IPs, comma-separated (valid while @t lives), or NULL: none, or
 * neither --peers nor --node-reconnect-grace. */
const char *cs_tunnel_ips(const struct cs_tunnel *t);

/* cs_tunnel_is_up() - false once lws is closing @t (its streams are ending). */
bool cs_tunnel_is_up(const struct cs_tunnel *t);

/* cs_tunnel_first_window() - the credit window each stream starts with, ours to announce in an
 * offer (the budgets size it from there, budget.h). */
uint64_t cs_tunnel_first_window(const struct cs_server *srv);

/* ---- peer links: a tunnel of another kind (tunnel_link.c) -----------------------------------
 *
 * On a link another replica dialled to us (peer.h), this replica is the cloud role, exactly as
 * toward an edge: endpoints open streams on it with cs_stream_open() and the tunnel module does
 * the session, its stream ids, its I/O and its liveness. What differs is who owns it: the peer
 * code creates it at ESTABLISHED, hears of it through these ops, and frees it at CLOSED. Such a
 * tunnel is never in the registry or the tunnel set (srv->tun.all), never drained or paused.
 */
struct cs_tunnel_link_ops {
	/* A directory message (NODE_UP, NODE_DOWN, SYNC, SYNC_END: @payload of @len bytes,
	 * borrowed for the call) arrived on the link. 0, or a negative errno to drop the link. */
	int (*dir_msg)(void *user, uint64_t type, const uint8_t *payload, size_t len);
	/* lws closed the link (CLOSED): its streams ended already (ops->gone). The owner forgets
	 * the link and calls cs_tunnel_link_free(); nothing else may touch it after. */
	void (*closed)(void *user);
};

/*
 * cs_tunnel_link_new() - a tunnel on @wsi, the accepted connection of a peer link from replica
 * @replica (NUL-terminated, copied: the tunnel's name in logs and listings), with the extensions
 * agreed with it (@caps) and the window it offered (@send_window_bytes, 0: the default). @ops
 * (static, borrowed) are called with @user. Its st_session says hello at once.
 * Returns 0 with *@out set, or a negative errno (-ENOMEM): nothing was created.
 */
int cs_tunnel_link_new(struct cs_tunnel **out, struct cs_server *srv, struct lws *wsi,
                       const char *replica, uint32_t caps, uint32_t send_window_bytes,
                       const struct cs_tunnel_link_ops *ops, void *user);

/*
 * cs_tunnel_link_data_payload() - the largest DATA payload a peer link's session sends (both
 * ends: peer_dial.c, tunnel_link.c): --data-payload-bytes, cut so that a full DATA message
 * with a ConnectID of up to 3 bytes (2,097,151 streams on the link) and its masked websocket
 * header is at most 64 KiB. Its frame then takes the 4-byte length form, so the writer frames
 * it where it packed it (no 64 KiB move, tunnelwrite.c), and the bulk of a forwarded transfer
 * goes out as frames that fill 16 KiB TLS records: no few-byte trailer record per batch.
 */
size_t cs_tunnel_link_data_payload(const struct cs_server *srv);

/*
 * cs_tunnel_link_window_max() - the largest per-stream window a peer link's session grants
 * (both ends): --peer-stream-window-bytes, at least the first window. An endpoint that may
 * receive a link stream's bytes (front.c, door.c) sizes its queue's cap for the larger of this
 * and --stream-window-bytes: cs_tunnel_window_cap().
 */
uint64_t cs_tunnel_link_window_max(const struct cs_server *srv);

/* cs_tunnel_window_cap() - the most bytes one stream's peer may send ahead of what its
 * endpoint took, on any tunnel or link of this process (the larger of the two maxima). */
uint64_t cs_tunnel_window_cap(const struct cs_server *srv);

/* cs_tunnel_link_user() - the @user @t was created with (cs_tunnel_link_new), or NULL when @t
 * is an edge's tunnel. */
void *cs_tunnel_link_user(const struct cs_tunnel *t);

/* cs_tunnel_link_free() - after ops->closed: the link's session and memory go. NULL: no-op. */
void cs_tunnel_link_free(struct cs_tunnel *t);

/* cs_tunnel_link_drop() - close a link now for @why (NUL-terminated, static): its streams end
 * (ops->gone of their endpoints) and lws drops the connection (then ops->closed). */
void cs_tunnel_link_drop(struct cs_tunnel *t, const char *why);

/* cs_tunnel_link_liveness() - the peer links' sweep, for @t at @now_ms: a PING when it was quiet
 * for @ping_ms, dropped after @dead_ms of silence (--peer-dead-timeout). */
void cs_tunnel_link_liveness(struct cs_tunnel *t, uint64_t now_ms, uint64_t ping_ms,
                             uint64_t dead_ms);

/* ---- the tunnel set (tunnel.c, tunnel_stream.c) -------------------------------------------- */

extern const struct lws_protocols cs_tunnel_protocols[2]; /* with terminator */

/* cs_tunnels_init() - the process budget of @srv from its configuration; no tunnel yet. */
void cs_tunnels_init(struct cs_server *srv);

/* Starts the liveness sweep: one timer for all tunnels (any frame is a sign of life; a tunnel
 * we paused is never declared dead by us). Stopped by cs_tunnels_stop(). */
void cs_tunnel_liveness_start(struct cs_server *srv);

/*
 * cs_tunnels_drain() - SIGTERM: every edge is asked to move to another replica (PROTOCOL.md
 * §5.6): RECONNECT to an edge that agreed to it (it opens a new tunnel, then closes this one
 * once its streams ended), CLOSE_CONNECT to any other once its last stream ended. The drain is
 * over when no stream is left and no edge is still moving (srv->tun.moving), or at the drain
 * timeout.
 */
void cs_tunnels_drain(struct cs_server *srv);

/* cs_tunnel_move_refused() - while draining, admission refused a new tunnel of @node: the
 * load balancer sent the moving edge back here. After a few (with --peers, and 5 s after
 * SIGTERM: the balancer may be behind /readyz), no other replica is thought to take it and its
 * move is not waited for. */
void cs_tunnel_move_refused(struct cs_server *srv, const char *node);

/* cs_tunnel_moved() - a peer holds a newer tunnel of @t's node while @t is moving: @t no
 * longer takes new requests (unregistered: they go to the new holder), its streams go on until
 * the edge closes it. False when @t is not moving (then it is stale: close it). */
bool cs_tunnel_moved(struct cs_tunnel *t);

/* cs_tunnel_find_moved() - a moved tunnel of @node (@len bytes) still open, or NULL: for a
 * request a peer forwarded here because its directory was behind. */
struct cs_tunnel *cs_tunnel_find_moved(struct cs_server *srv, const char *node, size_t len);

/* cs_tunnels_stop() - cancel the sweep (at exit, before the context goes). */
void cs_tunnels_stop(struct cs_server *srv);

#endif /* CLOUDSTREAM_TUNNEL_H */
