/* Guard-page buffers; see guard.h. */
#include "guard.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int guard_new(struct guard_buf *out, const void *data, size_t len)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t data_pages = (len + page - 1) / page;
	size_t map_len = (data_pages + 1) * page;
	uint8_t *map =
	        mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (map == MAP_FAILED)
		return -ENOMEM;
	uint8_t *guard = map + data_pages * page;
	if (mprotect(guard, page, PROT_NONE) != 0) {
		munmap(map, map_len);
		return -ENOMEM;
	}
	out->data = guard - len;
	if (len > 0)
		memcpy(out->data, data, len);
	out->len = len;
	out->map = map;
	out->map_len = map_len;
	return 0;
}

void guard_free(struct guard_buf *g)
{
	if (g->map != NULL)
		munmap(g->map, g->map_len);
	g->map = NULL;
	g->data = NULL;
	g->len = 0;
}
