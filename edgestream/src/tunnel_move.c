/*
 * edgestream/src/tunnel_move.c — moving to another cloud replica (RECONNECT from a draining
 * cloud, PROTOCOL.md §5.6), make before break: a second tunnel is dialled (a spare one reused,
 * else a new one) while this one keeps its streams; once the new one is up, the retiring one
 * closes when it carries no stream. Loop thread only.
 *
 * The seam: the only code that makes an instance hold two tunnels at once; tunnel.c and
 * tunnel_dial.c serve any one tunnel and only look at the flags (retiring, spare) it sets.
 */
#include "tunnel.h"

#include <stddef.h>

#include <stream/log.h>

#include "relay.h"

/* ---- moving to another replica (RECONNECT, PROTOCOL.md §5.6) --------------------------- */

/* A retiring tunnel closes once another tunnel is up and it carried no stream for this long. */
#define ES_RETIRE_IDLE_MS 1000u

/* A retiring tunnel closes once another tunnel is up and it carries no stream. */
static void on_retire_check(lws_sorted_usec_list_t *sul)
{
	struct es_tunnel *t = lws_container_of(sul, struct es_tunnel, sul_retire);
	if (!t->retiring || t->wsi == NULL || !t->connected || t->streams != NULL)
		return;
	for (const struct es_tunnel *o = t->es->tunnels; o; o = o->next)
		if (o != t && o->connected && !o->retiring) {
			es_tunnel_close(t, 0, "moved to a new tunnel, no stream left on this one");
			return;
		}
}

void es_tunnel_stream_ended(struct es_tunnel *t)
{
	/* From a timer: a stream ends inside session and socket callbacks. Not at once: a cloud
	 * replica with peers closes the old tunnel itself once its peers know of the new one
	 * (it alone knows when no request is on its way to it); this is for one without. */
	if (t->retiring)
		lws_sul_schedule(t->es->ctx, 0, &t->sul_retire, on_retire_check,
		                 (lws_usec_t)ES_RETIRE_IDLE_MS * LWS_US_PER_MS);
}

void es__tunnel_on_reconnect(struct st_session *s, uint64_t drain_ms, void *user)
{
	(void)s;
	struct es_tunnel *t = user;
	struct edgestream *es = t->es;
	if (t->retiring || es->stopped)
		return;
	struct es_tunnel *n;
	for (n = es->tunnels; n; n = n->next)
		if (n->spare)
			break;
	if (n == NULL && es_tunnel_new(&n, es, t->backoff.rng ^ st_now_ms()) < 0) {
		st_warn("the cloud asked to move to another replica; no memory for a second "
		        "tunnel: staying until it closes");
		return;
	}
	n->spare = false;
	n->round_fails = 0;
	n->move_fails = 0;
	es_backoff_reset(&n->backoff);
	n->url_i = es->n_urls > 0 ? (t->url_i + 1) % es->n_urls : 0;
	t->retiring = true;
	es->m.reconnects_asked++;
	size_t open = 0;
	for (const struct es_stream *st = t->streams; st; st = st->next)
		open++;
	st_info("cloud replica %s is draining (for up to %llu ms): dialling a new tunnel; this one "
	        "closes once that one is up and its %zu streams ended",
	        t->replica[0] ? t->replica : "?", (unsigned long long)drain_ms, open);
	es_tunnel_schedule_dial(n, 0);
}
