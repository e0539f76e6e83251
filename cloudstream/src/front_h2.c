/*
 * cloudstream/src/front_h2.c — an apiserver connection on the stream port that chose HTTP/2
 * (ALPN h2, front_h2_alpn.c): its nghttp2 server session, the bytes in and out, its deadlines
 * and GOAWAY. Each stream is a request front of its own (front_h2_stream.c, its answer
 * front_h2_answer.c).
 *
 * nghttp2 is never re-entered: its callbacks only record (a stream ready, a stream closed) and
 * submit; requests start after nghttp2_session_mem_recv() returns, closed streams are freed
 * after it or after nghttp2_session_send(), and the send side runs only in WRITEABLE.
 *
 * Output: nghttp2 writes its frames straight into the WRITEABLE round's batch (srv->tx, one
 * lws_write of up to ST_CORKED_WRITE_BYTES); when the batch is full it answers
 * NGHTTP2_ERR_WOULDBLOCK and nghttp2 keeps the rest of the frame in its own frame buffer for
 * the next round. So the connection holds no output queue of its own: the answer bytes wait
 * in their stream fronts' queues, charged to the budgets, until nghttp2 takes them for a DATA
 * frame of this round.
 *
 * Deadlines: a connection without streams has --idle-timeout, as an idle HTTP/1.1 connection
 * (lws's timeout: closed); one with streams has none (quiet follows may wait for hours). A
 * stream whose request is not complete has --idle-timeout from its HEADERS, as an HTTP/1.1
 * head has: one timer per connection for the oldest such stream (they are kept in arrival
 * order, and all have the same duration), answered 408 (front_h2_stream.c). Loop thread only.
 */
#include "front_h2_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/ssl.h>

#include <stream/clock.h>
#include <stream/log.h>
#include <stream/loop.h>
#include <stream/tunnelwrite.h>

void cs__h2_wake(struct cs_h2conn *c)
{
	st_loop_write_soon(c->conn->srv->loop, c->conn->wsi); /* in this round (stream/loop.h) */
}

/* ---- deadlines --------------------------------------------------------------------------- */

/* The idle deadline is armed when the last stream goes and disarmed when one comes: from the
 * moment the connection became idle, as an HTTP/1.1 connection's between requests. */
static void idle_update(struct cs_h2conn *c)
{
	bool idle = c->n_streams == 0;
	if (idle == c->idle)
		return;
	c->idle = idle;
	if (idle)
		lws_set_timeout(c->conn->wsi, PENDING_TIMEOUT_HTTP_KEEPALIVE_IDLE,
		                (int)(c->conn->srv->cfg.idle_timeout_ms / 1000));
	else
		lws_set_timeout(c->conn->wsi, NO_PENDING_TIMEOUT, 0);
}

static void heads_due(lws_sorted_usec_list_t *sul);

static void heads_arm(struct cs_h2conn *c)
{
	if (c->heads_first == NULL) {
		lws_sul_cancel(&c->sul_heads);
		return;
	}
	uint64_t now = st_now_ms(), due = c->heads_first->h2r->head_due_ms;
	uint64_t in_ms = due > now ? due - now : 1;
	lws_sul_schedule(c->conn->srv->ctx, 0, &c->sul_heads, heads_due,
	                 (lws_usec_t)in_ms * LWS_US_PER_MS);
}

void cs__h2_head_begin(struct cs_h2conn *c, struct cs_front *f)
{
	struct cs_h2req *r = f->h2r;
	r->head_due_ms = st_now_ms() + c->conn->srv->cfg.idle_timeout_ms;
	r->in_heads = true;
	r->hnext = NULL;
	r->hprev = c->heads_last;
	if (c->heads_last)
		c->heads_last->h2r->hnext = f;
	else
		c->heads_first = f;
	c->heads_last = f;
	if (c->heads_first == f)
		heads_arm(c);
}

void cs__h2_head_end(struct cs_h2conn *c, struct cs_front *f)
{
	struct cs_h2req *r = f->h2r;
	if (!r->in_heads)
		return;
	r->in_heads = false;
	if (r->hprev)
		r->hprev->h2r->hnext = r->hnext;
	else
		c->heads_first = r->hnext;
	if (r->hnext)
		r->hnext->h2r->hprev = r->hprev;
	else
		c->heads_last = r->hprev;
	r->hnext = r->hprev = NULL;
	/* The timer stays: it fires for the next one, or finds nothing. */
}

/* The oldest incomplete requests are late: 408 each, then the timer for the next. */
static void heads_due(lws_sorted_usec_list_t *sul)
{
	struct cs_h2conn *c = lws_container_of(sul, struct cs_h2conn, sul_heads);
	uint64_t now = st_now_ms();
	while (c->heads_first && c->heads_first->h2r->head_due_ms <= now) {
		struct cs_front *f = c->heads_first;
		cs__h2_head_end(c, f);
		cs__h2s_late(f);
	}
	heads_arm(c);
	cs__h2_wake(c);
}

