/*
 * stream/wsframe.h — websocket frame headers and client masking (RFC 6455 §5.2–5.3), sans-I/O.
 *
 * Why we frame tunnel messages ourselves instead of letting libwebsockets do it: lws 4.1.6 masks
 * a client frame one byte at a time and reads the 4-byte mask from /dev/urandom for every frame
 * (53 % of edgestream's CPU on bulk transfers, libwebsockets-notes §7), and it writes one message
 * per writable callback. The tunnel writer (stream/tunnelwrite.h) packs several messages, frames
 * each with these functions, masks eight bytes per step with a key it draws from OpenSSL's DRBG,
 * and hands the batch to lws as raw bytes.
 */
#ifndef STREAM_WSFRAME_H
#define STREAM_WSFRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ST_WS_MAX_HEADER_BYTES 14u /* 2 + 8 (64-bit length) + 4 (mask key) */

enum st_ws_opcode {
	ST_WS_TEXT = 0x1,
	ST_WS_BINARY = 0x2,
};

/* st_ws_header_len() - bytes of the header of a final frame of @payload_len bytes, with a mask
 * key when @masked (every client frame). */
size_t st_ws_header_len(size_t payload_len, bool masked);

/*
 * st_ws_header_encode() - write the header of one final (FIN) frame of @opcode carrying
 * @payload_len bytes into @out (at least st_ws_header_len() bytes), with @mask_key (4 bytes)
 * when it is not NULL. Returns the header length.
 */
size_t st_ws_header_encode(uint8_t *out, enum st_ws_opcode opcode, size_t payload_len,
                           const uint8_t *mask_key);

/* st_ws_mask() - XOR @len bytes at @p with the 4-byte @key, the key's phase starting at p[0]
 * (masking and unmasking are the same operation). Eight bytes per step, any alignment. */
void st_ws_mask(uint8_t *p, size_t len, const uint8_t key[4]);

#endif
