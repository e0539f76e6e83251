/*
 * cloudstream/src/registry.h — the session registry: node name → session, with the node's
 * verified IPs as secondary keys (pure: no I/O, no locks; the loop thread owns it).
 *
 * Scales to 100,000 nodes: open-addressing hash tables keyed with a per-process seed (hostile
 * node names cannot force collisions), grown by rehash, never past max_entries. Lookups
 * allocate nothing.
 */
#ifndef CLOUDSTREAM_REGISTRY_H
#define CLOUDSTREAM_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CS_REGISTRY_MAX_IPS       8   /* verified IPs kept per node */
#define CS_NODE_NAME_MAX_BYTES    253 /* a DNS-1123 subdomain */
#define CS_IP_TEXT_MAX_BYTES      45  /* INET6_ADDRSTRLEN - 1 */
#define CS_REGISTRY_MAX_IP_OWNERS 4   /* connected nodes kept on one really shared IP */

/*
 * IP ownership. A node's IP is either verified (an IP SAN of its certificate, or an address the
 * Node object lists in status.addresses) or only claimed by its SessionInternalIP header (under
 * --internal-ip-policy trust-header). The rules (cs_ip_decide):
 *   - a free IP, or one the node holds already: taken;
 *   - a header claim never displaces a verified IP of another connected node: refused (the
 *     caller answers 403); over another header claim the newest wins;
 *   - a verified claim displaces a header claim, and shares an IP another node holds verified:
 *     both keep it, and a request addressed only by that IP is ambiguous (no one node gets it).
 */
enum cs_ip_claim {
	CS_IP_CLAIM_NONE = 0,
	CS_IP_CLAIM_HEADER = 1,   /* SessionInternalIP, trusted by policy only */
	CS_IP_CLAIM_VERIFIED = 2, /* certificate IP SAN, or the Node object's address */
};

enum cs_ip_verdict {
	CS_IP_TAKE = 0,   /* the claimer holds it alone (any weaker holder lost it) */
	CS_IP_REFUSE = 1, /* a header against another node's verified IP: not given */
	CS_IP_SHARE = 2,  /* verified on both sides: held by both, ambiguous for routing */
};

/* cs_ip_decide() - the verdict for @claim when other nodes' strongest claim is @held. Pure. */
enum cs_ip_verdict cs_ip_decide(enum cs_ip_claim held, enum cs_ip_claim claim);

struct cs_registry;

/* cs_registry_new() - room for @max_entries nodes; @seed keys the hash (pass random bytes).
 * Returns 0, -EINVAL (0 entries), -ENOMEM. */
int cs_registry_new(struct cs_registry **out, size_t max_entries, uint64_t seed);

/* cs_registry_free() - free the tables (not the values). NULL is a no-op. */
void cs_registry_free(struct cs_registry *r);

/*
 * cs_registry_put() - insert or replace @node's entry (@len bytes) with @value (non-NULL) and its
 * verified IPs (text as inet_ntop writes it), by the ownership rules above (an IP another node
 * holds verified is shared; its IPs from an earlier put are dropped first). *@replaced is the
 * node's previous value or NULL.
 * Returns 0; -EINVAL (empty or long name, NULL value, more than CS_REGISTRY_MAX_IPS IPs, an IP
 * text too long); -ENOSPC (a new node when max_entries are present); -ENOMEM (registry
 * unchanged).
 */
int cs_registry_put(struct cs_registry *r, const char *node, size_t len, const char *const *ips,
                    size_t n_ips, void *value, void **replaced);

/* cs_registry_put_claims() - cs_registry_put() with a claim (enum cs_ip_claim) per IP. A
 * header claim against another node's verified IP is skipped (check it first with
 * cs_registry_ip_check() to refuse the node). Returns as cs_registry_put(). */
int cs_registry_put_claims(struct cs_registry *r, const char *node, size_t len,
                           const char *const *ips, const uint8_t *claims, size_t n_ips, void *value,
                           void **replaced);

/* cs_registry_ip_check() - what claiming @ip (text) with @claim for @node would give, against
 * the other nodes' claims; *@holder (valid until the registry changes) is the strongest other
 * holder, or NULL. Changes nothing. */
enum cs_ip_verdict cs_registry_ip_check(const struct cs_registry *r, const char *node, size_t len,
                                        const char *ip, enum cs_ip_claim claim,
                                        const char **holder);

/* cs_registry_add_ip() - give @ip to @node, registered with @value, by the rules; *@verdict says
 * what happened. Returns 0; -ENOENT (@node is not registered with @value: a reconnect replaced
 * it); -EMSGSIZE (the node has CS_REGISTRY_MAX_IPS already); -EINVAL; -ENOMEM (unchanged). */
int cs_registry_add_ip(struct cs_registry *r, const char *node, size_t len, const void *value,
                       const char *ip, enum cs_ip_claim claim, enum cs_ip_verdict *verdict);

/* cs_registry_remove_if() - compare-and-delete: remove @node only while its value is @value (a
 * reconnect may have replaced it). Its IP keys go too, where they still name this node.
 * Returns true when removed. */
bool cs_registry_remove_if(struct cs_registry *r, const char *node, size_t len, const void *value);

/* cs_registry_get() - @node's value, or NULL. */
void *cs_registry_get(const struct cs_registry *r, const char *node, size_t len);

/* cs_registry_get_by_ip() - the value of the one node with IP @ip (text), or NULL (nobody's,
 * or shared by several: see cs_registry_ip_owners); *@node (if not NULL) gets the node name,
 * valid until the registry changes. */
void *cs_registry_get_by_ip(const struct cs_registry *r, const char *ip, size_t len,
                            const char **node);

/* cs_registry_ip_owners() - how many connected nodes hold @ip (2 or more: really shared, all
 * verified); the first @cap names go to @names (valid until the registry changes). */
size_t cs_registry_ip_owners(const struct cs_registry *r, const char *ip, size_t len,
                             const char **names, size_t cap);

/* cs_registry_count() - nodes registered. */
size_t cs_registry_count(const struct cs_registry *r);

#endif /* CLOUDSTREAM_REGISTRY_H */
