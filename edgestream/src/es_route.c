/*
 * edgestream/src/es_route.c — request → backend mapping (es_route.h). Pure.
 */
#include "es_route.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stream/ext.h>
#include <stream/ipv4.h>
#include <stream/query.h>

static bool name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-';
}

int es_allow_add(struct es_allow *a, const char *entry, char *err, size_t errlen)
{
	const char *eq = strchr(entry, '=');
	size_t nlen = eq ? (size_t)(eq - entry) : 0;
	if (eq == NULL || nlen == 0 || nlen > ES_LOCAL_PORT_NAME_MAX) {
		snprintf(err, errlen, "\"%.80s\": expected NAME=PORT, e.g. node-exporter=9100",
		         entry);
		return -EINVAL;
	}
	for (size_t i = 0; i < nlen; i++) {
		if (!name_char(entry[i])) {
			snprintf(err, errlen, "\"%.80s\": a name is [a-z0-9.-]", entry);
			return -EINVAL;
		}
	}
	uint32_t ip;
	if ((nlen == sizeof ES_TCP_TARGET_KUBELET - 1 &&
	     memcmp(entry, ES_TCP_TARGET_KUBELET, nlen) == 0) ||
	    st_ipv4_parse(entry, nlen, &ip)) {
		snprintf(err, errlen, "\"%.80s\": \"kubelet\" and IPv4 addresses are not names",
		         entry);
		return -EINVAL;
	}
	char *end;
	errno = 0;
	unsigned long port = strtoul(eq + 1, &end, 10);
	if (eq[1] < '0' || eq[1] > '9' || *end != '\0' || errno || port < 1 || port > 65535) {
		snprintf(err, errlen, "\"%.80s\": the port must be 1..65535", entry);
		return -EINVAL;
	}
	for (size_t i = 0; i < a->n; i++) {
		if (a->v[i].port == port ||
		    (strlen(a->v[i].name) == nlen && memcmp(a->v[i].name, entry, nlen) == 0)) {
			snprintf(err, errlen, "\"%.80s\": name or port listed twice", entry);
			return -EEXIST;
		}
	}
	if (a->n >= ES_MAX_LOCAL_PORTS) {
		snprintf(err, errlen, "more than %u local ports", ES_MAX_LOCAL_PORTS);
		return -ENOSPC;
	}
	memcpy(a->v[a->n].name, entry, nlen);
	a->v[a->n].name[nlen] = '\0';
	a->v[a->n].port = (uint16_t)port;
	a->n++;
	return 0;
}

/* A refusal whose reason is @pre, then @what (cut at 64 bytes), then @post. */
static void refuse(struct es_target *out, uint64_t code, const char *pre, const char *what,
                   size_t what_len, const char *post)
{
	out->kind = ES_TARGET_REFUSE;
	out->refuse_code = code;
	if (what_len > 64)
		what_len = 64;
	snprintf(out->reason, sizeof out->reason, "%s%.*s%s", pre, (int)what_len, what, post);
}

/* The entry named @name, or whose port is the decimal number @name. */
static const struct es_local_port *find_entry(const struct es_allow *a, const char *name,
                                              size_t len)
{
	unsigned long num = 0;
	bool numeric = len > 0 && len <= 5;
	for (size_t i = 0; i < len && numeric; i++) {
		if (name[i] < '0' || name[i] > '9')
			numeric = false;
		else
			num = num * 10 + (unsigned long)(name[i] - '0');
	}
	for (size_t i = 0; i < a->n; i++) {
		if (strlen(a->v[i].name) == len && memcmp(a->v[i].name, name, len) == 0)
			return &a->v[i];
		if (numeric && a->v[i].port == num)
			return &a->v[i];
	}
	return NULL;
}

