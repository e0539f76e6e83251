/*
 * guard.h — guard-page buffers (the picohttpparser trick): the bytes end exactly at an
 * inaccessible page, so any read one byte past the input faults even without ASan.
 */
#ifndef ST_TEST_GUARD_H
#define ST_TEST_GUARD_H

#include <stddef.h>
#include <stdint.h>

/* A copy of @data placed so that data[len] is the first byte of a PROT_NONE page. */
struct guard_buf {
	uint8_t *data; /* read-only view of the copy */
	size_t len;
	void *map; /* whole mapping (internal) */
	size_t map_len;
};

/* Returns 0, or -ENOMEM. Free with guard_free(). */
int guard_new(struct guard_buf *out, const void *data, size_t len);
void guard_free(struct guard_buf *g);

#endif
