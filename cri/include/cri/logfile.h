/*
 * cri/logfile.h — reading one CRI log file with the kubelet's options (the non-follow part of
 * /containerLogs; follow, rotation and container exit come with the edgestream backend).
 *
 * tailLines seeks backwards in blocks, counting newlines, so a big file is never read whole;
 * records are then read forward line by line (a record longer than CRI_LOGFILE_MAX_LINE is
 * skipped, as unparsable records are), formatted by cri_log_format() and handed to a sink in
 * pieces. Blocking file I/O: call it from a worker thread.
 */
#ifndef CRI_LOGFILE_H
#define CRI_LOGFILE_H

#include <stddef.h>
#include <sys/types.h>

#include <cri/logs.h>

#define CRI_LOGFILE_MAX_LINE (64u * 1024u)

/* Receives output bytes; return 0 to go on, a negative errno to stop (passed back). */
typedef int (*cri_log_sink)(const char *p, size_t n, void *user);

/*
 * cri_log_read_file() - the output of @path under @w's options, to @sink. With tailLines the
 * last N complete records are read (and at most N records written); otherwise everything. An
 * unterminated last record is written too. *@end (may be NULL) is set to the offset after the
 * last complete record read, where a follower would continue.
 * Returns 0, -errno from open/read, or the sink's error.
 */
int cri_log_read_file(const char *path, struct cri_log_writer *w, cri_log_sink sink, void *user,
                      off_t *end);

/* cri_log_tail_offset() - the offset where the last @n complete records of the open file @fd
 * (@size bytes) start, found by reading backwards in 4 KiB blocks. -errno on read errors. */
off_t cri_log_tail_offset(int fd, off_t size, uint64_t n);

#endif /* CRI_LOGFILE_H */
