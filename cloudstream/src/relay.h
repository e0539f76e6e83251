/*
 * cloudstream/src/relay.h — the HTTP/1 decisions of relaying one apiserver request through a
 * tunnel stream (pure: no lws, no clock, no logging).
 *
 * An apiserver connection (front.c, request.c) carries one request at a time. What it does with
 * the bytes is decided here, over views of its input, so that every decision is unit-tested
 * and fuzzed without a network:
 *   - what the request is (exchange.c's plan) and how our own error answers are written to the
 *     client (a Status JSON, or text for kube-apiserver's pods/log client: err_form);
 *   - how the answer comes back (the mode): the backend's raw response, or, from a
 *     base-protocol (KubeEdge) edge, only the body of a logs/metrics answer, which we frame as
 *     the kubelet would (a synthesized `200` head and chunked coding, written when the first
 *     byte arrives, never before);
 *   - which request bytes belong to this request (its body or the upgraded stream) and which
 *     are the next request's;
 *   - where the answer ends, and whether the connection then serves another request;
 *   - what an edge that ends the stream means (answer complete, cut short, or an error that we
 *     answer ourselves), and the status of every error of ours;
 *   - whether the answer has a deadline.
 *
 * One struct cs_relay per apiserver connection, reused request after request; owned by the
 * loop thread. Nothing here allocates but the response tracker (exchange.h), which gathers a
 * response head split across messages.
 */
#ifndef CLOUDSTREAM_RELAY_H
#define CLOUDSTREAM_RELAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <stream/chunked.h>
#include <stream/http.h>

#include "exchange.h"

/* Why a request failed: the label of cloudstream_request_errors_total. */
enum cs_err_reason {
	CS_ERR_BAD_REQUEST = 0, /* malformed head, bad kubelet path (400/405/431) */
	CS_ERR_NO_ROUTE,        /* nothing in the request names a node (503) */
	CS_ERR_NO_SESSION,      /* the node has no tunnel (503) */
	CS_ERR_LIMIT,           /* a stream or memory limit (503) */
	CS_ERR_EDGE_REFUSED,    /* the edge refused or failed the request (ERROR/REMOVE: 4xx/5xx) */
	CS_ERR_EDGE_GONE,       /* the tunnel went away during the request (502) */
	CS_ERR_TIMEOUT,         /* no answer in time (504) */
	CS_ERR_BAD_RESPONSE,    /* the edge's response was malformed (502 or cut) */
	CS_ERR_DRAINING,        /* shutting down (503) */
	CS_ERR_UNAUTHORIZED,    /* no valid credential (401) */
	CS_ERR_FORBIDDEN,       /* refused by the subject list or a SubjectAccessReview (403) */
	CS_ERR_COUNT,
};

/* cs_err_reason_name() - the metric label of @r ("bad_request", ...; "unknown" out of range). */
const char *cs_err_reason_name(enum cs_err_reason r);

/* cs_err_reason_status() - the HTTP status we answer a failure of kind @r with, unless the
 * failure brings its own (a 431 or 405 bad request, an edge's ERROR code): 400, 503 (no route,
 * no session, limit, draining), 502 (edge refused, edge gone, bad response), 504 (timeout). */
int cs_err_reason_status(enum cs_err_reason r);

/* How the edge's answer is carried (stream/PROTOCOL.md §4). */
enum cs_relay_mode {
	CS_RELAY_RAW = 0,   /* DATA carries the backend's raw response (upgrades; raw-response) */
	CS_RELAY_BODY_ONLY, /* base-protocol LOGS/METRIC: DATA is the body; we frame it chunked */
};

/* One request and its answer, as relayed. Fields are read-only for the caller unless noted. */
struct cs_relay {
	struct cs_plan plan;     /* what the request is (cs_relay_begin); plan.err_form is the
	                          * form of our error answers, Status JSON while idle */
	enum cs_relay_mode mode; /* how the answer comes back (cs_relay_start) */
	bool answered;           /* answer bytes were queued toward the client (cs_relay_sent):
	                          * no answer of our own may follow */
	struct cs_body req_body; /* the request body's framing, toward the edge */
	struct cs_resp resp;     /* CS_RELAY_RAW: the backend's response framing */
	char chunk[ST_CHUNK_HEADER_MAX_BYTES]; /* body-only: the last chunk header emitted */
};

/* cs_relay_init() - an idle relay: no request, error answers are Status JSON. */
void cs_relay_init(struct cs_relay *r);

/* cs_relay_cleanup() - free what the response tracker holds and return to idle (as init). */
void cs_relay_cleanup(struct cs_relay *r);

/*
 * cs_relay_begin() - a new request head @req (borrowed, only read during the call) on an idle
 * relay: plan it (exchange.h cs_plan_request). Nothing is answered yet. Returns 0, or the HTTP
 * status to refuse it with (400, 405) and *@why a static reason. plan.err_form is set either
 * way, so the refusal is written in the form the client shows.
 */
int cs_relay_begin(struct cs_relay *r, const struct st_http_request *req, const char **why);

/* cs_relay_start() - the request's stream is open, on a tunnel with the agreed capabilities
 * @caps (stream/ext.h): choose the mode and start the request and response trackers. */
void cs_relay_start(struct cs_relay *r, uint32_t caps);

