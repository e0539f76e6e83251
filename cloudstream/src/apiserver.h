/*
 * cloudstream/src/apiserver.h — which node runs a pod, asked of the Kubernetes apiserver
 * (libcurl on the worker pool; the answer lands in the pod cache on the loop thread).
 */
#ifndef CLOUDSTREAM_APISERVER_H
#define CLOUDSTREAM_APISERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cs_server;
struct cs_config;
struct curl_slist;

/*
 * cs_apiserver_setup() - prepare the curl easy handle @curl for a request to @url (built as
 * %s/api/... from --apiserver-url: integration.deploy finds every API path the daemon calls
 * in that form) with the configured credentials, CA and deadline; Accept: application/json
 * and the bearer token (read from --apiserver-token-file now) are appended to *@hdrs, which the
 * caller frees with curl_slist_free_all. @errbuf (CURL_ERROR_SIZE) receives curl's errors.
 * Returns 0, or a negative errno with a message in @err. Worker threads only.
 */
int cs_apiserver_setup(void *curl, const struct cs_config *c, const char *url,
                       struct curl_slist **hdrs, char *errbuf, char *err, size_t err_cap);

/*
 * An answer's body gathered on a worker, bounded: set @max, pass cs_apiserver_collect as
 * CURLOPT_WRITEFUNCTION and the struct as CURLOPT_WRITEDATA; free @p when done. @p is
 * NUL-terminated once anything came; past @max the transfer is aborted and @overflow says why.
 */
struct cs_api_body {
	char *p;
	size_t len, max;
	bool overflow;
};
size_t cs_apiserver_collect(char *p, size_t size, size_t n, void *body);

/*
 * What one call to the apiserver sends beyond cs_apiserver_setup()'s headers (all borrowed for
 * the call): @method NULL is GET, or POST when there is a @body; @body (NULL: none) is sent as
 * its @body_len bytes with Content-Type: @content_type.
 */
struct cs_api_request {
	const char *method;
	const char *content_type;
	const char *body;
	size_t body_len;
};

/*
 * cs_apiserver_call() - one call to @url (cs_apiserver_setup()'s form, credentials and deadline)
 * on a curl easy handle of its own, the answer gathered into @answer (set @answer->max first;
 * the caller frees @answer->p, after a failure as well). Returns the HTTP status, or 0 when no
 * answer came, with why in @err: the set-up's message, "answer over N KiB" (or MiB) past
 * @answer->max, else curl's error. Worker threads only.
 */
long cs_apiserver_call(const struct cs_config *c, const char *url, const struct cs_api_request *req,
                       struct cs_api_body *answer, char *err, size_t err_cap);

/*
 * cs_apiserver_json() - cs_apiserver_call() of @method on @url with @body (NUL-terminated JSON,
 * borrowed; NULL: none); the answer, up to @max bytes, in *@out (NUL-terminated, the caller
 * frees it; NULL when it was empty or the call failed). Returns the HTTP status, or 0 with
 * "<method> <path>: <why>" in @err (@path: @url after --apiserver-url). Worker threads only.
 */
long cs_apiserver_json(const struct cs_config *c, const char *method, const char *url,
                       const char *body, size_t max, char **out, char *err, size_t err_cap);

struct json_object;
/*
 * cs_csr_refused() - the Denied or Failed condition in a CertificateSigningRequest's @status
 * (json-c, borrowed), as both signers through the CSR API read it: true with its *@type,
 * *@reason and *@message (views into @status, "" when absent); false when it has none.
 */
bool cs_csr_refused(struct json_object *status, const char **type, const char **reason,
                    const char **message);

/*
 * cs_pod_lookup_start() - look up pod @ns/@pod for the front with @front_ordinal. When the answer
 * is in (or the lookup failed), the front is resumed with cs_front_pod_resolved(). Returns 0, or
 * -EAGAIN when the worker pool is full, -ENOMEM.
 */
int cs_pod_lookup_start(struct cs_server *srv, uint64_t front_ordinal, const char *ns,
                        size_t ns_len, const char *pod, size_t pod_len);

/*
 * cs_pod_ip_lookup_start() - which node runs the pod with IP @ip (dotted IPv4, NUL-terminated):
 * GET /api/v1/pods?fieldSelector=status.podIP=<ip> on a worker (door.h cs_door_pod_node picks
 * the pod), the answer put in the pod cache under CS_DOOR_POD_IP_NS/<ip> (absent too), then
 * cs_door_pod_resolved(srv, @door_ordinal, ok) on the loop. Returns 0 (the callback follows),
 * -EINVAL, -ENOMEM or the worker queue's -EAGAIN (no callback).
 */
int cs_pod_ip_lookup_start(struct cs_server *srv, uint64_t door_ordinal, const char *ip);

#endif /* CLOUDSTREAM_APISERVER_H */
