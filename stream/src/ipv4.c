/* Dotted-quad IPv4 parsing (stream/ipv4.h). Pure. */
#include <stream/ipv4.h>

bool st_ipv4_parse(const char *p, size_t len, uint32_t *out)
{
	uint32_t v = 0;
	size_t i = 0;
	for (int part = 0; part < 4; part++) {
		if (part > 0) {
			if (i >= len || p[i] != '.')
				return false;
			i++;
		}
		size_t start = i;
		unsigned n = 0;
		while (i < len && p[i] >= '0' && p[i] <= '9' && i - start < 3)
			n = n * 10 + (unsigned)(p[i++] - '0');
		if (i == start || n > 255 || (i - start > 1 && p[start] == '0'))
			return false;
		v = v << 8 | n;
	}
	if (i != len)
		return false;
	if (out != NULL)
		*out = v;
	return true;
}
