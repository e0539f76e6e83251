/*
 * cri/src/client.c — gRPC unary calls to the CRI runtime over its unix socket (client.h).
 */
#include <cri/client.h>
#include <cri/grpc.h>
#include <cri/pb.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#define CRI_SERVICE     "/runtime.v1.RuntimeService/"
#define CRI_REQUEST_MAX (64u * 1024u)

struct cri_client {
	CURL *curl;
	char *socket_path;
	uint64_t timeout_ms;
};

/* What one call collects. */
struct call {
	uint8_t *body;
	size_t len, cap;
	bool too_big;
	int grpc_status; /* -1 until seen */
	char grpc_message[512];
};

int cri_client_new(struct cri_client **out, const char *socket_path, uint64_t timeout_ms)
{
	if (socket_path == NULL || socket_path[0] == '\0')
		return -EINVAL;
	if (strncmp(socket_path, "unix://", 7) == 0)
		socket_path += 7;
	struct cri_client *c = calloc(1, sizeof *c);
	if (c == NULL)
		return -ENOMEM;
	c->socket_path = strdup(socket_path);
	c->curl = curl_easy_init();
	c->timeout_ms = timeout_ms ? timeout_ms : 120000;
	if (c->socket_path == NULL || c->curl == NULL) {
		cri_client_free(c);
		return -ENOMEM;
	}
	*out = c;
	return 0;
}

void cri_client_free(struct cri_client *c)
{
	if (c == NULL)
		return;
	if (c->curl)
		curl_easy_cleanup(c->curl);
	free(c->socket_path);
	free(c);
}

static size_t on_body(char *p, size_t size, size_t n, void *user)
{
	struct call *call = user;
	size_t len = size * n;
	if (call->len + len > CRI_GRPC_MAX_MESSAGE_BYTES + CRI_GRPC_PREFIX_BYTES) {
		call->too_big = true;
		return 0; /* aborts the transfer */
	}
	if (call->len + len > call->cap) {
		size_t cap = call->cap ? call->cap * 2 : 4096;
		while (cap < call->len + len)
			cap *= 2;
		uint8_t *b = realloc(call->body, cap);
		if (b == NULL)
			return 0;
		call->body = b;
		call->cap = cap;
	}
	memcpy(call->body + call->len, p, len);
	call->len += len;
	return len;
}

/* Headers and, for HTTP/2, trailers: curl hands both to this callback. */
static size_t on_header(char *p, size_t size, size_t n, void *user)
{
	struct call *call = user;
	size_t len = size * n;
	const char *colon = memchr(p, ':', len);
	if (colon == NULL)
		return len;
	size_t nlen = (size_t)(colon - p);
	const char *v = colon + 1;
	size_t vlen = len - nlen - 1;
	while (vlen && (*v == ' ' || *v == '\t')) {
		v++;
		vlen--;
	}
	while (vlen && (v[vlen - 1] == '\r' || v[vlen - 1] == '\n' || v[vlen - 1] == ' '))
		vlen--;
	if (nlen == 11 && strncasecmp(p, "grpc-status", 11) == 0)
		call->grpc_status = cri_grpc_parse_status(v, vlen);
	else if (nlen == 12 && strncasecmp(p, "grpc-message", 12) == 0)
		cri_grpc_decode_message(v, vlen, call->grpc_message, sizeof call->grpc_message);
	return len;
}

