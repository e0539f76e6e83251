/*
 * edgestream/src/es.h — the library's private types: the instance (one event loop), its tunnel
 * (one websocket to the cloud, redialled forever) and a stream (one cloud request and the backend
 * connection serving it).
 *
 * Everything here belongs to the loop thread, except the fields marked atomic (requests from
 * other threads) and the stats snapshot (under stats_lock).
 */
#ifndef EDGESTREAM_ES_H
#define EDGESTREAM_ES_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libwebsockets.h>
#include <openssl/ssl.h>

#include <edgestream/edgestream.h>
#include <stream/admin.h>
#include <stream/buf.h>
#include <stream/liveness.h>
#include <stream/connect.h>
#include <stream/reasm.h>
#include <stream/session.h>

#include "answer.h"
#include "backoff.h"
#include "es_config.h"
#include "es_route.h"
#include "tls.h"

#define ES_NODE_NAME_MAX  253u
#define ES_CRI_SOCKET_MAX 512u

struct edgestream_config {
	struct es_config c;
};

/* Certificate files and when they last changed (for reloads). */
struct es_file_stamp {
	int64_t mtime_ns;
	int64_t size;
	uint64_t ino;
};

struct es_stream;
struct es_logs;

/* A kubelet connection kept between plain HTTP requests (stream.c). */
struct es_idle_conn {
	struct es_idle_conn *next, *prev;
	struct edgestream *es;
	struct lws *wsi;
	struct es_tls tls;
	lws_sorted_usec_list_t sul_idle;
};
struct es_cri_plan;
struct cri_client;

struct edgestream {
	struct es_config cfg;
	struct st_session_totals session_totals; /* every tunnel session's, loop thread */
	struct edgestream_callbacks cb;
	void *user;
	struct lws_context *ctx;
	struct lws_vhost *vh_client, *vh_admin;
	struct st_admin_ops admin_ops;
	SSL_CTX *tunnel_ctx;  /* the client vhost's, captured at its creation */
	SSL_CTX *kubelet_ctx; /* ours, for the kubelet leg (refcounted by live SSLs) */
	struct es_allow allow;
	bool cri_enabled; /* --cri-socket: exec/attach/portForward go to the runtime */
	struct st_workq *wq;
	int inotify_fd;          /* containerLogs followers' watches; -1 until the first */
	struct lws *inotify_wsi; /* its adoption into the loop */
	uint64_t next_stream_serial;
	char cloud_host[256], cloud_path[256];
	int cloud_port;
	char cloud_name[256]; /* what the cloud's certificate must name */
	char kubelet_host[256];
	int kubelet_port;
	char kubelet_name[256];
	char kubelet_host_header[300];
	char node[ES_NODE_NAME_MAX + 1];
	char internal_ip[64];
	struct es_file_stamp stamps[3]; /* tunnel cert, key, CA */
	/* the tunnel */
	struct lws *wsi;
	struct st_session *sess;
	uint32_t caps;
	bool extended, connected, dialing;
	struct st_reasm rx; /* reassembly of a fragmented message */
	bool want_ping;
	bool rx_paused;            /* base protocol: tunnel reading paused */
	unsigned blocking_streams; /* base protocol: streams whose backend queue is over the mark */
	struct st_liveness live;   /* any frame received counts; paused = our silence */
	uint64_t connected_ms;
	char close_reason[256]; /* why we are closing the tunnel, for the log and callback */
	int close_err;
	struct es_backoff backoff;
	lws_sorted_usec_list_t sul_dial, sul_ping, sul_stable, sul_certs, sul_service;
	struct lws_protocols protocols[4];
	struct es_stream *streams; /* list of live streams */
	struct es_idle_conn *idle; /* kept kubelet connections, newest first */
	unsigned idle_count;
	uint8_t *tx;      /* LWS_PRE + one message or one TLS flight */
	uint8_t *scratch; /* plaintext from a backend (one read) */
	bool ready_written;
	/* cross-thread requests */
	atomic_bool stop_requested, reload_requested;
	bool stopped;
	pthread_t thread;
	bool thread_started;
	/* counters; stats is the snapshot other threads read */
	struct edgestream_stats m;
	pthread_mutex_t stats_lock;
	struct edgestream_stats stats;
};

