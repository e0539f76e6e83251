/*
 * cloudstream/src/front.h — one apiserver connection on the stream port (a "front"), shared by
 * front.c (the connection: lws raw TLS glue, input and output buffers, client identity) and
 * request.c (the request on it: its stream on a tunnel as a stream endpoint, the answer),
 * request_route.c (which tunnel it goes to) and request_reconnect.c (waiting for a node
 * between tunnels). What to do with the bytes is decided by relay.c (pure).
 *
 * Loop thread only.
 */
#ifndef CLOUDSTREAM_FRONT_H
#define CLOUDSTREAM_FRONT_H

#include "cs.h"
#include "h2answer.h"

/* How often the requests waiting for their node's redial are checked against the grace. */
#define CS_RECONNECT_TICK_MS 100

enum cs_front_state {
	CS_FRONT_HEAD = 0,  /* reading a request head (idle keep-alive connections too); no stream,
	                    * the relay is idle */
	CS_FRONT_ROUTING,   /* head kept in `in` while the apiserver says which node runs the pod,
	                    * or answers a TokenReview or SubjectAccessReview; no stream */
	CS_FRONT_WAIT,      /* stream open, connect sent; relaying the request body; no answer
	                    * byte yet (the answer deadline is armed) */
	CS_FRONT_RESPONSE,  /* answer bytes flowing to the apiserver */
	CS_FRONT_RECONNECT, /* head kept in `in` while the node, connected nowhere, is between
	                     * tunnels (--node-reconnect-grace): in srv->reconnect_waiting; no
	                     * stream */
	CS_FRONT_CLOSING,   /* write what is queued, then close; no stream, nothing more is read */
};

struct cs_h2conn;
struct cs_h2req;

/* One request context (front). On an HTTP/1.1 connection it is the connection itself: created
 * at RAW_ADOPT, freed at RAW_CLOSE, one request after another. On a connection that chose h2
 * (front_h2.c) the connection's front only carries the session's bytes (`h2` set, `h2r`
 * NULL), and each HTTP/2 stream is a front of its own (a "stream front": `h2` the
 * connection's session, `h2r` its stream state), created at its HEADERS and freed once
 * nghttp2 closed the stream. request.c treats both alike: an answer is queued with
 * cs__front_queue() as HTTP/1.1 bytes, whoever carries them. */
struct cs_front {
	struct cs_endpoint ep; /* its request's stream on a tunnel (tunnel.h) */
	struct cs_server *srv;
	struct lws *wsi;
	uint64_t ordinal;
	enum cs_front_state state;
	bool verified;       /* the client certificate was checked on the first bytes */
	bool rx_paused;      /* our lws_rx_flow_control(wsi, 0) is in effect */
	bool pod_looked_up;  /* this request's pod was asked of the apiserver already */
	bool pod_lookup_ok;  /* ... and the apiserver answered */
	bool counted_stream; /* counted in streams_open (while it has a stream) */
	bool served;         /* answered a request: idle in HEAD now means kept alive, and a
	                      * drain may close it (a new connection's request is on its way) */
	uint8_t *in;         /* unprocessed input (head, or bytes the stream cannot take yet);
	                     * NULL while empty */
	size_t in_len;
	struct st_buf out;              /* toward the apiserver; every byte reported to ep */
	struct cs_front *anext, *aprev; /* in srv->fronts */
	struct cs_h2conn *h2; /* the connection's HTTP/2 session (front_h2.c); NULL: HTTP/1.1 */
	struct cs_h2req *h2r; /* a stream front's HTTP/2 stream; NULL: a connection */
	char orig_dst[64];    /* SO_ORIGINAL_DST when the connection was DNAT'd, else "" */
	char node[CS_NODE_NAME_MAX_BYTES + 1]; /* the request's node, "" until routed */
	bool forwarded;     /* the node's tunnel is another replica's: the stream goes there */
	uint32_t fwd_caps;  /* when forwarded: the node's edge capabilities (the directory's) */
	struct cs_relay rl; /* the request and its answer (relay.h) */
	/* waiting for the node's redial (CS_FRONT_RECONNECT; request_reconnect.c) */
	struct cs_front *wnext, *wprev; /* in srv->reconnect_waiting while waiting */
	uint64_t rc_since_ms;           /* this request first waited; 0: it has not */
	uint64_t rc_parked_ms;          /* the current wait began */
	int rc_outcome;                 /* how the last wait ended (enum cs_reconnect_outcome) */
	bool rc_by_ip;                  /* it names the node by an IP (DNAT'd, or Host) */
	/* A forwarded request without a body keeps its head until the first answer byte: the
	 * holder may have lost the node a moment before the stream came (it answers ERROR
	 * unreachable), and the request is then routed again as if it had just come. */
	uint8_t *retry_head; /* NULL: none kept */
	size_t retry_len;
	struct cs_tunnel *fwd_link;       /* the peer link the request went to */
	struct cs_tunnel *fwd_refused_by; /* ... that answered unreachable: not tried again
	                                   * until a peer announces the node */
	uint64_t started_ms;
	lws_sorted_usec_list_t sul_answer; /* armed in WAIT when the answer has a deadline */
	/* authentication and authorization (authz_req.c) */
	struct cs_authz_user *cert_user;      /* the client certificate's user; NULL: none */
	bool cert_refused;                    /* its subject is not in --stream-allowed-subjects */
	struct cs_authz_user *tok_user;       /* this request's bearer-token user (owned) */
	const struct cs_authz_user *req_user; /* this request's user (cert_user or tok_user);
	                                       * NULL until authenticated */
	uint64_t az_job; /* the apiserver call this request waits for in ROUTING; 0: none */
	uint8_t az_next; /* the next subresource of the request to ask a SAR about */
	bool az_allowed; /* this request is authorized */
	int az_fail;     /* a call decided the answer: 401 (TokenReview), 500 (SAR error) */
	/* The access log line of the request in progress (request.c): one per request, written
	 * when it ends however it ends, with the stream id the edge's line has too. */
	struct {
		bool active;  /* a request is in progress and not logged yet */
		uint64_t sid; /* its stream, 0 before one opened */
		uint64_t started_ms;
		uint64_t started_us; /* for the TTFB histogram; 0 once observed */
		uint64_t to_edge;    /* request bytes sent into the stream */
		uint64_t to_client;  /* answer bytes queued toward the apiserver, ours included */
		uint64_t waited_ms;  /* waited for the node's redial */
		char method[16];
		char path[192]; /* without the query: exec's command= may carry secrets */
	} acc;
};

