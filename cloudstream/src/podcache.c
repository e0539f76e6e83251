/*
 * cloudstream/src/podcache.c — pod → node cache (see podcache.h). Open addressing with a short
 * probe window; no allocation after creation.
 */
#include "podcache.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define PROBE_SLOTS 8u

struct entry {
	uint64_t expires_ms; /* 0 = empty slot */
	uint16_t key_len;
	uint8_t node_len;
	bool absent;
	char key[CS_POD_KEY_MAX_BYTES];
	char node[CS_NODE_NAME_MAX_BYTES];
};

struct cs_podcache {
	struct entry *slots;
	size_t mask;
};

int cs_podcache_new(struct cs_podcache **out, size_t capacity)
{
	if (capacity == 0 || capacity > (1u << 24))
		return -EINVAL;
	size_t n = PROBE_SLOTS;
	while (n < capacity)
		n <<= 1;
	struct cs_podcache *c = calloc(1, sizeof *c);
	if (c == NULL)
		return -ENOMEM;
	c->slots = calloc(n, sizeof *c->slots);
	if (c->slots == NULL) {
		free(c);
		return -ENOMEM;
	}
	c->mask = n - 1;
	*out = c;
	return 0;
}

void cs_podcache_free(struct cs_podcache *c)
{
	if (c == NULL)
		return;
	free(c->slots);
	free(c);
}

/* "ns/pod" into @key; its length, or 0 when over the limit. */
static size_t make_key(char *key, const char *ns, size_t ns_len, const char *pod, size_t pod_len)
{
	if (ns_len == 0 || pod_len == 0 || ns_len > 63 || pod_len > CS_NODE_NAME_MAX_BYTES)
		return 0;
	memcpy(key, ns, ns_len);
	key[ns_len] = '/';
	memcpy(key + ns_len + 1, pod, pod_len);
	return ns_len + 1 + pod_len;
}

static size_t hash(const char *k, size_t len)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a: keys are names the apiserver validated */
	for (size_t i = 0; i < len; i++)
		h = (h ^ (uint8_t)k[i]) * 1099511628211ull;
	return (size_t)(h ^ (h >> 32));
}

int cs_podcache_get(const struct cs_podcache *c, const char *ns, size_t ns_len, const char *pod,
                    size_t pod_len, uint64_t now_ms, const char **node, size_t *node_len)
{
	char key[CS_POD_KEY_MAX_BYTES];
	size_t klen = make_key(key, ns, ns_len, pod, pod_len);
	if (klen == 0)
		return 0;
	size_t h = hash(key, klen);
	for (size_t i = 0; i < PROBE_SLOTS; i++) {
		const struct entry *e = &c->slots[(h + i) & c->mask];
		if (e->expires_ms == 0 || e->key_len != klen || memcmp(e->key, key, klen) != 0)
			continue;
		if (e->expires_ms <= now_ms)
			return 0;
		if (e->absent)
			return -ENOENT;
		*node = e->node;
		*node_len = e->node_len;
		return 1;
	}
	return 0;
}

int cs_podcache_put(struct cs_podcache *c, const char *ns, size_t ns_len, const char *pod,
                    size_t pod_len, const char *node, size_t node_len, uint64_t expires_ms)
{
	char key[CS_POD_KEY_MAX_BYTES];
	size_t klen = make_key(key, ns, ns_len, pod, pod_len);
	if (klen == 0 || (node && (node_len == 0 || node_len > CS_NODE_NAME_MAX_BYTES)) ||
	    expires_ms == 0)
		return -EINVAL;
	size_t h = hash(key, klen);
	struct entry *victim = NULL;
	for (size_t i = 0; i < PROBE_SLOTS; i++) {
		struct entry *e = &c->slots[(h + i) & c->mask];
		if (e->expires_ms != 0 && e->key_len == klen && memcmp(e->key, key, klen) == 0) {
			victim = e; /* the same pod: update in place */
			break;
		}
		if (victim == NULL || e->expires_ms < victim->expires_ms)
			victim = e; /* empty slots have expiry 0 and win */
	}
	victim->expires_ms = expires_ms;
	victim->key_len = (uint16_t)klen;
	memcpy(victim->key, key, klen);
	victim->absent = node == NULL;
	victim->node_len = (uint8_t)(node ? node_len : 0);
	if (node)
		memcpy(victim->node, node, node_len);
	return 0;
}
