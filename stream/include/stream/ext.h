/*
 * stream/ext.h — our extensions to the KubeEdge tunnel protocol: negotiation, extension message
 * payloads and the per-stream state machine. Wire details: stream/PROTOCOL.md.
 *
 * Negotiation: the edge sends `X-Cloudstream-Tunnel: v=1; caps=...; window=...; replica=...` on
 * the websocket upgrade; a cloud that supports extensions echoes the agreed subset in the 101
 * response. No header, or no echo, means the base protocol: no extension message, no BINARY
 * frame is ever sent to that peer.
 *
 * Pure code; any thread.
 */
#ifndef STREAM_EXT_H
#define STREAM_EXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <stream/frame.h>
#include <stream/limits.h>

/* The upgrade request header and its echo in the 101 response. */
#define ST_EXT_HEADER "X-Cloudstream-Tunnel"
/* On a refused tunnel upgrade, cloudstream says why in this header too (the body is the same
 * text): "<reason>: <detail>", printable ASCII. */
#define ST_REFUSAL_HEADER     "X-Cloudstream-Refusal"
#define ST_REFUSAL_HEADER_LWS "x-cloudstream-refusal:"
/* The same, as libwebsockets looks custom headers up (lower case, with the colon). */
#define ST_EXT_HEADER_LWS "x-cloudstream-tunnel:"
/* The extension protocol version this code speaks. */
#define ST_EXT_VERSION 1u
/* Longest header value accepted or produced. */
#define ST_EXT_HEADER_MAX_BYTES 512u

/* Capabilities (bit set). */
enum st_ext_cap {
	ST_CAP_FLOW = 1u << 0,         /* per-stream credit flow control (WINDOW) */
	ST_CAP_HALF_CLOSE = 1u << 1,   /* HALF_CLOSE: end of one direction */
	ST_CAP_ERROR = 1u << 2,        /* ERROR: a stream failed, with code and reason */
	ST_CAP_BINARY = 1u << 3,       /* BINARY websocket frames may be sent */
	ST_CAP_TCP = 1u << 4,          /* TCP_CONNECT: raw TCP to an allow-listed edge port */
	ST_CAP_RAW_RESPONSE = 1u << 5, /* LOGS/METRIC DATA carries the backend's whole response */
	ST_CAP_OPENED = 1u << 6,       /* OPENED: the edge acknowledges a TCP_CONNECT's dial */
	ST_CAP_PEER = 1u << 7,         /* a link between two cloudstream replicas: NODE_UP,
	                                * NODE_DOWN, SYNC, SYNC_END (never offered by an edge) */
	ST_CAP_RECONNECT = 1u << 8,    /* RECONNECT: a draining cloud asks the edge to open a new
	                                * tunnel before it closes this one (make before break) */
};
#define ST_CAP_ALL                                                                                 \
	(ST_CAP_FLOW | ST_CAP_HALF_CLOSE | ST_CAP_ERROR | ST_CAP_BINARY | ST_CAP_TCP |             \
	 ST_CAP_RAW_RESPONSE | ST_CAP_OPENED | ST_CAP_RECONNECT)
/* Every capability this code knows: ST_CAP_ALL (what edges and clouds offer each other) and the
 * peer links' own. */
#define ST_CAP_KNOWN (ST_CAP_ALL | ST_CAP_PEER)

/* One side's offer (or the agreed result). */
struct st_ext_offer {
	uint32_t version;      /* >= 1 */
	uint32_t caps;         /* enum st_ext_cap bits; unknown names are dropped when parsing */
	uint32_t window_bytes; /* the initial per-stream window this side grants its peer;
				  0 = not given (ST_DEFAULT_STREAM_WINDOW_BYTES) */
	char replica_id[ST_MAX_REPLICA_ID_BYTES + 1]; /* [A-Za-z0-9._-]*, "" if not given */
	/* Edge only, a hint: the edge counts the tunnel alive while it hears from the cloud at
	 * least every this many ms, so the cloud may answer its PINGs that late, coalesced
	 * (PROTOCOL.md §5.1); 0 = not given (every PING answered at once). */
	uint32_t pong_within_ms;
};

/* pong-within bounds: below the lower one there is nothing to coalesce at a 5 s ping. */
#define ST_EXT_PONG_WITHIN_MIN_MS 1000u
#define ST_EXT_PONG_WITHIN_MAX_MS 3600000u

/*
 * st_ext_offer_parse() - parse a header value.
 * Unknown parameters and capability names are ignored (forward compatibility); whitespace around
 * ';', '=' and ',' is allowed. Returns 0; -EBADMSG (no or bad "v", a window over
 * ST_MAX_STREAM_WINDOW_BYTES or under 1 KiB, a bad replica id, a malformed parameter);
 * -EMSGSIZE (value over ST_EXT_HEADER_MAX_BYTES).
 */
int st_ext_offer_parse(const char *value, size_t len, struct st_ext_offer *out);

/* st_ext_offer_format() - write a header value (not NUL-terminated). Returns its length, or
 * -EMSGSIZE. Capabilities are written in bit order. */
ssize_t st_ext_offer_format(char *out, size_t cap, const struct st_ext_offer *offer);

/*
 * st_ext_negotiate() - server side: what to echo, given our offer and the client's.
 * The agreed version is the lower one, caps the intersection; window_bytes and replica_id are
 * ours (each side announces its own). Returns 0.
 */
