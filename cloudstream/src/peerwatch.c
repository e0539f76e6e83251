/*
 * cloudstream/src/peerwatch.c — --peer-service NAMESPACE/NAME: the replicas are the endpoints
 * of the EndpointSlices of a (headless) Service, read through the apiserver.
 *
 * The list and watch are kwatch's (kwatch.h), as for nodewatch.c's Nodes: a list (GET
 * /apis/discovery.k8s.io/v1/namespaces/NS/endpointslices?labelSelector=kubernetes.io/
 * service-name=NAME) then two-second watch windows from its resourceVersion. Results are
 * applied on the loop: the slices are kept by name (ADDED/MODIFIED replace one, DELETED drops
 * it; a list replaces them all), and their endpoints,
 * each address with its slice's port named "tunnel" (else its only port), are the members
 * (peer_members.c dials the new ones, forgets those gone). Every endpoint counts, ready or not: a
 * replica is not ready before it synced with its peers, which must dial it for that
 * (publishNotReadyAddresses).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include <stream/log.h>

#include "cs.h"
#include "kwatch.h"
#include "peer.h"

#define PW_WATCH_SECONDS 2
#define PW_BODY_MAX      (4u << 20)
#define PW_LINE_MAX      (1u << 20) /* one EndpointSlice event */
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
	struct cs_kwatch *kw;
	struct slice *slices;
	size_t n_slices;
};

/* What one list (replacing all) or watch window found (kwatch's result). */
struct pw_result {
	size_t n_ev;
	struct pw_event {
		bool deleted;
		struct slice s;
	} ev[PW_SLICES_MAX];
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

static void add_event(struct pw_result *r, bool deleted, struct json_object *obj)
{
	if (r->n_ev < PW_SLICES_MAX && slice_of(obj, &r->ev[r->n_ev].s)) {
		r->ev[r->n_ev].deleted = deleted;
		r->n_ev++;
	}
}

/* Worker: a list's EndpointSlice, a watch's event. */
static void on_item(void *result, struct json_object *obj)
{
	add_event(result, false, obj);
}

static void on_event(void *result, enum cs_kwatch_type type, struct json_object *obj)
{
	add_event(result, type == CS_KWATCH_DELETED, obj);
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

/* The loop: the slices as they are now, published as the members when anything came. */
static void pw_apply(struct cs_server *srv, void *result, bool listed)
{
	struct pw_result *r = result;
	struct cs_peerwatch *w = srv->peerwatch;
	if (listed)
		w->n_slices = 0; /* the list is the whole truth */
	for (size_t i = 0; i < r->n_ev; i++)
		apply(w, &r->ev[i]);
	if (listed || r->n_ev > 0)
		publish(srv, w);
}

static const struct cs_kwatch_ops ops = {
        .what = "peer service",
        .result_bytes = sizeof(struct pw_result),
        .line_max = PW_LINE_MAX,
        .list_max = PW_BODY_MAX,
        .on_item = on_item,
        .on_event = on_event,
        .apply = pw_apply,
};

int cs_peerwatch_start(struct cs_server *srv)
{
	const char *svc = srv->cfg.peer_service;
	if (svc == NULL || svc[0] == '\0' || srv->peers == NULL)
		return 0;
	const char *slash = strchr(svc, '/'); /* NAMESPACE/NAME, checked by peer_members.c */
	char ns[128], url[1536];
	snprintf(ns, sizeof ns, "%.*s", (int)(slash - svc), svc);
	snprintf(url, sizeof url,
	         "%s/apis/discovery.k8s.io/v1/namespaces/%s/endpointslices?labelSelector="
	         "kubernetes.io%%2Fservice-name%%3D%s",
	         srv->cfg.apiserver_url, ns, slash + 1);
	struct cs_peerwatch *w = calloc(1, sizeof *w);
	if (w == NULL || (w->slices = calloc(PW_SLICES_MAX, sizeof *w->slices)) == NULL) {
		if (w)
			free(w->slices);
		free(w);
		st_err("cannot start the peer service watch");
		return -ENOMEM;
	}
	srv->peerwatch = w;
	int rc = cs_kwatch_start(&w->kw, srv, &ops, url, NULL, PW_WATCH_SECONDS);
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
	cs_kwatch_free(w->kw); /* the running watch ends within its window */
	free(w->slices);
	free(w);
	srv->peerwatch = NULL;
}

void cs_peerwatch_run_completions(struct cs_server *srv)
{
	if (srv->peerwatch)
		cs_kwatch_run_completions(srv->peerwatch->kw);
}
