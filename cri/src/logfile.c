/*
 * cri/src/logfile.c — one CRI log file with the kubelet's options (logfile.h).
 */
#include <cri/logfile.h>

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TAIL_BLOCK 4096u
#define BLOCK      (CRI_LOGFILE_MAX_LINE + 1u) /* the longest record and its '\n' */
/* The most cri_log_format() writes for a record of a line of @len bytes (its content is
 * part of the line). */
#define OUTPUT_MAX(len) (CRI_LOG_PREFIX_BYTES + (size_t)(len) + 1u)

off_t cri_log_tail_offset(int fd, off_t size, uint64_t n)
{
	if (n == 0)
		return size;
	char buf[TAIL_BLOCK];
	off_t pos = size;
	uint64_t seen = 0;
	bool skipping_partial = true; /* an unterminated last line is not counted */
	while (pos > 0) {
		size_t len = pos > (off_t)TAIL_BLOCK ? TAIL_BLOCK : (size_t)pos;
		pos -= (off_t)len;
		ssize_t r = pread(fd, buf, len, pos);
		if (r < 0)
			return -errno;
		if ((size_t)r != len)
			return -EIO; /* the file shrank under us */
		for (size_t i = len; i > 0; i--) {
			if (buf[i - 1] != '\n')
				continue;
			if (skipping_partial) { /* the newline ending the last complete line */
				skipping_partial = false;
				continue;
			}
			if (++seen == n)
				return pos + (off_t)i;
		}
	}
	return 0;
}

/* One record (a line without its '\n'): parse, format into @out, count. Returns bytes written. */
static size_t emit(struct cri_log_cursor *c, const char *line, size_t len, char *out)
{
	struct cri_log_record r;
	if (cri_log_parse_record(line, len, &r) < 0)
		return 0; /* skipped, as the kubelet does */
	size_t n = cri_log_format(&c->w, &r, out);
	if (c->limited && --c->records_left == 0)
		c->complete = true;
	if (c->w.done)
		c->complete = true;
	return n;
}

static int open_at(struct cri_log_cursor *c, const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat sb;
	if (fstat(fd, &sb) < 0) {
		int rc = -errno;
		close(fd);
		return rc;
	}
	c->fd = fd;
	c->dev = sb.st_dev;
	c->ino = sb.st_ino;
	c->pos = 0;
	return 0;
}

int cri_log_cursor_open(struct cri_log_cursor *c, const char *path, const struct cri_log_opts *o)
{
	memset(c, 0, sizeof *c);
	c->fd = -1;
	cri_log_writer_init(&c->w, o);
	/* With follow, tailLines only picks the starting point (kubelet). */
	c->limited = o->has_tail && !o->follow;
	c->records_left = o->tail_lines;
	c->block = malloc(BLOCK);
	if (c->block == NULL)
		return -ENOMEM;
	int rc = open_at(c, path);
	if (rc == 0 && o->has_tail) {
		struct stat sb;
		off_t pos = fstat(c->fd, &sb) < 0
		                    ? -errno
		                    : cri_log_tail_offset(c->fd, sb.st_size, o->tail_lines);
		if (pos < 0)
			rc = (int)pos;
		else
			c->pos = pos;
		if (c->limited && o->tail_lines == 0)
			c->complete = true; /* tailLines=0: nothing */
	}
	if (rc < 0)
		cri_log_cursor_close(c);
	return rc;
}

ssize_t cri_log_cursor_read(struct cri_log_cursor *c, char *out, size_t cap, bool final,
                            bool *at_eof)
{
	size_t used = 0;
	bool full = false;
	*at_eof = false;
	/* Records go in while each fits (a record of a line of L bytes formats to at most
	 * OUTPUT_MAX(L)), so a buffer fills: asking for room for the longest possible record
	 * before each one wrote a single line per call (one 64 KiB pread and one worker job per
	 * ~100-byte line, 3 MB/s). The first record always fits (@cap >= CRI_LOGFILE_MIN_OUT and
	 * no line with its '\n' in a block is longer than CRI_LOGFILE_MAX_LINE). */
	while (!c->complete && !full && cap - used >= OUTPUT_MAX(0)) {
		ssize_t r = pread(c->fd, c->block, BLOCK, c->pos);
		if (r < 0)
			return -errno;
		if (r == 0) {
			*at_eof = true;
			break;
		}
		size_t start = 0;
		const char *nl;
		while (!c->complete &&
		       (nl = memchr(c->block + start, '\n', (size_t)r - start)) != NULL) {
			size_t len = (size_t)(nl - (c->block + start));
			if (c->skipping) {
				c->skipping = false; /* the end of an overlong record */
			} else if (cap - used < OUTPUT_MAX(len)) {
				full = true; /* the next call starts with this record */
				break;
			} else {
				used += emit(c, c->block + start, len, out + used);
			}
			start += len + 1;
			c->pos += (off_t)(len + 1);
		}
		if (full || start == (size_t)r || start > 0)
			continue; /* read on from the next record (or stop: full or complete) */
		/* No '\n' in what is left of the file. */
		if ((size_t)r == BLOCK || c->skipping) {
			/* A record longer than any we take: drop it up to its '\n'. */
			c->skipping = true;
			c->pos += r;
			continue;
		}
		/* An unterminated last record: the runtime is still writing it. */
		if (final && cap - used < OUTPUT_MAX((size_t)r))
			break; /* the next call writes it (r < BLOCK: it fits an empty buffer) */
		*at_eof = true;
		if (final) {
			used += emit(c, c->block, (size_t)r, out + used);
			c->pos += r;
		}
		break;
	}
	if (c->complete)
		*at_eof = true;
	return (ssize_t)used;
}

int cri_log_cursor_rotated(const struct cri_log_cursor *c, const char *path)
{
	struct stat sb;
	if (stat(path, &sb) < 0)
		return errno == ENOENT ? 0 : -errno;
	return sb.st_dev != c->dev || sb.st_ino != c->ino;
}

int cri_log_cursor_reopen(struct cri_log_cursor *c, const char *path)
{
	int old = c->fd;
	int rc = open_at(c, path);
	if (rc < 0)
		return rc;
	close(old);
	c->skipping = false;
	return 0;
}

void cri_log_cursor_close(struct cri_log_cursor *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	free(c->block);
	c->block = NULL;
}

int cri_log_read_file(const char *path, const struct cri_log_opts *o, cri_log_sink sink, void *user)
{
	struct cri_log_opts once = *o;
	once.follow = false;
	struct cri_log_cursor c;
	int rc = cri_log_cursor_open(&c, path, &once);
	if (rc < 0)
		return rc;
	const size_t cap = 2 * CRI_LOGFILE_MIN_OUT;
	char *out = malloc(cap);
	bool eof = false;
	if (out == NULL)
		rc = -ENOMEM;
	while (rc == 0 && !eof) {
		ssize_t n = cri_log_cursor_read(&c, out, cap, true, &eof);
		if (n < 0)
			rc = (int)n;
		else if (n > 0)
			rc = sink(out, (size_t)n, user);
	}
	free(out);
	cri_log_cursor_close(&c);
	return rc;
}
