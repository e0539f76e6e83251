/* Fuzz target: query strings and kubelet paths (stream/query.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <stream/err.h>
#include <stream/query.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *s = (const char *)data;
	struct st_query_iter it;
	const char *k, *v;
	size_t kl, vl, pairs = 0;
	char out[256];
	st_query_iter_init(&it, s, size);
	while (st_query_next(&it, &k, &kl, &v, &vl)) {
		if (k < s || k + kl > s + size || v < s || v + vl > s + size || ++pairs > size)
			abort();
		ssize_t n = st_pct_decode(out, sizeof out, v, vl, true);
		if (n > (ssize_t)vl || (n < 0 && n != -EBADMSG && n != -EMSGSIZE))
			abort();
		(void)st_k8s_bool(true, v, vl);
		uint64_t u;
		(void)st_parse_u64(v, vl, UINT64_MAX, &u);
	}
	(void)st_query_get(s, size, "command", out, sizeof out);
	(void)st_query_count(s, size, "command");

	struct st_kubelet_path kp;
	int rc = st_kubelet_path_parse(s, size, &kp);
	if (rc != 0 && rc != -EBADMSG)
		abort();
	if (rc == 0 && kp.kind != ST_KUBELET_OTHER) {
		const struct st_segment segs[] = {kp.namespace_, kp.pod, kp.uid, kp.container};
		for (size_t i = 0; i < 4; i++)
			if (segs[i].len && (segs[i].p < s || segs[i].p + segs[i].len > s + size ||
			                    memchr(segs[i].p, '/', segs[i].len)))
				abort();
		if (kp.namespace_.len == 0 || kp.pod.len == 0)
			abort();
	}
	return 0;
}
