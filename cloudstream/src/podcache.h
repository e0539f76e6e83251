/*
 * cloudstream/src/podcache.h — pod → node cache for routing (pure: the caller passes the time).
 *
 * When nothing in a request names its node, cloudstream asks the apiserver which node runs the
 * pod (spec.nodeName) and keeps the answer for a while, including "no such pod" (so a bad
 * request does not become an apiserver request each time). Bounded: a full table evicts the
 * entry closest to expiry among the probed slots.
 */
#ifndef CLOUDSTREAM_PODCACHE_H
#define CLOUDSTREAM_PODCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "registry.h"

#define CS_POD_KEY_MAX_BYTES 317 /* namespace (63) + '/' + pod name (253) */

struct cs_podcache;

/* cs_podcache_new() - a cache of @capacity entries (rounded up to a power of two). 0/-EINVAL/-ENOMEM. */
int cs_podcache_new(struct cs_podcache **out, size_t capacity);
void cs_podcache_free(struct cs_podcache *c);

/*
 * cs_podcache_get() - the node of pod @ns/@pod at @now_ms.
 * Returns 1 and sets *node and *node_len (valid until the next put) when cached; -ENOENT when cached
 * as absent; 0 when not cached or expired.
 */
int cs_podcache_get(const struct cs_podcache *c, const char *ns, size_t ns_len, const char *pod,
                    size_t pod_len, uint64_t now_ms, const char **node, size_t *node_len);

/* cs_podcache_put() - remember @node (NULL: the pod does not exist or is not scheduled) until
 * @expires_ms. Returns 0, or -EINVAL for names over the limits. */
int cs_podcache_put(struct cs_podcache *c, const char *ns, size_t ns_len, const char *pod,
                    size_t pod_len, const char *node, size_t node_len, uint64_t expires_ms);

#endif /* CLOUDSTREAM_PODCACHE_H */
