/*
 * edgestream/src/es.h — the library's instance: one event loop (libwebsockets context), its
 * configuration, admin endpoints and counters, the backends' shared state (the kubelet's TLS
 * context and idle connections, the local-port allow-list, the CRI worker pool and inotify),
 * and its tunnels (tunnel.h), each carrying streams (relay.h) served by backends (backend.h).
 *
 * Who owns what: the instance owns its tunnels (es->tunnels, freed by edgestream_free); a
 * tunnel owns its session and its streams; a stream owns its queues, its backend state and its
 * backend connection (conn.h); an idle kubelet connection belongs to the instance's pool.
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
#include <stream/certreload.h>
#include <stream/clock.h>
#include <stream/drain.h>
#include <stream/heaptrim.h>
#include <stream/log.h>
#include <stream/hist.h>
#include <stream/session.h>
#include <stream/tunnelwrite.h>

#include "es_config.h"
#include "es_route.h"
#include "resolve.h"

#define ES_NODE_NAME_MAX  253u
#define ES_CRI_SOCKET_MAX 512u
#define ES_HOST_MAX       256u
#define ES_MAX_CLOUD_URLS 8u /* --cloud-url entries */

/* One --cloud-url entry: where a tunnel dials and the name the cloud's certificate must carry. */
struct es_cloud_url {
	char host[ES_HOST_MAX], path[ES_HOST_MAX], name[ES_HOST_MAX];
	int port;
};

struct edgestream_config {
	struct es_config c;
	edgestream_cert_cb cert_cb; /* edgestream_config_set_cert_hook(); NULL: none */
	void *cert_user;
	edgestream_log_cb log_cb; /* edgestream_config_set_log_hook(); NULL: process-wide */
	void *log_user;
};

struct es_tunnel;
struct es_conn;
struct h2c;
struct es_logs;

/* The most lws hands a raw socket's read callback at once (pt_serv_buf_size - LWS_PRE): a
 * backend's bulk answer comes in 64 KiB reads, four TLS records per loop round, so each tunnel
 * batch carries four DATA payloads instead of one (issue 12: one 16 KiB read per round cost a
 * round, a TLS record and a 10-byte trailer record per 16 KiB). */
#define ES_READ_BYTES (64u * 1024u)

