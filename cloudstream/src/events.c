/*
 * cloudstream/src/events.c — the Node events' correlator and rate limits (events.h). Pure:
 * times in, calls out; the table is a fixed array scanned linearly (256 keys: a scan costs less
 * than the one call it decides).
 */
#include "events.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

struct key {
	bool used;
	bool in_flight; /* a call for it is on the worker pool */
	bool posted;    /* the apiserver has the Event named @name */
	uint8_t reason;
	char node[254];
	char message[CS_EVENTS_MESSAGE_MAX];
	char name[CS_EVENTS_NAME_MAX + 1];
	uint32_t count;      /* occurrences since the Event was (to be) created */
	uint32_t sent_count; /* what the apiserver has */
	uint32_t call_count; /* the count of the call in flight */
	uint64_t first_s, last_s;
	uint64_t next_call_ms; /* not before */
	uint64_t seen_ms;      /* last occurrence: the eviction order */
	uint64_t call_id;
};

struct flap {
	char node[254];
	uint64_t ups[CS_EVENTS_FLAP_UPS]; /* the last ups, [0] newest; 0 = none */
};

struct cs_events {
	struct key keys[CS_EVENTS_MAX_KEYS];
	struct flap flaps[CS_EVENTS_MAX_KEYS];
	unsigned flap_next; /* round-robin replacement */
	uint64_t next_id;
	/* the process-wide token bucket, in milli-tokens */
	uint64_t tokens_milli, refilled_ms;
	bool bucket_started;
	struct cs_events_stats st;
};

const char *cs_event_reason_name(enum cs_event_reason r)
{
	return r == CS_EVENT_TUNNEL_FLAPPING ? "TunnelFlapping" : "TunnelRefused";
}

int cs_events_new(struct cs_events **out)
{
	*out = calloc(1, sizeof **out);
	return *out ? 0 : -ENOMEM;
}

void cs_events_free(struct cs_events *ev)
{
	free(ev);
}

static void copy(char *dst, size_t cap, const char *src)
{
	size_t n = strlen(src);
	if (n >= cap)
		n = cap - 1;
	memcpy(dst, src, n);
	dst[n] = '\0';
}

int cs_events_note(struct cs_events *ev, const char *node, enum cs_event_reason reason,
                   const char *message, uint64_t now_ms, uint64_t wall_ns)
{
	if (node == NULL || node[0] == '\0' || strlen(node) >= sizeof ev->keys[0].node ||
	    (unsigned)reason >= CS_EVENT_REASON_COUNT)
		return -EINVAL;
	struct key *k = NULL, *victim = NULL;
	for (size_t i = 0; i < CS_EVENTS_MAX_KEYS && k == NULL; i++) {
		struct key *c = &ev->keys[i];
		if (c->used && c->reason == reason && strcmp(c->node, node) == 0)
			k = c;
		else if (!c->used)
			victim = victim && !victim->used ? victim : c; /* the first free slot */
		else if (!c->in_flight &&
		         (victim == NULL || (victim->used && c->seen_ms < victim->seen_ms)))
			victim = c; /* else the least recently seen idle key */
	}
	if (k == NULL) {
		if (victim == NULL) {
			ev->st.dropped++;
			return -ENOSPC;
		}
		if (victim->used)
			ev->st.dropped += victim->count - victim->sent_count; /* never sent */
		k = victim;
		memset(k, 0, sizeof *k);
		k->used = true;
		k->reason = (uint8_t)reason;
		copy(k->node, sizeof k->node, node);
		k->first_s = wall_ns / 1000000000u;
		k->next_call_ms = now_ms;
		snprintf(k->name, sizeof k->name, "%s.%llx", node, (unsigned long long)wall_ns);
	}
	k->count++;
	k->last_s = wall_ns / 1000000000u;
	k->seen_ms = now_ms;
	copy(k->message, sizeof k->message, message ? message : "");
	return 0;
}

