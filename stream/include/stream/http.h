/*
 * stream/http.h — HTTP/1.x request and response heads, pure and bounded (picohttpparser-style).
 *
 * cloudstream reads the apiserver's request head to route it, and the backend's response head to
 * know where a response ends (so the apiserver's connection can carry the next request); the edge
 * reads the same heads toward its backends. Parsers return views into the caller's buffer and
 * allocate nothing; a result is valid while that buffer is.
 *
 * Strictness (request smuggling is the risk of a relay): lines end in CRLF or a bare LF; a bare CR,
 * NUL or other control byte, obs-fold (a line starting with a space), whitespace before a colon, a
 * non-token byte in a name or method, both Content-Length and Transfer-Encoding, differing
 * Content-Length values and any transfer coding other than a final "chunked" are refused.
 *
 * Thread-safety: pure functions; any thread.
 */
#ifndef STREAM_HTTP_H
#define STREAM_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <stream/limits.h>

/* One header field: views into the input, value trimmed of surrounding spaces/tabs. */
struct st_http_header {
	const char *name;
	size_t name_len;
	const char *value;
	size_t value_len;
};

struct st_http_request {
	const char *method; /* token, e.g. "POST" */
	size_t method_len;
	const char *target; /* request-target as sent: path and query */
	size_t target_len;
	const char *path; /* target up to '?' */
	size_t path_len;
	const char *query; /* after '?', without it; NULL when there is no '?' */
	size_t query_len;
	int minor_version; /* 0 or 1 (HTTP/1.0, HTTP/1.1) */
	struct st_http_header headers[ST_MAX_HTTP_HEADERS];
	size_t num_headers;
};

struct st_http_response {
	int minor_version; /* 0 or 1 */
	int status;        /* 100..999 */
	const char *reason;
	size_t reason_len;
	struct st_http_header headers[ST_MAX_HTTP_HEADERS];
	size_t num_headers;
};

/*
 * st_http_parse_request() - parse a request head.
 * @buf, @len: bytes received so far (the head and possibly what follows it).
 * @out: filled on success; partially written otherwise (do not use).
 *
 * Returns the head length including the empty line (>0), 0 when @buf holds a proper prefix of a
 * head, -EBADMSG when a complete line is malformed, -EMSGSIZE when the head exceeds
 * ST_MAX_HTTP_HEAD_BYTES or ST_MAX_HTTP_HEADERS.
 */
ssize_t st_http_parse_request(const uint8_t *buf, size_t len, struct st_http_request *out);

/* st_http_field_name_ok() / st_http_field_value_ok() - whether @s (@n bytes) may stand as a
 * field name (one or more RFC 9110 tchars) / value (visible ASCII, space, tab, obs-text) in a
 * head these parsers accept: for code that writes heads from fields another protocol carried. */
bool st_http_field_name_ok(const char *s, size_t n);
bool st_http_field_value_ok(const char *s, size_t n);

/* st_http_parse_response() - the same for a response head ("HTTP/1.1 200 OK"). */
ssize_t st_http_parse_response(const uint8_t *buf, size_t len, struct st_http_response *out);

/* st_http_header_find() - index of the first header named @name (ASCII case-insensitive), from
 * index @from on; -1 when there is none. */
ssize_t st_http_header_find(const struct st_http_header *headers, size_t n, const char *name,
                            size_t from);

/* st_http_header_has_token() - does any header named @name carry @token in its comma-separated
 * list (case-insensitive)? E.g. Connection: keep-alive, Upgrade. */
bool st_http_header_has_token(const struct st_http_header *headers, size_t n, const char *name,
                              const char *token);

/* How a message body is delimited (RFC 9112 §6.3). */
enum st_http_body_kind {
	ST_HTTP_BODY_NONE = 0,        /* no body */
	ST_HTTP_BODY_LENGTH = 1,      /* exactly *length bytes */
	ST_HTTP_BODY_CHUNKED = 2,     /* chunked coding (stream/chunked.h finds the end) */
	ST_HTTP_BODY_UNTIL_CLOSE = 3, /* response read until the connection closes */
	ST_HTTP_BODY_UPGRADE = 4,     /* request asks to upgrade / 101 response: raw bytes follow */
};

/*
 * st_http_request_body() - how the body of @req is delimited.
 * @length: set for ST_HTTP_BODY_LENGTH (and for UPGRADE when a Content-Length came along).
 *
 * An upgrade request (Connection: upgrade and an Upgrade header) gives ST_HTTP_BODY_UPGRADE.
 * Returns 0, or -EBADMSG for framing that can be read two ways (both Content-Length and
 * Transfer-Encoding, differing or malformed Content-Length, a coding other than chunked).
 */
int st_http_request_body(const struct st_http_request *req, enum st_http_body_kind *kind,
                         uint64_t *length);

/*
 * st_http_response_body() - how the body of @resp is delimited.
 * @request_was_head: the request was HEAD (the response then has no body whatever it says).
 *
 * 1xx (but 101), 204 and 304 have none; 101 is ST_HTTP_BODY_UPGRADE. Returns 0 or -EBADMSG.
 */
int st_http_response_body(const struct st_http_response *resp, bool request_was_head,
                          enum st_http_body_kind *kind, uint64_t *length);

/* st_http_keep_alive() - does the connection persist after this message? HTTP/1.1 unless
 * "Connection: close"; HTTP/1.0 only with "Connection: keep-alive". */
bool st_http_keep_alive(int minor_version, const struct st_http_header *headers, size_t n);

#endif /* STREAM_HTTP_H */
