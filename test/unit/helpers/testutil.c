/* Small helpers shared by unit tests; see testutil.h. */
#include "testutil.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stream/hex.h>

long hex_decode(const char *hex, uint8_t *out, size_t cap)
{
	size_t n = 0;
	int hi = -1;
	for (; *hex; hex++) {
		if (*hex == ' ' || *hex == '\n' || *hex == ':')
			continue;
		int v = st_hex_value((unsigned char)*hex);
		if (v < 0)
			return -1;
		if (hi < 0) {
			hi = v;
			continue;
		}
		if (n >= cap)
			return -1;
		out[n++] = (uint8_t)(hi << 4 | v);
		hi = -1;
	}
	return hi < 0 ? (long)n : -1;
}

int test_mkdtemp(char *out, size_t cap, const char *tag)
{
	const char *base = getenv("ST_TEST_TMPDIR");
	if (base == NULL || *base == '\0')
		base = "/tmp";
	mkdir(base, 0700);
	int n = snprintf(out, cap, "%s/%s.XXXXXX", base, tag);
	if (n < 0 || (size_t)n >= cap)
		return -ENAMETOOLONG;
	return mkdtemp(out) ? 0 : -errno;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

int rmtree(const char *path)
{
	return nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : -errno;
}
