/*
 * edgestream/src/kubelet.c — the kubelet backend (backend.h): the request goes to
 * --kubelet-url over HTTPS (our client certificate presented, the kubelet's verified against
 * --kubelet-ca and its name), as the apiserver sent it.
 *
 * Kept connections: a plain GET goes without "Connection: close"; the connection follows the
 * answer's framing and, when the answer is complete and did not say "Connection: close", goes
 * into the instance's idle pool (at most --kubelet-idle-connections, each for
 * --kubelet-idle-timeout, newest first) for the next GET, which then pays no connect and no
 * handshake. An idle connection holds no stream, no head and no TLS buffers (conn.h).
 *
 * Retries, before anything of the answer came back and while nothing of the cloud's body went:
 * a kept connection the kubelet closed (it may time idle ones out first) is replaced by a new
 * one and the request sent again, as HTTP clients do; a kubelet (or a TLS front) that answers
 * a session resumption with a fatal alert instead of a full handshake gets the request again
 * with a full handshake, and no session is offered to it any more (tls.h). Loop thread only.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <certs/certs.h>
#include <stream/ext.h>
#include <stream/frame.h>
#include <stream/log.h>

#include "backend.h"
#include "conn.h"
#include "h2conn.h"
#include "kubelet_url.h"
#include "relay.h"
#include "tls.h"

static void describe(const struct es_stream *st, char *buf, size_t cap)
{
	snprintf(buf, cap, "kubelet %.100s:%d%s", st->es->kubelet_host, st->es->kubelet_port,
	         st->es->kubelet_ctx ? "" : " (plain http)");
}

/* ---- set-up ------------------------------------------------------------------------------ */

int es_kubelet_setup(struct edgestream *es, char *err, size_t errlen)
{
	const struct es_config *c = &es->cfg;
	struct es_kubelet_url u;
	const char *why;
	if (es_kubelet_url_parse(c->kubelet_url, &u, &why) < 0) {
		snprintf(err, errlen, "kubelet-url %.200s: %s", c->kubelet_url, why);
		return -EINVAL;
	}
	snprintf(es->kubelet_host, sizeof es->kubelet_host, "%s", u.host);
	es->kubelet_port = u.port;
	snprintf(es->kubelet_name, sizeof es->kubelet_name, "%s",
	         c->kubelet_server_name && c->kubelet_server_name[0] ? c->kubelet_server_name
	                                                             : es->kubelet_host);
	bool v6 = strchr(es->kubelet_host, ':') != NULL;
	snprintf(es->kubelet_host_header, sizeof es->kubelet_host_header, "%s%s%s:%d",
	         v6 ? "[" : "", es->kubelet_host, v6 ? "]" : "", es->kubelet_port);
	if (u.plain) {
		/* edged's read-only port: no TLS, so no context (es_conn dials plain TCP). */
		es->kubelet_ctx = NULL;
		return 0;
	}
	int rc;
	if (c->kubelet_cert && c->kubelet_cert[0] &&
	    (rc = certs_check_pair(c->kubelet_cert, c->kubelet_key, err, errlen)) < 0)
		return rc;
	es->kubelet_ctx =
	        es_tls_client_ctx(c->kubelet_cert, c->kubelet_key, c->kubelet_ca, err, errlen);
	return es->kubelet_ctx ? 0 : -EINVAL;
}

/* ---- the idle pool --------------------------------------------------------------------- */

static void pool_unlink(struct es_conn *c)
{
	struct edgestream *es = c->es;
	if (c->prev)
		c->prev->next = c->next;
	else
		es->idle = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->next = c->prev = NULL;
	es->idle_count--;
}

/* An idle connection ended: the kubelet closed it, spoke unasked, or it timed out. */
static void on_idle_end(struct es_conn *c)
{
	pool_unlink(c);
	es_conn_free(c);
}

/* The answer on @st's connection is complete and allows another request: keep it. */
static bool keep(struct es_stream *st)
{
	struct edgestream *es = st->es;
	struct es_conn *c = st->conn;
	if (c == NULL || es->idle_count >= es->cfg.kubelet_idle_connections ||
	    es_conn_make_idle(c, es->cfg.kubelet_idle_timeout_ms, on_idle_end) < 0)
		return false;
	c->next = es->idle;
	if (es->idle)
		es->idle->prev = c;
	es->idle = c;
	es->idle_count++;
	return true;
}

