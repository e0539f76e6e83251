/*
 * cloudstream/src/kwatch_run.c — the list-and-watch runner (kwatch.h): a job at a time on a
 * one-thread pool, the list first, then watch windows from the last resourceVersion; what the
 * user's callbacks gathered on the worker is applied on the loop, then the next job goes (at
 * once, or after a failure's backoff, an lws timer). Watch events are read as they arrive,
 * one line at a time (cs_kwatch_lines), so a window holds one event, not all of them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <json-c/json.h>
#include <libwebsockets.h>

#include <stream/log.h>
#include <stream/workq.h>

#include "apiserver.h"
#include "cs.h"
#include "kwatch.h"

#define BACKOFF_FIRST_MS 500u
#define BACKOFF_MAX_MS   30000u
#define WARN_EVERY       30u /* failures in a row: one line per this many */

struct cs_kwatch {
	struct cs_server *srv;
	const struct cs_kwatch_ops *ops;
	struct st_workq *wq; /* one thread */
	lws_sorted_usec_list_t sul_retry;
	char url[1536], list_query[64]; /* the collection's, --apiserver-url in front */
	unsigned window_s;
	char rv[64]; /* "" : list next */
	char *line;  /* ops->line_max bytes, the worker's while a job runs */
	uint32_t backoff_ms;
	uint64_t failures; /* in a row */
	bool stopping;
};

/* One list or watch window. Worker fields until done runs on the loop. */
struct kw_job {
	struct cs_kwatch *w;
	char rv[64]; /* "" : a list */
	long http_status;
	bool gone, listed;
	char new_rv[64];
	char error[CURL_ERROR_SIZE + 64];
	struct cs_kwatch_lines lines;
	void *result; /* ops->result_bytes */
};

static void keep_rv(struct kw_job *j, const char *rv)
{
	if (rv)
		snprintf(j->new_rv, sizeof j->new_rv, "%s", rv);
}

static void on_line(void *user, const char *line, size_t len)
{
	struct kw_job *j = user;
	struct cs_kwatch_event ev;
	struct json_object *root = cs_kwatch_event_parse(line, len, &ev);
	if (root == NULL)
		return;
	if (ev.type == CS_KWATCH_ERROR) {
		j->gone |= ev.code == 410;
	} else {
		keep_rv(j, ev.rv);
		if (ev.type <= CS_KWATCH_DELETED)
			j->w->ops->on_event(j->result, ev.type, ev.object);
	}
	json_object_put(root);
}

static size_t on_watch_data(char *p, size_t size, size_t n, void *user)
{
	struct kw_job *j = user;
	cs_kwatch_lines_feed(&j->lines, p, size * n, on_line, j);
	return size * n;
}

static void list_parse(struct kw_job *j, const char *body)
{
	const struct cs_kwatch_ops *ops = j->w->ops;
	struct json_object *o = json_tokener_parse(body), *meta, *rv, *items;
	if (o && json_object_object_get_ex(o, "metadata", &meta) &&
	    json_object_object_get_ex(meta, "resourceVersion", &rv) &&
	    json_object_object_get_ex(o, "items", &items) &&
	    json_object_is_type(items, json_type_array)) {
		keep_rv(j, json_object_get_string(rv));
		j->listed = true;
		size_t n = json_object_array_length(items);
		for (size_t i = 0; ops->on_item && i < n; i++)
			ops->on_item(j->result, json_object_array_get_idx(items, i));
	} else {
		snprintf(j->error, sizeof j->error, "the list has no items or resourceVersion");
	}
	json_object_put(o);
}

static void kw_work(void *arg)
{
	struct kw_job *j = arg;
	struct cs_kwatch *w = j->w;
	const struct cs_config *c = &w->srv->cfg;
	bool watch = j->rv[0] != '\0';
	char url[2048], errbuf[CURL_ERROR_SIZE] = "";
	const char *sep = strchr(w->url, '?') ? "&" : "?";
	if (watch)
		snprintf(url, sizeof url, "%s%swatch=1&resourceVersion=%s&timeoutSeconds=%u",
		         w->url, sep, j->rv, w->window_s);
	else
		snprintf(url, sizeof url, "%s%s%s", w->url, w->list_query[0] ? sep : "",
		         w->list_query);
	CURL *h = curl_easy_init();
	struct curl_slist *hdrs = NULL;
	struct cs_api_body body = {.max = w->ops->list_max};
	if (h == NULL) {
		snprintf(j->error, sizeof j->error, "out of memory");
		return;
	}
	/* The same set-up as every apiserver call (apiserver.h); a watch waits its window more. */
	if (cs_apiserver_setup(h, c, url, &hdrs, errbuf, j->error, sizeof j->error) < 0)
		goto out;
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS,
	                 (long)c->apiserver_timeout_ms + (watch ? w->window_s * 1000L : 0));
	cs_kwatch_lines_init(&j->lines, w->line, w->ops->line_max);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, watch ? on_watch_data : cs_apiserver_collect);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, watch ? (void *)j : (void *)&body);
	CURLcode rc = curl_easy_perform(h);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &j->http_status);
	if (rc != CURLE_OK && !(watch && rc == CURLE_OPERATION_TIMEDOUT))
		snprintf(j->error, sizeof j->error, "%s",
		         errbuf[0] ? errbuf : curl_easy_strerror(rc));
	j->gone |= j->http_status == 410;
	if (watch && j->http_status == 200) {
		cs_kwatch_lines_end(&j->lines, on_line, j);
		j->gone |= j->lines.over > 0; /* an event we could not read: the list repairs */
	} else if (!watch && j->http_status == 200 && body.p) {
		list_parse(j, body.p);
	}
