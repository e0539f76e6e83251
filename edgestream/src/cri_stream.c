/*
 * edgestream/src/cri_stream.c — the CRI streaming backend (backend.h): exec, attach and
 * portForward straight to the container runtime, for nodes whose kubelet serves no streaming.
 *
 *   1. On the loop (pure, cri_plan.h): the request's path and query become the CRI call, with
 *      the kubelet's rules; a bad one is answered at once.
 *   2. On a worker (the calls block): ListPodSandbox by the kubelet's labels (the newest READY
 *      sandbox), ListContainers in it (RUNNING), then Exec / Attach / PortForward, which
 *      answers with a single-use streaming URL. The job refers to its stream through the
 *      backend state (st->be), which the stream's end detaches: a late answer is dropped.
 *   3. Back on the loop: a backend connection (conn.h) to the URL's plain-HTTP address carries
 *      the apiserver's upgrade request with the URL's path and no query (the options travel in
 *      the CRI request), every header kept; the runtime's 101 and the stream flow back.
 *
 * Also the pieces the logs backend shares: the plan for a stream, the sandbox lookup.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cri/client.h>
#include <stream/ext.h>
#include <stream/frame.h>
#include <stream/log.h>
#include <stream/query.h>
#include <stream/workq.h>

#include "backend.h"
#include "conn.h"
#include "cri_plan.h"
#include "relay.h"

/* One runtime call for one stream; st->be while it runs. */
struct cri_job {
	struct edgestream *es;
	struct es_stream *st; /* NULL once the stream ended while the job ran */
	char socket[ES_CRI_SOCKET_MAX];
	uint64_t timeout_ms;
	struct es_cri_plan plan;
	struct st_connect_req req; /* the apiserver's request, sent once the URL is known */
	/* the worker's answer */
	int rc;
	char url[CRI_URL_MAX];
	char addr[ES_NAME_ADDR_BYTES]; /* the URL's host resolved here when it is a name, or "" */
	char err[512];
};

static void job_free(struct cri_job *j)
{
	st_connect_req_cleanup(&j->req);
	free(j);
}

/* ---- shared with the logs backend ------------------------------------------------------ */

int es_cri_plan_for(struct es_stream *st, const struct st_connect_req *req,
                    struct es_cri_plan *plan)
{
	struct st_kubelet_path kp;
	char why[256] = "";
	int rc = -EINVAL;
	if (req && st_kubelet_path_parse(req->path, strlen(req->path), &kp) == 0)
		rc = es_cri_plan_make(plan, &kp, req->raw_query, strlen(req->raw_query), why,
		                      sizeof why);
	if (rc == 0)
		return 0;
	st->es->m.streams_refused++;
	es_stream_fail(st, ST_EXT_ERR_BAD_REQUEST,
	               why[0]            ? why
	               : rc == -EMSGSIZE ? "request over the CRI limits"
	                                 : "not a streaming request");
	return -1;
}

int es_cri_find_sandbox(struct cri_client *c, const struct es_cri_plan *p, bool ready_only,
                        char *id, size_t cap, char *err, size_t errlen)
{
	struct cri_label l[3] = {{CRI_LABEL_POD_NAMESPACE, p->namespace_},
	                         {CRI_LABEL_POD_NAME, p->pod},
	                         {CRI_LABEL_POD_UID, p->uid}};
	struct cri_sandbox sb[16]; /* a worker's stack */
	size_t n;
	int rc = cri_list_sandboxes(c, l, p->uid[0] ? 3 : 2, ready_only ? CRI_SANDBOX_READY : -1,
	                            sb, 16, &n, err, errlen);
	if (rc < 0)
		return rc;
	size_t best = n;
	for (size_t i = 0; i < n; i++)
		if (best == n || sb[i].created_at > sb[best].created_at)
			best = i;
	if (best == n) {
		snprintf(err, errlen, "pod %.120s/%.120s has no %ssandbox on this node",
		         p->namespace_, p->pod, ready_only ? "ready " : "");
		return -ENOENT;
	}
	snprintf(id, cap, "%s", sb[best].id);
	return 0;
}

/* ---- worker side ----------------------------------------------------------------------- */

static void cri_work(void *arg)
{
	struct cri_job *j = arg;
	struct es_cri_plan *p = &j->plan;
	struct cri_client *c;
	char sandbox[CRI_ID_MAX + 1];
	j->rc = cri_client_new(&c, j->socket, j->timeout_ms);
	if (j->rc < 0) {
		snprintf(j->err, sizeof j->err, "cannot set up a CRI client");
		return;
	}
	j->rc = es_cri_find_sandbox(c, p, true, sandbox, sizeof sandbox, j->err, sizeof j->err);
	if (j->rc == 0 && p->kind == ST_KUBELET_PORT_FORWARD) {
		j->rc = cri_port_forward_url(c, sandbox, p->ports, p->nports, j->url, sizeof j->url,
		                             j->err, sizeof j->err);
	} else if (j->rc == 0) {
		struct cri_label l = {CRI_LABEL_CONTAINER_NAME, p->container};
		struct cri_container ct[4];
		size_t n = 0;
		j->rc = cri_list_containers(c, sandbox, &l, 1, CRI_CONTAINER_RUNNING, ct, 4, &n,
		                            j->err, sizeof j->err);
		if (j->rc == 0 && n == 0) {
			snprintf(j->err, sizeof j->err,
			         "container %.120s is not running in pod %.120s/%.120s",
			         p->container, p->namespace_, p->pod);
			j->rc = -ENOENT;
		}
		if (j->rc == 0 && p->kind == ST_KUBELET_EXEC)
			j->rc = cri_exec_url(c, ct[0].id, p->cmd, p->ncmd, p->tty, p->in, p->out,
			                     p->err, j->url, sizeof j->url, j->err, sizeof j->err);
		else if (j->rc == 0)
			j->rc = cri_attach_url(c, ct[0].id, p->in, p->tty, p->out, p->err, j->url,
			                       sizeof j->url, j->err, sizeof j->err);
	}
	cri_client_free(c);
	/* A streaming URL that names its host by a name (not containerd's usual IP) is resolved
	 * here, on the worker: the loop dials the address (resolve.h: never DNS on the loop). */
	char host[ES_HOST_MAX], path[CRI_URL_MAX];
	int port;
	if (j->rc == 0 &&
	    es_parse_url(j->url, "http", 80, host, sizeof host, &port, path, sizeof path) == 0 &&
	    !es_is_ip_literal(host)) {
		char one[1][ES_NAME_ADDR_BYTES];
		if (es_resolve_host(host, one, 1, j->err, sizeof j->err) == 0)
			j->rc = -EHOSTUNREACH;
		else
			memcpy(j->addr, one[0], sizeof j->addr);
	}
}

