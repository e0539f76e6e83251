/*
 * stream/connect.h — KubeEdge's JSON connect request (payload of LOGS/EXEC/METRIC/ATTACH_CONNECT).
 *
 * What Go's encoding/json writes for KubeEdge's connection structs:
 *
 *   {"MessID":7,
 *    "url":{"Scheme":"http","Opaque":"","User":null,"Host":"127.0.0.1:10350",
 *           "Path":"/exec/default/nginx/nginx","RawPath":"","OmitHost":false,"ForceQuery":false,
 *           "RawQuery":"command=sh\u0026input=1","Fragment":"","RawFragment":""},
 *    "header":{"Connection":["Upgrade"],"Upgrade":["SPDY/3.1"]},
 *    "method":"POST"}
 *
 * A request owns its strings in one allocation sized exactly once, so st_connect_req_cleanup()
 * frees everything. Strings are NUL-terminated; embedded NULs are refused (no HTTP field may
 * carry one). Not thread-safe per object; no global state.
 */
#ifndef STREAM_CONNECT_H
#define STREAM_CONNECT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <stream/limits.h>

/* One header field (a header with several values appears once per value, in order). */
struct st_connect_header {
	const char *name;  /* as received or given; read-only */
	const char *value; /* read-only */
};

/* A connect request. All pointers are owned by the struct (read-only for the caller). */
struct st_connect_req {
	uint64_t connect_id;   /* MessID: equals the tunnel ConnectID */
	const char *method;    /* "GET" when the JSON has no "method" */
	const char *scheme;    /* url.Scheme, "" if absent */
	const char *host;      /* url.Host, "" if absent */
	const char *path;      /* url.Path, never empty on a decoded request */
	const char *raw_query; /* url.RawQuery, without '?' */
	struct st_connect_header headers[ST_MAX_CONNECT_HEADERS];
	size_t num_headers;
	char *storage; /* internal: the one allocation every string points into */
};

/* A string view given to st_connect_req_build(). */
struct st_connect_view {
	const char *p;
	size_t len;
};

/* A header given to st_connect_req_build(). */
struct st_connect_field {
	struct st_connect_view name;
	struct st_connect_view value;
};

/* What st_connect_req_build() copies. Empty views (len 0) are allowed except for path. */
struct st_connect_parts {
	uint64_t connect_id;
	struct st_connect_view method;
	struct st_connect_view scheme;
	struct st_connect_view host;
	struct st_connect_view path;
	struct st_connect_view raw_query;
	const struct st_connect_field *headers;
	size_t num_headers;
};

/*
 * st_connect_req_decode() - parse a JSON connect request.
 * @json, @len: the message payload (not NUL-terminated).
 * @out: filled on success; free with st_connect_req_cleanup(). Untouched on error.
 *
 * Handles Go's escapes (\u0026 ...), surrogate pairs, keys in any order, unknown keys (ignored),
 * "User":null. Like Go's decoder, each byte of invalid UTF-8 in a string becomes U+FFFD, so
 * decoded strings are always valid UTF-8 and re-encoding them is lossless. Returns 0; -EMSGSIZE when @len > ST_MAX_CONNECT_JSON_BYTES, the strings exceed
 * ST_MAX_CONNECT_STRINGS_BYTES, headers exceed ST_MAX_CONNECT_HEADERS or nesting exceeds
 * ST_MAX_CONNECT_JSON_DEPTH; -EBADMSG for anything malformed (not JSON, trailing bytes, wrong
 * types, missing MessID, url or url.Path, a NUL inside a string); -ENOMEM.
 */
int st_connect_req_decode(const uint8_t *json, size_t len, struct st_connect_req *out);

/*
 * st_connect_req_build() - make a request from parts (cloudstream: from a parsed HTTP head).
 *
 * Copies everything it is given. Returns 0; -EINVAL (empty path); -EMSGSIZE (over the same
 * limits as decoding); -EBADMSG (a NUL byte in a field); -ENOMEM. @out is untouched on error.
 */
int st_connect_req_build(struct st_connect_req *out, const struct st_connect_parts *parts);

/* st_connect_req_cleanup() - free the strings; the struct may be reused. NULL-safe. */
void st_connect_req_cleanup(struct st_connect_req *req);

/* st_connect_req_header() - first value of header @name (case-insensitive), or NULL. */
const char *st_connect_req_header(const struct st_connect_req *req, const char *name);

/*
 * st_connect_req_encode() - write the request as Go's encoding/json would.
 * @out, @cap: destination; the result is not NUL-terminated.
 *
 * Header names are put in Go's canonical MIME form (x-foo-bar -> X-Foo-Bar), fields of the same
 * name merge into one array in order, keys are sorted bytewise. Strings get Go's escaping
 * (&, <, > as \u0026 \u003c \u003e; control characters as \u00XX; invalid UTF-8 as \ufffd).
 * "method" is always written (KubeEdge's logs/metrics structs have no such field and Go ignores
 * unknown keys); "header" is {} when there are none.
 * Returns the length written, or -EMSGSIZE when @cap is too small.
 */
ssize_t st_connect_req_encode(char *out, size_t cap, const struct st_connect_req *req);

#endif /* STREAM_CONNECT_H */
