/* Hexadecimal digits: one definition for every parser that reads them (chunk sizes, %XX
 * escapes in URLs, query strings and grpc-message, certificate pins and serials). */
#ifndef STREAM_HEX_H
#define STREAM_HEX_H

/* st_hex_value() - the value of the hex digit @c (either case), or -1. */
static inline int st_hex_value(unsigned char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

#endif
