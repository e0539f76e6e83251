/*
 * edgestream/src/logs_follow.c — a CRI logs follower at the end of the file (logs_int.h):
 * inotify on the log directory, one descriptor shared by all followers and adopted into the
 * loop, wakes it on a write or a new file (rotation), and a 1 s timer has its next job ask
 * ContainerStatus, so a container that stopped ends the answer. Loop thread only.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "logs_int.h"

/* The directory of @path into @dir (what inotify watches: a rotation renames the file). */
static void dir_of(const char *path, char *dir, size_t cap)
{
	snprintf(dir, cap, "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash)
		*(slash == dir ? slash + 1 : slash) = '\0';
}

/* The watch on @l's directory goes when no other follower uses it. */
void es__logs_unwatch(struct es_logs *l)
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
int es__logs_wait_for_more(struct es_logs *l)
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

static void on_status_timer(lws_sorted_usec_list_t *sul)
{
	struct es_logs *l = lws_container_of(sul, struct es_logs, sul_status);
	l->status_due = true;
	l->wake = true;
	es__logs_pump(l);
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
		next = l->next; /* es__logs_pump() may end this stream, no other */
		if (l->wake)
			es__logs_pump(l);
	}
}

void es_logs_on_inotify_closed(struct edgestream *es)
{
	es->inotify_wsi = NULL;
	es->inotify_fd = -1; /* lws closed it with the wsi */
}
