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
#define READ_BLOCK (64u * 1024u)

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

struct reader {
	struct cri_log_writer *w;
	cri_log_sink sink;
	void *user;
	char *out;
	uint64_t records; /* written under tailLines */
	bool stop;
};

/* One line (without '\n'): parse, format, hand over. */
static int record(struct reader *rd, const char *line, size_t len)
{
	struct cri_log_record r;
	if (cri_log_parse_record(line, len, &r) < 0)
		return 0; /* skipped, as the kubelet does */
	size_t n = cri_log_format(rd->w, &r, rd->out);
	if (rd->w->opts.has_tail && ++rd->records >= rd->w->opts.tail_lines)
		rd->stop = true;
	if (rd->w->done)
		rd->stop = true;
	return n ? rd->sink(rd->out, n, rd->user) : 0;
}

int cri_log_read_file(const char *path, struct cri_log_writer *w, cri_log_sink sink, void *user,
                      off_t *end)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = 0;
	struct stat sb;
	char *line = malloc(CRI_LOGFILE_MAX_LINE);
	char *block = malloc(READ_BLOCK);
	struct reader rd = {.w = w,
	                    .sink = sink,
	                    .user = user,
	                    .out = malloc(CRI_LOG_PREFIX_BYTES + CRI_LOGFILE_MAX_LINE + 1)};
	if (line == NULL || block == NULL || rd.out == NULL) {
		rc = -ENOMEM;
		goto out;
	}
	if (fstat(fd, &sb) < 0) {
		rc = -errno;
		goto out;
	}
	off_t pos = 0;
	if (w->opts.has_tail) {
		if (w->opts.tail_lines == 0) {
			if (end)
				*end = sb.st_size;
			goto out; /* tailLines=0: nothing */
		}
		pos = cri_log_tail_offset(fd, sb.st_size, w->opts.tail_lines);
		if (pos < 0) {
			rc = (int)pos;
			goto out;
		}
	}
	size_t line_len = 0;
	bool overlong = false;
	off_t line_start = pos;
	while (!rd.stop && rc == 0) {
		ssize_t r = pread(fd, block, READ_BLOCK, pos);
		if (r < 0) {
			rc = -errno;
			break;
		}
		if (r == 0)
			break;
		for (ssize_t i = 0; i < r && !rd.stop && rc == 0; i++) {
			if (block[i] != '\n') {
				if (line_len < CRI_LOGFILE_MAX_LINE)
					line[line_len++] = block[i];
				else
					overlong = true;
				continue;
			}
			if (!overlong)
				rc = record(&rd, line, line_len);
			line_len = 0;
			overlong = false;
			line_start = pos + i + 1;
		}
		pos += r;
	}
	if (end)
		*end = line_start;
	/* An unterminated last record is written once (the runtime is still writing it). */
	if (rc == 0 && !rd.stop && line_len > 0 && !overlong)
		rc = record(&rd, line, line_len);
out:
	free(line);
	free(block);
	free(rd.out);
	close(fd);
	return rc;
}
