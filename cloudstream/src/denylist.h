/*
 * cloudstream/src/denylist.h — the revocation list of edge identities (--deny-list FILE): pure.
 *
 * The file is text, one entry a line:
 *
 *     # a comment; blank lines are ignored; so is anything after " #" on a line
 *     serial 4a:3b:00:ff        certificate serial, hex, any case, ':' separators allowed
 *     serial 0x4A3B00FF         (the same serial: a leading 0x and leading zeros do not count)
 *     node edge-17              node name (a DNS-1123 subdomain, at most 253 bytes)
 *
 * A line that is anything else makes the whole file invalid (the caller keeps the list it had:
 * a typo must never lift every revocation). Serials are compared in a canonical form: upper-case
 * hex without separators or leading zeros ("0" for zero), at most 40 digits (RFC 5280 §4.1.2.2:
 * 20 octets).
 *
 * Building a list allocates (one sorted array per kind); lookups are binary searches and
 * allocate nothing. No I/O, no clock, no logging: the daemon reads the file on a worker and
 * swaps the list in on the loop thread.
 */
#ifndef CLOUDSTREAM_DENYLIST_H
#define CLOUDSTREAM_DENYLIST_H

#include <stdbool.h>
#include <stddef.h>

#define CS_DENYLIST_MAX_FILE_BYTES (8u << 20) /* 8 MiB: about 200,000 entries */
#define CS_DENYLIST_MAX_ENTRIES    200000u
#define CS_SERIAL_MAX_HEX          40u /* 20 octets */

struct cs_denylist;

/* Where a file was refused: the 1-based line and a static reason. */
struct cs_denylist_error {
	size_t line;
	const char *why;
};

/*
 * cs_denylist_parse() - build a list from @len bytes of @text (not NUL-terminated; borrowed).
 * Returns 0 with *@out (free with cs_denylist_free; an empty file gives an empty list), or
 * -EBADMSG (a bad line: *@err says which and why), -EMSGSIZE (over CS_DENYLIST_MAX_FILE_BYTES
 * or CS_DENYLIST_MAX_ENTRIES), -ENOMEM. Nothing is allocated on failure.
 */
int cs_denylist_parse(const char *text, size_t len, struct cs_denylist **out,
                      struct cs_denylist_error *err);

/* cs_denylist_free() - NULL is a no-op. */
void cs_denylist_free(struct cs_denylist *d);

/* cs_denylist_serial_canon() - @len bytes of a serial in hex (any case, ':' separators, an
 * optional 0x) into canonical form in @out (@cap >= CS_SERIAL_MAX_HEX + 1 always suffices).
 * Returns the canonical length, or -EBADMSG (empty, not hex, over 40 digits), -EMSGSIZE. */
int cs_denylist_serial_canon(const char *in, size_t len, char *out, size_t cap);

/* cs_denylist_has_serial() - is the serial (@len bytes, any form cs_denylist_serial_canon
 * takes) listed? A NULL list lists nothing. */
bool cs_denylist_has_serial(const struct cs_denylist *d, const char *serial, size_t len);

/* cs_denylist_has_node() - is node @name (@len bytes, compared exactly) listed? */
bool cs_denylist_has_node(const struct cs_denylist *d, const char *name, size_t len);

/* cs_node_name_valid() - is @p (@len bytes) a Kubernetes node name (a DNS-1123 subdomain of at
 * most 253 bytes)? */
bool cs_node_name_valid(const char *p, size_t len);

/* Entries of each kind. */
size_t cs_denylist_serials(const struct cs_denylist *d);
size_t cs_denylist_nodes(const struct cs_denylist *d);

#endif /* CLOUDSTREAM_DENYLIST_H */
