/*
 * edgestream/src/stats.c — the instance's stats (edgestream_get_stats, published for other
 * threads) and what the admin endpoints serve: /metrics and /readyz (stream/admin.h).
 */
#include "es.h"

#include <stdio.h>
#include <string.h>

#include <stream/admin.h>

#include "es_config.h"
#include "tunnel.h"

/* ---- stats and admin ------------------------------------------------------------------- */

/* Whether a tunnel is up (and the first one up speaks the extensions). */
static bool any_up(const struct edgestream *es, bool *extended)
{
	for (const struct es_tunnel *t = es->tunnels; t; t = t->next)
		if (t->connected) {
			if (extended)
				*extended = t->extended;
			return true;
		}
	return false;
}

void es_publish_stats(struct edgestream *es)
{
	bool extended = false;
	es->m.connected = any_up(es, &extended);
	es->m.extended = extended;
	es->m.removes_answered = es->session_totals.removes_answered;
	es->m.removes_crossed = es->session_totals.removes_crossed;
	es->m.removes_repeated = es->session_totals.removes_repeated;
	pthread_mutex_lock(&es->stats_lock);
	es->stats = es->m;
	pthread_mutex_unlock(&es->stats_lock);
}

void edgestream_get_stats(struct edgestream *es, struct edgestream_stats *out)
{
	pthread_mutex_lock(&es->stats_lock);
	*out = es->stats;
	pthread_mutex_unlock(&es->stats_lock);
}

void es_render_metrics(struct st_text *t, void *user)
{
	struct edgestream *es = user;
	es_publish_stats(es);
	const struct edgestream_stats *m = &es->m;
	st_text_build_info(t, "edgestream", es_config_spec.version);
	st_text_metric(t, "edgestream_tunnel_connected", "gauge",
	               "1 while the tunnel to the cloud is up.");
	st_text_put(t, "edgestream_tunnel_connected{protocol=\"%s\"} %d\n",
	            m->extended ? "extended" : "base", m->connected ? 1 : 0);
	st_text_metric(t, "edgestream_tunnel_dials_total", "counter",
	               "Attempts to reach the cloud.");
	st_text_put(t, "edgestream_tunnel_dials_total %llu\n", (unsigned long long)m->dials_total);
	st_text_metric(t, "edgestream_tunnel_connects_total", "counter", "Tunnels that came up.");
	st_text_put(t, "edgestream_tunnel_connects_total %llu\n",
	            (unsigned long long)m->connects_total);
	st_text_metric(t, "edgestream_tunnel_disconnects_total", "counter",
	               "Tunnels that went down.");
	st_text_put(t, "edgestream_tunnel_disconnects_total %llu\n",
	            (unsigned long long)m->disconnects_total);
	st_text_metric(t, "edgestream_streams", "gauge", "Streams open now.");
	st_text_put(t, "edgestream_streams %llu\n", (unsigned long long)m->streams_open);
	st_text_metric(t, "edgestream_streams_total", "counter", "Streams the cloud opened.");
	st_text_put(t, "edgestream_streams_total %llu\n", (unsigned long long)m->streams_total);
	st_text_metric(t, "edgestream_streams_refused_total", "counter",
	               "Streams refused: outside the allow-list, malformed, over a limit.");
	st_text_put(t, "edgestream_streams_refused_total %llu\n",
	            (unsigned long long)m->streams_refused);
	st_text_metric(t, "edgestream_backend_failures_total", "counter",
	               "Backends unreachable, timed out or failing TLS.");
	st_text_put(t, "edgestream_backend_failures_total %llu\n",
	            (unsigned long long)m->backend_failures);
	st_text_metric(t, "edgestream_stream_bytes_total", "counter",
	               "Stream bytes relayed, by direction.");
	st_text_put(t, "edgestream_stream_bytes_total{direction=\"to_cloud\"} %llu\n",
	            (unsigned long long)m->bytes_to_cloud);
	st_text_put(t, "edgestream_stream_bytes_total{direction=\"from_cloud\"} %llu\n",
	            (unsigned long long)m->bytes_from_cloud);
	st_text_metric(t, "edgestream_cert_reloads_total", "counter",
	               "Certificate files re-read after they changed.");
	st_text_put(t, "edgestream_cert_reloads_total %llu\n", (unsigned long long)m->cert_reloads);
	es_certs_render_metrics(es, t);
	st_text_metric(t, "edgestream_tunnel_pauses_total", "counter",
	               "Base protocol only: tunnel reading paused for a slow backend.");
	st_text_put(t, "edgestream_tunnel_pauses_total %llu\n",
	            (unsigned long long)m->tunnel_pauses);
	st_text_metric(
	        t, "edgestream_streams_refused_by_session_total", "counter",
	        "Streams refused before any backend: past --max-streams (limit), or their first "
	        "window and their queue toward the cloud did not fit --process-buffer-bytes "
	        "(budget).");
	st_text_put(t, "edgestream_streams_refused_by_session_total{reason=\"limit\"} %llu\n",
	            (unsigned long long)es->session_totals.refused_limit);
	st_text_put(t, "edgestream_streams_refused_by_session_total{reason=\"budget\"} %llu\n",
	            (unsigned long long)es->session_totals.refused_budget);
	st_text_metric(t, "edgestream_buffered_bytes", "gauge",
	               "--process-buffer-bytes in use: every stream's credit window and its "
	               "reserved queue toward the cloud.");
	st_text_put(t, "edgestream_buffered_bytes %llu\n",
	            (unsigned long long)es->budget.used_bytes);
	st_text_metric(t, "edgestream_buffered_bytes_peak", "gauge",
	               "The most edgestream_buffered_bytes has been since start.");
	st_text_put(t, "edgestream_buffered_bytes_peak %llu\n",
	            (unsigned long long)es->budget.peak_bytes);
	st_text_metric(t, "edgestream_kubelet_tls_resumption_refused_total", "counter",
	               "Kubelet TLS handshakes the kubelet failed instead of resuming the offered "
	               "session; the request went again with a full handshake.");
	st_text_put(t, "edgestream_kubelet_tls_resumption_refused_total %llu\n",
	            (unsigned long long)m->kubelet_resumption_refused);
	st_text_metric(t, "edgestream_stream_stall_cuts_total", "counter",
	               "Streams from base-protocol clouds cut because their backend took nothing "
	               "for --stall-timeout while the tunnel was paused for them.");
	st_text_put(t, "edgestream_stream_stall_cuts_total %llu\n",
	            (unsigned long long)m->stall_cuts);
	st_text_session_totals(t, "edgestream", &es->session_totals);
}

bool es_ready(void *user, const char **why)
{
	struct edgestream *es = user;
	*why = "the tunnel to the cloud is down";
	return any_up(es, NULL);
}
