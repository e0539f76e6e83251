/*
 * cloudstream/src/identity.h — who may hold a tunnel, and which IPs are a node's (lws glue around
 * the pure denylist.c and registry.c; identity.c).
 *
 *   - Revocation: --deny-list FILE (denylist.h's format) is read at start and again on SIGHUP,
 *     on a worker; a list that does not parse keeps the old one. Swapped in on the loop, after
 *     which every connected node it now names (by certificate serial or node name) has its
 *     tunnel closed at once, and its upgrades are refused with 403 and the reason.
 *   - The admin action POST /nodes/<name>/close (admin.c) closes one node's tunnel.
 *   - --internal-ip-policy node-address: the edge's SessionInternalIP is verified against the
 *     Node object (GET /api/v1/nodes/<name> on a worker, status.addresses; answers cached for
 *     --pod-cache-ttl) before requests are routed to the node by it.
 *
 * Loop thread only, except the worker jobs, which touch only their own job.
 */
#ifndef CLOUDSTREAM_IDENTITY_H
#define CLOUDSTREAM_IDENTITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "registry.h"

struct cs_server;
struct cs_identity; /* the deny list and the Node-address cache */

/* Why a tunnel upgrade was refused: cloudstream_tunnel_refusals_total{reason}. */
enum cs_refusal {
	CS_REFUSE_PATH = 0,      /* 404: not the tunnel path, or not an upgrade */
	CS_REFUSE_CERT,          /* 403: no usable certificate, or its CN names no node */
	CS_REFUSE_NAME_OVERRIDE, /* 403: SessionHostNameOverride invalid or another node's */
	CS_REFUSE_INTERNAL_IP,   /* 403: SessionInternalIP not the certificate's (policy cert) */
	CS_REFUSE_IP_CONFLICT,   /* 403: SessionInternalIP is another node's verified IP */
	CS_REFUSE_DENIED,        /* 403: serial or node name on the deny list */
	CS_REFUSE_DRAINING,      /* 503 */
	CS_REFUSE_LIMIT,         /* 503: --max-sessions */
	CS_REFUSE_NODE_DELETED,  /* 403: --node-watch saw its Node deleted (not re-created) */
	CS_REFUSE_COUNT
};

/* Label value of @r for the metrics. */
const char *cs_refusal_name(enum cs_refusal r);

/* cs_identity_new() - read --deny-list (if set) now, at start-up (the loop does not run yet).
 * Returns 0, or a negative errno after logging why (the daemon exits). */
int cs_identity_new(struct cs_server *srv);

/* cs_identity_start() - once the loop and the worker pool exist: the deny list's periodic check
 * (--deny-list-check-interval: a stat on a worker, the file read only when it changed) and the
 * node watch (--node-watch). 0, or a negative errno after logging why. */
int cs_identity_start(struct cs_server *srv);

/* cs_identity_stop() - before the context goes: the timer, the node watch. */
void cs_identity_stop(struct cs_server *srv);

/* cs_identity_free() - NULL-safe; pending jobs find nothing when they complete. */
void cs_identity_free(struct cs_server *srv);

/* cs_identity_reload() - SIGHUP: read the deny list again on a worker; then close the tunnels
 * of nodes it names. */
void cs_identity_reload(struct cs_server *srv);

/* cs_identity_denied() - why @node with certificate serial @serial (hex, may be "") may not
 * hold a tunnel, or NULL. The text is static. */
const char *cs_identity_denied(const struct cs_server *srv, const char *node, const char *serial);

/* Node-address policy. cs_identity_node_has_ip() - 1 when a fresh Node answer lists @ip for
 * @node, 0 when it does not, -ENOENT when no fresh answer is cached. */
int cs_identity_node_has_ip(struct cs_server *srv, const char *node, const char *ip);

/* cs_identity_verify_ip() - ask the apiserver (on a worker) whether Node @node lists @ip; when it
 * does and the tunnel with @ordinal is still the node's, the IP is added to the registry as
 * verified. Returns 0 or a negative errno (-EAGAIN: the worker pool is full). */
int cs_identity_verify_ip(struct cs_server *srv, const char *node, uint64_t ordinal,
                          const char *ip);

/* cs_identity_note_shared() - the registry made @ip shared by @node and @other: log, count. */
void cs_identity_note_shared(struct cs_server *srv, const char *ip, const char *node);

/* ---- nodewatch.c: --node-watch ---------------------------------------------------------- */
struct cs_nodewatch;

/* cs_nodewatch_start() - with --node-watch: list, then watch Node objects on a pool of its own
 * (one thread). 0 (also when off), or a negative errno after logging why. */
int cs_nodewatch_start(struct cs_server *srv);

/* cs_nodewatch_stop() - at exit: waits for the watch in flight (at most its timeout). */
void cs_nodewatch_stop(struct cs_server *srv);

/* cs_nodewatch_run_completions() - from LWS_CALLBACK_EVENT_WAIT_CANCELLED. */
void cs_nodewatch_run_completions(struct cs_server *srv);

/* cs_nodewatch_deleted() - was @node's Node deleted (and not created again) while watched? */
bool cs_nodewatch_deleted(const struct cs_server *srv, const char *node);

#endif /* CLOUDSTREAM_IDENTITY_H */
