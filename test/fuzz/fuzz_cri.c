/* Fuzz target: every CRI response decoder and the gRPC unframer (cri/messages.h, cri/grpc.h)
 * over the same input. Decoded strings must be NUL-terminated within their buffers. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cri/grpc.h>
#include <cri/logs.h>
#include <cri/messages.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char url[CRI_URL_MAX];
	if (cri_decode_url_response(data, size, url, sizeof url) == 0 && strlen(url) == 0)
		abort();
	struct cri_version v;
	cri_decode_version_response(data, size, &v);
	static struct cri_sandbox sb[8];
	static struct cri_container c[8];
	size_t n, total;
	if (cri_decode_list_pod_sandbox_response(data, size, sb, 8, &n, &total) == 0 &&
	    (n > 8 || n > total))
		abort();
	if (cri_decode_list_containers_response(data, size, c, 8, &n, &total) == 0 &&
	    (n > 8 || n > total))
		abort();
	static struct cri_container_status st;
	if (cri_decode_container_status_response(data, size, &st) == 0 &&
	    strnlen(st.log_path, sizeof st.log_path) == sizeof st.log_path)
		abort();
	const uint8_t *msg;
	size_t msg_len;
	if (cri_grpc_unframe(data, size, &msg, &msg_len) == 0 && msg_len + 5 != size)
		abort();
	char text[128];
	if (cri_grpc_decode_message((const char *)data, size, text, sizeof text) >= sizeof text)
		abort();
	/* log records and options: output never exceeds the bound the caller sizes for */
	struct cri_log_record r;
	if (cri_log_parse_record((const char *)data, size, &r) == 0) {
		struct cri_log_opts o;
		char why[128];
		int status = cri_log_opts_parse((const char *)data, size > 256 ? 256 : size, 0, &o,
		                                why, sizeof why);
		if (status == 0) {
			struct cri_log_writer w;
			cri_log_writer_init(&w, &o);
			static char out[CRI_LOG_PREFIX_BYTES + 70000];
			if (r.content_len <= 65536 &&
			    cri_log_format(&w, &r, out) > CRI_LOG_PREFIX_BYTES + r.content_len + 1)
				abort();
		}
	}
	if (cri_log_tail_start((const char *)data, size, size % 7) > size)
		abort();
	return 0;
}
