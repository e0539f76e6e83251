/*
 * cloudstream/src/peerdir.h — the peer directory: which other cloudstream replica holds which
 * edge node's tunnel (DESIGN D12; stream/PROTOCOL.md §7). Pure: no I/O, no clock, no logging;
 * the loop thread owns a directory.
 *
 * Each replica announces the nodes whose tunnels it holds on its peer links: NODE_UP(node,
 * generation, caps, IPs) when a tunnel is admitted, NODE_DOWN(node, generation) when it goes,
 * and the whole list between SYNC and SYNC_END whenever a link (re)connects. A generation is
 * (admission time in ms, replica id): the newest tunnel of a node wins everywhere. The
 * directory keeps one entry per node, the newest it heard of; a replica that learns a newer
 * generation for a node it holds itself closes its own tunnel (cs_peerdir_gen_cmp, on_up).
 *
 * What a replica learns from a peer lives exactly as long as the link it came on: a link lost
 * forgets that peer's entries (cs_peerdir_peer_drop), and SYNC_END forgets those the full list
 * no longer names, so after a partition heals every replica converges on the same holders.
 *
 * Bounded: at most max_entries nodes (more are counted in refused and not stored), at most
 * CS_PEERDIR_MAX_PEERS peers, CS_REGISTRY_MAX_IPS IPs per node.
 */
#ifndef CLOUDSTREAM_PEERDIR_H
#define CLOUDSTREAM_PEERDIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "registry.h"

#define CS_PEERDIR_MAX_PEERS 64

struct cs_peerdir;
struct cs_peerdir_cbs;

/* One node as NODE_UP / NODE_DOWN carry it. Views: into the payload when decoded (valid while
 * it is), the caller's when encoding. NODE_DOWN carries only node and gen_ms. */
struct cs_peerdir_entry {
	const char *node; /* [a-z0-9.-], 1 .. CS_NODE_NAME_MAX_BYTES, not NUL-terminated */
	size_t node_len;
	uint64_t gen_ms; /* the tunnel's admission time on its holder (ms, any epoch) */
	uint32_t caps;   /* the extensions agreed with the node's edge (ext.h; 0 = base) */
	size_t n_ips;    /* <= CS_REGISTRY_MAX_IPS */
	const char *ips[CS_REGISTRY_MAX_IPS]; /* [0-9a-fA-F.:], 1 .. CS_IP_TEXT_MAX_BYTES */
	size_t ip_lens[CS_REGISTRY_MAX_IPS];
};

/*
 * cs_peerdir_entry_encode() - append one entry of a NODE_UP (@up) or NODE_DOWN payload to @out.
 * Returns its length; -EMSGSIZE when it does not fit @cap; -EINVAL for a field out of bounds
 * (empty or long name, too many IPs).
 */
ssize_t cs_peerdir_entry_encode(uint8_t *out, size_t cap, bool up,
                                const struct cs_peerdir_entry *e);

/*
 * cs_peerdir_entry_decode() - read the entry at the start of @p (the rest of a whole NODE_UP or
 * NODE_DOWN payload). Returns the bytes it took (> 0), or -EBADMSG (cut short, a name or IP
 * with a byte outside its alphabet, a field over its limit).
 */
ssize_t cs_peerdir_entry_decode(const uint8_t *p, size_t len, bool up,
                                struct cs_peerdir_entry *out);

/* cs_peerdir_gen_cmp() - <0, 0, >0 as generation (@a_ms, @a_rep) is older than, the same as or
 * newer than (@b_ms, @b_rep): the time first, then the replica ids bytewise. */
int cs_peerdir_gen_cmp(uint64_t a_ms, const char *a_rep, uint64_t b_ms, const char *b_rep);

/* cs_peerdir_new() - an empty directory of at most @max_entries nodes (0: 1,000,000).
 * 0 or -ENOMEM. */
int cs_peerdir_new(struct cs_peerdir **out, size_t max_entries);
/* cs_peerdir_free() - NULL is a no-op. */
void cs_peerdir_free(struct cs_peerdir *d);