/* ---- loop side ------------------------------------------------------------------------- */

static uint64_t cri_error_code(int rc)
{
	switch (rc) {
	case -ENOENT:
		return ST_EXT_ERR_NOT_FOUND;
	case -ETIMEDOUT:
		return ST_EXT_ERR_TIMEOUT;
	case -EINVAL:
		return ST_EXT_ERR_BAD_REQUEST;
	case -EAGAIN:
		return ST_EXT_ERR_LIMIT;
	default:
		return ST_EXT_ERR_UNREACHABLE;
	}
}

/* The runtime answered: dial its streaming server with the apiserver's request. */
static void cri_done(void *arg, int status)
{
	struct cri_job *j = arg;
	struct es_stream *st = j->st;
	if (st)
		st->be = NULL;
	if (status < 0 || st == NULL) {
		job_free(j); /* the stream ended meanwhile, or the pool is going away */
		return;
	}
	struct edgestream *es = j->es;
	if (j->rc < 0) {
		es->m.backend_failures++;
		es_stream_fail(st, cri_error_code(j->rc), j->err);
		job_free(j);
		return;
	}
	char host[ES_HOST_MAX], path[CRI_URL_MAX];
	int port;
	if (es_parse_url(j->url, "http", 80, host, sizeof host, &port, path, sizeof path) < 0) {
		char why[CRI_URL_MAX + 64];
		snprintf(why, sizeof why,
		         "the runtime's streaming URL %.200s is not plain http "
		         "(enable_tls_streaming is not supported)",
		         j->url);
		es_stream_fail(st, ST_EXT_ERR_UNREACHABLE, why);
		job_free(j);
		return;
	}
	struct es_conn *c;
	if (es_conn_new(&c, st, j->addr[0] ? j->addr : host, port, NULL, NULL) < 0) {
		es_stream_fail(st, ST_EXT_ERR_INTERNAL, "out of memory");
		job_free(j);
		return;
	}
	char host_header[300]; /* the URL's host, a name stays a name */
	snprintf(host_header, sizeof host_header, "%.255s:%d", host, port);
	/* The options travel in the CRI request; the URL's path names them by token. */
	int rc = es_conn_set_head(c, &j->req, path, strlen(path), host_header, false, false);
	job_free(j);
	if (rc == 0)
		es_conn_dial(c);
}

static int cri_stream_open(struct es_stream *st, struct st_connect_req *req, const char *path,
                           size_t path_len)
{
	(void)path; /* the plan reads the request itself */
	(void)path_len;
	struct edgestream *es = st->es;
	struct cri_job *j = calloc(1, sizeof *j);
	if (j == NULL) {
		es_stream_fail(st, ST_EXT_ERR_INTERNAL, "out of memory");
		return -1;
	}
	if (es_cri_plan_for(st, req, &j->plan) < 0) {
		free(j);
		return -1;
	}
	j->es = es;
	j->st = st;
	j->timeout_ms = es->cfg.cri_timeout_ms;
	snprintf(j->socket, sizeof j->socket, "%s", es->cfg.cri_socket);
	j->req = *req; /* kept until the runtime's URL is known */
	memset(req, 0, sizeof *req);
	st->be = j;
	st_dbg_ns(es->node, st->id, "%s → the container runtime (%s)", st_msg_type_name(st->type),
	          j->socket);
	if (st_workq_submit(es->wq, cri_work, cri_done, j) < 0) {
		st->be = NULL;
		job_free(j);
		es_stream_fail(st, ST_EXT_ERR_LIMIT, "too many runtime calls waiting");
		return -1;
	}
	return 0;
}

static void cri_stream_close(struct es_stream *st)
{
	struct cri_job *j = st->be;
	if (j) { /* a runtime call is under way: its completion frees the job */
		j->st = NULL;
		st->be = NULL;
	}
	es_conn_free(st->conn);
}

static void describe(const struct es_stream *st, char *buf, size_t cap)
{
	if (st->conn)
		snprintf(buf, cap, "the runtime's streaming server %.100s:%d", st->conn->host,
		         st->conn->port);
	else
		snprintf(buf, cap, "the container runtime (%.200s)", st->es->cfg.cri_socket);
}

const struct es_backend_ops es_backend_cri_stream = {
        .name = "CRI stream",
        .to_cloud_burst = ES_CONN_TO_CLOUD_BURST,
        .open = cri_stream_open,
        .write = es_conn_op_write,
        .on_writable = es_conn_op_on_writable,
        .close = cri_stream_close,
        .describe = describe,
};
