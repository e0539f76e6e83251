/*
 * cloudstream/src/peerwatch.c — --peer-service NAMESPACE/NAME: the replicas are the endpoints
 * of the EndpointSlices of a (headless) Service, read through the apiserver.
 *
 * As nodewatch.c does for Nodes: a list (GET /apis/discovery.k8s.io/v1/namespaces/NS/
 * endpointslices?labelSelector=kubernetes.io/service-name=NAME) then watches from its
 * resourceVersion (&watch=1&resourceVersion=RV&timeoutSeconds=2) in a row, each a job on a pool
 * of its own (one thread: a watch blocks for its window). Results are applied on the loop: the
 * slices are kept by name (ADDED/MODIFIED replace one, DELETED drops it), and their endpoints,
 * each address with its slice's port named "tunnel" (else its only port), are the members
 * (peer_members.c dials the new ones, forgets those gone). Every endpoint counts, ready or not: a
 * replica is not ready before it synced with its peers, which must dial it for that
 * (publishNotReadyAddresses). 410 Gone, or an answer that is not 200, lists again.
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
#include "peer.h"

#define PW_WATCH_SECONDS 2
#define PW_BODY_MAX      (4u << 20)
#define PW_SLICES_MAX    64u
#define PW_ADDRS_MAX     64u /* CS_PEERDIR_MAX_PEERS: members at most */

/* One EndpointSlice as it matters here. */
struct slice {
	char name[254];
	int port;
	size_t n;
	char addrs[PW_ADDRS_MAX][64];
};

struct cs_peerwatch {
	struct st_workq *wq; /* one thread */
	char rv[64];         /* "" : list first */
	struct slice *slices;
	size_t n_slices;
	bool stopping;
	uint64_t failures;
};

/* What one job found: the list's slices (replacing all), or a watch window's events. */
struct pw_event {
	bool deleted;
	struct slice s;
};

