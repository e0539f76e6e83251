/* Fuzz target: tunnel message decoding (stream/frame.h). Checks the decoder's invariants, then
 * re-encodes what it decoded and requires a decodable message with the same fields. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <stream/err.h>
#include <stream/frame.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint64_t v;
	ssize_t n = st_uvarint_decode(data, size, &v);
	if (n > 0 && ((size_t)n > size || (size_t)n > ST_MAX_UVARINT_BYTES))
		abort();

	struct st_msg m;
	int rc = st_msg_decode(data, size, &m);
	if (rc != 0) {
		if (rc != -EBADMSG && rc != -EMSGSIZE)
			abort();
		return 0;
	}
	if (m.payload_len > size || (m.payload_len > 0 && m.payload != data + size - m.payload_len))
		abort();

	/* Round trip: encoding what was decoded gives a message that decodes to the same fields
	 * (not necessarily the same bytes: Go accepts non-minimal varints). */
	static uint8_t buf[ST_MAX_MESSAGE_BYTES];
	ssize_t len =
	        st_msg_encode(buf, sizeof buf, m.connect_id, m.type, m.payload, m.payload_len);
	if (len < 0)
		abort(); /* it fit when decoded with a header at least as long */
	struct st_msg m2;
	if (st_msg_decode(buf, (size_t)len, &m2) != 0 || m2.connect_id != m.connect_id ||
	    m2.type != m.type || m2.payload_len != m.payload_len ||
	    (m.payload_len && memcmp(m2.payload, m.payload, m.payload_len) != 0))
		abort();
	(void)st_msg_type_name(m.type);
	return 0;
}
