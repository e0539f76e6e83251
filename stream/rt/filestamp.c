/* File stamps (stream/filestamp.h). */
#include <stream/filestamp.h>

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

void st_file_stamp_read(const char *path, struct st_file_stamp *out)
{
	struct stat sb;
	memset(out, 0, sizeof *out);
	if (path == NULL)
		return;
	if (stat(path, &sb) != 0) {
		out->err = errno;
		return;
	}
	out->mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
	out->size = (int64_t)sb.st_size;
	out->ino = (uint64_t)sb.st_ino;
}

bool st_file_stamp_equal(const struct st_file_stamp *a, const struct st_file_stamp *b)
{
	return a->mtime_ns == b->mtime_ns && a->size == b->size && a->ino == b->ino &&
	       a->err == b->err;
}
