/*
 * edgestream/src/h2msg.h — the pure half of the kubelet's HTTP/2 path (h2conn.c): the request
 * as HTTP/2 header fields, the answer turned back into the HTTP/1.1 bytes the relay sends the
 * cloud, and how a stream's HTTP/2 flow control follows its queue toward the cloud.
 *
 * Nothing changes on the tunnel when the kubelet leg speaks HTTP/2: the cloud gets a status
 * line, the response's header fields and the body (chunked when the answer has no
 * Content-Length, as the kubelet's HTTP/1.1 server sends it), or the body only for a
 * base-protocol cloud's logs and metrics. No I/O, no nghttp2: unit-tested (test_h2msg.c).
 */
#ifndef EDGESTREAM_H2MSG_H
#define EDGESTREAM_H2MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <stream/connect.h>

/* ---- the request ----------------------------------------------------------------------- */

/* One header field of the request; name and value point into the caller's buffer. */
struct es_h2_field {
	const char *name, *value;
	size_t name_len, value_len;
};

#define ES_H2_MAX_FIELDS (ST_MAX_CONNECT_HEADERS + 4)

/*
 * es_h2_request_fields() - @req as HTTP/2 request fields: :method, :scheme https, :authority
 * @authority, :path (@path, @path_len, and the query), then the request's headers with their
 * names in lower case (HTTP/2 wants them so) and without the ones HTTP/2 forbids (Host,
 * Connection, Keep-Alive, Proxy-Connection, Transfer-Encoding, Upgrade, TE but "trailers").
 * The strings are written into @buf (@cap bytes). Returns the number of fields in @f (at most
 * ES_H2_MAX_FIELDS); -EMSGSIZE when @buf is too small; -EBADMSG when a name or value holds
 * CR, LF or NUL, or a name is empty or has upper-case-insensitive garbage (space, colon).
 */
ssize_t es_h2_request_fields(struct es_h2_field *f, char *buf, size_t cap,
                             const struct st_connect_req *req, const char *path, size_t path_len,
                             const char *authority);

/* es_h2_request_fits() - whether @req may go as an HTTP/2 stream: a GET or HEAD without a
 * body (no Content-Length other than 0, no Transfer-Encoding) that asks for no upgrade. */
bool es_h2_request_fits(const struct st_connect_req *req);

/* ---- the answer ------------------------------------------------------------------------ */

/*
 * The answer's head, gathered field by field (nghttp2 hands them one at a time), then written
 * as an HTTP/1.1 head. Lines are kept in @lines (grown, at most ST_MAX_HTTP_HEAD_BYTES).
 */
struct es_h2_head {
	char *lines; /* "Name: value\r\n" for every regular field */
	size_t len, cap;
	int status;      /* from :status; 0 until seen */
	unsigned fields; /* regular fields kept (the head may hold ST_MAX_HTTP_HEADERS in all) */
	bool has_length; /* a content-length field came */
	bool bad;        /* a field that cannot go into an HTTP/1.1 head (CR/LF), or too large */
};

void es_h2_head_init(struct es_h2_head *h);
void es_h2_head_cleanup(struct es_h2_head *h);

/* es_h2_head_field() - one response field. 0, -EBADMSG (bad :status, CR/LF), -EMSGSIZE,
 * -ENOMEM. Connection-specific fields are dropped; names get HTTP/1.1's usual casing
 * (content-type: Content-Type). */
int es_h2_head_field(struct es_h2_head *h, const uint8_t *name, size_t name_len,
                     const uint8_t *value, size_t value_len);

/*
 * es_h2_head_write() - the HTTP/1.1 head ("HTTP/1.1 200 OK", the fields, then
 * "Transfer-Encoding: chunked" when the answer has a body and no length) into @out. @no_body:
 * the answer has none whatever its fields say (a HEAD request). *@chunked says whether the body
 * must be chunked. Returns the length, -EMSGSIZE when it does not fit @cap or exceeds what an
 * HTTP/1.1 head may be here (ST_MAX_HTTP_HEAD_BYTES, ST_MAX_HTTP_HEADERS: the cloud's relay
 * would refuse it), -EBADMSG without a status.
 */
ssize_t es_h2_head_write(const struct es_h2_head *h, bool no_body, char *out, size_t cap,
                         bool *chunked);

