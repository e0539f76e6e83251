/*
 * edgestream/src/stats.c — the instance's stats (published for other threads: embed.c's
 * threads) and what the admin endpoints serve: /metrics and /readyz (stream/admin.h).
 */
#include "es.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <stream/admin.h>
#include <stream/query.h>

#include "es_config.h"
#include "relay.h"
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

/* Host names resolved on the workers (resolve.h), by name (the cloud's summed over its
 * --cloud-url entries) and result. IP literals are never resolved and count nothing. */
static void render_resolutions(struct st_text *t, const struct edgestream *es)
{
	uint64_t cloud_ok = 0, cloud_failed = 0;
	for (size_t i = 0; i < es->n_urls; i++) {
		cloud_ok += es->cloud_dns[i].resolves_ok;
		cloud_failed += es->cloud_dns[i].resolves_failed;
	}
	st_text_metric(t, "edgestream_name_resolutions_total", "counter",
	               "Host names resolved on a worker (never on the loop): the cloud's "
	               "(--cloud-url) and the kubelet's (--kubelet-url), by result; a failure "
	               "fails the dials that waited on it (the kubelet's streams with ERROR "
	               "unreachable).");
	st_text_put(t,
	            "edgestream_name_resolutions_total{name=\"cloud\",result=\"ok\"} %llu\n"
	            "edgestream_name_resolutions_total{name=\"cloud\",result=\"failed\"} %llu\n"
	            "edgestream_name_resolutions_total{name=\"kubelet\",result=\"ok\"} %llu\n"
	            "edgestream_name_resolutions_total{name=\"kubelet\",result=\"failed\"} "
	            "%llu\n",
	            (unsigned long long)cloud_ok, (unsigned long long)cloud_failed,
	            (unsigned long long)es->kubelet_dns.resolves_ok,
	            (unsigned long long)es->kubelet_dns.resolves_failed);
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
	st_text_counter(t, "edgestream_tunnel_dials_total", "Attempts to reach the cloud.",
	                m->dials_total);
	render_resolutions(t, es);
	st_text_counter(t, "edgestream_tunnel_connects_total", "Tunnels that came up.",
	                m->connects_total);
	st_text_counter(t, "edgestream_tunnel_disconnects_total", "Tunnels that went down.",
	                m->disconnects_total);
	st_text_counter(t, "edgestream_tunnel_reconnects_asked_total",
	                "RECONNECTs from a draining cloud replica: the edge moved to a new tunnel.",
	                m->reconnects_asked);
	st_text_counter(t, "edgestream_tunnels_retired_total",
	                "Tunnels closed after their successor was up (make before break).",
	                m->tunnels_retired);
	st_text_gauge(t, "edgestream_streams", "Streams open now.", m->streams_open);
	st_text_counter(t, "edgestream_streams_total", "Streams the cloud opened.",
	                m->streams_total);
	st_text_counter(t, "edgestream_streams_refused_total",
	                "Streams refused: outside the allow-list, malformed, over a limit.",
	                m->streams_refused);
	st_text_counter(t, "edgestream_backend_failures_total",
	                "Backends unreachable, timed out or failing TLS.", m->backend_failures);
	st_text_labelled(t, "edgestream_stream_bytes_total", "counter",
	                 "Stream bytes relayed, by direction.", "direction",
	                 (const struct st_text_sample[]){{"to_cloud", m->bytes_to_cloud},
	                                                 {"from_cloud", m->bytes_from_cloud},
	                                                 {0}});
	st_text_counter(t, "edgestream_cert_reloads_total",
	                "Certificate files re-read after they changed.", m->cert_reloads);
	es_certs_render_metrics(es, t);
	st_text_counter(t, "edgestream_tunnel_pauses_total",
	                "Base protocol only: tunnel reading paused for a slow backend.",
	                m->tunnel_pauses);
	st_text_labelled(
	        t, "edgestream_streams_refused_by_session_total", "counter",
	        "Streams refused before any backend: past --max-streams (limit), or their first "
	        "window (or a CRI log follower's output buffer) did not fit "
	        "--process-buffer-bytes (budget).",
	        "reason",
	        (const struct st_text_sample[]){{"limit", es->session_totals.refused_limit},
	                                        {"budget", es->session_totals.refused_budget},
	                                        {0}});
	st_text_gauge(t, "edgestream_buffered_bytes",
	              "--process-buffer-bytes in use: every stream's credit window, the bytes "
	              "its queues toward the cloud hold, and CRI log followers' output buffers.",
	              es->budget.used_bytes);
	st_text_gauge(t, "edgestream_buffered_bytes_peak",
	              "The most edgestream_buffered_bytes has been since start.",
	              es->budget.peak_bytes);
	st_text_counter(t, "edgestream_kubelet_tls_resumption_refused_total",
	                "Kubelet TLS handshakes the kubelet failed instead of resuming the offered "
	                "session; the request went again with a full handshake.",
	                m->kubelet_resumption_refused);
	st_text_counter(
	        t, "edgestream_kubelet_h2_window_grown_total",
	        "Times a bulk HTTP/2 kubelet stream's window grew (the kubelet sent a whole "
	        "window while the cloud took every byte), charged to the budget first.",
	        es->h2_windows_grown);
	st_text_gauge(t, "edgestream_kubelet_h2_window_grown_bytes",
	              "HTTP/2 kubelet streams' windows past their initial 64 KiB, summed over the "
	              "streams open now.",
	              es->h2_window_grown_now);
	st_text_counter(t, "edgestream_kubelet_h2_window_shrunk_total",
	                "Times a grown HTTP/2 kubelet stream's window shrank: a period of "
	                "ES_H2_FLOW_PERIOD_MS with less than half its window (halved) or nothing "
	                "(back to 64 KiB).",
	                es->h2_windows_shrunk);
	st_text_gauge(t, "edgestream_kubelet_h2_window_reserved_bytes",
	              "--process-buffer-bytes held for HTTP/2 kubelet streams' windows past their "
	              "initial 64 KiB (chunk framing included), summed over the streams open now; "
	              "given back as a window shrinks and the kubelet spends its old credit, or "
	              "once the stream is silent.",
	              es->h2_window_reserved_now);
	st_text_counter(t, "edgestream_stream_stall_cuts_total",
	                "Streams from base-protocol clouds cut because their backend took nothing "
	                "for --stall-timeout while the tunnel was paused for them.",
	                m->stall_cuts);
	st_text_session_totals(t, "edgestream", &es->session_totals);
	st_text_metric(t, "edgestream_request_ttfb_seconds", "histogram",
	               "Time from a stream's open on the tunnel to the first byte of its answer "
	               "toward the cloud (the backend's, or the edge's refusal), by request kind.");
	for (int k = 0; k < 6; k++) {
		char labels[32];
		snprintf(labels, sizeof labels, "kind=\"%s\"",
		         st_kubelet_kind_label((enum st_kubelet_kind)k));
		st_text_hist(t, "edgestream_request_ttfb_seconds", labels, &es->ttfb[k]);
	}
	st_text_process(t);
}

