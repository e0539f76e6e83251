/*
 * cloudstream/src/admin.c — the admin listener (loopback by default): Prometheus /metrics,
 * /healthz (the process is serving) and /readyz (listening, not draining). The listener is
 * stream/admin.h's; this file says what goes in the metrics and when cloudstream is ready.
 * Loop thread only.
 */
#include "peer.h"
#include "cs.h"
#include "join_srv.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <stream/admin.h>
#include <stream/certreload.h>
#include <stream/log.h>
#include <stream/query.h>

#include "certshare.h"
#include "denylist.h"
#include "listen.h"
#include "servecert.h"

static void render_histograms(struct st_text *t, const struct cs_metrics *m)
{
	char labels[32];
	st_text_metric(t, "cloudstream_request_ttfb_seconds", "histogram",
	               "Time from a request's head on the stream port to the first byte of its "
	               "answer queued toward the apiserver (the edge's, or cloudstream's own "
	               "error), by request kind.");
	for (int k = 0; k < 6; k++) {
		snprintf(labels, sizeof labels, "kind=\"%s\"",
		         st_kubelet_kind_label((enum st_kubelet_kind)k));
		st_text_hist(t, "cloudstream_request_ttfb_seconds", labels, &m->ttfb[k]);
	}
	st_text_metric(t, "cloudstream_pod_lookup_duration_seconds", "histogram",
	               "Pod lookups through the apiserver (the request's node by its pod): from "
	               "submitting the call to a worker to its answer on the loop.");
	st_text_hist(t, "cloudstream_pod_lookup_duration_seconds", "", &m->pod_lookup);
	st_text_metric(t, "cloudstream_apiserver_review_duration_seconds", "histogram",
	               "TokenReview and SubjectAccessReview calls to the apiserver: from "
	               "submitting the call to a worker to its answer on the loop.");
	st_text_hist(t, "cloudstream_apiserver_review_duration_seconds", "review=\"TokenReview\"",
	             &m->review[0]);
	st_text_hist(t, "cloudstream_apiserver_review_duration_seconds",
	             "review=\"SubjectAccessReview\"", &m->review[1]);
}

