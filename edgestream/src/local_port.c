/*
 * edgestream/src/local_port.c — the local-port backend (backend.h): an allow-listed port on
 * 127.0.0.1 (--local-port NAME=PORT; es_route.h decides), plain TCP. A request through
 * /ports/NAME/rest goes as HTTP/1.1 with "Connection: close" (the answer ends with the close);
 * a TCP_CONNECT stream is raw bytes both ways, with the cloud's half-close passed on; its
 * connect is acknowledged with OPENED (conn.c) so the cloud answers its client only then.
 * TCP_CONNECT also reaches, by the same code, the kubelet's own endpoint (target "kubelet":
 * --kubelet-url's host and port) and, when enabled, a pod IP (es_route.h decides). Loop
 * thread only.
 */
#include <stdio.h>
#include <string.h>

#include <stream/ext.h>

#include "backend.h"
#include "conn.h"
#include "relay.h"

static void describe(const struct es_stream *st, char *buf, size_t cap)
{
	const char *host = st->tcp_host ? st->tcp_host : "127.0.0.1";
	bool v6 = strchr(host, ':') != NULL;
	snprintf(buf, cap, "%s %s (%s%.100s%s:%u)", st->tcp_host ? "TCP target" : "local port",
	         st->local_name, v6 ? "[" : "", host, v6 ? "]" : "", st->port);
}

static int local_port_open(struct es_stream *st, struct st_connect_req *req, const char *path,
                           size_t path_len)
{
	struct es_conn *c;
	const char *host = st->tcp_host ? st->tcp_host : "127.0.0.1";
	if (es_conn_new(&c, st, host, st->port, NULL, NULL) < 0) {
		es_stream_fail(st, ST_EXT_ERR_INTERNAL, "out of memory");
		return -1;
	}
	if (req) { /* HTTP; a TCP_CONNECT has no request */
		char host_header[32];
		snprintf(host_header, sizeof host_header, "127.0.0.1:%u", st->port);
		if (es_conn_set_head(c, req, path, path_len, host_header, true, false) < 0)
			return -1;
	}
	return es_conn_dial(c) < 0 ? -1 : 0;
}

const struct es_backend_ops es_backend_local_port = {
        .name = "local port",
        .to_cloud_burst = ES_CONN_TO_CLOUD_BURST,
        .open = local_port_open,
        .write = es_conn_op_write,
        .on_writable = es_conn_op_on_writable,
        .close = es_conn_op_close,
        .describe = describe,
};
