/*
 * cloudstream/src/front_h2_int.h — between the HTTP/2 files of the stream port: front_h2.c (the
 * connection: its nghttp2 session, bytes in and out, the idle and head deadlines, GOAWAY),
 * front_h2_stream.c (each stream as a stream front: HEADERS → head, refusals, close),
 * front_h2_answer.c (its answer → HEADERS/DATA, the data provider) and front_h2_alpn.c (ALPN h2 without lws's own HTTP/2 role). front.h has what the rest of
 * cloudstream calls. Loop thread only.
 */
#ifndef CLOUDSTREAM_FRONT_H2_INT_H
#define CLOUDSTREAM_FRONT_H2_INT_H

#include "front.h"

#include <nghttp2/nghttp2.h>

/* One HTTP/2 connection's session. */
struct cs_h2conn {
	nghttp2_session *ng;
	struct cs_front *conn;    /* the connection's front */
	struct cs_front *streams; /* its stream fronts (h2r->next) */
	unsigned n_streams;
	/* The streams whose request is not complete yet (no END_STREAM), oldest first: each has
	 * --idle-timeout from its HEADERS, as an HTTP/1.1 head has (front_h2.c heads_*). One
	 * timer per connection, armed for the oldest. */
	struct cs_front *heads_first, *heads_last;
	lws_sorted_usec_list_t sul_heads;
	uint8_t *tx;           /* the WRITEABLE round's batch (srv->tx + LWS_PRE) */
	size_t tx_len;         /* ... bytes in it */
	bool idle;             /* no stream: the connection's idle deadline is armed */
	bool goaway;           /* GOAWAY submitted (drain) */
	bool logged_malformed; /* a malformed request was logged (once per connection) */
};

/* One HTTP/2 stream's state in its stream front. */
struct cs_h2req {
	int32_t sid;
	struct cs_h2ans ans; /* the answer's HTTP/1.1 bytes → HEADERS and DATA */
	char *method;        /* :method, :path, :authority (owned; NULL until seen) */
	char *path;
	char *authority;
	size_t head_bytes;    /* of the request head so far (bounded by ST_MAX_HTTP_HEAD_BYTES) */
	size_t body_taken;    /* answer body bytes queued by the current cs__h2_queue() */
	uint64_t head_due_ms; /* while in the connection's heads: its request is late after it */
	bool in_heads;        /* in the connection's heads (the request is not complete) */
	bool ready;           /* the request is complete: start it (after mem_recv) */
	bool started;         /* it was started (or answered without a start: 408) */
	bool too_big;         /* its head went over the limit: 431 */
	bool has_body;        /* DATA came: 413 */
	bool upgrade;         /* an Upgrade field (an HTTP/1.1 upgrade sent over HTTP/2): 405 */
	bool head_submitted;  /* the answer's HEADERS were submitted */
	bool deferred;        /* the data provider waits for bytes (NGHTTP2_ERR_DEFERRED) */
	bool answer_end;      /* the answer is complete or cut: END_STREAM / RST once drained */
	bool cut;             /* ... cut short: RST_STREAM after what was queued */
	bool broken;          /* the answer's bytes did not translate */
	bool closed;          /* nghttp2 closed the stream: freed outside the session */
	struct cs_front *next, *prev;   /* in the connection's streams */
	struct cs_front *hnext, *hprev; /* in the connection's heads while in_heads */
};

/* ---- front_h2_stream.c ----------------------------------------------------------------- */

/* Set the stream side's nghttp2 callbacks (HEADERS, DATA, stream close) on @cbs. */
void cs__h2s_callbacks(nghttp2_session_callbacks *cbs);
/* Start the requests that became complete and go on with those whose kept head waits.
 * Outside the session. */
void cs__h2s_process(struct cs_h2conn *c);
/* Free one stream front (its tunnel stream gets REMOVE). Outside the session. */
void cs__h2s_free(struct cs_h2conn *c, struct cs_front *f);
/* A stream whose request did not complete within --idle-timeout: answered 408. */
void cs__h2s_late(struct cs_front *f);

/* ---- front_h2_answer.c ----------------------------------------------------------------- */

/* Set the answer side's nghttp2 callbacks (a frame sent) on @cbs. */
void cs__h2a_callbacks(nghttp2_session_callbacks *cbs);

/* ---- front_h2.c ------------------------------------------------------------------------ */

/* Ask for WRITEABLE on the connection. */
void cs__h2_wake(struct cs_h2conn *c);
/* A new stream's request is not complete: it joins the heads (its deadline from now). */
void cs__h2_head_begin(struct cs_h2conn *c, struct cs_front *f);
/* ... it is complete, answered or gone: out of the heads (a no-op when not in them). */
void cs__h2_head_end(struct cs_h2conn *c, struct cs_front *f);

#endif /* CLOUDSTREAM_FRONT_H2_INT_H */
