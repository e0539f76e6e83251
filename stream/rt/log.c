/* Process-wide logging; see stream/log.h. One write(2) per line keeps lines whole across threads. */
#include <stream/log.h>

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define LOG_LINE_MAX_BYTES 1024

static atomic_int log_level = ST_LOG_INFO;
static st_log_sink_cb log_sink;
static void *log_sink_user;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

void st_log_set_level(enum st_log_level level)
{
	atomic_store(&log_level, (int)level);
}

enum st_log_level st_log_get_level(void)
{
	return (enum st_log_level)atomic_load(&log_level);
}

int st_log_level_parse(const char *name, enum st_log_level *out)
{
	for (size_t i = 0; i < sizeof level_names / sizeof level_names[0]; i++) {
		if (strcasecmp(name, level_names[i]) == 0) {
			*out = (enum st_log_level)i;
			return 0;
		}
	}
	return -EINVAL;
}

void st_log_set_sink(st_log_sink_cb sink, void *user)
{
	log_sink = sink;
	log_sink_user = user;
}

void st_log(enum st_log_level level, const char *node, uint64_t stream_id, const char *fmt, ...)
{
	if (!ST_LOG_ENABLED(level))
		return;
	char line[LOG_LINE_MAX_BYTES];
	size_t len = 0;

	struct timespec ts;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	len += strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
	int n = snprintf(line + len, sizeof line - len, ".%03ldZ %-5s ", ts.tv_nsec / 1000000,
	                 level_names[level]);
	if (n > 0)
		len += (size_t)n;
	if (node != NULL && len < sizeof line) {
		n = snprintf(line + len, sizeof line - len, "node=%s ", node);
		if (n > 0)
			len += (size_t)n;
	}
	if (stream_id != 0 && len < sizeof line) {
		n = snprintf(line + len, sizeof line - len, "stream=%llu ",
		             (unsigned long long)stream_id);
		if (n > 0)
			len += (size_t)n;
	}
	if (len < sizeof line) {
		va_list ap;
		va_start(ap, fmt);
		n = vsnprintf(line + len, sizeof line - len, fmt, ap);
		va_end(ap);
		if (n > 0)
			len += (size_t)n;
	}
	if (len > sizeof line - 2)
		len = sizeof line - 2; /* cut, keep room for the newline */
	line[len++] = '\n';
	line[len] = '\0';

	if (log_sink != NULL) {
		log_sink(level, line, log_sink_user);
		return;
	}
	/* A short write to stderr loses the rest of the line; nothing better to do with it. */
	ssize_t w = write(STDERR_FILENO, line, len);
	(void)w;
}