int cri_call(struct cri_client *c, const char *method, const uint8_t *req, size_t req_len,
             uint8_t **resp, size_t *resp_len, int *grpc_code, char *err, size_t errlen)
{
	*resp = NULL;
	*resp_len = 0;
	*grpc_code = 0;
	if (req_len > CRI_REQUEST_MAX) {
		snprintf(err, errlen, "%s: request over %u bytes", method, CRI_REQUEST_MAX);
		return -EMSGSIZE;
	}
	uint8_t *framed = malloc(CRI_GRPC_PREFIX_BYTES + req_len);
	if (framed == NULL) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	cri_grpc_prefix(framed, req_len);
	if (req_len)
		memcpy(framed + CRI_GRPC_PREFIX_BYTES, req, req_len);
	char url[256], timeout[64];
	snprintf(url, sizeof url, "http://localhost" CRI_SERVICE "%s", method);
	char tv[32];
	cri_grpc_timeout(tv, sizeof tv, c->timeout_ms);
	snprintf(timeout, sizeof timeout, "grpc-timeout: %s", tv);
	struct curl_slist *h = NULL, *t;
	const char *fixed[] = {"Content-Type: application/grpc",
	                       "TE: trailers",
	                       "User-Agent: edgestream-cri/0.1",
	                       "Expect:",
	                       "Accept:",
	                       timeout};
	for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
		t = curl_slist_append(h, fixed[i]);
		if (t == NULL) {
			curl_slist_free_all(h);
			free(framed);
			snprintf(err, errlen, "out of memory");
			return -ENOMEM;
		}
		h = t;
	}
	struct call call = {.grpc_status = -1};
	CURL *e = c->curl;
	curl_easy_reset(e);
	curl_easy_setopt(e, CURLOPT_UNIX_SOCKET_PATH, c->socket_path);
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE);
	curl_easy_setopt(e, CURLOPT_POST, 1L);
	curl_easy_setopt(e, CURLOPT_POSTFIELDS, (const char *)framed);
	curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)(CRI_GRPC_PREFIX_BYTES + req_len));
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, &call);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, &call);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)c->timeout_ms);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	/* One connection per call: Debian's libcurl 7.88 fails the second call on a reused h2c
	 * connection over a unix socket ("Error in the HTTP2 framing layer"), and a unix-socket
	 * connect costs microseconds. */
	curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, 1L);
	curl_easy_setopt(e, CURLOPT_FORBID_REUSE, 1L);
	CURLcode cc = curl_easy_perform(e);
	curl_slist_free_all(h);
	free(framed);
	long status = 0;
	curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
	int rc = 0;
	if (cc != CURLE_OK) {
		rc = cc == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT
		     : call.too_big                 ? -EMSGSIZE
		     : cc == CURLE_COULDNT_CONNECT  ? -ECONNREFUSED
		                                    : -EPROTO;
		snprintf(err, errlen, "%s via %s: %s", method, c->socket_path,
		         call.too_big ? "response over the size limit" : curl_easy_strerror(cc));
	} else if (status != 200) {
		rc = -EPROTO;
		snprintf(err, errlen, "%s: HTTP status %ld (not a gRPC server?)", method, status);
	} else if (call.grpc_status < 0) {
		rc = -EPROTO;
		snprintf(err, errlen, "%s: no grpc-status in the response", method);
	} else if (call.grpc_status != CRI_GRPC_OK) {
		*grpc_code = call.grpc_status;
		rc = cri_grpc_errno(call.grpc_status);
		snprintf(err, errlen, "%s: %s: %s", method, cri_grpc_code_name(call.grpc_status),
		         call.grpc_message[0] ? call.grpc_message : "(no message)");
	} else {
		const uint8_t *msg;
		size_t mlen;
		int u = cri_grpc_unframe(call.body, call.len, &msg, &mlen);
		if (u < 0) {
			rc = u == -EAGAIN ? -EPROTO : u;
			snprintf(err, errlen, "%s: malformed gRPC response body (%zu bytes)",
			         method, call.len);
		} else {
			*resp = malloc(mlen ? mlen : 1);
			if (*resp == NULL) {
				rc = -ENOMEM;
				snprintf(err, errlen, "out of memory");
			} else {
				if (mlen)
					memcpy(*resp, msg, mlen);
				*resp_len = mlen;
			}
		}
	}
	free(call.body);
	return rc;
}

/* Encodes into a stack buffer, calls, decodes through @decode. */
typedef int (*decode_fn)(const uint8_t *p, size_t len, void *out);

