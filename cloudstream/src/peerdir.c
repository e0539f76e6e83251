/*
 * cloudstream/src/peerdir.c — the peer directory (peerdir.h): the NODE_UP / NODE_DOWN entry
 * codec and the table of which peer holds which node. Pure code.
 *
 * Two chained hash tables: node name → entry, and IP → entry (a node's IPs live inside its
 * entry, so one allocation per node). Names come from authenticated peers, which took them
 * from verified certificates, so the hash is unseeded FNV-1a. Tables double while entries
 * outnumber buckets (never past what max_entries needs); nothing shrinks.
 */
#include "peerdir.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <stream/frame.h>

/* One IP of a node, chained in the IP table; its text is in the owner's tail. */
struct dip {
	struct dip *next;
	struct dnode *owner;
	const char *ip; /* in owner->tail, not NUL-terminated */
	size_t len;
};

/* One node held by a peer, in one allocation: the header, n_ips struct dip, then the name
 * (NUL-terminated) and the IPs' text. */
struct dnode {
	struct dnode *next; /* in the name table's bucket */
	uint64_t gen_ms;
	uint32_t caps;
	uint16_t slot;  /* the holder's peer slot */
	uint16_t epoch; /* its peer's epoch when last announced (SYNC_END drops the others) */
	uint8_t n_ips;
	uint8_t name_len;
	uint16_t bytes; /* the allocation's size */
	const char *name;
	struct dip ips[];
};

/* A peer: in use while it has a slot. */
struct dpeer {
	bool used;
	bool synced;  /* a SYNC_END arrived since it was added */
	bool syncing; /* between SYNC and SYNC_END */
	uint16_t epoch;
	size_t entries;
	char replica[ST_MAX_REPLICA_ID_BYTES + 1];
};

struct cs_peerdir {
	struct dnode **names;
	struct dip **ipt;
	size_t nbuckets; /* both tables; a power of two */
	size_t entries, max_entries, bytes;
	struct dpeer peers[CS_PEERDIR_MAX_PEERS];
	uint64_t refused, superseded, resync_gone;
};

/* ---- codec --------------------------------------------------------------------------------- */

static bool name_ok(const uint8_t *p, size_t len)
{
	if (len == 0 || len > CS_NODE_NAME_MAX_BYTES)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!((p[i] >= 'a' && p[i] <= 'z') || (p[i] >= '0' && p[i] <= '9') || p[i] == '.' ||
		      p[i] == '-'))
			return false;
	return true;
}

static bool ip_ok(const uint8_t *p, size_t len)
{
	if (len == 0 || len > CS_IP_TEXT_MAX_BYTES)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!((p[i] >= 'a' && p[i] <= 'f') || (p[i] >= 'A' && p[i] <= 'F') ||
		      (p[i] >= '0' && p[i] <= '9') || p[i] == '.' || p[i] == ':'))
			return false;
	return true;
}

/* Appends a uvarint, or fails when it does not fit. */
static bool put_uv(uint8_t *out, size_t cap, size_t *pos, uint64_t v)
{
	if (cap - *pos < st_uvarint_len(v))
		return false;
	*pos += st_uvarint_encode(out + *pos, v);
	return true;
}

static bool put_str(uint8_t *out, size_t cap, size_t *pos, const char *s, size_t len)
{
	if (!put_uv(out, cap, pos, len) || cap - *pos < len)
		return false;
	memcpy(out + *pos, s, len);
	*pos += len;
	return true;
}

ssize_t cs_peerdir_entry_encode(uint8_t *out, size_t cap, bool up, const struct cs_peerdir_entry *e)
{
	if (!name_ok((const uint8_t *)e->node, e->node_len) || e->n_ips > CS_REGISTRY_MAX_IPS)
		return -EINVAL;
	size_t pos = 0;
	if (!put_str(out, cap, &pos, e->node, e->node_len) || !put_uv(out, cap, &pos, e->gen_ms))
		return -EMSGSIZE;
	if (!up)
		return (ssize_t)pos;
	if (!put_uv(out, cap, &pos, e->caps) || !put_uv(out, cap, &pos, e->n_ips))
		return -EMSGSIZE;
	for (size_t i = 0; i < e->n_ips; i++) {
		if (!ip_ok((const uint8_t *)e->ips[i], e->ip_lens[i]))
			return -EINVAL;
		if (!put_str(out, cap, &pos, e->ips[i], e->ip_lens[i]))
			return -EMSGSIZE;
	}
	return (ssize_t)pos;
}

