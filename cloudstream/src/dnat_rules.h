/*
 * cloudstream/src/dnat_rules.h — what the cloudstream-dnat controller (tool/dnat.c) keeps in
 * the nat table, decided without I/O: edge Nodes as the apiserver describes them (their IPv4
 * InternalIP addresses and the kubelet port they advertise) → the iptables-restore text of the
 * CLOUDSTREAM-DNAT chain. Pure (STYLE B6.1): no sockets, no logging; unit-tested
 * (unit.cloudstream.dnat_rules).
 */
#ifndef CLOUDSTREAM_DNAT_RULES_H
#define CLOUDSTREAM_DNAT_RULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CS_DNAT_CHAIN         "CLOUDSTREAM-DNAT"
#define CS_DNAT_TAG           "cloudstream-dnat"
#define CS_DNAT_IPS_MAX       4u     /* InternalIP addresses kept per node */
#define CS_DNAT_NAME_MAX      253u   /* a Node name (DNS subdomain) */
#define CS_DNAT_NODES_MAX     50000u /* nodes in one rule set */
#define CS_DNAT_IP_TEXT_BYTES 16u    /* "255.255.255.255" + NUL */

/* One edge node as the rules need it. */
struct cs_dnat_node {
	char name[CS_DNAT_NAME_MAX + 1];
	char ips[CS_DNAT_IPS_MAX][CS_DNAT_IP_TEXT_BYTES]; /* IPv4 InternalIP, dotted quad */
	size_t n_ips;
	uint16_t port; /* status.daemonEndpoints.kubeletEndpoint.Port, or the default */
};

/* The nodes, by name (owned array, sorted by name so the text is deterministic). */
struct cs_dnat_set {
	struct cs_dnat_node *v;
	size_t n, cap;
};

/*
 * cs_dnat_node_parse() - a Node object's JSON text (as a list item or a watch event's object)
 * into @out: metadata.name, the IPv4 InternalIP addresses (others are skipped: the rules are
 * IPv4), status.daemonEndpoints.kubeletEndpoint.Port when 1..65535, else @default_port.
 * Returns 0, -EBADMSG (no name, or not a Node), -EINVAL.
 */
struct json_object;
int cs_dnat_node_parse(struct json_object *node, uint16_t default_port, struct cs_dnat_node *out);

void cs_dnat_set_init(struct cs_dnat_set *s);
void cs_dnat_set_cleanup(struct cs_dnat_set *s);
/* Insert or replace by name: 1 changed, 0 the same as before, -EMSGSIZE past
 * CS_DNAT_NODES_MAX, -ENOMEM. */
int cs_dnat_set_put(struct cs_dnat_set *s, const struct cs_dnat_node *n);
/* Remove by name: 1 removed, 0 not there. */
int cs_dnat_set_remove(struct cs_dnat_set *s, const char *name);
void cs_dnat_set_clear(struct cs_dnat_set *s);

/*
 * cs_dnat_rules() - the iptables-restore input for the chain (run with --noflush: declaring
 * the chain empties it in the same transaction): loopback and this host's own addresses
 * (addrtype LOCAL) return first, then for each node IP and its port a DNAT to @to_ip:@to_port.
 * An address in @local (the host's own, dotted quads) gets no rule at all. Returns the length
 * written (NUL-terminated), or -EMSGSIZE when @cap is too small.
 */
ssize_t cs_dnat_rules(const struct cs_dnat_set *s, const char *to_ip, uint16_t to_port,
                      const char *const *local, size_t n_local, char *out, size_t cap);

/* The jump into the chain, as `iptables -S HOOK` prints it (without "-A HOOK "). */
#define CS_DNAT_JUMP_ARGS "-p tcp -m comment --comment " CS_DNAT_TAG " -j " CS_DNAT_CHAIN

#endif /* CLOUDSTREAM_DNAT_RULES_H */