unsigned cs_events_tunnel_up(struct cs_events *ev, const char *node, uint64_t now_ms,
                             uint64_t wall_ns)
{
	if (node == NULL || node[0] == '\0' || strlen(node) >= sizeof ev->flaps[0].node)
		return 0;
	struct flap *f = NULL;
	for (size_t i = 0; i < CS_EVENTS_MAX_KEYS && f == NULL; i++)
		if (strcmp(ev->flaps[i].node, node) == 0)
			f = &ev->flaps[i];
	if (f == NULL) {
		/* a free slot, else the one whose newest up is oldest */
		for (size_t i = 0; i < CS_EVENTS_MAX_KEYS; i++) {
			struct flap *c = &ev->flaps[i];
			if (c->node[0] == '\0') {
				f = c;
				break;
			}
			if (f == NULL || c->ups[0] < f->ups[0])
				f = c;
		}
		memset(f, 0, sizeof *f);
		copy(f->node, sizeof f->node, node);
	}
	memmove(&f->ups[1], &f->ups[0], sizeof f->ups - sizeof f->ups[0]);
	f->ups[0] = now_ms ? now_ms : 1;
	unsigned n = 0;
	for (size_t i = 0; i < CS_EVENTS_FLAP_UPS; i++)
		if (f->ups[i] && now_ms - f->ups[i] < CS_EVENTS_FLAP_WINDOW_MS)
			n++;
	if (n >= CS_EVENTS_FLAP_UPS) {
		char msg[96];
		snprintf(msg, sizeof msg, "the node's tunnel came up %u times within %u minutes", n,
		         CS_EVENTS_FLAP_WINDOW_MS / 60000u);
		cs_events_note(ev, node, CS_EVENT_TUNNEL_FLAPPING, msg, now_ms, wall_ns);
	}
	return n;
}

/* Takes one call's token from the process-wide bucket: false when it is empty. */
static bool take_token(struct cs_events *ev, uint64_t now_ms)
{
	const uint64_t cap = (uint64_t)CS_EVENTS_BURST * 1000u;
	if (!ev->bucket_started) {
		ev->bucket_started = true;
		ev->tokens_milli = cap;
		ev->refilled_ms = now_ms;
	}
	if (now_ms > ev->refilled_ms) {
		uint64_t add = (now_ms - ev->refilled_ms) * CS_EVENTS_PER_S;
		ev->tokens_milli = ev->tokens_milli + add > cap ? cap : ev->tokens_milli + add;
		ev->refilled_ms = now_ms;
	}
	if (ev->tokens_milli < 1000u)
		return false;
	ev->tokens_milli -= 1000u;
	return true;
}

int cs_events_next(struct cs_events *ev, uint64_t now_ms, struct cs_event_call *out)
{
	struct key *due = NULL;
	for (size_t i = 0; i < CS_EVENTS_MAX_KEYS; i++) {
		struct key *k = &ev->keys[i];
		if (k->used && !k->in_flight && k->count > k->sent_count &&
		    now_ms >= k->next_call_ms &&
		    (due == NULL || k->next_call_ms < due->next_call_ms))
			due = k;
	}
	if (due == NULL || !take_token(ev, now_ms))
		return 0;
	due->in_flight = true;
	due->call_id = ++ev->next_id;
	due->call_count = due->count;
	*out = (struct cs_event_call){
	        .id = due->call_id,
	        .create = !due->posted,
	        .node = due->node,
	        .name = due->name,
	        .reason = cs_event_reason_name((enum cs_event_reason)due->reason),
	        .message = due->message,
	        .count = due->count,
	        .first_s = due->first_s,
	        .last_s = due->last_s,
	};
	return 1;
}

