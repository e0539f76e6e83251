/*
 * Fuzz target: websocket message reassembly (stream/reasm.h), checked against a model.
 *
 * Input: a sequence of fragments, each
 *     flags (1 byte: bit 0 first, bit 1 final, bit 2 big)
 *     length (2 bytes big-endian; 3 bytes when big)
 *     bytes  (taken from the input, up to what is left; when big, from a fixed pattern instead,
 *             so a small input can reach and pass the 1 MiB limit)
 * The model keeps its own copy of the message being gathered and predicts every return: a
 * whole message byte for byte (passed through uncopied when in one piece), -EMSGSIZE exactly
 * when the bytes pass ST_MAX_MESSAGE_BYTES and never again for that message, nothing held
 * after a refusal, and never more than ST_MAX_MESSAGE_BYTES held.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <stream/limits.h>
#include <stream/reasm.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define PATTERN_BYTES   (ST_MAX_MESSAGE_BYTES + 4096u)
#define MAX_FED_PER_RUN (8u * ST_MAX_MESSAGE_BYTES) /* keeps one input under a second */

static uint8_t pattern[PATTERN_BYTES];
static uint8_t model[ST_MAX_MESSAGE_BYTES];

/* What the model expects of the reassembler. */
struct expect {
	size_t len;   /* bytes of the message being gathered */
	bool discard; /* the message being gathered was refused */
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (pattern[1] == 0)
		for (size_t i = 0; i < PATTERN_BYTES; i++)
			pattern[i] = (uint8_t)(i * 31u + 7u);
	struct st_reasm r = {0};
	struct expect e = {0};
	size_t pos = 0, fed = 0;
	while (pos < size && fed < MAX_FED_PER_RUN) {
		uint8_t flags = data[pos++];
		bool first = flags & 1, final = flags & 2, big = flags & 4;
		size_t hdr = big ? 3 : 2;
		if (size - pos < hdr)
			break;
		size_t len = (size_t)data[pos] << 8 | data[pos + 1];
		if (big)
			len = (len << 8 | data[pos + 2]) % (PATTERN_BYTES + 1);
		pos += hdr;
		const uint8_t *in;
		if (big) {
			in = pattern;
		} else {
			if (len > size - pos)
				len = size - pos;
			in = data + pos;
			pos += len;
		}
		fed += len;

		const uint8_t *msg = NULL;
		size_t msg_len = 0;
		int rc = st_reasm_feed(&r, in, len, first, final, &msg, &msg_len);

		/* the model */
		int want;
		if (first) {
			e.len = 0;
			e.discard = false;
		}
		if (first && final) {
			want = len > ST_MAX_MESSAGE_BYTES ? -EMSGSIZE : 1;
			if (want == 1 && (msg != in || msg_len != len))
				abort(); /* one piece: passed through, not copied */
		} else if (e.discard) {
			want = 0;
			e.discard = !final;
		} else if (len > ST_MAX_MESSAGE_BYTES - e.len) {
			want = -EMSGSIZE;
			e.discard = true;
			e.len = 0;
		} else {
			if (len > 0)
				memcpy(model + e.len, in, len);
			e.len += len;
			want = final ? 1 : 0;
			if (final) {
				if (msg_len != e.len ||
				    (e.len > 0 && memcmp(msg, model, e.len) != 0))
					abort();
				e.len = 0;
			}
		}
		if (rc == -ENOMEM && want != -EMSGSIZE && !(first && final)) {
			e.discard = true; /* real memory exhaustion: the message is dropped */
			e.len = 0;
			want = -ENOMEM;
		}
		if (rc != want)
			abort();
		/* what it holds */
		if (r.len > ST_MAX_MESSAGE_BYTES || r.cap > ST_MAX_MESSAGE_BYTES || r.len > r.cap)
			abort();
		if (rc < 0 && !(first && final) && (r.buf != NULL || r.cap != 0))
			abort(); /* a refused message holds nothing */
		if (rc == 0 && !e.discard && r.len != e.len)
			abort();
	}
	st_reasm_cleanup(&r);
	if (r.buf != NULL || r.len != 0 || r.cap != 0)
		abort();
	return 0;
}
