/*
 * Reading a signing request (certs/certs.h certs_csr_read): pure — bytes in, a verdict and the
 * subject out; no I/O, no clock, no logging. The request is hostile input (an edge's join body):
 * exactly one PEM block, its self-signature checked, bounded names (fuzzed: fuzz.join).
 */
#include <certs/certs.h>

#include <errno.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <string.h>

#include "certs_int.h"

/* Exactly one PEM block named "CERTIFICATE REQUEST" (or the old "NEW CERTIFICATE REQUEST"),
 * surrounded by whitespace only. */
X509_REQ *certs__csr_parse(const char *pem, size_t len)
{
	static const char begin[] = "-----BEGIN ";
	size_t blocks = 0;
	for (size_t i = 0; i + sizeof begin - 1 <= len; i++)
		if (memcmp(pem + i, begin, sizeof begin - 1) == 0)
			blocks++;
	if (blocks != 1)
		return NULL;
	BIO *b = BIO_new_mem_buf(pem, (int)len);
	if (b == NULL)
		return NULL;
	X509_REQ *req = PEM_read_bio_X509_REQ(b, NULL, NULL, NULL);
	/* Only whitespace may follow the block. */
	char rest[64];
	int n;
	while (req && (n = BIO_read(b, rest, sizeof rest)) > 0)
		for (int i = 0; i < n; i++)
			if (rest[i] != '\n' && rest[i] != '\r' && rest[i] != ' ' &&
			    rest[i] != '\t') {
				X509_REQ_free(req);
				req = NULL;
				break;
			}
	BIO_free(b);
	ERR_clear_error();
	/* And only whitespace before it. */
	for (size_t i = 0; req && i < len && pem[i] != '-'; i++)
		if (pem[i] != '\n' && pem[i] != '\r' && pem[i] != ' ' && pem[i] != '\t') {
			X509_REQ_free(req);
			req = NULL;
		}
	return req;
}

static int csr_info(X509_REQ *req, struct certs_csr_info *out)
{
	memset(out, 0, sizeof *out);
	EVP_PKEY *pk = X509_REQ_get0_pubkey(req);
	if (pk == NULL || X509_REQ_verify(req, pk) != 1)
		return -EBADMSG; /* the requester does not hold the key it asks a certificate for */
	out->key_bits = EVP_PKEY_get_bits(pk);
	int id = EVP_PKEY_get_base_id(pk);
	if ((id == EVP_PKEY_EC && out->key_bits < 256) ||
	    (id == EVP_PKEY_RSA && out->key_bits < 2048) ||
	    (id != EVP_PKEY_EC && id != EVP_PKEY_RSA))
		return -EBADMSG;
	X509_NAME *name = X509_REQ_get_subject_name(req);
	int cns = 0;
	for (int i = 0; i < X509_NAME_entry_count(name); i++) {
		X509_NAME_ENTRY *e = X509_NAME_get_entry(name, i);
		int nid = OBJ_obj2nid(X509_NAME_ENTRY_get_object(e));
		int rc = 0;
		if (nid == NID_commonName) {
			if (cns++ > 0)
				return -EBADMSG;
			rc = certs__name_entry_text(e, out->cn);
		} else if (nid == NID_organizationName) {
			if (out->num_orgs == CERTS_MAX_ORGS)
				return -EMSGSIZE;
			rc = certs__name_entry_text(e, out->orgs[out->num_orgs]);
			out->num_orgs++;
		}
		if (rc < 0)
			return rc;
	}
	STACK_OF(X509_EXTENSION) *exts = X509_REQ_get_extensions(req);
	out->has_extensions = exts != NULL && sk_X509_EXTENSION_num(exts) > 0;
	sk_X509_EXTENSION_pop_free(exts, X509_EXTENSION_free);
	return 0;
}

int certs_csr_read(const char *pem, size_t len, struct certs_csr_info *out)
{
	memset(out, 0, sizeof *out);
	if (len > CERTS_MAX_CSR_BYTES)
		return -EMSGSIZE;
	X509_REQ *req = certs__csr_parse(pem, len);
	if (req == NULL)
		return -EBADMSG;
	int rc = csr_info(req, out);
	X509_REQ_free(req);
	ERR_clear_error();
	return rc;
}
