/*
 * stream/src/reasm.c — websocket message reassembly (reasm.h). Pure.
 *
 * The limit is checked on every fragment, not when the message ends: a peer that never sends
 * the final fragment must not be able to make us hold more than ST_MAX_MESSAGE_BYTES, nor keep
 * the tunnel busy with a message that is already known to be refused.
 */
#include <stream/reasm.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <stream/limits.h>

#define REASM_FIRST_CAP  (64u * 1024u)
#define REASM_KEEP_BYTES (256u * 1024u) /* larger buffers are freed after their message */

void st_reasm_cleanup(struct st_reasm *r)
{
	free(r->buf);
	memset(r, 0, sizeof *r);
}

/* Refuses the message being gathered: its bytes are freed now and the rest of it is dropped. */
static int reasm_refuse(struct st_reasm *r, int rc)
{
	st_reasm_cleanup(r);
	r->discard = true;
	return rc;
}

int st_reasm_feed(struct st_reasm *r, const uint8_t *in, size_t len, bool first, bool final,
                  const uint8_t **msg, size_t *msg_len)
{
	if (first) {
		r->len = 0;
		r->discard = false;
		if (r->cap > REASM_KEEP_BYTES) /* a burst of big messages is over: give it back */
			st_reasm_cleanup(r);
	}
	if (first && final) {
		if (len > ST_MAX_MESSAGE_BYTES)
			return -EMSGSIZE;
		*msg = in; /* whole message in one piece: no copy */
		*msg_len = len;
		return 1;
	}
	if (r->discard) { /* the rest of a refused message: already reported */
		if (final)
			r->discard = false;
		return 0;
	}
	if (len > ST_MAX_MESSAGE_BYTES - r->len)
		return reasm_refuse(r, -EMSGSIZE);
	if (len > 0) {
		if (r->len + len > r->cap) {
			size_t cap = r->cap ? r->cap : REASM_FIRST_CAP;
			while (cap < r->len + len)
				cap *= 2;
			if (cap > ST_MAX_MESSAGE_BYTES)
				cap = ST_MAX_MESSAGE_BYTES;
			uint8_t *p = realloc(r->buf, cap);
			if (p == NULL) /* a message with a hole must not be delivered */
				return reasm_refuse(r, -ENOMEM);
			r->buf = p;
			r->cap = cap;
		}
		memcpy(r->buf + r->len, in, len);
		r->len += len;
	}
	if (!final)
		return 0;
	*msg = r->buf ? r->buf : in; /* an empty message in pieces: any valid pointer */
	*msg_len = r->len;
	r->len = 0;
	return 1;
}
