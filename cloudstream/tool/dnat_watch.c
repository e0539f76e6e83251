/*
 * cloudstream/tool/dnat_watch.c — cloudstream-dnat-controller's view of the Nodes
 * (dnat_int.h): a list through the apiserver (the same credentials code as cloudstream:
 * apiserver_http.c), then a watch from its resourceVersion on the curl multi handle the main
 * loop polls; events are split into lines (at most LINE_MAX_BYTES each) and parsed by kwatch's
 * pure part (kwatch.h), then applied to the node set. An ERROR (410) or an over-long event asks
 * for a new list.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <json-c/json.h>

#include <stream/log.h>

#include "apiserver.h"
#include "dnat_int.h"

/* ---- the apiserver ----------------------------------------------------------------------- */

static void note_rv(struct ctl *x, struct json_object *obj)
{
	struct json_object *m, *rv;
	if (json_object_object_get_ex(obj, "metadata", &m) &&
	    json_object_object_get_ex(m, "resourceVersion", &rv))
		snprintf(x->rv, sizeof x->rv, "%s", json_object_get_string(rv));
}

int cs__dnat_list_nodes(struct ctl *x)
{
	CURL *h = curl_easy_init();
	if (h == NULL)
		return -1;
	char *sel = curl_easy_escape(h, x->c.node_selector, 0);
	char url[4096], errbuf[CURL_ERROR_SIZE] = "", err[256] = "";
	snprintf(url, sizeof url, "%s/api/v1/nodes?labelSelector=%s", x->c.apiserver_url,
	         sel ? sel : "");
	curl_free(sel);
	struct curl_slist *hdrs = NULL;
	struct cs_api_body b = {.max = LIST_MAX_BYTES};
	long status = 0;
	int rc = -1;
	if (cs_apiserver_setup(h, &x->api, url, &hdrs, errbuf, err, sizeof err) < 0) {
		st_warn("listing Nodes: %s", err);
		goto out;
	}
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, cs_apiserver_collect);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
	CURLcode cc = curl_easy_perform(h);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	if (cc != CURLE_OK || status != 200) {
		st_warn("listing Nodes: %s", cc != CURLE_OK
		                                     ? (errbuf[0] ? errbuf : curl_easy_strerror(cc))
		                                     : "unexpected HTTP status");
		if (cc == CURLE_OK)
			st_warn("listing Nodes: HTTP %ld: %.300s", status, b.p ? b.p : "");
		goto out;
	}
	struct json_object *list = b.p ? json_tokener_parse(b.p) : NULL, *items;
	if (list == NULL || !json_object_object_get_ex(list, "items", &items) ||
	    !json_object_is_type(items, json_type_array)) {
		st_warn("listing Nodes: not a NodeList");
		json_object_put(list);
		goto out;
	}
	struct cs_dnat_set fresh;
	cs_dnat_set_init(&fresh);
	size_t n = json_object_array_length(items);
	for (size_t i = 0; i < n; i++) {
		struct cs_dnat_node node;
		if (cs_dnat_node_parse(json_object_array_get_idx(items, i),
		                       (uint16_t)x->c.default_port, &node) == 0)
			cs_dnat_set_put(&fresh, &node);
	}
	/* Changed when the sets differ. */
	bool same = fresh.n == x->nodes.n &&
	            (fresh.n == 0 || memcmp(fresh.v, x->nodes.v, fresh.n * sizeof *fresh.v) == 0);
	cs_dnat_set_cleanup(&x->nodes);
	x->nodes = fresh;
	x->dirty |= !same;
	note_rv(x, list);
	json_object_put(list);
	st_info("listed %zu edge Nodes (%s) at resourceVersion %s", n, x->c.node_selector, x->rv);
	rc = 0;
out:
	free(b.p);
	curl_slist_free_all(hdrs);
	curl_easy_cleanup(h);
	return rc;
}

static void on_event(void *user, const char *line, size_t len)
{
	struct ctl *x = user;
	struct cs_kwatch_event ev;
	struct json_object *root = cs_kwatch_event_parse(line, len, &ev);
	if (root == NULL)
		return;
	x->events++;
	if (ev.type == CS_KWATCH_ERROR) {
		st_info("watch: ERROR %d%s", ev.code,
		        ev.code == 410 ? " (resourceVersion too old): listing again" : "");
		x->relist = true;
	} else if (ev.type != CS_KWATCH_BOOKMARK) {
		struct cs_dnat_node node;
		if (cs_dnat_node_parse(ev.object, (uint16_t)x->c.default_port, &node) == 0) {
			int changed = ev.type == CS_KWATCH_DELETED
			                      ? cs_dnat_set_remove(&x->nodes, node.name)
			                      : cs_dnat_set_put(&x->nodes, &node);
			if (changed > 0) {
				x->dirty = true;
				st_info("Node %s %s (%zu addresses, port %u)", node.name,
				        ev.type_name, node.n_ips, (unsigned)node.port);
			}
		}
	}
	if (ev.type != CS_KWATCH_ERROR)
		note_rv(x, ev.object);
	json_object_put(root);
}

static size_t on_watch_data(char *p, size_t size, size_t n, void *user)
{
	struct ctl *x = user;
	cs_kwatch_lines_feed(&x->lines, p, size * n, on_event, x);
	if (x->lines.over) /* an event over 4 MiB: skipped; the next list repairs */
		x->relist = true;
	return size * n;
}

void cs__dnat_watch_end(struct ctl *x)
{
	if (x->watch) {
		curl_multi_remove_handle(x->multi, x->watch);
		curl_easy_cleanup(x->watch);
		x->watch = NULL;
	}
	curl_slist_free_all(x->watch_hdrs);
	x->watch_hdrs = NULL;
	cs_kwatch_lines_init(&x->lines, x->line, LINE_MAX_BYTES);
}

int cs__dnat_watch_start(struct ctl *x)
{
	x->watch = curl_easy_init();
	if (x->watch == NULL)
		return -1;
	char *sel = curl_easy_escape(x->watch, x->c.node_selector, 0);
	char url[4096], err[256] = "";
	snprintf(url, sizeof url,
	         "%s/api/v1/nodes?watch=1&labelSelector=%s&resourceVersion=%s&timeoutSeconds=%llu"
	         "&allowWatchBookmarks=true",
	         x->c.apiserver_url, sel ? sel : "", x->rv,
	         (unsigned long long)(x->c.watch_timeout_ms / 1000));
	curl_free(sel);
	x->watch_err[0] = '\0';
	if (cs_apiserver_setup(x->watch, &x->api, url, &x->watch_hdrs, x->watch_err, err,
	                       sizeof err) < 0) {
		st_warn("watching Nodes: %s", err);
		cs__dnat_watch_end(x);
		return -1;
	}
	/* The watch runs for its timeout; only the connection has the apiserver deadline. */
	curl_easy_setopt(x->watch, CURLOPT_TIMEOUT_MS, (long)(x->c.watch_timeout_ms + 30000));
	curl_easy_setopt(x->watch, CURLOPT_WRITEFUNCTION, on_watch_data);
	curl_easy_setopt(x->watch, CURLOPT_WRITEDATA, x);
	curl_multi_add_handle(x->multi, x->watch);
	return 0;
}
