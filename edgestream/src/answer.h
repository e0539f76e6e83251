/*
 * edgestream/src/answer.h — the request the edge sends its backend and, for a base-protocol
 * cloud, the body it relays back (pure).
 *
 * Request: the cloud's JSON connect request becomes an HTTP/1.1 request head for the backend:
 * same method, path (as routed) and query, every header of the apiserver but Host (the backend's
 * own) and, for requests that are not upgrades, "Connection: close" unless the edge keeps the
 * connection for the next request (then the response's own framing ends the stream).
 *
 * Body-only relay: a KubeEdge cloud expects LOGS/METRIC DATA to carry the response body only
 * (its edge's HTTP client ate the status line and headers). es_body_only takes the backend's
 * raw response, split anywhere, and yields the body bytes (chunked coding removed).
 */
#ifndef EDGESTREAM_ANSWER_H
#define EDGESTREAM_ANSWER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <stream/chunked.h>
#include <stream/connect.h>
#include <stream/http.h>

/*
 * es_request_head() - write the backend request head for @req, sent to @path (the routed
 * path, @path_len bytes) on backend @host_header, with the request's query when @keep_query (a
 * runtime's streaming URL carries none: the options are in the CRI request), and without
 * "Connection: close" when @keep_alive (not for upgrades, which keep theirs). Returns the
 * length; -EMSGSIZE when it does not fit @cap; -EBADMSG when a header name or value could split
 * the head (CR, LF). *@upgrade says whether the request asks for an upgrade.
 */
ssize_t es_request_head(char *out, size_t cap, const struct st_connect_req *req, const char *path,
                        size_t path_len, const char *host_header, bool keep_query, bool keep_alive,
                        bool *upgrade);

struct es_body_only {
	uint8_t *head; /* a response head split across reads, gathered (grown as needed, at most
	                * ST_MAX_HTTP_HEAD_BYTES; NULL when the head came whole, and once done) */
	size_t head_len, head_cap;
	bool head_done;
	int status;       /* the backend's status, once head_done */
	unsigned interim; /* interim (1xx but 101) heads passed over before the final one */
	/* Once head_done: the response lets its connection carry another request (HTTP/1.1
	 * without "Connection: close", HTTP/1.0 only with "Connection: keep-alive") and ends by
	 * its framing, not by the close. */
	bool keep_alive;
	enum st_http_body_kind kind;
	uint64_t remaining; /* ST_HTTP_BODY_LENGTH */
	struct st_chunked_decoder ch;
	bool done;
};

void es_body_only_init(struct es_body_only *b);
void es_body_only_cleanup(struct es_body_only *b);

/*
 * es_body_only_feed() - consume the next response bytes (@in, @len) and put the body bytes
 * found in @out (at most @cap; @cap >= @len always suffices). Returns the body bytes written;
 * -EBADMSG (malformed head or chunked coding), -EMSGSIZE (head over ST_MAX_HTTP_HEAD_BYTES),
 * -ENOMEM. Interim 1xx heads (not 101) before the final one are passed over: no body bytes
 * (dropped body-only; relayed as they came with @out NULL). Bytes after the end of the response
 * are ignored (b->done is set). With @out NULL
 * (and @cap SIZE_MAX) it only follows the framing, copying nothing: the end of a response
 * relayed as is.
 */
ssize_t es_body_only_feed(struct es_body_only *b, const uint8_t *in, size_t len, uint8_t *out,
                          size_t cap);

#endif /* EDGESTREAM_ANSWER_H */
