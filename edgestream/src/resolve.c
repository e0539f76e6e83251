/*
 * edgestream/src/resolve.c — host names resolved on the worker pool with a per-name cache
 * (resolve.h). The worker runs getaddrinfo into its job; the completion, on the loop, stores
 * the answer in the name and hands it to every dial that waited on it.
 *
 * A job points at its name: names live in the instance, which frees the worker pool (whose
 * completions run, cancelled or not) before anything else. A job is abandonable: a stop waits
 * ST_WORKQ_ABANDON_MS at most for a getaddrinfo that hangs (a nameserver that does not answer
 * holds it for resolv.conf's timeout x attempts), then the worker frees the job once the call
 * returns (name_drop) and its name is never looked at again.
 */
#include "resolve.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <stream/clock.h>
#include <stream/err.h>
#include <stream/log.h>
#include <stream/workq.h>

struct name_job {
	struct es_name *n; /* read on the loop only (completion) */
	es_resolve_fn fn;
	char host[ES_NAME_HOST_BYTES];
	char addrs[ES_NAME_MAX_ADDRS][ES_NAME_ADDR_BYTES];
	size_t count;
	char err[ES_NAME_ERR_BYTES];
};

bool es_is_ip_literal(const char *host)
{
	unsigned char buf[sizeof(struct in6_addr)];
	return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

size_t es_resolve_host(const char *host, char (*addrs)[ES_NAME_ADDR_BYTES], size_t cap, char *err,
                       size_t errcap)
{
	struct addrinfo hints, *res = NULL;
	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	int rc = getaddrinfo(host, NULL, &hints, &res);
	if (rc != 0) {
		snprintf(err, errcap, "cannot resolve %.80s: %.60s", host,
		         rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
		return 0;
	}
	/* IPv4 addresses first ("localhost" answers ::1 first, and a cloud, its load balancer or
	 * a kubelet listening on IPv4 only is the common case), then IPv6; each once. */
	size_t n = 0;
	for (int family = AF_INET; family != 0; family = family == AF_INET ? AF_INET6 : 0)
		for (const struct addrinfo *a = res; a && n < cap; a = a->ai_next) {
			if (a->ai_family != family)
				continue;
			const void *ip =
			        family == AF_INET
			                ? (const void *)&((const struct sockaddr_in *)(const void *)
			                                          a->ai_addr)
			                          ->sin_addr
			                : (const void *)&(
			                          (const struct sockaddr_in6 *)(const void *)
			                                  a->ai_addr)
			                          ->sin6_addr;
			if (inet_ntop(family, ip, addrs[n], ES_NAME_ADDR_BYTES) == NULL)
				continue;
			bool seen = false;
			for (size_t k = 0; k < n && !seen; k++)
				seen = strcmp(addrs[k], addrs[n]) == 0;
			if (!seen)
				n++;
		}
	freeaddrinfo(res);
	if (n == 0)
		snprintf(err, errcap, "cannot resolve %.80s: no IPv4 or IPv6 address", host);
	return n;
}

void es_name_init(struct es_name *n, struct st_workq *wq, const char *label, const char *host)
{
	memset(n, 0, sizeof *n);
	n->wq = wq;
	n->label = label;
	snprintf(n->host, sizeof n->host, "%s", host);
	n->literal = es_is_ip_literal(n->host);
	n->resolve = es_resolve_host;
}

bool es_name_waiting(const struct es_name_wait *w)
{
	return !lws_dll2_is_detached(&w->list);
}

void es_name_cancel(struct es_name_wait *w)
{
	if (es_name_waiting(w))
		lws_dll2_remove(&w->list);
}

/* Worker. */
static void name_work(void *arg)
{
	struct name_job *j = arg;
	j->count = j->fn(j->host, j->addrs, ES_NAME_MAX_ADDRS, j->err, sizeof j->err);
}

/* Worker, for a job the stop abandoned: nothing waits for it any more. */
static void name_drop(void *arg)
{
	free(arg);
}

/* Every dial waiting on @n learns the outcome. A callback may cancel or free other waiters
 * (a failed stream frees its connection), so each is taken off a list of its own first. */
static void deliver(struct es_name *n, int rc, const char *why)
{
	lws_dll2_owner_t batch;
	memset(&batch, 0, sizeof batch);
	struct lws_dll2 *d;
	while ((d = lws_dll2_get_head(&n->waiters)) != NULL) {
		lws_dll2_remove(d);
		lws_dll2_add_tail(d, &batch);
	}
	char reason[ES_NAME_ERR_BYTES];
	snprintf(reason, sizeof reason, "%s", why ? why : ""); /* @why may be @n's */
	while ((d = lws_dll2_get_head(&batch)) != NULL) {
		struct es_name_wait *w = lws_container_of(d, struct es_name_wait, list);
		lws_dll2_remove(d);
		if (rc == 0 && n->n_addrs > 0)
			w->cb(w, 0, n->addrs[n->cur], n->gen, NULL);
		else
			w->cb(w, rc < 0 ? rc : -EHOSTUNREACH, NULL, 0, reason);
	}
}

static void name_done(void *arg, int status)
{
	struct name_job *j = arg;
	struct es_name *n = j->n;
	n->running = false;
	if (status < 0) {
		free(j);
		deliver(n, -ECANCELED, "the worker pool stopped");
		return;
	}
	uint64_t now = st_now_ms();
	if (j->count > 0) {
		memcpy(n->addrs, j->addrs, sizeof n->addrs);
		n->n_addrs = j->count;
		n->cur = 0;
		n->gen++;
		n->stale = false;
		n->resolved_ms = now;
		n->resolves_ok++;
		if (n->failing)
			st_info("the %s name %s resolves again: %s%s", n->label, n->host,
			        n->addrs[0], n->n_addrs > 1 ? " (and more)" : "");
		else
			st_dbg("the %s name %s resolved: %s (%zu address%s)", n->label, n->host,
			       n->addrs[0], n->n_addrs, n->n_addrs > 1 ? "es" : "");
		n->failing = false;
		free(j);
		deliver(n, 0, NULL);
		return;
	}
	n->resolves_failed++;
	n->failed_ms = now;
	snprintf(n->err, sizeof n->err, "%s", j->err);
	free(j);
	bool have_old = n->n_addrs > 0 && !n->stale;
	if (!n->failing)
		st_warn("%s (the %s's name)%s; counted in edgestream_name_resolutions_total, tried "
		        "again at most every %u ms, logged again once it resolves",
		        n->err, n->label,
		        have_old ? ": its last address stays in use"
		                 : ": dials to it fail meanwhile",
		        ES_NAME_RETRY_MS);
	n->failing = true;
	if (have_old)
		n->resolved_ms =
		        now - ES_NAME_REFRESH_MS + ES_NAME_RETRY_MS; /* refresh again soon */
	deliver(n, -EHOSTUNREACH, n->err);
}

static int start(struct es_name *n)
{
	struct name_job *j = calloc(1, sizeof *j);
	if (j == NULL)
		return -ENOMEM;
	j->n = n;
	j->fn = n->resolve;
	memcpy(j->host, n->host, sizeof j->host);
	int rc = st_workq_submit_abandonable(n->wq, name_work, name_done, name_drop, j);
	if (rc < 0) {
		free(j);
		return rc;
	}
	n->running = true;
	return 0;
}

void es_name_prefetch(struct es_name *n)
{
	if (!n->literal && n->n_addrs == 0 && !n->running)
		(void)start(n); /* a busy pool: the first dial starts it */
}

int es_name_get(struct es_name *n, struct es_name_wait *w, es_name_cb cb, const char **addr,
                uint32_t *gen, const char **why)
{
	*why = "";
	if (n->literal) {
		*addr = n->host;
		*gen = 0;
		return 0;
	}
	uint64_t now = st_now_ms();
	if (n->n_addrs > 0 && !n->stale) {
		/* Old enough: refreshed in the background, the dial goes on meanwhile. */
		if (!n->running && now - n->resolved_ms >= ES_NAME_REFRESH_MS)
			(void)start(n);
		*addr = n->addrs[n->cur];
		*gen = n->gen;
		return 0;
	}
	if (n->failing && !n->running && now - n->failed_ms < ES_NAME_RETRY_MS) {
		*why = n->err;
		return -EHOSTUNREACH;
	}
	if (!n->running) {
		int rc = start(n);
		if (rc < 0) {
			*why = rc == -EAGAIN ? "cannot resolve now: the worker pool is busy"
			                     : "cannot resolve now: the worker pool is not running";
			return rc;
		}
	}
	w->cb = cb;
	lws_dll2_add_tail(&w->list, &n->waiters);
	return 1;
}

void es_name_dial_failed(struct es_name *n, uint32_t gen)
{
	if (n->literal || n->n_addrs == 0 || n->stale || gen != n->gen)
		return;
	if (++n->cur >= n->n_addrs) {
		n->cur = 0;
		n->stale = true; /* each address failed: the next dial resolves again */
	}
}
