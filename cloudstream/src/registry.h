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

#define CS_REGISTRY_MAX_IPS    8   /* verified IPs kept per node */
#define CS_NODE_NAME_MAX_BYTES 253 /* a DNS-1123 subdomain */
#define CS_IP_TEXT_MAX_BYTES   45  /* INET6_ADDRSTRLEN - 1 */

struct cs_registry;

/* cs_registry_new() - room for @max_entries nodes; @seed keys the hash (pass random bytes).
 * Returns 0, -EINVAL (0 entries), -ENOMEM. */
int cs_registry_new(struct cs_registry **out, size_t max_entries, uint64_t seed);

/* cs_registry_free() - free the tables (not the values). NULL is a no-op. */
void cs_registry_free(struct cs_registry *r);

/*
 * cs_registry_put() - insert or replace @node's entry (@len bytes) with @value (non-NULL) and its
 * verified IPs (text as inet_ntop writes it). An IP another node had moves to this one (the
 * newest verified connection wins). *@replaced is the node's previous value or NULL.
 * Returns 0; -EINVAL (empty or long name, NULL value, more than CS_REGISTRY_MAX_IPS IPs, an IP
 * text too long); -ENOSPC (a new node when max_entries are present); -ENOMEM (registry
 * unchanged).
 */
int cs_registry_put(struct cs_registry *r, const char *node, size_t len, const char *const *ips,
                    size_t n_ips, void *value, void **replaced);

/* cs_registry_remove_if() - compare-and-delete: remove @node only while its value is @value (a
 * reconnect may have replaced it). Its IP keys go too, where they still name this node.
 * Returns true when removed. */
bool cs_registry_remove_if(struct cs_registry *r, const char *node, size_t len, const void *value);

/* cs_registry_get() - @node's value, or NULL. */
void *cs_registry_get(const struct cs_registry *r, const char *node, size_t len);

/* cs_registry_get_by_ip() - the value of the node with IP @ip (text), or NULL; *@node (if not
 * NULL) gets the node name, valid until the registry changes. */
void *cs_registry_get_by_ip(const struct cs_registry *r, const char *ip, size_t len,
                            const char **node);

/* cs_registry_count() - nodes registered. */
size_t cs_registry_count(const struct cs_registry *r);

#endif /* CLOUDSTREAM_REGISTRY_H */
