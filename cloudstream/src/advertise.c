/*
 * cloudstream/src/advertise.c — --advertise-kubelet-port: the kubelet port an edge Node
 * advertises (status.daemonEndpoints.kubeletEndpoint.Port) is set to cloudstream's when the
 * node's tunnel comes up, as KubeEdge's cloudcore does, so kube-apiserver dials that port and
 * cloudstream-dnat-controller captures it.
 *
 * One PATCH /api/v1/nodes/<name>/status (a JSON merge patch of that field alone) on the worker
 * pool per tunnel up; a failure is logged (a 403 once: RBAC) and tried again at the node's next
 * tunnel up. A real kubelet on the node writes its own port back with its next status update:
 * this is for nodes without one (KubeEdge's edged, or edgestream with the CRI backend), see the
 * README.
 *
 * Loop thread, except advertise_work (its job only).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include <libwebsockets.h>

#include <stream/admin.h>
#include <stream/log.h>
#include <stream/workq.h>

#include "apiserver.h"
#include "cs.h"

#define ADVERTISE_BODY_MAX (1u << 20)

struct advertise_job {
	struct cs_server *srv;
	char node[CS_NODE_NAME_MAX_BYTES + 1];
	unsigned port;
	long http_status; /* 0: the call failed (error) */
	char error[CURL_ERROR_SIZE + 64];
	char message[200]; /* a Status answer's message */
};

/* Loop-thread counters (one server per process). */
static struct {
	uint64_t ok, failed;
	bool forbidden_logged;
} adv;

static void advertise_work(void *arg)
{
	struct advertise_job *j = arg;
	const struct cs_config *c = &j->srv->cfg;
	char url[1024], body[128];
	snprintf(url, sizeof url, "%s/api/v1/nodes/%s/status", c->apiserver_url, j->node);
	int n = snprintf(body, sizeof body,
	                 "{\"status\":{\"daemonEndpoints\":{\"kubeletEndpoint\":{\"Port\":%u}}}}",
	                 j->port);
	struct cs_api_request req = {.method = "PATCH",
	                             .content_type = "application/merge-patch+json",
	                             .body = body,
	                             .body_len = (size_t)n};
	struct cs_api_body b = {.max = ADVERTISE_BODY_MAX};
	j->http_status = cs_apiserver_call(c, url, &req, &b, j->error, sizeof j->error);
	if (j->http_status != 0 && j->http_status != 200 && b.p) {
		/* The Status's message, roughly: enough for the log line. */
		const char *m = strstr(b.p, "\"message\":\"");
		if (m) {
			m += 11;
			size_t len = strcspn(m, "\"");
			snprintf(j->message, sizeof j->message, "%.*s",
			         (int)(len < 190 ? len : 190), m);
		}
	}
	free(b.p);
}

static void advertise_done(void *arg, int status)
{
	struct advertise_job *j = arg;
	if (status != 0) {
		free(j);
		return;
	}
	if (j->http_status == 200) {
		adv.ok++;
		st_log(ST_LOG_INFO, j->node, 0,
		       "Node status.daemonEndpoints.kubeletEndpoint.Port set to %u", j->port);
	} else {
		adv.failed++;
		if (j->http_status == 403 && adv.forbidden_logged) {
			/* said once: every node would say the same */
		} else {
			if (j->http_status == 403)
				adv.forbidden_logged = true;
			st_log(ST_LOG_WARN, j->node, 0,
			       "advertising kubelet port %u failed: %s%s%s%s", j->port,
			       j->error[0] ? j->error : "HTTP ",
			       j->error[0] ? ""
			                   : (j->http_status == 403
			                              ? "403 (needs patch on nodes/status)"
			                      : j->http_status == 404 ? "404 (no such Node)"
			                                              : "error"),
			       j->message[0] ? ": " : "", j->message);
		}
	}
	free(j);
}

void cs_advertise_node_up(struct cs_server *srv, const char *node)
{
	if (srv->cfg.advertise_kubelet_port == 0 || srv->wq == NULL)
		return;
	struct advertise_job *j = calloc(1, sizeof *j);
	if (j == NULL)
		return;
	j->srv = srv;
	j->port = (unsigned)srv->cfg.advertise_kubelet_port;
	snprintf(j->node, sizeof j->node, "%s", node);
	if (st_workq_submit(srv->wq, advertise_work, advertise_done, j) < 0) {
		adv.failed++;
		st_log(ST_LOG_WARN, node, 0,
		       "advertising the kubelet port: the worker pool is full");
		free(j);
	}
}

int cs_advertise_check(const struct cs_server *srv)
{
	if (srv->cfg.advertise_kubelet_port != 0 &&
	    (srv->cfg.apiserver_url == NULL || srv->cfg.apiserver_url[0] == '\0')) {
		st_err("--advertise-kubelet-port needs --apiserver-url (and patch on "
		       "nodes/status)");
		return -EINVAL;
	}
	return 0;
}

void cs_advertise_metrics(struct st_text *t, const struct cs_server *srv)
{
	if (srv->cfg.advertise_kubelet_port == 0)
		return;
	st_text_labelled(
	        t, "cloudstream_advertised_port_patches_total", "counter",
	        "PATCHes of an edge Node's kubelet port (--advertise-kubelet-port), by result.",
	        "result",
	        (const struct st_text_sample[]){{"ok", adv.ok}, {"failed", adv.failed}, {0}});
}