enum es_stream_state {
	ES_STREAM_DIALING = 0,  /* backend TCP connect under way */
	ES_STREAM_HANDSHAKE,    /* TLS handshake with the kubelet */
	ES_STREAM_RELAYING,     /* bytes flow both ways */
	ES_STREAM_BACKEND_DONE, /* the backend closed; queued bytes still go to the cloud */
};

struct es_stream {
	struct edgestream *es;
	struct es_stream *next, *prev;
	uint64_t id;
	uint64_t type; /* connect type */
	enum es_stream_state state;
	struct es_target target;
	struct lws *wsi; /* backend connection; NULL once closed */
	bool use_tls;
	struct es_tls tls;
	struct st_buf to_backend; /* plaintext: the request head, then the cloud's DATA */
	uint8_t *head; /* the request head for the backend, sent before the cloud's bytes */
	size_t head_len, head_off;
	struct st_connect_req req; /* CRI: kept until the runtime's URL is known */
	bool cri_pending;          /* a runtime call is under way for it */
	char dial_host[256];
	int dial_port;
	uint64_t serial; /* unique in the process: a finished worker job finds its stream by it */
	struct st_buf to_cloud; /* backend bytes the session could not take yet */
	bool body_only;         /* base-protocol LOGS/METRIC: relay the body only */
	struct es_body_only bo; /* the response's framing (and its body for body_only) */
	bool keep_alive;        /* the kubelet connection may serve the next request */
	bool reused;            /* it came from the idle pool */
	bool full_handshake;    /* redialled after the kubelet refused resumption: no second time */
	bool body_sent;         /* some of the cloud's bytes reached the backend */
	bool backend_paused;    /* lws_rx_flow_control(wsi, 0) for a full to_cloud */
	bool blocking;          /* counted in es->blocking_streams */
	lws_sorted_usec_list_t sul_stall; /* armed while blocking: cut when it fires */
	bool cloud_closed;                /* REMOVE/ERROR from the cloud: tear down */
	bool cloud_half_closed;
	bool shut_wr_sent;
	bool answered; /* some answer byte went toward the cloud */
	bool kill_backend;
	lws_sorted_usec_list_t sul_timeout;
	uint64_t started_ms;
	struct es_logs *logs; /* containerLogs from the runtime's files (logs.c) */
};

/* lib.c */
uint64_t es_now_ms(void);
void es_publish_stats(struct edgestream *es);

/* tunnel.c */
extern const struct lws_protocols es_tunnel_protocol;
void es_tunnel_schedule_dial(struct edgestream *es, uint64_t delay_ms);
void es_tunnel_kick(struct edgestream *es);
void es_tunnel_update_rx(struct edgestream *es);
void es_tunnel_close(struct edgestream *es, int err, const char *why);
void es_certs_check(struct edgestream *es, bool log_unchanged);
/* Take the certificate files' stamps, start their check timer and the first dial. */
void es_tunnel_start_timers(struct edgestream *es);

/* stream.c */
extern const struct lws_protocols es_backend_protocol;
int es_stream_open(struct edgestream *es, uint64_t id, uint64_t type, const uint8_t *payload,
                   size_t len);
int es_stream_on_data(struct es_stream *st, const uint8_t *p, size_t len);
void es_stream_on_half_close(struct es_stream *st);
void es_stream_on_cloud_close(struct es_stream *st, uint64_t code, const char *reason,
                              size_t reason_len);
void es_stream_on_writable(struct es_stream *st);
void es_stream_tunnel_gone(struct es_stream *st);
void es_idle_free_all(struct edgestream *es); /* before the context goes */
/* For the backends that answer from the edge itself (logs.c). */
int es_stream_to_cloud(struct es_stream *st, const uint8_t *p, size_t n); /* -1: stream gone */
void es_stream_fail(struct es_stream *st, uint64_t code, const char *reason);
void es_stream_backend_done(struct es_stream *st); /* REMOVE once the queue is out */
/* The newest sandbox of the plan's pod (READY ones only when @ready_only), or -ENOENT. For
 * workers. */
int es_cri_find_sandbox(struct cri_client *c, const struct es_cri_plan *p, bool ready_only,
                        char *id, size_t cap, char *err, size_t errlen);

/* logs.c */
void es_logs_start(struct es_stream *st, const struct es_cri_plan *plan);
void es_logs_stream_gone(struct es_stream *st);
void es_logs_on_drained(struct es_stream *st);
void es_logs_on_inotify(struct edgestream *es);
void es_logs_on_inotify_closed(struct edgestream *es);

#endif /* EDGESTREAM_ES_H */
