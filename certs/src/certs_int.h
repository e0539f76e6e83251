/* Internal helpers shared by the certs sources. */
#ifndef CERTS_INT_H
#define CERTS_INT_H

#include <stdbool.h>
#include <stddef.h>

/* Formats a reason into @err (if any), appending OpenSSL's drained error queue. */
void certs__fail(char *err, size_t errlen, const char *what);
/* Writes @len bytes to @path atomically with @mode; -EEXIST when it exists and !overwrite. */
int certs__write_file(const char *path, const void *data, size_t len, unsigned mode,
                      bool overwrite);

#endif
