/*
 * cri/logs.h — container logs from CRI log files with the kubelet's semantics (pure parts).
 *
 * The runtime writes one record per line: `<RFC3339Nano> <stdout|stderr> <P|F>[:tags] <bytes>`;
 * a P(artial) record continues in the next record of the same stream (runtimes split lines at
 * 16 KiB). The kubelet's /containerLogs options (spec/kubelet-http.md §5) are applied here:
 * stream selection, since (seconds or time), timestamps (one fixed-width prefix per logical
 * line), limitBytes (prefixes counted, the crossing record cut), tailLines (physical records).
 * File reading, follow (inotify) and rotation are the caller's; this is parsing and formatting.
 */
#ifndef CRI_LOGS_H
#define CRI_LOGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum cri_log_stream {
	CRI_LOG_STDOUT = 1,
	CRI_LOG_STDERR = 2,
	CRI_LOG_ALL = 3,
};

struct cri_log_opts {
	bool follow, previous, timestamps;
	bool has_tail;
	uint64_t tail_lines;
	bool has_limit;
	uint64_t limit_bytes;
	bool has_since;
	int64_t since_ns; /* unix ns: records older than this are skipped */
	int streams;      /* enum cri_log_stream bits */
};

/*
 * cri_log_opts_parse() - the /containerLogs query (raw) with the kubelet's validation, at time
 * @now_ns. Returns 0, or the HTTP status the kubelet answers (400 "Unable to decode query.",
 * 422 for invalid values: sinceSeconds < 1 or with sinceTime, tailLines < 0, limitBytes < 1, a
 * bad stream, stream other than All with tailLines) with the reason in @why.
 */
int cri_log_opts_parse(const char *query, size_t len, int64_t now_ns, struct cri_log_opts *o,
                       char *why, size_t why_len);

struct cri_log_record {
	int64_t time_ns;
	enum cri_log_stream stream;
	bool partial;
	const char *content; /* view, without the line's '\n' */
	size_t content_len;
};

/* cri_log_parse_record() - one line (without its '\n'). 0 or -EBADMSG (the kubelet skips
 * records it cannot parse). */
int cri_log_parse_record(const char *line, size_t len, struct cri_log_record *r);

/* cri_parse_rfc3339() - "2024-05-01T10:00:00.123456789Z" or with ±hh:mm → unix ns. 0 or
 * -EBADMSG. */
int cri_parse_rfc3339(const char *s, size_t len, int64_t *ns);

/* Longest output of one record: prefix + content + '\n'. */
#define CRI_LOG_PREFIX_BYTES 31u /* 2006-01-02T15:04:05.000000000Z + space */

struct cri_log_writer {
	struct cri_log_opts opts;
	bool mid_line[3]; /* per stream: the last record written was a P record */
	uint64_t written; /* output bytes so far (limitBytes) */
	bool done;        /* limitBytes reached: nothing more is written */
};

void cri_log_writer_init(struct cri_log_writer *w, const struct cri_log_opts *o);

/*
 * cri_log_format() - the output for record @r (nothing when it is filtered out) in @out, which
 * must hold CRI_LOG_PREFIX_BYTES + r->content_len + 1. Returns the bytes written.
 */
size_t cri_log_format(struct cri_log_writer *w, const struct cri_log_record *r, char *out);

/*
 * cri_log_tail_start() - where the last @n records of @buf (@len bytes) start: the offset after
 * the (n+1)-th last '\n', counting only complete lines (an unterminated last line is not
 * counted, as the kubelet does). @n 0 gives @len.
 */
size_t cri_log_tail_start(const char *buf, size_t len, uint64_t n);

#endif /* CRI_LOGS_H */