/*
 * cs_relay_request() - of @len request bytes at @p that follow the head, how many belong to
 * this request and go to the edge: all of an upgraded stream; of a plain request its body up to
 * its end (what follows is the next, pipelined request, which waits). Returns that count (0
 * once the body is complete), or -EBADMSG / -EMSGSIZE for a malformed chunked body (400).
 */
ssize_t cs_relay_request(struct cs_relay *r, const uint8_t *p, size_t len);

/* cs_relay_request_done() - the request body is complete (never for an upgrade): the edge gets
 * our half-close. */
bool cs_relay_request_done(const struct cs_relay *r);

/* What to queue toward the client for one piece of the edge's answer, in this order. */
struct cs_relay_emit {
	const char *head; /* body-only, before the first byte: the synthesized 200 head (static) */
	size_t head_len;
	const char *chunk; /* body-only: the chunk header (in the relay's chunk[]) */
	size_t chunk_len;
	size_t take;         /* then the first @take bytes of the input (the rest is dropped: it
	                      * follows the end of the response) */
	const char *trailer; /* body-only: the chunk's CRLF (static) */
	size_t trailer_len;
	bool done; /* the answer is complete: the stream ends, cs_relay_keep_alive() decides */
};

/*
 * cs_relay_answer() - @len bytes of the edge's answer at @p (borrowed): fills @e (pointers valid
 * until the next call on @r). Call cs_relay_sent() once they are queued. Any split of the input
 * gives the same bytes in total. Returns 0, or -EBADMSG / -EMSGSIZE for a malformed response
 * (502; the stream is reset) and -ENOMEM.
 */
int cs_relay_answer(struct cs_relay *r, const uint8_t *p, size_t len, struct cs_relay_emit *e);

/* cs_relay_sent() - answer bytes (the edge's or an error of ours) were queued toward the
 * client: from now on no answer of our own is written. */
void cs_relay_sent(struct cs_relay *r);

/* What an edge that ends the stream means. */
enum cs_relay_verdict {
	CS_RELAY_FAIL = 0, /* nothing answered yet: answer with an error of our own */
	CS_RELAY_DONE,     /* after @last, the answer is complete: keep-alive decides */
	CS_RELAY_CLOSE,    /* close once the queued bytes are written (upgrade, a body until
	                    * close, or an answer cut short) */
};

struct cs_relay_end {
	enum cs_relay_verdict verdict;
	const char *last; /* DONE: queue this first (body-only: the last chunk; static) */
	size_t last_len;
	int status;             /* FAIL: our answer's status */
	enum cs_err_reason why; /* FAIL: the metric reason */
	bool cut_short;         /* CLOSE: the answer was cut short (counted as bad_response) */
};

/* cs_relay_on_end() - the edge ended the stream with @code (0: REMOVE, else an ERROR code of
 * stream/ext.h): what that means for the client, in @out. */
void cs_relay_on_end(const struct cs_relay *r, uint64_t code, struct cs_relay_end *out);

/* cs_relay_cut_short() - closing now after an end with @code (or a last chunk that could not
 * be queued) leaves an answer cut short: an error code, or a response whose end the client
 * cannot see (not an upgrade, not a body that ends with the connection). */
bool cs_relay_cut_short(const struct cs_relay *r, uint64_t code);

/* cs_relay_end_message() - the message of a FAIL verdict for node @node (NUL-terminated):
 * "closed the stream without answering" for REMOVE, else the ERROR's name and @reason (a view
 * of @reason_len bytes, at most 1024 of them used). Returns snprintf's count. */
int cs_relay_end_message(char *out, size_t cap, const char *node, uint64_t code, const char *reason,
                         size_t reason_len);

/* cs_relay_keep_alive() - after a complete answer, does the connection serve another request?
 * Only when the client keeps it, the request body was read to its end (a body the backend did
 * not wait for leaves the connection out of sync) and the response ends by its framing. */
bool cs_relay_keep_alive(const struct cs_relay *r);

/*
 * cs_relay_error_answer() - our error answer with @status and @message (NUL-terminated) in
 * the request's err_form (stream/status.h st_http_error_answer), into @out. Returns its length,
 * 0 when answer bytes were already sent (nothing of ours may follow them), or -EMSGSIZE.
 */
ssize_t cs_relay_error_answer(const struct cs_relay *r, int status, const char *message, char *out,
                              size_t cap);

/* cs_relay_head_error() - the status and static message for a request head that does not parse
 * (@parse_rc from st_http_parse_request: 0 with the head cap reached, or < 0): 431 "request head
 * too large" for 0 and -EMSGSIZE, 400 "malformed HTTP request head" otherwise. */
int cs_relay_head_error(ssize_t parse_rc, const char **message);

/* cs_relay_connect_error() - the status for a head cs_connect_json() cannot carry (@rc < 0):
 * 431 over the connect limits (-EMSGSIZE), 400 otherwise. */
int cs_relay_connect_error(ssize_t rc);

/* cs_relay_answer_timeout_ms() - the deadline for the first answer byte: @timeout_ms, or 0 (no
 * deadline) for a followed log through a base edge, which sends nothing until a line appears. */
uint64_t cs_relay_answer_timeout_ms(const struct cs_relay *r, uint64_t timeout_ms);

#endif /* CLOUDSTREAM_RELAY_H */
