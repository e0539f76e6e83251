/* Websocket frame headers and masking (stream/wsframe.h). */
#include <stream/wsframe.h>

#include <errno.h>
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

/*
 * The XOR of a bulk relay's every byte, once per websocket hop (the edge masks what it sends,
 * the cloud unmasks what it reads): GCC/clang vector types, 64 bytes per step, compiled three
 * times and picked by what the CPU has (__builtin_cpu_supports, no ifunc: the sanitizer builds
 * take it as plain code). On this machine, 64 KiB in cache: 42 GB/s with the baseline x86-64's
 * SSE2, 128 with AVX2, 188 with AVX-512 (a memcpy: 126), so the masking that was 2-3 % of a
 * relay's CPU is a fraction of a copy. @k is the key as it falls from dst[0] on, twice.
 */
typedef uint64_t st_ws_v64 __attribute__((vector_size(64)));

#define XOR_RUN_BODY                                                                               \
	st_ws_v64 kv = {k, k, k, k, k, k, k, k};                                                   \
	size_t i = 0;                                                                              \
	for (; i + sizeof kv <= len; i += sizeof kv) {                                             \
		st_ws_v64 v;                                                                       \
		memcpy(&v, src + i, sizeof v);                                                     \
		v ^= kv;                                                                           \
		memcpy(dst + i, &v, sizeof v);                                                     \
	}                                                                                          \
	return i

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx512f"))) static size_t xor_run_avx512(uint8_t *dst, const uint8_t *src,
                                                                size_t len, uint64_t k)
{
	XOR_RUN_BODY;
}

__attribute__((target("avx2"))) static size_t xor_run_avx2(uint8_t *dst, const uint8_t *src,
                                                           size_t len, uint64_t k)
{
	XOR_RUN_BODY;
}
#define HAVE_XOR_RUN_DISPATCH 1
#endif

static size_t xor_run_base(uint8_t *dst, const uint8_t *src, size_t len, uint64_t k)
{
	XOR_RUN_BODY;
}

/* dst[0, len) = src[0, len) ^ the 8-byte key @k8 repeated (dst == src: in place; otherwise not
 * overlapping). */
static void xor_key(uint8_t *dst, const uint8_t *src, size_t len, const uint8_t k8[8])
{
	uint64_t k;
	memcpy(&k, k8, sizeof k); /* byte order does not matter: the key repeats every 4 bytes */
	size_t i;
#ifdef HAVE_XOR_RUN_DISPATCH
	if (len >= 256 && __builtin_cpu_supports("avx512f"))
		i = xor_run_avx512(dst, src, len, k);
	else if (len >= 256 && __builtin_cpu_supports("avx2"))
		i = xor_run_avx2(dst, src, len, k);
	else
#endif
		i = xor_run_base(dst, src, len, k);
	for (; i + 8 <= len; i += 8) {
		uint64_t v;
		memcpy(&v, src + i, sizeof v);
		v ^= k;
		memcpy(dst + i, &v, sizeof v);
	}
	for (; i < len; i++)
		dst[i] = src[i] ^ k8[i & 7];
}

void st_ws_mask(uint8_t *p, size_t len, const uint8_t key[4])
{
	if ((key[0] | key[1] | key[2] | key[3]) == 0)
		return; /* XOR with zeros: a peer link's frames (stream/tunnelwrite.h: zero_keys) */
	uint8_t k8[8] = {key[0], key[1], key[2], key[3], key[0], key[1], key[2], key[3]};
	xor_key(p, p, len, k8);
}

void st_ws_mask_copy(uint8_t *dst, const uint8_t *src, size_t len, const uint8_t key[4],
                     size_t phase)
{
	if ((key[0] | key[1] | key[2] | key[3]) == 0) {
		memcpy(dst, src, len);
		return;
	}
	uint8_t k8[8];
	for (size_t j = 0; j < sizeof k8; j++)
		k8[j] = key[(phase + j) & 3]; /* the key as it falls from dst[0] on */
	xor_key(dst, src, len, k8);
}

size_t st_ws_header_need(const uint8_t p[2])
{
	size_t l7 = p[1] & 0x7fu;
	return 2u + (l7 == 126 ? 2u : l7 == 127 ? 8u : 0u) + (p[1] & 0x80u ? 4u : 0u);
}

ssize_t st_ws_header_decode(const uint8_t *p, size_t len, struct st_ws_header *h)
{
	if (len < 2)
		return 0;
	size_t need = st_ws_header_need(p);
	if (len < need)
		return 0;
	if (p[0] & 0x70u)
		return -EBADMSG; /* RSV1-3: no extension was negotiated */
	h->fin = (p[0] & 0x80u) != 0;
	h->opcode = (uint8_t)(p[0] & 0x0fu);
	h->masked = (p[1] & 0x80u) != 0;
	uint64_t l = p[1] & 0x7fu;
	size_t n = 2;
	if (l == 126) {
		l = (uint64_t)p[2] << 8 | p[3];
		n = 4;
	} else if (l == 127) {
		l = 0;
		for (n = 2; n < 10; n++)
			l = l << 8 | p[n];
		if (l >> 63)
			return -EBADMSG;
	}
	if (h->opcode & 0x8u && (!h->fin || l > 125))
		return -EBADMSG; /* a control frame: whole, and short */
	h->len = l;
	if (h->masked) {
		memcpy(h->key, p + n, 4);
		n += 4;
	}
	h->header_bytes = n;
	return (ssize_t)n;
}
