/* What a file looked like when it was last read: the reload checks of both daemons (TLS
 * material, cloudstream's deny list) compare stamps, and a change in any field is a change. */
#ifndef STREAM_FILESTAMP_H
#define STREAM_FILESTAMP_H

#include <stdbool.h>
#include <stdint.h>

struct st_file_stamp {
	int64_t mtime_ns;
	int64_t size;
	uint64_t ino; /* a file renamed over the old one (how kubelet and cert-manager write) */
	int err;      /* 0, or the errno of stat() */
};

/* st_file_stamp_read() - stat @path (a worker's call: it touches the file system). A NULL
 * @path (no such file configured) gives the zero stamp. */
void st_file_stamp_read(const char *path, struct st_file_stamp *out);

bool st_file_stamp_equal(const struct st_file_stamp *a, const struct st_file_stamp *b);

#endif
