/*
 * cloudstream/src/apiserver.c — GET /api/v1/namespaces/<ns>/pods/<pod> with libcurl on a
 * worker thread; spec.nodeName goes into the pod cache.
 *
 * Workers read only the immutable configuration strings and their job; the result goes back
 * through the job to the loop thread, which updates the cache and resumes the front by its
 * ordinal (a front that is gone by then is simply not found).
 */
#include "apiserver.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <json-c/json.h>

#include <stream/log.h>
#include <stream/workq.h>

#include "cs.h"
#include "door.h"
#include "podcache.h"

#define POD_BODY_MAX (1u << 20) /* a Pod object is a few KiB; refuse anything absurd */

struct pod_job {
	struct cs_server *srv;
	uint64_t front_ordinal;
	uint64_t submitted_us; /* st_now_us() at submit: the pod lookup histogram */
	char ns[64];
	char pod[CS_NODE_NAME_MAX_BYTES + 1];
	/* results (worker → loop) */
	long http_status; /* 0 when the request itself failed */
	char node[CS_NODE_NAME_MAX_BYTES + 1];
	char error[CURL_ERROR_SIZE + 64];
};

static void pod_work(void *arg)
{
	struct pod_job *j = arg;
	const struct cs_config *c = &j->srv->cfg;
	char url[1024];
	snprintf(url, sizeof url, "%s/api/v1/namespaces/%s/pods/%s", c->apiserver_url, j->ns,
	         j->pod);
	struct cs_api_body body = {.max = POD_BODY_MAX};
	j->http_status = cs_apiserver_call(c, url, &(struct cs_api_request){0}, &body, j->error,
	                                   sizeof j->error);
	if (j->http_status != 200)
		goto out;
	struct json_tokener *tok = json_tokener_new_ex(16);
	struct json_object *pod =
	        tok ? json_tokener_parse_ex(tok, body.p ? body.p : "", (int)body.len) : NULL;
	json_tokener_free(tok);
	struct json_object *spec, *node;
	if (pod && json_object_object_get_ex(pod, "spec", &spec) &&
	    json_object_object_get_ex(spec, "nodeName", &node) &&
	    json_object_is_type(node, json_type_string))
		snprintf(j->node, sizeof j->node, "%s", json_object_get_string(node));
	else if (pod == NULL)
		snprintf(j->error, sizeof j->error, "the apiserver's answer is not JSON");
	json_object_put(pod);
out:
	free(body.p);
}

static void pod_done(void *arg, int status)
{
	struct pod_job *j = arg;
	struct cs_server *srv = j->srv;
	uint64_t now = st_now_ms();
	bool ok = false;
	if (status == 0) /* not cancelled by the shutdown */
		st_hist_observe(&srv->m.pod_lookup, st_now_us() - j->submitted_us);
	if (status == 0 && j->error[0] == '\0' &&
	    (j->http_status == 200 || j->http_status == 404)) {
		/* 404, or a pod not scheduled yet: cached as absent, briefly as well. */
		size_t nl = strlen(j->node);
		cs_podcache_put(srv->pods, j->ns, strlen(j->ns), j->pod, strlen(j->pod),
		                nl ? j->node : NULL, nl, now + srv->cfg.pod_cache_ttl_ms);
		ok = true;
	} else if (status == 0) {
		st_warn("pod %s/%s: apiserver lookup failed: %s", j->ns, j->pod,
		        j->error[0] ? j->error : "unexpected HTTP status");
	}
	cs_front_pod_resolved(srv, j->front_ordinal, ok); /* a front gone by now is not found */
	free(j);
}

int cs_pod_lookup_start(struct cs_server *srv, uint64_t front_ordinal, const char *ns,
                        size_t ns_len, const char *pod, size_t pod_len)
{
	if (ns_len >= sizeof((struct pod_job *)0)->ns || pod_len > CS_NODE_NAME_MAX_BYTES)
		return -EINVAL;
	struct pod_job *j = calloc(1, sizeof *j);
	if (j == NULL)
		return -ENOMEM;
	j->srv = srv;
	j->front_ordinal = front_ordinal;
	memcpy(j->ns, ns, ns_len);
	memcpy(j->pod, pod, pod_len);
	j->submitted_us = st_now_us();
	int rc = st_workq_submit(srv->wq, pod_work, pod_done, j);
	if (rc < 0)
		free(j);
	return rc;
}

/* ---- the front door: which node has a pod IP (door.h) ------------------------------------ */

#define POD_LIST_MAX (4u << 20) /* a field-selected list holds one or two pods */

struct pod_ip_job {
	struct cs_server *srv;
	uint64_t door_ordinal;
	char ip[16];
	/* results (worker → loop) */
	long http_status;
	int found; /* cs_door_pod_node's answer */
	char node[CS_NODE_NAME_MAX_BYTES + 1];
	char error[CURL_ERROR_SIZE + 64];
};

static void pod_ip_work(void *arg)
{
	struct pod_ip_job *j = arg;
	const struct cs_config *c = &j->srv->cfg;
	char url[1024];
	/* '=' of the selector percent-encoded; a dotted IPv4 needs nothing more */
	snprintf(url, sizeof url, "%s/api/v1/pods?fieldSelector=status.podIP%%3D%s",
	         c->apiserver_url, j->ip);
	struct cs_api_body body = {.max = POD_LIST_MAX};
	j->http_status = cs_apiserver_call(c, url, &(struct cs_api_request){0}, &body, j->error,
	                                   sizeof j->error);
	if (j->http_status == 200) {
		j->found = cs_door_pod_node(body.p ? body.p : "", body.len, j->ip, j->node,
		                            sizeof j->node);
		if (j->found < 0)
			snprintf(j->error, sizeof j->error,
			         "the apiserver's answer is not a PodList");
	}
	free(body.p);
}

static void pod_ip_done(void *arg, int status)
{
	struct pod_ip_job *j = arg;
	struct cs_server *srv = j->srv;
	bool ok = false;
	if (status == 0 && j->error[0] == '\0' && j->http_status == 200) {
		/* No pod with the IP: cached as absent, like a pod lookup's 404. */
		const char *ns = CS_DOOR_POD_IP_NS;
		size_t nl = j->found == 1 ? strlen(j->node) : 0;
		cs_podcache_put(srv->pods, ns, strlen(ns), j->ip, strlen(j->ip),
		                nl ? j->node : NULL, nl, st_now_ms() + srv->cfg.pod_cache_ttl_ms);
		ok = true;
	} else if (status == 0) {
		st_warn("pod IP %s: apiserver lookup failed: %s", j->ip,
		        j->error[0] ? j->error : "unexpected HTTP status");
	}
	cs_door_pod_resolved(srv, j->door_ordinal, ok); /* a connection gone by now is not found */
	free(j);
}

int cs_pod_ip_lookup_start(struct cs_server *srv, uint64_t door_ordinal, const char *ip)
{
	if (strlen(ip) >= sizeof((struct pod_ip_job *)0)->ip)
		return -EINVAL;
	struct pod_ip_job *j = calloc(1, sizeof *j);
	if (j == NULL)
		return -ENOMEM;
	j->srv = srv;
	j->door_ordinal = door_ordinal;
	memcpy(j->ip, ip, strlen(ip));
	int rc = st_workq_submit(srv->wq, pod_ip_work, pod_ip_done, j);
	if (rc < 0)
		free(j);
	return rc;
}