void cs_events_done(struct cs_events *ev, uint64_t id, int result, uint64_t now_ms)
{
	struct key *k = NULL;
	for (size_t i = 0; i < CS_EVENTS_MAX_KEYS && k == NULL; i++)
		if (ev->keys[i].used && ev->keys[i].in_flight && ev->keys[i].call_id == id)
			k = &ev->keys[i];
	if (k == NULL)
		return;
	k->in_flight = false;
	if (result == 0) {
		k->posted ? ev->st.patched++ : ev->st.created++;
		k->posted = true;
		k->sent_count = k->call_count;
		k->next_call_ms = now_ms + CS_EVENTS_KEY_INTERVAL_MS;
	} else if (result == -ENOENT && k->posted) {
		/* Expired: a new Event starts from the occurrences not yet told (client-go
		 * creates it again with the counts it has; ours start over at what is new). */
		k->posted = false;
		k->count -= k->sent_count;
		k->sent_count = 0;
		k->first_s = k->last_s;
		char *dot = strrchr(k->name, '.');
		if (dot)
			snprintf(dot, sizeof k->name - (size_t)(dot - k->name), ".%llx",
			         (unsigned long long)(k->last_s * 1000000000u + id));
		k->next_call_ms = now_ms;
	} else {
		ev->st.failed++;
		k->next_call_ms = now_ms + CS_EVENTS_RETRY_MS;
	}
}

void cs_events_stats(const struct cs_events *ev, struct cs_events_stats *out)
{
	*out = ev->st;
}

/* RFC 3339 in UTC, seconds: metav1.Time's form. */
static void rfc3339(char *buf, size_t cap, uint64_t s)
{
	time_t t = (time_t)s;
	struct tm tm;
	if (gmtime_r(&t, &tm) == NULL || strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
		copy(buf, cap, "1970-01-01T00:00:00Z");
}

ssize_t cs_events_body(const struct cs_event_call *call, const char *component, const char *host,
                       char *out, size_t cap)
{
	char first[32], last[32];
	rfc3339(first, sizeof first, call->first_s);
	rfc3339(last, sizeof last, call->last_s);
	struct json_object *o = json_object_new_object();
	if (o == NULL)
		return -ENOMEM;
	if (call->create) {
		struct json_object *meta = json_object_new_object(),
		                   *inv = json_object_new_object(), *src = json_object_new_object();
		json_object_object_add(o, "kind", json_object_new_string("Event"));
		json_object_object_add(o, "apiVersion", json_object_new_string("v1"));
		json_object_object_add(meta, "name", json_object_new_string(call->name));
		json_object_object_add(meta, "namespace", json_object_new_string("default"));
		json_object_object_add(o, "metadata", meta);
		json_object_object_add(inv, "kind", json_object_new_string("Node"));
		json_object_object_add(inv, "name", json_object_new_string(call->node));
		json_object_object_add(inv, "uid", json_object_new_string(call->node));
		json_object_object_add(inv, "apiVersion", json_object_new_string("v1"));
		json_object_object_add(o, "involvedObject", inv);
		json_object_object_add(o, "reason", json_object_new_string(call->reason));
		json_object_object_add(o, "message", json_object_new_string(call->message));
		json_object_object_add(src, "component", json_object_new_string(component));
		if (host && host[0])
			json_object_object_add(src, "host", json_object_new_string(host));
		json_object_object_add(o, "source", src);
		json_object_object_add(o, "firstTimestamp", json_object_new_string(first));
		json_object_object_add(o, "lastTimestamp", json_object_new_string(last));
		json_object_object_add(o, "count", json_object_new_int64((int64_t)call->count));
		json_object_object_add(o, "type", json_object_new_string("Warning"));
		json_object_object_add(o, "reportingComponent", json_object_new_string(component));
		json_object_object_add(o, "reportingInstance",
		                       json_object_new_string(host ? host : ""));
	} else {
		json_object_object_add(o, "count", json_object_new_int64((int64_t)call->count));
		json_object_object_add(o, "lastTimestamp", json_object_new_string(last));
		json_object_object_add(o, "message", json_object_new_string(call->message));
	}
	size_t len = 0;
	const char *s = json_object_to_json_string_length(o, JSON_C_TO_STRING_PLAIN, &len);
	ssize_t rc;
	if (s == NULL)
		rc = -ENOMEM;
	else if (len >= cap)
		rc = -EMSGSIZE;
	else {
		memcpy(out, s, len + 1);
		rc = (ssize_t)len;
	}
	json_object_put(o);
	return rc;
}
