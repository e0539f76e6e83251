/*
 * cri/logfile.h — reading CRI log files with the kubelet's options: the file side of
 * /containerLogs (spec/kubelet-http.md §5).
 *
 * A cursor reads one file forward, record by record, from where tailLines puts it (found by
 * reading backwards in 4 KiB blocks, so a big file is never read whole) and formats each record
 * with cri_log_format() into a caller's bounded buffer. It stops at a buffer's worth, at EOF, or
 * when the options say the output is complete, and picks up where it stopped on the next call:
 * a follower calls it again when the file grows, and moves it to a new file on rotation. A record
 * is consumed only when it ends in '\n' (the runtime may still be writing the rest), except that
 * a reader that is not following writes an unterminated last record once. Records longer than
 * CRI_LOGFILE_MAX_LINE are skipped, as unparsable ones are.
 *
 * Blocking file I/O: call it from a worker thread. One cursor is used by one thread at a time.
 */
#ifndef CRI_LOGFILE_H
#define CRI_LOGFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <cri/logs.h>

#define CRI_LOGFILE_MAX_LINE (64u * 1024u)
/* A buffer given to cri_log_cursor_read() holds at least one formatted record of this size. */
#define CRI_LOGFILE_MIN_OUT (CRI_LOG_PREFIX_BYTES + CRI_LOGFILE_MAX_LINE + 1u)

struct cri_log_cursor {
	int fd;
	off_t pos; /* start of the next record to read */
	dev_t dev; /* the open file, to notice a rotation */
	ino_t ino;
	struct cri_log_writer w;
	uint64_t records_left; /* tailLines without follow: records still to write */
	bool limited;          /* records_left applies */
	bool skipping;         /* inside an overlong record: dropped up to its '\n' */
	bool complete;         /* the options say the output is complete: nothing more */
	char *block;           /* CRI_LOGFILE_MAX_LINE + 1 bytes */
};

/*
 * cri_log_cursor_open() - open @path and place the cursor where @o's tailLines start (the
 * beginning otherwise). @c is ready for cri_log_cursor_read(); release it with
 * cri_log_cursor_close(). Returns 0 or -errno.
 */
int cri_log_cursor_open(struct cri_log_cursor *c, const char *path, const struct cri_log_opts *o);

/*
 * cri_log_cursor_read() - format records from the cursor into @out (@cap >=
 * CRI_LOGFILE_MIN_OUT) until it is full, the file ends or the output is complete. *@at_eof is
 * set when the cursor reached the end of the file (only complete records consumed, unless
 * @final: then an unterminated last record is written and consumed too).
 * Returns the bytes written (0 is fine: nothing new), or -errno.
 */
ssize_t cri_log_cursor_read(struct cri_log_cursor *c, char *out, size_t cap, bool final,
                            bool *at_eof);

/*
 * cri_log_cursor_rotated() - whether @path now names another file than the one open (the
 * runtime reopened its log after a rotation). 0 = same or no file at @path yet, 1 = rotated,
 * -errno on other stat errors.
 */
int cri_log_cursor_rotated(const struct cri_log_cursor *c, const char *path);

/* cri_log_cursor_reopen() - continue in the file now at @path, from its beginning; the output
 * state (timestamps, limitBytes) carries on. 0 or -errno (the old file stays open then). */
int cri_log_cursor_reopen(struct cri_log_cursor *c, const char *path);

void cri_log_cursor_close(struct cri_log_cursor *c);

/* Receives output bytes; return 0 to go on, a negative errno to stop (passed back). */
typedef int (*cri_log_sink)(const char *p, size_t n, void *user);

/*
 * cri_log_read_file() - the whole non-follow answer for @path under @o, to @sink: a cursor
 * read to the end with @final set. Returns 0, -errno from open/read, or the sink's error.
 */
int cri_log_read_file(const char *path, const struct cri_log_opts *o, cri_log_sink sink,
                      void *user);

/* cri_log_tail_offset() - the offset where the last @n complete records of the open file @fd
 * (@size bytes) start, found by reading backwards in 4 KiB blocks. -errno on read errors. */
off_t cri_log_tail_offset(int fd, off_t size, uint64_t n);

#endif /* CRI_LOGFILE_H */
