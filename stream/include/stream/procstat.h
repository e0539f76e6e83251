/*
 * stream/procstat.h — the process metrics' source parsed: /proc/self/stat (CPU time, start
 * time, resident pages). Pure: the caller reads the files (at scrape time,
 * stream/admin.h st_text_process) and hands the bytes in. Any thread.
 */
#ifndef STREAM_PROCSTAT_H
#define STREAM_PROCSTAT_H

#include <stddef.h>
#include <stdint.h>

struct st_proc_stat {
	uint64_t utime_ticks, stime_ticks; /* CPU time in user and kernel mode, clock ticks */
	uint64_t start_ticks;              /* start time after boot, clock ticks */
	uint64_t rss_pages;                /* resident set, pages */
};

/*
 * st_proc_stat_parse() - the fields of a /proc/<pid>/stat line in @buf (@len bytes, need not be
 * NUL-terminated). The command name may hold spaces and parentheses: fields are counted after
 * its last ')'. Returns 0, or -EBADMSG when the line is not one (too few fields, not numbers).
 */
int st_proc_stat_parse(const char *buf, size_t len, struct st_proc_stat *out);

#endif /* STREAM_PROCSTAT_H */
