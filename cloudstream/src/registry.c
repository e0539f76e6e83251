/*
 * cloudstream/src/registry.c — node name → session, IPs → node (see registry.h).
 *
 * Two open-addressing tables with linear probing and backward-shift deletion (no tombstones, so
 * lookups stay short however many reconnects happen): nodes by name, and IPs pointing at node
 * slots' entries. Entries are heap objects so table growth moves only pointers.
 */
#include "registry.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct node_entry {
	void *value;
	uint64_t hash;
	size_t n_ips;
	char ips[CS_REGISTRY_MAX_IPS][CS_IP_TEXT_MAX_BYTES + 1];
	uint8_t claims[CS_REGISTRY_MAX_IPS]; /* enum cs_ip_claim of each IP */
	size_t name_len;
	char name[]; /* name_len + 1 bytes: a fleet's names are far shorter than the 253 allowed */
};

/* Who holds an IP: one node, or (only when every claim is verified) several that really share
 * it. Never empty while in the table. */
struct ip_entry {
	uint64_t hash;
	struct node_entry *own[CS_REGISTRY_MAX_IP_OWNERS];
	uint8_t claim[CS_REGISTRY_MAX_IP_OWNERS];
	size_t n_own;
	size_t len;
	char ip[CS_IP_TEXT_MAX_BYTES + 1];
};

struct table {
	void **slots; /* struct node_entry * or struct ip_entry * */
	size_t cap;   /* power of two */
	size_t count;
};

struct cs_registry {
	struct table nodes, ips;
	size_t max_entries;
	uint64_t k0, k1;
};

/* SipHash-1-3 style mixing, keyed per registry: cheap and collision-resistant enough here. */
static uint64_t rotl(uint64_t x, int b)
{
	return (x << b) | (x >> (64 - b));
}

#define SIPROUND                                                                                   \
	do {                                                                                       \
		v0 += v1;                                                                          \
		v1 = rotl(v1, 13);                                                                 \
		v1 ^= v0;                                                                          \
		v0 = rotl(v0, 32);                                                                 \
		v2 += v3;                                                                          \
		v3 = rotl(v3, 16);                                                                 \
		v3 ^= v2;                                                                          \
		v0 += v3;                                                                          \
		v3 = rotl(v3, 21);                                                                 \
		v3 ^= v0;                                                                          \
		v2 += v1;                                                                          \
		v1 = rotl(v1, 17);                                                                 \
		v1 ^= v2;                                                                          \
		v2 = rotl(v2, 32);                                                                 \
	} while (0)

static uint64_t keyed_hash(const struct cs_registry *r, const char *p, size_t len)
{
	uint64_t v0 = r->k0 ^ 0x736f6d6570736575ull, v1 = r->k1 ^ 0x646f72616e646f6dull;
	uint64_t v2 = r->k0 ^ 0x6c7967656e657261ull, v3 = r->k1 ^ 0x7465646279746573ull;
	uint64_t b = (uint64_t)len << 56;
	size_t i = 0;
	for (; i + 8 <= len; i += 8) {
		uint64_t m;
		memcpy(&m, p + i, 8);
		v3 ^= m;
		SIPROUND;
		v0 ^= m;
	}
	for (size_t k = 0; i + k < len; k++)
		b |= (uint64_t)(uint8_t)p[i + k] << (8 * k);
	v3 ^= b;
	SIPROUND;
	v0 ^= b;
	v2 ^= 0xff;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	return v0 ^ v1 ^ v2 ^ v3;
}

static int table_init(struct table *t, size_t cap)
{
	t->slots = calloc(cap, sizeof *t->slots);
	if (t->slots == NULL)
		return -ENOMEM;
	t->cap = cap;
	t->count = 0;
	return 0;
}

