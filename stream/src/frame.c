/* Tunnel message codec (stream/frame.h). Mirrors Go's encoding/binary uvarint rules exactly, since
 * the peer may be KubeEdge's Go code: what Go accepts we accept, what it rejects we reject. */
#include <stream/err.h>
#include <stream/frame.h>

#include <string.h>

size_t st_uvarint_len(uint64_t v)
{
	size_t n = 1;
	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

size_t st_uvarint_encode(uint8_t out[ST_MAX_UVARINT_BYTES], uint64_t v)
{
	size_t n = 0;
	while (v >= 0x80) {
		out[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	out[n++] = (uint8_t)v;
	return n;
}

ssize_t st_uvarint_decode(const uint8_t *p, size_t len, uint64_t *out)
{
	uint64_t v = 0;
	unsigned shift = 0;
	for (size_t i = 0; i < len; i++) {
		uint8_t b = p[i];
		if (i == ST_MAX_UVARINT_BYTES - 1 && b > 1)
			return -EBADMSG; /* the 10th byte may only carry bit 63 */
		if (b < 0x80) {
			*out = v | (uint64_t)b << shift;
			return (ssize_t)(i + 1);
		}
		v |= (uint64_t)(b & 0x7f) << shift;
		shift += 7;
	}
	return 0;
}

ssize_t st_msg_header_decode(const uint8_t *p, size_t len, uint64_t *connect_id, uint64_t *type)
{
	uint64_t id, t;
	ssize_t n1 = st_uvarint_decode(p, len, &id);
	if (n1 <= 0)
		return n1;
	ssize_t n2 = st_uvarint_decode(p + n1, len - (size_t)n1, &t);
	if (n2 <= 0)
		return n2;
	*connect_id = id;
	*type = t;
	return n1 + n2;
}

int st_msg_decode(const uint8_t *msg, size_t len, struct st_msg *out)
{
	if (len > ST_MAX_MESSAGE_BYTES)
		return -EMSGSIZE;
	uint64_t id, type;
	ssize_t n = st_msg_header_decode(msg, len, &id, &type);
	if (n <= 0)
		return -EBADMSG; /* a whole message whose header is cut short is malformed */
	out->connect_id = id;
	out->type = type;
	out->payload_len = len - (size_t)n;
	out->payload = out->payload_len ? msg + n : NULL;
	return 0;
}

ssize_t st_msg_header_encode(uint8_t *out, size_t cap, uint64_t connect_id, uint64_t type)
{
	size_t need = st_uvarint_len(connect_id) + st_uvarint_len(type);
	if (need > cap)
		return -EMSGSIZE;
	size_t n = st_uvarint_encode(out, connect_id);
	n += st_uvarint_encode(out + n, type);
	return (ssize_t)n;
}

size_t st_msg_max_payload(uint64_t connect_id, uint64_t type)
{
	return ST_MAX_MESSAGE_BYTES - st_uvarint_len(connect_id) - st_uvarint_len(type);
}

ssize_t st_msg_encode(uint8_t *out, size_t cap, uint64_t connect_id, uint64_t type,
                      const uint8_t *payload, size_t payload_len)
{
	if (payload_len > st_msg_max_payload(connect_id, type))
		return -EMSGSIZE;
	ssize_t n = st_msg_header_encode(out, cap, connect_id, type);
	if (n < 0)
		return n;
	if (payload_len > cap - (size_t)n)
		return -EMSGSIZE;
	if (payload_len > 0)
		memcpy(out + n, payload, payload_len);
	return n + (ssize_t)payload_len;
}

bool st_msg_type_is_base(uint64_t type)
{
	return type <= ST_MSG_BASE_LAST;
}

bool st_msg_type_is_connect(uint64_t type)
{
	switch (type) {
	case ST_MSG_LOGS_CONNECT:
	case ST_MSG_EXEC_CONNECT:
	case ST_MSG_METRIC_CONNECT:
	case ST_MSG_ATTACH_CONNECT:
	case ST_MSG_TCP_CONNECT:
		return true;
	default:
		return false;
	}
}

const char *st_msg_type_name(uint64_t type)
{
	static const char *const names[] = {
	        "LOGS_CONNECT",   "EXEC_CONNECT",  "METRIC_CONNECT", "DATA",
	        "REMOVE_CONNECT", "CLOSE_CONNECT", "ATTACH_CONNECT",
	};
	static const char *const ext_names[] = {
	        "HELLO",   "WINDOW",    "HALF_CLOSE", "ERROR",    "TCP_CONNECT", "OPENED",
	        "NODE_UP", "NODE_DOWN", "SYNC",       "SYNC_END", "RECONNECT",
	};
	if (type <= ST_MSG_BASE_LAST)
		return names[type];
	if (type >= ST_MSG_EXT_FIRST && type <= ST_MSG_EXT_LAST)
		return ext_names[type - ST_MSG_EXT_FIRST];
	return "UNKNOWN";
}
