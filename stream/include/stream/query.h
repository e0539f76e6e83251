/*
 * stream/query.h — query strings, Kubernetes parameter parsing and kubelet API paths.
 *
 * Pure code over caller buffers: iteration hands out raw (still percent-encoded) views; decoding
 * writes into a caller buffer with a cap. Any thread.
 */
#ifndef STREAM_QUERY_H
#define STREAM_QUERY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Iterates "k=v&k2=v2" (empty pairs skipped; a key without '=' has an empty value). */
struct st_query_iter {
	const char *q;
	size_t len;
	size_t pos;
};

void st_query_iter_init(struct st_query_iter *it, const char *q, size_t len);

/* st_query_next() - the next pair as raw views; false at the end. */
bool st_query_next(struct st_query_iter *it, const char **key, size_t *key_len, const char **value,
                   size_t *value_len);

/*
 * st_pct_decode() - percent-decode @in into @out ('+' becomes a space when @plus_is_space, as in
 * query strings). @out is not NUL-terminated.
 * Returns the decoded length, -EBADMSG for a malformed escape, -EMSGSIZE when @cap is too small.
 */
ssize_t st_pct_decode(char *out, size_t cap, const char *in, size_t len, bool plus_is_space);

/*
 * st_query_get() - the first value of @key (keys compare after decoding), decoded into @out.
 * Returns the decoded length (>= 0), -ENOENT when the key is absent, -EBADMSG or -EMSGSIZE as
 * st_pct_decode().
 */
ssize_t st_query_get(const char *q, size_t len, const char *key, char *out, size_t cap);

/* st_query_count() - how many times @key appears (e.g. command=a&command=b). */
size_t st_query_count(const char *q, size_t len, const char *key);

/*
 * st_k8s_bool() - a query bool as Kubernetes parses it (Convert_Slice_string_To_bool): absent is
 * false; "0" or "false" in any case is false; anything else, even an empty value, is true.
 * @value may be NULL when @present is false.
 */
bool st_k8s_bool(bool present, const char *value, size_t len);

/* st_query_k8s_flag() - the bool parameter @key of query @q, by st_k8s_bool()'s rules (a value
 * that cannot be decoded, or is too long to be "false", is true). */
bool st_query_k8s_flag(const char *q, size_t len, const char *key);

/*
 * st_parse_u64() - a plain decimal (no sign, no spaces, at least one digit) not above @max.
 * Returns 0, -EBADMSG for a non-number, -ERANGE above @max.
 */
int st_parse_u64(const char *s, size_t len, uint64_t max, uint64_t *out);

/* Kubelet API request kinds routed by path. */
enum st_kubelet_kind {
	ST_KUBELET_OTHER = 0,          /* /metrics, /stats/summary, /pods, /healthz, /logs/, ... */
	ST_KUBELET_EXEC = 1,           /* /exec/{ns}/{pod}[/{uid}]/{container} */
	ST_KUBELET_ATTACH = 2,         /* /attach/{ns}/{pod}[/{uid}]/{container} */
	ST_KUBELET_PORT_FORWARD = 3,   /* /portForward/{ns}/{pod}[/{uid}] */
	ST_KUBELET_CONTAINER_LOGS = 4, /* /containerLogs/{ns}/{pod}/{container} */
	ST_KUBELET_RUN = 5,            /* /run/{ns}/{pod}[/{uid}]/{container} */
};

/* A view of one path segment. */
struct st_segment {
	const char *p;
	size_t len;
};

struct st_kubelet_path {
	enum st_kubelet_kind kind;
	struct st_segment namespace_; /* empty for ST_KUBELET_OTHER */
	struct st_segment pod;
	struct st_segment uid;       /* empty when the path has no uid */
	struct st_segment container; /* empty for port-forward and OTHER */
};

/*
 * st_kubelet_path_parse() - classify a kubelet API path (no query) and pick out its names.
 *
 * Names must be non-empty and made of [A-Za-z0-9._-] only, never "." or ".." — Kubernetes names
 * need nothing else, and it rules out traversal and encoding tricks (%2F) before any backend
 * sees the path. Paths of other kinds are returned as ST_KUBELET_OTHER unchecked.
 * Returns 0 or -EBADMSG (a streaming/log path with a wrong segment count or a bad name).
 */
int st_kubelet_path_parse(const char *path, size_t len, struct st_kubelet_path *out);

/* "exec", "attach", "portForward", "containerLogs", "run" or "other". */
const char *st_kubelet_kind_name(enum st_kubelet_kind kind);

/* The kind label both daemons' metrics and listings use, so a cloud series and an edge series
 * join: "exec", "attach", "portforward", "logs", "run" or "other". */
const char *st_kubelet_kind_label(enum st_kubelet_kind kind);

#endif /* STREAM_QUERY_H */
