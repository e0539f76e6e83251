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
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <time.h>
#include <unistd.h>

#include <cri/client.h>
#include <cri/logfile.h>
#include <cri/logs.h>
#include <stream/chunked.h>
#include <stream/err.h>
#include <stream/ext.h>
#include <stream/log.h>
#include <stream/status.h>
#include <stream/workq.h>

#include "backend.h"
#include "cri_plan.h"
#include "relay.h"
#include "tunnel.h"

/* One job's output: the longest line the kubelet writes with its prefix (a job always makes
 * progress), and no more, since a follower reserves it twice from the process budget (this
 * buffer, and the queue toward the cloud it is handed to, relay.c): 1,600 jobs per 100 MiB. */
#define LOGS_OUT_BYTES CRI_LOGFILE_MIN_OUT
/* What one job hands to the relay at most: its output, chunk framing, the answer's head. */
#define LOGS_BURST_BYTES  (LOGS_OUT_BYTES + 1024u)
#define LOGS_STATUS_EVERY (1000u) /* ms between ContainerStatus checks while following */

struct es_logs {
	struct edgestream *es;
	struct es_stream *st;        /* NULL once the stream ended while a job ran */
	struct es_logs *next, *prev; /* es->logs, while the stream lives */
	bool body_only;              /* a base-protocol cloud: the bare body, no head */
	/* A follower holds little for its life: the plan (19 KB, mostly exec's command) goes once
	 * the container is resolved, the path is an exact copy, the directory derived when needed,
	 * the output buffer (LOGS_OUT_BYTES) exists only while there is output. Workers read
	 * es->cfg (read-only while the instance lives). */
	struct es_cri_plan *plan; /* names to resolve; NULL after the first job */
	struct cri_log_opts opts;
	/* worker side (only while busy, or before the first job) */
	bool opened;
	char container_id[CRI_ID_MAX + 1];
	char *path; /* the log file (malloc'd by the first job) */
	struct cri_log_cursor cur;
	char *out;
	size_t out_len;
	bool at_eof;
	bool check_status;       /* this job asks the runtime whether the container still runs */
	enum st_error_form form; /* how an error before the answer is written */
	bool ending;             /* the container stopped: read to the end, then finish */
	int rc;                  /* the first job's failure: an HTTP status */
	char why[1024];
	/* loop side */
	bool busy, wake, waiting, status_due, head_sent, finished;
	int wd; /* inotify watch on the log directory, -1 when none */
	lws_sorted_usec_list_t sul_status;
};

static uint64_t wall_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- worker side ----------------------------------------------------------------------- */

/* The container the kubelet would show: the newest attempt, or with @previous the newest one
 * before it. Sets l->rc (an HTTP status) and l->why on failure. */
static int resolve(struct es_logs *l, struct cri_client *c)
{
	const struct es_cri_plan *p = l->plan;
	char sandbox[CRI_ID_MAX + 1], err[400] = "";
	int rc = es_cri_find_sandbox(c, p, false, sandbox, sizeof sandbox, err, sizeof err);
	if (rc == -ENOENT) {
		l->rc = 400;
		snprintf(l->why, sizeof l->why, "container \"%s\" in pod \"%s\" is not available",
		         p->container, p->pod);
		return rc;
	}
	struct cri_label lab = {CRI_LABEL_CONTAINER_NAME, p->container};
	struct cri_container ct[32]; /* a worker's stack */
	size_t n = 0;
	if (rc == 0)
		rc = cri_list_containers(c, sandbox, &lab, 1, -1, ct, 32, &n, err, sizeof err);
	if (rc < 0) {
		l->rc = rc == -ETIMEDOUT ? 504 : 503;
		snprintf(l->why, sizeof l->why, "container runtime: %s", err);
		return rc;
	}
	size_t cur = n, prev = n;
	for (size_t i = 0; i < n; i++)
		if (cur == n || ct[i].attempt > ct[cur].attempt ||
		    (ct[i].attempt == ct[cur].attempt && ct[i].created_at > ct[cur].created_at))
			cur = i;
	for (size_t i = 0; i < n; i++)
		if (i != cur && ct[i].attempt < ct[cur].attempt &&
		    (prev == n || ct[i].attempt > ct[prev].attempt))
			prev = i;
	if (cur == n) {
		l->rc = 400;
		snprintf(l->why, sizeof l->why, "container \"%s\" in pod \"%s\" is not available",
		         p->container, p->pod);
		return -ENOENT;
	}
	size_t pick = l->opts.previous ? prev : cur;
	if (pick == n) {
		l->rc = 400;
		snprintf(l->why, sizeof l->why,
		         "previous terminated container \"%s\" in pod \"%s\" not found",
		         p->container, p->pod);
		return -ENOENT;
	}
	struct cri_container_status cs;
	rc = cri_container_status(c, ct[pick].id, &cs, err, sizeof err);
	if (rc == -ENOENT) { /* removed since the list */
		l->rc = 400;
		snprintf(l->why, sizeof l->why, "container \"%s\" in pod \"%s\" is not available",
		         p->container, p->pod);
		return rc;
	}
	if (rc < 0) {
		l->rc = rc == -ETIMEDOUT ? 504 : 503;
		snprintf(l->why, sizeof l->why, "container runtime: %s", err);
		return rc;
	}
	if (cs.state == CRI_CONTAINER_CREATED) {
		l->rc = 400;
		snprintf(l->why, sizeof l->why,
		         "container \"%s\" in pod \"%s\" is waiting to start: ContainerCreating",
		         p->container, p->pod);
		return -EAGAIN;
	}
	if (cs.log_path[0] != '/') {
		l->rc = 400;
		snprintf(l->why, sizeof l->why, "container \"%s\" in pod \"%s\" has no log file",
		         p->container, p->pod);
		return -ENOENT;
	}
	snprintf(l->container_id, sizeof l->container_id, "%s", ct[pick].id);
	l->path = strdup(cs.log_path);
	if (l->path == NULL) {
		l->rc = 500;
		snprintf(l->why, sizeof l->why, "out of memory");
		return -ENOMEM;
	}
	/* A follower of a container that is not running reads to the end and stops. */
	l->ending = cs.state != CRI_CONTAINER_RUNNING;
	return 0;
}

