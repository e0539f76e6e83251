/*
 * cloudstream/src/nodewatch.c — --node-watch: a deleted Node object closes its node's tunnel,
 * and the node is refused (403) until its Node exists again (identity.h).
 *
 * A list (GET /api/v1/nodes?limit=1, only for its resourceVersion) then watches
 * (?watch=1&resourceVersion=RV&timeoutSeconds=2) in a row, each a job on a pool of its own (one
 * thread: a watch blocks for its timeout and must not hold up the shared pool's pod lookups).
 * A watch returns the events of its window; they are applied on the loop when it completes, so a
 * deletion acts within about two seconds. 410 Gone (the resourceVersion is too old) lists again.
 * Deleted names are kept in a bounded ring; an ADDED event takes a name out.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <json-c/json.h>

#include <stream/log.h>
#include <stream/workq.h>

#include "apiserver.h"
#include "cs.h"
#include "identity.h"

#define WATCH_SECONDS    2
#define WATCH_BODY_MAX   (16u << 20) /* events of one window */
#define DELETED_MAX      4096u       /* deleted nodes remembered */
#define WATCH_EVENTS_MAX 4096u

struct cs_nodewatch {
	struct st_workq *wq;                         /* one thread */
	char rv[64];                                 /* "" : list first */
	char (*deleted)[CS_NODE_NAME_MAX_BYTES + 1]; /* ring of DELETED_MAX */
	size_t next;
	bool stopping;
	uint64_t failures;
};

struct event {
	bool deleted; /* else added */
	char node[CS_NODE_NAME_MAX_BYTES + 1];
};

struct watch_job {
	struct cs_server *srv;
	char rv[64];
	/* results */
	long http_status;
	bool gone; /* 410: list again */
	char new_rv[64];
	struct event *ev;
	size_t n_ev;
	char error[CURL_ERROR_SIZE + 64];
	struct cs_api_body body;
};

static const char *str_at(struct json_object *o, const char *a, const char *b)
{
	struct json_object *x, *y;
	if (!json_object_object_get_ex(o, a, &x) || !json_object_object_get_ex(x, b, &y) ||
	    !json_object_is_type(y, json_type_string))
		return NULL;
	return json_object_get_string(y);
}

/* One watch event line: {"type": ADDED|MODIFIED|DELETED|ERROR, "object": {...}}. */
static void watch_line(struct watch_job *j, const char *line, size_t len)
{
	struct json_tokener *tok = json_tokener_new_ex(32);
	struct json_object *o = tok ? json_tokener_parse_ex(tok, line, (int)len) : NULL;
	json_tokener_free(tok);
	struct json_object *type, *obj;
	if (o && json_object_object_get_ex(o, "type", &type) &&
	    json_object_object_get_ex(o, "object", &obj)) {
		const char *t = json_object_get_string(type);
		const char *rv = str_at(obj, "metadata", "resourceVersion");
		const char *name = str_at(obj, "metadata", "name");
		struct json_object *code;
		if (strcmp(t, "ERROR") == 0) {
			if (json_object_object_get_ex(obj, "code", &code) &&
			    json_object_get_int(code) == 410)
				j->gone = true;
		} else {
			if (rv)
				snprintf(j->new_rv, sizeof j->new_rv, "%s", rv);
			bool del = strcmp(t, "DELETED") == 0;
			if (name && (del || strcmp(t, "ADDED") == 0) &&
			    j->n_ev < WATCH_EVENTS_MAX && strlen(name) <= CS_NODE_NAME_MAX_BYTES) {
				j->ev[j->n_ev].deleted = del;
				snprintf(j->ev[j->n_ev].node, sizeof j->ev[0].node, "%s", name);
				j->n_ev++;
			}
		}
	}
	json_object_put(o);
}

static void watch_work(void *arg)
{
	struct watch_job *j = arg;
	const struct cs_config *c = &j->srv->cfg;
	CURL *h = curl_easy_init();
	j->ev = calloc(WATCH_EVENTS_MAX, sizeof *j->ev);
	if (h == NULL || j->ev == NULL) {
		snprintf(j->error, sizeof j->error, "out of memory");
		curl_easy_cleanup(h);
		return;
	}
	char url[1200], errbuf[CURL_ERROR_SIZE] = "";
	if (j->rv[0])
		snprintf(url, sizeof url,
		         "%s/api/v1/nodes?watch=1&resourceVersion=%s&timeoutSeconds=%d",
		         c->apiserver_url, j->rv, WATCH_SECONDS);
	else
		snprintf(url, sizeof url, "%s/api/v1/nodes?limit=1", c->apiserver_url);
	struct curl_slist *hdrs = NULL;
	/* The same set-up as every apiserver call (apiserver.h); a watch waits longer. */
	if (cs_apiserver_setup(h, c, url, &hdrs, errbuf, j->error, sizeof j->error) < 0) {
		curl_slist_free_all(hdrs);
		curl_easy_cleanup(h);
		return;
	}
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS,
	                 (long)c->apiserver_timeout_ms + (j->rv[0] ? WATCH_SECONDS * 1000L : 0));
	j->body.max = WATCH_BODY_MAX;
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, cs_apiserver_collect);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &j->body);
	CURLcode rc = curl_easy_perform(h);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &j->http_status);
	if (rc != CURLE_OK && !(j->rv[0] && rc == CURLE_OPERATION_TIMEDOUT))
		snprintf(j->error, sizeof j->error, "%s",
		         errbuf[0] ? errbuf : curl_easy_strerror(rc));
	if (j->http_status == 410)
		j->gone = true;
	if (j->http_status == 200 && j->body.p && !j->rv[0]) {
		struct json_object *o = json_tokener_parse(j->body.p);
		const char *rv = o ? str_at(o, "metadata", "resourceVersion") : NULL;
		if (rv)
			snprintf(j->new_rv, sizeof j->new_rv, "%s", rv);
		else
			snprintf(j->error, sizeof j->error, "the node list has no resourceVersion");
		json_object_put(o);
	} else if (j->http_status == 200 && j->body.p) {
		for (char *p = j->body.p, *nl; p < j->body.p + j->body.len; p = nl + 1) {
			nl = memchr(p, '\n', (size_t)(j->body.p + j->body.len - p));
			if (nl == NULL)
				nl = j->body.p + j->body.len;
			if (nl > p)
				watch_line(j, p, (size_t)(nl - p));
		}
	}
	curl_slist_free_all(hdrs);
	curl_easy_cleanup(h);
	free(j->body.p);
	j->body = (struct cs_api_body){0};
}

