/*
 * cloudstream/src/door_int.h — the front door's types, shared by door.c (the listeners and the
 * connection: lws glue, the client's identity, the output queue, metrics), door_conn.c (the
 * CONNECT on a connection: its answer, its stream as a stream endpoint, the relay) and
 * door_route.c (which node it goes to, and its waits for a pod lookup or a node's redial).
 * Private to those three files. Loop thread only.
 */
#ifndef CLOUDSTREAM_DOOR_INT_H
#define CLOUDSTREAM_DOOR_INT_H

#include <certs/certs.h>

#include "cs.h"
#include "door.h"

#define DOOR_IN_CAP            (CS_DOOR_MAX_HEAD_BYTES + 64u * 1024u)
#define DOOR_WRITE_MAX         (256u * 1024u)
#define DOOR_MAX_KUBELET_PORTS 8u

enum door_state {
	DOOR_HEAD = 0,  /* reading the CONNECT head; no stream */
	DOOR_LOOKUP,    /* head read (ip, port); the apiserver is asked which pod has the IP; no
	                * stream, nothing more is read */
	DOOR_DIALING,   /* TCP_CONNECT sent, waiting for OPENED or ERROR; the deadline is armed; no
	                * answer byte sent yet */
	DOOR_RELAY,     /* 200 sent: bytes both ways until either side ends */
	DOOR_RECONNECT, /* head read; the node is connected nowhere but between tunnels: waits
	                 * for its redial (--node-reconnect-grace); no stream */
	DOOR_CLOSING,   /* write what is queued, then close; no stream, nothing more is read */
};

/* What became of each CONNECT (cloudstream_front_door_connects_total{result}). */
enum door_result {
	DOOR_R_OK = 0,
	DOOR_R_BAD_REQUEST,
	DOOR_R_FORBIDDEN,
	DOOR_R_NO_ROUTE,
	DOOR_R_NO_SESSION,
	DOOR_R_BASE_EDGE,
	DOOR_R_LIMIT,
	DOOR_R_EDGE_REFUSED,
	DOOR_R_TIMEOUT,
	DOOR_R_EDGE_GONE,
	DOOR_R_DRAINING,
	DOOR_R_COUNT,
};
/* Their label values, in that order (door_conn.c). */
extern const char *const cs__door_result_names[DOOR_R_COUNT];

struct door_set {
	unsigned socket_mode; /* --front-door-socket-mode */
	uint16_t kubelet_ports[DOOR_MAX_KUBELET_PORTS];
	size_t n_kubelet_ports;
	struct lws_vhost *vh_tls, *vh_uds;
	struct door *all; /* every connection (list) */
	size_t open;      /* connections now */
	size_t relays;    /* of which in DOOR_RELAY */
	uint64_t accepted, refused_tls;
	uint64_t results[DOOR_R_COUNT];
	uint64_t dial_ms_sum, dial_count; /* CONNECT to 200 */
};

struct door {
	struct cs_endpoint ep; /* its TCP_CONNECT stream (tunnel.h) */
	struct cs_server *srv;
	struct lws *wsi;
	enum door_state state;
	bool uds;       /* came in on the unix socket */
	bool checked;   /* the TLS client certificate was looked at */
	bool refused;   /* ... and its subject is not in --front-door-allowed-subjects */
	bool rx_paused; /* our lws_rx_flow_control(wsi, 0) */
	bool logged;    /* the access line was written */
	uint8_t *in;    /* unprocessed input; NULL while empty */
	size_t in_len;
	struct st_buf out; /* toward the apiserver; every byte reported to ep */
	char caller[CERTS_MAX_NAME_BYTES +
	            1]; /* the certificate's CN, or uid=N for the unix socket */
	char target[CS_DOOR_MAX_HOST_BYTES + 8]; /* host:port as asked */
	char node[CS_NODE_NAME_MAX_BYTES + 1];
	uint64_t started_ms;
	uint64_t to_edge, to_client;
	int status; /* what the apiserver was answered, 0 before */
	lws_sorted_usec_list_t sul_dial;
	/* the CONNECT's target, once its head was read */
	char ip[64];              /* an IP literal (canonical), or "" for a node name (in node) */
	uint16_t port;            /* its port */
	bool pod;                 /* the IP is a pod's (--front-door-pod-ips), on node */
	bool looked_up;           /* the apiserver was asked about the IP already */
	bool lookup_ok;           /* ... and answered */
	uint64_t ordinal;         /* never reused: what the pod lookup's answer comes back to */
	uint64_t rc_since_ms;     /* DOOR_RECONNECT: first waited; 0: never */
	uint64_t rc_parked_ms;    /* ... the current wait began */
	uint64_t rc_waited_ms;    /* waited in all */
	struct door *next, *prev; /* door_set.all */
};

static inline struct door_set *cs__door_set(struct cs_server *srv)
{
	return srv->door;
}

/* ---- door_conn.c ------------------------------------------------------------------------ */

/* Our own answer before the 200 (@status with the reason phrase @why), then close. */
void cs__door_fail(struct door *d, int status, enum door_result r, const char *why);

/* Reading follows the state: on while the head is incomplete, paused while input waits for
 * the stream's room, and once closing. */
void cs__door_update_rx(struct door *d);

/* The CONNECT's head was parsed into the door (ip or node, port): route it and open its
 * stream. Runs again once a pod lookup is answered or a wait for the node is over. */
void cs__door_start(struct door *d);

/* A connection as a stream endpoint. */
extern const struct cs_endpoint_ops cs__door_endpoint_ops;

/* Bytes from the apiserver (one RAW_RX): the head, then the relay. Returns 0, or -1 to close
 * the connection now. */
int cs__door_rx(struct door *d, const uint8_t *p, size_t len);

/* Input waiting in d->in is fed on (from WRITEABLE: the stream has room again). */
void cs__door_process(struct door *d);

/* The access line of the connection's CONNECT (once; nothing before a head was read). */
void cs__door_access_line(struct door *d, const char *outcome);

/* ---- door_route.c ----------------------------------------------------------------------- */

/* Which connected node the CONNECT names; NULL after failing the connection, while the
 * apiserver is asked about a pod IP (DOOR_LOOKUP), or while it waits for the node's redial
 * (DOOR_RECONNECT). When another replica holds the node's tunnel (peer.h): the peer link to
 * it, with *@fwd set and the node's caps in *@fwd_caps. */
struct cs_tunnel *cs__door_resolve(struct door *d, bool *fwd, uint32_t *fwd_caps);

/* The CONNECT's wait for its node's redial is over (@outcome, enum cs_reconnect_outcome):
 * routed again soon, unless the client went (CS_RECONNECT_CLIENT_GONE). */
void cs__door_unpark(struct door *d, int outcome);

#endif /* CLOUDSTREAM_DOOR_INT_H */
