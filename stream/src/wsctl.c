/* A websocket tunnel's control frames (stream/wsctl.h): pure, no clock of its own. */
#include <stream/wsctl.h>

#include <string.h>

void st_wsctl_init(struct st_wsctl *c, const char *ping, uint64_t now_ms)
{
	memset(c, 0, sizeof *c);
	c->ping = ping;
	c->last_tx_ms = now_ms;
}

/* A PING's PONG: owed now, or held while the peer can still do without it. */
static enum st_wsctl_action on_ping(struct st_wsctl *c, const uint8_t *payload, size_t len,
                                    uint64_t now_ms, uint64_t hold_ms)
{
	if (len > ST_WS_MAX_CONTROL_BYTES) /* the reader refuses these; never past @pong */
		len = ST_WS_MAX_CONTROL_BYTES;
	if (len > 0)
		memcpy(c->pong, payload, len);
	c->pong_len = (uint8_t)len;
	/* The hold runs from our last frame, not from the PING: the peer's bound is on how long
	 * it goes without hearing from us. */
	uint64_t due = hold_ms ? c->last_tx_ms + hold_ms : 0;
	if (due > now_ms) {
		c->pong_held = true;
		c->pong_due_ms = due;
		return ST_WSCTL_LATER;
	}
	c->pong_held = false;
	c->want_pong = true;
	return ST_WSCTL_WRITE;
}

enum st_wsctl_action st_wsctl_recv(struct st_wsctl *c, struct st_liveness *live,
                                   enum st_ws_opcode op, const uint8_t *payload, size_t len,
                                   uint64_t now_ms, uint64_t hold_ms)
{
	st_liveness_rx(live, now_ms); /* any frame, not only the PONG to our PING */
	switch (op) {
	case ST_WS_PING:
		return on_ping(c, payload, len, now_ms, hold_ms);
	case ST_WS_CLOSE:
		/* RFC 6455 §5.5.1: the echo carries the status code; the reason is left out, as
		 * lws leaves it (a code alone is 2 bytes; 1 byte is malformed, echoed as sent). */
		c->close_len = (uint8_t)(len < 2 ? len : 2);
		if (c->close_len > 0)
			memcpy(c->close, payload, c->close_len);
		c->closed = true;
		return ST_WSCTL_NONE;
	case ST_WS_PONG: /* life, counted above */
	default:         /* not a control frame: the reader never passes one */
		return ST_WSCTL_NONE;
	}
}

bool st_wsctl_due(struct st_wsctl *c, uint64_t now_ms)
{
	if (!c->pong_held || c->pong_due_ms > now_ms)
		return false;
	c->pong_held = false;
	c->want_pong = true;
	return true;
}

bool st_wsctl_want_write(const struct st_wsctl *c)
{
	return c->want_pong || c->want_ping;
}

bool st_wsctl_take(struct st_wsctl *c, enum st_ws_opcode *op, const uint8_t **payload, size_t *len)
{
	if (c->want_pong) {
		/* The peer waits for this one; a PING of ours can follow in the same batch. */
		c->want_pong = false;
		c->pong_held = false;
		*op = ST_WS_PONG;
		*payload = c->pong;
		*len = c->pong_len;
		return true;
	}
	if (c->want_ping) {
		c->want_ping = false;
		*op = ST_WS_PING;
		*payload = (const uint8_t *)c->ping;
		*len = strnlen(c->ping, ST_WS_MAX_CONTROL_BYTES);
		return true;
	}
	return false;
}

void st_wsctl_sent(struct st_wsctl *c, uint64_t now_ms)
{
	if (now_ms > c->last_tx_ms)
		c->last_tx_ms = now_ms;
}
