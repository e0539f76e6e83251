/* Logging, process-wide or per scope; see stream/log.h. One write(2) per line keeps lines whole across threads. */
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
static atomic_int log_format = ST_LOG_FORMAT_TEXT;
static st_log_sink_cb log_sink;
static void *log_sink_user;
static _Thread_local const struct st_log_scope *log_scope;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

void st_log_set_level(enum st_log_level level)
{
	atomic_store(&log_level, (int)level);
}

enum st_log_level st_log_get_level(void)
{
	const struct st_log_scope *s = log_scope;
	return (enum st_log_level)(s ? atomic_load(&s->level) : atomic_load(&log_level));
}

void st_log_set_format(enum st_log_format format)
{
	atomic_store(&log_format, (int)format);
}

enum st_log_format st_log_get_format(void)
{
	const struct st_log_scope *s = log_scope;
	return (enum st_log_format)(s ? atomic_load(&s->format) : atomic_load(&log_format));
}

void st_log_scope_set(struct st_log_scope *scope, enum st_log_level level,
                      enum st_log_format format)
{
	atomic_store(&scope->level, (int)level);
	atomic_store(&scope->format, (int)format);
}

const struct st_log_scope *st_log_enter(const struct st_log_scope *scope)
{
	const struct st_log_scope *prev = log_scope;
	log_scope = scope;
	return prev;
}

const struct st_log_scope *st_log_current(void)
{
	return log_scope;
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

/* Appends @s (@len bytes) as the inside of a JSON string to @out (used @*pos of @cap), stopping
 * before an escape that would not fit: the caller keeps room for what closes the line. */
static void json_escape(char *out, size_t cap, size_t *pos, const char *s, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	size_t n = *pos;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		char esc[7];
		size_t elen = 1;
		esc[0] = (char)c;
		if (c == '"' || c == '\\') {
			esc[0] = '\\';
			esc[1] = (char)c;
			elen = 2;
		} else if (c == '\n') {
			memcpy(esc, "\\n", 2);
			elen = 2;
		} else if (c < 0x20 || c == 0x7f) {
			memcpy(esc, "\\u00", 4);
			esc[4] = hex[c >> 4];
			esc[5] = hex[c & 15];
			elen = 6;
		}
		if (n + elen > cap)
			break;
		memcpy(out + n, esc, elen);
		n += elen;
	}
	*pos = n;
}

/* The JSON line: {"time":...,"level":...,"node":...,"stream":N,"msg":...}\n. Room for the closing
 * '"}\n' is kept whatever the message's length, so a cut line is still one JSON object. */
static size_t json_line(char *line, size_t cap, const char *time, enum st_log_level level,
                        const char *node, uint64_t stream_id, const char *msg, size_t msg_len)
{
	const size_t tail = 3; /* "}\n */
	size_t len = 0;
	int n = snprintf(line, cap, "{\"time\":\"%s\",\"level\":\"%s\"", time, level_names[level]);
	if (n > 0)
		len = (size_t)n < cap ? (size_t)n : cap - 1;
	if (node != NULL && len + 16 < cap - tail) {
		memcpy(line + len, ",\"node\":\"", 9);
		len += 9;
		json_escape(line, cap - tail - 16, &len, node, strlen(node));
		line[len++] = '"';
	}
	if (stream_id != 0 && len + 32 < cap - tail) {
		n = snprintf(line + len, cap - len, ",\"stream\":%llu",
		             (unsigned long long)stream_id);
		if (n > 0)
			len += (size_t)n;
	}
	if (len + 8 < cap - tail) {
		memcpy(line + len, ",\"msg\":\"", 8);
		len += 8;
		json_escape(line, cap - tail, &len, msg, msg_len);
	}
	memcpy(line + len, "\"}\n", 3);
	return len + 3;
}

void st_log(enum st_log_level level, const char *node, uint64_t stream_id, const char *fmt, ...)
{
	if (!ST_LOG_ENABLED(level))
		return;
	char line[LOG_LINE_MAX_BYTES];
	size_t len = 0;

	struct timespec ts;
	struct tm tm;
	char when[40];
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	size_t wl = strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(when + wl, sizeof when - wl, ".%03ldZ", ts.tv_nsec / 1000000);

	if (st_log_get_format() == ST_LOG_FORMAT_JSON) {
		char msg[LOG_LINE_MAX_BYTES];
		va_list ap;
		va_start(ap, fmt);
		int m = vsnprintf(msg, sizeof msg, fmt, ap);
		va_end(ap);
		size_t ml = m < 0 ? 0 : (size_t)m < sizeof msg ? (size_t)m : sizeof msg - 1;
		len = json_line(line, sizeof line - 1, when, level, node, stream_id, msg, ml);
		line[len] = '\0';
		goto out;
	}
	int n = snprintf(line, sizeof line, "%s %-5s ", when, level_names[level]);
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

out:
	if (log_scope != NULL && log_scope->sink != NULL) {
		log_scope->sink(level, line, log_scope->user);
		return;
	}
	if (log_sink != NULL) {
		log_sink(level, line, log_sink_user);
		return;
	}
	/* A short write to stderr loses the rest of the line; nothing better to do with it. */
	ssize_t w = write(STDERR_FILENO, line, len);
	(void)w;
}