/* Reads a uvarint from a complete buffer: false when cut short or over @max. */
static bool get_uv(const uint8_t *p, size_t len, size_t *pos, uint64_t max, uint64_t *v)
{
	ssize_t n = st_uvarint_decode(p + *pos, len - *pos, v);
	if (n <= 0 || *v > max)
		return false;
	*pos += (size_t)n;
	return true;
}

ssize_t cs_peerdir_entry_decode(const uint8_t *p, size_t len, bool up, struct cs_peerdir_entry *out)
{
	struct cs_peerdir_entry e = {0};
	size_t pos = 0;
	uint64_t v;
	if (!get_uv(p, len, &pos, CS_NODE_NAME_MAX_BYTES, &v) || len - pos < v ||
	    !name_ok(p + pos, (size_t)v))
		return -EBADMSG;
	e.node = (const char *)p + pos;
	e.node_len = (size_t)v;
	pos += (size_t)v;
	if (!get_uv(p, len, &pos, UINT64_MAX, &e.gen_ms))
		return -EBADMSG;
	if (up) {
		if (!get_uv(p, len, &pos, UINT32_MAX, &v))
			return -EBADMSG;
		e.caps = (uint32_t)v;
		if (!get_uv(p, len, &pos, CS_REGISTRY_MAX_IPS, &v))
			return -EBADMSG;
		e.n_ips = (size_t)v;
		for (size_t i = 0; i < e.n_ips; i++) {
			if (!get_uv(p, len, &pos, CS_IP_TEXT_MAX_BYTES, &v) || len - pos < v ||
			    !ip_ok(p + pos, (size_t)v))
				return -EBADMSG;
			e.ips[i] = (const char *)p + pos;
			e.ip_lens[i] = (size_t)v;
			pos += (size_t)v;
		}
	}
	*out = e;
	return (ssize_t)pos;
}

int cs_peerdir_gen_cmp(uint64_t a_ms, const char *a_rep, uint64_t b_ms, const char *b_rep)
{
	if (a_ms != b_ms)
		return a_ms < b_ms ? -1 : 1;
	int c = strcmp(a_rep, b_rep);
	return c < 0 ? -1 : c > 0;
}

/* ---- table --------------------------------------------------------------------------------- */

static size_t hash(const char *p, size_t len)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < len; i++) {
		h ^= (uint8_t)p[i];
		h *= 1099511628211ull;
	}
	return (size_t)(h ^ (h >> 32));
}

int cs_peerdir_new(struct cs_peerdir **out, size_t max_entries)
{
	struct cs_peerdir *d = calloc(1, sizeof *d);
	if (d == NULL)
		return -ENOMEM;
	d->nbuckets = 64;
	d->max_entries = max_entries ? max_entries : 1000000;
	d->names = calloc(d->nbuckets, sizeof *d->names);
	d->ipt = calloc(d->nbuckets, sizeof *d->ipt);
	if (d->names == NULL || d->ipt == NULL) {
		free(d->names);
		free(d->ipt);
		free(d);
		return -ENOMEM;
	}
	d->bytes = sizeof *d + 2 * d->nbuckets * sizeof(void *);
	*out = d;
	return 0;
}

static void ips_unlink(struct cs_peerdir *d, struct dnode *n)
{
	for (size_t i = 0; i < n->n_ips; i++) {
		struct dip **pp = &d->ipt[hash(n->ips[i].ip, n->ips[i].len) & (d->nbuckets - 1)];
		while (*pp && *pp != &n->ips[i])
			pp = &(*pp)->next;
		if (*pp)
			*pp = n->ips[i].next;
	}
}

