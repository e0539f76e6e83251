/*
 * stream/rt/admin.c — the admin listener (stream/admin.h): parse one request head, answer from
 * memory, close. Loop thread only.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libwebsockets.h>
#include <openssl/crypto.h>

#include <stream/admin.h>
#include <stream/http.h>
#include <stream/session.h>
#include <stream/status.h>

#define ADMIN_HEAD_MAX  8192u
#define ADMIN_WRITE_MAX 16384u

struct admin_conn {
	uint8_t head[ADMIN_HEAD_MAX];
	size_t head_len;
	uint8_t *answer; /* LWS_PRE bytes of headroom, then the whole response */
	size_t answer_len, answer_off;
};

void st_text_put(struct st_text *t, const char *fmt, ...)
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

void st_text_metric(struct st_text *t, const char *name, const char *type, const char *help)
{
	st_text_put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void text_single(struct st_text *t, const char *name, const char *type, const char *help,
                        uint64_t value)
{
	st_text_metric(t, name, type, help);
	st_text_put(t, "%s %llu\n", name, (unsigned long long)value);
}

void st_text_counter(struct st_text *t, const char *name, const char *help, uint64_t value)
{
	text_single(t, name, "counter", help, value);
}

void st_text_gauge(struct st_text *t, const char *name, const char *help, uint64_t value)
{
	text_single(t, name, "gauge", help, value);
}

void st_text_labelled(struct st_text *t, const char *name, const char *type, const char *help,
                      const char *label, const struct st_text_sample *samples)
{
	st_text_metric(t, name, type, help);
	for (const struct st_text_sample *s = samples; s->label_value; s++)
		st_text_put(t, "%s{%s=\"%s\"} %llu\n", name, label, s->label_value,
		            (unsigned long long)s->value);
}

/* The first word of @v, with nothing a label value would need escaped. */
static void label_word(char *out, size_t cap, const char *v)
{
	size_t n = 0;
	for (; v && v[n] && v[n] != ' ' && n + 1 < cap; n++)
		out[n] = v[n] == '"' || v[n] == '\\' ? '_' : v[n];
	out[n] = '\0';
}

void st_text_build_info(struct st_text *t, const char *daemon, const char *version)
{
	char name[64], lws[64], ssl[64];
	snprintf(name, sizeof name, "%s_build_info", daemon);
	st_text_metric(t, name, "gauge",
	               "1, labelled with this process's version and its libwebsockets and "
	               "OpenSSL.");
	label_word(lws, sizeof lws, lws_get_library_version());
	/* "OpenSSL 3.0.x ..." : the second word is the version. */
	const char *o = OpenSSL_version(OPENSSL_VERSION);
	const char *sp = o ? strchr(o, ' ') : NULL;
	label_word(ssl, sizeof ssl, sp ? sp + 1 : o);
	st_text_put(t, "%s{version=\"%s\",libwebsockets=\"%s\",openssl=\"%s\"} 1\n", name, version,
	            lws, ssl);
}

void st_text_session_totals(struct st_text *t, const char *daemon,
                            const struct st_session_totals *tot)
{
	st_text_put(t,
	            "# HELP %s_tunnel_removes_total Base-protocol stream endings: REMOVEs we sent "
	            "in answer to the peer's (answered), ours queued when the peer's arrived "
	            "(crossed), the peer's repeats of a REMOVE already answered, absorbed "
	            "(repeated; KubeEdge's cloud resends until it sees ours).\n"
	            "# TYPE %s_tunnel_removes_total counter\n",
	            daemon, daemon);
	st_text_put(t, "%s_tunnel_removes_total{kind=\"answered\"} %llu\n", daemon,
	            (unsigned long long)tot->removes_answered);
	st_text_put(t, "%s_tunnel_removes_total{kind=\"crossed\"} %llu\n", daemon,
	            (unsigned long long)tot->removes_crossed);
	st_text_put(t, "%s_tunnel_removes_total{kind=\"repeated\"} %llu\n", daemon,
	            (unsigned long long)tot->removes_repeated);
}

static void respond(struct admin_conn *c, int status, const char *type, const char *body,
                    size_t body_len)
{
	size_t cap = LWS_PRE + body_len + 256;
	c->answer = malloc(cap);
	if (c->answer == NULL)
		return;
	char *head = (char *)c->answer + LWS_PRE;
	int n = snprintf(head, cap - LWS_PRE,
	                 "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
	                 "Connection: close\r\n\r\n",
	                 status, st_http_reason_phrase(status), type, body_len);
	if (n < 0 || LWS_PRE + (size_t)n + body_len > cap) {
		free(c->answer);
		c->answer = NULL;
		return;
	}
	memcpy(head + n, body, body_len);
	c->answer_len = (size_t)n + body_len;
}

static bool path_is(const struct st_http_request *req, const char *p)
{
	size_t n = strlen(p);
	return req->path_len == n && memcmp(req->path, p, n) == 0;
}

static void handle(const struct st_admin_ops *ops, struct admin_conn *c,
                   const struct st_http_request *req)
{
	const char *plain = "text/plain; charset=utf-8";
	if (path_is(req, "/metrics")) {
		struct st_text t = {.p = malloc(ST_ADMIN_BODY_MAX), .cap = ST_ADMIN_BODY_MAX};
		if (t.p == NULL)
			return;
		ops->render_metrics(&t, ops->user);
		if (t.overflow)
			respond(c, 500, plain, "metrics over the size limit\n", 28);
		else
			respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", t.p, t.len);
		free(t.p);
	} else if (path_is(req, "/healthz")) {
		respond(c, 200, plain, "ok\n", 3);
	} else if (path_is(req, "/readyz")) {
		const char *why = "not ready";
		if (ops->ready(ops->user, &why)) {
			respond(c, 200, plain, "ok\n", 3);
		} else {
			char body[128];
			int n = snprintf(body, sizeof body, "%s\n", why);
			respond(c, 503, plain, body,
			        n > 0 && (size_t)n < sizeof body ? (size_t)n : 0);
		}
	} else {
		/* Listings can be long: the body is the admin answer's bound, on the heap. */
		char *body = ops->action ? malloc(ST_ADMIN_BODY_MAX) : NULL;
		size_t n = 0;
		int st = body ? ops->action(ops->user, req->method, req->method_len, req->path,
		                            req->path_len, req->query, req->query_len, body,
		                            ST_ADMIN_BODY_MAX, &n)
		              : 0;
		if (st > 0)
			respond(c, st, plain, body, n);
		else
			respond(c, 404, plain, "try /metrics, /healthz or /readyz\n", 34);
		free(body);
	}
}

static int cb_admin(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                    size_t len)
{
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
		const struct st_admin_ops *ops = lws_get_vhost_user(lws_get_vhost(wsi));
		handle(ops, c, &req);
		if (c->answer == NULL)
			return -1;
		lws_callback_on_writable(wsi);
		return 0;
	}
	case LWS_CALLBACK_RAW_WRITEABLE: {
		if (c == NULL || c->answer == NULL)
			return 0;
		if (c->answer_off == c->answer_len)
			return -1; /* lws calls WRITEABLE only once its own buffer is sent: close */
		size_t n = c->answer_len - c->answer_off;
		if (n > ADMIN_WRITE_MAX)
			n = ADMIN_WRITE_MAX;
		/* The bytes before this chunk were sent already: they serve as its LWS_PRE. */
		if (lws_write(wsi, c->answer + LWS_PRE + c->answer_off, n, LWS_WRITE_RAW) < 0)
			return -1;
		c->answer_off += n;
		lws_callback_on_writable(wsi); /* more, or the close once all of it left */
		return 0;
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

const struct lws_protocols st_admin_protocols[2] = {
        {
                .name = "st-admin",
                .callback = cb_admin,
                .per_session_data_size = sizeof(struct admin_conn *),
                .rx_buffer_size = 4096,
        },
        {0}, /* terminator */
};
