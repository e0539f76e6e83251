/*
 * edgestream/src/logs.c — the CRI logs backend (backend.h): /containerLogs served from the CRI
 * log files with the kubelet's semantics (spec/kubelet-http.md §5), no connection; the stream's
 * state is a struct es_logs (st->be), which outlives the stream while a job runs.
 *
 * The loop never touches a file or the runtime: every step that blocks is one job on the worker
 * pool, and a stream has at most one job in flight.
 *   1. The first job resolves the container (sandbox and container by the kubelet's labels, the
 *      newest attempt or, with `previous`, the one before), asks ContainerStatus for the log
 *      path, opens a cursor (cri/logfile.h) and reads the first buffer.
 *   2. The loop answers 200 at once (a follower needs the headers before any line), then one
 *      chunk per buffer. The next read is queued only when the stream's queue toward the cloud
 *      is below its low mark, so a slow client holds one buffer, never the file.
 *   3. At the end of the file a follower waits: inotify on the log directory (shared by all
 *      followers, adopted into the loop) wakes it on a write or a new file (rotation: the cursor
 *      moves to the new file once the old one is read to its end), and a 1 s timer has the next
 *      job ask ContainerStatus; a container no longer RUNNING (or gone) is read to its end once
 *      more and the answer ends. An Unavailable runtime counts as running, as in the kubelet.
 * Errors before the answer carry the kubelet's codes and texts: 400 and 422 for options, 400
 * with validateContainerLogStatus's text for a pod or container the runtime does not have (the
 * kubelet knows every pod bound to its node; its 404s would reach kubectl as generic text). To
 * kube-apiserver's pods/log client the body is the text alone with a status it shows
 * (st_http_error_answer); to others a Status.
 *
 * This file is the loop side: the backend ops, the options, pumping jobs, the answer. The job
 * is logs_read.c's, a follower's wait logs_follow.c's (logs_int.h between them).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <stream/chunked.h>
#include <stream/err.h>
#include <stream/ext.h>
#include <stream/log.h>
#include <stream/workq.h>

#include "logs_int.h"
#include "relay.h"
#include "tunnel.h"

static uint64_t wall_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- loop side ------------------------------------------------------------------------- */

static void logs_free(struct es_logs *l)
{
	if (l->opened)
		cri_log_cursor_close(&l->cur);
	free(l->out);
	free(l->plan);
	free(l->path);
	free(l);
}

/* @l leaves the followers' list (its stream ended). */
static void unlink_(struct es_logs *l)
{
	struct edgestream *es = l->es;
	if (l->prev)
		l->prev->next = l->next;
	else if (es->logs == l)
		es->logs = l->next;
	if (l->next)
		l->next->prev = l->prev;
	l->next = l->prev = NULL;
}

static void logs_done(void *arg, int status);

void es__logs_pump(struct es_logs *l)
{
	struct es_stream *st = l->st;
	if (st == NULL || l->busy || l->finished || (l->waiting && !l->wake))
		return;
	if (!st_buf_below_low(&st->to_cloud) || es_stream_cloud_full(st))
		return; /* on_writable comes once the cloud took it */
	l->busy = true;
	l->wake = false;
	l->waiting = false;
	l->check_status = l->status_due && !l->ending;
	l->status_due = false;
	int rc = st_workq_submit(l->es->wq, es__logs_work, logs_done, l);
	if (rc < 0) {
		l->busy = false;
		l->finished = true;
		es_stream_fail(st, ST_EXT_ERR_LIMIT, "too many runtime calls waiting");
	}
}

/* An error before the answer: a response with the kubelet's code (l->form), or (a cloud without
 * raw-response) the stream's failure, which the cloud answers the same way. */
static void answer_error(struct es_logs *l, int http_status, const char *reason)
{
	struct es_stream *st = l->st;
	struct edgestream *es = l->es;
	char why[sizeof l->why];
	snprintf(why, sizeof why, "%s", reason); /* @l goes with the stream */
	l->finished = true;
	if (!(es_tunnel_caps(st->t) & ST_CAP_RAW_RESPONSE)) {
		uint64_t code = http_status == 504   ? ST_EXT_ERR_TIMEOUT
		                : http_status == 503 ? ST_EXT_ERR_UNREACHABLE
		                : http_status >= 500 ? ST_EXT_ERR_INTERNAL
		                                     : ST_EXT_ERR_BAD_REQUEST;
		es_stream_fail(st, code, why);
		return;
	}
	st_warn_ns(es->node, st->id, "containerLogs: %d %s", http_status, why);
	char resp[ST_MAX_STATUS_JSON_BYTES + 512];
	ssize_t n = st_http_error_answer(resp, sizeof resp, l->form, http_status, why);
	if (n > 0 && es_stream_to_cloud(st, (const uint8_t *)resp, (size_t)n) < 0)
		return;
	es_stream_backend_done(st);
}

/* Output toward the cloud: one chunk (or the bare bytes for a base-protocol cloud). */
static int send_out(struct es_logs *l, const char *p, size_t n)
{
	struct es_stream *st = l->st;
	if (n == 0)
		return 0;
	if (l->body_only)
		return es_stream_to_cloud(st, (const uint8_t *)p, n);
	char head[ST_CHUNK_HEADER_MAX_BYTES];
	ssize_t hn = st_chunked_encode_header(head, sizeof head, n);
	if (es_stream_to_cloud(st, (const uint8_t *)head, (size_t)hn) < 0 ||
	    es_stream_to_cloud(st, (const uint8_t *)p, n) < 0 ||
	    es_stream_to_cloud(st, (const uint8_t *)ST_CHUNK_TRAILER, sizeof ST_CHUNK_TRAILER - 1) <
	            0)
		return -1;
	return 0;
}

