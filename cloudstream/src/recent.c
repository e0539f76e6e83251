/*
 * cloudstream/src/recent.c — nodes whose tunnel went recently (recent.h).
 *
 * The registry (registry.h) is the index: node name → the node's latest mark, a record that
 * also sits in a list in the order marks were made. Expiry pops that list's head while it is
 * older than the grace; a record a newer mark of the same node replaced is only freed then
 * (the compare-and-delete leaves the index alone).
 */
#include "recent.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "registry.h"

struct mark {
	struct mark *next; /* the next younger mark */
	uint64_t at_ms;
	size_t len;
	char node[]; /* not NUL-terminated */
};

struct cs_recent {
	struct cs_registry *index; /* name → its latest struct mark */
	struct mark *head, *tail;  /* oldest first */
};

int cs_recent_new(struct cs_recent **out, size_t max_entries, uint64_t seed)
{
	struct cs_recent *r = calloc(1, sizeof *r);
	if (r == NULL)
		return -ENOMEM;
	int rc = cs_registry_new(&r->index, max_entries, seed);
	if (rc < 0) {
		free(r);
		return rc;
	}
	*out = r;
	return 0;
}

void cs_recent_free(struct cs_recent *r)
{
	if (r == NULL)
		return;
	for (struct mark *m = r->head, *n; m; m = n) {
		n = m->next;
		free(m);
	}
	cs_registry_free(r->index);
	free(r);
}

int cs_recent_mark(struct cs_recent *r, const char *node, size_t len, uint64_t now_ms)
{
	if (len == 0 || len > CS_NODE_NAME_MAX_BYTES)
		return -EINVAL;
	struct mark *m = malloc(sizeof *m + len);
	if (m == NULL)
		return -ENOMEM;
	m->next = NULL;
	m->at_ms = now_ms ? now_ms : 1; /* 0 means "not marked" */
	m->len = len;
	memcpy(m->node, node, len);
	void *old = NULL;
	int rc = cs_registry_put(r->index, node, len, NULL, 0, m, &old);
	if (rc < 0) {
		free(m);
		return rc;
	}
	/* A replaced mark stays in the list until it expires: the list is in time order. */
	if (r->tail)
		r->tail->next = m;
	else
		r->head = m;
	r->tail = m;
	return 0;
}

uint64_t cs_recent_get(const struct cs_recent *r, const char *node, size_t len)
{
	if (len == 0 || len > CS_NODE_NAME_MAX_BYTES)
		return 0;
	const struct mark *m = cs_registry_get(r->index, node, len);
	return m ? m->at_ms : 0;
}

size_t cs_recent_expire(struct cs_recent *r, uint64_t now_ms, uint64_t grace_ms)
{
	size_t gone = 0;
	while (r->head && r->head->at_ms + grace_ms <= now_ms) {
		struct mark *m = r->head;
		r->head = m->next;
		if (r->head == NULL)
			r->tail = NULL;
		gone += cs_registry_remove_if(r->index, m->node, m->len, m);
		free(m);
	}
	return gone;
}

size_t cs_recent_count(const struct cs_recent *r)
{
	return cs_registry_count(r->index);
}

enum cs_reconnect_verdict cs_reconnect_decide(uint64_t down_ms, uint64_t waiting_since_ms,
                                              uint64_t now_ms, uint64_t grace_ms, size_t waiting,
                                              size_t cap)
{
	if (grace_ms == 0 || (down_ms == 0 && waiting_since_ms == 0))
		return CS_RECONNECT_NO;
	/* A waiting request whose mark expired (or was never made again) ends as expired. */
	if (down_ms == 0 || now_ms >= cs_reconnect_deadline_ms(down_ms, grace_ms))
		return waiting_since_ms ? CS_RECONNECT_EXPIRED : CS_RECONNECT_NO;
	if (waiting_since_ms == 0 && waiting >= cap)
		return CS_RECONNECT_FULL;
	return CS_RECONNECT_WAIT;
}
