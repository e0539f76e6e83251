/*
 * cri/src/grpc.c — gRPC framing and status (grpc.h). Pure.
 */
#include <cri/grpc.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <stream/hex.h>

void cri_grpc_prefix(uint8_t out[CRI_GRPC_PREFIX_BYTES], size_t len)
{
	out[0] = 0; /* not compressed */
	out[1] = (uint8_t)(len >> 24);
	out[2] = (uint8_t)(len >> 16);
	out[3] = (uint8_t)(len >> 8);
	out[4] = (uint8_t)len;
}

int cri_grpc_unframe(const uint8_t *body, size_t len, const uint8_t **msg, size_t *msg_len)
{
	if (len == 0)
		return -ENODATA;
	if (len < CRI_GRPC_PREFIX_BYTES)
		return -EAGAIN;
	if (body[0] != 0)
		return -EBADMSG; /* compressed, or garbage: we never negotiate an encoding */
	size_t n = (size_t)body[1] << 24 | (size_t)body[2] << 16 | (size_t)body[3] << 8 | body[4];
	if (n > CRI_GRPC_MAX_MESSAGE_BYTES)
		return -EMSGSIZE;
	if (len - CRI_GRPC_PREFIX_BYTES < n)
		return -EAGAIN;
	if (len - CRI_GRPC_PREFIX_BYTES > n)
		return -EBADMSG; /* a unary response carries exactly one message */
	*msg = body + CRI_GRPC_PREFIX_BYTES;
	*msg_len = n;
	return 0;
}

int cri_grpc_parse_status(const char *value, size_t len)
{
	while (len && (value[len - 1] == ' ' || value[len - 1] == '\t' || value[len - 1] == '\r'))
		len--;
	while (len && (*value == ' ' || *value == '\t')) {
		value++;
		len--;
	}
	if (len == 0 || len > 9)
		return -EBADMSG;
	int code = 0;
	for (size_t i = 0; i < len; i++) {
		if (value[i] < '0' || value[i] > '9')
			return -EBADMSG;
		code = code * 10 + (value[i] - '0');
	}
	return code;
}

size_t cri_grpc_decode_message(const char *value, size_t len, char *out, size_t cap)
{
	size_t w = 0;
	if (cap == 0)
		return 0;
	for (size_t i = 0; i < len && w + 1 < cap; i++) {
		int hi, lo;
		if (value[i] == '%' && i + 2 < len &&
		    (hi = st_hex_value((unsigned char)value[i + 1])) >= 0 &&
		    (lo = st_hex_value((unsigned char)value[i + 2])) >= 0) {
			char c = (char)(hi << 4 | lo);
			out[w++] = c ? c : '?'; /* never an embedded NUL */
			i += 2;
		} else {
			out[w++] = value[i];
		}
	}
	out[w] = '\0';
	return w;
}

void cri_grpc_timeout(char *out, size_t cap, uint64_t ms)
{
	/* At most 8 digits: milliseconds while they fit, then seconds. */
	if (ms <= 99999999u)
		snprintf(out, cap, "%llum", (unsigned long long)ms);
	else
		snprintf(out, cap, "%lluS",
		         (unsigned long long)(ms / 1000 > 99999999u ? 99999999u : ms / 1000));
}

static const char *const names[] = {
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
};

const char *cri_grpc_code_name(int code)
{
	if (code < 0 || (size_t)code >= sizeof names / sizeof names[0])
		return "UNKNOWN_CODE";
	return names[code];
}

int cri_grpc_errno(int code)
{
	switch (code) {
	case CRI_GRPC_OK:
		return 0;
	case CRI_GRPC_NOT_FOUND:
		return -ENOENT;
	case CRI_GRPC_INVALID_ARGUMENT:
	case CRI_GRPC_OUT_OF_RANGE:
		return -EINVAL;
	case CRI_GRPC_DEADLINE_EXCEEDED:
		return -ETIMEDOUT;
	case CRI_GRPC_PERMISSION_DENIED:
	case CRI_GRPC_UNAUTHENTICATED:
		return -EACCES;
	case CRI_GRPC_RESOURCE_EXHAUSTED:
		return -EAGAIN;
	case CRI_GRPC_UNIMPLEMENTED:
		return -ENOTSUP;
	case CRI_GRPC_UNAVAILABLE:
		return -ECONNREFUSED;
	case CRI_GRPC_ALREADY_EXISTS:
		return -EEXIST;
	case CRI_GRPC_CANCELLED:
		return -ECANCELED;
	default:
		return -EPROTO;
	}
}
