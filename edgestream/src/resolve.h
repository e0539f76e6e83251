/*
 * edgestream/src/resolve.h — host names resolved on the worker pool, never on the loop (STYLE
 * B7.2: Debian's lws 4.1.6 has no async DNS and would call getaddrinfo on the loop thread). One
 * mechanism for every name the edge dials: --cloud-url's hosts, --kubelet-url's host, and the
 * runtime's streaming URL (resolved inside its CRI job, es_resolve_host). lws is then given the
 * address; the name stays the one for SNI, the certificate check and the Host header.
 *
 * Cache policy, per name (struct es_name):
 *   - an IP literal is never resolved;
 *   - a good answer (up to ES_NAME_MAX_ADDRS addresses, IPv4 first) is used for every dial,
 *     one address at a time; a failed connect to it (refused, unreachable, connect timed out)
 *     moves on to the next address, and once each was tried the next dial resolves again
 *     (a dial waits for that answer). So a name is resolved again on reconnect failures, never
 *     per request;
 *   - an answer older than ES_NAME_REFRESH_MS is refreshed in the background: dials go on with
 *     the old address meanwhile, so a resolver that hangs costs nothing while the old one works;
 *   - a failed resolution answers every dial for ES_NAME_RETRY_MS with its reason (no worker
 *     job per request while the name does not resolve), then the next dial tries again;
 *   - at most one resolution per name is under way: every dial that needs it waits on it.
 * A failure is logged once (WARN) until the name resolves again (NOTICE), and counted.
 *
 * Loop thread only, except es_resolve_host (any thread; blocking: workers).
 */
#ifndef EDGESTREAM_RESOLVE_H
#define EDGESTREAM_RESOLVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libwebsockets.h>

#define ES_NAME_MAX_ADDRS  8u
#define ES_NAME_ADDR_BYTES 48u                /* an IPv6 address in text, with its NUL */
#define ES_NAME_HOST_BYTES 256u               /* as ES_HOST_MAX */
#define ES_NAME_REFRESH_MS (5u * 60u * 1000u) /* a good answer is refreshed after this long */
#define ES_NAME_RETRY_MS   1000u              /* a failed one answers dials this long */
#define ES_NAME_ERR_BYTES  160u

struct st_workq;
struct es_name_wait;

/* The outcome of a resolution a dial waited on, on the loop: @rc 0 with @addr (valid during
 * the call: lws copies it at connect) and @gen (es_name_dial_failed's ticket), or <0 with @why
 * (-EHOSTUNREACH: the name did not resolve; -ECANCELED: the worker pool stopped, the instance
 * is going: do nothing). */
typedef void (*es_name_cb)(struct es_name_wait *w, int rc, const char *addr, uint32_t gen,
                           const char *why);

/* A dial waiting on a name, embedded in its owner (connection, tunnel). Detached when it
 * waits on nothing. */
struct es_name_wait {
	lws_dll2_t list; /* in es_name.waiters while waiting */
	es_name_cb cb;
};

/* Worker side: resolve @host (blocking), at most @cap addresses into @addrs, IPv4 ones first.
 * Returns how many (>0), or 0 with the reason in @err (@errcap bytes). */
typedef size_t (*es_resolve_fn)(const char *host, char (*addrs)[ES_NAME_ADDR_BYTES], size_t cap,
                                char *err, size_t errcap);

struct es_name {
	struct st_workq *wq; /* borrowed: where resolutions run */
	const char *label;   /* "kubelet", "cloud": for the log and the metric (static) */
	char host[ES_NAME_HOST_BYTES];
	bool literal; /* host is an IP address: never resolved */
	/* the last good answer: addrs[cur] is dialled next (have: n_addrs > 0) */
	char addrs[ES_NAME_MAX_ADDRS][ES_NAME_ADDR_BYTES];
	size_t n_addrs, cur;
	uint32_t gen;         /* bumped with each answer: a late dial failure is not counted */
	bool stale;           /* every address failed a dial: the next dial resolves again */
	uint64_t resolved_ms; /* when the answer came (st_now_ms) */
	bool failing;         /* the last resolution failed (logged once), err says why */
	uint64_t failed_ms;
	char err[ES_NAME_ERR_BYTES];
	bool running; /* a resolution is on the worker pool */
	lws_dll2_owner_t waiters;
	uint64_t resolves_ok, resolves_failed; /* counters (metrics) */
	es_resolve_fn resolve;                 /* es_resolve_host; a test may put its own */
};

/* es_name_init() - @n names @host (copied; without brackets), resolved on @wq (borrowed,
 * outlives @n's resolutions: st_workq_free completes them first). @label is static. */
void es_name_init(struct es_name *n, struct st_workq *wq, const char *label, const char *host);

/* es_name_prefetch() - start resolving @n now, so the first dial finds an answer (start-up);
 * nothing for a literal, or when an answer or a resolution is there already. */
void es_name_prefetch(struct es_name *n);

/*
 * es_name_get() - the address to dial @n at now.
 *   0: *@addr (valid until the next es_name_* call on @n; lws copies it) and *@gen;
 *   1: a resolution is under way: @cb(@w, ...) runs once with its outcome, on the loop, unless
 *      es_name_cancel(@w) comes first (@w must be detached);
 *   <0: no address now, the reason in *@why (static or in @n: use it at once): -EHOSTUNREACH
 *      (the last resolution failed less than ES_NAME_RETRY_MS ago), -EAGAIN (the worker pool
 *      is full), -ENOMEM, -ESHUTDOWN.
 */
int es_name_get(struct es_name *n, struct es_name_wait *w, es_name_cb cb, const char **addr,
                uint32_t *gen, const char **why);

/* es_name_waiting() - @w waits on a resolution. */
bool es_name_waiting(const struct es_name_wait *w);

/* es_name_cancel() - @w waits no longer (its callback will not run). A no-op when detached. */
void es_name_cancel(struct es_name_wait *w);

/* es_name_dial_failed() - a connect to the address es_name_get gave with ticket @gen failed:
 * the next dial takes the next address, or resolves again once each was tried. Nothing for a
 * literal or an older answer's ticket. */
void es_name_dial_failed(struct es_name *n, uint32_t gen);

/* es_resolve_host() - getaddrinfo(@host) (es_resolve_fn). Blocking: a worker's, or start-up. */
size_t es_resolve_host(const char *host, char (*addrs)[ES_NAME_ADDR_BYTES], size_t cap, char *err,
                       size_t errcap);

/* es_is_ip_literal() - @host is an IPv4 or IPv6 address (no resolution needed). */
bool es_is_ip_literal(const char *host);

#endif /* EDGESTREAM_RESOLVE_H */
