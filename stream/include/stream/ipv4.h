/* Dotted-quad IPv4 addresses, read the same way by both daemons (the front door's CONNECT
 * targets and pod IPs, the edge's pod targets and allow-list CIDRs). */
#ifndef STREAM_IPV4_H
#define STREAM_IPV4_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* st_ipv4_parse() - @len bytes at @p as exactly four decimal parts 0..255 with no leading
 * zeros (Go's net.ParseIP refuses them since 1.17: "010" is not read as 8 or as 10 by anyone
 * here). true with *@out in host byte order (@out may be NULL), false when it is not one. */
bool st_ipv4_parse(const char *p, size_t len, uint32_t *out);

#endif
