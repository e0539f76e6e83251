/*
 * edgestream/src/logs_read.c — the CRI logs backend's worker job (logs_int.h): the first job
 * resolves the container the kubelet would show (sandbox and container by its labels, the
 * newest attempt or, with `previous`, the one before), asks ContainerStatus for the log path
 * and opens a cursor (cri/logfile.h); every job reads one buffer of lines, moves to the new
 * file once a rotated one is read to its end, and when due asks whether the container still
 * runs. Worker thread only; the loop does not touch the state while the job runs.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "logs_int.h"

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

void es__logs_work(void *arg)
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
