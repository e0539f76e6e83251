/*
 * cloudstream/src/authz_cache.c — the bounded cache of authentication and authorization
 * decisions, with calls in flight shared (authz.h): pure, no I/O, clock or logging (the caller
 * brings the time).
 */
#include "authz.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- the decision cache ------------------------------------------------------------------ */

#define PROBE_SLOTS 8u

struct slot {
	bool used;
	bool ok;
	uint64_t job;        /* non-zero: a call in flight, no answer yet */
	uint64_t expires_ms; /* the answer's expiry */
	uint8_t key[CS_AUTHZ_KEY_BYTES];
	struct cs_authz_user *user; /* owned; NULL when the answer carries none */
};

struct cs_authz_cache {
	struct slot *slots;
	size_t mask;
};

int cs_authz_cache_new(struct cs_authz_cache **out, size_t capacity)
{
	if (capacity == 0 || capacity > (1u << 24))
		return -EINVAL;
	size_t n = PROBE_SLOTS;
	while (n < capacity)
		n <<= 1;
	struct cs_authz_cache *c = calloc(1, sizeof *c);
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

static void slot_clear(struct slot *s)
{
	free(s->user);
	memset(s, 0, sizeof *s);
}

void cs_authz_cache_free(struct cs_authz_cache *c)
{
	if (c == NULL)
		return;
	for (size_t i = 0; i <= c->mask; i++)
		free(c->slots[i].user);
	free(c->slots);
	free(c);
}

static size_t first_slot(const struct cs_authz_cache *c, const uint8_t *key)
{
	uint64_t h;
	memcpy(&h, key, sizeof h); /* keys are digests: any 8 bytes hash well */
	return (size_t)h & c->mask;
}

static struct slot *find(const struct cs_authz_cache *c, const uint8_t *key)
{
	size_t h = first_slot(c, key);
	for (size_t i = 0; i < PROBE_SLOTS; i++) {
		struct slot *s = &c->slots[(h + i) & c->mask];
		if (s->used && memcmp(s->key, key, CS_AUTHZ_KEY_BYTES) == 0)
			return s;
	}
	return NULL;
}

/* A slot for a new entry: an empty one, else the answer closest to expiry; never a call in
 * flight. NULL when every slot of the window is in flight. */
static struct slot *victim(const struct cs_authz_cache *c, const uint8_t *key)
{
	size_t h = first_slot(c, key);
	struct slot *v = NULL;
	for (size_t i = 0; i < PROBE_SLOTS; i++) {
		struct slot *s = &c->slots[(h + i) & c->mask];
		if (!s->used)
			return s;
		if (s->job == 0 && (v == NULL || s->expires_ms < v->expires_ms))
			v = s;
	}
	return v;
}

enum cs_authz_cache_hit cs_authz_cache_get(const struct cs_authz_cache *c,
                                           const uint8_t key[CS_AUTHZ_KEY_BYTES], uint64_t now_ms,
                                           bool *ok, const struct cs_authz_user **user,
                                           uint64_t *job)
{
	const struct slot *s = find(c, key);
	if (s == NULL)
		return CS_AUTHZ_MISS;
	if (s->job) {
		*job = s->job;
		return CS_AUTHZ_PENDING;
	}
	if (s->expires_ms <= now_ms)
		return CS_AUTHZ_MISS;
	*ok = s->ok;
	if (user)
		*user = s->user;
	return CS_AUTHZ_HIT;
}

int cs_authz_cache_pending(struct cs_authz_cache *c, const uint8_t key[CS_AUTHZ_KEY_BYTES],
                           uint64_t job)
{
	if (job == 0)
		return -EINVAL;
	struct slot *s = find(c, key);
	if (s == NULL)
		s = victim(c, key);
	if (s == NULL)
		return -ENOSPC;
	slot_clear(s);
	s->used = true;
	s->job = job;
	memcpy(s->key, key, CS_AUTHZ_KEY_BYTES);
	return 0;
}

int cs_authz_cache_put(struct cs_authz_cache *c, const uint8_t key[CS_AUTHZ_KEY_BYTES], bool ok,
                       const struct cs_authz_user *user, uint64_t expires_ms)
{
	struct slot *s = find(c, key);
	if (expires_ms == 0) {
		if (s)
			slot_clear(s);
		return 0;
	}
	if (s == NULL)
		s = victim(c, key);
	if (s == NULL)
		return -ENOSPC;
	struct cs_authz_user *copy = NULL;
	if (user) {
		/* Only the bytes in use: a user is mostly an empty buffer. */
		size_t n = offsetof(struct cs_authz_user, json) + user->json_len + 1;
		copy = malloc(n);
		if (copy == NULL) {
			slot_clear(s);
			return -ENOMEM;
		}
		memcpy(copy, user, n);
	}
	slot_clear(s);
	s->used = true;
	s->ok = ok;
	s->expires_ms = expires_ms;
	s->user = copy;
	memcpy(s->key, key, CS_AUTHZ_KEY_BYTES);
	return 0;
}
