/*
 * cloudstream/src/admin.c — the admin listener (loopback by default): Prometheus /metrics,
 * /healthz (the process is serving) and /readyz (listening, not draining). Plain HTTP/1.1, one
 * request per connection, answers built in memory (bounded). Loop thread only.
 */
#include "cs.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <stream/http.h>
#include <stream/log.h>

#define ADMIN_HEAD_MAX 8192u
#define ADMIN_BODY_MAX (64u * 1024u)

struct admin_conn {
	uint8_t head[ADMIN_HEAD_MAX];
	size_t head_len;
	char *answer; /* whole response, written in one go */
	size_t answer_len, answer_off;
};

struct text {
	char *p;
	size_t len, cap;
	bool overflow;
};

static void put(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct text *t, const char *fmt, ...)
{
	if (t->overflow)
		return;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= t->cap - t->len)
		t->overflow = true;
	else
		t->len += (size_t)n;
}

static void metric(struct text *t, const char *name, const char *type, const char *help)
{
	put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static const char *const kind_names[6] = {"other", "exec", "attach", "portforward", "logs", "run"};

static void render_metrics(struct cs_server *srv, struct text *t)
{
	const struct cs_metrics *m = &srv->m;
	metric(t, "cloudstream_sessions", "gauge", "Edge tunnel sessions connected now.");
	put(t, "cloudstream_sessions %zu\n", srv->n_tunnels);
	metric(t, "cloudstream_sessions_total", "counter",
	       "Edge tunnel sessions accepted, by protocol (base = unmodified KubeEdge edge).");
	put(t, "cloudstream_sessions_total{protocol=\"base\"} %llu\n",
	    (unsigned long long)m->sessions_total[0]);
	put(t, "cloudstream_sessions_total{protocol=\"extended\"} %llu\n",
	    (unsigned long long)m->sessions_total[1]);
	metric(t, "cloudstream_sessions_replaced_total", "counter",
	       "Sessions replaced by a reconnect of the same node.");
	put(t, "cloudstream_sessions_replaced_total %llu\n",
	    (unsigned long long)m->sessions_replaced);
	metric(t, "cloudstream_sessions_rejected_total", "counter",
	       "Tunnel upgrades refused (identity, path, limits, draining).");
	put(t, "cloudstream_sessions_rejected_total %llu\n",
	    (unsigned long long)m->sessions_rejected);
	metric(t, "cloudstream_streams", "gauge", "Streams open now, by request kind.");
	for (int k = 0; k < 6; k++)
		put(t, "cloudstream_streams{kind=\"%s\"} %llu\n", kind_names[k],
		    (unsigned long long)m->streams_open[k]);
	metric(t, "cloudstream_streams_total", "counter", "Streams opened, by request kind.");
	for (int k = 0; k < 6; k++)
		put(t, "cloudstream_streams_total{kind=\"%s\"} %llu\n", kind_names[k],
		    (unsigned long long)m->streams_total[k]);
	metric(t, "cloudstream_stream_bytes_total", "counter",
	       "Stream payload bytes relayed, by direction.");
	put(t, "cloudstream_stream_bytes_total{direction=\"to_edge\"} %llu\n",
	    (unsigned long long)m->bytes_to_edge);
	put(t, "cloudstream_stream_bytes_total{direction=\"from_edge\"} %llu\n",
	    (unsigned long long)m->bytes_from_edge);
	metric(t, "cloudstream_request_errors_total", "counter",
	       "Requests that failed, by reason.");
	for (int r = 0; r < CS_ERR_COUNT; r++)
		put(t, "cloudstream_request_errors_total{reason=\"%s\"} %llu\n",
		    cs_err_reason_name((enum cs_err_reason)r),
		    (unsigned long long)m->request_errors[r]);
	metric(t, "cloudstream_flow_stalls_total", "counter",
	       "Flow-control stalls: a stream full toward the edge (stream), a tunnel paused "
	       "because apiserver-side queues hit a limit (tunnel).");
	put(t, "cloudstream_flow_stalls_total{scope=\"stream\"} %llu\n",
	    (unsigned long long)m->stream_stalls);
	put(t, "cloudstream_flow_stalls_total{scope=\"tunnel\"} %llu\n",
	    (unsigned long long)m->tunnel_pauses);
	metric(t, "cloudstream_buffered_bytes", "gauge",
	       "Bytes queued toward apiservers, all connections.");
	put(t, "cloudstream_buffered_bytes %llu\n", (unsigned long long)srv->buffered);
	metric(t, "cloudstream_apiserver_connections", "gauge",
	       "Connections on the stream port now.");
	put(t, "cloudstream_apiserver_connections %zu\n", srv->n_fronts);
	metric(t, "cloudstream_apiserver_connections_total", "counter",
	       "Connections accepted on the stream port.");
	put(t, "cloudstream_apiserver_connections_total %llu\n",
	    (unsigned long long)m->fronts_total);
	metric(t, "cloudstream_apiserver_refused_total", "counter",
	       "Stream-port clients refused for their certificate subject.");
	put(t, "cloudstream_apiserver_refused_total %llu\n",
	    (unsigned long long)m->fronts_refused_tls);
}

static void respond(struct admin_conn *c, int status, const char *type, const char *body,
                    size_t body_len)
{
	size_t cap = body_len + 256;
	c->answer = malloc(cap);
	if (c->answer == NULL)
		return;
	int n = snprintf(c->answer, cap,
	                 "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
	                 "Connection: close\r\n\r\n",
	                 status,
	                 status == 200   ? "OK"
	                 : status == 404 ? "Not Found"
	                                 : "Unavailable",
	                 type, body_len);
	if (n < 0 || (size_t)n + body_len > cap) {
		free(c->answer);
		c->answer = NULL;
		return;
	}
	memcpy(c->answer + n, body, body_len);
	c->answer_len = (size_t)n + body_len;
}

static void handle(struct cs_server *srv, struct admin_conn *c, const struct st_http_request *req)
{
	const char *plain = "text/plain; charset=utf-8";
	if (req->path_len == 8 && memcmp(req->path, "/metrics", 8) == 0) {
		struct text t = {.p = malloc(ADMIN_BODY_MAX), .cap = ADMIN_BODY_MAX};
		if (t.p == NULL)
			return;
		render_metrics(srv, &t);
		respond(c, t.overflow ? 500 : 200, "text/plain; version=0.0.4; charset=utf-8", t.p,
		        t.len);
		free(t.p);
	} else if (req->path_len == 8 && memcmp(req->path, "/healthz", 8) == 0) {
		respond(c, 200, plain, "ok\n", 3);
	} else if (req->path_len == 7 && memcmp(req->path, "/readyz", 7) == 0) {
		if (srv->ready && !srv->draining)
			respond(c, 200, plain, "ok\n", 3);
		else
			respond(c, 503, plain, srv->draining ? "draining\n" : "starting\n",
			        srv->draining ? 9 : 9);
	} else {
		respond(c, 404, plain, "try /metrics, /healthz or /readyz\n", 34);
	}
}

static int cb_admin(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                    size_t len)
{
	struct cs_server *srv = lws_context_user(lws_get_context(wsi));
	struct admin_conn **slot = user;
	struct admin_conn *c = slot ? *slot : NULL;
	switch (reason) {
	case LWS_CALLBACK_RAW_ADOPT:
		*slot = calloc(1, sizeof **slot);
		return *slot ? 0 : -1;
	case LWS_CALLBACK_RAW_RX: {
		if (c == NULL || c->answer)
			return 0;
		if (len > ADMIN_HEAD_MAX - c->head_len)
			return -1;
		memcpy(c->head + c->head_len, in, len);
		c->head_len += len;
		struct st_http_request req;
		ssize_t n = st_http_parse_request(c->head, c->head_len, &req);
		if (n == 0)
			return 0;
		if (n < 0)
			return -1;
		handle(srv, c, &req);
		if (c->answer == NULL)
			return -1;
		lws_callback_on_writable(wsi);
		return 0;
	}
	case LWS_CALLBACK_RAW_WRITEABLE: {
		if (c == NULL || c->answer == NULL)
			return 0;
		size_t n = c->answer_len - c->answer_off;
		if (n > 16384)
			n = 16384;
		memcpy(srv->tx + LWS_PRE, c->answer + c->answer_off, n);
		if (lws_write(wsi, srv->tx + LWS_PRE, n, LWS_WRITE_RAW) < 0)
			return -1;
		c->answer_off += n;
		if (c->answer_off < c->answer_len) {
			lws_callback_on_writable(wsi);
			return 0;
		}
		return -1; /* Connection: close */
	}
	case LWS_CALLBACK_RAW_CLOSE:
		if (c) {
			free(c->answer);
			free(c);
			*slot = NULL;
		}
		return 0;
	default:
		return 0;
	}
}

const struct lws_protocols cs_admin_protocols[2] = {
        {
                .name = "cs-admin",
                .callback = cb_admin,
                .per_session_data_size = sizeof(struct admin_conn *),
                .rx_buffer_size = 4096,
        },
        {0}, /* terminator */
};