/*
 * cs_peerdir_peer_add() - the slot of peer @replica (NUL-terminated, copied; the HELLO's
 * replica id), a new one unless it has one already (then its entries stay until the new
 * link's SYNC_END or cs_peerdir_peer_drop). Returns the slot (>= 0), -ENOSPC (all
 * CS_PEERDIR_MAX_PEERS in use) or -EINVAL (empty or too long).
 */
int cs_peerdir_peer_add(struct cs_peerdir *d, const char *replica);

/* cs_peerdir_peer_find() - the slot of peer @replica, or -ENOENT. */
int cs_peerdir_peer_find(const struct cs_peerdir *d, const char *replica);

/* cs_peerdir_peer_drop() - the link to @slot's peer is gone: its entries are forgotten (each
 * reported to @cbs->on_down when given) and the slot freed. Returns how many entries went. */
size_t cs_peerdir_peer_drop(struct cs_peerdir *d, int slot, const struct cs_peerdir_cbs *cbs,
                            void *user);

/* cs_peerdir_peer_synced() - has @slot's peer completed a full list (SYNC_END) since added? */
bool cs_peerdir_peer_synced(const struct cs_peerdir *d, int slot);

/* What cs_peerdir_recv reports. */
struct cs_peerdir_cbs {
	/* An entry was taken: @replica (the sender) holds @node with @gen_ms, the newest the
	 * directory knows. The glue closes its own tunnel of @node if that one is older. May be
	 * NULL. */
	void (*on_up)(const char *node, size_t node_len, uint64_t gen_ms, const char *replica,
	              void *user);
	/* An entry went: its holder said the tunnel went (NODE_DOWN), a full list no longer
	 * named it, or the link to its holder was lost (cs_peerdir_peer_drop). The node may be
	 * between tunnels. @e has its name and IPs (gen_ms and caps too), valid during the call.
	 * May be NULL. */
	void (*on_down)(const struct cs_peerdir_entry *e, void *user);
};

/*
 * cs_peerdir_recv() - apply a peer message (@type ST_MSG_NODE_UP .. ST_MSG_SYNC_END, its whole
 * @payload) from @slot's peer. Returns 0, or -EBADMSG (malformed: the link should be closed;
 * entries before the bad one were applied), -EINVAL (no such slot or type).
 */
int cs_peerdir_recv(struct cs_peerdir *d, int slot, uint64_t type, const uint8_t *payload,
                    size_t len, const struct cs_peerdir_cbs *cbs, void *user);

/* A directory entry as a lookup returns it (valid until the directory next changes). */
struct cs_peerdir_hit {
	int slot;            /* the holder's peer slot */
	const char *replica; /* the holder's replica id (NUL-terminated) */
	const char *node;    /* the node's name (NUL-terminated) */
	uint64_t gen_ms;
	uint32_t caps;
};

/* cs_peerdir_get() - who holds @node: 0 and *out, or -ENOENT. */
int cs_peerdir_get(const struct cs_peerdir *d, const char *node, size_t len,
                   struct cs_peerdir_hit *out);

/* cs_peerdir_get_by_ip() - the node that announced IP @ip (text as inet_ntop writes it): 0 and
 * *out, -ENOENT, or -ENOTUNIQ when two nodes announced it (ambiguous: routed by no one). */
int cs_peerdir_get_by_ip(const struct cs_peerdir *d, const char *ip, size_t len,
                         struct cs_peerdir_hit *out);

struct cs_peerdir_stats {
	size_t entries;       /* nodes held by peers, now */
	size_t peers;         /* slots in use */
	size_t bytes;         /* heap bytes of entries and tables (what malloc was asked for) */
	uint64_t refused;     /* NODE_UPs not stored: max_entries reached */
	uint64_t superseded;  /* NODE_UPs older than what the directory holds: ignored */
	uint64_t resync_gone; /* entries a SYNC_END forgot */
};
void cs_peerdir_get_stats(const struct cs_peerdir *d, struct cs_peerdir_stats *out);

#endif /* CLOUDSTREAM_PEERDIR_H */