static int unary(struct cri_client *c, const char *method, const uint8_t *req, ssize_t req_len,
                 decode_fn decode, void *out, char *err, size_t errlen)
{
	if (req_len < 0) {
		snprintf(err, errlen, "%s: request does not fit", method);
		return (int)req_len;
	}
	uint8_t *resp;
	size_t resp_len;
	int code;
	int rc = cri_call(c, method, req, (size_t)req_len, &resp, &resp_len, &code, err, errlen);
	if (rc < 0)
		return rc;
	rc = decode(resp, resp_len, out);
	free(resp);
	if (rc < 0)
		snprintf(err, errlen, "%s: malformed response (%s)", method,
		         rc == -ENODATA ? "no result in it" : "protobuf");
	return rc;
}

static int dec_version(const uint8_t *p, size_t len, void *out)
{
	return cri_decode_version_response(p, len, out);
}

int cri_version(struct cri_client *c, struct cri_version *out, char *err, size_t errlen)
{
	uint8_t req[64];
	return unary(c, "Version", req, cri_encode_version_request(req, sizeof req, "0.1.0"),
	             dec_version, out, err, errlen);
}

struct list_out {
	void *items;
	size_t max, n, total;
};

static int dec_sandboxes(const uint8_t *p, size_t len, void *out)
{
	struct list_out *l = out;
	return cri_decode_list_pod_sandbox_response(p, len, l->items, l->max, &l->n, &l->total);
}

static int dec_containers(const uint8_t *p, size_t len, void *out)
{
	struct list_out *l = out;
	return cri_decode_list_containers_response(p, len, l->items, l->max, &l->n, &l->total);
}

int cri_list_sandboxes(struct cri_client *c, const struct cri_label *labels, size_t nlabels,
                       int state, struct cri_sandbox *out, size_t max, size_t *n, char *err,
                       size_t errlen)
{
	uint8_t req[4096];
	struct list_out l = {.items = out, .max = max};
	int rc = unary(c, "ListPodSandbox", req,
	               cri_encode_list_pod_sandbox_request(req, sizeof req, labels, nlabels, state),
	               dec_sandboxes, &l, err, errlen);
	*n = l.n;
	return rc;
}

int cri_list_containers(struct cri_client *c, const char *sandbox_id,
                        const struct cri_label *labels, size_t nlabels, int state,
                        struct cri_container *out, size_t max, size_t *n, char *err, size_t errlen)
{
	uint8_t req[4096];
	struct list_out l = {.items = out, .max = max};
	int rc = unary(c, "ListContainers", req,
	               cri_encode_list_containers_request(req, sizeof req, sandbox_id, labels,
	                                                  nlabels, state),
	               dec_containers, &l, err, errlen);
	*n = l.n;
	return rc;
}

static int dec_status(const uint8_t *p, size_t len, void *out)
{
	return cri_decode_container_status_response(p, len, out);
}

int cri_container_status(struct cri_client *c, const char *container_id,
                         struct cri_container_status *out, char *err, size_t errlen)
{
	uint8_t req[256];
	return unary(c, "ContainerStatus", req,
	             cri_encode_container_status_request(req, sizeof req, container_id), dec_status,
	             out, err, errlen);
}

/* Where a response's one string goes (a streaming URL, a new sandbox's or container's id). */
struct text_out {
	char *buf;
	size_t cap;
};

static int dec_url(const uint8_t *p, size_t len, void *out)
{
	struct text_out *t = out;
	return cri_decode_url_response(p, len, t->buf, t->cap);
}

int cri_exec_url(struct cri_client *c, const char *container_id, const char *const *cmd,
                 size_t ncmd, bool tty, bool in, bool out_, bool err_stream, char *url, size_t cap,
                 char *err, size_t errlen)
{
	uint8_t *req = malloc(CRI_REQUEST_MAX); /* not on the stack: commands can be long */
	if (req == NULL)
		return -ENOMEM;
	struct text_out u = {url, cap};
	int rc = unary(c, "Exec", req,
	               cri_encode_exec_request(req, CRI_REQUEST_MAX, container_id, cmd, ncmd, tty,
	                                       in, out_, err_stream),
	               dec_url, &u, err, errlen);
	free(req);
	return rc;
}