/* Free the stream fronts whose stream nghttp2 closed (outside the session). */
static void reap(struct cs_h2conn *c)
{
	struct cs_front *next;
	for (struct cs_front *f = c->streams; f; f = next) {
		next = f->h2r->next;
		if (f->h2r->closed)
			cs__h2s_free(c, f);
	}
	idle_update(c);
}

/* ---- the session ------------------------------------------------------------------------- */

/* nghttp2's bytes into this round's batch; full: nghttp2 keeps the rest for the next round. */
static ssize_t on_send(nghttp2_session *ng, const uint8_t *data, size_t len, int flags, void *user)
{
	(void)ng;
	(void)flags;
	struct cs_h2conn *c = user;
	size_t room = ST_CORKED_WRITE_BYTES - c->tx_len;
	if (c->tx == NULL || room == 0)
		return NGHTTP2_ERR_WOULDBLOCK;
	size_t n = len < room ? len : room;
	memcpy(c->tx + c->tx_len, data, n);
	c->tx_len += n;
	return (ssize_t)n;
}

int cs__h2_start(struct cs_front *conn)
{
	struct cs_h2conn *c = calloc(1, sizeof *c);
	if (c == NULL)
		return -ENOMEM;
	nghttp2_session_callbacks *cbs;
	if (nghttp2_session_callbacks_new(&cbs) != 0) {
		free(c);
		return -ENOMEM;
	}
	cs__h2s_callbacks(cbs);
	cs__h2a_callbacks(cbs);
	nghttp2_session_callbacks_set_send_callback(cbs, on_send);
	int rc = nghttp2_session_server_new(&c->ng, cbs, c);
	nghttp2_session_callbacks_del(cbs);
	if (rc != 0) {
		free(c);
		return -ENOMEM;
	}
	nghttp2_settings_entry iv[] = {
	        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, CS_H2_MAX_STREAMS},
	        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, ST_MAX_HTTP_HEAD_BYTES},
	};
	if (nghttp2_submit_settings(c->ng, NGHTTP2_FLAG_NONE, iv, sizeof iv / sizeof iv[0]) != 0) {
		nghttp2_session_del(c->ng);
		free(c);
		return -ENOMEM;
	}
	c->conn = conn;
	c->idle = true; /* front.c armed the idle deadline at the first bytes */
	conn->h2 = c;
	conn->srv->m.h2_connections_total++;
	lws_callback_on_writable(conn->wsi);
	return 0;
}

int cs__h2_rx(struct cs_front *conn, const uint8_t *p, size_t len)
{
	struct cs_h2conn *c = conn->h2;
	ssize_t n = nghttp2_session_mem_recv(c->ng, p, len);
	if (n < 0) {
		st_log(ST_LOG_INFO, NULL, 0, "HTTP/2 connection [front|%llu] closed: %s",
		       (unsigned long long)conn->ordinal, nghttp2_strerror((int)n));
		return -1;
	}
	cs__h2s_process(c);
	reap(c);
	cs__h2_wake(c);
	return 0;
}

int cs__h2_writeable(struct cs_front *conn)
{
	struct cs_h2conn *c = conn->h2;
	struct cs_server *srv = conn->srv;
	if (st_lws_write_pending(conn->wsi))
		return 0; /* the last write is still going out (stream/tunnelwrite.h) */
	cs__h2s_process(c);
	/* One batch of frames: nghttp2 pulls each stream's body as its window allows. */
	c->tx = srv->tx + LWS_PRE;
	c->tx_len = 0;
	int rc = nghttp2_session_send(c->ng);
	size_t n = c->tx_len;
	c->tx = NULL;
	c->tx_len = 0;
	if (rc != 0) {
		st_log(ST_LOG_INFO, NULL, 0, "HTTP/2 connection [front|%llu] closed: %s",
		       (unsigned long long)conn->ordinal, nghttp2_strerror(rc));
		return -1;
	}
	reap(c);
	if (n > 0 && st_lws_write_corked(conn->wsi, srv->tx + LWS_PRE, n, LWS_WRITE_RAW) < 0)
		return -1;
	if (nghttp2_session_want_write(c->ng)) {
		lws_callback_on_writable(conn->wsi);
		return 0;
	}
	if (!nghttp2_session_want_read(c->ng)) {
		if (st_lws_write_pending(conn->wsi))
			return 0; /* the GOAWAY first */
		SSL *ssl = lws_get_ssl(conn->wsi);
		if (ssl)
			SSL_shutdown(ssl);
		return -1;
	}
	return 0;
}

void cs__h2_drain(struct cs_front *conn)
{
	struct cs_h2conn *c = conn->h2;
	if (c->goaway)
		return;
	c->goaway = true;
	nghttp2_submit_goaway(c->ng, NGHTTP2_FLAG_NONE,
	                      nghttp2_session_get_last_proc_stream_id(c->ng), NGHTTP2_NO_ERROR,
	                      NULL, 0);
	cs__h2_wake(c);
}

void cs__h2_free(struct cs_front *conn)
{
	struct cs_h2conn *c = conn->h2;
	lws_sul_cancel(&c->sul_heads);
	while (c->streams)
		cs__h2s_free(c, c->streams);
	nghttp2_session_del(c->ng);
	free(c);
	conn->h2 = NULL;
}
