/*
 * cloudstream/src/events.h — Kubernetes Events on a Node for refused and flapping tunnels, the
 * decisions only: what to create, what to update, when. Modelled on client-go's event correlator
 * (tools/record/events_cache.go): a repeat of an event already sent does not make a new Event,
 * it raises the existing one's count and lastTimestamp (a PATCH), and the calls are rate-limited
 * so a fleet of flapping nodes cannot flood the apiserver:
 *
 *   - one key per (node, reason); the message is the latest occurrence's;
 *   - at most one call per key per CS_EVENTS_KEY_INTERVAL_MS: occurrences in between are
 *     counted and go out in the next PATCH (exact counts, not one call each);
 *   - a process-wide token bucket (CS_EVENTS_BURST calls, refilled at CS_EVENTS_PER_S);
 *   - a bounded table (CS_EVENTS_MAX_KEYS): a new key evicts the least recently seen idle one.
 *
 * A PATCH answered 404 (the apiserver's --event-ttl expired the Event) makes the next call a
 * POST of a new Event, as client-go does. Pure: times come in, calls go out (events_post.c does
 * the HTTP on the worker pool). Loop thread only.
 */
#ifndef CLOUDSTREAM_EVENTS_H
#define CLOUDSTREAM_EVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CS_EVENTS_MAX_KEYS        256u
#define CS_EVENTS_KEY_INTERVAL_MS 10000u  /* one call per (node, reason) per 10 s */
#define CS_EVENTS_BURST           25u     /* process-wide calls at once ... */
#define CS_EVENTS_PER_S           5u      /* ... then this many a second */
#define CS_EVENTS_RETRY_MS        30000u  /* after a failed call */
#define CS_EVENTS_FLAP_UPS        4u      /* tunnel ups of one node ... */
#define CS_EVENTS_FLAP_WINDOW_MS  300000u /* ... within 5 minutes: flapping */
#define CS_EVENTS_MESSAGE_MAX     256u
#define CS_EVENTS_NAME_MAX        (253u + 1u + 16u) /* node "." hex nanoseconds */

enum cs_event_reason {
	CS_EVENT_TUNNEL_REFUSED = 0, /* "TunnelRefused": an upgrade of the node's refused */
	CS_EVENT_TUNNEL_FLAPPING,    /* "TunnelFlapping": CS_EVENTS_FLAP_UPS ups in the window */
	CS_EVENT_REASON_COUNT
};

/* The Event's reason field. */
const char *cs_event_reason_name(enum cs_event_reason r);

struct cs_events;

/* cs_events_new() - an empty table. 0 or -ENOMEM. cs_events_free(NULL) is a no-op. */
int cs_events_new(struct cs_events **out);
void cs_events_free(struct cs_events *ev);

/*
 * cs_events_note() - one occurrence of @reason on node @node (NUL-terminated, borrowed) with
 * @message (copied, cut at CS_EVENTS_MESSAGE_MAX - 1 bytes), at @now_ms (monotonic) and
 * @wall_ns (unix time in nanoseconds: the Event's timestamps and name). Returns 0, -EINVAL for
 * an empty node, -ENOSPC when the table is full of keys with calls in flight (dropped).
 */
int cs_events_note(struct cs_events *ev, const char *node, enum cs_event_reason reason,
                   const char *message, uint64_t now_ms, uint64_t wall_ns);

/*
 * cs_events_tunnel_up() - node @node's tunnel came up at @now_ms: notes TunnelFlapping (with
 * @wall_ns) when that makes CS_EVENTS_FLAP_UPS ups within CS_EVENTS_FLAP_WINDOW_MS. Returns
 * the ups counted in the window (1 for a node seen first or after a quiet window).
 */
unsigned cs_events_tunnel_up(struct cs_events *ev, const char *node, uint64_t now_ms,
                             uint64_t wall_ns);

/* One call to make. Views valid until the call's cs_events_done(). */
struct cs_event_call {
	uint64_t id;              /* for cs_events_done */
	bool create;              /* POST a new Event, else PATCH count/lastTimestamp/message */
	const char *node;         /* the involved Node */
	const char *name;         /* the Event's name */
	const char *reason;       /* cs_event_reason_name() */
	const char *message;      /* the latest occurrence's */
	uint32_t count;           /* occurrences so far (what the Event will say) */
	uint64_t first_s, last_s; /* unix seconds: firstTimestamp, lastTimestamp */
};

/*
 * cs_events_next() - the next call due at @now_ms, if any: 1 and *@out filled (the key is in
 * flight until cs_events_done), 0 when nothing is due or the rate limit says wait.
 */
int cs_events_next(struct cs_events *ev, uint64_t now_ms, struct cs_event_call *out);

/*
 * cs_events_done() - the call @id ended: @result 0 (the apiserver has the Event with the
 * call's count), -ENOENT (a PATCH found no Event: the next call creates one), other <0 (failed:
 * retried after CS_EVENTS_RETRY_MS with the counts gathered by then). An unknown @id (its key
 * was dropped) is ignored.
 */
void cs_events_done(struct cs_events *ev, uint64_t id, int result, uint64_t now_ms);

/* Counters for /metrics. */
struct cs_events_stats {
	uint64_t created, patched, failed, dropped;
};
void cs_events_stats(const struct cs_events *ev, struct cs_events_stats *out);

/*
 * cs_events_body() - the JSON of @call: for a create, a core/v1 Event as the kubelet writes
 * one for its Node (namespace "default", involvedObject {kind Node, name, uid = name}, source
 * {component @component, host @host}, type Warning); for an update, the strategic-merge patch
 * {"count","lastTimestamp","message"} client-go sends. Into @out (@cap bytes, NUL-terminated).
 * Returns the length, -EMSGSIZE, -ENOMEM.
 */
ssize_t cs_events_body(const struct cs_event_call *call, const char *component, const char *host,
                       char *out, size_t cap);

#endif /* CLOUDSTREAM_EVENTS_H */