struct pw_job {
	struct cs_server *srv;
	char rv[64];
	long http_status;
	bool gone, listed;
	char new_rv[64];
	struct pw_event *ev;
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

/* An EndpointSlice object into @s: false when it has no usable port or name. */
static bool slice_of(struct json_object *o, struct slice *s)
{
	memset(s, 0, sizeof *s);
	const char *name = str_at(o, "metadata", "name");
	struct json_object *ports, *eps;
	if (name == NULL || strlen(name) >= sizeof s->name)
		return false;
	snprintf(s->name, sizeof s->name, "%s", name);
	if (json_object_object_get_ex(o, "ports", &ports) &&
	    json_object_is_type(ports, json_type_array)) {
		size_t np = json_object_array_length(ports);
		for (size_t i = 0; i < np; i++) {
			struct json_object *pt = json_object_array_get_idx(ports, i), *num, *pn;
			if (!json_object_object_get_ex(pt, "port", &num))
				continue;
			const char *pname = json_object_object_get_ex(pt, "name", &pn)
			                            ? json_object_get_string(pn)
			                            : "";
			if (s->port == 0 || (pname && strcmp(pname, "tunnel") == 0))
				s->port = json_object_get_int(num);
		}
	}
	if (s->port <= 0 || s->port > 65535)
		return true; /* a slice without a port names no member (yet) */
	if (!json_object_object_get_ex(o, "endpoints", &eps) ||
	    !json_object_is_type(eps, json_type_array))
		return true;
	size_t ne = json_object_array_length(eps);
	for (size_t i = 0; i < ne; i++) {
		struct json_object *ep = json_object_array_get_idx(eps, i), *addrs;
		if (!json_object_object_get_ex(ep, "addresses", &addrs) ||
		    !json_object_is_type(addrs, json_type_array))
			continue;
		size_t na = json_object_array_length(addrs);
		for (size_t k = 0; k < na && s->n < PW_ADDRS_MAX; k++) {
			const char *a = json_object_get_string(json_object_array_get_idx(addrs, k));
			if (a && strlen(a) < sizeof s->addrs[0])
				snprintf(s->addrs[s->n++], sizeof s->addrs[0], "%s", a);
		}
	}
	return true;
}

static void add_event(struct pw_job *j, bool deleted, struct json_object *obj)
{
	if (j->n_ev >= PW_SLICES_MAX)
		return;
	if (slice_of(obj, &j->ev[j->n_ev].s)) {
		j->ev[j->n_ev].deleted = deleted;
		j->n_ev++;
	}
}

static void watch_line(struct pw_job *j, const char *line, size_t len)
{
	struct json_tokener *tok = json_tokener_new_ex(64);
	struct json_object *o = tok ? json_tokener_parse_ex(tok, line, (int)len) : NULL;
	json_tokener_free(tok);
	struct json_object *type, *obj, *code;
	if (o && json_object_object_get_ex(o, "type", &type) &&
	    json_object_object_get_ex(o, "object", &obj)) {
		const char *t = json_object_get_string(type);
		if (strcmp(t, "ERROR") == 0) {
			if (json_object_object_get_ex(obj, "code", &code) &&
			    json_object_get_int(code) == 410)
				j->gone = true;
		} else {
			const char *rv = str_at(obj, "metadata", "resourceVersion");
			if (rv)
				snprintf(j->new_rv, sizeof j->new_rv, "%s", rv);
			if (strcmp(t, "BOOKMARK") != 0)
				add_event(j, strcmp(t, "DELETED") == 0, obj);
		}
	}
	json_object_put(o);
}

static void pw_work(void *arg)
{
	struct pw_job *j = arg;
	const struct cs_config *c = &j->srv->cfg;
	CURL *h = curl_easy_init();
	j->ev = calloc(PW_SLICES_MAX, sizeof *j->ev);
	if (h == NULL || j->ev == NULL) {
		snprintf(j->error, sizeof j->error, "out of memory");
		curl_easy_cleanup(h);
		return;
	}
	char ns[128], name[254];
	const char *slash = strchr(c->peer_service, '/');
	snprintf(ns, sizeof ns, "%.*s", (int)(slash - c->peer_service), c->peer_service);
	snprintf(name, sizeof name, "%s", slash + 1);
	char url[1400], errbuf[CURL_ERROR_SIZE] = "";
	if (j->rv[0])
		snprintf(url, sizeof url,
		         "%s/apis/discovery.k8s.io/v1/namespaces/%s/endpointslices?labelSelector="
		         "kubernetes.io%%2Fservice-name%%3D%s&watch=1&resourceVersion=%s"
		         "&timeoutSeconds=%d",
		         c->apiserver_url, ns, name, j->rv, PW_WATCH_SECONDS);
	else
		snprintf(url, sizeof url,
		         "%s/apis/discovery.k8s.io/v1/namespaces/%s/endpointslices?labelSelector="
		         "kubernetes.io%%2Fservice-name%%3D%s",
		         c->apiserver_url, ns, name);
	struct curl_slist *hdrs = NULL;
	if (cs_apiserver_setup(h, c, url, &hdrs, errbuf, j->error, sizeof j->error) < 0) {
		curl_slist_free_all(hdrs);
		curl_easy_cleanup(h);
		return;
	}
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS,
	                 (long)c->apiserver_timeout_ms + (j->rv[0] ? PW_WATCH_SECONDS * 1000L : 0));
	j->body.max = PW_BODY_MAX;
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
		struct json_object *o = json_tokener_parse(j->body.p), *items;
		const char *rv = o ? str_at(o, "metadata", "resourceVersion") : NULL;
		if (rv && json_object_object_get_ex(o, "items", &items) &&
		    json_object_is_type(items, json_type_array)) {
			snprintf(j->new_rv, sizeof j->new_rv, "%s", rv);
			j->listed = true;
			size_t n = json_object_array_length(items);
			for (size_t i = 0; i < n; i++)
				add_event(j, false, json_object_array_get_idx(items, i));
		} else {
			snprintf(j->error, sizeof j->error,
			         "the EndpointSlice list has no items or resourceVersion");
		}
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

/* The members now: every address of every slice, with that slice's port. */
static void publish(struct cs_server *srv, struct cs_peerwatch *w)
{
	static char addrs[PW_ADDRS_MAX][64];
	int ports[PW_ADDRS_MAX];
	size_t n = 0;
	for (size_t i = 0; i < w->n_slices; i++)
		for (size_t k = 0; k < w->slices[i].n && n < PW_ADDRS_MAX; k++) {
			memcpy(addrs[n], w->slices[i].addrs[k], sizeof addrs[0]);
			ports[n++] = w->slices[i].port;
		}
	cs__peers_service_members(srv, (const char(*)[64])addrs, ports, n);
}

static void apply(struct cs_peerwatch *w, const struct pw_event *e)
{
	size_t i = 0;
	while (i < w->n_slices && strcmp(w->slices[i].name, e->s.name) != 0)
		i++;
	if (e->deleted) {
		if (i < w->n_slices)
			w->slices[i] = w->slices[--w->n_slices];
		return;
	}
	if (i == w->n_slices) {
		if (w->n_slices == PW_SLICES_MAX)
			return;
		w->n_slices++;
	}
	w->slices[i] = e->s;
}

static int pw_submit(struct cs_server *srv);

static void pw_done(void *arg, int status)
{
	struct pw_job *j = arg;
	struct cs_server *srv = j->srv;
	struct cs_peerwatch *w = srv->peerwatch;
	if (status != 0 || w == NULL || w->stopping)
		goto out;
	if (j->listed)
		w->n_slices = 0; /* the list is the whole truth */
	for (size_t i = 0; i < j->n_ev; i++)
		apply(w, &j->ev[i]);
	if (j->listed || j->n_ev > 0)
		publish(srv, w);
	if (j->gone || (j->error[0] == '\0' && j->http_status != 200)) {
		if (j->http_status != 200 && !j->gone && w->failures++ % 30 == 0)
			st_warn("peer service: HTTP %ld from the apiserver; listing again",
			        j->http_status);
		w->rv[0] = '\0';
	} else if (j->error[0]) {
		if (w->failures++ % 30 == 0)
			st_warn("peer service: %s; retrying", j->error);
	} else {
		w->failures = 0;
		if (j->new_rv[0])
			snprintf(w->rv, sizeof w->rv, "%s", j->new_rv);
	}
out:
	free(j->ev);
	free(j);
	if (status == 0 && w && !w->stopping && pw_submit(srv) < 0)
		st_err("peer service watch stopped: cannot queue the next watch");
}

static int pw_submit(struct cs_server *srv)
{
	struct cs_peerwatch *w = srv->peerwatch;
	struct pw_job *j = calloc(1, sizeof *j);
	if (j == NULL)
		return -ENOMEM;
	j->srv = srv;
	snprintf(j->rv, sizeof j->rv, "%s", w->rv);
	int rc = st_workq_submit(w->wq, pw_work, pw_done, j);
	if (rc < 0)
		free(j);
	return rc;
}

int cs_peerwatch_start(struct cs_server *srv)
{
	if (srv->cfg.peer_service == NULL || srv->cfg.peer_service[0] == '\0' || srv->peers == NULL)
		return 0;
	struct cs_peerwatch *w = calloc(1, sizeof *w);
	if (w == NULL || (w->slices = calloc(PW_SLICES_MAX, sizeof *w->slices)) == NULL ||
	    st_workq_new(&w->wq, srv->ctx, 1, 4) < 0) {
		if (w)
			free(w->slices);
		free(w);
		st_err("cannot start the peer service watch");
		return -ENOMEM;
	}
	srv->peerwatch = w;
	int rc = pw_submit(srv);
	if (rc < 0) {
		cs_peerwatch_stop(srv);
		st_err("cannot start the peer service watch");
	}
	return rc;
}

void cs_peerwatch_stop(struct cs_server *srv)
{
	struct cs_peerwatch *w = srv->peerwatch;
	if (w == NULL)
		return;
	w->stopping = true;
	st_workq_free(w->wq); /* the running watch ends within its timeout */
	free(w->slices);
	free(w);
	srv->peerwatch = NULL;
}

void cs_peerwatch_run_completions(struct cs_server *srv)
{
	if (srv->peerwatch)
		st_workq_run_completions(srv->peerwatch->wq);
}