static int watch_submit(struct cs_server *srv);

/* The loop: apply the window's events, then the next watch. */
static void watch_done(void *arg, int status)
{
	struct watch_job *j = arg;
	struct cs_server *srv = j->srv;
	struct cs_nodewatch *w = srv->nodewatch;
	if (status != 0 || w == NULL || w->stopping)
		goto out;
	for (size_t i = 0; i < j->n_ev; i++) {
		struct event *e = &j->ev[i];
		for (size_t k = 0; k < DELETED_MAX; k++)
			if (strcmp(w->deleted[k], e->node) == 0)
				w->deleted[k][0] = '\0';
		if (!e->deleted) {
			st_info("Node %s exists (again): its tunnel is admitted", e->node);
			continue;
		}
		snprintf(w->deleted[w->next], sizeof w->deleted[0], "%s", e->node);
		w->next = (w->next + 1) % DELETED_MAX;
		struct cs_tunnel *t = cs_registry_get(srv->reg, e->node, strlen(e->node));
		st_info("Node %s deleted%s", e->node, t ? ": closing its tunnel" : "");
		if (t) {
			srv->m.tunnels_closed_node_deleted++;
			cs_tunnel_revoke(t, "its Node object was deleted");
		}
	}
	if (j->gone || (j->error[0] == '\0' && j->http_status != 200)) {
		if (j->http_status != 200 && !j->gone)
			st_warn("node watch: HTTP %ld from the apiserver; listing again",
			        j->http_status);
		w->rv[0] = '\0';
	} else if (j->error[0]) {
		if (w->failures++ % 30 == 0)
			st_warn("node watch: %s; retrying", j->error);
	} else {
		w->failures = 0;
		if (j->new_rv[0])
			snprintf(w->rv, sizeof w->rv, "%s", j->new_rv);
	}
out:
	free(j->ev);
	free(j);
	if (status == 0 && w && !w->stopping && watch_submit(srv) < 0)
		st_err("node watch stopped: cannot queue the next watch");
}

static int watch_submit(struct cs_server *srv)
{
	struct cs_nodewatch *w = srv->nodewatch;
	struct watch_job *j = calloc(1, sizeof *j);
	if (j == NULL)
		return -ENOMEM;
	j->srv = srv;
	snprintf(j->rv, sizeof j->rv, "%s", w->rv);
	int rc = st_workq_submit(w->wq, watch_work, watch_done, j);
	if (rc < 0)
		free(j);
	return rc;
}

int cs_nodewatch_start(struct cs_server *srv)
{
	if (!srv->cfg.node_watch)
		return 0;
	if (srv->cfg.apiserver_url == NULL || srv->cfg.apiserver_url[0] == '\0') {
		st_err("--node-watch needs --apiserver-url");
		return -EINVAL;
	}
	struct cs_nodewatch *w = calloc(1, sizeof *w);
	if (w == NULL || (w->deleted = calloc(DELETED_MAX, sizeof *w->deleted)) == NULL ||
	    st_workq_new(&w->wq, srv->ctx, 1, 4) < 0) {
		if (w)
			free(w->deleted);
		free(w);
		st_err("cannot start the node watch");
		return -ENOMEM;
	}
	srv->nodewatch = w;
	int rc = watch_submit(srv);
	if (rc < 0) {
		cs_nodewatch_stop(srv);
		st_err("cannot start the node watch");
	}
	return rc;
}

void cs_nodewatch_stop(struct cs_server *srv)
{
	struct cs_nodewatch *w = srv->nodewatch;
	if (w == NULL)
		return;
	w->stopping = true;
	st_workq_free(w->wq); /* the running watch ends within its timeout */
	free(w->deleted);
	free(w);
	srv->nodewatch = NULL;
}

void cs_nodewatch_run_completions(struct cs_server *srv)
{
	if (srv->nodewatch)
		st_workq_run_completions(srv->nodewatch->wq);
}

bool cs_nodewatch_deleted(const struct cs_server *srv, const char *node)
{
	const struct cs_nodewatch *w = srv->nodewatch;
	for (size_t k = 0; w && k < DELETED_MAX; k++)
		if (w->deleted[k][0] && strcmp(w->deleted[k], node) == 0)
			return true;
	return false;
}