static void render_metrics(struct st_text *t, void *user)
{
	struct cs_server *srv = user;
	const struct cs_metrics *m = &srv->m;
	st_text_build_info(t, "cloudstream", cs_config_spec.version);
	st_text_gauge(t, "cloudstream_sessions", "Edge tunnel sessions connected now.", srv->tun.n);
	st_text_labelled(
	        t, "cloudstream_sessions_total", "counter",
	        "Edge tunnel sessions accepted, by protocol (base = unmodified KubeEdge edge).",
	        "protocol",
	        (const struct st_text_sample[]){
	                {"base", m->sessions_total[0]}, {"extended", m->sessions_total[1]}, {0}});
	st_text_counter(t, "cloudstream_sessions_replaced_total",
	                "Sessions replaced by a reconnect of the same node.", m->sessions_replaced);
	st_text_labelled(t, "cloudstream_drain_moves_total", "counter",
	                 "Edges asked to move to another replica while draining (RECONNECT: a new "
	                 "tunnel first; CLOSE_CONNECT: KubeEdge edges, once their streams ended).",
	                 "how",
	                 (const struct st_text_sample[]){{"reconnect", m->drain_moves[1]},
	                                                 {"close_connect", m->drain_moves[0]},
	                                                 {0}});
	st_text_gauge(t, "cloudstream_drain_edges_moving",
	              "Draining: edges whose move is not over (their tunnel still here).",
	              srv->tun.moving);
	st_text_counter(t, "cloudstream_sessions_rejected_total",
	                "Tunnel upgrades refused (identity, path, limits, draining).",
	                m->sessions_rejected);
	st_text_metric(t, "cloudstream_tunnel_refusals_total", "counter",
	               "Tunnel upgrades refused, by reason (denied = the deny list).");
	for (int r = 0; r < CS_REFUSE_COUNT; r++)
		st_text_put(t, "cloudstream_tunnel_refusals_total{reason=\"%s\"} %llu\n",
		            cs_refusal_name((enum cs_refusal)r),
		            (unsigned long long)m->tunnel_refusals[r]);
	st_text_labelled(
	        t, "cloudstream_tunnels_closed_total", "counter",
	        "Live tunnels closed, by reason: revoked by a deny-list reload naming the "
	        "node (denied), POST /nodes/<name>/close on the admin port (admin) or the "
	        "Node's deletion (node_deleted); ended by the edge with a close "
	        "(edge_closed), without one (edge_gone: EOF or reset), or for an error "
	        "(edge_error: TLS, malformed frames, a message refused), or found dead "
	        "(dead: nothing received for --dead-peer-timeout).",
	        "reason",
	        (const struct st_text_sample[]){{"denied", m->tunnels_closed_denied},
	                                        {"admin", m->tunnels_closed_admin},
	                                        {"node_deleted", m->tunnels_closed_node_deleted},
	                                        {"edge_closed", m->tunnels_closed_edge_closed},
	                                        {"edge_gone", m->tunnels_closed_edge_gone},
	                                        {"edge_error", m->tunnels_closed_edge_error},
	                                        {"dead", m->tunnels_closed_dead},
	                                        {0}});
	st_text_counter(t, "cloudstream_shared_ips_total",
	                "Times an IP became verified for two or more connected nodes at once.",
	                m->shared_ips);
	st_text_counter(
	        t, "cloudstream_shared_ip_refusals_total",
	        "Requests addressed only by an IP two connected nodes share, refused (409).",
	        m->shared_ip_refusals);
	st_text_gauge(t, "cloudstream_node_reconnect_waiting",
	              "Requests waiting now for their node, connected nowhere, to redial "
	              "(--node-reconnect-grace).",
	              srv->n_reconnect_waiting);
	st_text_metric(t, "cloudstream_node_reconnect_waits_total", "counter",
	               "Requests that waited for their node's redial, by how it ended: back_local "
	               "(its tunnel came up here), back_peer (a peer announced it: forwarded), "
	               "gave_up (the grace ended: 503), refused (--node-reconnect-waiting-max "
	               "reached: 503 without waiting), client_gone.");
	static const char *const rc_outcomes[CS_RECONNECT_OUTCOMES] = {
	        "back_local", "back_peer", "gave_up", "refused", "client_gone"};
	for (int i = 0; i < CS_RECONNECT_OUTCOMES; i++)
		st_text_put(t, "cloudstream_node_reconnect_waits_total{outcome=\"%s\"} %llu\n",
		            rc_outcomes[i], (unsigned long long)m->reconnect_waits[i]);
	st_text_labelled(t, "cloudstream_node_address_checks_total", "counter",
	                 "--internal-ip-policy node-address: SessionInternalIPs the Node object "
	                 "listed (verified) or did not (unlisted).",
	                 "result",
	                 (const struct st_text_sample[]){{"verified", m->node_ip_verified},
	                                                 {"unlisted", m->node_ip_unlisted},
	                                                 {0}});
	st_text_metric(t, "cloudstream_streams", "gauge", "Streams open now, by request kind.");
	for (int k = 0; k < 6; k++)
		st_text_put(t, "cloudstream_streams{kind=\"%s\"} %llu\n",
		            st_kubelet_kind_label((enum st_kubelet_kind)k),
		            (unsigned long long)m->streams_open[k]);
	st_text_metric(t, "cloudstream_streams_total", "counter",
	               "Streams opened, by request kind.");
	for (int k = 0; k < 6; k++)
		st_text_put(t, "cloudstream_streams_total{kind=\"%s\"} %llu\n",
		            st_kubelet_kind_label((enum st_kubelet_kind)k),
		            (unsigned long long)m->streams_total[k]);
	st_text_labelled(t, "cloudstream_stream_bytes_total", "counter",
	                 "Stream payload bytes relayed, by direction.", "direction",
	                 (const struct st_text_sample[]){{"to_edge", m->bytes_to_edge},
	                                                 {"from_edge", m->bytes_from_edge},
	                                                 {0}});
	st_text_metric(t, "cloudstream_request_errors_total", "counter",
	               "Requests that failed, by reason.");
	for (int r = 0; r < CS_ERR_COUNT; r++)
		st_text_put(t, "cloudstream_request_errors_total{reason=\"%s\"} %llu\n",
		            cs_err_reason_name((enum cs_err_reason)r),
		            (unsigned long long)m->request_errors[r]);
	st_text_labelled(
	        t, "cloudstream_flow_stalls_total", "counter",
	        "Flow-control stalls: a stream full toward the edge (stream), a tunnel paused "
	        "because apiserver-side queues hit a limit (tunnel).",
	        "scope",
	        (const struct st_text_sample[]){
	                {"stream", m->stream_stalls}, {"tunnel", m->tunnel_pauses}, {0}});
	st_text_counter(t, "cloudstream_stream_stall_cuts_total",
	                "Streams to base-protocol edges cut because their apiserver connection "
	                "took nothing for --stall-timeout while the tunnel was paused for them.",
	                m->stall_cuts);
	st_text_gauge(t, "cloudstream_buffered_bytes",
	              "The process budget's use: credit windows of streams to edges with flow "
	              "control (what they may hold) plus bytes queued toward apiservers otherwise.",
	              srv->tun.budget.used_bytes);
	st_text_gauge(t, "cloudstream_buffered_bytes_peak",
	              "The most cloudstream_buffered_bytes has been since start.",
	              srv->tun.budget.peak_bytes);
	st_text_counter(t, "cloudstream_budget_refusals_total",
	                "Streams refused because their first credit window did not fit the node's "
	                "or the process's budget (503).",
	                m->budget_refusals);
	st_text_gauge(t, "cloudstream_apiserver_connections", "Connections on the stream port now.",
	              srv->n_fronts);
	st_text_counter(t, "cloudstream_apiserver_connections_total",
	                "Connections accepted on the stream port.", m->fronts_total);
	st_text_counter(t, "cloudstream_apiserver_http2_connections_total",
	                "Stream-port connections that chose HTTP/2 (ALPN h2).",
	                m->h2_connections_total);
	st_text_counter(t, "cloudstream_apiserver_http2_streams_total",
	                "HTTP/2 streams on the stream port taken as requests.",
	                m->h2_streams_total);
	st_text_counter(
	        t, "cloudstream_apiserver_http2_streams_refused_total",
	        "HTTP/2 streams refused with REFUSED_STREAM (over the per-connection limit, "
	        "or after GOAWAY).",
	        m->h2_streams_refused);
	st_text_counter(t, "cloudstream_apiserver_refused_total",
	                "Stream-port connections closed at their first bytes: a client certificate "
	                "that did not verify (refused subjects and users are answered 403: "
	                "cloudstream_request_errors_total{reason=\"forbidden\"}).",
	                m->fronts_refused_tls);
	st_text_counter(t, "cloudstream_apiserver_certificates_shared_total",
	                "Client certificates received on the stream port that were swapped for "
	                "an identical copy kept from an earlier connection (certshare.h).",
	                cs_certshare_hits(srv->certshare));
	struct cs_listener_stats ls;
	cs_listener_stats(srv, &ls);
	st_text_counter(t, "cloudstream_tunnel_accepts_total",
	                "Connections accepted on the tunnel port (after TCP_DEFER_ACCEPT: the peer "
	                "sent its first bytes).",
	                ls.accepted);
	st_text_gauge(t, "cloudstream_tunnel_handshakes_in_flight",
	              "TLS handshakes under way on the tunnel port (--tunnel-handshakes-max bounds "
	              "them; the rest wait in the kernel's accept queue).",
	              ls.handshakes_inflight);
	st_text_counter(
	        t, "cloudstream_tunnel_refused_per_source_total",
	        "Tunnel-port connections closed at accept: their source address already had "
	        "--tunnel-handshakes-per-source handshakes under way.",
	        ls.refused_per_source);
	st_text_counter(t, "cloudstream_tunnel_accept_pauses_total",
	                "Times accepting on the tunnel port paused for 250 ms because the process "
	                "was out of file descriptors (EMFILE/ENFILE).",
	                ls.emfile_pauses);
	cs_authz_metrics(t, srv);
	cs_servecert_metrics(t, srv);
	cs_advertise_metrics(t, srv);
	cs_join_metrics(t, srv);
	cs_door_metrics(t, srv);
	cs_peers_metrics(t, srv);
	st_text_session_totals(t, "cloudstream", &m->sessions);
	cs_node_events_metrics(t, srv);
	render_histograms(t, m);
	st_text_process(t);
	st_text_metric(t, "cloudstream_certificate_expiry_seconds", "gauge",
	               "notAfter of the certificate each listener serves now (unix time; follows "
	               "SIGHUP reloads). A WARN is logged when one has less than a third of its "
	               "lifetime or 30 days left.");
	static const char *const certs[3] = {"tunnel", "stream", "front_door"};
	for (size_t i = 0; i < 3; i++) {
		int64_t nb, na;
		if (st_certreload_validity(srv->certs, i, &nb, &na) == 0)
			st_text_put(t, "cloudstream_certificate_expiry_seconds{cert=\"%s\"} %lld\n",
			            certs[i], (long long)na);
	}
}

