/*
 * cri/client.h — a blocking CRI runtime.v1 client over the runtime's unix socket: gRPC unary
 * calls on HTTP/2 with prior knowledge, through libcurl (its unix-socket and HTTP/2 options;
 * nghttp2 underneath). Why libcurl: it already does HTTP/2 framing, HPACK, flow control and
 * timeouts well, and the daemons link it anyway; a call is a dozen options.
 *
 * Blocking: call it from a worker (stream/workq.h), never from the event loop. One client per
 * thread; the functions are not thread-safe on one client. Each call opens its own connection
 * (see client.c). Errors are negative errno values with a message in @err: the runtime's
 * grpc-message for call failures (-ENOENT for NOT_FOUND, -ETIMEDOUT, ... see cri_grpc_errno),
 * the transport's reason otherwise (-ECONNREFUSED: no runtime on that socket).
 */
#ifndef CRI_CLIENT_H
#define CRI_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include <cri/messages.h>

struct cri_client;

/* cri_client_new() - for the runtime at @socket_path (a path, or "unix://" + path); each call
 * times out after @timeout_ms. 0, -EINVAL, -ENOMEM. */
int cri_client_new(struct cri_client **out, const char *socket_path, uint64_t timeout_ms);
void cri_client_free(struct cri_client *c);

/*
 * cri_call() - one unary call of @method ("Version", "Exec", ... of runtime.v1.RuntimeService)
 * with the encoded request; the response message (without the gRPC prefix) is put in *@resp
 * (malloc'd, free it) and *@resp_len. On a non-OK grpc-status *@grpc_code is set (else 0).
 */
int cri_call(struct cri_client *c, const char *method, const uint8_t *req, size_t req_len,
             uint8_t **resp, size_t *resp_len, int *grpc_code, char *err, size_t errlen);

int cri_version(struct cri_client *c, struct cri_version *out, char *err, size_t errlen);
int cri_list_sandboxes(struct cri_client *c, const struct cri_label *labels, size_t nlabels,
                       int state, struct cri_sandbox *out, size_t max, size_t *n, char *err,
                       size_t errlen);
int cri_list_containers(struct cri_client *c, const char *sandbox_id,
                        const struct cri_label *labels, size_t nlabels, int state,
                        struct cri_container *out, size_t max, size_t *n, char *err, size_t errlen);
int cri_container_status(struct cri_client *c, const char *container_id,
                         struct cri_container_status *out, char *err, size_t errlen);
/* Streaming URLs: single-use, valid one minute; fetch one per request. */
int cri_exec_url(struct cri_client *c, const char *container_id, const char *const *cmd,
                 size_t ncmd, bool tty, bool in, bool out_, bool err_stream, char *url, size_t cap,
                 char *err, size_t errlen);
int cri_attach_url(struct cri_client *c, const char *container_id, bool in, bool tty, bool out_,
                   bool err_stream, char *url, size_t cap, char *err, size_t errlen);
int cri_port_forward_url(struct cri_client *c, const char *sandbox_id, const int32_t *ports,
                         size_t nports, char *url, size_t cap, char *err, size_t errlen);

/* Pod life cycle (the CLI and the tests make real pods with these). */
int cri_run_pod_sandbox(struct cri_client *c, const struct cri_pod_spec *pod, char *id, size_t cap,
                        char *err, size_t errlen);
int cri_create_container(struct cri_client *c, const char *sandbox_id,
                         const struct cri_pod_spec *pod, const struct cri_container_spec *spec,
                         char *id, size_t cap, char *err, size_t errlen);
int cri_start_container(struct cri_client *c, const char *container_id, char *err, size_t errlen);
int cri_stop_container(struct cri_client *c, const char *container_id, int64_t timeout_s, char *err,
                       size_t errlen);
int cri_remove_container(struct cri_client *c, const char *container_id, char *err, size_t errlen);
/* ReopenContainerLog: the runtime reopens the container's log file at its path (what the
 * kubelet calls after renaming a file it rotates). */
int cri_reopen_container_log(struct cri_client *c, const char *container_id, char *err,
                             size_t errlen);
int cri_stop_pod_sandbox(struct cri_client *c, const char *sandbox_id, char *err, size_t errlen);
int cri_remove_pod_sandbox(struct cri_client *c, const char *sandbox_id, char *err, size_t errlen);

#endif /* CRI_CLIENT_H */
