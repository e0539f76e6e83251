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

/* Gives @x a random positive 128-bit serial (RFC 5280: at most 20 octets, positive). 0 or -1
 * (gen.c). */
struct x509_st;
int certs__set_random_serial(struct x509_st *x);
/* Adds the extension @nid = @value (OpenSSL's config syntax, our own constants only) to @x, issued
 * by @issuer (@x itself when self-signed). 0 or -1 (gen.c). */
int certs__add_ext(struct x509_st *x, struct x509_st *issuer, int nid, const char *value);

/* Reads the PEM private key in @path into *@out (the caller frees it): 0, -errno when the file
 * does not open, -EBADMSG when it holds no PEM private key; @err (if any) says which (pem.c). */
struct evp_pkey_st;
int certs__load_key(const char *path, struct evp_pkey_st **out, char *err, size_t errlen);

/* The UTF-8 text of a subject name entry (CN, O may be PrintableString, UTF8String,
 * BMPString...) into @out, CERTS_MAX_NAME_BYTES + 1 bytes: 0; -EMSGSIZE when longer,
 * -EBADMSG when it does not convert or holds a NUL. Pure (identity.c). */
struct X509_name_entry_st;
int certs__name_entry_text(struct X509_name_entry_st *e, char *out);

/* Exactly one PEM "CERTIFICATE REQUEST" in @len bytes (whitespace around it only), or NULL.
 * The caller frees it (X509_REQ_free). Pure (csr_read.c). */
struct X509_req_st;
struct X509_req_st *certs__csr_parse(const char *pem, size_t len);

#endif