static void ips_link(struct cs_peerdir *d, struct dnode *n)
{
	for (size_t i = 0; i < n->n_ips; i++) {
		struct dip **b = &d->ipt[hash(n->ips[i].ip, n->ips[i].len) & (d->nbuckets - 1)];
		n->ips[i].next = *b;
		*b = &n->ips[i];
	}
}

static size_t node_bytes(const struct cs_peerdir_entry *e)
{
	size_t n = sizeof(struct dnode) + e->n_ips * sizeof(struct dip) + e->node_len + 1;
	for (size_t i = 0; i < e->n_ips; i++)
		n += e->ip_lens[i];
	return n;
}

static void node_free(struct cs_peerdir *d, struct dnode **link)
{
	struct dnode *n = *link;
	*link = n->next;
	ips_unlink(d, n);
	d->peers[n->slot].entries--;
	d->entries--;
	d->bytes -= n->bytes;
	free(n);
}

void cs_peerdir_free(struct cs_peerdir *d)
{
	if (d == NULL)
		return;
	for (size_t b = 0; b < d->nbuckets; b++)
		while (d->names[b]) {
			struct dnode *n = d->names[b];
			d->names[b] = n->next;
			free(n);
		}
	free(d->names);
	free(d->ipt);
	free(d);
}

/* Doubles both tables while entries outnumber buckets; without memory it stays as it is
 * (longer chains, still correct). */
static void maybe_grow(struct cs_peerdir *d)
{
	if (d->entries < d->nbuckets || d->nbuckets >= d->max_entries)
		return;
	size_t nb = d->nbuckets * 2;
	struct dnode **names = calloc(nb, sizeof *names);
	struct dip **ipt = calloc(nb, sizeof *ipt);
	if (names == NULL || ipt == NULL) {
		free(names);
		free(ipt);
		return;
	}
	for (size_t b = 0; b < d->nbuckets; b++)
		while (d->names[b]) {
			struct dnode *n = d->names[b];
			d->names[b] = n->next;
			struct dnode **nbk = &names[hash(n->name, n->name_len) & (nb - 1)];
			n->next = *nbk;
			*nbk = n;
		}
	free(d->names);
	free(d->ipt);
	d->bytes += 2 * (nb - d->nbuckets) * sizeof(void *);
	d->names = names;
	d->ipt = ipt;
	d->nbuckets = nb;
	for (size_t b = 0; b < nb; b++)
		for (struct dnode *n = names[b]; n; n = n->next)
			ips_link(d, n);
}

static struct dnode **find(const struct cs_peerdir *d, const char *node, size_t len)
{
	struct dnode **pp = &d->names[hash(node, len) & (d->nbuckets - 1)];
	while (*pp && !((*pp)->name_len == len && memcmp((*pp)->name, node, len) == 0))
		pp = &(*pp)->next;
	return pp;
}

int cs_peerdir_peer_add(struct cs_peerdir *d, const char *replica)
{
	size_t len = strlen(replica);
	if (len == 0 || len > ST_MAX_REPLICA_ID_BYTES)
		return -EINVAL;
	int free_slot = -1;
	for (int i = 0; i < CS_PEERDIR_MAX_PEERS; i++) {
		if (d->peers[i].used && strcmp(d->peers[i].replica, replica) == 0)
			return i;
		if (!d->peers[i].used && free_slot < 0)
			free_slot = i;
	}
	if (free_slot < 0)
		return -ENOSPC;
	struct dpeer *p = &d->peers[free_slot];
	memset(p, 0, sizeof *p);
	p->used = true;
	memcpy(p->replica, replica, len + 1);
	return free_slot;
}

int cs_peerdir_peer_find(const struct cs_peerdir *d, const char *replica)
{
	for (int i = 0; i < CS_PEERDIR_MAX_PEERS; i++)
		if (d->peers[i].used && strcmp(d->peers[i].replica, replica) == 0)
			return i;
	return -ENOENT;
}

