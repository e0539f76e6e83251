/*
 * edgestream/edgestream.h — the edge side of the stream tunnel as a library, for edge agents
 * that embed it (the edgestream daemon is a thin wrapper over this API).
 *
 * An instance dials the cloud's tunnel (wss + mutual TLS, the cloud's certificate verified),
 * keeps it alive (pings, dead-peer detection, redial with exponential backoff and jitter,
 * certificate files re-read when they change), and serves the cloud's requests against the
 * local kubelet and allow-listed local ports. It owns one libwebsockets event loop and never
 * blocks it.
 *
 * Two ways to run it:
 *   - edgestream_start(): on a thread of its own; edgestream_stop() + edgestream_free() end it.
 *   - edgestream_service(): the host calls it in a loop of its own thread (each call waits at
 *     most the given time for events and handles them); edgestream_stop() makes it return 1.
 *
 * Thread rules: edgestream_stop(), edgestream_reload(), edgestream_reconfigure() and
 * edgestream_get_stats() may be called from any thread. Everything else from the thread that created the instance (or, for
 * edgestream_service, the one thread that drives it). Callbacks run on the loop thread; they
 * must not call edgestream_free().
 *
 * Configuration: the same option names as the daemon's flags (see FLAGS.md), set one by one or
 * from a JSON file.
 *
 * Errors are negative errno values; functions that take @err write a message there.
 */
#ifndef EDGESTREAM_EDGESTREAM_H
#define EDGESTREAM_EDGESTREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EDGESTREAM_VERSION "0.1.0"

struct edgestream;
struct edgestream_config;

/* edgestream_config_new() - every option at its default. 0 or -ENOMEM. */
int edgestream_config_new(struct edgestream_config **out);
/* edgestream_config_set() - set option @name (a daemon flag without "--") from text. Lists
 * append. 0, -ENOENT (no such option), -EINVAL (bad value; message in @err), -ENOMEM. */
int edgestream_config_set(struct edgestream_config *cfg, const char *name, const char *value,
                          char *err, size_t errlen);
/* edgestream_config_load_file() - apply a YAML (apiVersion cloudstream.io/v1alpha1, kind
 * EdgeStreamConfig) or JSON file of options (lists are replaced); see FLAGS.md. 0 or a
 * negative errno with the file, line and key in @err. */
int edgestream_config_load_file(struct edgestream_config *cfg, const char *path, char *err,
                                size_t errlen);
void edgestream_config_free(struct edgestream_config *cfg);

/*
 * edgestream_config_check() - what edgestream_new() would check, without starting anything:
 * the cloud and kubelet URLs, the certificate, key and CA files (readable, each key matching
 * its certificate), the node identity, the local ports, and that admin-listen is an address
 * of this host (its port may be in use: by a running instance, say). 0, or a negative errno
 * with every problem found in @err ("; " between them).
 */
int edgestream_config_check(const struct edgestream_config *cfg, char *err, size_t errlen);

struct edgestream_callbacks {
	/* The tunnel is up; @extended: our extensions were agreed (else the base protocol of an
	 * unmodified KubeEdge cloud). May be NULL. */
	void (*connected)(struct edgestream *es, const char *node, bool extended, void *user);
	/* The tunnel went down or a dial failed (@err negative errno, @reason text); a redial is
	 * scheduled after @retry_in_ms unless the instance is stopping. May be NULL. */
	void (*disconnected)(struct edgestream *es, int err, const char *reason,
	                     uint64_t retry_in_ms, void *user);
};

struct edgestream_stats {
	bool connected;
	bool extended;
	uint64_t dials_total;       /* attempts to reach the cloud */
	uint64_t connects_total;    /* tunnels that came up */
	uint64_t disconnects_total; /* tunnels that went down */
	uint64_t streams_open, streams_total;
	uint64_t streams_refused;  /* outside the allow-list, bad requests, limits */
	uint64_t backend_failures; /* unreachable, timed out, TLS refused */
	uint64_t bytes_to_cloud;   /* stream bytes */
	uint64_t bytes_from_cloud;
	uint64_t cert_reloads;  /* certificate files re-read after a change */
	uint64_t tunnel_pauses; /* base protocol: tunnel reading paused for a slow backend */
	/* Base protocol stream endings (stream/session.h): our REMOVE sent in answer to the
	 * cloud's, ours queued when the cloud's arrived, the cloud's repeats absorbed. */
	uint64_t removes_answered, removes_crossed, removes_repeated;
	uint64_t stall_cuts; /* base protocol: streams cut for keeping the tunnel paused */
	/* kubelet TLS handshakes that failed because it refused the session offered for resumption
	 * (the request went again with a full handshake; resumption stays off afterwards) */
	uint64_t kubelet_resumption_refused;
};

/*
 * edgestream_new() - check the configuration and certificate files, set up the loop. The
 * tunnel is dialled once it runs. @cb may be NULL; @cb and @user must outlive the instance.
 * The configuration is copied. 0, -EINVAL (message in @err), -ENOMEM.
 */
int edgestream_new(struct edgestream **out, const struct edgestream_config *cfg,
                   const struct edgestream_callbacks *cb, void *user, char *err, size_t errlen);

/* edgestream_start() - run the loop on a new thread. 0 or -errno. */
int edgestream_start(struct edgestream *es);

/* edgestream_service() - drive the loop from the host's thread: wait up to @timeout_ms for
 * events (0: do not wait; negative: until the next event or timer) and handle them. Returns 0,
 * or 1 once stopped (then call edgestream_free). */
int edgestream_service(struct edgestream *es, int timeout_ms);

/* edgestream_run() - drive the loop on the calling thread until edgestream_stop(). */
int edgestream_run(struct edgestream *es);

/*
 * edgestream_stop() - ask the loop to stop. Any thread; async. With the drain-timeout option
 * (10 s by default) the first call drains: new streams are refused, those in flight may finish
 * for that long, then the tunnel closes and the loop returns; a second call stops at once.
 * edgestream_free() stops at once too: wait for edgestream_stopped() first to let a drain run.
 */
void edgestream_stop(struct edgestream *es);

/* edgestream_stopped() - the loop has returned (the tunnel is closed). Any thread. */
bool edgestream_stopped(const struct edgestream *es);

/* edgestream_reload() - check the certificate files for changes now. Any thread; async. */
void edgestream_reload(struct edgestream *es);

/*
 * edgestream_reconfigure() - apply a new configuration (copied; the caller keeps @cfg). Any
 * thread; async, on the loop thread: options marked "applied on SIGHUP" in FLAGS.md take the
 * new value (timeouts, the access log, the certificate check interval); any other that changed
 * is logged as "needs a restart: NAME" and keeps its running value. The process-wide log level
 * and format are the caller's (st_log_set_level). 0 or -ENOMEM (nothing changes).
 */
int edgestream_reconfigure(struct edgestream *es, const struct edgestream_config *cfg);

/* edgestream_get_stats() - a snapshot of the counters. Any thread. */
void edgestream_get_stats(struct edgestream *es, struct edgestream_stats *out);

/* edgestream_free() - stop (joining the thread of edgestream_start) and free. NULL is fine. */
void edgestream_free(struct edgestream *es);

#ifdef __cplusplus
}
#endif

#endif /* EDGESTREAM_EDGESTREAM_H */
