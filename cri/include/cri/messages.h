/*
 * cri/messages.h — the CRI runtime.v1 requests the edge sends and the responses it reads
 * (spec: ../shared/spec/cri-streaming.md §2, field numbers from cri-api's api.proto). Pure.
 *
 * Encoders write a protobuf message into a caller's buffer and return its length or -EMSGSIZE.
 * Decoders copy what the edge needs into bounded structs: a string that does not fit, a NUL in a
 * string or malformed protobuf is -EBADMSG / -EMSGSIZE, never a truncated value.
 */
#ifndef CRI_MESSAGES_H
#define CRI_MESSAGES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CRI_ID_MAX       128u  /* container and sandbox ids (containerd: 64 hex) */
#define CRI_NAME_MAX     253u  /* DNS-1123 names */
#define CRI_URL_MAX      2048u /* streaming server URLs */
#define CRI_PATH_MAX     4096u /* log paths */
#define CRI_TEXT_MAX     256u  /* versions, reasons */
#define CRI_MAX_LABELS   8u
#define CRI_MAX_CMD_ARGS 1024u

/* Labels the kubelet puts on what it creates (kubelet pkg/types/labels.go). */
#define CRI_LABEL_POD_NAME       "io.kubernetes.pod.name"
#define CRI_LABEL_POD_NAMESPACE  "io.kubernetes.pod.namespace"
#define CRI_LABEL_POD_UID        "io.kubernetes.pod.uid"
#define CRI_LABEL_CONTAINER_NAME "io.kubernetes.container.name"

enum cri_container_state {
	CRI_CONTAINER_CREATED = 0,
	CRI_CONTAINER_RUNNING = 1,
	CRI_CONTAINER_EXITED = 2,
	CRI_CONTAINER_UNKNOWN = 3,
};

enum cri_sandbox_state {
	CRI_SANDBOX_READY = 0,
	CRI_SANDBOX_NOTREADY = 1,
};

struct cri_label {
	const char *key, *value;
};

/* ---- requests --------------------------------------------------------------------------- */

ssize_t cri_encode_version_request(uint8_t *out, size_t cap, const char *version);
ssize_t cri_encode_exec_request(uint8_t *out, size_t cap, const char *container_id,
                                const char *const *cmd, size_t ncmd, bool tty, bool in, bool out_,
                                bool err);
ssize_t cri_encode_attach_request(uint8_t *out, size_t cap, const char *container_id, bool in,
                                  bool tty, bool out_, bool err);
ssize_t cri_encode_port_forward_request(uint8_t *out, size_t cap, const char *sandbox_id,
                                        const int32_t *ports, size_t nports);
/* @state: a sandbox state to match, or -1 for any. */
ssize_t cri_encode_list_pod_sandbox_request(uint8_t *out, size_t cap,
                                            const struct cri_label *labels, size_t nlabels,
                                            int state);
/* @sandbox_id may be NULL; @state: a container state to match, or -1 for any. */
ssize_t cri_encode_list_containers_request(uint8_t *out, size_t cap, const char *sandbox_id,
                                           const struct cri_label *labels, size_t nlabels,
                                           int state);
ssize_t cri_encode_container_status_request(uint8_t *out, size_t cap, const char *container_id);

/* A pod for RunPodSandbox and CreateContainer's sandbox_config (the CLI and the tests create
 * real pods with it). Host network only: such sandboxes need no CNI, and must have no hostname. */
struct cri_pod_spec {
	const char *name, *uid, *namespace_;
	const char *log_directory; /* absolute; created beforehand */
};

struct cri_container_spec {
	const char *name, *image;
	const char *const *command; /* entrypoint override; may be NULL */
	size_t ncommand;
	const char *const *args;
	size_t nargs;
	const char *log_path; /* relative to the pod's log_directory, e.g. "app/0.log" */
	uint32_t attempt;     /* restart count: the kubelet's <attempt>.log, `logs --previous` */
	bool stdin_, stdin_once, tty;
};

ssize_t cri_encode_run_pod_sandbox_request(uint8_t *out, size_t cap,
                                           const struct cri_pod_spec *pod);
ssize_t cri_encode_create_container_request(uint8_t *out, size_t cap, const char *sandbox_id,
                                            const struct cri_pod_spec *pod,
                                            const struct cri_container_spec *c);
/* { string id = 1; } requests: StartContainer, RemoveContainer, StopPodSandbox,
 * RemovePodSandbox, ContainerStatus, ReopenContainerLog. */
ssize_t cri_encode_id_request(uint8_t *out, size_t cap, const char *id);
ssize_t cri_encode_stop_container_request(uint8_t *out, size_t cap, const char *container_id,
                                          int64_t timeout_s);

/* ---- responses -------------------------------------------------------------------------- */

/* RunPodSandboxResponse, CreateContainerResponse: { string id = 1; }. -ENODATA when empty. */
int cri_decode_id_response(const uint8_t *p, size_t len, char *id, size_t cap);

struct cri_version {
	char version[CRI_TEXT_MAX], runtime_name[CRI_TEXT_MAX], runtime_version[CRI_TEXT_MAX],
	        runtime_api_version[CRI_TEXT_MAX];
};

struct cri_sandbox {
	char id[CRI_ID_MAX + 1];
	char name[CRI_NAME_MAX + 1], uid[CRI_ID_MAX + 1], namespace_[CRI_NAME_MAX + 1];
	uint32_t attempt;
	int state; /* enum cri_sandbox_state (absent = READY) */
	int64_t created_at;
};

struct cri_container {
	char id[CRI_ID_MAX + 1], sandbox_id[CRI_ID_MAX + 1];
	char name[CRI_NAME_MAX + 1];
	uint32_t attempt;
	int state; /* enum cri_container_state (absent = CREATED) */
	int64_t created_at;
};

struct cri_container_status {
	char id[CRI_ID_MAX + 1];
	char name[CRI_NAME_MAX + 1];
	uint32_t attempt;
	int state;
	int64_t created_at, started_at, finished_at; /* unix ns */
	int32_t exit_code;
	char reason[CRI_TEXT_MAX];
	char log_path[CRI_PATH_MAX];
};

/* ExecResponse, AttachResponse, PortForwardResponse: { string url = 1; }. An empty URL is
 * -ENODATA (the kubelet calls it "URL is not set"). */
int cri_decode_url_response(const uint8_t *p, size_t len, char *url, size_t cap);
int cri_decode_version_response(const uint8_t *p, size_t len, struct cri_version *out);
/* Up to @max items; more are counted in *@total but not stored. */
int cri_decode_list_pod_sandbox_response(const uint8_t *p, size_t len, struct cri_sandbox *out,
                                         size_t max, size_t *n, size_t *total);
int cri_decode_list_containers_response(const uint8_t *p, size_t len, struct cri_container *out,
                                        size_t max, size_t *n, size_t *total);
int cri_decode_container_status_response(const uint8_t *p, size_t len,
                                         struct cri_container_status *out);

#endif /* CRI_MESSAGES_H */