/* @pp's entry goes: reported first (its name is freed with it). */
static void node_gone(struct cs_peerdir *d, struct dnode **pp, const struct cs_peerdir_cbs *cbs,
                      void *user)
{
	if (cbs && cbs->on_down) {
		const struct dnode *n = *pp;
		struct cs_peerdir_entry e = {.node = n->name,
		                             .node_len = n->name_len,
		                             .gen_ms = n->gen_ms,
		                             .caps = n->caps,
		                             .n_ips = n->n_ips};
		for (size_t i = 0; i < n->n_ips; i++) {
			e.ips[i] = n->ips[i].ip;
			e.ip_lens[i] = n->ips[i].len;
		}
		cbs->on_down(&e, user);
	}
	node_free(d, pp);
}

size_t cs_peerdir_peer_drop(struct cs_peerdir *d, int slot, const struct cs_peerdir_cbs *cbs,
                            void *user)
{
	if (slot < 0 || slot >= CS_PEERDIR_MAX_PEERS || !d->peers[slot].used)
		return 0;
	size_t gone = 0;
	for (size_t b = 0; b < d->nbuckets && d->peers[slot].entries > 0; b++) {
		struct dnode **pp = &d->names[b];
		while (*pp) {
			if ((*pp)->slot == slot) {
				node_gone(d, pp, cbs, user);
				gone++;
			} else {
				pp = &(*pp)->next;
			}
		}
	}
	d->peers[slot].used = false;
	return gone;
}

bool cs_peerdir_peer_synced(const struct cs_peerdir *d, int slot)
{
	return slot >= 0 && slot < CS_PEERDIR_MAX_PEERS && d->peers[slot].used &&
	       d->peers[slot].synced;
}

/* NODE_UP from @slot: stored when newer than what the directory holds for the node. */
static void apply_up(struct cs_peerdir *d, int slot, const struct cs_peerdir_entry *e,
                     const struct cs_peerdir_cbs *cbs, void *user)
{
	struct dpeer *p = &d->peers[slot];
	struct dnode **pp = find(d, e->node, e->node_len);
	struct dnode *old = *pp;
	if (old != NULL && cs_peerdir_gen_cmp(e->gen_ms, p->replica, old->gen_ms,
	                                      d->peers[old->slot].replica) < 0) {
		d->superseded++;
		return;
	}
	if (old == NULL && d->entries >= d->max_entries) {
		d->refused++;
		return;
	}
	size_t bytes = node_bytes(e);
	struct dnode *n = malloc(bytes);
	if (n == NULL) {
		d->refused++;
		return;
	}
	memset(n, 0, sizeof *n);
	n->gen_ms = e->gen_ms;
	n->caps = e->caps;
	n->slot = (uint16_t)slot;
	n->epoch = p->epoch;
	n->bytes = (uint16_t)bytes;
	n->name_len = (uint8_t)e->node_len;
	char *tail = (char *)&n->ips[e->n_ips];
	memcpy(tail, e->node, e->node_len);
	tail[e->node_len] = '\0';
	n->name = tail;
	tail += e->node_len + 1;
	n->n_ips = (uint8_t)e->n_ips;
	for (size_t i = 0; i < e->n_ips; i++) {
		n->ips[i].next = NULL;
		n->ips[i].owner = n;
		n->ips[i].len = e->ip_lens[i];
		memcpy(tail, e->ips[i], e->ip_lens[i]);
		n->ips[i].ip = tail;
		tail += e->ip_lens[i];
	}
	if (old != NULL)
		node_free(d, pp);
	pp = &d->names[hash(n->name, n->name_len) & (d->nbuckets - 1)];
	n->next = *pp;
	*pp = n;
	ips_link(d, n);
	p->entries++;
	d->entries++;
	d->bytes += bytes;
	maybe_grow(d);
	if (cbs && cbs->on_up)
		cbs->on_up(n->name, n->name_len, n->gen_ms, p->replica, user);
}

