/*
 * stream/reasm.h — reassembly of one websocket message from the pieces libwebsockets delivers.
 *
 * lws hands a received message over in chunks (bounded by its rx buffer and read sizes) with
 * first/final flags; a tunnel message must be whole before st_session_recv() sees it. A message
 * in one piece is passed through without a copy; others are gathered in a buffer that grows to
 * at most ST_MAX_MESSAGE_BYTES and is given back after a burst of big messages. A message over
 * the limit is reported (never truncated), once, by the fragment that takes it past the limit,
 * so a message that never ends cannot make us hold more than ST_MAX_MESSAGE_BYTES.
 *
 * Pure code; one object per websocket, owned by the loop thread.
 */
#ifndef STREAM_REASM_H
#define STREAM_REASM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct st_reasm {
	uint8_t *buf; /* lazily allocated */
	size_t len, cap;
	bool discard; /* the message being gathered was refused: drop the rest of it */
};

/*
 * st_reasm_feed() - add a chunk (@first: it starts a message; @final: it ends it).
 * @in is borrowed for the call (and, for a message in one piece, returned as *@msg).
 * Returns 1 with *@msg / *@msg_len set when a whole message is ready (valid until the next
 * call), 0 when more is to come (or when @in belongs to a message already refused),
 * -EMSGSIZE as soon as the bytes of the message pass ST_MAX_MESSAGE_BYTES, -ENOMEM. After
 * either error the buffer is freed and the rest of that message (up to its final fragment) is
 * dropped without a second report; the next @first fragment starts clean.
 */
int st_reasm_feed(struct st_reasm *r, const uint8_t *in, size_t len, bool first, bool final,
                  const uint8_t **msg, size_t *msg_len);

/* st_reasm_cleanup() - free the buffer; the object may be used again. */
void st_reasm_cleanup(struct st_reasm *r);

#endif /* STREAM_REASM_H */
