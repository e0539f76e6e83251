/* Fuzz target: the front door's pure part (cloudstream/src/door.h). The CONNECT head parser: a
 * head it accepts must lie within the input, name a host within the limits and a port
 * 1..65535, and an error must carry one of the statuses the header names; the answer for any
 * reason phrase must be a single status line (no CR or LF inside it). The same bytes as a
 * PodList (cs_door_pod_node): a node it names is NUL-terminated within its buffer. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "door.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cs_door_req r;
	int status = 0;
	const char *why = NULL;
	ssize_t n = cs_door_parse(data, size, &r, &status, &why);
	if (n > 0) {
		if ((size_t)n > size || r.port == 0 || r.host_len == 0 ||
		    r.host_len > CS_DOOR_MAX_HOST_BYTES || r.host < (const char *)data ||
		    r.host + r.host_len > (const char *)data + size)
			abort();
	} else if (n < 0) {
		if ((status != 400 && status != 405 && status != 431) || why == NULL)
			abort();
	} else if (size >= CS_DOOR_MAX_HEAD_BYTES) {
		abort(); /* never waits past the limit */
	}
	char reason[CS_DOOR_MAX_REASON_BYTES + 1];
	size_t k = size < CS_DOOR_MAX_REASON_BYTES ? size : CS_DOOR_MAX_REASON_BYTES;
	memcpy(reason, data, k);
	reason[k] = '\0';
	char out[CS_DOOR_MAX_REASON_BYTES + 128];
	ssize_t a = cs_door_answer(out, sizeof out, 502, reason);
	if (a <= 0)
		abort();
	const char *eol = memchr(out, '\n', (size_t)a);
	const char *cr = memchr(out, '\r', (size_t)a);
	if (eol == NULL || cr == NULL || cr + 1 != eol)
		abort(); /* the status line ends at the first CR LF, nowhere earlier */
	char node[16];
	int found = cs_door_pod_node((const char *)data, size, "10.0.0.1", node, sizeof node);
	if (found == 1 && (node[0] == '\0' || memchr(node, '\0', sizeof node) == NULL))
		abort();
	if (found != 1 && found != 0 && found != -EBADMSG && found != -EMSGSIZE)
		abort();
	return 0;
}
