/*
 * cloudstream/src/route.c — request → node (see route.h). Pure.
 */
#include "route.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static void set_node(struct cs_route_result *out, enum cs_route_source src, void *session,
                     const char *name, size_t len)
{
	out->source = src;
	out->session = session;
	if (len > CS_NODE_NAME_MAX_BYTES)
		len = CS_NODE_NAME_MAX_BYTES;
	memcpy(out->node, name, len);
	out->node[len] = '\0';
}

/* Is @ip held by two or more connected nodes? Then @out remembers both names (the first two). */
static bool shared_ip(const struct cs_route_lookup *lk, const char *ip, size_t len,
                      struct cs_route_result *out)
{
	const char *names[2];
	if (lk->ip_owners == NULL || lk->ip_owners(ip, len, names, 2, lk->user) < 2)
		return false;
	if (!out->shared) {
		out->shared = true;
		size_t n = len > CS_IP_TEXT_MAX_BYTES ? CS_IP_TEXT_MAX_BYTES : len;
		memcpy(out->shared_ip, ip, n);
		out->shared_ip[n] = '\0';
		snprintf(out->shared_by[0], sizeof out->shared_by[0], "%s", names[0]);
		snprintf(out->shared_by[1], sizeof out->shared_by[1], "%s", names[1]);
	}
	return true;
}

/* Nothing else named a node: a shared IP is the answer (no session: the caller refuses). */
static int end_shared(struct cs_route_result *out, enum cs_route_source src)
{
	set_node(out, src, NULL, out->shared_ip, strlen(out->shared_ip));
	return 0;
}

/* Parses an IP literal; returns its family or 0. */
static int parse_ip(const char *p, size_t len, struct in6_addr *a6, struct in_addr *a4)
{
	char buf[INET6_ADDRSTRLEN];
	if (len == 0 || len >= sizeof buf)
		return 0;
	memcpy(buf, p, len);
	buf[len] = '\0';
	if (inet_pton(AF_INET, buf, a4) == 1)
		return AF_INET;
	if (inet_pton(AF_INET6, buf, a6) == 1)
		return AF_INET6;
	return 0;
}

/* Loopback or unspecified: what a client's Host names when it talked to a local apiserver. */
static bool not_a_node_address(int family, const struct in6_addr *a6, const struct in_addr *a4)
{
	if (family == AF_INET) {
		uint32_t v = ntohl(a4->s_addr);
		return (v >> 24) == 127 || v == 0;
	}
	static const struct in6_addr any6 = IN6ADDR_ANY_INIT;
	if (IN6_IS_ADDR_LOOPBACK(a6) || memcmp(a6, &any6, sizeof any6) == 0)
		return true;
	if (IN6_IS_ADDR_V4MAPPED(a6)) {
		struct in_addr v4;
		memcpy(&v4, &a6->s6_addr[12], 4);
		return not_a_node_address(AF_INET, NULL, &v4);
	}
	return false;
}

/* A DNS-1123 subdomain, as node names are. */
static bool valid_name(const char *p, size_t len)
{
	if (len == 0 || len > CS_NODE_NAME_MAX_BYTES)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = p[i];
		bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
		if (!alnum && c != '-' && c != '.')
			return false;
		if ((i == 0 || i == len - 1) && !alnum)
			return false;
	}
	return true;
}

/* Host header → the host part without port or brackets. */
static void host_part(const char *h, size_t len, const char **p, size_t *n)
{
	if (len > 0 && h[0] == '[') {
		const char *end = memchr(h, ']', len);
		*p = h + 1;
		*n = end ? (size_t)(end - h - 1) : len - 1;
		return;
	}
	const char *colon = memchr(h, ':', len);
	/* More than one colon without brackets: a bare IPv6 address, no port. */
	if (colon && memchr(colon + 1, ':', len - (size_t)(colon + 1 - h)) != NULL)
		colon = NULL;
	*p = h;
	*n = colon ? (size_t)(colon - h) : len;
}

/* Does @h (a Host value) carry a kubelet port (10250, or cloudstream's 10350)? That is what
 * kube-apiserver dials for a node; a client's own Host on upgrades carries the apiserver's. */
static bool at_kubelet_port(const char *h, size_t len)
{
	const char *p = h + len;
	size_t digits = 0;
	while (p > h && p[-1] >= '0' && p[-1] <= '9' && digits < 6) {
		p--;
		digits++;
	}
	if (digits != 5 || p == h || p[-1] != ':')
		return false;
	return memcmp(p, "10250", 5) == 0 || memcmp(p, "10350", 5) == 0;
}

/* X-Forwarded-Uri → node name view. 1 found, 0 not a node-proxy path, -EBADMSG invalid name. */
static int forwarded_node(const char *u, size_t len, const char **p, size_t *n)
{
	static const char prefix[] = "/api/v1/nodes/";
	size_t pl = sizeof prefix - 1;
	if (len <= pl || memcmp(u, prefix, pl) != 0)
		return 0;
	const char *s = u + pl;
	size_t rest = len - pl;
	const char *slash = memchr(s, '/', rest);
	size_t seg = slash ? (size_t)(slash - s) : rest;
	if (slash == NULL || seg == 0 || rest - seg < 6 || memcmp(slash, "/proxy", 6) != 0)
		return 0;
	/* {name}, {name}:{port}, https:{name}:{port} */
	if (seg > 6 && memcmp(s, "https:", 6) == 0) {
		s += 6;
		seg -= 6;
	} else if (seg > 5 && memcmp(s, "http:", 5) == 0) {
		s += 5;
		seg -= 5;
	}
	const char *colon = memchr(s, ':', seg);
	if (colon)
		seg = (size_t)(colon - s);
	if (!valid_name(s, seg))
		return -EBADMSG;
	*p = s;
	*n = seg;
	return 1;
}