int st_ext_negotiate(const struct st_ext_offer *ours, const struct st_ext_offer *theirs,
                     struct st_ext_offer *agreed);

/*
 * st_ext_check_echo() - client side: validate the server's echo against our offer.
 * Returns 0, or -EPROTO when the echo claims a capability we did not offer or a higher version.
 */
int st_ext_check_echo(const struct st_ext_offer *ours, const struct st_ext_offer *echo);

/* ---- extension message payloads ----------------------------------------------------------- */

/* Codes carried by ERROR. */
enum st_ext_error_code {
	ST_EXT_ERR_INTERNAL = 1,    /* the sender failed for its own reasons */
	ST_EXT_ERR_REFUSED = 2,     /* request not allowed (path/port outside the allow-list) */
	ST_EXT_ERR_UNREACHABLE = 3, /* backend could not be reached */
	ST_EXT_ERR_TIMEOUT = 4,     /* backend did not answer in time */
	ST_EXT_ERR_NOT_FOUND = 5,   /* pod, container or port not found */
	ST_EXT_ERR_LIMIT = 6,       /* a limit was hit (streams, memory) */
	ST_EXT_ERR_PROTOCOL = 7,    /* the stream broke the protocol */
	ST_EXT_ERR_BAD_REQUEST = 8, /* the request itself is invalid */
};

/* st_ext_error_http_status() - the HTTP status cloudstream answers with for an ERROR code
 * (unknown codes: 502). */
int st_ext_error_http_status(uint64_t code);
/* st_ext_error_name() - "refused", "unreachable", ...; "unknown" otherwise. */
const char *st_ext_error_name(uint64_t code);

struct st_ext_hello {
	uint64_t version;
	uint64_t caps;
	uint64_t window_bytes;
	const char *replica_id; /* view into the payload, not NUL-terminated */
	size_t replica_id_len;
};

struct st_ext_error {
	uint64_t code;      /* enum st_ext_error_code, or unknown */
	const char *reason; /* view, UTF-8 text, not NUL-terminated */
	size_t reason_len;
};

struct st_ext_tcp_connect {
	uint64_t port;      /* 1..65535 */
	const char *target; /* view: name of an allow-list entry on the edge, may be empty */
	size_t target_len;
};

/*
 * Encoders write a payload into @out and return its length, or -EMSGSIZE (does not fit @cap,
 * or a field over its limit) / -EINVAL (a zero window increment, a port out of range).
 * Decoders take a whole payload and return 0, -EBADMSG (truncated, trailing bytes, bad values)
 * or -EMSGSIZE (over ST_MAX_EXT_PAYLOAD_BYTES or a field limit). Views point into the payload.
 */
ssize_t st_ext_hello_encode(uint8_t *out, size_t cap, const struct st_ext_hello *h);
int st_ext_hello_decode(const uint8_t *p, size_t len, struct st_ext_hello *out);
ssize_t st_ext_window_encode(uint8_t *out, size_t cap, uint64_t increment);
int st_ext_window_decode(const uint8_t *p, size_t len, uint64_t *increment);
ssize_t st_ext_error_encode(uint8_t *out, size_t cap, const struct st_ext_error *e);
int st_ext_error_decode(const uint8_t *p, size_t len, struct st_ext_error *out);
ssize_t st_ext_tcp_connect_encode(uint8_t *out, size_t cap, const struct st_ext_tcp_connect *t);
int st_ext_tcp_connect_decode(const uint8_t *p, size_t len, struct st_ext_tcp_connect *out);
/* HALF_CLOSE has an empty payload. */

/* ---- per-stream state machine --------------------------------------------------------------- */

enum st_stream_state {
	ST_STREAM_S_IDLE = 0,               /* no connect sent or received yet */
	ST_STREAM_S_OPEN = 1,               /* both directions may carry DATA */
	ST_STREAM_S_HALF_CLOSED_LOCAL = 2,  /* we sent HALF_CLOSE: we send no more DATA */
	ST_STREAM_S_HALF_CLOSED_REMOTE = 3, /* peer sent HALF_CLOSE: it sends no more DATA */
	ST_STREAM_S_CLOSED = 4,             /* REMOVE or ERROR either way, or both half-closes */
};

enum st_stream_event {
	ST_STREAM_E_SEND_CONNECT = 0,
	ST_STREAM_E_RECV_CONNECT,
	ST_STREAM_E_SEND_DATA,
	ST_STREAM_E_RECV_DATA,
	ST_STREAM_E_SEND_HALF_CLOSE,
	ST_STREAM_E_RECV_HALF_CLOSE,
	ST_STREAM_E_SEND_REMOVE,
	ST_STREAM_E_RECV_REMOVE,
	ST_STREAM_E_SEND_ERROR,
	ST_STREAM_E_RECV_ERROR,
	ST_STREAM_E_COUNT,
};

/*
 * st_stream_next() - the state after @event in @state (the table in PROTOCOL.md).
 * Returns 0 and sets *next; -EPROTO when the peer's message is not allowed in that state (reset
 * the stream); -EINVAL when our own send is not allowed (a bug in the caller). Received
 * messages on a CLOSED stream are allowed (in flight when we closed) and keep it CLOSED.
 */
int st_stream_next(enum st_stream_state state, enum st_stream_event event,
                   enum st_stream_state *next);

const char *st_stream_state_name(enum st_stream_state state);

#endif /* STREAM_EXT_H */