int es_route_request(const struct es_allow *a, bool kubelet_enabled, bool cri_enabled,
                     const char *path, size_t path_len, struct es_target *out)
{
	memset(out, 0, sizeof *out);
	const size_t plen = sizeof ES_PORTS_PREFIX - 1;
	if (path_len == 0 || path[0] != '/') {
		refuse(out, ST_EXT_ERR_BAD_REQUEST, "path \"", path, path_len,
		       "\" does not start with /");
		return 0;
	}
	if (path_len >= plen && memcmp(path, ES_PORTS_PREFIX, plen) == 0) {
		const char *name = path + plen;
		const char *slash = memchr(name, '/', path_len - plen);
		size_t nlen = slash ? (size_t)(slash - name) : path_len - plen;
		const struct es_local_port *e = find_entry(a, name, nlen);
		if (e == NULL) {
			refuse(out, ST_EXT_ERR_REFUSED, "local port \"", name, nlen,
			       "\" is not in this node's allow-list (--local-port)");
			return 0;
		}
		out->kind = ES_TARGET_LOCAL_PORT;
		out->port = e->port;
		out->local_name = e->name;
		out->path = slash ? slash : "/";
		out->path_len = slash ? path_len - plen - nlen : 1;
		return 0;
	}
	if (cri_enabled) {
		struct st_kubelet_path kp;
		if (st_kubelet_path_parse(path, path_len, &kp) == 0 &&
		    (kp.kind == ST_KUBELET_EXEC || kp.kind == ST_KUBELET_ATTACH ||
		     kp.kind == ST_KUBELET_PORT_FORWARD || kp.kind == ST_KUBELET_CONTAINER_LOGS)) {
			out->kind = ES_TARGET_CRI;
			out->path = path;
			out->path_len = path_len;
			return 0;
		}
	}
	if (!kubelet_enabled) {
		refuse(out, ST_EXT_ERR_REFUSED, "no kubelet backend on this node for ", path,
		       path_len, "");
		return 0;
	}
	out->kind = ES_TARGET_KUBELET;
	out->path = path;
	out->path_len = path_len;
	return 0;
}

int es_allow_add_pod_port(struct es_allow *a, const char *entry, char *err, size_t errlen)
{
	char *end;
	errno = 0;
	unsigned long port = strtoul(entry, &end, 10);
	if (entry[0] < '0' || entry[0] > '9' || *end != '\0' || errno || port < 1 || port > 65535) {
		snprintf(err, errlen, "\"%.80s\": a pod port is 1..65535", entry);
		return -EINVAL;
	}
	for (size_t i = 0; i < a->n_pod_ports; i++)
		if (a->pod_ports[i] == port) {
			snprintf(err, errlen, "\"%.80s\": listed twice", entry);
			return -EEXIST;
		}
	if (a->n_pod_ports >= ES_MAX_POD_PORTS) {
		snprintf(err, errlen, "more than %u pod ports", ES_MAX_POD_PORTS);
		return -ENOSPC;
	}
	a->pod_ports[a->n_pod_ports++] = (uint16_t)port;
	return 0;
}

int es_allow_add_pod_cidr(struct es_allow *a, const char *entry, char *err, size_t errlen)
{
	const char *slash = strchr(entry, '/');
	uint32_t ip;
	char *end;
	unsigned long bits = slash ? strtoul(slash + 1, &end, 10) : 99;
	if (slash == NULL || !st_ipv4_parse(entry, (size_t)(slash - entry), &ip) ||
	    slash[1] < '0' || slash[1] > '9' || *end != '\0' || bits < 8 || bits > 32) {
		snprintf(err, errlen,
		         "\"%.80s\": expected an IPv4 CIDR with /8../32, e.g. "
		         "10.244.3.0/24",
		         entry);
		return -EINVAL;
	}
	if (a->n_pod_cidrs >= ES_MAX_POD_CIDRS) {
		snprintf(err, errlen, "more than %u pod CIDRs", ES_MAX_POD_CIDRS);
		return -ENOSPC;
	}
	uint32_t mask = bits == 32 ? 0xffffffffu : ~(0xffffffffu >> bits);
	a->pod_cidrs[a->n_pod_cidrs].net = ip & mask;
	a->pod_cidrs[a->n_pod_cidrs].mask = mask;
	a->n_pod_cidrs++;
	return 0;
}

