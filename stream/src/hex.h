/* Internal: hexadecimal digits, shared by the chunked and query parsers. */
#ifndef STREAM_HEX_H
#define STREAM_HEX_H

/* The value of one hex digit, or -1. */
static inline int st__hex_value(unsigned char c)
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