int cri_attach_url(struct cri_client *c, const char *container_id, bool in, bool tty, bool out_,
                   bool err_stream, char *url, size_t cap, char *err, size_t errlen)
{
	uint8_t req[256];
	struct text_out u = {url, cap};
	return unary(
	        c, "Attach", req,
	        cri_encode_attach_request(req, sizeof req, container_id, in, tty, out_, err_stream),
	        dec_url, &u, err, errlen);
}

int cri_port_forward_url(struct cri_client *c, const char *sandbox_id, const int32_t *ports,
                         size_t nports, char *url, size_t cap, char *err, size_t errlen)
{
	uint8_t req[2048];
	struct text_out u = {url, cap};
	return unary(c, "PortForward", req,
	             cri_encode_port_forward_request(req, sizeof req, sandbox_id, ports, nports),
	             dec_url, &u, err, errlen);
}

/* ---- pod life cycle ---------------------------------------------------------------------- */

static int dec_id(const uint8_t *p, size_t len, void *out)
{
	struct text_out *t = out;
	return cri_decode_id_response(p, len, t->buf, t->cap);
}

/* Responses with nothing we read: still well-formed protobuf. */
static int dec_empty(const uint8_t *p, size_t len, void *out)
{
	(void)out;
	struct cri_pb_reader r;
	struct cri_pb_field f;
	int rc;
	cri_pb_reader_init(&r, p, len);
	while ((rc = cri_pb_next(&r, &f)) > 0)
		;
	return rc;
}

int cri_run_pod_sandbox(struct cri_client *c, const struct cri_pod_spec *pod, char *id, size_t cap,
                        char *err, size_t errlen)
{
	uint8_t req[16384];
	struct text_out o = {id, cap};
	return unary(c, "RunPodSandbox", req,
	             cri_encode_run_pod_sandbox_request(req, sizeof req, pod), dec_id, &o, err,
	             errlen);
}

int cri_create_container(struct cri_client *c, const char *sandbox_id,
                         const struct cri_pod_spec *pod, const struct cri_container_spec *spec,
                         char *id, size_t cap, char *err, size_t errlen)
{
	uint8_t *req = malloc(CRI_REQUEST_MAX);
	if (req == NULL)
		return -ENOMEM;
	struct text_out o = {id, cap};
	int rc = unary(
	        c, "CreateContainer", req,
	        cri_encode_create_container_request(req, CRI_REQUEST_MAX, sandbox_id, pod, spec),
	        dec_id, &o, err, errlen);
	free(req);
	return rc;
}

static int by_id(struct cri_client *c, const char *method, const char *id, char *err, size_t errlen)
{
	uint8_t req[256];
	return unary(c, method, req, cri_encode_id_request(req, sizeof req, id), dec_empty, NULL,
	             err, errlen);
}

int cri_start_container(struct cri_client *c, const char *container_id, char *err, size_t errlen)
{
	return by_id(c, "StartContainer", container_id, err, errlen);
}

int cri_stop_container(struct cri_client *c, const char *container_id, int64_t timeout_s, char *err,
                       size_t errlen)
{
	uint8_t req[256];
	return unary(c, "StopContainer", req,
	             cri_encode_stop_container_request(req, sizeof req, container_id, timeout_s),
	             dec_empty, NULL, err, errlen);
}

int cri_remove_container(struct cri_client *c, const char *container_id, char *err, size_t errlen)
{
	return by_id(c, "RemoveContainer", container_id, err, errlen);
}

int cri_reopen_container_log(struct cri_client *c, const char *container_id, char *err,
                             size_t errlen)
{
	return by_id(c, "ReopenContainerLog", container_id, err, errlen);
}

int cri_stop_pod_sandbox(struct cri_client *c, const char *sandbox_id, char *err, size_t errlen)
{
	return by_id(c, "StopPodSandbox", sandbox_id, err, errlen);
}

int cri_remove_pod_sandbox(struct cri_client *c, const char *sandbox_id, char *err, size_t errlen)
{
	return by_id(c, "RemovePodSandbox", sandbox_id, err, errlen);
}