/* es_h2_chunk_start() - the size line of a chunk of @n bytes ("1a\r\n") into @out (at least
 * ES_H2_CHUNK_START_MAX bytes). Returns its length. The chunk ends with "\r\n"; the body with
 * "0\r\n\r\n". */
#define ES_H2_CHUNK_START_MAX 20u
size_t es_h2_chunk_start(char *out, size_t n);

/* ---- flow control ---------------------------------------------------------------------- */

/*
 * A stream's receive window follows the cloud: the kubelet may send the window's worth
 * (ES_H2_STREAM_WINDOW); what arrived goes toward the cloud at once, and its credit goes back
 * to the kubelet (WINDOW_UPDATE, for this stream only) while the stream's queue toward the cloud
 * is under its mark. Past it the credit is withheld until the queue drained: a cloud that stops
 * reading one stream stops only that stream's kubelet writer. The connection's window is given
 * back at once, whatever the stream, so no stream waits for another.
 */
/* 64 KiB, four of the kubelet's 16 KiB DATA frames in flight: with 16 KiB the kubelet waited for
 * a WINDOW_UPDATE after every frame (relay_bench --kubelet-h2, 2026-11-25: 2.79 -> 1.30 CPU-s per
 * GiB on the edge, 2.20 -> 1.21 on the cloud, 2.1x the throughput). Chunk-framed, a window sent
 * in frames of 8 bytes or more still fits the kubelet backend's burst (ES_CONN_TO_CLOUD_BURST,
 * 112 KiB: 104 KiB), so the stream's reservation is unchanged. */
#define ES_H2_STREAM_WINDOW (64u * 1024u)

/*
 * A bulk stream's window grows, as cloudstream's peer links grow a forwarded stream's: a stream
 * that received its whole window while the cloud took every byte (the kubelet, not the cloud,
 * was the bound) doubles it, up to ES_H2_STREAM_WINDOW_MAX, while the process budget is not tight
 * (three quarters used). What the larger window lets the kubelet send past the queue's mark is
 * charged before the kubelet hears of it (es_h2_flow_reservation, es_stream_grow_to_cloud).
 * relay_bench --kubelet-h2: the kubelet no longer idles a round trip per 64 KiB, and each read
 * finds a full 64 KiB (README "Bulk relay cost").
 *
 * And it shrinks back once the stream is no longer bulk (a `logs -f` after its burst), every
 * ES_H2_FLOW_PERIOD_MS (es_h2_flow_period_end): a period without a byte takes it straight back
 * to ES_H2_STREAM_WINDOW, one with less than half the window halves it (growing needs a whole
 * window within one period). HTTP/2 cannot take back a window the kubelet was given: a smaller
 * window only stops the WINDOW_UPDATEs past it, and the kubelet may still send what it holds
 * (its credit). So two sizes follow the window down (es_h2_flow_release):
 *   capw: the window the queue's cap allows for, max(window, credit): the cap falls only as
 *         the kubelet spends its old credit;
 *   held: the window whose reservation the budget holds: capw, except after a period in which
 *         the stream was silent (no byte, its queue empty): then only the window. What the
 *         kubelet still holds past it is charged again at its next byte (es_h2_flow_touch), by
 *         force when the budget has no room (as a quiet follower's queue: past the limit by at
 *         most that stale credit, which is never renewed).
 */
#define ES_H2_STREAM_WINDOW_MAX (1024u * 1024u)
#define ES_H2_FLOW_PERIOD_MS    2000u /* how often a grown window is looked at */

struct es_h2_flow {
	size_t unacked; /* bytes received whose credit has not gone back */
	size_t window;  /* the stream's window: ES_H2_STREAM_WINDOW until it grew */
	size_t run;     /* bytes received since it last grew (this period), all taken */
	size_t period;  /* bytes received this period */
	size_t capw;    /* the window the queue's cap allows for (>= window) */
	size_t held;    /* the window whose reservation is charged (<= capw) */
};

/* es_h2_flow_init() - a new stream's flow: ES_H2_STREAM_WINDOW, nothing received. */
void es_h2_flow_init(struct es_h2_flow *f);

