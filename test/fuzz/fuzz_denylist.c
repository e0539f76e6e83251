/* Fuzz target: the revocation list parser (cloudstream/src/denylist.h). A list that parses must
 * find every entry it was built from: each line that names a serial or a node is looked up. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "denylist.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cs_denylist *d = NULL;
	struct cs_denylist_error err;
	const char *text = (const char *)data;
	if (cs_denylist_parse(text, size, &d, &err) < 0) {
		if (err.why == NULL)
			abort();
		return 0;
	}
	size_t off = 0, found = 0;
	while (off < size) {
		const char *nl = memchr(text + off, '\n', size - off);
		size_t end = nl ? (size_t)(nl - text) : size;
		const char *p = text + off;
		size_t len = end - off;
		while (len && (*p == ' ' || *p == '\t')) {
			p++;
			len--;
		}
		const char *v = memchr(p, ' ', len);
		if (v && len >= 5 && memcmp(p, "node ", 5) == 0) {
			size_t vl = 0;
			v++;
			while (v + vl < p + len && v[vl] != ' ' && v[vl] != '\t' && v[vl] != '\r')
				vl++;
			if (vl && !cs_denylist_has_node(d, v, vl))
				abort();
			found++;
		}
		off = end + 1;
	}
	if (found > cs_denylist_nodes(d))
		abort();
	cs_denylist_free(d);
	return 0;
}