int cs_registry_new(struct cs_registry **out, size_t max_entries, uint64_t seed)
{
	if (max_entries == 0)
		return -EINVAL;
	struct cs_registry *r = calloc(1, sizeof *r);
	if (r == NULL)
		return -ENOMEM;
	r->max_entries = max_entries;
	r->k0 = seed;
	r->k1 = seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
	if (table_init(&r->nodes, 64) < 0 || table_init(&r->ips, 64) < 0) {
		free(r->nodes.slots);
		free(r);
		return -ENOMEM;
	}
	*out = r;
	return 0;
}

void cs_registry_free(struct cs_registry *r)
{
	if (r == NULL)
		return;
	for (size_t i = 0; i < r->nodes.cap; i++)
		free(r->nodes.slots[i]);
	for (size_t i = 0; i < r->ips.cap; i++)
		free(r->ips.slots[i]);
	free(r->nodes.slots);
	free(r->ips.slots);
	free(r);
}

/* Hash of slot content, for both entry kinds (first member after the key data differs). */
static uint64_t slot_hash(const struct table *t, const struct cs_registry *r, const void *e)
{
	if (t == &r->nodes)
		return ((const struct node_entry *)e)->hash;
	return ((const struct ip_entry *)e)->hash;
}

static size_t find_node_slot(const struct cs_registry *r, const char *name, size_t len, uint64_t h)
{
	const struct table *t = &r->nodes;
	for (size_t i = (size_t)h & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
		const struct node_entry *e = t->slots[i];
		if (e == NULL ||
		    (e->hash == h && e->name_len == len && memcmp(e->name, name, len) == 0))
			return i;
	}
}

static size_t find_ip_slot(const struct cs_registry *r, const char *ip, size_t len, uint64_t h)
{
	const struct table *t = &r->ips;
	for (size_t i = (size_t)h & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
		const struct ip_entry *e = t->slots[i];
		if (e == NULL || (e->hash == h && e->len == len && memcmp(e->ip, ip, len) == 0))
			return i;
	}
}

/* Backward-shift deletion of slot @i (Knuth 6.4 algorithm R). */
static void table_delete(struct cs_registry *r, struct table *t, size_t i)
{
	size_t mask = t->cap - 1;
	t->slots[i] = NULL;
	t->count--;
	for (size_t j = (i + 1) & mask; t->slots[j] != NULL; j = (j + 1) & mask) {
		size_t home = (size_t)slot_hash(t, r, t->slots[j]) & mask;
		/* Move j back to i unless its home lies cyclically in (i, j]. */
		bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
		if (!stays) {
			t->slots[i] = t->slots[j];
			t->slots[j] = NULL;
			i = j;
		}
	}
}

/* Grows @t so @extra more entries keep the load at most 1/2. 0 or -ENOMEM (unchanged). */
static int table_reserve(struct cs_registry *r, struct table *t, size_t extra)
{
	if ((t->count + extra) * 2 <= t->cap)
		return 0;
	size_t cap = t->cap * 2;
	while ((t->count + extra) * 2 > cap)
		cap *= 2;
	void **slots = calloc(cap, sizeof *slots);
	if (slots == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < t->cap; i++) {
		void *e = t->slots[i];
		if (e == NULL)
			continue;
		size_t k = (size_t)slot_hash(t, r, e) & (cap - 1);
		while (slots[k] != NULL)
			k = (k + 1) & (cap - 1);
		slots[k] = e;
	}
	free(t->slots);
	t->slots = slots;
	t->cap = cap;
	return 0;
}

enum cs_ip_verdict cs_ip_decide(enum cs_ip_claim held, enum cs_ip_claim claim)
{
	if (held == CS_IP_CLAIM_NONE)
		return CS_IP_TAKE;
	if (claim == CS_IP_CLAIM_VERIFIED)
		/* a verified claim displaces a header's, and shares with another verified one */
		return held == CS_IP_CLAIM_VERIFIED ? CS_IP_SHARE : CS_IP_TAKE;
	/* a header never displaces a verified IP; between headers the newest wins */
	return held == CS_IP_CLAIM_VERIFIED ? CS_IP_REFUSE : CS_IP_TAKE;
}

