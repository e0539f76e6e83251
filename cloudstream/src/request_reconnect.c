/*
 * cloudstream/src/request_reconnect.c — requests waiting for a node between tunnels
 * (--node-reconnect-grace): a node whose tunnel went a moment ago is marked (recent.h), a
 * request for it waits in srv->reconnect_waiting instead of getting 503, and is routed again
 * when the node is back here or at a peer, or gets its 503 once the grace is over. One timer
 * for all waiting requests; the front door's CONNECT waits share the cap and the tick
 * (door_route.c). Loop thread only.
 */
#include "peer.h"
#include "front.h"

#include <stdio.h>
#include <string.h>

#include <stream/err.h>
#include <stream/log.h>

#include "recent.h"

static void waiting_unlink(struct cs_front *f)
{
	struct cs_server *srv = f->srv;
	if (f->wprev)
		f->wprev->wnext = f->wnext;
	else
		srv->reconnect_waiting = f->wnext;
	if (f->wnext)
		f->wnext->wprev = f->wprev;
	f->wnext = f->wprev = NULL;
	srv->n_reconnect_waiting--;
}

void cs__request_unpark(struct cs_front *f, int outcome)
{
	if (f->state != CS_FRONT_RECONNECT)
		return;
	waiting_unlink(f);
	uint64_t now = st_now_ms();
	f->acc.waited_ms += now > f->rc_parked_ms ? now - f->rc_parked_ms : 0;
	f->rc_outcome = outcome;
	f->state = CS_FRONT_HEAD;
	if (outcome != CS_RECONNECT_GAVE_UP) /* that one is counted with its 503 */
		f->srv->m.reconnect_waits[outcome]++;
}

/* Ticks while any request waits: those whose node's grace is over are routed again (and get
 * their 503); marks past the grace are forgotten. One timer for all of them. */
static void on_reconnect_tick(lws_sorted_usec_list_t *sul)
{
	struct cs_server *srv = lws_container_of(sul, struct cs_server, sul_reconnect);
	uint64_t now = st_now_ms(), grace = srv->cfg.node_reconnect_grace_ms;
	cs_recent_expire(srv->recent, now, grace);
	struct cs_front *due = NULL;
	for (struct cs_front *f = srv->reconnect_waiting, *n; f; f = n) {
		n = f->wnext;
		uint64_t down = cs_recent_get(srv->recent, f->node, strlen(f->node));
		if (cs_reconnect_decide(down, f->rc_since_ms, now, grace, 0, 1) ==
		    CS_RECONNECT_WAIT)
			continue;
		cs__request_unpark(f, CS_RECONNECT_GAVE_UP);
		f->wnext = due; /* routed below, outside the walk */
		due = f;
	}
	while (due) {
		struct cs_front *f = due;
		due = f->wnext;
		f->wnext = NULL;
		cs__front_process(f);
	}
	cs_door_reconnect_tick(srv, now);
	if (srv->n_reconnect_waiting)
		lws_sul_schedule(srv->ctx, 0, &srv->sul_reconnect, on_reconnect_tick,
		                 CS_RECONNECT_TICK_MS * LWS_US_PER_MS);
}

bool cs_reconnect_should_wait(struct cs_server *srv, const char *key, uint64_t *since_ms,
                              uint64_t waited_ms, char *note, size_t cap)
{
	uint64_t now = st_now_ms(), grace = srv->cfg.node_reconnect_grace_ms;
	note[0] = '\0';
	if (srv->recent == NULL)
		return false;
	cs_recent_expire(srv->recent, now, grace);
	uint64_t down = cs_recent_get(srv->recent, key, strlen(key));
	switch (cs_reconnect_decide(down, *since_ms, now, grace, srv->n_reconnect_waiting,
	                            (size_t)srv->cfg.node_reconnect_waiting_max)) {
	case CS_RECONNECT_NO:
		return false;
	case CS_RECONNECT_FULL:
		srv->m.reconnect_waits[CS_RECONNECT_REFUSED]++;
		snprintf(note, cap,
		         "; its tunnel went %llu ms ago, but %zu requests wait for edge nodes to "
		         "reconnect already (--node-reconnect-waiting-max)",
		         (unsigned long long)(now - down), srv->n_reconnect_waiting);
		return false;
	case CS_RECONNECT_EXPIRED:
		srv->m.reconnect_waits[CS_RECONNECT_GAVE_UP]++;
		snprintf(note, cap,
		         "; waited %llu ms for it to reconnect (--node-reconnect-grace %llu ms "
		         "after its tunnel went)",
		         (unsigned long long)waited_ms, (unsigned long long)grace);
		return false;
	case CS_RECONNECT_WAIT:
		break;
	}
	if (*since_ms == 0) {
		*since_ms = now;
		st_log(ST_LOG_DEBUG, key, 0,
		       "request waits for the node to reconnect (its tunnel went %llu ms ago)",
		       (unsigned long long)(now - down));
	}
	if (srv->n_reconnect_waiting++ == 0)
		lws_sul_schedule(srv->ctx, 0, &srv->sul_reconnect, on_reconnect_tick,
		                 CS_RECONNECT_TICK_MS * LWS_US_PER_MS);
	return true;
}