out:
	curl_slist_free_all(hdrs);
	curl_easy_cleanup(h);
	free(body.p);
}

static int kw_submit(struct cs_kwatch *w);

static void on_retry(lws_sorted_usec_list_t *sul)
{
	struct cs_kwatch *w = lws_container_of(sul, struct cs_kwatch, sul_retry);
	if (!w->stopping && kw_submit(w) < 0)
		st_err("%s stopped: cannot queue the next watch", w->ops->what);
}

static void kw_done(void *arg, int status)
{
	struct kw_job *j = arg;
	struct cs_kwatch *w = j->w;
	uint32_t wait_ms = 0;
	if (status != 0 || w->stopping)
		goto out;
	w->ops->apply(w->srv, j->result, j->listed);
	bool failed = j->error[0] || (j->http_status != 200 && !j->gone);
	if (failed && w->failures++ % WARN_EVERY == 0) {
		if (j->error[0])
			st_warn("%s: %s; retrying", w->ops->what, j->error);
		else
			st_warn("%s: HTTP %ld from the apiserver; listing again", w->ops->what,
			        j->http_status);
	}
	if (failed) {
		wait_ms = w->backoff_ms;
		w->backoff_ms =
		        w->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : w->backoff_ms * 2;
	} else {
		w->failures = 0;
		w->backoff_ms = BACKOFF_FIRST_MS;
	}
	if (j->gone || (!j->error[0] && j->http_status != 200))
		w->rv[0] = '\0'; /* list again: the whole state */
	else if (!j->error[0] && j->new_rv[0])
		snprintf(w->rv, sizeof w->rv, "%s", j->new_rv);
out:
	free(j->result);
	free(j);
	if (status != 0 || w->stopping)
		return;
	if (wait_ms)
		lws_sul_schedule(w->srv->ctx, 0, &w->sul_retry, on_retry,
		                 (lws_usec_t)wait_ms * LWS_US_PER_MS);
	else if (kw_submit(w) < 0)
		st_err("%s stopped: cannot queue the next watch", w->ops->what);
}

static int kw_submit(struct cs_kwatch *w)
{
	struct kw_job *j = calloc(1, sizeof *j);
	if (j == NULL || (j->result = calloc(1, w->ops->result_bytes)) == NULL) {
		free(j);
		return -ENOMEM;
	}
	j->w = w;
	snprintf(j->rv, sizeof j->rv, "%s", w->rv);
	int rc = st_workq_submit(w->wq, kw_work, kw_done, j);
	if (rc < 0) {
		free(j->result);
		free(j);
	}
	return rc;
}

int cs_kwatch_start(struct cs_kwatch **out, struct cs_server *srv, const struct cs_kwatch_ops *ops,
                    const char *url, const char *list_query, unsigned window_s)
{
	*out = NULL;
	if (strlen(url) >= sizeof((struct cs_kwatch *)0)->url ||
	    (list_query && strlen(list_query) >= sizeof((struct cs_kwatch *)0)->list_query))
		return -EMSGSIZE;
	struct cs_kwatch *w = calloc(1, sizeof *w);
	if (w == NULL || (w->line = malloc(ops->line_max)) == NULL ||
	    st_workq_new(&w->wq, srv->ctx, 1, 4) < 0) {
		if (w)
			free(w->line);
		free(w);
		return -ENOMEM;
	}
	w->srv = srv;
	w->ops = ops;
	w->window_s = window_s;
	w->backoff_ms = BACKOFF_FIRST_MS;
	snprintf(w->url, sizeof w->url, "%s", url);
	snprintf(w->list_query, sizeof w->list_query, "%s", list_query ? list_query : "");
	int rc = kw_submit(w);
	if (rc < 0) {
		cs_kwatch_free(w);
		return rc;
	}
	*out = w;
	return 0;
}

void cs_kwatch_run_completions(struct cs_kwatch *w)
{
	if (w)
		st_workq_run_completions(w->wq);
}

void cs_kwatch_free(struct cs_kwatch *w)
{
	if (w == NULL)
		return;
	w->stopping = true;
	lws_sul_cancel(&w->sul_retry);
	st_workq_free(w->wq); /* the running watch ends within its window */
	free(w->line);
	free(w);
}