static int resolve(const struct cs_route_input *in, const struct cs_route_lookup *lk,
                   struct cs_route_result *out)
{
	memset(out, 0, sizeof *out);
	struct in6_addr a6;
	struct in_addr a4;
	const char *node;
	enum cs_route_source shared_src = CS_ROUTE_NONE;
	/* A shared IP names no one node: the later rules may still name it (a Host name, the
	 * X-Forwarded-Uri, the pod); if none does, the result is the shared IP, unrouted. */
	if (in->orig_dst_ip && parse_ip(in->orig_dst_ip, in->orig_dst_ip_len, &a6, &a4) &&
	    shared_ip(lk, in->orig_dst_ip, in->orig_dst_ip_len, out)) {
		shared_src = CS_ROUTE_ORIG_DST;
	} else if (in->orig_dst_ip && parse_ip(in->orig_dst_ip, in->orig_dst_ip_len, &a6, &a4)) {
		node = NULL;
		void *s = lk->by_ip(in->orig_dst_ip, in->orig_dst_ip_len, &node, lk->user);
		if (s && node)
			set_node(out, CS_ROUTE_ORIG_DST, s, node, strlen(node));
		else
			set_node(out, CS_ROUTE_ORIG_DST, NULL, in->orig_dst_ip,
			         in->orig_dst_ip_len);
		return 0;
	}
	if (in->host && in->host_len) {
		const char *hp;
		size_t hn;
		host_part(in->host, in->host_len, &hp, &hn);
		int fam = parse_ip(hp, hn, &a6, &a4);
		if (fam && !not_a_node_address(fam, &a6, &a4) && shared_ip(lk, hp, hn, out)) {
			if (shared_src == CS_ROUTE_NONE)
				shared_src = CS_ROUTE_HOST_IP;
		} else if (fam && !not_a_node_address(fam, &a6, &a4)) {
			node = NULL;
			void *s = lk->by_ip(hp, hn, &node, lk->user);
			if (s && node) {
				set_node(out, CS_ROUTE_HOST_IP, s, node, strlen(node));
				return 0;
			}
		} else if (!fam && valid_name(hp, hn)) {
			/* A name counts only when a node of that name is connected: "kubernetes" or
			 * an apiserver's own name is not a node. */
			void *s = lk->by_name(hp, hn, lk->user);
			if (s) {
				set_node(out, CS_ROUTE_HOST_NAME, s, hp, hn);
				return 0;
			}
		}
	}
	if (in->forwarded_uri) {
		const char *np;
		size_t nn;
		int rc = forwarded_node(in->forwarded_uri, in->forwarded_uri_len, &np, &nn);
		if (rc < 0)
			return rc;
		if (rc > 0) {
			set_node(out, CS_ROUTE_FORWARDED_URI, lk->by_name(np, nn, lk->user), np,
			         nn);
			return 0;
		}
	}
	if (lk->pod_node && in->pod_namespace && in->pod_name) {
		size_t nl = 0;
		node = NULL;
		int rc = lk->pod_node(in->pod_namespace, in->pod_namespace_len, in->pod_name,
		                      in->pod_name_len, &node, &nl, lk->user);
		if (rc == 1) {
			set_node(out, CS_ROUTE_POD, lk->by_name(node, nl, lk->user), node, nl);
			return 0;
		}
		if (rc == 0) {
			out->need_pod_lookup = true;
			return 0;
		}
	}
	if (shared_src != CS_ROUTE_NONE)
		return end_shared(out, shared_src);
	if (in->host && in->host_len) {
		/* A node IP in Host without a session still names that node (for the 503). */
		const char *hp;
		size_t hn;
		host_part(in->host, in->host_len, &hp, &hn);
		int fam = parse_ip(hp, hn, &a6, &a4);
		if (fam && !not_a_node_address(fam, &a6, &a4)) {
			set_node(out, CS_ROUTE_HOST_IP, NULL, hp, hn);
			return 0;
		}
		/* So does a name at a kubelet port (a node that is not connected), while a bare
		 * name ("kubernetes.default.svc") stays nobody's. */
		if (!fam && valid_name(hp, hn) && at_kubelet_port(in->host, in->host_len)) {
			set_node(out, CS_ROUTE_HOST_NAME, NULL, hp, hn);
			return 0;
		}
	}
	return 0;
}

int cs_route_resolve(const struct cs_route_input *in, const struct cs_route_lookup *lk,
                     struct cs_route_result *out)
{
	int rc = resolve(in, lk, out);
	/* shared stays set only when the shared IP is the answer */
	if (out->shared && (out->session != NULL || strcmp(out->node, out->shared_ip) != 0 ||
	                    out->need_pod_lookup))
		out->shared = false;
	return rc;
}
