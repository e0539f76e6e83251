/*
 * edgestream/src/cri_plan.h — what the CRI backend asks the runtime for one request (pure).
 *
 * From a kubelet streaming path (/exec, /attach, /portForward) and its query, with the
 * kubelet's rules: exec needs at least one `command`; `input`, `output`, `error`, `tty` are
 * Kubernetes bools; at least one of stdin/stdout/stderr; tty and stderr together are refused (a
 * tty merges them); port-forward takes optional `port` values; containerLogs takes the names
 * only (its options are cri/logs.h's). Names are bounded copies, so the
 * plan can travel to a worker thread.
 */
#ifndef EDGESTREAM_CRI_PLAN_H
#define EDGESTREAM_CRI_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <stream/query.h>

#define ES_CRI_NAME_MAX  253u
#define ES_CRI_CMD_BYTES 16384u /* all of exec's arguments, NUL-separated */
#define ES_CRI_MAX_ARGS  256u
#define ES_CRI_MAX_PORTS 32u

struct es_cri_plan {
	enum st_kubelet_kind kind; /* EXEC, ATTACH, PORT_FORWARD or CONTAINER_LOGS */
	char namespace_[ES_CRI_NAME_MAX + 1], pod[ES_CRI_NAME_MAX + 1], uid[ES_CRI_NAME_MAX + 1],
	        container[ES_CRI_NAME_MAX + 1];
	char cmd_bytes[ES_CRI_CMD_BYTES];
	const char *cmd[ES_CRI_MAX_ARGS]; /* into cmd_bytes (fix up after copying the struct) */
	size_t ncmd;
	bool in, out, err, tty;
	int32_t ports[ES_CRI_MAX_PORTS];
	size_t nports;
};

/*
 * es_cri_plan_make() - fill @p for @path (already parsed) and @query (raw, may be NULL).
 * Returns 0, or -EINVAL with a reason for the client in @why (what the kubelet answers 400 to),
 * -EMSGSIZE when a name or the command is over its bound, -ENOTSUP for other kinds.
 */
int es_cri_plan_make(struct es_cri_plan *p, const struct st_kubelet_path *path, const char *query,
                     size_t query_len, char *why, size_t why_len);

/* es_cri_plan_fix() - re-point cmd[] into this copy's cmd_bytes (after a memcpy). */
void es_cri_plan_fix(struct es_cri_plan *p);

#endif /* EDGESTREAM_CRI_PLAN_H */
