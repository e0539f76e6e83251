/*
 * cloudstream/src/nodewatch.c — --node-watch: a deleted Node object closes its node's tunnel,
 * and the node is refused (403) until its Node exists again (identity.h).
 *
 * The list and watch are kwatch's (kwatch.h): a list (GET /api/v1/nodes?limit=1, only for its
 * resourceVersion) then two-second watch windows in a row on a pool of their own; a window's
 * events are applied on the loop when it ends, so a deletion acts within about two seconds.
 * Deleted names are kept in a bounded ring; an ADDED event takes a name out.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include <stream/log.h>

#include "cs.h"
#include "identity.h"
#include "kwatch.h"

#define WATCH_SECONDS    2
#define LINE_MAX_BYTES   (1u << 20) /* one Node event */
#define DELETED_MAX      4096u      /* deleted nodes remembered */
#define WATCH_EVENTS_MAX 4096u      /* per window */

struct cs_nodewatch {
	struct cs_kwatch *kw;
	char (*deleted)[CS_NODE_NAME_MAX_BYTES + 1]; /* ring of DELETED_MAX */
	size_t next;
};

/* What a window found (kwatch's result): names added and deleted, in order. */
struct window {
	size_t n;
	struct event {
		bool deleted; /* else added */
		char node[CS_NODE_NAME_MAX_BYTES + 1];
	} ev[WATCH_EVENTS_MAX];
};

/* Worker: an ADDED or DELETED Node (MODIFIED changes nothing here). */
static void on_event(void *result, enum cs_kwatch_type type, struct json_object *obj)
{
	struct window *r = result;
	struct json_object *meta, *name;
	if (type == CS_KWATCH_MODIFIED || r->n == WATCH_EVENTS_MAX ||
	    !json_object_object_get_ex(obj, "metadata", &meta) ||
	    !json_object_object_get_ex(meta, "name", &name) ||
	    !json_object_is_type(name, json_type_string) ||
	    json_object_get_string_len(name) > (int)CS_NODE_NAME_MAX_BYTES)
		return;
	r->ev[r->n].deleted = type == CS_KWATCH_DELETED;
	snprintf(r->ev[r->n].node, sizeof r->ev[0].node, "%s", json_object_get_string(name));
	r->n++;
}

/* The loop: a deleted Node's tunnel is closed and its name remembered; an added one forgotten. */
static void apply(struct cs_server *srv, void *result, bool listed)
{
	struct window *r = result;
	struct cs_nodewatch *w = srv->nodewatch;
	(void)listed; /* the list is read for its resourceVersion only (limit=1) */
	for (size_t i = 0; i < r->n; i++) {
		struct event *e = &r->ev[i];
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
}

static const struct cs_kwatch_ops ops = {
        .what = "node watch",
        .result_bytes = sizeof(struct window),
        .line_max = LINE_MAX_BYTES,
        .list_max = 1u << 20, /* limit=1: one Node */
        .on_event = on_event,
        .apply = apply,
};

int cs_nodewatch_start(struct cs_server *srv)
{
	if (!srv->cfg.node_watch)
		return 0;
	if (srv->cfg.apiserver_url == NULL || srv->cfg.apiserver_url[0] == '\0') {
		st_err("--node-watch needs --apiserver-url");
		return -EINVAL;
	}
	struct cs_nodewatch *w = calloc(1, sizeof *w);
	if (w == NULL || (w->deleted = calloc(DELETED_MAX, sizeof *w->deleted)) == NULL) {
		if (w)
			free(w->deleted);
		free(w);
		st_err("cannot start the node watch");
		return -ENOMEM;
	}
	srv->nodewatch = w;
	char url[1536];
	snprintf(url, sizeof url, "%s/api/v1/nodes", srv->cfg.apiserver_url);
	int rc = cs_kwatch_start(&w->kw, srv, &ops, url, "limit=1", WATCH_SECONDS);
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
	cs_kwatch_free(w->kw); /* the running watch ends within its window */
	free(w->deleted);
	free(w);
	srv->nodewatch = NULL;
}

void cs_nodewatch_run_completions(struct cs_server *srv)
{
	if (srv->nodewatch)
		cs_kwatch_run_completions(srv->nodewatch->kw);
}

bool cs_nodewatch_deleted(const struct cs_server *srv, const char *node)
{
	const struct cs_nodewatch *w = srv->nodewatch;
	for (size_t k = 0; w && k < DELETED_MAX; k++)
		if (w->deleted[k][0] && strcmp(w->deleted[k], node) == 0)
			return true;
	return false;
}