/* ---- front.c --------------------------------------------------------------------------- */

/* A zeroed front made a request front of @srv on @wsi (an HTTP/1.1 connection, or an HTTP/2
 * stream on its connection's wsi): endpoint, relay, output queue, the server's list. */
void cs__front_init(struct cs_front *f, struct cs_server *srv, struct lws *wsi);

/* Undo cs__front_init: the request's stream removed (what it held credited), its user, queues
 * and list place freed; @f itself is the caller's. */
void cs__front_release(struct cs_front *f);

/* Queue @n bytes at @p toward the apiserver (and ask for WRITEABLE). 0, -EMSGSIZE, -ENOMEM. */
int cs__front_queue(struct cs_front *f, const void *p, size_t n);

/* Parse and dispatch the input kept in f->in (heads, bytes waiting for the stream). */
void cs__front_process(struct cs_front *f);

/* Put @n bytes (a request head kept for a retry) back in front of the input. 0 or -EMSGSIZE,
 * -ENOMEM. */
int cs__front_unread(struct cs_front *f, const uint8_t *p, size_t n);

/* Append @n bytes to the input (a stream front's head being built). 0, -EMSGSIZE, -ENOMEM. */
int cs__front_append(struct cs_front *f, const uint8_t *p, size_t n);

/* The request's node for log lines, or NULL before routing. */
const char *cs__front_node(const struct cs_front *f);

/* Set the connection's lws timeout (no-op for a stream front: its connection keeps its own). */
void cs__front_set_timeout(struct cs_front *f, enum pending_timeout reason, int secs);

/* ---- front_h2.c, front_h2_stream.c, front_h2_alpn.c (front_h2_int.h between them) ----- */

/* Concurrent streams per HTTP/2 connection (SETTINGS_MAX_CONCURRENT_STREAMS; Go's server
 * default is 250, and kube-apiserver's transport opens at most that many before waiting). */
#define CS_H2_MAX_STREAMS 250u

/* The TLS handshake of @f chose ALPN h2 (front_h2.c's select callback). */
bool cs__h2_negotiated(const struct cs_front *f);
/* Make @f (a connection) an HTTP/2 connection: the server session and its SETTINGS. 0 or
 * -ENOMEM. */
