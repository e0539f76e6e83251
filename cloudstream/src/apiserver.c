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
#include "podcache.h"

#define POD_BODY_MAX (1u << 20) /* a Pod object is a few KiB; refuse anything absurd */
#define TOKEN_MAX    16384u

struct pod_job {
	struct cs_server *srv;
	uint64_t front_ordinal;
	uint64_t submitted_us; /* cs_now_us() at submit: the pod lookup histogram */
	char ns[64];
	char pod[CS_NODE_NAME_MAX_BYTES + 1];
	/* results (worker → loop) */
	long http_status; /* 0 when the request itself failed */
	char node[CS_NODE_NAME_MAX_BYTES + 1];
	char error[CURL_ERROR_SIZE + 64];
	struct cs_api_body body;
};

size_t cs_apiserver_collect(char *p, size_t size, size_t n, void *user)
{
	struct cs_api_body *b = user;
	size_t len = size * n;
	if (b->len + len > b->max) {
		b->overflow = true;
		return 0; /* aborts the transfer */
	}
	char *grown = realloc(b->p, b->len + len + 1);
	if (grown == NULL)
		return 0;
	b->p = grown;
	memcpy(b->p + b->len, p, len);
	b->len += len;
	b->p[b->len] = '\0';
	return len;
}

/* The bearer token, read each time: projected service-account tokens rotate. */
static int read_token(const char *path, char *out, size_t cap)
{
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return -errno;
	size_t n = fread(out, 1, cap - 1, f);
	fclose(f);
	while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == '\r' || out[n - 1] == ' '))
		n--;
	out[n] = '\0';
	return n > 0 ? 0 : -EINVAL;
}

int cs_apiserver_setup(void *curl, const struct cs_config *c, const char *url,
                       struct curl_slist **hdrs, char *errbuf, char *err, size_t err_cap)
{
	CURL *h = curl;
	struct curl_slist *l = curl_slist_append(*hdrs, "Accept: application/json");
	if (l == NULL) {
		snprintf(err, err_cap, "out of memory");
		return -ENOMEM;
	}
	*hdrs = l;
	if (c->apiserver_token_file && c->apiserver_token_file[0]) {
		char token[TOKEN_MAX], auth[TOKEN_MAX + 32];
		int rc = read_token(c->apiserver_token_file, token, sizeof token);
		if (rc < 0) {
			snprintf(err, err_cap, "--apiserver-token-file %s: %s",
			         c->apiserver_token_file, strerror(-rc));
			return rc;
		}
		snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
		l = curl_slist_append(*hdrs, auth);
		explicit_bzero(token, sizeof token);
		explicit_bzero(auth, sizeof auth);
		if (l == NULL) {
			snprintf(err, err_cap, "out of memory");
			return -ENOMEM;
		}
		*hdrs = l;
	}
	curl_easy_setopt(h, CURLOPT_URL, url);
	/* kube-apiserver's audit log and its access control by user agent see who asks. */
	char ua[64];
	snprintf(ua, sizeof ua, "cloudstream/%s", cs_config_spec.version);
	curl_easy_setopt(h, CURLOPT_USERAGENT, ua); /* curl copies it */
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)c->apiserver_timeout_ms);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)c->apiserver_timeout_ms);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, *hdrs);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "https,http");
	if (c->apiserver_ca && c->apiserver_ca[0])
		curl_easy_setopt(h, CURLOPT_CAINFO, c->apiserver_ca);
	if (c->apiserver_cert && c->apiserver_cert[0]) {
		curl_easy_setopt(h, CURLOPT_SSLCERT, c->apiserver_cert);
		curl_easy_setopt(h, CURLOPT_SSLKEY, c->apiserver_key);
	}
	return 0;
}

static void pod_work(void *arg)
{
	struct pod_job *j = arg;
	const struct cs_config *c = &j->srv->cfg;
	CURL *h = curl_easy_init();
	if (h == NULL) {
		snprintf(j->error, sizeof j->error, "curl_easy_init failed");
		return;
	}
	char url[1024];
	snprintf(url, sizeof url, "%s/api/v1/namespaces/%s/pods/%s", c->apiserver_url, j->ns,
	         j->pod);
	char errbuf[CURL_ERROR_SIZE] = "";
	struct curl_slist *hdrs = NULL;
	if (cs_apiserver_setup(h, c, url, &hdrs, errbuf, j->error, sizeof j->error) < 0)
		goto out;
	j->body.max = POD_BODY_MAX;
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, cs_apiserver_collect);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &j->body);
	CURLcode rc = curl_easy_perform(h);
	if (rc != CURLE_OK) {
		snprintf(j->error, sizeof j->error, "%s",
		         j->body.overflow ? "answer over 1 MiB"
		         : errbuf[0]      ? errbuf
		                          : curl_easy_strerror(rc));
		goto out;
	}
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &j->http_status);
	if (j->http_status != 200)
		goto out;
	struct json_tokener *tok = json_tokener_new_ex(16);
	struct json_object *pod =
	        tok ? json_tokener_parse_ex(tok, j->body.p ? j->body.p : "", (int)j->body.len)
	            : NULL;
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
	curl_slist_free_all(hdrs);
	curl_easy_cleanup(h);
	free(j->body.p);
	j->body = (struct cs_api_body){0};
}

static void pod_done(void *arg, int status)
{
	struct pod_job *j = arg;
	struct cs_server *srv = j->srv;
	uint64_t now = cs_now_ms();
	bool ok = false;
	if (status == 0) /* not cancelled by the shutdown */
		st_hist_observe(&srv->m.pod_lookup, cs_now_us() - j->submitted_us);
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
	j->submitted_us = cs_now_us();
	int rc = st_workq_submit(srv->wq, pod_work, pod_done, j);
	if (rc < 0)
		free(j);
	return rc;
}
