/*
 * cri/grpc.h — gRPC framing for unary calls over HTTP/2 (spec: cri-streaming.md §4). Pure.
 *
 * A gRPC message on the wire is 1 byte compressed-flag (always 0 here: no grpc-encoding is
 * negotiated) + 4-byte big-endian length + the protobuf bytes. The call's outcome is in the
 * trailers: grpc-status (a number) and grpc-message (percent-encoded UTF-8).
 */
#ifndef CRI_GRPC_H
#define CRI_GRPC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CRI_GRPC_PREFIX_BYTES 5u
/* Largest response accepted (the kubelet allows 16 MiB). */
#define CRI_GRPC_MAX_MESSAGE_BYTES (16u * 1024u * 1024u)

enum cri_grpc_code {
	CRI_GRPC_OK = 0,
	CRI_GRPC_CANCELLED = 1,
	CRI_GRPC_UNKNOWN = 2,
	CRI_GRPC_INVALID_ARGUMENT = 3,
	CRI_GRPC_DEADLINE_EXCEEDED = 4,
	CRI_GRPC_NOT_FOUND = 5,
	CRI_GRPC_ALREADY_EXISTS = 6,
	CRI_GRPC_PERMISSION_DENIED = 7,
	CRI_GRPC_RESOURCE_EXHAUSTED = 8,
	CRI_GRPC_FAILED_PRECONDITION = 9,
	CRI_GRPC_ABORTED = 10,
	CRI_GRPC_OUT_OF_RANGE = 11,
	CRI_GRPC_UNIMPLEMENTED = 12,
	CRI_GRPC_INTERNAL = 13,
	CRI_GRPC_UNAVAILABLE = 14,
	CRI_GRPC_DATA_LOSS = 15,
	CRI_GRPC_UNAUTHENTICATED = 16,
};

/* cri_grpc_prefix() - write the 5-byte prefix for a message of @len bytes. */
void cri_grpc_prefix(uint8_t out[CRI_GRPC_PREFIX_BYTES], size_t len);

/*
 * cri_grpc_unframe() - the one message in a unary response body.
 * Returns 0 with *@msg and *@msg_len set; -EAGAIN when @len holds only part of it; -EBADMSG for a
 * compressed message or bytes after it; -EMSGSIZE over CRI_GRPC_MAX_MESSAGE_BYTES; -ENODATA for
 * an empty body.
 */
int cri_grpc_unframe(const uint8_t *body, size_t len, const uint8_t **msg, size_t *msg_len);

/* cri_grpc_parse_status() - a grpc-status value ("0".."16", or any other number): the code,
 * or -EBADMSG when it is not a decimal number. */
int cri_grpc_parse_status(const char *value, size_t len);

/* cri_grpc_decode_message() - percent-decode a grpc-message value into @out (NUL-terminated,
 * cut at @cap - 1 bytes; malformed escapes are kept as they are). Returns the length. */
size_t cri_grpc_decode_message(const char *value, size_t len, char *out, size_t cap);

/* cri_grpc_timeout() - the grpc-timeout header value for @ms ("1500m", "120S", ...). */
void cri_grpc_timeout(char *out, size_t cap, uint64_t ms);

/* cri_grpc_code_name() - "NOT_FOUND", ...; "UNKNOWN_CODE" otherwise. */
const char *cri_grpc_code_name(int code);

/* cri_grpc_errno() - the negative errno a call returns for a non-OK code. */
int cri_grpc_errno(int code);

#endif /* CRI_GRPC_H */
