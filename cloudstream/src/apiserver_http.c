/*
 * cloudstream/src/apiserver_http.c — how every apiserver call is made (apiserver.h): the
 * credentials, CA, deadline and User-Agent on a curl easy handle, the bounded collector
 * for answers, and the whole request/answer call the daemon's jobs make. Shared by the daemon's jobs and the cloudstream-dnat controller (tool/dnat.c).
 * Any thread; each handle belongs to one.
 */
#include "apiserver.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <json-c/json.h>

#include "config.h"

#define TOKEN_MAX 16384u

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

/* Why an answer was cut at @max bytes: "answer over 64 KiB". */
static void over_max(size_t max, char *err, size_t err_cap)
{
	if (max >= (1u << 20) && max % (1u << 20) == 0)
		snprintf(err, err_cap, "answer over %zu MiB", max >> 20);
	else
		snprintf(err, err_cap, "answer over %zu KiB", max >> 10);
}

long cs_apiserver_call(const struct cs_config *c, const char *url, const struct cs_api_request *req,
                       struct cs_api_body *answer, char *err, size_t err_cap)
{
	CURL *h = curl_easy_init();
	if (h == NULL) {
		snprintf(err, err_cap, "curl_easy_init failed");
		return 0;
	}
	char errbuf[CURL_ERROR_SIZE] = "";
	struct curl_slist *hdrs = NULL;
	long status = 0;
	if (cs_apiserver_setup(h, c, url, &hdrs, errbuf, err, err_cap) < 0)
		goto out;
	if (req->body) {
		char type[128];
		snprintf(type, sizeof type, "Content-Type: %s", req->content_type);
		struct curl_slist *l = curl_slist_append(hdrs, type);
		if (l == NULL) {
			snprintf(err, err_cap, "out of memory");
			goto out;
		}
		hdrs = l;
		curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)req->body_len);
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, req->body);
	}
	if (req->method)
		curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req->method);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, cs_apiserver_collect);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, answer);
	CURLcode rc = curl_easy_perform(h);
	if (rc != CURLE_OK) {
		if (answer->overflow)
			over_max(answer->max, err, err_cap);
		else
			snprintf(err, err_cap, "%s", errbuf[0] ? errbuf : curl_easy_strerror(rc));
		goto out;
	}
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
out:
	curl_slist_free_all(hdrs);
	curl_easy_cleanup(h);
	return status;
}

long cs_apiserver_json(const struct cs_config *c, const char *method, const char *url,
                       const char *body, size_t max, char **out, char *err, size_t err_cap)
{
	struct cs_api_request req = {.method = method,
	                             .content_type = "application/json",
	                             .body = body,
	                             .body_len = body ? strlen(body) : 0};
	struct cs_api_body b = {.max = max};
	char why[CURL_ERROR_SIZE];
	long status = cs_apiserver_call(c, url, &req, &b, why, sizeof why);
	if (status == 0) {
		size_t base = strlen(c->apiserver_url);
		const char *path = strncmp(url, c->apiserver_url, base) == 0 ? url + base : url;
		snprintf(err, err_cap, "%s %s: %s", method, path, why);
		free(b.p);
		b.p = NULL;
	}
	*out = b.p;
	return status;
}

/* @o's member @key as text, or "" (absent or null). */
static const char *member(struct json_object *o, const char *key)
{
	struct json_object *v;
	const char *s = json_object_object_get_ex(o, key, &v) ? json_object_get_string(v) : NULL;
	return s ? s : "";
}

bool cs_csr_refused(struct json_object *status, const char **type, const char **reason,
                    const char **message)
{
	struct json_object *conds;
	if (!json_object_object_get_ex(status, "conditions", &conds) ||
	    !json_object_is_type(conds, json_type_array))
		return false;
	for (size_t i = 0; i < json_object_array_length(conds); i++) {
		struct json_object *c = json_object_array_get_idx(conds, i);
		*type = member(c, "type");
		if (strcmp(*type, "Denied") == 0 || strcmp(*type, "Failed") == 0) {
			*reason = member(c, "reason");
			*message = member(c, "message");
			return true;
		}
	}
	return false;
}
