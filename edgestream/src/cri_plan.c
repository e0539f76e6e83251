/*
 * edgestream/src/cri_plan.c — kubelet streaming request → CRI call (cri_plan.h). Pure.
 */
#include "cri_plan.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static int copy_segment(char *out, size_t cap, struct st_segment s)
{
	if (s.len >= cap)
		return -EMSGSIZE;
	if (s.len)
		memcpy(out, s.p, s.len);
	out[s.len] = '\0';
	return 0;
}

void es_cri_plan_fix(struct es_cri_plan *p)
{
	const char *c = p->cmd_bytes;
	for (size_t i = 0; i < p->ncmd; i++) {
		p->cmd[i] = c;
		c += strlen(c) + 1;
	}
}

int es_cri_plan_make(struct es_cri_plan *p, const struct st_kubelet_path *path, const char *query,
                     size_t query_len, char *why, size_t why_len)
{
	memset(p, 0, sizeof *p);
	why[0] = '\0';
	if (path->kind != ST_KUBELET_EXEC && path->kind != ST_KUBELET_ATTACH &&
	    path->kind != ST_KUBELET_PORT_FORWARD && path->kind != ST_KUBELET_CONTAINER_LOGS)
		return -ENOTSUP;
	p->kind = path->kind;
	if (query == NULL) {
		query = "";
		query_len = 0;
	}
	if (copy_segment(p->namespace_, sizeof p->namespace_, path->namespace_) < 0 ||
	    copy_segment(p->pod, sizeof p->pod, path->pod) < 0 ||
	    copy_segment(p->uid, sizeof p->uid, path->uid) < 0 ||
	    copy_segment(p->container, sizeof p->container, path->container) < 0)
		return -EMSGSIZE;
	if (p->kind == ST_KUBELET_CONTAINER_LOGS)
		return 0; /* its options are read by cri_log_opts_parse() */
	if (p->kind == ST_KUBELET_PORT_FORWARD) {
		struct st_query_iter it;
		const char *k, *v;
		size_t kl, vl;
		st_query_iter_init(&it, query, query_len);
		while (st_query_next(&it, &k, &kl, &v, &vl)) {
			if (kl != 4 || memcmp(k, "port", 4) != 0)
				continue;
			uint64_t port;
			if (st_parse_u64(v, vl, 65535, &port) < 0 || port == 0) {
				snprintf(why, why_len, "invalid port %.*s",
				         (int)(vl > 16 ? 16 : vl), v);
				return -EINVAL;
			}
			if (p->nports >= ES_CRI_MAX_PORTS)
				return -EMSGSIZE;
			p->ports[p->nports++] = (int32_t)port;
		}
		return 0;
	}
	p->in = st_query_k8s_flag(query, query_len, "input");
	p->out = st_query_k8s_flag(query, query_len, "output");
	p->err = st_query_k8s_flag(query, query_len, "error");
	p->tty = st_query_k8s_flag(query, query_len, "tty");
	if (!p->in && !p->out && !p->err) {
		snprintf(why, why_len, "you must specify at least 1 of stdin, stdout, stderr");
		return -EINVAL;
	}
	if (p->tty && p->err) {
		/* the kubelet's message: a tty carries stderr in stdout */
		snprintf(why, why_len, "tty and stderr cannot both be true");
		return -EINVAL;
	}
	if (p->kind == ST_KUBELET_ATTACH)
		return 0;
	struct st_query_iter it;
	const char *k, *v;
	size_t kl, vl, used = 0;
	st_query_iter_init(&it, query, query_len);
	while (st_query_next(&it, &k, &kl, &v, &vl)) {
		char key[16];
		ssize_t dk = st_pct_decode(key, sizeof key - 1, k, kl, true);
		if (dk != 7 || memcmp(key, "command", 7) != 0)
			continue;
		if (p->ncmd >= ES_CRI_MAX_ARGS)
			return -EMSGSIZE;
		ssize_t n = st_pct_decode(p->cmd_bytes + used, sizeof p->cmd_bytes - used - 1, v,
		                          vl, true);
		if (n == -EMSGSIZE)
			return -EMSGSIZE;
		if (n < 0) {
			snprintf(why, why_len, "malformed command argument");
			return -EINVAL;
		}
		if (memchr(p->cmd_bytes + used, '\0', (size_t)n)) {
			snprintf(why, why_len, "a command argument holds a NUL byte");
			return -EINVAL;
		}
		p->cmd_bytes[used + (size_t)n] = '\0';
		used += (size_t)n + 1;
		p->ncmd++;
	}
	if (p->ncmd == 0) {
		snprintf(why, why_len, "missing required command parameter");
		return -EINVAL;
	}
	es_cri_plan_fix(p);
	return 0;
}