/* es_h2_flow_received() - @n body bytes arrived and went toward the cloud, whose queue is
 * full (@cloud_full) or not. Returns the credit to give back now (0 while full). A full
 * queue restarts the count toward growing (es_h2_flow_grow): the cloud is the bound. */
size_t es_h2_flow_received(struct es_h2_flow *f, size_t n, bool cloud_full);

/* es_h2_flow_drained() - the queue toward the cloud went under its low mark: the withheld
 * credit, to give back now. */
size_t es_h2_flow_drained(struct es_h2_flow *f);

/* es_h2_flow_worst_burst() - the most bytes a stream can hand the relay past its queue's mark
 * (the whole initial window, in the smallest frames a peer can send, chunk-framed): what
 * to_cloud_burst must hold for a kubelet that sends DATA frames of at least @min_frame bytes. */
size_t es_h2_flow_worst_burst(size_t min_frame);

/* es_h2_flow_reservation() - the same for a window of @window bytes: @window itself when the
 * body goes as it comes (@chunked false), else chunk-framed in DATA frames of
 * ES_H2_MIN_FRAME bytes or more (smaller ones past it fail the stream with `limit`, as a
 * backend past its burst does). */
#define ES_H2_MIN_FRAME 8u
size_t es_h2_flow_reservation(size_t window, bool chunked);

/*
 * es_h2_flow_grow() - the window @f's stream should have now: larger than f->window when the
 * stream received a whole window since it last grew with the cloud taking every byte (count
 * them with es_h2_flow_received), the window is under ES_H2_STREAM_WINDOW_MAX and the budget is
 * not @budget_tight; else f->window. Doubles, capped at the maximum. Decides only: the caller
 * charges es_h2_flow_reservation(new) - es_h2_flow_reservation(old), tells the kubelet, then
 * calls es_h2_flow_grown().
 */
size_t es_h2_flow_grow(const struct es_h2_flow *f, bool budget_tight);

/* es_h2_flow_grow_extra() - the bytes to charge (and raise the queue's cap by) to grow @f's
 * window to @next: what es_h2_flow_reservation(@next) needs past what is reserved already. */
size_t es_h2_flow_grow_extra(const struct es_h2_flow *f, size_t next, bool chunked);

/* es_h2_flow_grown() - the stream's window is @window now (charged and offered). */
void es_h2_flow_grown(struct es_h2_flow *f, size_t window);

/* es_h2_flow_touch() - a byte arrived: the reservation released while the stream was silent
 * (held < capw), to charge again now (the caller charges it, by force without room); 0 when
 * nothing was released. @f counts it charged. */
size_t es_h2_flow_touch(struct es_h2_flow *f, bool chunked);

/* es_h2_flow_period_end() - a period ended: the window the stream should have now (smaller
 * when the period received less than half the window, ES_H2_STREAM_WINDOW when nothing), and
 * the count starts again. The caller offers it (a smaller window: no WINDOW_UPDATE past it),
 * then calls es_h2_flow_grown() with it. Sets *@silent: the period received nothing. */
size_t es_h2_flow_period_end(struct es_h2_flow *f, bool *silent);

/* What the queue toward the cloud may keep for a grown window (es_h2_flow_release). */
struct es_h2_flow_keep {
	size_t capw, held;    /* the windows (es_h2_flow_keep's doc) */
	size_t cap_extra;     /* the queue's cap past its base: reservation(capw) - initial */
	size_t charged_extra; /* charged to the budget: reservation(held) - initial */
};

/* es_h2_flow_release() - what @f's stream may keep now that the kubelet holds @credit bytes of
 * window (what it may still send), after a period that was @silent with its queue toward the
 * cloud empty (@silent_empty). Apply it (lower the cap, give back the charge), then call
 * es_h2_flow_released(). */
struct es_h2_flow_keep es_h2_flow_release(const struct es_h2_flow *f, size_t credit,
                                          bool silent_empty, bool chunked);

/* es_h2_flow_released() - @k was applied. */
void es_h2_flow_released(struct es_h2_flow *f, const struct es_h2_flow_keep *k);

/* es_h2_flow_charged_extra() - what @f's reservation past the initial window holds now. */
size_t es_h2_flow_charged_extra(const struct es_h2_flow *f, bool chunked);

#endif /* EDGESTREAM_H2MSG_H */
