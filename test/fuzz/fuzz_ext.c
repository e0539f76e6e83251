/* Fuzz target: extension negotiation header and extension payloads (stream/ext.h). The first
 * byte picks the decoder; whatever decodes must re-encode to something that decodes the same. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <stream/err.h>
#include <stream/ext.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_rc(int rc)
{
	if (rc != 0 && rc != -EBADMSG && rc != -EMSGSIZE)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	uint8_t which = data[0] % 5;
	const uint8_t *p = data + 1;
	size_t len = size - 1;
	static uint8_t out[ST_MAX_EXT_PAYLOAD_BYTES + 64];
	switch (which) {
	case 0: {
		struct st_ext_offer o, back;
		int rc = st_ext_offer_parse((const char *)p, len, &o);
		check_rc(rc);
		if (rc == 0) {
			ssize_t n = st_ext_offer_format((char *)out, ST_EXT_HEADER_MAX_BYTES, &o);
			if (n < 0 || st_ext_offer_parse((const char *)out, (size_t)n, &back) != 0 ||
			    memcmp(&o, &back, sizeof o) != 0)
				abort();
			struct st_ext_offer ours = {.version = 1, .caps = ST_CAP_ALL}, agreed;
			st_ext_negotiate(&ours, &o, &agreed);
			if (st_ext_check_echo(&ours, &agreed) != 0)
				abort();
		}
		break;
	}
	case 1: {
		struct st_ext_hello h, back;
		int rc = st_ext_hello_decode(p, len, &h);
		check_rc(rc);
		if (rc == 0) {
			ssize_t n = st_ext_hello_encode(out, sizeof out, &h);
			if (n < 0 || st_ext_hello_decode(out, (size_t)n, &back) != 0 ||
			    back.version != h.version || back.caps != h.caps ||
			    back.window_bytes != h.window_bytes ||
			    back.replica_id_len != h.replica_id_len)
				abort();
		}
		break;
	}
	case 2: {
		uint64_t inc, back;
		int rc = st_ext_window_decode(p, len, &inc);
		check_rc(rc);
		if (rc == 0) {
			ssize_t n = st_ext_window_encode(out, sizeof out, inc);
			if (n < 0 || st_ext_window_decode(out, (size_t)n, &back) != 0 ||
			    back != inc)
				abort();
		}
		break;
	}
	case 3: {
		struct st_ext_error e, back;
		int rc = st_ext_error_decode(p, len, &e);
		check_rc(rc);
		if (rc == 0) {
			ssize_t n = st_ext_error_encode(out, sizeof out, &e);
			if (n < 0 || st_ext_error_decode(out, (size_t)n, &back) != 0 ||
			    back.code != e.code || back.reason_len != e.reason_len)
				abort();
			(void)st_ext_error_http_status(e.code);
		}
		break;
	}
	default: {
		struct st_ext_tcp_connect t, back;
		int rc = st_ext_tcp_connect_decode(p, len, &t);
		check_rc(rc);
		if (rc == 0) {
			ssize_t n = st_ext_tcp_connect_encode(out, sizeof out, &t);
			if (n < 0 || st_ext_tcp_connect_decode(out, (size_t)n, &back) != 0 ||
			    back.port != t.port || back.target_len != t.target_len)
				abort();
		}
		break;
	}
	}
	return 0;
}
