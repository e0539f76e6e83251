/*
 * cloudstream/src/exchange.h — one apiserver request and its answer, as cloudstream relays them
 * (pure: no I/O, no clock, no logging).
 *
 * cloudstream parses the request head to decide where it goes (cs_plan_request), sends it to the
 * edge as a JSON connect request (cs_connect_json), and then relays bytes. To keep a plain
 * request's connection alive for the next request it must know where the request body and the
 * backend's response end without changing a byte: cs_body tracks a body by its framing
 * (Content-Length, chunked, until close, upgrade) and cs_resp tracks a whole response (head,
 * then body). Both take input split anywhere.
 *
 * One object per request, owned by the loop thread.
 */
#ifndef CLOUDSTREAM_EXCHANGE_H
#define CLOUDSTREAM_EXCHANGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <stream/chunked.h>
#include <stream/http.h>
#include <stream/query.h>
#include <stream/status.h>

/* Where a body ends. */
struct cs_body {
	enum st_http_body_kind kind;
	uint64_t remaining;           /* ST_HTTP_BODY_LENGTH: bytes still to come */
	struct st_chunked_decoder ch; /* ST_HTTP_BODY_CHUNKED */
	bool done;                    /* the body has ended (read-only) */
};

/* cs_body_init() - a body framed as @kind (@length for ST_HTTP_BODY_LENGTH). NONE, and LENGTH 0,
 * start done. */
void cs_body_init(struct cs_body *b, enum st_http_body_kind kind, uint64_t length);

/*
 * cs_body_feed() - how many of the @len bytes at @p belong to the body; the rest follows it.
 * UNTIL_CLOSE and UPGRADE take everything and never end. Returns that count (0 once done),
 * -EBADMSG or -EMSGSIZE for broken chunked coding.
 */
ssize_t cs_body_feed(struct cs_body *b, const uint8_t *p, size_t len);

/* A backend response being relayed. */
struct cs_resp {
	bool request_was_head; /* set before feeding: a HEAD response has no body */
	bool head_done;        /* the head was parsed (read-only from here down) */
	int status;            /* its status code */
	bool keep_alive;       /* the backend keeps the connection after it */
	bool upgraded;         /* 101: raw bytes follow until the stream ends */
	unsigned interim;      /* interim (1xx but 101) heads seen before the final one */
	struct cs_body body;
	uint64_t bytes; /* bytes of this response seen so far */
	uint8_t *head;  /* a head split across inputs is gathered here (lazily allocated) */
	size_t head_len;
};

/* cs_resp_init() - a response to a request that was HEAD (@request_was_head) or not. */
void cs_resp_init(struct cs_resp *r, bool request_was_head);

/* cs_resp_cleanup() - free the head buffer; the object may be initialised again. */
void cs_resp_cleanup(struct cs_resp *r);

/*
 * cs_resp_feed() - the next bytes of the response. Returns how many belong to it (the rest would
 * be bytes after its end); interim 1xx heads (not 101) before the final one belong to it too:
 * they are relayed as they came and the final head is looked for after them; -EBADMSG for a malformed head or body framing, -EMSGSIZE for a head
 * over ST_MAX_HTTP_HEAD_BYTES, -ENOMEM.
 */
ssize_t cs_resp_feed(struct cs_resp *r, const uint8_t *p, size_t len);

/* cs_resp_done() - the whole response was seen (never for an upgrade or until-close body). */
bool cs_resp_done(const struct cs_resp *r);

/* What cloudstream does with one request. */
struct cs_plan {
	struct st_kubelet_path path; /* kind and names from the kubelet path */
	uint64_t connect_type;       /* EXEC/ATTACH/LOGS/METRIC_CONNECT */
	enum st_http_body_kind body; /* request body framing (UPGRADE for upgrades) */
	uint64_t body_length;        /* for ST_HTTP_BODY_LENGTH */
	bool upgrade;                /* Connection: Upgrade (exec/attach/portForward streams) */
	bool is_head;                /* method HEAD */
	bool keep_alive;             /* the client keeps the connection after the answer */
	bool follow;                 /* containerLogs?follow=true */
	/* How our own error answers are written: ST_ERROR_FORM_POD_LOG for kube-apiserver's pods/log
	 * client (containerLogs without X-Forwarded-Uri), else Status JSON (stream/status.h). */
	enum st_error_form err_form;
};

/*
 * cs_plan_request() - classify @req. Returns 0; or an HTTP status to answer with (> 0: 400 for a
 * malformed kubelet path or body framing, 405 for CONNECT or TRACE) with *@reason set to a
 * static explanation.
 */
int cs_plan_request(const struct st_http_request *req, struct cs_plan *out, const char **reason);

/*
 * cs_connect_json() - the JSON connect request for @req as stream @id, written as KubeEdge's
 * cloud does: method, path, raw query and every request header; url.Scheme "http" and url.Host
 * @edge_host (what an unmodified KubeEdge edge dials; ours ignores both).
 * Returns the length, -EMSGSIZE (over the connect limits or @cap), -EBADMSG, -ENOMEM.
 */
ssize_t cs_connect_json(const struct st_http_request *req, uint64_t id, const char *edge_host,
                        char *out, size_t cap);

#endif /* CLOUDSTREAM_EXCHANGE_H */
