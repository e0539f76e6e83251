/*
 * cloudstream/src/events_post.c — Kubernetes Events on the Node of a refused or flapping tunnel,
 * when --apiserver-url is set: the correlator (events.h) decides, this file makes its calls on
 * the worker pool (POST /api/v1/namespaces/default/events, PATCH .../events/<name> with a
 * strategic-merge patch, as client-go's recorder does) and feeds the answers back. At most
 * EVENT_CALLS_IN_FLIGHT calls at once, so events never crowd out pod lookups and reviews.
 * Loop thread, except ev_work (a worker).
 */
#include "cs.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include <stream/admin.h>
#include <stream/log.h>
#include <stream/workq.h>

#include "apiserver.h"
#include "events.h"

#define EVENT_CALLS_IN_FLIGHT 2u
#define EVENT_BODY_MAX        4096u
#define EVENT_SWEEP_US        (1000u * LWS_US_PER_MS)

struct ev_job {
	struct cs_server *srv;
	uint64_t id;
	bool create;
	char url[1024];
	char body[EVENT_BODY_MAX];
	/* results (worker → loop) */
	long http_status;
	char error[CURL_ERROR_SIZE + 64];
};

static uint64_t wall_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void ev_work(void *arg)
{
	struct ev_job *j = arg;
	struct cs_api_request req = {.method = j->create ? NULL : "PATCH",
	                             .content_type =
	                                     j->create ? "application/json"
	                                               : "application/strategic-merge-patch+json",
	                             .body = j->body,
	                             .body_len = strlen(j->body)};
	struct cs_api_body answer = {.max = 64 * 1024};
	j->http_status =
	        cs_apiserver_call(&j->srv->cfg, j->url, &req, &answer, j->error, sizeof j->error);
	free(answer.p);
}

static void pump(struct cs_server *srv);

static void ev_done(void *arg, int status)
{
	struct ev_job *j = arg;
	struct cs_server *srv = j->srv;
	srv->events_in_flight--;
	if (status != 0) { /* cancelled: the process is stopping */
		free(j);
		return;
	}
	int result;
	if (j->error[0] == '\0' && (j->http_status == 201 || j->http_status == 200))
		result = 0;
	else if (j->error[0] == '\0' && j->create && j->http_status == 409)
		result = 0; /* AlreadyExists: ours, from a call whose answer was lost; patch it */
	else if (j->error[0] == '\0' && !j->create && j->http_status == 404)
		result = -ENOENT; /* expired (--event-ttl): create it again */
	else
		result = -EIO;
	if (result == -EIO) {
		/* Once per failure streak at WARN: an apiserver refusing Events (RBAC) must not
		 * fill the log. */
		if (!srv->events_failing)
			st_warn("cannot %s a Node event at %s: %s", j->create ? "create" : "update",
			        srv->cfg.apiserver_url,
			        j->error[0] ? j->error
			                    : "unexpected HTTP status (RBAC: events create, "
			                      "patch?)");
		srv->events_failing = true;
	} else {
		srv->events_failing = false;
	}
	cs_events_done(srv->events, j->id, result, st_now_ms());
	free(j);
	pump(srv);
}

/* Starts the calls that are due, up to EVENT_CALLS_IN_FLIGHT. */
static void pump(struct cs_server *srv)
{
	uint64_t now = st_now_ms();
	while (srv->events && srv->events_in_flight < EVENT_CALLS_IN_FLIGHT) {
		struct cs_event_call call;
		if (cs_events_next(srv->events, now, &call) != 1)
			return;
		struct ev_job *j = calloc(1, sizeof *j);
		ssize_t n = j ? cs_events_body(&call, "cloudstream", srv->replica, j->body,
		                               sizeof j->body)
		              : -ENOMEM;
		if (n < 0) {
			free(j);
			cs_events_done(srv->events, call.id, (int)n, now);
			continue;
		}
		j->srv = srv;
		j->id = call.id;
		j->create = call.create;
		if (call.create)
			snprintf(j->url, sizeof j->url, "%s/api/v1/namespaces/%s/events",
			         srv->cfg.apiserver_url, "default");
		else
			snprintf(j->url, sizeof j->url, "%s/api/v1/namespaces/%s/events/%s",
			         srv->cfg.apiserver_url, "default", call.name);
		int rc = st_workq_submit(srv->wq, ev_work, ev_done, j);
		if (rc < 0) {
			free(j);
			cs_events_done(srv->events, call.id, rc, now); /* retried later */
			return;
		}
		srv->events_in_flight++;
	}
}

static void on_sweep(lws_sorted_usec_list_t *sul)
{
	struct cs_server *srv = lws_container_of(sul, struct cs_server, sul_events);
	pump(srv);
	lws_sul_schedule(srv->ctx, 0, &srv->sul_events, on_sweep, EVENT_SWEEP_US);
}

int cs_node_events_start(struct cs_server *srv)
{
	if (srv->cfg.apiserver_url == NULL || srv->cfg.apiserver_url[0] == '\0')
		return 0;
	if (cs_events_new(&srv->events) < 0)
		return -ENOMEM;
	lws_sul_schedule(srv->ctx, 0, &srv->sul_events, on_sweep, EVENT_SWEEP_US);
	return 0;
}

void cs_node_events_stop(struct cs_server *srv)
{
	lws_sul_cancel(&srv->sul_events);
}

void cs_node_events_free(struct cs_server *srv)
{
	cs_events_free(srv->events);
	srv->events = NULL;
}

void cs_node_event(struct cs_server *srv, const char *node, enum cs_event_reason reason,
                   const char *fmt, ...)
{
	if (srv->events == NULL || node == NULL || node[0] == '\0')
		return;
	char msg[CS_EVENTS_MESSAGE_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	cs_events_note(srv->events, node, reason, msg, st_now_ms(), wall_ns());
	pump(srv);
}

void cs_node_events_tunnel_up(struct cs_server *srv, const char *node)
{
	if (srv->events == NULL)
		return;
	cs_events_tunnel_up(srv->events, node, st_now_ms(), wall_ns());
	pump(srv);
}

void cs_node_events_metrics(struct st_text *t, const struct cs_server *srv)
{
	struct cs_events_stats s = {0};
	if (srv->events)
		cs_events_stats(srv->events, &s);
	st_text_labelled(
	        t, "cloudstream_node_events_total", "counter",
	        "Kubernetes Events about refused or flapping tunnels on their Node "
	        "(--apiserver-url): Events created, repeats folded into an Event's count "
	        "(patched), calls that failed (retried), occurrences dropped by the bounded "
	        "table.",
	        "result",
	        (const struct st_text_sample[]){{"created", s.created},
	                                        {"patched", s.patched},
	                                        {"failed", s.failed},
	                                        {"dropped", s.dropped},
	                                        {0}});
}
