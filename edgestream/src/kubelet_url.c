/*
 * edgestream/src/kubelet_url.c — --kubelet-url: https anywhere, plain http to loopback only (see
 * kubelet_url.h). Pure.
 */
#include "kubelet_url.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>

#include "es_route.h"

/* Is @host an IP literal of the loopback network? */
static bool loopback_literal(const char *host)
{
	struct in_addr a4;
	struct in6_addr a6;
	if (inet_pton(AF_INET, host, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	if (inet_pton(AF_INET6, host, &a6) != 1)
		return false;
	if (IN6_IS_ADDR_LOOPBACK(&a6))
		return true;
	return IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127;
}

int es_kubelet_url_parse(const char *url, struct es_kubelet_url *out, const char **why)
{
	char path[256];
	memset(out, 0, sizeof *out);
	*why = NULL;
	if (url == NULL)
		goto bad;
	if (strncmp(url, "http://", 7) == 0) {
		if (es_parse_url(url, "http", 10350, out->host, sizeof out->host, &out->port, path,
		                 sizeof path) < 0)
			goto bad;
		if (!loopback_literal(out->host)) {
			*why = "plain http is allowed only to a loopback IP (KubeEdge edged's "
			       "read-only "
			       "port: http://127.0.0.1:10350); use https:// for anything else";
			return -EINVAL;
		}
		out->plain = true;
	} else if (es_parse_url(url, "https", 10250, out->host, sizeof out->host, &out->port, path,
	                        sizeof path) < 0) {
		goto bad;
	}
	return 0;
bad:
	*why = "expected https://HOST[:PORT] or http://127.0.0.1[:PORT] (edged's read-only port)";
	return -EINVAL;
}