static struct ip_entry *ip_lookup(const struct cs_registry *r, const char *ip, size_t len)
{
	if (len == 0 || len > CS_IP_TEXT_MAX_BYTES)
		return NULL;
	return r->ips.slots[find_ip_slot(r, ip, len, keyed_hash(r, ip, len))];
}

/* The strongest claim on @ie of a node other than @self. */
static enum cs_ip_claim held_by_others(const struct ip_entry *ie, const struct node_entry *self,
                                       const char **holder)
{
	enum cs_ip_claim held = CS_IP_CLAIM_NONE;
	for (size_t k = 0; ie && k < ie->n_own; k++)
		if (ie->own[k] != self && ie->claim[k] >= held) {
			held = (enum cs_ip_claim)ie->claim[k];
			if (holder)
				*holder = ie->own[k]->name;
		}
	return held;
}

/* Forget @ip in @n's own list. */
static void node_forget_ip(struct node_entry *n, const char *ip)
{
	for (size_t q = 0; q < n->n_ips; q++)
		if (strcmp(n->ips[q], ip) == 0) {
			memmove(n->ips[q], n->ips[q + 1], (n->n_ips - q - 1) * sizeof n->ips[0]);
			memmove(&n->claims[q], &n->claims[q + 1], n->n_ips - q - 1);
			n->n_ips--;
			return;
		}
}

/* @owner lets go of @ip; the key goes when nobody holds it. */
static void remove_ip_if(struct cs_registry *r, const char *ip, const struct node_entry *owner)
{
	size_t len = strlen(ip);
	uint64_t h = keyed_hash(r, ip, len);
	size_t i = find_ip_slot(r, ip, len, h);
	struct ip_entry *e = r->ips.slots[i];
	if (e == NULL)
		return;
	for (size_t k = 0; k < e->n_own; k++)
		if (e->own[k] == owner) {
			memmove(&e->own[k], &e->own[k + 1], (e->n_own - k - 1) * sizeof e->own[0]);
			memmove(&e->claim[k], &e->claim[k + 1], e->n_own - k - 1);
			e->n_own--;
			break;
		}
	if (e->n_own == 0) {
		table_delete(r, &r->ips, i);
		free(e);
	}
}

/* Gives @ip (key @ie, in the table) to @e with @claim by the ownership rules. Returns the verdict;
 * on CS_IP_REFUSE nothing changed. */
static enum cs_ip_verdict ip_assign(struct ip_entry *ie, struct node_entry *e, const char *ip,
                                    enum cs_ip_claim claim)
{
	enum cs_ip_verdict v = cs_ip_decide(held_by_others(ie, e, NULL), claim);
	if (v == CS_IP_REFUSE)
		return v;
	if (v == CS_IP_TAKE) {
		/* the others' (weaker or equal header) claims go */
		for (size_t k = 0; k < ie->n_own; k++)
			if (ie->own[k] != e)
				node_forget_ip(ie->own[k], ip);
		ie->n_own = 0;
	}
	bool mine = false;
	for (size_t k = 0; k < ie->n_own; k++)
		if (ie->own[k] == e) {
			mine = true;
			if (claim > ie->claim[k])
				ie->claim[k] = (uint8_t)claim;
		}
	if (!mine && ie->n_own < CS_REGISTRY_MAX_IP_OWNERS) {
		ie->own[ie->n_own] = e;
		ie->claim[ie->n_own++] = (uint8_t)claim;
		mine = true;
	}
	if (!mine)
		return v; /* more sharers than kept: the IP stays ambiguous without this node */
	for (size_t q = 0; q < e->n_ips; q++)
		if (strcmp(e->ips[q], ip) == 0) {
			if (claim > e->claims[q])
				e->claims[q] = (uint8_t)claim;
			return v;
		}
	memcpy(e->ips[e->n_ips], ip, strlen(ip) + 1);
	e->claims[e->n_ips++] = (uint8_t)claim;
	return v;
}

