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
 * from a JSON file. Embedded, the admin port is off unless admin-listen is set (the daemon's
 * default, 127.0.0.1:10354, is the daemon's).
 *
 * Process-wide state (what an embedding agent shares with the library; everything else is per
 * instance):
 *   - the default log level, format and hook (edgestream_set_log_*): for instances without a
 *     hook of their own and lines outside any instance (each instance logs at its
 *     configuration's level and format, to its own hook when it has one);
 *   - libwebsockets' own log level (errors and warnings, through that logger), OpenSSL's and
 *     libcurl's global initialisation (curl_global_init when the CRI backend is on);
 *   - no signal handler is installed and the host's signal dispositions are kept. libwebsockets
 *     sets SIGPIPE to SIG_IGN for the whole process when a context is created; edgestream_new()
 *     puts back the disposition the host had. Instead, SIGPIPE is blocked on the threads the
 *     library runs on (its loop thread with edgestream_start, its worker threads, and the
 *     host's thread for the duration of edgestream_new, _service, _run and _free), so a write
 *     to a connection the peer closed fails with EPIPE there and the host never sees the
 *     signal (a SIGPIPE raised on such a thread meanwhile is consumed before the mask is put
 *     back). The host's callbacks run on those threads under the same mask.
 *
 * ABI: struct edgestream_stats and struct edgestream_cert_event only ever grow at their end
 * (edgestream_get_stats_sized() copies what the caller's size holds); struct
 * edgestream_callbacks is frozen, new hooks come as setters.
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

/* edgestream_config_new() - every option at its default, admin-listen empty (no admin port
 * unless asked for). 0 or -ENOMEM. */
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

/*
 * The counters of an instance. Versioned by size: fields are only ever appended, never removed
 * or reordered; read them with edgestream_get_stats() (the macro passes the size the caller was
 * compiled with).
 */
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
	/* A draining cloud replica asked the edge to move (RECONNECT), and tunnels closed after
	 * their successor was up (make before break). */
	uint64_t reconnects_asked, tunnels_retired;
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

/*
 * edgestream_get_stats_sized() - a snapshot of the counters into @out, @out_size bytes (the
 * caller's sizeof(struct edgestream_stats)): a caller built against an older header gets the
 * fields it knows, one built against a newer one gets ours and zeroes for the rest. Returns the
 * bytes the library filled (min(@out_size, its own size)). Any thread.
 */
size_t edgestream_get_stats_sized(struct edgestream *es, struct edgestream_stats *out,
                                  size_t out_size);
/* edgestream_get_stats() - the same with the size of the struct the caller sees. */
#define edgestream_get_stats(es, out) edgestream_get_stats_sized((es), (out), sizeof *(out))

/* ---- hooks for an embedding agent ----------------------------------------------------------- */

/* Log levels (lines above the level set are not made at all). */
enum edgestream_log_level {
	EDGESTREAM_LOG_ERROR = 0,
	EDGESTREAM_LOG_WARN = 1,
	EDGESTREAM_LOG_INFO = 2,
	EDGESTREAM_LOG_DEBUG = 3,
};

/*
 * A log line of the library (@line: NUL-terminated, no trailing newline, at most 1 KiB; in the
 * format set, text or JSON; with node= and stream= where they apply; borrowed for the call).
 * Called on whichever thread logs (the loop thread, a worker, the host's inside an edgestream_*
 * call), possibly on several at once: it must be thread-safe, quick, and not call edgestream_*.
 */
typedef void (*edgestream_log_cb)(enum edgestream_log_level level, const char *line, void *user);

/*
 * Each instance logs at the level and in the format of its configuration (`log-level`,
 * `log-format`; edgestream_reconfigure changes them), to its own hook when its configuration
 * has one (edgestream_config_set_log_hook), else to the process-wide hook, else to stderr: two
 * instances in one agent keep their lines apart. The lines of every thread that runs the
 * instance's code count: its loop, its workers, and the host's thread inside an edgestream_*
 * call on it.
 *
 * edgestream_config_set_log_hook() - the hook of the instances made from @cfg, taken at
 * edgestream_new(). @cb NULL: none (the process-wide hook or stderr). 0, or -EINVAL.
 */
int edgestream_config_set_log_hook(struct edgestream_config *cfg, edgestream_log_cb cb, void *user);
/*
 * edgestream_set_log_hook() - the process-wide hook: lines of instances without their own
 * hook, and lines logged outside any instance; NULL puts stderr back. Call it before creating
 * instances or while none runs (it is not synchronised with lines being written).
 */
void edgestream_set_log_hook(edgestream_log_cb cb, void *user);
/* edgestream_set_log_level() - the level of lines logged outside any instance; default
 * EDGESTREAM_LOG_INFO. Any thread. (An instance's is its configuration's `log-level`.) */
void edgestream_set_log_level(enum edgestream_log_level level);
/* edgestream_set_log_json() - the format of lines logged outside any instance: JSON objects
 * (true) or text (false, the default). Any thread. */
void edgestream_set_log_json(bool json);

/*
 * What the certificate hook reports: the tunnel certificate the instance presents now. Fields
 * are only ever appended (a hook built against an older header reads the ones it knows).
 */
struct edgestream_cert_event {
	/* 0: the files are in use: at start, or a reload swapped in changed files (the next
	 * handshake presents them). < 0 (-errno): changed files did not load (a key that does not
	 * match, a half-written file); the previous certificate stays in use and the check is
	 * retried at the next interval or edgestream_reload(). */
	int result;
	const char *reason; /* result < 0: why; else NULL. Borrowed for the call. */
	const char *path;   /* the tunnel-cert file. Borrowed for the call. */
	int64_t not_before; /* the certificate in use now (after this event), unix seconds; */
	int64_t not_after;  /* 0 when unknown */
};

typedef void (*edgestream_cert_cb)(struct edgestream *es, const struct edgestream_cert_event *ev,
                                   void *user);

/*
 * edgestream_config_set_cert_hook() - call @cb (with @user) on the loop thread of the instances
 * made from @cfg: once when the loop first runs (the certificate in use at start), then after
 * every reload of the tunnel certificate files that found them changed (result 0) or could not
 * use them (result < 0). An agent that rotates the files itself writes them, calls
 * edgestream_reload(), and learns here whether they were taken. @cb NULL removes it. Taken at
 * edgestream_new() (edgestream_reconfigure does not change it). 0, or -EINVAL for a NULL @cfg.
 */
int edgestream_config_set_cert_hook(struct edgestream_config *cfg, edgestream_cert_cb cb,
                                    void *user);

/* edgestream_free() - stop (joining the thread of edgestream_start) and free. NULL is fine. */
void edgestream_free(struct edgestream *es);

#ifdef __cplusplus
}
#endif

#endif /* EDGESTREAM_EDGESTREAM_H */