struct edgestream {
	struct es_config cfg;
	struct st_session_totals session_totals; /* every tunnel session's, loop thread */
	struct st_budget budget; /* --process-buffer-bytes: every stream's window, loop thread */
	struct edgestream_callbacks cb;
	void *user;
	edgestream_cert_cb cert_cb; /* copied from the configuration at edgestream_new */
	void *cert_user;
	/* Where this instance's lines go, at its level and format (stream/log.h): every thread
	 * running its code is inside (loop, workers, the host's in edgestream_* calls). */
	struct st_log_scope log_scope;
	edgestream_log_cb log_cb; /* copied from the configuration at edgestream_new */
	void *log_user;
	lws_sorted_usec_list_t sul_cert_start; /* the hook's first event, once the loop runs */
	struct lws_context *ctx;
	struct st_loop *loop; /* the epoll loop under ctx (stream/loop.h) */
	struct lws_vhost *vh_client, *vh_admin;
	struct lws_protocols protocols[5];
	struct st_admin_ops admin_ops;
	SSL_CTX *
	        tunnel_ctx; /* the client vhost's: ours (tls.h es_tls_tunnel_ctx), freed after lws */
	char node[ES_NODE_NAME_MAX + 1];
	char internal_ip[64];
	/* The configured cloud (--cloud-url's first entry: joins and renewals go there); each
	 * tunnel keeps its own copy of where it dials. */
	char cloud_host[ES_HOST_MAX], cloud_path[ES_HOST_MAX], cloud_name[ES_HOST_MAX];
	int cloud_port;
	/* Every --cloud-url entry, tried in turn (tunnel_dial.c); urls[0] is the one above. */
	struct es_cloud_url urls[ES_MAX_CLOUD_URLS];
	size_t n_urls;
	/* Their host names, resolved on the worker pool (resolve.h), one cache per entry. */
	struct es_name cloud_dns[ES_MAX_CLOUD_URLS];
	/* Every tunnel of the instance: one, plus the one being retired while a draining cloud's
	 * RECONNECT moves the edge (at most two live; a retired one is kept as a spare). */
	struct es_tunnel *tunnels;
	struct st_certreload
	        *certs;           /* the tunnel certificate files (reload.c, stream/certreload.h) */
	bool certs_log_unchanged; /* the check under way was asked for: say if nothing changed */
	lws_sorted_usec_list_t sul_certs;
	/* --rotate-certificate (join.c) */
	lws_sorted_usec_list_t sul_rotate;
	bool renewing;           /* a renewal job runs */
	bool renew_swap_pending; /* its files are written; the next swap plans the next renewal */
	uint64_t cert_renewals, cert_renewal_failures;
	bool curl_global; /* curl_global_init for joins and renewals (cleaned up at free) */
	struct st_heap_trimmer heap_trimmer; /* free pages back to the kernel after bursts */
	bool ready_written; /* the ready file is written, or a worker is writing it (tunnel.c) */
	/* backends (backend.h) */
	SSL_CTX *kubelet_ctx; /* ours, for the kubelet leg (refcounted by live SSLs) */
	char kubelet_host[ES_HOST_MAX];
	int kubelet_port; /* 0: no kubelet backend */
	char kubelet_name[ES_HOST_MAX];
	char kubelet_host_header[300];
	struct es_name kubelet_dns; /* kubelet_host, resolved on the worker pool (resolve.h) */
	struct es_conn *idle;       /* kept kubelet connections, newest first (kubelet.c) */
	unsigned idle_count;
	struct h2c *h2conns;          /* HTTP/2 kubelet connections (h2conn.c) */
	int kubelet_h2;               /* ALPN's verdict: 0 not known yet, 1 h2, -1 HTTP/1.1 only */
	uint64_t h2_windows_grown;    /* times a bulk HTTP/2 stream's window grew (h2stream.c) */
	uint64_t h2_window_grown_now; /* bytes of window grown past the initial, streams open now */
	uint64_t h2_windows_shrunk;   /* times a grown window shrank (no longer bulk) */
	uint64_t h2_window_reserved_now; /* budget bytes held for grown windows, streams open */
	struct es_allow allow;           /* allow-listed local ports (local_port.c) */
	bool cri_enabled;        /* --cri-socket: exec/attach/portForward/logs go to the runtime */
	struct st_workq *wq;     /* CRI calls and log file reads (cri_stream.c, logs_read.c) */
	int inotify_fd;          /* containerLogs followers' watches; -1 until the first */
	struct lws *inotify_wsi; /* its adoption into the loop */
	struct es_logs *logs;    /* the containerLogs streams' states (logs.c) */
	/* loop-thread scratch, used within one callback */
	uint8_t *tx;                           /* LWS_PRE + one message or one TLS flight */
	struct st_tunnel_writer tunnel_writer; /* every tunnel's frames (stream/tunnelwrite.h) */
	uint8_t *scratch; /* plaintext from a backend (one read) and its body (body-only) */
	/* A backend's raw connect under way (rawsock.h): the connection inside lws's connect
	 * call, and the first failure its callbacks met meanwhile. */
	const void *connecting;
	bool connect_failed;
	char connect_error[400];
	/* cross-thread requests */
	atomic_uint stop_requests; /* edgestream_stop() calls: the first drains, a second stops */
	atomic_bool reload_requested, loop_done;
	/* edgestream_reconfigure(): a new configuration for the loop thread to apply. Whoever
	 * exchanges it out owns it (the loop applies and frees it; a newer one replaces it). */
	_Atomic(struct es_config *) pending_cfg;
	unsigned stop_requests_seen; /* loop thread */
	struct st_drain drain;       /* graceful stop (stream/drain.h), loop thread */
	lws_sorted_usec_list_t sul_drain;
	/* relay.c: quiet streams' queue reservations go back (armed while a stream holds one) */
	lws_sorted_usec_list_t sul_quiet;
	bool quiet_sweep_armed;
	bool stopped;
	pthread_t thread;
	bool thread_started;
	/* counters, over every tunnel; stats is the snapshot other threads read */
	struct edgestream_stats m;
	pthread_mutex_t stats_lock;
	struct edgestream_stats stats;
	/* Time from a stream's open to the first byte of its answer toward the cloud (the
	 * backend's, or our refusal), by request kind (st_kubelet_kind): loop thread. */
	struct st_hist ttfb[6];
};

