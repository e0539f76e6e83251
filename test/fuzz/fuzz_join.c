/* Fuzz target: the join token file and the signing request of a join (cloudstream/src/join.h,
 * certs_csr_read): both come from outside (an operator's file, an edge's request body). A token
 * file that parses finds every id it lists; a request that reads has a clean subject that the
 * node check either takes or refuses with a reason. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "join.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *text = (const char *)data;
	struct cs_join_tokens *t = NULL;
	struct cs_join_error err;
	if (cs_join_tokens_parse(text, size, &t, &err) == 0) {
		for (size_t i = 0; i < t->n; i++)
			if (cs_join_tokens_find(t, t->v[i].id) != &t->v[i] || t->v[i].uses == 0 ||
			    t->v[i].expires <= 0)
				abort();
		cs_join_tokens_free(t);
	} else if (err.why == NULL) {
		abort();
	}
	/* The uses file: what parses formats back to text that parses to the same uses (less
	 * those at 0, which are not written). */
	struct cs_join_use *u = NULL, *u2 = NULL;
	size_t n = 0, n2 = 0;
	if (cs_join_uses_parse(text, size, &u, &n, &err) == 0) {
		size_t need = cs_join_uses_format(u, n, NULL, 0);
		char *again = malloc(need + 1);
		if (again == NULL)
			abort();
		if (cs_join_uses_format(u, n, again, need + 1) != need ||
		    cs_join_uses_parse(again, need, &u2, &n2, &err) != 0)
			abort();
		for (size_t i = 0, k = 0; i < n; i++) {
			if (u[i].used == 0)
				continue;
			if (k >= n2 || strcmp(u[i].id, u2[k].id) != 0 || u[i].used != u2[k].used)
				abort();
			k++;
		}
		free(again);
		free(u2);
		free(u);
	} else if (err.why == NULL) {
		abort();
	}
	char id[8], tok[CS_JOIN_TOKEN_BYTES + 1];
	if (cs_join_bearer(text, size, id, tok) == 0 &&
	    (strlen(tok) != CS_JOIN_TOKEN_BYTES || memcmp(tok, id, 6) != 0))
		abort();
	struct certs_csr_info info;
	if (certs_csr_read(text, size, &info) == 0) {
		char node[CS_JOIN_NODE_MAX_BYTES + 1];
		const char *why = NULL;
		enum cs_join_refusal r = cs_join_csr_node(&info, node, sizeof node, &why);
		if ((r == CS_JOIN_OK) != (why == NULL))
			abort();
		if (r == CS_JOIN_OK && strncmp(info.cn + 12, node, sizeof node) != 0)
			abort();
	}
	return 0;
}
