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

/* Exactly one PEM "CERTIFICATE REQUEST" in @len bytes (whitespace around it only), or NULL.
 * The caller frees it (X509_REQ_free). Pure (csr_read.c). */
struct X509_req_st;
struct X509_req_st *certs__csr_parse(const char *pem, size_t len);

#endif
