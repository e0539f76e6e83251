/*
 * stream/log.h — logging for the daemons and the runtime glue (never used by stream_proto).
 *
 * One line per event, in one of two formats (process-wide, st_log_set_format):
 *   text: "<RFC3339 time> <level> [node=<n>] [stream=<id>] message"
 *   json: {"time":"<RFC3339>","level":"<level>","node":"<n>","stream":<id>,"msg":"message"}
 *         (node and stream only when the line has them; one object a line, valid JSON even
 *         when the message was cut at the line's 1 KiB).
 * Lines go to stderr (journald/kubelet pick them up), written with one write(2) so lines from
 * different threads never interleave. The level, the format and the sink are process-wide,
 * unless the thread logging is inside a scope (struct st_log_scope): a library instance
 * (edgestream embedded twice in one agent) keeps its own level, format and sink that way, and
 * work it hands to the worker pool (stream/workq.h) logs in the scope it was submitted from.
 *
 * Thread-safety: every function here may be called from any thread.
 */
#ifndef STREAM_LOG_H
#define STREAM_LOG_H

#include <stdint.h>

enum st_log_level {
	ST_LOG_ERROR = 0,
	ST_LOG_WARN = 1,
	ST_LOG_INFO = 2,
	ST_LOG_DEBUG = 3,
};

/* Set the process-wide level; messages above it are dropped cheaply. Default ST_LOG_INFO.
 * st_log_get_level() is the level that applies to the calling thread (its scope's, if any). */
void st_log_set_level(enum st_log_level level);
enum st_log_level st_log_get_level(void);

enum st_log_format {
	ST_LOG_FORMAT_TEXT = 0,
	ST_LOG_FORMAT_JSON = 1,
};

/* Set the process-wide line format. Default ST_LOG_FORMAT_TEXT. st_log_get_format(): the
 * format for the calling thread. */
void st_log_set_format(enum st_log_format format);
enum st_log_format st_log_get_format(void);

/* Parse "error", "warn", "info" or "debug". Returns 0, or -EINVAL for anything else. */
int st_log_level_parse(const char *name, enum st_log_level *out);

/*
 * st_log() - write one log line.
 * @level: severity.
 * @node:  node name the line concerns, or NULL.
 * @stream_id: stream (ConnectID) the line concerns, or 0 for none.
 * @fmt:   printf format; the line is cut at 1 KiB.
 */
void st_log(enum st_log_level level, const char *node, uint64_t stream_id, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));

/* Send the process-wide lines to a callback instead of stderr (NULL restores stderr). The
 * line ends with a newline. */
typedef void (*st_log_sink_cb)(enum st_log_level level, const char *line, void *user);
void st_log_set_sink(st_log_sink_cb sink, void *user);

/*
 * A log scope: the level, format and sink of the lines logged by the threads inside it. The
 * owner fills it before any thread enters and changes level/format only through
 * st_log_scope_set(); sink and user stay as they were while any thread may be inside.
 */
struct st_log_scope {
	_Atomic int level;   /* enum st_log_level */
	_Atomic int format;  /* enum st_log_format */
	st_log_sink_cb sink; /* NULL: the process-wide sink, or stderr */
	void *user;
};

/* st_log_scope_set() - the scope's level and format (any thread). */
void st_log_scope_set(struct st_log_scope *scope, enum st_log_level level,
                      enum st_log_format format);

/*
 * st_log_enter() - the calling thread logs in @scope (NULL: process-wide) until it enters
 * another. Returns the scope it was in, to give back to st_log_enter() on the way out, so
 * entries nest (a library call made from inside a callback of the same library).
 */
const struct st_log_scope *st_log_enter(const struct st_log_scope *scope);

/* st_log_current() - the calling thread's scope, or NULL. */
const struct st_log_scope *st_log_current(void);

#define ST_LOG_ENABLED(lvl) ((lvl) <= st_log_get_level())

#define st_err(...)  st_log(ST_LOG_ERROR, NULL, 0, __VA_ARGS__)
#define st_warn(...) st_log(ST_LOG_WARN, NULL, 0, __VA_ARGS__)
#define st_info(...) st_log(ST_LOG_INFO, NULL, 0, __VA_ARGS__)
#define st_dbg(...)                                                                                \
	do {                                                                                       \
		if (ST_LOG_ENABLED(ST_LOG_DEBUG))                                                  \
			st_log(ST_LOG_DEBUG, NULL, 0, __VA_ARGS__);                                \
	} while (0)

/* Variants naming a node and a stream. */
#define st_err_ns(node, sid, ...)  st_log(ST_LOG_ERROR, (node), (sid), __VA_ARGS__)
#define st_warn_ns(node, sid, ...) st_log(ST_LOG_WARN, (node), (sid), __VA_ARGS__)
#define st_info_ns(node, sid, ...) st_log(ST_LOG_INFO, (node), (sid), __VA_ARGS__)
#define st_dbg_ns(node, sid, ...)                                                                  \
	do {                                                                                       \
		if (ST_LOG_ENABLED(ST_LOG_DEBUG))                                                  \
			st_log(ST_LOG_DEBUG, (node), (sid), __VA_ARGS__);                          \
	} while (0)

#endif /* STREAM_LOG_H */