bool es_ready(void *user, const char **why)
{
	struct edgestream *es = user;
	*why = "the tunnel to the cloud is down";
	return any_up(es, NULL);
}

/* ---- listings: GET /tunnels, GET /streams (tab-separated, a header line first) ---------- */

/*
 * The same shape as cloudstream's /sessions and /streams (cloudstream-ctl prints either): one
 * line per tunnel or stream, bounded by the admin answer's size with a "more" line. The edge
 * keeps no request path per stream (the cloud's listing has it, joined by node and stream id);
 * it says which backend serves it.
 */

#define LIST_KEEP 128u /* room kept for the truncation line */

/* UTC time of @mono_ms on st_now_ms()'s clock, ISO 8601. */
static void wall_time(uint64_t mono_ms, char *buf, size_t cap)
{
	time_t now = time(NULL) - (time_t)((st_now_ms() - mono_ms) / 1000);
	struct tm tm;
	if (gmtime_r(&now, &tm) == NULL || strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
		snprintf(buf, cap, "-");
}

/* The kernel's smoothed RTT of @wsi's TCP connection, "12.3" ms, or "-". */
static void tcp_rtt(struct lws *wsi, char *buf, size_t cap)
{
	struct tcp_info ti;
	socklen_t len = sizeof ti;
	int fd = wsi ? lws_get_socket_fd(wsi) : -1;
	if (fd >= 0 && getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 &&
	    len >= offsetof(struct tcp_info, tcpi_rtt) + sizeof ti.tcpi_rtt && ti.tcpi_rtt)
		snprintf(buf, cap, "%u.%u", ti.tcpi_rtt / 1000u, ti.tcpi_rtt % 1000u / 100u);
	else
		snprintf(buf, cap, "-");
}

/* One line into @t, or counted in *@more when it would not fit (once one did not, none do). */
static void line(struct st_text *t, size_t *more, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static void line(struct st_text *t, size_t *more, const char *fmt, ...)
{
	if (*more == 0) {
		char buf[1024];
		va_list ap;
		va_start(ap, fmt);
		int n = vsnprintf(buf, sizeof buf, fmt, ap);
		va_end(ap);
		if (n > 0 && (size_t)n < sizeof buf && t->len + (size_t)n < t->cap) {
			memcpy(t->p + t->len, buf, (size_t)n + 1);
			t->len += (size_t)n;
			return;
		}
	}
	(*more)++;
}

static void list_tunnels(struct edgestream *es, struct st_text *t, size_t *more, bool none)
{
	uint64_t now = st_now_ms();
	st_text_put(t, "CLOUD\tPROTOCOL\tREPLICA\tREMOTE\tCONNECTED\tSTREAMS\tBYTES_IN\t"
	               "BYTES_OUT\tLAST_RX_MS_AGO\tRTT_MS\n");
	for (struct es_tunnel *tu = none ? NULL : es->tunnels; tu; tu = tu->next) {
		char since[32] = "-", remote[64] = "-", rtt[24] = "-", ago[24] = "-";
		size_t streams = 0;
		for (struct es_stream *st = tu->streams; st; st = st->next)
			streams++;
		if (tu->connected && tu->wsi) {
			wall_time(tu->connected_ms, since, sizeof since);
			lws_get_peer_simple(tu->wsi, remote, sizeof remote);
			tcp_rtt(tu->wsi, rtt, sizeof rtt);
			snprintf(ago, sizeof ago, "%llu",
			         (unsigned long long)(now - tu->live.last_rx_ms));
		}
		line(t, more, "%s:%d%s\t%s\t%s\t%s\t%s\t%zu\t%llu\t%llu\t%s\t%s\n", tu->cloud_host,
		     tu->cloud_port, tu->cloud_path,
		     !tu->connected ? "down"
		     : tu->extended ? "extended"
		                    : "base",
		     tu->connected && tu->replica[0] ? tu->replica : "-", remote, since, streams,
		     (unsigned long long)tu->bytes_in, (unsigned long long)tu->bytes_out, ago, rtt);
	}
}

static void list_streams(struct edgestream *es, struct st_text *t, size_t *more, bool none)
{
	uint64_t now = st_now_ms();
	st_text_put(t, "NODE\tSTREAM\tKIND\tBACKEND\tAGE_MS\tTO_CLOUD\tFROM_CLOUD\tQUEUED\n");
	for (struct es_tunnel *tu = none ? NULL : es->tunnels; tu; tu = tu->next)
		for (struct es_stream *st = tu->streams; st; st = st->next) {
			char be[96];
			line(t, more, "%s\t%llu\t%s\t%s\t%llu\t%llu\t%llu\t%zu\n", es->node,
			     (unsigned long long)st->id,
			     st_kubelet_kind_label((enum st_kubelet_kind)st->kind),
			     st->ops ? es_stream_describe(st, be, sizeof be) : "-",
			     (unsigned long long)(now - st->started_ms),
			     (unsigned long long)st->to_cloud_bytes,
			     (unsigned long long)st->from_cloud_bytes,
			     st_buf_len(&st->to_cloud) + st_buf_len(&st->to_backend));
		}
}

int es_admin_action(void *user, const char *method, size_t mlen, const char *path, size_t plen,
                    const char *query, size_t qlen, char *out, size_t cap, size_t *out_len)
{
	struct edgestream *es = user;
	bool tunnels = plen == 8 && memcmp(path, "/tunnels", 8) == 0;
	bool streams = plen == 8 && memcmp(path, "/streams", 8) == 0;
	if (!tunnels && !streams)
		return 0;
	struct st_text t = {.p = out, .cap = cap > LIST_KEEP ? cap - LIST_KEEP : 0};
	if (mlen != 3 || memcmp(method, "GET", 3) != 0) {
		st_text_put(&t, "GET lists them\n");
		*out_len = t.len;
		return 405;
	}
	size_t more = 0;
	/* ?node=NAME as on cloudstream (cloudstream-ctl streams NODE): this node's, or none */
	char want[ES_NODE_NAME_MAX + 1];
	ssize_t wl = query ? st_query_get(query, qlen, "node", want, sizeof want - 1) : -ENOENT;
	bool other =
	        wl >= 0 && ((size_t)wl != strlen(es->node) || memcmp(want, es->node, (size_t)wl));
	if (tunnels)
		list_tunnels(es, &t, &more, other);
	else
		list_streams(es, &t, &more, other);
	t.cap = cap;
	if (more)
		st_text_put(&t, "# %zu more not shown\n", more);
	*out_len = t.len;
	return 200;
}