/* @node is connected nowhere: does the request wait for the node's redial? true: it waits
 * (CS_FRONT_RECONNECT, the head kept in f->in). false: it is answered 503 now, and @note says
 * why when it waited or could not (else ""). */
bool cs__request_park(struct cs_front *f, const char *node, bool by_ip, char *note, size_t cap)
{
	struct cs_server *srv = f->srv;
	if (!cs_reconnect_should_wait(srv, node, &f->rc_since_ms, f->acc.waited_ms, note, cap))
		return false;
	f->rc_parked_ms = st_now_ms();
	f->rc_by_ip = by_ip;
	f->state = CS_FRONT_RECONNECT;
	f->wprev = NULL;
	f->wnext = srv->reconnect_waiting;
	if (f->wnext)
		f->wnext->wprev = f;
	srv->reconnect_waiting = f;
	return true;
}

void cs_front_node_gone(struct cs_server *srv, const char *node, size_t len, const char *const *ips,
                        const size_t *ip_lens, size_t n_ips)
{
	if (srv->recent == NULL || srv->cfg.node_reconnect_grace_ms == 0)
		return;
	uint64_t now = st_now_ms();
	cs_recent_expire(srv->recent, now, srv->cfg.node_reconnect_grace_ms);
	int rc = cs_recent_mark(srv->recent, node, len, now);
	/* A DNAT'd request names the node by its IP: the IPs are marked as keys too. */
	for (size_t i = 0; i < n_ips && rc == 0; i++)
		rc = cs_recent_mark(srv->recent, ips[i], ip_lens[i], now);
	if (rc < 0)
		st_log(ST_LOG_DEBUG, NULL, 0, "node %.*s not marked as reconnecting: %s", (int)len,
		       node, st_strerror(rc));
}

void cs_front_node_gone_csv(struct cs_server *srv, const char *node, const char *ips_csv)
{
	const char *ips[CS_REGISTRY_MAX_IPS];
	size_t lens[CS_REGISTRY_MAX_IPS], n = 0;
	for (const char *s = ips_csv; s && *s && n < CS_REGISTRY_MAX_IPS;) {
		size_t l = strcspn(s, ",");
		if (l > 0) {
			ips[n] = s;
			lens[n++] = l;
		}
		s += l + (s[l] == ',');
	}
	cs_front_node_gone(srv, node, strlen(node), ips, lens, n);
}

/* Does @node's coming back end @f's wait? By name; by IP once that IP is routable again. */
static bool back_for(struct cs_front *f, const char *node, size_t len)
{
	struct cs_server *srv = f->srv;
	size_t fl = strlen(f->node);
	if (!f->rc_by_ip)
		return fl == len && memcmp(f->node, node, len) == 0;
	const char *owner;
	uint32_t caps;
	return cs_registry_get_by_ip(srv->reg, f->node, fl, NULL) != NULL ||
	       (srv->peers && cs_peer_lookup_ip(srv, f->node, fl, &owner, &caps) != NULL);
}

void cs_front_node_back(struct cs_server *srv, const char *node, size_t len)
{
	if (srv->n_reconnect_waiting == 0)
		return;
	cs_door_node_back(srv, node, len);
	int outcome = cs_registry_get(srv->reg, node, len) ? CS_RECONNECT_BACK_LOCAL
	                                                   : CS_RECONNECT_BACK_PEER;
	for (struct cs_front *f = srv->reconnect_waiting, *n; f; f = n) {
		n = f->wnext;
		if (!back_for(f, node, len))
			continue;
		f->fwd_refused_by = NULL; /* the directory is fresh: any holder may be tried */
		cs__request_unpark(f, outcome);
		/* Routed again from WRITEABLE (the kept head is parsed there), exactly as if it
		 * had just come: not inside the tunnel's or the peer link's callback. */
		lws_callback_on_writable(f->wsi);
	}
}