int cs_registry_put(struct cs_registry *r, const char *node, size_t len, const char *const *ips,
                    size_t n_ips, void *value, void **replaced)
{
	uint8_t claims[CS_REGISTRY_MAX_IPS];
	memset(claims, CS_IP_CLAIM_VERIFIED, sizeof claims);
	return cs_registry_put_claims(r, node, len, ips, claims, n_ips, value, replaced);
}

int cs_registry_put_claims(struct cs_registry *r, const char *node, size_t len,
                           const char *const *ips, const uint8_t *claims, size_t n_ips, void *value,
                           void **replaced)
{
	*replaced = NULL;
	if (len == 0 || len > CS_NODE_NAME_MAX_BYTES || value == NULL ||
	    n_ips > CS_REGISTRY_MAX_IPS)
		return -EINVAL;
	for (size_t k = 0; k < n_ips; k++)
		if (ips[k] == NULL || strlen(ips[k]) == 0 ||
		    strlen(ips[k]) > CS_IP_TEXT_MAX_BYTES ||
		    (claims[k] != CS_IP_CLAIM_HEADER && claims[k] != CS_IP_CLAIM_VERIFIED))
			return -EINVAL;
	uint64_t h = keyed_hash(r, node, len);
	size_t i = find_node_slot(r, node, len, h);
	struct node_entry *e = r->nodes.slots[i];
	/* Everything that can fail happens before the registry changes. */
	struct ip_entry *fresh[CS_REGISTRY_MAX_IPS] = {0};
	struct node_entry *created = NULL;
	if (e == NULL) {
		if (r->nodes.count >= r->max_entries)
			return -ENOSPC;
		created = calloc(1, sizeof *created + len + 1);
		if (created == NULL || table_reserve(r, &r->nodes, 1) < 0)
			goto fail;
	}
	for (size_t k = 0; k < n_ips; k++) {
		fresh[k] = calloc(1, sizeof **fresh);
		if (fresh[k] == NULL)
			goto fail;
	}
	if (table_reserve(r, &r->ips, n_ips) < 0) /* room for every IP: inserting cannot fail */
		goto fail;
	if (created) {
		e = created;
		e->hash = h;
		e->name_len = len;
		memcpy(e->name, node, len);
		e->name[len] = '\0';
		i = find_node_slot(r, node, len, h); /* the table may have grown */
		r->nodes.slots[i] = e;
		r->nodes.count++;
	} else {
		*replaced = e->value;
		for (size_t k = 0; k < e->n_ips; k++)
			remove_ip_if(r, e->ips[k], e);
	}
	e->value = value;
	e->n_ips = 0;
	for (size_t k = 0; k < n_ips; k++) {
		size_t il = strlen(ips[k]);
		uint64_t ih = keyed_hash(r, ips[k], il);
		size_t s = find_ip_slot(r, ips[k], il, ih);
		struct ip_entry *ie = r->ips.slots[s];
		if (ie == NULL) {
			ie = fresh[k];
			fresh[k] = NULL;
			ie->hash = ih;
			ie->len = il;
			memcpy(ie->ip, ips[k], il + 1);
			r->ips.slots[s] = ie;
			r->ips.count++;
		}
		if (ip_assign(ie, e, ips[k], (enum cs_ip_claim)claims[k]) == CS_IP_REFUSE &&
		    ie->n_own == 0) {
			/* cannot happen (a fresh key has no holder), but never leave an empty key */
			table_delete(r, &r->ips, s);
			free(ie);
		}
	}
	for (size_t k = 0; k < n_ips; k++)
		free(fresh[k]);
	return 0;
fail:
	for (size_t k = 0; k < n_ips; k++)
		free(fresh[k]);
	free(created);
	return -ENOMEM;
}

