/*
 * cloudstream/src/kwatch.h — list and watch of a Kubernetes collection through the apiserver,
 * written once for its three users: --node-watch (nodewatch.c), --peer-service (peerwatch.c)
 * and cloudstream-dnat-controller (tool/dnat_watch.c).
 *
 * How kube-apiserver serves a collection: a list (a JSON object with metadata.resourceVersion
 * and items) and then watches from that resourceVersion (?watch=1&resourceVersion=RV: one JSON
 * event a line, {"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": {...}}, the object's
 * own metadata.resourceVersion the point to go on from). An ERROR whose object has code 410
 * (Gone) says the resourceVersion is too old: list again, which resyncs the whole state.
 *
 * Two parts:
 *   - pure (kwatch.c, cloudstream_core; unit-tested and fuzzed): one event line into its type,
 *     object, resourceVersion and code; a watch stream split into lines, bounded.
 *   - the runner (kwatch_run.c, the daemon): the list, then watches of --WINDOW seconds in a
 *     row, each a job on a one-thread pool of its own (a watch blocks for its window and must
 *     not hold up the shared pool); objects handed to the user on the worker, the user's result
 *     applied on the loop; 410, an over-long event or an answer that is not 200 list again;
 *     failures wait (0.5 s doubling to 30 s) before the next try. cloudstream-dnat-controller
 *     has its own loop (curl multi, tool/dnat.c) and uses the pure part.
 */
#ifndef CLOUDSTREAM_KWATCH_H
#define CLOUDSTREAM_KWATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct json_object;

/* ---- pure: one event ------------------------------------------------------------------------ */

enum cs_kwatch_type {
	CS_KWATCH_ADDED = 0,
	CS_KWATCH_MODIFIED,
	CS_KWATCH_DELETED,
	CS_KWATCH_BOOKMARK, /* only a resourceVersion to go on from */
	CS_KWATCH_ERROR,    /* object is a Status; code 410: list again */
	CS_KWATCH_OTHER,    /* a type we do not know: skipped, its resourceVersion kept */
};

/* One event, as views into the parsed JSON (valid while its root lives). */
struct cs_kwatch_event {
	enum cs_kwatch_type type;
	const char *type_name;      /* as it came: "ADDED", … (borrowed from the root) */
	struct json_object *object; /* borrowed from the root */
	const char *rv;             /* object.metadata.resourceVersion, or NULL */
	int code;                   /* ERROR: object.code, else 0 */
};

/*
 * cs_kwatch_event_parse() - one watch line (@len bytes, no newline needed) into @ev.
 * Returns the parsed root, which the caller frees with json_object_put() once done with @ev,
 * or NULL when the line is not an event (not JSON, no string "type" or object "object");
 * @ev is then untouched.
 */
struct json_object *cs_kwatch_event_parse(const char *line, size_t len, struct cs_kwatch_event *ev);

/* The type named @name (case-sensitive, as the apiserver writes them). */
enum cs_kwatch_type cs_kwatch_type_of(const char *name);

/* ---- pure: a watch stream in lines ---------------------------------------------------------- */

/* Called with each non-empty line, without its '\n'; @line is valid for the call. */
typedef void (*cs_kwatch_line_cb)(void *user, const char *line, size_t len);

/*
 * A push splitter: bytes in any pieces, the same lines out whatever the split. A line that is
 * wholly inside one piece is handed over in place; one that spans pieces is gathered in @buf
 * (the caller's memory, @cap bytes: the longest line taken). A longer line is skipped and
 * counted in @over (an event missed: the caller lists again).
 */
struct cs_kwatch_lines {
	char *buf;   /* caller's, @cap bytes */
	size_t cap;  /* longest line */
	size_t len;  /* bytes of the line being gathered */
	bool skip;   /* the line being read is over @cap: dropped up to its '\n' */
	size_t over; /* lines dropped for their length, since init */
};

void cs_kwatch_lines_init(struct cs_kwatch_lines *l, char *buf, size_t cap);
void cs_kwatch_lines_feed(struct cs_kwatch_lines *l, const char *p, size_t n, cs_kwatch_line_cb cb,
                          void *user);
/* The stream ended: a last line without '\n' goes to @cb too; the splitter is empty again. */
void cs_kwatch_lines_end(struct cs_kwatch_lines *l, cs_kwatch_line_cb cb, void *user);

/* ---- the runner (kwatch_run.c, loop + one worker) ------------------------------------------- */

struct cs_server;
struct cs_kwatch;

struct cs_kwatch_ops {
	const char *what;    /* names the watch in log lines: "node watch" */
	size_t result_bytes; /* a zeroed result of this size per list or watch window */
	size_t line_max;     /* the longest event taken (bigger: listed again) */
	size_t list_max;     /* the longest list answer */
	/* Worker thread: each item of a list (may be NULL: the list is read for its
	 * resourceVersion), each ADDED/MODIFIED/DELETED event of a watch. @obj is borrowed. */
	void (*on_item)(void *result, struct json_object *obj);
	void (*on_event)(void *result, enum cs_kwatch_type type, struct json_object *obj);
	/* Loop thread: what a list (@listed: the whole state, replace what you hold) or a window
	 * found. Runs after every job that ran, even when it failed half-way. */
	void (*apply)(struct cs_server *srv, void *result, bool listed);
};

/*
 * cs_kwatch_start() - list and watch the collection at @url (--apiserver-url and the path,
 * built as %s/api/... so integration.deploy finds every API path; may hold a query such
 * as ?labelSelector=…; copied) with --apiserver-url's credentials, @list_query ("limit=1", or
 * NULL) added to the list only, watch windows of @window_s seconds. @ops is borrowed for the
 * runner's life. Loop thread. 0 with *@out, -ENOMEM, or -EMSGSIZE for a @url too long.
 */
int cs_kwatch_start(struct cs_kwatch **out, struct cs_server *srv, const struct cs_kwatch_ops *ops,
                    const char *url, const char *list_query, unsigned window_s);
/* cs_kwatch_run_completions() - apply what finished (the loop's EVENT_WAIT_CANCELLED). */
void cs_kwatch_run_completions(struct cs_kwatch *w);
/* cs_kwatch_free() - stop: the running watch ends within its window. NULL is a no-op. */
void cs_kwatch_free(struct cs_kwatch *w);

#endif /* CLOUDSTREAM_KWATCH_H */