void es_kubelet_pool_free(struct edgestream *es)
{
	es_h2_free_all(es);
	while (es->idle) {
		struct es_conn *c = es->idle;
		pool_unlink(c);
		es_conn_free(c);
	}
}

/* ---- the backend ----------------------------------------------------------------------- */

int es_kubelet_open_h1(struct es_stream *st, struct st_connect_req *req, const char *path,
                       size_t path_len)
{
	struct edgestream *es = st->es;
	struct es_conn *c;
	if (es_conn_new(&c, st, es->kubelet_host, es->kubelet_port, es->kubelet_ctx,
	                es->kubelet_name) < 0) {
		es_stream_fail(st, ST_EXT_ERR_INTERNAL, "out of memory");
		return -1;
	}
	/* A plain GET may leave its connection for the next request. */
	bool keep_alive = es->cfg.kubelet_idle_connections > 0 && strcmp(req->method, "GET") == 0;
	if (es_conn_set_head(c, req, path, path_len, es->kubelet_host_header, true, keep_alive) < 0)
		return -1;
	if (c->keep_alive && es->idle) {
		struct es_conn *idle = es->idle; /* the newest */
		pool_unlink(idle);
		es_conn_adopt(c, idle);
		st_dbg_ns(es->node, st->id, "%s → the kubelet on a kept connection",
		          st_msg_type_name(st->type));
		return 0;
	}
	return es_conn_dial(c) < 0 ? -1 : 0;
}

static int kubelet_open(struct es_stream *st, struct st_connect_req *req, const char *path,
                        size_t path_len)
{
	if (es_h2_open(st, req, path, path_len))
		return 0; /* an HTTP/2 stream (h2conn.h) */
	return es_kubelet_open_h1(st, req, path, path_len);
}

/* A stream on the HTTP/2 path has st->be; one on an HTTP/1.1 connection st->conn. */
static void kubelet_write(struct es_stream *st)
{
	if (st->be)
		es_h2_op_write(st);
	else
		es_conn_op_write(st);
}

static void kubelet_on_writable(struct es_stream *st)
{
	if (st->be)
		es_h2_op_on_writable(st);
	else
		es_conn_op_on_writable(st);
}

static void kubelet_close(struct es_stream *st)
{
	es_h2_op_close(st);
	es_conn_op_close(st);
}

static bool kubelet_retry(struct es_stream *st, enum es_retry_why why)
{
	struct edgestream *es = st->es;
	if (why == ES_RETRY_TLS_REFUSED) {
		es->m.kubelet_resumption_refused++;
		char name[160];
		/* Logged once: from now on no connection offers a session to the kubelet (the
		 * context is never reloaded), so this happens again only for handshakes that had
		 * offered one already. */
		st_log(es_tls_stop_resuming(es->kubelet_ctx) ? ST_LOG_WARN : ST_LOG_DEBUG, es->node,
		       st->id,
		       "%s refused to resume a TLS session (%s): sending the request again with a "
		       "full handshake, and resuming no more sessions with it (counted in "
		       "edgestream_kubelet_tls_resumption_refused_total)",
		       es_stream_describe(st, name, sizeof name), es_tls_error(&st->conn->tls));
		es_publish_stats(es);
	} else {
		st_dbg_ns(es->node, st->id,
		          "the kept kubelet connection was closed: dialling anew");
	}
	es_conn_restart(st->conn); /* may fail @st: true all the same, @st went on or ended */
	return true;
}

const struct es_backend_ops es_backend_kubelet = {
        .name = "kubelet",
        .to_cloud_burst = ES_CONN_TO_CLOUD_BURST,
        .open = kubelet_open,
        .write = kubelet_write,
        .on_writable = kubelet_on_writable,
        .close = kubelet_close,
        .describe = describe,
        .retry = kubelet_retry,
        .keep = keep,
};