bool cs_registry_remove_if(struct cs_registry *r, const char *node, size_t len, const void *value)
{
	if (len == 0 || len > CS_NODE_NAME_MAX_BYTES)
		return false;
	uint64_t h = keyed_hash(r, node, len);
	size_t i = find_node_slot(r, node, len, h);
	struct node_entry *e = r->nodes.slots[i];
	if (e == NULL || e->value != value)
		return false;
	for (size_t k = 0; k < e->n_ips; k++)
		remove_ip_if(r, e->ips[k], e);
	table_delete(r, &r->nodes, i);
	free(e);
	return true;
}

void *cs_registry_get(const struct cs_registry *r, const char *node, size_t len)
{
	if (len == 0 || len > CS_NODE_NAME_MAX_BYTES)
		return NULL;
	const struct node_entry *e =
	        r->nodes.slots[find_node_slot(r, node, len, keyed_hash(r, node, len))];
	return e ? e->value : NULL;
}

void *cs_registry_get_by_ip(const struct cs_registry *r, const char *ip, size_t len,
                            const char **node)
{
	const struct ip_entry *e = ip_lookup(r, ip, len);
	if (e == NULL || e->n_own != 1)
		return NULL; /* nobody's, or shared: no one node is meant */
	if (node)
		*node = e->own[0]->name;
	return e->own[0]->value;
}

size_t cs_registry_ip_owners(const struct cs_registry *r, const char *ip, size_t len,
                             const char **names, size_t cap)
{
	const struct ip_entry *e = ip_lookup(r, ip, len);
	if (e == NULL)
		return 0;
	for (size_t k = 0; k < e->n_own && k < cap; k++)
		names[k] = e->own[k]->name;
	return e->n_own;
}

enum cs_ip_verdict cs_registry_ip_check(const struct cs_registry *r, const char *node, size_t len,
                                        const char *ip, enum cs_ip_claim claim, const char **holder)
{
	const struct ip_entry *ie = ip_lookup(r, ip, strlen(ip));
	const struct node_entry *self = NULL;
	if (len > 0 && len <= CS_NODE_NAME_MAX_BYTES)
		self = r->nodes.slots[find_node_slot(r, node, len, keyed_hash(r, node, len))];
	*holder = NULL;
	return cs_ip_decide(held_by_others(ie, self, holder), claim);
}

int cs_registry_add_ip(struct cs_registry *r, const char *node, size_t len, const void *value,
                       const char *ip, enum cs_ip_claim claim, enum cs_ip_verdict *verdict)
{
	size_t il = strlen(ip);
	if (len == 0 || len > CS_NODE_NAME_MAX_BYTES || il == 0 || il > CS_IP_TEXT_MAX_BYTES)
		return -EINVAL;
	struct node_entry *e =
	        r->nodes.slots[find_node_slot(r, node, len, keyed_hash(r, node, len))];
	if (e == NULL || e->value != value)
		return -ENOENT;
	bool have = false;
	for (size_t q = 0; q < e->n_ips; q++)
		have |= strcmp(e->ips[q], ip) == 0;
	if (!have && e->n_ips >= CS_REGISTRY_MAX_IPS)
		return -EMSGSIZE;
	uint64_t ih = keyed_hash(r, ip, il);
	size_t s = find_ip_slot(r, ip, il, ih);
	struct ip_entry *ie = r->ips.slots[s];
	if (ie == NULL) {
		ie = calloc(1, sizeof *ie);
		if (ie == NULL || table_reserve(r, &r->ips, 1) < 0) {
			free(ie);
			return -ENOMEM;
		}
		ie->hash = ih;
		ie->len = il;
		memcpy(ie->ip, ip, il + 1);
		s = find_ip_slot(r, ip, il, ih); /* the table may have grown */
		r->ips.slots[s] = ie;
		r->ips.count++;
	}
	*verdict = ip_assign(ie, e, ip, claim);
	if (ie->n_own == 0) {
		table_delete(r, &r->ips, s);
		free(ie);
	}
	return 0;
}

size_t cs_registry_count(const struct cs_registry *r)
{
	return r->nodes.count;
}
