/*
 * stream/limits.h — every byte cap in one place. Units are in the names.
 *
 * A limit is the largest accepted value: a value equal to the limit is accepted, limit + 1 is
 * refused with -EMSGSIZE (never truncated). Tests check each at -1/0/+1.
 */
#ifndef STREAM_LIMITS_H
#define STREAM_LIMITS_H

/* ---- tunnel messages ------------------------------------------------------------------------ */

/* Largest tunnel message (header + payload) accepted or produced. KubeEdge truncates payloads
 * after 1 MiB (MaxRespBodyLength = 1 << 20); we refuse instead. */
#define ST_MAX_MESSAGE_BYTES (1u << 20)

/* A Go uvarint of a uint64 takes at most 10 bytes. */
#define ST_MAX_UVARINT_BYTES 10u

/* Message header: uvarint ConnectID + uvarint type. */
#define ST_MAX_MESSAGE_HEADER_BYTES (2u * ST_MAX_UVARINT_BYTES)

/* DATA payload we produce by default toward any peer (upstream uses 256 bytes; 64 KiB keeps the
 * per-message overhead negligible and stays well inside one websocket read). */
#define ST_DEFAULT_DATA_PAYLOAD_BYTES (64u * 1024u)

/* ---- JSON connect request ------------------------------------------------------------------- */

/* Largest JSON connect payload accepted. Upstream copies every apiserver header into it; kubelet
 * headers are capped at ST_MAX_HTTP_HEAD_BYTES, JSON escaping can at most ~6x a byte. */
#define ST_MAX_CONNECT_JSON_BYTES (256u * 1024u)
/* Bytes of decoded strings (path, query, header names and values) one connect request may hold. */
#define ST_MAX_CONNECT_STRINGS_BYTES (64u * 1024u)
/* Header entries (name/value pairs, counting each value of a repeated header). */
#define ST_MAX_CONNECT_HEADERS 64u
/* JSON nesting depth accepted (the real document has depth 3). */
#define ST_MAX_CONNECT_JSON_DEPTH 8u

/* ---- HTTP/1.1 heads ------------------------------------------------------------------------- */

/* Request or response head, start line to the empty line inclusive. */
#define ST_MAX_HTTP_HEAD_BYTES (64u * 1024u)
/* Header fields in one head. */
#define ST_MAX_HTTP_HEADERS 64u
/* Chunk-size line of chunked encoding, extensions included ("ffffffff;ext=..\r\n"). */
#define ST_MAX_CHUNK_LINE_BYTES 256u
/* Trailer section after the last chunk. */
#define ST_MAX_CHUNK_TRAILER_BYTES 4096u
/* Kubernetes Status JSON body we build. */
#define ST_MAX_STATUS_JSON_BYTES 2048u

/* ---- extensions ----------------------------------------------------------------------------- */

/* Extension control messages (hello, window, error, ...) are small. */
#define ST_MAX_EXT_PAYLOAD_BYTES 4096u
/* A peer link's queue of directory messages (st_session_send_peer): four full messages, with
 * a 3-byte header each. */
#define ST_PEER_QUEUE_BYTES (4u * (ST_MAX_EXT_PAYLOAD_BYTES + 3u))
/* Reason text carried in an extension ERROR message. */
#define ST_MAX_ERROR_REASON_BYTES 1024u
/* Replica id in HELLO. */
#define ST_MAX_REPLICA_ID_BYTES 128u
/* Default per-stream credit window: enough for one stream to fill a fast link (BDP of
 * 1 Gbit/s x 8 ms), small enough that 1000 stalled streams cost bounded memory. */
#define ST_DEFAULT_STREAM_WINDOW_BYTES (1024u * 1024u)
/* Largest credit window a peer may announce. */
#define ST_MAX_STREAM_WINDOW_BYTES (16u * 1024u * 1024u)
/* The first window an edge grants a LOGS or METRIC stream (and announces, PROTOCOL.md §5.3):
 * the cloud sends such a stream at most a request body, so a quiet `logs -f` reserves 4 KiB,
 * not the first window of an upload; it grows by doubling if a body does come. */
#define ST_QUIET_STREAM_WINDOW_BYTES 4096u

/* ---- runtime: relay queues and worker pool (stream/buf.h, stream/workq.h) -------------------- */

/* Relay queue per direction: pause the source above the high mark, resume at or below the low
 * mark (measured in spec/libwebsockets-notes.md §4/§7: full speed on loopback TLS). */
#define ST_RELAY_HIGH_WATER_BYTES (256u * 1024u)
#define ST_RELAY_LOW_WATER_BYTES  (128u * 1024u)
/* Worker threads in one pool; the daemons use 2-4. */
#define ST_WORKQ_MAX_THREADS 64u
/* Items one pool may hold (submitted, completion not yet run); slots are allocated up front. */
#define ST_WORKQ_MAX_PENDING 65536u

/* ---- sessions ------------------------------------------------------------------------------- */

/* Streams open at once in one tunnel session (one edge node). */
#define ST_DEFAULT_MAX_STREAMS 1024u
/* Bytes queued toward the peer per stream before the source is paused. */
#define ST_DEFAULT_STREAM_OUT_BYTES (256u * 1024u)
/* With credit flow control: what each stream may queue toward the peer on its own reservation
 * (charged with its first window), so a stream always makes progress while the budgets are
 * full; what it queues beyond this must fit the budgets' room (stream/session.h). */
#define ST_STREAM_OUT_FLOOR_BYTES 4096u
/* Base protocol: stream IDs a session remembers having sent REMOVE for (or owing one), so a
 * peer's repeated REMOVE is known as answered. KubeEdge's cloud resends REMOVE until it sees
 * ours, for about one round trip: only the streams ended within that time need remembering. */
#define ST_BASE_ENDED_IDS 64u

#endif /* STREAM_LIMITS_H */
