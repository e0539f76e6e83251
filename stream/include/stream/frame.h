/*
 * stream/frame.h — the tunnel message codec, byte-compatible with KubeEdge's stream tunnel.
 *
 * One websocket message carries one tunnel message:
 *
 *     uvarint(ConnectID) uvarint(type) payload...        (payload = the rest of the message)
 *
 * uvarint is Go's binary.PutUvarint (unsigned LEB128, at most 10 bytes). ConnectID 300 with type
 * DATA encodes as `ac 02 03`. Messages are at most ST_MAX_MESSAGE_BYTES; larger ones are refused,
 * never truncated. See stream/PROTOCOL.md.
 *
 * Pure code: no allocation, no I/O; every function may be called from any thread.
 */
#ifndef STREAM_FRAME_H
#define STREAM_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <stream/limits.h>

/* Message types. 0..6 are KubeEdge's; 64.. are our extensions, sent only after negotiation
 * (stream/ext.h defines their payloads). The gap leaves room for upstream to grow. */
enum st_msg_type {
	ST_MSG_LOGS_CONNECT = 0,   /* cloud->edge, JSON connect request */
	ST_MSG_EXEC_CONNECT = 1,   /* cloud->edge, JSON connect request */
	ST_MSG_METRIC_CONNECT = 2, /* cloud->edge, JSON connect request */
	ST_MSG_DATA = 3,           /* both, raw stream bytes */
	ST_MSG_REMOVE_CONNECT = 4, /* both, empty: my side of the stream is finished */
	ST_MSG_CLOSE_CONNECT = 5,  /* cloud->edge, ConnectID 0, UTF-8 text: drop the tunnel */
	ST_MSG_ATTACH_CONNECT = 6, /* cloud->edge, JSON connect request */
	ST_MSG_BASE_LAST = 6,
	ST_MSG_EXT_FIRST = 64,
	ST_MSG_HELLO = 64,       /* both, ConnectID 0: version, capabilities, replica, window */
	ST_MSG_WINDOW = 65,      /* both: credit grant for a stream */
	ST_MSG_HALF_CLOSE = 66,  /* both: sender wrote its last DATA on this stream */
	ST_MSG_ERROR = 67,       /* both: stream failed, code + reason */
	ST_MSG_TCP_CONNECT = 68, /* cloud->edge: raw TCP to an allow-listed local port */
	ST_MSG_OPENED = 69,      /* edge->cloud, empty: the TCP_CONNECT's dial succeeded */
	/* Peer links between cloudstream replicas only (ST_CAP_PEER), ConnectID 0: */
	ST_MSG_NODE_UP = 70,   /* the sender holds these nodes' tunnels (node, generation, ...) */
	ST_MSG_NODE_DOWN = 71, /* the sender no longer holds these nodes' tunnels */
	ST_MSG_SYNC = 72,      /* empty: a full list of the sender's nodes follows */
	ST_MSG_SYNC_END = 73,  /* empty: the full list is complete (forget the rest) */
	ST_MSG_RECONNECT = 74, /* cloud->edge, ConnectID 0: open a new tunnel, retire this one */
	ST_MSG_EXT_LAST = 74,
};

/* A decoded message: a view into the caller's buffer (valid while that buffer is). */
struct st_msg {
	uint64_t connect_id;    /* stream id (KubeEdge's MessID / ConnectID) */
	uint64_t type;          /* enum st_msg_type, or an unknown value the caller ignores */
	const uint8_t *payload; /* rest of the message; NULL only when payload_len is 0 */
	size_t payload_len;
};

/* st_uvarint_len() - bytes st_uvarint_encode() writes for @v (1..10). */
size_t st_uvarint_len(uint64_t v);

/* st_uvarint_encode() - write @v as a Go uvarint into @out; returns the byte count (1..10). */
size_t st_uvarint_encode(uint8_t out[ST_MAX_UVARINT_BYTES], uint64_t v);

/*
 * st_uvarint_decode() - read one Go uvarint.
 * @p, @len: input bytes.
 * @out: the value, set only on success.
 *
 * Returns the bytes consumed (>0), 0 when @p holds only a proper prefix of a uvarint (need more),
 * or -EBADMSG when the value overflows 64 bits (more than 10 bytes, or a 10th byte above 1) —
 * exactly the inputs Go's binary.Uvarint rejects. Non-minimal encodings (`80 00`) are accepted,
 * as Go accepts them.
 */
ssize_t st_uvarint_decode(const uint8_t *p, size_t len, uint64_t *out);

/*
 * st_msg_header_decode() - read the two uvarints that start a message.
 *
 * Returns the header length (>0), 0 if @p is a proper prefix of a header, or -EBADMSG. The
 * outputs are set only on success.
 */
ssize_t st_msg_header_decode(const uint8_t *p, size_t len, uint64_t *connect_id, uint64_t *type);

/*
 * st_msg_decode() - decode one complete websocket message.
 * @msg, @len: the whole reassembled message.
 * @out: filled on success; payload points into @msg.
 *
 * Returns 0, -EMSGSIZE when @len > ST_MAX_MESSAGE_BYTES, or -EBADMSG when the header is truncated
 * or a uvarint overflows. The type is not checked: unknown types are the caller's to ignore.
 */
int st_msg_decode(const uint8_t *msg, size_t len, struct st_msg *out);

/*
 * st_msg_header_encode() - write the header of a message into @out.
 *
 * Returns the header length, or -EMSGSIZE when @cap is too small. Lets a sender place the payload
 * right after the header (no copy) — see st_msg_max_payload().
 */
ssize_t st_msg_header_encode(uint8_t *out, size_t cap, uint64_t connect_id, uint64_t type);

/*
 * st_msg_encode() - write a whole message (header + @payload) into @out.
 *
 * Returns the message length, or -EMSGSIZE when it would exceed ST_MAX_MESSAGE_BYTES or @cap.
 * @payload may be NULL when @payload_len is 0.
 */
ssize_t st_msg_encode(uint8_t *out, size_t cap, uint64_t connect_id, uint64_t type,
                      const uint8_t *payload, size_t payload_len);

/* st_msg_max_payload() - the largest payload a message with this header may carry. */
size_t st_msg_max_payload(uint64_t connect_id, uint64_t type);

/* KubeEdge's own types (0..6). */
bool st_msg_type_is_base(uint64_t type);
/* LOGS/EXEC/METRIC/ATTACH_CONNECT and TCP_CONNECT: the messages that open a stream. */
bool st_msg_type_is_connect(uint64_t type);
/* "DATA", "EXEC_CONNECT", ... or "UNKNOWN"; never NULL. */
const char *st_msg_type_name(uint64_t type);

#endif /* STREAM_FRAME_H */
