/* Fuzz target: the edge's routing and allow-list (edgestream/src/es_route.h). The input is
 * split at '\n': allow-list entries until an empty line, then a request path, then a TCP port
 * and target. A local-port answer must name a listed port; a refusal must carry a reason. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "es_route.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool listed(const struct es_allow *a, uint16_t port)
{
	for (size_t i = 0; i < a->n; i++)
		if (a->v[i].port == port)
			return true;
	return false;
}

static void check(const struct es_allow *a, const struct es_target *t)
{
	if (t->kind == ES_TARGET_LOCAL_PORT && !listed(a, t->port))
		abort();
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
		es_route_tcp(&a, port, rest, strlen(rest), &t);
		check(&a, &t);
	}
	char host[64], path[128];
	int port;
	es_parse_url(s, "wss", 443, host, sizeof host, &port, path, sizeof path);
	free(s);
	return 0;
}