static bool ready(void *user, const char **why)
{
	struct cs_server *srv = user;
	*why = srv->draining ? "draining" : "starting";
	return srv->ready && !srv->draining && cs_peers_ready(srv, why);
}

/* ---- listings: GET /sessions, GET /streams (tab-separated, a header line first) ---------- */

/* The value of node= in @query, or NULL (a view of *@len bytes). */
static const char *node_filter(const char *query, size_t qlen, size_t *len)
{
	for (size_t i = 0; query && i < qlen;) {
		size_t end = i;
		while (end < qlen && query[end] != '&')
			end++;
		if (end - i > 5 && memcmp(query + i, "node=", 5) == 0) {
			*len = end - i - 5;
			return query + i + 5;
		}
		i = end + 1;
	}
	return NULL;
}

static bool node_matches(const char *node, const char *want, size_t wlen)
{
	return want == NULL || (strlen(node) == wlen && memcmp(node, want, wlen) == 0);
}

/* Appends printf-style text; false (nothing written) when it would not fit in @cap - @keep. */
static bool put(char *out, size_t cap, size_t keep, size_t *len, const char *fmt, ...)
        __attribute__((format(printf, 5, 6)));
static bool put(char *out, size_t cap, size_t keep, size_t *len, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(out + *len, cap - keep - *len, fmt, ap);
	va_end(ap);
	if (n < 0 || *len + (size_t)n >= cap - keep) {
		out[*len] = '\0';
		return false;
	}
	*len += (size_t)n;
	return true;
}