/* embed.c: what the library does for an embedding host (edgestream.h "Process-wide state").
 * es_sigpipe_block() blocks SIGPIPE on the calling thread and says whether it was already;
 * es_sigpipe_restore() consumes a SIGPIPE raised meanwhile, then unblocks it unless it was
 * blocked before. */
bool es_sigpipe_block(void);
void es_sigpipe_restore(bool was_blocked);
/* The certificate hook's event for the tunnel certificate in use (@result 0) or a set of
 * files that did not load (@result < 0, @reason). Loop thread; nothing without a hook. */
void es_cert_event(struct edgestream *es, int result, const char *reason);
/* embed.c: the instance's log scope from @cfg (level, format, hook), before any thread enters. */
void es_log_scope_init(struct edgestream *es, const struct edgestream_config *cfg);

/* ---- internal to the instance: lib.c's steps in lib_config.c and lib_loop.c ---- */
/* lib_config.c: a deep copy of @src into @dst through the option table (the caller may free
 * its configuration). 0, or <0 with the reason in @err. */
int es__config_copy(struct es_config *dst, const struct es_config *src, char *err, size_t errlen);
/* lib_config.c: the checks at start (cloud URLs, credentials, identity, allow-list, kubelet)
 * into @es; may join (blocking). 0, or <0 with the reason in @err. */
int es__check_config(struct edgestream *es, char *err, size_t errlen);
/* lib_loop.c: the lws context and its vhosts (tunnel client, admin). 0, or <0 with @err. */
int es__create_loop(struct edgestream *es, char *err, size_t errlen);
/* lib_loop.c: what other threads asked for (configuration, reload, stop). Loop thread. */
void es__handle_requests(struct edgestream *es);

/* lib_config.c */
/* es_parse_cloud_urls() - --cloud-url: one URL or several separated by commas (at most
 * ES_MAX_CLOUD_URLS), each wss://HOST[:PORT][/PATH], into es->urls and es->cloud_* (the first);
 * @server_name (may be NULL or "") names every URL's certificate, else its host. 0 or -EINVAL
 * with the reason in @err. */
int es_parse_cloud_urls(struct edgestream *es, const char *value, const char *server_name,
                        char *err, size_t errlen);
/* stats.c: the admin endpoints' /metrics and /readyz (stream/admin.h ops). */
struct st_text;
void es_render_metrics(struct st_text *t, void *user);
bool es_ready(void *user, const char **why);
/* GET /tunnels and GET /streams on the admin port (stream/admin.h action). */
int es_admin_action(void *user, const char *method, size_t mlen, const char *path, size_t plen,
                    const char *query, size_t qlen, char *out, size_t cap, size_t *out_len);
/* lib_loop.c */
/* es_maybe_finish_drain() - while draining, close the tunnels once no stream is left (or at the
 * deadline). Loop thread; call when a stream ends. */
void es_maybe_finish_drain(struct edgestream *es);
/* stats.c */
void es_publish_stats(struct edgestream *es);

/* reload.c: the tunnel certificate files, checked every --cert-check-interval and on demand. */
void es_certs_check(struct edgestream *es, bool log_unchanged);
/* Take the files' stamps and start their check timer: 0 or -errno (start-up fails). */
int es_certs_start(struct edgestream *es);
/* The check timer again, from now, at the (new) --cert-check-interval. Loop thread. */
void es_certs_reschedule(struct edgestream *es);
/* Stop checking; before the worker pool... after it is freed (its jobs are dropped). */
void es_certs_stop(struct edgestream *es);
/* The certificate's expiry for /metrics (edgestream_certificate_expiry_seconds). */
struct st_text;
void es_certs_render_metrics(struct edgestream *es, struct st_text *t);

/* join.c: --join-token at start (blocking: before the loop), and --rotate-certificate. */
int es_join_bootstrap(struct edgestream *es, char *err, size_t errlen);
/* Schedule the next renewal at two thirds of the current certificate's lifetime (loop). */
void es_rotate_plan(struct edgestream *es);
void es_rotate_stop(struct edgestream *es);

#endif /* EDGESTREAM_ES_H */
