/*
 * cloudstream/src/h2answer.h — an HTTP/1.1 answer as an HTTP/2 stream's answer (pure: no lws,
 * no nghttp2, no clock, no logging).
 *
 * A request that came as an HTTP/2 stream (front_h2.c) goes through the same pipeline as an
 * HTTP/1.1 request (request.c, relay.c), which writes the answer as HTTP/1.1 bytes: the edge's
 * raw response, a synthesized head and chunked body for a base edge, or our own Status JSON.
 * This decoder turns those bytes, split anywhere, into what an HTTP/2 stream carries: one head
 * event (the status and the header fields minus those RFC 9113 §8.2.2 forbids, names in lower
 * case) and body events (de-chunked), then the end. Interim 1xx heads are skipped; a 101 is
 * refused (upgrades are HTTP/1.1 only).
 *
 * One decoder per answer, owned by one thread. It holds a head buffer (at most
 * ST_MAX_HTTP_HEAD_BYTES) only while a head is being gathered.
 */
#ifndef CLOUDSTREAM_H2ANSWER_H
#define CLOUDSTREAM_H2ANSWER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <stream/chunked.h>
#include <stream/http.h>

enum cs_h2ans_state {
	CS_H2ANS_HEAD = 0,  /* gathering a response head (buf holds what came) */
	CS_H2ANS_LENGTH,    /* body of `remaining` more bytes (Content-Length) */
	CS_H2ANS_CHUNKED,   /* chunked body: `ck` finds the data and the end */
	CS_H2ANS_UNTIL_END, /* body until the answer's stream ends */
	CS_H2ANS_DONE,      /* the answer is complete: nothing more is taken */
};

struct cs_h2ans {
	enum cs_h2ans_state state; /* read-only */
	bool head_request;         /* the request was HEAD: no body whatever the head says */
	uint8_t *buf;              /* CS_H2ANS_HEAD: the head so far; NULL while empty */
	size_t buf_len;
	uint64_t remaining;           /* CS_H2ANS_LENGTH */
	struct st_chunked_decoder ck; /* CS_H2ANS_CHUNKED */
};

/* The events of one cs_h2ans_feed() call, in order. Each returns 0, or < 0 to stop the feed
 * with that code. */
struct cs_h2ans_cbs {
	/* The final head: @status, @n header fields (views valid during the call; names in
	 * lower case; connection-specific fields removed), @has_body false when the answer ends
	 * with the head (then no on_body follows and the decoder is DONE). */
	int (*on_head)(void *user, int status, const struct st_http_header *h, size_t n,
	               bool has_body);
	/* @n > 0 body bytes (a view valid during the call). */
	int (*on_body)(void *user, const uint8_t *p, size_t n);
};

/* cs_h2ans_init() - a decoder for the answer to a request (@head_request: it was HEAD). */
void cs_h2ans_init(struct cs_h2ans *a, bool head_request);

/* cs_h2ans_cleanup() - free the head buffer; the decoder is as after init(false). */
void cs_h2ans_cleanup(struct cs_h2ans *a);

/*
 * cs_h2ans_feed() - the next @len bytes of the HTTP/1.1 answer at @p (borrowed). Calls @cbs
 * with @user for what they complete. Returns the bytes consumed: all of them, unless the answer
 * ended inside them (what follows is not part of it); -EBADMSG for a malformed head or body, a
 * 101 or a header field HTTP/2 cannot carry, -EMSGSIZE for a head over ST_MAX_HTTP_HEAD_BYTES,
 * -ENOMEM, or a callback's code. After an error the decoder only takes cs_h2ans_cleanup().
 */
ssize_t cs_h2ans_feed(struct cs_h2ans *a, const uint8_t *p, size_t len,
                      const struct cs_h2ans_cbs *cbs, void *user);

/* cs_h2ans_done() - the answer is complete. */
bool cs_h2ans_done(const struct cs_h2ans *a);

/* cs_h2ans_end_ok() - the answer's stream ends here: is that a complete answer (DONE, or a body
 * that runs until the end)? false: the answer was cut short. */
bool cs_h2ans_end_ok(const struct cs_h2ans *a);

#endif /* CLOUDSTREAM_H2ANSWER_H */
