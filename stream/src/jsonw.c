/* Bounded JSON writer and UTF-8 validation shared by connect.c and status.c (jsonw.h). */
#include "jsonw.h"

#include <string.h>

/*
 * Length of the valid UTF-8 sequence at @s (1..4), or 0 when the byte at @s starts no valid
 * sequence — the same rules as Go's utf8.DecodeRune (no overlongs, no surrogates, <= U+10FFFF).
 */
size_t st__utf8_valid_len(const uint8_t *s, size_t n, uint32_t *cp)
{
	uint8_t b = s[0];
	if (b < 0x80) {
		*cp = b;
		return 1;
	}
	size_t need;
	uint32_t min, c;
	if (b >= 0xc2 && b <= 0xdf) {
		need = 2;
		c = b & 0x1fu;
		min = 0x80;
	} else if (b >= 0xe0 && b <= 0xef) {
		need = 3;
		c = b & 0x0fu;
		min = 0x800;
	} else if (b >= 0xf0 && b <= 0xf4) {
		need = 4;
		c = b & 0x07u;
		min = 0x10000;
	} else {
		return 0;
	}
	if (n < need)
		return 0;
	for (size_t i = 1; i < need; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		c = c << 6 | (s[i] & 0x3fu);
	}
	if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
		return 0;
	*cp = c;
	return need;
}

void st__jw_put(struct st__jw *o, const char *s, size_t n)
{
	if (o->overflow || n > o->cap - o->len) {
		o->overflow = true;
		return;
	}
	memcpy(o->p + o->len, s, n);
	o->len += n;
}

void st__jw_puts(struct st__jw *o, const char *s)
{
	st__jw_put(o, s, strlen(s));
}

void st__jw_u64(struct st__jw *o, uint64_t v)
{
	char digits[24];
	size_t n = sizeof digits;
	do {
		digits[--n] = (char)('0' + v % 10);
		v /= 10;
	} while (v != 0);
	st__jw_put(o, digits + n, sizeof digits - n);
}

/* A JSON string with Go's escaping (encoding/json with HTML escaping on, its default). */
void st__jw_string(struct st__jw *o, const char *str)
{
	static const char hex[] = "0123456789abcdef";
	const uint8_t *s = (const uint8_t *)str;
	size_t n = strlen(str);
	st__jw_put(o, "\"", 1);
	size_t start = 0, i = 0;
	while (i < n) {
		uint8_t b = s[i];
		if (b < 0x80) {
			if (b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' &&
			    b != '&') {
				i++;
				continue;
			}
			st__jw_put(o, str + start, i - start);
			switch (b) {
			case '"':
				st__jw_put(o, "\\\"", 2);
				break;
			case '\\':
				st__jw_put(o, "\\\\", 2);
				break;
			case '\n':
				st__jw_put(o, "\\n", 2);
				break;
			case '\r':
				st__jw_put(o, "\\r", 2);
				break;
			case '\t':
				st__jw_put(o, "\\t", 2);
				break;
			default: {
				char esc[6] = {'\\', 'u', '0', '0', hex[b >> 4], hex[b & 0xf]};
				st__jw_put(o, esc, sizeof esc);
			}
			}
			start = ++i;
			continue;
		}
		uint32_t cp;
		size_t len = st__utf8_valid_len(s + i, n - i, &cp);
		if (len == 0) {
			st__jw_put(o, str + start, i - start);
			st__jw_put(o, "\\ufffd", 6);
			start = ++i;
			continue;
		}
		if (cp == 0x2028 || cp == 0x2029) {
			st__jw_put(o, str + start, i - start);
			st__jw_puts(o, cp == 0x2028 ? "\\u2028" : "\\u2029");
			start = i + len;
		}
		i += len;
	}
	st__jw_put(o, str + start, n - start);
	st__jw_put(o, "\"", 1);
}
