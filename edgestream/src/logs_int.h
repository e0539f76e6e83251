/*
 * edgestream/src/logs_int.h — the CRI logs backend's state, shared by its three files: logs.c
 * (the backend ops and the answer, on the loop), logs_read.c (the worker job: resolving the
 * container, reading and following the file) and logs_follow.c (a follower at the end of the
 * file: inotify and the status timer, on the loop). A struct es_logs is touched by one thread
 * at a time: the worker while l->busy (its "worker side" fields), else the loop.
 */
#ifndef EDGESTREAM_LOGS_INT_H
#define EDGESTREAM_LOGS_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cri/client.h>
#include <cri/logfile.h>
#include <cri/logs.h>
#include <stream/status.h>

#include "backend.h"
#include "cri_plan.h"
#include "es.h"

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

/* ---- logs.c ------------------------------------------------------------------------------ */

/* Queues @l's next job when it may run: not busy, not finished, woken if waiting, and the
 * stream's queue toward the cloud below its low mark. Loop thread. */
void es__logs_pump(struct es_logs *l);

/* ---- logs_read.c ------------------------------------------------------------------------- */

/* The worker job (st_workq): the first resolves the container and opens the cursor; each reads
 * one buffer into l->out, following a rotation, and when l->check_status asks whether the
 * container still runs. Failures set l->rc (an HTTP status) and l->why. Worker thread. */
void es__logs_work(void *arg);

/* ---- logs_follow.c ----------------------------------------------------------------------- */

/* Waits for the file to grow: inotify on its directory plus the status timer. 0 or -errno. */
int es__logs_wait_for_more(struct es_logs *l);

/* The watch on @l's directory goes when no other follower uses it. */
void es__logs_unwatch(struct es_logs *l);

#endif /* EDGESTREAM_LOGS_INT_H */
