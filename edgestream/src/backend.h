/*
 * edgestream/src/backend.h — what serves a stream: one interface, four backends.
 *
 * The relay (relay.h) routes each stream the cloud opens (es_route.h) and hands it to a
 * backend through this ops table; from then on it calls the backend only through it, and the
 * backend answers through the relay's functions (es_stream_to_cloud, es_stream_sent,
 * es_stream_fail, es_stream_backend_done). A backend never touches the tunnel.
 *
 *   kubelet      kubelet.c     HTTPS to --kubelet-url over a backend connection (conn.h),
 *                              kept-alive connections in an idle pool, TLS resumption fallback
 *   local port   local_port.c  plain HTTP or TCP to an allow-listed 127.0.0.1 port
 *   CRI stream   cri_stream.c  exec/attach/portForward: the runtime's streaming URL (a worker
 *                              job), then plain HTTP to it over a backend connection
 *   CRI logs     logs.c        containerLogs answered from the runtime's log files (worker
 *                              jobs: logs_read.c, inotify: logs_follow.c), no connection
 *
 * The three connection-based backends share conn.h's write/on_writable/close; each has its
 * own open and describe, and the kubelet adds retry and keep. Loop thread only.
 */
#ifndef EDGESTREAM_BACKEND_H
#define EDGESTREAM_BACKEND_H

#include <stdbool.h>
#include <stddef.h>

#include <stream/connect.h>

struct es_stream;

/* Why a connection ended before anything of its answer came back (retry). */
enum es_retry_why {
	ES_RETRY_KEPT_CLOSED = 0, /* a kept connection was closed by the peer before answering */
	ES_RETRY_TLS_REFUSED,     /* the TLS handshake failed with a fatal alert from the peer */
};

struct es_backend_ops {
	const char *name; /* for logs: "kubelet", "local port", "CRI stream", "CRI logs" */
	/*
	 * Memory toward the cloud (relay.c): @to_cloud_burst, the most the backend hands over at
	 * once past to_cloud's high mark (what it had in hand when told to pause): the stream's
	 * to_cloud cap is the high mark plus the burst, and what it holds is charged to
	 * --process-buffer-bytes while held; @own_bytes, a buffer of its own that can be full at
	 * the same time, reserved from that budget when the stream opens.
	 */
	size_t to_cloud_burst;
	size_t own_bytes;
	/*
	 * Serve @st (st->type says what; st->port where, for a local port). @req is the decoded
	 * connect request (NULL for TCP_CONNECT); the backend may take its contents (then it
	 * leaves *req zeroed), the relay frees what is left. @path, @path_len: the path the route gives
	 * the backend (a view into @req, valid during the call). Returns 0 when the stream goes
	 * on (the backend answers or fails it later), -1 when it failed it (it may be gone); the
	 * relay does not touch @st after the call either way.
	 */
	int (*open)(struct es_stream *st, struct st_connect_req *req, const char *path,
	            size_t path_len);
	/* New bytes wait in st->to_backend, or the cloud half-closed (st->cloud_half_closed). */
	void (*write)(struct es_stream *st);
	/* st->to_cloud drained to its low mark: produce more (resume a paused source). */
	void (*on_writable)(struct es_stream *st);
	/* The stream is being freed: release everything of the backend's (st->be, st->conn).
	 * Called once; nothing of the backend may refer to @st afterwards. */
	void (*close)(struct es_stream *st);
	/* Names the backend for messages, e.g. "kubelet 127.0.0.1:10250". */
	void (*describe)(const struct es_stream *st, char *buf, size_t cap);
	/* Optional (connection backends): the connection ended for @why before anything came
	 * back and nothing of the cloud's body went; true when the backend went on with a new
	 * connection (st->conn replaced). */
	bool (*retry)(struct es_stream *st, enum es_retry_why why);
	/* Optional: the answer on a kept-alive connection is complete and the connection may
	 * carry another request; true when the backend took st->conn (st->conn is NULL then). */
	bool (*keep)(struct es_stream *st);
};

extern const struct es_backend_ops es_backend_kubelet;
extern const struct es_backend_ops es_backend_local_port;
extern const struct es_backend_ops es_backend_cri_stream;
extern const struct es_backend_ops es_backend_cri_logs;

/* ---- what the backends keep per instance ----------------------------------------------- */

struct edgestream;
struct cri_client;
struct es_cri_plan;

/* kubelet.c: a kubelet request over an HTTP/1.1 connection (what kubelet_open does when the
 * request does not go HTTP/2, h2conn.h); returns as ops->open. */
int es_kubelet_open_h1(struct es_stream *st, struct st_connect_req *req, const char *path,
                       size_t path_len);

/* kubelet.c: close every idle kubelet connection, HTTP/2 ones too (the instance is going). */
void es_kubelet_pool_free(struct edgestream *es);

/* es_kubelet_setup() - the kubelet backend from --kubelet-url (set): https with our client
 * certificate, or plain http to a loopback IP (KubeEdge edged's read-only port; kubelet_url.h).
 * Start-up only. Returns 0, or a negative errno with the reason in @err. */
int es_kubelet_setup(struct edgestream *es, char *err, size_t errlen);

/* cri_stream.c: the plan for a CRI request (cri_plan.h) into @plan, or the stream is failed
 * with the kubelet's answer (counted as refused): 0, or -1 when @st is gone. */
int es_cri_plan_for(struct es_stream *st, const struct st_connect_req *req,
                    struct es_cri_plan *plan);
/* cri_stream.c, on a worker: the newest sandbox of the plan's pod (READY ones only when
 * @ready_only) into @id, or -ENOENT with the reason in @err. */
int es_cri_find_sandbox(struct cri_client *c, const struct es_cri_plan *p, bool ready_only,
                        char *id, size_t cap, char *err, size_t errlen);

/* logs_follow.c: the shared inotify descriptor of the followers is readable, or was closed. */
void es_logs_on_inotify(struct edgestream *es);
void es_logs_on_inotify_closed(struct edgestream *es);

#endif /* EDGESTREAM_BACKEND_H */