/* TCP_CONNECT to the pod IP @ip (dotted, @len bytes) on @port. */
static void route_pod(const struct es_allow *a, uint32_t ip, const char *target, size_t len,
                      uint64_t port, struct es_target *out)
{
	if (a->n_pod_ports == 0) {
		refuse(out, ST_EXT_ERR_REFUSED, "pod IP ", target, len,
		       " refused: this node reaches no pod IPs (--pod-ports is empty)");
		return;
	}
	bool port_ok = false;
	for (size_t i = 0; i < a->n_pod_ports; i++)
		port_ok = port_ok || a->pod_ports[i] == port;
	if (!port_ok) {
		char num[24];
		int n = snprintf(num, sizeof num, "%llu", (unsigned long long)port);
		refuse(out, ST_EXT_ERR_REFUSED, "pod port ", num, (size_t)n,
		       " is not in this node's --pod-ports");
		return;
	}
	bool in = false;
	for (size_t i = 0; i < a->n_pod_cidrs; i++)
		in = in || (ip & a->pod_cidrs[i].mask) == a->pod_cidrs[i].net;
	if (!in) {
		refuse(out, ST_EXT_ERR_REFUSED, "IP ", target, len,
		       " is not in this node's --pod-cidr");
		return;
	}
	out->kind = ES_TARGET_POD;
	out->port = (uint16_t)port;
	memcpy(out->host, target, len); /* a dotted quad: at most 15 bytes */
	out->host[len] = '\0';
}

int es_route_tcp(const struct es_allow *a, bool kubelet_enabled, uint64_t port, const char *target,
                 size_t target_len, struct es_target *out)
{
	memset(out, 0, sizeof *out);
	if (target_len == sizeof ES_TCP_TARGET_KUBELET - 1 &&
	    memcmp(target, ES_TCP_TARGET_KUBELET, target_len) == 0) {
		if (!kubelet_enabled)
			refuse(out, ST_EXT_ERR_REFUSED, "no kubelet on this node", "", 0,
			       " (--kubelet-url is not set)");
		else
			out->kind = ES_TARGET_KUBELET_TCP;
		return 0;
	}
	uint32_t ip;
	if (target_len > 0 && st_ipv4_parse(target, target_len, &ip)) {
		route_pod(a, ip, target, target_len, port, out);
		return 0;
	}
	for (size_t i = 0; i < a->n; i++) {
		if (a->v[i].port != port)
			continue;
		if (target_len && (strlen(a->v[i].name) != target_len ||
		                   memcmp(a->v[i].name, target, target_len) != 0))
			break;
		out->kind = ES_TARGET_LOCAL_PORT;
		out->port = a->v[i].port;
		out->local_name = a->v[i].name;
		return 0;
	}
	char num[24];
	int n = snprintf(num, sizeof num, "%llu", (unsigned long long)port);
	refuse(out, ST_EXT_ERR_REFUSED, "TCP port ", num, (size_t)n,
	       " is not in this node's allow-list (--local-port)");
	return 0;
}

int es_parse_url(const char *url, const char *scheme, int default_port, char *host, size_t host_cap,
                 int *port, char *path, size_t path_cap)
{
	size_t sl = strlen(scheme);
	if (url == NULL || strncmp(url, scheme, sl) != 0 || strncmp(url + sl, "://", 3) != 0)
		return -EINVAL;
	const char *h = url + sl + 3;
	const char *slash = strchr(h, '/');
	const char *end = slash ? slash : h + strlen(h);
	const char *hend, *colon = NULL;
	if (*h == '[') {
		const char *rb = memchr(h, ']', (size_t)(end - h));
		if (rb == NULL)
			return -EINVAL;
		h++;
		hend = rb;
		if (rb + 1 < end) {
			if (rb[1] != ':')
				return -EINVAL;
			colon = rb + 1;
		}
	} else {
		colon = memchr(h, ':', (size_t)(end - h));
		hend = colon ? colon : end;
	}
	size_t hl = (size_t)(hend - h);
	if (hl == 0 || hl >= host_cap || memchr(h, '@', hl))
		return -EINVAL;
	memcpy(host, h, hl);
	host[hl] = '\0';
	*port = default_port;
	if (colon) {
		unsigned long p = 0;
		const char *d = colon + 1;
		if (d == end || end - d > 5)
			return -EINVAL;
		for (; d < end; d++) {
			if (*d < '0' || *d > '9')
				return -EINVAL;
			p = p * 10 + (unsigned long)(*d - '0');
		}
		if (p < 1 || p > 65535)
			return -EINVAL;
		*port = (int)p;
	}
	const char *pth = slash ? slash : "/";
	if (strlen(pth) >= path_cap || strpbrk(pth, " \r\n?#"))
		return -EINVAL;
	snprintf(path, path_cap, "%s", pth);
	return 0;
}
