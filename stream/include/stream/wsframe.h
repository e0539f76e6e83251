/*
 * stream/wsframe.h — websocket frame headers and client masking (RFC 6455 §5.2–5.3), sans-I/O.
 *
 * Why we frame tunnel messages ourselves instead of letting libwebsockets do it: lws 4.1.6 masks
 * a client frame one byte at a time and reads the 4-byte mask from /dev/urandom for every frame
 * (53 % of edgestream's CPU on bulk transfers, libwebsockets-notes §7), and it writes one message
 * per writable callback. The tunnel writer (stream/tunnelwrite.h) packs several messages, frames
 * each with these functions, masks 32 bytes per step with a key it draws from OpenSSL's DRBG,
 * and hands the batch to lws as raw bytes.
 */
#ifndef STREAM_WSFRAME_H
#define STREAM_WSFRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define ST_WS_MAX_HEADER_BYTES 14u /* 2 + 8 (64-bit length) + 4 (mask key) */

enum st_ws_opcode {
	ST_WS_CONTINUATION = 0x0,
	ST_WS_TEXT = 0x1,
	ST_WS_BINARY = 0x2,
	ST_WS_CLOSE = 0x8,
	ST_WS_PING = 0x9,
	ST_WS_PONG = 0xa,
};

/* A decoded frame header (a view; nothing allocated). */
struct st_ws_header {
	uint8_t opcode;      /* enum st_ws_opcode, or an unknown one the caller refuses */
	bool fin;            /* the last frame of its message */
	bool masked;         /* a mask key follows the length */
	uint8_t key[4];      /* the mask key when @masked */
	uint64_t len;        /* payload bytes */
	size_t header_bytes; /* bytes of this header, 2..14 */
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

/*
 * st_ws_header_need() - how many bytes the header starting with the two bytes at @p has in all
 * (2..14), from its length form and mask bit.
 */
size_t st_ws_header_need(const uint8_t p[2]);

/*
 * st_ws_header_decode() - decode the frame header at @p (@len bytes available) into @h.
 * Returns the header's length (> 0), 0 when @len does not hold all of it yet, or -EBADMSG:
 * a reserved bit set (no extension is ever negotiated), a control frame (opcode 0x8 and up)
 * that is fragmented or longer than 125 bytes, or a 64-bit length with its top bit set. A
 * length not in its shortest form is accepted (RFC 6455 binds senders to it). Unknown opcodes
 * decode; the caller refuses them.
 */
ssize_t st_ws_header_decode(const uint8_t *p, size_t len, struct st_ws_header *h);

/* st_ws_mask() - XOR @len bytes at @p with the 4-byte @key, the key's phase starting at p[0]
 * (masking and unmasking are the same operation). 32 bytes per step, any alignment; nothing to
 * do for the key 0 (peer links, stream/tunnelwrite.h: zero_keys). */
void st_ws_mask(uint8_t *p, size_t len, const uint8_t key[4]);

/* st_ws_mask_copy() - copy @len bytes from @src to @dst (not overlapping) XORed with @key, its
 * phase at dst[0] being @phase (the offset of dst[0] in the frame's payload): the copy and the
 * masking in one pass over the bytes. The key 0 copies. */
void st_ws_mask_copy(uint8_t *dst, const uint8_t *src, size_t len, const uint8_t key[4],
                     size_t phase);

#endif
