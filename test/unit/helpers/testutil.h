/* testutil.h — small helpers shared by unit tests. */
#ifndef ST_TEST_UTIL_H
#define ST_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Decode hex ("ac 02 03", spaces allowed) into @out. Returns the byte count, or -1. */
long hex_decode(const char *hex, uint8_t *out, size_t cap);

/* Make a fresh private directory under $ST_TEST_TMPDIR (or /tmp). Writes its path into @out.
 * Returns 0 or -errno. Remove it with rmtree(). */
int test_mkdtemp(char *out, size_t cap, const char *tag);
/* Remove a directory tree (files and subdirectories). Returns 0 or -errno. */
int rmtree(const char *path);

#endif