static void finish(struct es_logs *l)
{
	struct es_stream *st = l->st;
	l->finished = true;
	lws_sul_cancel(&l->sul_status);
	if (!l->body_only &&
	    es_stream_to_cloud(st, (const uint8_t *)ST_CHUNK_LAST, sizeof ST_CHUNK_LAST - 1) < 0)
		return;
	es_stream_backend_done(st); /* REMOVE once the queue is out */
}

static void logs_done(void *arg, int status)
{
	struct es_logs *l = arg;
	l->busy = false;
	if (l->st == NULL || status < 0) {
		if (l->st) { /* the pool is going away: so is the stream */
			l->st->be = NULL;
			unlink_(l);
			lws_sul_cancel(&l->sul_status);
		}
		logs_free(l);
		return;
	}
	struct es_stream *st = l->st;
	if (!l->head_sent && l->rc) {
		answer_error(l, l->rc, l->why);
		return;
	}
	if (!l->head_sent) {
		l->head_sent = true;
		st_dbg_ns(l->es->node, st->id, "containerLogs from %s", l->path);
		free(l->plan); /* resolved: the names are no longer needed */
		l->plan = NULL;
		static const char head[] = "HTTP/1.1 200 OK\r\n"
		                           "Content-Type: text/plain; charset=utf-8\r\n"
		                           "Transfer-Encoding: chunked\r\n\r\n";
		if (!l->body_only &&
		    es_stream_to_cloud(st, (const uint8_t *)head, sizeof head - 1) < 0)
			return;
	}
	if (send_out(l, l->out, l->out_len) < 0)
		return;
	l->out_len = 0;
	if (l->rc) { /* a read error after the answer began: the body just ends */
		st_warn_ns(l->es->node, st->id, "containerLogs: %s", l->why);
		finish(l);
		return;
	}
	bool done = l->cur.complete || (l->at_eof && (!l->opts.follow || l->ending));
	if (done) {
		finish(l);
		return;
	}
	if (l->at_eof) {
		/* Nothing more now: an idle follower keeps no output buffer. */
		free(l->out);
		l->out = NULL;
		int rc = es__logs_wait_for_more(l);
		if (rc < 0) {
			st_warn_ns(l->es->node, st->id, "cannot watch the directory of %s: %s",
			           l->path, st_strerror(rc));
			finish(l);
			return;
		}
		if (l->wake)
			es__logs_pump(l);
		return;
	}
	es__logs_pump(l);
}

static int logs_open(struct es_stream *st, struct st_connect_req *req, const char *path,
                     size_t path_len)
{
	(void)path; /* the plan reads the request itself */
	(void)path_len;
	struct edgestream *es = st->es;
	struct es_logs *l = calloc(1, sizeof *l);
	if (l == NULL) {
		es_stream_fail(st, ST_EXT_ERR_INTERNAL, "out of memory");
		return -1;
	}
	l->plan = malloc(sizeof *l->plan);
	if (l->plan == NULL) {
		free(l);
		es_stream_fail(st, ST_EXT_ERR_INTERNAL, "out of memory");
		return -1;
	}
	if (es_cri_plan_for(st, req, l->plan) < 0) {
		free(l->plan);
		free(l);
		return -1;
	}
	l->es = es;
	l->st = st;
	l->wd = -1;
	st->be = l;
	l->next = es->logs;
	if (es->logs)
		es->logs->prev = l;
	es->logs = l;
	l->body_only = !(es_tunnel_caps(st->t) & ST_CAP_RAW_RESPONSE); /* KubeEdge relays bodies */
	l->form = st_error_form_for(true, st_connect_req_header(req, "X-Forwarded-Uri") != NULL);
	const char *q = req->raw_query ? req->raw_query : "";
	int http = cri_log_opts_parse(q, strlen(q), (int64_t)wall_ns(), &l->opts, l->why,
	                              sizeof l->why);
	if (http != 0) {
		es->m.streams_refused++;
		answer_error(l, http, l->why);
		return -1;
	}
	st_dbg_ns(es->node, st->id, "containerLogs %s/%s/%s%s → the container runtime (%s)",
	          l->plan->namespace_, l->plan->pod, l->plan->container,
	          l->opts.follow ? " (follow)" : "", es->cfg.cri_socket);
	es__logs_pump(l);
	return 0;
}

static void logs_close(struct es_stream *st)
{
	struct es_logs *l = st->be;
	if (l == NULL)
		return;
	st->be = NULL;
	unlink_(l);
	lws_sul_cancel(&l->sul_status);
	es__logs_unwatch(l);
	l->st = NULL;
	if (!l->busy)
		logs_free(l); /* else the job's completion frees it */
}

static void logs_on_writable(struct es_stream *st)
{
	if (st->be)
		es__logs_pump(st->be);
}

static void describe(const struct es_stream *st, char *buf, size_t cap)
{
	snprintf(buf, cap, "the container runtime's log files (%.200s)", st->es->cfg.cri_socket);
}

const struct es_backend_ops es_backend_cri_logs = {
        .name = "CRI logs",
        .to_cloud_burst = LOGS_BURST_BYTES,
        .own_bytes = LOGS_OUT_BYTES,
        .open = logs_open,
        .on_writable = logs_on_writable,
        .close = logs_close,
        .describe = describe,
};