/* NODE_DOWN from @slot: forgets the node if that peer's announcement of it is what we hold. */
static void apply_down(struct cs_peerdir *d, int slot, const struct cs_peerdir_entry *e,
                       const struct cs_peerdir_cbs *cbs, void *user)
{
	struct dnode **pp = find(d, e->node, e->node_len);
	if (*pp != NULL && (*pp)->slot == slot && (*pp)->gen_ms <= e->gen_ms)
		node_gone(d, pp, cbs, user);
}

/* SYNC_END from @slot: its entries not named since SYNC are gone. */
static void sync_end(struct cs_peerdir *d, int slot, const struct cs_peerdir_cbs *cbs, void *user)
{
	struct dpeer *p = &d->peers[slot];
	for (size_t b = 0; b < d->nbuckets; b++) {
		struct dnode **pp = &d->names[b];
		while (*pp) {
			if ((*pp)->slot == slot && (*pp)->epoch != p->epoch) {
				node_gone(d, pp, cbs, user);
				d->resync_gone++;
			} else {
				pp = &(*pp)->next;
			}
		}
	}
	p->syncing = false;
	p->synced = true;
}

int cs_peerdir_recv(struct cs_peerdir *d, int slot, uint64_t type, const uint8_t *payload,
                    size_t len, const struct cs_peerdir_cbs *cbs, void *user)
{
	if (slot < 0 || slot >= CS_PEERDIR_MAX_PEERS || !d->peers[slot].used)
		return -EINVAL;
	switch (type) {
	case ST_MSG_SYNC:
	case ST_MSG_SYNC_END:
		if (len != 0)
			return -EBADMSG;
		if (type == ST_MSG_SYNC_END) {
			if (!d->peers[slot].syncing)
				return -EBADMSG; /* no list was started */
			sync_end(d, slot, cbs, user);
		} else {
			/* A new epoch: what the list does not name again is stale. */
			d->peers[slot].epoch++;
			d->peers[slot].syncing = true;
		}
		return 0;
	case ST_MSG_NODE_UP:
	case ST_MSG_NODE_DOWN: {
		bool up = type == ST_MSG_NODE_UP;
		size_t pos = 0;
		while (pos < len) {
			struct cs_peerdir_entry e;
			ssize_t n = cs_peerdir_entry_decode(payload + pos, len - pos, up, &e);
			if (n < 0)
				return (int)n;
			pos += (size_t)n;
			if (up)
				apply_up(d, slot, &e, cbs, user);
			else
				apply_down(d, slot, &e, cbs, user);
		}
		return 0;
	}
	default:
		return -EINVAL;
	}
}

static void fill_hit(const struct cs_peerdir *d, const struct dnode *n, struct cs_peerdir_hit *out)
{
	out->slot = n->slot;
	out->replica = d->peers[n->slot].replica;
	out->node = n->name;
	out->gen_ms = n->gen_ms;
	out->caps = n->caps;
}

int cs_peerdir_get(const struct cs_peerdir *d, const char *node, size_t len,
                   struct cs_peerdir_hit *out)
{
	const struct dnode *n = *find(d, node, len);
	if (n == NULL)
		return -ENOENT;
	fill_hit(d, n, out);
	return 0;
}

int cs_peerdir_get_by_ip(const struct cs_peerdir *d, const char *ip, size_t len,
                         struct cs_peerdir_hit *out)
{
	const struct dnode *found = NULL;
	for (const struct dip *p = d->ipt[hash(ip, len) & (d->nbuckets - 1)]; p; p = p->next) {
		if (p->len != len || memcmp(p->ip, ip, len) != 0 || p->owner == found)
			continue;
		if (found != NULL)
			return -ENOTUNIQ;
		found = p->owner;
	}
	if (found == NULL)
		return -ENOENT;
	fill_hit(d, found, out);
	return 0;
}

void cs_peerdir_get_stats(const struct cs_peerdir *d, struct cs_peerdir_stats *out)
{
	memset(out, 0, sizeof *out);
	out->entries = d->entries;
	for (int i = 0; i < CS_PEERDIR_MAX_PEERS; i++)
		out->peers += d->peers[i].used;
	out->bytes = d->bytes;
	out->refused = d->refused;
	out->superseded = d->superseded;
	out->resync_gone = d->resync_gone;
}
