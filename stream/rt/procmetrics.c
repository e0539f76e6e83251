/*
 * stream/rt/procmetrics.c — the metric families both daemons share beyond build_info: the
 * process_* families Prometheus' client libraries export (CPU, memory, file descriptors, start
 * time), and histograms (stream/hist.h) written into the admin text.
 *
 * The /proc reads happen here, at scrape time only, on the loop thread: a few small reads of a
 * pseudo-file system that does not block (no disk behind it), and one directory listing the
 * length of the process's fd table. Nothing is sampled in the background.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <libwebsockets.h>

#include <stream/admin.h>
#include <stream/hist.h>
#include <stream/procstat.h>

void st_text_hist(struct st_text *t, const char *name, const char *labels, const struct st_hist *h)
{
	if (t->overflow)
		return;
	ssize_t n = st_hist_render(h, name, labels, t->p + t->len, t->cap - t->len);
	if (n < 0)
		t->overflow = true;
	else
		t->len += (size_t)n;
}

/* The whole of a small /proc file into @buf (NUL-terminated); its length or -errno. */
static ssize_t slurp(const char *path, char *buf, size_t cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	size_t len = 0;
	while (len + 1 < cap) {
		ssize_t n = read(fd, buf + len, cap - 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	buf[len] = '\0';
	return (ssize_t)len;
}

/* Entries of /proc/self/fd, the listing's own descriptor not counted. */
static long open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	if (d == NULL)
		return -1;
	long n = 0;
	for (struct dirent *e; (e = readdir(d)) != NULL;)
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n > 0 ? n - 1 : 0;
}

void st_text_process(struct st_text *t)
{
	char buf[1024];
	long tick = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
	struct st_proc_stat ps;
	ssize_t n = slurp("/proc/self/stat", buf, sizeof buf);
	bool have_stat = n > 0 && tick > 0 && st_proc_stat_parse(buf, (size_t)n, &ps) == 0;
	if (have_stat) {
		st_text_metric(t, "process_cpu_seconds_total", "counter",
		               "Total user and system CPU time spent in seconds.");
		uint64_t ticks = ps.utime_ticks + ps.stime_ticks;
		st_text_put(t, "process_cpu_seconds_total %llu.%02llu\n",
		            (unsigned long long)(ticks / (uint64_t)tick),
		            (unsigned long long)((ticks % (uint64_t)tick) * 100u / (uint64_t)tick));
		if (page > 0) {
			st_text_gauge(t, "process_resident_memory_bytes",
			              "Resident memory size in bytes.",
			              ps.rss_pages * (uint64_t)page);
		}
	}
	long fds = open_fds();
	if (fds >= 0) {
		st_text_metric(t, "process_open_fds", "gauge", "Number of open file descriptors.");
		st_text_put(t, "process_open_fds %ld\n", fds);
	}
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
		st_text_gauge(t, "process_max_fds", "Maximum number of open file descriptors.",
		              rl.rlim_cur);
	}
	/* Start time = now - (time since boot - start ticks), on clocks that need no syscall (no
	 * /proc/stat: its btime line follows per-CPU and interrupt lines of unbounded length).
	 * Computed once per process, in centiseconds, so the value does not wobble between
	 * scrapes; atomic because embedded instances each scrape on their own loop thread. */
	static _Atomic uint64_t start_cs;
	uint64_t cs = atomic_load(&start_cs);
	struct timespec rt, bt;
	if (cs == 0 && have_stat && clock_gettime(CLOCK_REALTIME, &rt) == 0 &&
	    clock_gettime(CLOCK_BOOTTIME, &bt) == 0) {
		uint64_t now_cs = (uint64_t)rt.tv_sec * 100u + (uint64_t)rt.tv_nsec / 10000000u;
		uint64_t up_cs = (uint64_t)bt.tv_sec * 100u + (uint64_t)bt.tv_nsec / 10000000u;
		uint64_t at_cs = ps.start_ticks * 100u / (uint64_t)tick;
		cs = now_cs - (up_cs > at_cs ? up_cs - at_cs : 0);
		uint64_t none = 0;
		if (!atomic_compare_exchange_strong(&start_cs, &none, cs))
			cs = none; /* another thread's, computed the same way */
	}
	if (cs > 0) {
		st_text_metric(t, "process_start_time_seconds", "gauge",
		               "Start time of the process since unix epoch in seconds.");
		st_text_put(t, "process_start_time_seconds %llu.%02llu\n",
		            (unsigned long long)(cs / 100u), (unsigned long long)(cs % 100u));
	}
}
