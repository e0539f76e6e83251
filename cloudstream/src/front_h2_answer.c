/*
 * cloudstream/src/front_h2_answer.c — the answer of an HTTP/2 stream front (front_h2_stream.c):
 * what request.c queues as HTTP/1.1 bytes becomes HEADERS and DATA through h2answer.c (pure).
 *
 * The body waits in the stream front's output queue, bounded like an HTTP/1.1 connection's and
 * charged like it, and is handed to nghttp2 (the data provider, read_body) only as the
 * stream's HTTP/2 window allows; each byte handed over is reported delivered to the tunnel
 * stream, whose credit is all the edge may send, so a client that stops reading stops its edge
 * stream and nothing else. The framing bytes (head, chunk sizes) are delivered as soon as they
 * are translated. Loop thread only.
 */
#include "front_h2_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* An answer complete (END_STREAM sent) before its request is (a 408, a 413 whose body is still
 * coming): RST_STREAM NO_ERROR tells the client to stop sending (RFC 9113 §8.1), and the stream
 * closes now rather than whenever the client ends its side. */
static int on_frame_send(nghttp2_session *ng, const nghttp2_frame *fr, void *user)
{
	(void)user;
	if ((fr->hd.type == NGHTTP2_HEADERS || fr->hd.type == NGHTTP2_DATA) &&
	    (fr->hd.flags & NGHTTP2_FLAG_END_STREAM) &&
	    nghttp2_session_get_stream_remote_close(ng, fr->hd.stream_id) == 0)
		nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, fr->hd.stream_id,
		                          NGHTTP2_NO_ERROR);
	return 0;
}

/* The answer body for nghttp2's DATA frames: what the stream front queued, as the window
 * allows; each byte taken is delivered (the edge gets its credit back). */
static ssize_t read_body(nghttp2_session *ng, int32_t sid, uint8_t *buf, size_t length,
                         uint32_t *data_flags, nghttp2_data_source *src, void *user)
{
	(void)ng;
	(void)sid;
	(void)user;
	struct cs_front *f = src->ptr;
	struct cs_h2req *r = f->h2r;
	size_t n = st_buf_read(&f->out, buf, length);
	if (n > 0)
		cs_endpoint_delivered(&f->ep, n);
	if (st_buf_len(&f->out) == 0 && r->answer_end) {
		if (r->cut)
			return n > 0 ? (ssize_t)n : NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* RST */
		*data_flags |= NGHTTP2_DATA_FLAG_EOF;
		return (ssize_t)n;
	}
	if (n == 0) {
		r->deferred = true;
		return NGHTTP2_ERR_DEFERRED;
	}
	return (ssize_t)n;
}

static int ans_head(void *user, int status, const struct st_http_header *h, size_t n, bool has_body)
{
	struct cs_front *f = user;
	struct cs_h2req *r = f->h2r;
	nghttp2_nv nv[ST_MAX_HTTP_HEADERS + 1];
	char st[12];
	snprintf(st, sizeof st, "%03u", (unsigned)status % 1000u);
	nv[0] = (nghttp2_nv){(uint8_t *)":status", (uint8_t *)st, 7, 3, NGHTTP2_NV_FLAG_NONE};
	for (size_t i = 0; i < n; i++)
		nv[i + 1] = (nghttp2_nv){(uint8_t *)(uintptr_t)h[i].name,
		                         (uint8_t *)(uintptr_t)h[i].value, h[i].name_len,
		                         h[i].value_len, NGHTTP2_NV_FLAG_NONE};
	nghttp2_data_provider prd = {.source = {.ptr = f}, .read_callback = read_body};
	if (nghttp2_submit_response(f->h2->ng, r->sid, nv, n + 1, has_body ? &prd : NULL) != 0)
		return -EBADMSG;
	r->head_submitted = true;
	return 0;
}

static int ans_body(void *user, const uint8_t *p, size_t n)
{
	struct cs_front *f = user;
	struct cs_h2req *r = f->h2r;
	int rc = st_buf_append(&f->out, p, n);
	if (rc < 0)
		return rc;
	r->body_taken += n;
	if (r->deferred) {
		r->deferred = false;
		nghttp2_session_resume_data(f->h2->ng, r->sid);
	}
	return 0;
}

static const struct cs_h2ans_cbs ans_cbs = {.on_head = ans_head, .on_body = ans_body};

int cs__h2_queue(struct cs_front *f, const void *p, size_t n)
{
	struct cs_h2req *r = f->h2r;
	if (r->broken || r->answer_end)
		return -EBADMSG;
	f->acc.to_client += n;
	cs_endpoint_queued(&f->ep, n);
	r->body_taken = 0;
	ssize_t used = cs_h2ans_feed(&r->ans, p, n, &ans_cbs, f);
	/* The framing (head, chunk sizes) is gone once translated: only the body waits. */
	size_t gone = n - r->body_taken;
	if (gone)
		cs_endpoint_delivered(&f->ep, gone);
	cs__h2_wake(f->h2);
	if (used < 0) {
		r->broken = true;
		return (int)used;
	}
	return 0;
}

void cs__h2_answer_end(struct cs_front *f, bool cut)
{
	struct cs_h2req *r = f->h2r;
	f->state = CS_FRONT_CLOSING;
	if (r->answer_end || r->closed)
		return;
	r->answer_end = true;
	r->cut = cut || r->broken || !cs_h2ans_end_ok(&r->ans);
	if (!r->head_submitted)
		nghttp2_submit_rst_stream(f->h2->ng, NGHTTP2_FLAG_NONE, r->sid,
		                          NGHTTP2_INTERNAL_ERROR);
	else if (r->deferred) {
		r->deferred = false;
		nghttp2_session_resume_data(f->h2->ng, r->sid);
	}
	cs__h2_wake(f->h2);
}

void cs__h2_cut(struct cs_front *f)
{
	struct cs_h2req *r = f->h2r;
	f->state = CS_FRONT_CLOSING;
	r->answer_end = true;
	r->cut = true;
	if (!r->closed)
		nghttp2_submit_rst_stream(f->h2->ng, NGHTTP2_FLAG_NONE, r->sid,
		                          NGHTTP2_INTERNAL_ERROR);
	cs__h2_wake(f->h2);
}

void cs__h2a_callbacks(nghttp2_session_callbacks *cbs)
{
	nghttp2_session_callbacks_set_on_frame_send_callback(cbs, on_frame_send);
}
