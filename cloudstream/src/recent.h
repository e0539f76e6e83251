/*
 * cloudstream/src/recent.h — nodes whose tunnel went recently, and whether a request for such
 * a node waits for it to come back (--node-reconnect-grace). Pure: no I/O, no clock, no logging;
 * the loop thread owns a table.
 *
 * A node is marked when its tunnel here closes or is lost, when this replica (draining) sends
 * its KubeEdge edge CLOSE_CONNECT, and when a peer says the node's tunnel there went (NODE_DOWN,
 * a resync that no longer names it, the peer's link lost). A request for a node that is
 * connected nowhere but was marked less than the grace ago waits until its tunnel is up again
 * here or a peer announces it; a name never marked is answered 503 at once.
 *
 * Bounded: at most max_entries marks (more are refused, and such a node's requests are answered
 * at once); marks leave in the order they were made once older than the grace
 * (cs_recent_expire), O(1) each.
 */
#ifndef CLOUDSTREAM_RECENT_H
#define CLOUDSTREAM_RECENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Marks a cloudstream keeps at most: a node per tunnel on every replica (the directory's
 * bound). */
#define CS_RECENT_MAX_ENTRIES 1000000u

struct cs_recent;

/* cs_recent_new() - room for @max_entries marks; @seed keys the hash. 0, -EINVAL, -ENOMEM. */
int cs_recent_new(struct cs_recent **out, size_t max_entries, uint64_t seed);

/* cs_recent_free() - NULL is a no-op. */
void cs_recent_free(struct cs_recent *r);

/* cs_recent_mark() - @node (@len bytes) lost its tunnel at @now_ms (not before any earlier
 * mark's time). 0; -EINVAL (empty or long name); -ENOSPC (max_entries marks kept); -ENOMEM. */
int cs_recent_mark(struct cs_recent *r, const char *node, size_t len, uint64_t now_ms);

/* cs_recent_get() - when @node was last marked (ms), or 0: never, or expired already. */
uint64_t cs_recent_get(const struct cs_recent *r, const char *node, size_t len);

/* cs_recent_expire() - forget the marks made before @now_ms - @grace_ms. Returns how many. */
size_t cs_recent_expire(struct cs_recent *r, uint64_t now_ms, uint64_t grace_ms);

/* cs_recent_count() - marks kept. */
size_t cs_recent_count(const struct cs_recent *r);

/* What a request for a node connected nowhere does (cs_reconnect_decide). */
enum cs_reconnect_verdict {
	CS_RECONNECT_NO = 0,  /* not marked, grace off or over before it came: 503 now */
	CS_RECONNECT_WAIT,    /* waits (again) for the node's tunnel */
	CS_RECONNECT_FULL,    /* would wait, but @cap requests wait already: 503 now */
	CS_RECONNECT_EXPIRED, /* it waited and the grace is over: 503 saying it waited */
};

/*
 * cs_reconnect_decide() - the verdict for a request for a node connected nowhere, marked at
 * @down_ms (0: not marked), when it is @now_ms; @waiting_since_ms is when this request began
 * waiting (0: it does not wait yet); @waiting requests wait now (this one not counted), at most
 * @cap may; @grace_ms 0 turns waiting off. A request waits until @down_ms + @grace_ms. Pure.
 */
enum cs_reconnect_verdict cs_reconnect_decide(uint64_t down_ms, uint64_t waiting_since_ms,
                                              uint64_t now_ms, uint64_t grace_ms, size_t waiting,
                                              size_t cap);

/* cs_reconnect_deadline_ms() - when a request for a node marked at @down_ms stops waiting. */
static inline uint64_t cs_reconnect_deadline_ms(uint64_t down_ms, uint64_t grace_ms)
{
	return down_ms + grace_ms;
}

#endif /* CLOUDSTREAM_RECENT_H */
