/*
 * jsonw.h — internal: a bounded JSON writer with Go's string escaping, and a UTF-8 validator with
 * Go's rules. Shared by connect.c and status.c. Not part of the public API.
 */
#ifndef STREAM_JSONW_H
#define STREAM_JSONW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Writes into p[0..cap); once something does not fit, overflow sticks and nothing more is
 * written, so a caller checks once at the end. */
struct st__jw {
	char *p;
	size_t cap;
	size_t len;
	bool overflow;
};

void st__jw_put(struct st__jw *o, const char *s, size_t n);
void st__jw_puts(struct st__jw *o, const char *s);
void st__jw_u64(struct st__jw *o, uint64_t v);
/* A quoted JSON string as Go's encoding/json writes it (HTML-safe, \ufffd for invalid UTF-8). */
void st__jw_string(struct st__jw *o, const char *s);

/* Length (1..4) of the valid UTF-8 sequence at @s and its code point, or 0 when the byte at @s
 * starts none: Go's utf8.DecodeRune rules (no overlongs, surrogates or > U+10FFFF). */
size_t st__utf8_valid_len(const uint8_t *s, size_t n, uint32_t *cp);

#endif