/* Whether the container still runs (a runtime that does not answer counts as running). */
static bool still_running(struct es_logs *l, struct cri_client *c)
{
	struct cri_container_status cs;
	char err[256];
	int rc = cri_container_status(c, l->container_id, &cs, err, sizeof err);
	if (rc == -ENOENT)
		return false;
	return rc < 0 || cs.state == CRI_CONTAINER_RUNNING;
}

static void logs_work(void *arg)
{
	struct es_logs *l = arg;
	struct cri_client *c = NULL;
	l->out_len = 0;
	if (!l->opened || l->check_status) {
		if (cri_client_new(&c, l->es->cfg.cri_socket, l->es->cfg.cri_timeout_ms) < 0) {
			l->rc = 500;
			snprintf(l->why, sizeof l->why, "cannot set up a CRI client");
			return;
		}
	}
	if (!l->opened) {
		if (resolve(l, c) < 0)
			goto out;
		int rc = cri_log_cursor_open(&l->cur, l->path, &l->opts);
		if (rc < 0) {
			l->rc = 400;
			snprintf(l->why, sizeof l->why, "failed to open log file \"%.600s\": %s",
			         l->path, strerror(-rc));
			goto out;
		}
		l->opened = true;
	}
	if (l->out == NULL && (l->out = malloc(LOGS_OUT_BYTES)) == NULL) {
		l->rc = 500;
		snprintf(l->why, sizeof l->why, "out of memory");
		goto out;
	}
	bool final = !l->opts.follow || l->ending;
	for (;;) {
		bool eof;
		ssize_t n = cri_log_cursor_read(&l->cur, l->out + l->out_len,
		                                LOGS_OUT_BYTES - l->out_len, final, &eof);
		if (n < 0) {
			l->rc = 500;
			snprintf(l->why, sizeof l->why, "reading \"%.600s\": %s", l->path,
			         strerror((int)-n));
			break;
		}
		l->out_len += (size_t)n;
		l->at_eof = eof;
		if (!eof || l->cur.complete || final)
			break;
		/* A follower at the end of the file: a rotated file is finished, go on in the
		 * new one; else maybe ask whether the container still runs. */
		if (cri_log_cursor_rotated(&l->cur, l->path) == 1 &&
		    cri_log_cursor_reopen(&l->cur, l->path) == 0)
			continue;
		if (l->check_status && c && !still_running(l, c)) {
			l->ending = true; /* drain what it wrote last, then stop */
			final = true;
			l->check_status = false;
			continue;
		}
		break;
	}
out:
	cri_client_free(c);
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

/* The directory of @path into @dir (what inotify watches: a rotation renames the file). */
static void dir_of(const char *path, char *dir, size_t cap)
{
	snprintf(dir, cap, "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash)
		*(slash == dir ? slash + 1 : slash) = '\0';
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

/* The watch on @l's directory goes when no other follower uses it. */
static void unwatch(struct es_logs *l)
{
	struct edgestream *es = l->es;
	if (l->wd < 0)
		return;
	int wd = l->wd;
	l->wd = -1;
	for (struct es_logs *o = es->logs; o; o = o->next)
		if (o != l && o->wd == wd)
			return;
	if (es->inotify_fd >= 0)
		inotify_rm_watch(es->inotify_fd, wd);
}

static void on_status_timer(lws_sorted_usec_list_t *sul);
static void pump(struct es_logs *l);

/* The shared inotify descriptor, made on the first follower and adopted into the loop. */
static int inotify_ready(struct edgestream *es)
{
	if (es->inotify_wsi)
		return 0;
	int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (fd < 0)
		return -errno;
	lws_sock_file_fd_type u;
	u.filefd = fd;
	es->inotify_wsi = lws_adopt_descriptor_vhost(es->vh_client, LWS_ADOPT_RAW_FILE_DESC, u,
	                                             "es-aux", NULL);
	if (es->inotify_wsi == NULL) {
		close(fd);
		return -ENOMEM;
	}
	lws_set_opaque_user_data(es->inotify_wsi, es);
	es->inotify_fd = fd;
	return 0;
}

/* Waits for the file to grow: inotify on its directory plus the status timer. */
static int wait_for_more(struct es_logs *l)
{
	struct edgestream *es = l->es;
	if (l->wd < 0) {
		int rc = inotify_ready(es);
		if (rc < 0)
			return rc;
		/* Writes to the file, and a new file at its name (rotation). */
		char dir[CRI_PATH_MAX];
		dir_of(l->path, dir, sizeof dir);
		l->wd = inotify_add_watch(es->inotify_fd, dir,
		                          IN_MODIFY | IN_CREATE | IN_MOVED_TO | IN_DELETE_SELF |
		                                  IN_MOVE_SELF);
		if (l->wd < 0)
			return -errno;
	}
	l->waiting = true;
	if (!lws_dll2_is_detached(&l->sul_status.list))
		return 0;
	lws_sul_schedule(es->ctx, 0, &l->sul_status, on_status_timer,
	                 (lws_usec_t)LOGS_STATUS_EVERY * LWS_US_PER_MS);
	return 0;
}

static void logs_done(void *arg, int status);

static void pump(struct es_logs *l)
{
	struct es_stream *st = l->st;
	if (st == NULL || l->busy || l->finished || (l->waiting && !l->wake))
		return;
	if (!st_buf_below_low(&st->to_cloud))
		return; /* on_writable comes once the cloud took it */
	l->busy = true;
	l->wake = false;
	l->waiting = false;
	l->check_status = l->status_due && !l->ending;
	l->status_due = false;
	int rc = st_workq_submit(l->es->wq, logs_work, logs_done, l);
	if (rc < 0) {
		l->busy = false;
		l->finished = true;
		es_stream_fail(st, ST_EXT_ERR_LIMIT, "too many runtime calls waiting");
	}
}

static void on_status_timer(lws_sorted_usec_list_t *sul)
{
	struct es_logs *l = lws_container_of(sul, struct es_logs, sul_status);
	l->status_due = true;
	l->wake = true;
	pump(l);
}

void es_logs_on_inotify(struct edgestream *es)
{
	union {
		struct inotify_event ev;
		char buf[4096];
	} u;
	for (;;) {
		ssize_t n = read(es->inotify_fd, u.buf, sizeof u.buf);
		if (n <= 0)
			break;
		for (ssize_t off = 0; off + (ssize_t)sizeof(struct inotify_event) <= n;) {
			const struct inotify_event *ev = (const void *)(u.buf + off);
			for (struct es_logs *l = es->logs; l; l = l->next)
				if (l->wd == ev->wd)
					l->wake = true;
			off += (ssize_t)sizeof(struct inotify_event) + ev->len;
		}
	}
	for (struct es_logs *l = es->logs, *next; l; l = next) {
		next = l->next; /* pump() may end this stream, no other */
		if (l->wake)
			pump(l);
	}
}

void es_logs_on_inotify_closed(struct edgestream *es)
{
	es->inotify_wsi = NULL;
	es->inotify_fd = -1; /* lws closed it with the wsi */
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
		int rc = wait_for_more(l);
		if (rc < 0) {
			st_warn_ns(l->es->node, st->id, "cannot watch the directory of %s: %s",
			           l->path, st_strerror(rc));
			finish(l);
			return;
		}
		if (l->wake)
			pump(l);
		return;
	}
	pump(l);
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
	pump(l);
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
	unwatch(l);
	l->st = NULL;
	if (!l->busy)
		logs_free(l); /* else the job's completion frees it */
}

static void logs_on_writable(struct es_stream *st)
{
	if (st->be)
		pump(st->be);
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
