/* Fuzz target: routing (cloudstream/src/route.h) with a real registry behind it. The input is
 * split at '\n' into original destination, Host, X-Forwarded-Uri, namespace and pod; the
 * result must name a node no longer than the limit and only name sessions the registry has. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "registry.h"
#include "route.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct cs_registry *reg;
static int sessions[4];

static void *by_ip(const char *ip, size_t len, const char **node, void *user)
{
	return cs_registry_get_by_ip(user, ip, len, node);
}

static size_t ip_owners(const char *ip, size_t len, const char **names, size_t cap, void *user)
{
	return cs_registry_ip_owners(user, ip, len, names, cap);
}

static void *by_name(const char *name, size_t len, void *user)
{
	return cs_registry_get(user, name, len);
}

static int pod_node(const char *ns, size_t ns_len, const char *pod, size_t pod_len,
                    const char **node, size_t *node_len, void *user)
{
	(void)user;
	(void)ns;
	(void)pod;
	if ((ns_len + pod_len) % 3 == 0)
		return 0;
	if ((ns_len + pod_len) % 3 == 1)
		return -2;
	*node = "edge-b";
	*node_len = 6;
	return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (reg == NULL) {
		void *old;
		const char *ips_a[] = {"10.0.0.1", "fd00::1"};
		const char *ips_b[] = {"192.168.1.2"};
		if (cs_registry_new(&reg, 16, 99) < 0 ||
		    cs_registry_put(reg, "edge-a", 6, ips_a, 2, &sessions[0], &old) < 0 ||
		    cs_registry_put(reg, "edge-b", 6, ips_b, 1, &sessions[1], &old) < 0 ||
		    /* edge-c really shares edge-b's IP: requests by it alone are ambiguous */
		    cs_registry_put(reg, "edge-c", 6, ips_b, 1, &sessions[2], &old) < 0)
			abort();
	}
	const char *field[5] = {0};
	size_t flen[5] = {0};
	size_t f = 0, start = 0;
	for (size_t i = 0; i <= size && f < 5; i++) {
		if (i == size || data[i] == '\n') {
			field[f] = (const char *)data + start;
			flen[f] = i - start;
			f++;
			start = i + 1;
		}
	}
	struct cs_route_input in = {
	        .orig_dst_ip = flen[0] ? field[0] : NULL,
	        .orig_dst_ip_len = flen[0],
	        .host = field[1],
	        .host_len = flen[1],
	        .forwarded_uri = field[2],
	        .forwarded_uri_len = flen[2],
	        .pod_namespace = field[3],
	        .pod_namespace_len = flen[3],
	        .pod_name = field[4],
	        .pod_name_len = flen[4],
	};
	struct cs_route_lookup lk = {.by_ip = by_ip,
	                             .by_name = by_name,
	                             .ip_owners = ip_owners,
	                             .pod_node = pod_node,
	                             .user = reg};
	struct cs_route_result r;
	if (cs_route_resolve(&in, &lk, &r) == 0) {
		if (strlen(r.node) > CS_NODE_NAME_MAX_BYTES)
			abort();
		if (r.session && r.session != &sessions[0] && r.session != &sessions[1] &&
		    r.session != &sessions[2])
			abort();
		/* a shared IP never routes to one of its holders, and names both */
		if (r.shared && (r.session || strcmp(r.node, r.shared_ip) != 0 ||
		                 strcmp(r.shared_by[0], "edge-b") != 0 ||
		                 strcmp(r.shared_by[1], "edge-c") != 0))
			abort();
		if (r.need_pod_lookup && r.node[0])
			abort();
	}
	return 0;
}
