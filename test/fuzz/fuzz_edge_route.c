/* Fuzz target: the edge's routing and allow-list (edgestream/src/es_route.h). The input is
 * split at '\n': allow-list entries ("pod:PORT", "cidr:CIDR" for the pod policy) until an
 * empty line, then a request path, then a TCP port, an optional space and a target. A local-port answer must name a listed port; a refusal must carry a reason. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stream/ipv4.h>

#include "es_route.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool listed(const struct es_allow *a, uint16_t port)
{
	for (size_t i = 0; i < a->n; i++)
		if (a->v[i].port == port)
			return true;
	return false;
}

static bool pod_allowed(const struct es_allow *a, const struct es_target *t)
{
	uint32_t ip;
	if (!st_ipv4_parse(t->host, strlen(t->host), &ip))
		return false;
	bool port = false, in = false;
	for (size_t i = 0; i < a->n_pod_ports; i++)
		port = port || a->pod_ports[i] == t->port;
	for (size_t i = 0; i < a->n_pod_cidrs; i++)
		in = in || (ip & a->pod_cidrs[i].mask) == a->pod_cidrs[i].net;
	return port && in;
}

static void check(const struct es_allow *a, const struct es_target *t)
{
	if (t->kind == ES_TARGET_LOCAL_PORT && !listed(a, t->port))
		abort();
	if (t->kind == ES_TARGET_POD && !pod_allowed(a, t))
		abort(); /* nothing outside the pod policy is ever dialled */
	if (t->kind == ES_TARGET_REFUSE && t->reason[0] == '\0')
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 4096)
		return 0;
	char *s = malloc(size + 1);
	memcpy(s, data, size);
	s[size] = '\0';
	struct es_allow a;
	memset(&a, 0, sizeof a);
	char err[200];
	char *line = s, *nl;
	while ((nl = strchr(line, '\n')) != NULL && nl != line) {
		*nl = '\0';
		/* "pod:PORT" and "cidr:CIDR" lines set the pod policy. */
		if (strncmp(line, "pod:", 4) == 0)
			es_allow_add_pod_port(&a, line + 4, err, sizeof err);
		else if (strncmp(line, "cidr:", 5) == 0)
			es_allow_add_pod_cidr(&a, line + 5, err, sizeof err);
		else
			es_allow_add(&a, line, err, sizeof err);
		line = nl + 1;
	}
	if (nl)
		line = nl + 1;
	nl = strchr(line, '\n');
	size_t plen = nl ? (size_t)(nl - line) : strlen(line);
	struct es_target t;
	es_route_request(&a, plen & 1, plen & 2, line, plen, &t);
	check(&a, &t);
	if (t.kind == ES_TARGET_LOCAL_PORT && (t.path_len == 0 || t.path[0] != '/'))
		abort();
	if (nl) {
		char *rest = nl + 1;
		unsigned long port = strtoul(rest, &rest, 10);
		if (*rest == ' ')
			rest++; /* "PORT TARGET": a target may start with a digit (a pod IP) */
		es_route_tcp(&a, port & 1, port, rest, strlen(rest), &t);
		check(&a, &t);
		if (t.kind == ES_TARGET_KUBELET_TCP && !(port & 1))
			abort(); /* the kubelet target only with a kubelet */
	}
	char host[64], path[128];
	int port;
	es_parse_url(s, "wss", 443, host, sizeof host, &port, path, sizeof path);
	free(s);
	return 0;
}