int cs__h2_start(struct cs_front *f);
/* Bytes read on an HTTP/2 connection: 0, or -1 to close it. */
int cs__h2_rx(struct cs_front *f, const uint8_t *p, size_t len);
/* WRITEABLE on an HTTP/2 connection: 0, or -1 to close it. */
int cs__h2_writeable(struct cs_front *f);
/* The HTTP/2 connection closes: every stream front goes (its tunnel stream with it). */
void cs__h2_free(struct cs_front *f);
/* Draining: GOAWAY (streams in progress finish; new ones go to another connection). */
void cs__h2_drain(struct cs_front *f);
/* A stream front's answer bytes (HTTP/1.1, h2answer.h): 0, -EMSGSIZE, -EBADMSG, -ENOMEM. */
int cs__h2_queue(struct cs_front *f, const void *p, size_t n);
/* A stream front's answer is over (@cut: cut short, the stream is reset after what was
 * queued): END_STREAM or RST_STREAM, and the front waits for nghttp2 to close the stream. */
void cs__h2_answer_end(struct cs_front *f, bool cut);
/* A stream front's client cannot be reached any more (the tunnel's cut): what it held is
 * dropped and the stream is reset. */
void cs__h2_cut(struct cs_front *f);
/* Install the ALPN choice (h2, then http/1.1) on the stream port's TLS context
 * (front_h2_alpn.c). 0, or -ENOSYS (an ERR line said why) when this executable's
 * SSL_get0_alpn_selected is not the one liblws calls: then only HTTP/1.1 is offered. */
int cs__h2_alpn_install(void *ssl_ctx);
/* This executable's SSL_get0_alpn_selected is the one the dynamic linker gives liblws. */
bool cs__h2_interposed(void);

/* ---- request.c ------------------------------------------------------------------------- */

/* Starts @req (a view into f->in). Returns false when it must wait for a pod lookup: the head
 * then stays in f->in and is parsed again once the answer is in. */
bool cs__request_start(struct cs_front *f, const struct st_http_request *req);

/* Request bytes (body or upgraded stream) into the stream. Returns bytes taken (0: the stream
 * is full or the body has ended), or -1 after failing the request. */
ssize_t cs__request_forward(struct cs_front *f, const uint8_t *p, size_t len);

/* Ends the request with failure @why: our own answer (@status, or the reason's when 0, and
 * @message) if nothing was answered yet, then close. */
void cs__request_fail(struct cs_front *f, int status, enum cs_err_reason why, const char *message);

/* The pod lookup finished: route the kept head again. */
void cs__request_pod_resolved(struct cs_front *f, bool ok);

/* The request's wait for its node's redial is over (@outcome, enum cs_reconnect_outcome): out
 * of the waiting list, back to HEAD; the caller parses the kept head again. */
void cs__request_unpark(struct cs_front *f, int outcome);

/* The connection is closing: end the stream (REMOVE), free the request's state. */
void cs__request_cleanup(struct cs_front *f);

/* ---- request_route.c ------------------------------------------------------------------- */

/* Which tunnel @req is for (this replica's, or the peer link to the node's holder: then
 * f->forwarded). NULL after failing the request, or when it waits for a pod lookup, a review
 * or the node's redial (*@wait set). */
struct cs_tunnel *cs__request_route(struct cs_front *f, const struct st_http_request *req,
                                    bool *wait);

/* ---- request_reconnect.c --------------------------------------------------------------- */

/* @node is connected nowhere: does the request wait for the node's redial? true: it waits
 * (CS_FRONT_RECONNECT, the head kept in f->in). false: it is answered 503 now, and @note says
 * why when it waited or could not (else ""). */
bool cs__request_park(struct cs_front *f, const char *node, bool by_ip, char *note, size_t cap);

/* ---- authz_req.c ----------------------------------------------------------------------- */

/* The TLS peer on the first bytes: false to close (a certificate that did not verify, or none
 * when only certificates are accepted). Sets cert_user and cert_refused. */
bool cs__authz_on_tls(struct cs_front *f);

/* The request's user (certificate or bearer token): 1 go on, 0 wait (ROUTING; the head is
 * parsed again once the TokenReview is answered), -1 the request was failed (401/403). */
int cs__authz_authenticate(struct cs_front *f, const struct st_http_request *req);

/* May the request's user do it on f->node: 1 go on, 0 wait (a SubjectAccessReview), -1 the
 * request was failed (403; 500 when the apiserver could not answer). */
int cs__authz_authorize(struct cs_front *f, const struct st_http_request *req);

/* A stream front takes its connection's certificate user (a shared reference). */
void cs__authz_share_tls(struct cs_front *dst, const struct cs_front *conn);

/* The request's head was consumed: forget its user and decisions. */
void cs__authz_request_done(struct cs_front *f);
/* The connection is closing. */
void cs__authz_front_free(struct cs_front *f);

/* An apiserver connection as a stream endpoint. */
extern const struct cs_endpoint_ops cs__front_endpoint_ops;

#endif /* CLOUDSTREAM_FRONT_H */
