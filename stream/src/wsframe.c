/* Websocket frame headers and masking (stream/wsframe.h). */
#include <stream/wsframe.h>

#include <string.h>

size_t st_ws_header_len(size_t payload_len, bool masked)
{
	size_t n = payload_len < 126 ? 2 : payload_len <= 0xffff ? 4 : 10;
	return n + (masked ? 4 : 0);
}

size_t st_ws_header_encode(uint8_t *out, enum st_ws_opcode opcode, size_t payload_len,
                           const uint8_t *mask_key)
{
	uint8_t mask_bit = mask_key ? 0x80 : 0;
	size_t n = 0;
	out[n++] = (uint8_t)(0x80 | (opcode & 0x0f)); /* FIN: a tunnel message is one frame */
	if (payload_len < 126) {
		out[n++] = (uint8_t)(mask_bit | payload_len);
	} else if (payload_len <= 0xffff) {
		out[n++] = mask_bit | 126;
		out[n++] = (uint8_t)(payload_len >> 8);
		out[n++] = (uint8_t)payload_len;
	} else {
		out[n++] = mask_bit | 127;
		for (int shift = 56; shift >= 0; shift -= 8)
			out[n++] = (uint8_t)((uint64_t)payload_len >> shift);
	}
	if (mask_key) {
		memcpy(out + n, mask_key, 4);
		n += 4;
	}
	return n;
}

void st_ws_mask(uint8_t *p, size_t len, const uint8_t key[4])
{
	uint8_t k8[8] = {key[0], key[1], key[2], key[3], key[0], key[1], key[2], key[3]};
	uint64_t k;
	memcpy(&k, k8, sizeof k); /* byte order does not matter: the key repeats every 4 bytes */
	size_t i = 0;
	for (; i + 8 <= len; i += 8) {
		uint64_t v;
		memcpy(&v, p + i, sizeof v);
		v ^= k;
		memcpy(p + i, &v, sizeof v);
	}
	for (; i < len; i++)
		p[i] ^= key[i & 3];
}