/* UTC time of @mono_ms on st_now_ms()'s clock, ISO 8601. */
static void wall_time(uint64_t mono_ms, char *buf, size_t cap)
{
	time_t t = time(NULL) - (time_t)((st_now_ms() - mono_ms) / 1000);
	struct tm tm;
	if (gmtime_r(&t, &tm) == NULL || strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
		snprintf(buf, cap, "-");
}

#define LIST_KEEP 128u /* room kept for the truncation line */

static size_t list_sessions(struct cs_server *srv, const char *want, size_t wlen, char *out,
                            size_t cap)
{
	size_t len = 0, more = 0;
	uint64_t now = st_now_ms();
	put(out, cap, LIST_KEEP, &len,
	    "NODE\tPROTOCOL\tREPLICA\tREMOTE\tCONNECTED\tSTREAMS\tBYTES_IN\tBYTES_OUT\t"
	    "LAST_RX_MS_AGO\tRTT_MS\n");
	for (struct cs_tunnel *t = cs_tunnel_next(srv, NULL); t; t = cs_tunnel_next(srv, t)) {
		struct cs_tunnel_info ti;
		cs_tunnel_get_info(t, &ti);
		if (!node_matches(ti.node, want, wlen))
			continue;
		char since[32], rtt[24];
		wall_time(ti.connected_ms, since, sizeof since);
		if (ti.rtt_us)
			snprintf(rtt, sizeof rtt, "%llu.%llu",
			         (unsigned long long)(ti.rtt_us / 1000u),
			         (unsigned long long)(ti.rtt_us % 1000u / 100u));
		else
			snprintf(rtt, sizeof rtt, "-");
		if (more ||
		    !put(out, cap, LIST_KEEP, &len,
		         "%s\t%s\t%s\t%s\t%s\t%zu\t%llu\t%llu\t%llu\t%s\n", ti.node,
		         ti.extended ? "extended" : "base", ti.replica[0] ? ti.replica : "-",
		         ti.remote[0] ? ti.remote : "-", since, ti.streams,
		         (unsigned long long)ti.bytes_in, (unsigned long long)ti.bytes_out,
		         (unsigned long long)(now - ti.last_rx_ms), rtt))
			more++;
	}
	if (more)
		put(out, cap, 0, &len, "# %zu more not shown: ask for one node with ?node=NAME\n",
		    more);
	return len;
}

static size_t list_streams(struct cs_server *srv, const char *want, size_t wlen, char *out,
                           size_t cap)
{
	size_t len = 0, more = 0;
	uint64_t now = st_now_ms();
	put(out, cap, LIST_KEEP, &len,
	    "NODE\tSTREAM\tKIND\tMETHOD\tPATH\tCALLER\tAGE_MS\tTO_EDGE\tTO_CLIENT\tQUEUED\n");
	for (struct cs_tunnel *t = cs_tunnel_next(srv, NULL); t; t = cs_tunnel_next(srv, t)) {
		const char *node = cs_tunnel_node(t);
		if (!node_matches(node, want, wlen))
			continue;
		for (struct cs_endpoint *ep = cs_tunnel_endpoint_next(t, NULL); ep;
		     ep = cs_tunnel_endpoint_next(t, ep)) {
			struct cs_endpoint_info ei;
			ep->ops->info(ep, &ei);
			if (more ||
			    !put(out, cap, LIST_KEEP, &len,
			         "%s\t%llu\t%s\t%s\t%s\t%s\t%llu\t%llu\t%llu\t%llu\n", node,
			         (unsigned long long)ep->sid, ei.kind,
			         ei.method[0] ? ei.method : "-", ei.path, ei.caller,
			         (unsigned long long)(now - ei.started_ms),
			         (unsigned long long)ei.to_edge, (unsigned long long)ei.to_client,
			         (unsigned long long)ep->queued))
				more++;
		}
	}
	if (more)
		put(out, cap, 0, &len, "# %zu more not shown: ask for one node with ?node=NAME\n",
		    more);
	return len;
}

/*
 * GET /sessions, GET /streams (?node=NAME: that node's only): what is connected and what is in
 * flight, for cloudstream-ctl. POST /nodes/<name>/close: the node's tunnel is closed now
 * (identity.h).
 */
static int action(void *user, const char *method, size_t mlen, const char *path, size_t plen,
                  const char *query, size_t qlen, char *out, size_t cap, size_t *out_len)
{
	struct cs_server *srv = user;
	bool is_sessions = plen == 9 && memcmp(path, "/sessions", 9) == 0;
	bool is_streams = plen == 8 && memcmp(path, "/streams", 8) == 0;
	if (is_sessions || is_streams) {
		if (mlen != 3 || memcmp(method, "GET", 3) != 0) {
			int n = snprintf(out, cap, "GET lists them\n");
			*out_len = n > 0 ? (size_t)n : 0;
			return 405;
		}
		size_t wlen = 0;
		const char *want = node_filter(query, qlen, &wlen);
		*out_len = is_sessions ? list_sessions(srv, want, wlen, out, cap)
		                       : list_streams(srv, want, wlen, out, cap);
		return 200;
	}
	static const char pre[] = "/nodes/", post[] = "/close";
	size_t pl = sizeof pre - 1, sl = sizeof post - 1;
	int n, status;
	if (plen <= pl + sl || memcmp(path, pre, pl) != 0 ||
	    memcmp(path + plen - sl, post, sl) != 0)
		return 0; /* not ours */
	const char *name = path + pl;
	size_t nl = plen - pl - sl;
	if (mlen != 4 || memcmp(method, "POST", 4) != 0) {
		status = 405;
		n = snprintf(out, cap, "POST closes the node's tunnel\n");
	} else if (!cs_node_name_valid(name, nl)) {
		status = 400;
		n = snprintf(out, cap, "not a node name\n");
	} else {
		struct cs_tunnel *t = cs_registry_get(srv->reg, name, nl);
		if (t == NULL) {
			status = 404;
			n = snprintf(out, cap, "node %.*s has no tunnel here\n", (int)nl, name);
		} else {
			srv->m.tunnels_closed_admin++;
			cs_tunnel_close(t, "closed by the admin port (POST /nodes/<name>/close)");
			status = 200;
			n = snprintf(out, cap, "closed the tunnel of node %.*s\n", (int)nl, name);
		}
	}
	*out_len = n > 0 && (size_t)n < cap ? (size_t)n : 0;
	return status;
}

void cs_admin_ops_init(struct st_admin_ops *ops, struct cs_server *srv)
{
	for (int k = 0; k < 6; k++)
		st_hist_init(&srv->m.ttfb[k], &st_hist_spec_ttfb);
	st_hist_init(&srv->m.pod_lookup, &st_hist_spec_call);
	st_hist_init(&srv->m.review[0], &st_hist_spec_call);
	st_hist_init(&srv->m.review[1], &st_hist_spec_call);
	ops->render_metrics = render_metrics;
	ops->ready = ready;
	ops->action = action;
	ops->user = srv;
}
