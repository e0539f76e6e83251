/*
 * Keys born on the node, signing requests and CA pins (certs/certs.h): what an edge needs to
 * join with a token and to renew its certificate, and what the cloud needs to sign for it.
 */
#include <certs/certs.h>

#include <errno.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <string.h>

#include <stream/hex.h>

#include "certs_int.h"

#define MAX_BACKDATE_SECONDS 300L
/* Longest lifetime we sign: about 10 years. */
#define MAX_LIFETIME_SECONDS (3650L * 86400L)

/* PEM of a memory BIO into @out (@cap, with a NUL); -EMSGSIZE when it does not fit. */
static int bio_out(BIO *b, char *out, size_t cap, size_t *out_len)
{
	char *p;
	long n = BIO_get_mem_data(b, &p);
	if (n <= 0 || (size_t)n + 1 > cap)
		return -EMSGSIZE;
	memcpy(out, p, (size_t)n);
	out[n] = '\0';
	*out_len = (size_t)n;
	return 0;
}

static int name_add(X509_NAME *name, int nid, const char *v)
{
	return X509_NAME_add_entry_by_NID(name, nid, MBSTRING_UTF8, (const unsigned char *)v, -1,
	                                  -1, 0) == 1
	               ? 0
	               : -1;
}

int certs_csr_new(EVP_PKEY **key_out, const char *cn, const char *const *orgs, size_t num_orgs,
                  char *csr, size_t cap, size_t *csr_len, char *err, size_t errlen)
{
	*key_out = NULL;
	if (cn == NULL || *cn == '\0' || num_orgs > CERTS_MAX_ORGS) {
		if (err && errlen)
			snprintf(err, errlen, "a request needs a CN and at most %d O values",
			         CERTS_MAX_ORGS);
		return -EINVAL;
	}
	int rc = -EPROTO;
	EVP_PKEY *key = EVP_EC_gen("P-256");
	X509_REQ *req = X509_REQ_new();
	BIO *b = BIO_new(BIO_s_mem());
	if (key == NULL || req == NULL || b == NULL) {
		certs__fail(err, errlen, "key generation failed");
		goto out;
	}
	X509_NAME *name = X509_REQ_get_subject_name(req);
	for (size_t i = 0; i < num_orgs; i++)
		if (name_add(name, NID_organizationName, orgs[i]) < 0)
			goto fail_build;
	if (name_add(name, NID_commonName, cn) < 0 || X509_REQ_set_version(req, 0) != 1 ||
	    X509_REQ_set_pubkey(req, key) != 1 || X509_REQ_sign(req, key, EVP_sha256()) == 0 ||
	    PEM_write_bio_X509_REQ(b, req) != 1)
		goto fail_build;
	rc = bio_out(b, csr, cap, csr_len);
	if (rc < 0) {
		if (err && errlen)
			snprintf(err, errlen, "the request does not fit in %zu bytes", cap);
		goto out;
	}
	*key_out = key;
	key = NULL;
	goto out;
fail_build:
	certs__fail(err, errlen, "building the signing request failed");
out:
	BIO_free(b);
	X509_REQ_free(req);
	EVP_PKEY_free(key);
	return rc;
}

int certs_write_key(const char *path, EVP_PKEY *key, char *err, size_t errlen)
{
	BIO *b = BIO_new(BIO_s_mem());
	if (b == NULL || PEM_write_bio_PrivateKey(b, key, NULL, NULL, 0, NULL, NULL) != 1) {
		certs__fail(err, errlen, "PEM encoding of the key failed");
		BIO_free(b);
		return -EPROTO;
	}
	char *p;
	long n = BIO_get_mem_data(b, &p);
	int rc = certs__write_file(path, p, (size_t)n, 0600, true);
	OPENSSL_cleanse(p, (size_t)n); /* key bytes: wiped before the BIO is freed */
	BIO_free(b);
	if (rc < 0 && err && errlen)
		snprintf(err, errlen, "writing %s: %s", path, strerror(-rc));
	return rc;
}

int certs_write_file(const char *path, const void *data, size_t len, unsigned mode)
{
	return certs__write_file(path, data, len, mode, true);
}

static int load_ca(const char *cert_path, const char *key_path, X509 **ca, EVP_PKEY **key,
                   char *err, size_t errlen)
{
	int rc = certs_load(cert_path, ca, err, errlen);
	if (rc < 0)
		return rc;
	if ((rc = certs__load_key(key_path, key, err, errlen)) < 0)
		return rc;
	if (X509_check_private_key(*ca, *key) != 1) {
		certs__fail(err, errlen, "the signing key does not match the signing CA");
		return -EINVAL;
	}
	return 0;
}

int certs_sign_csr(const char *ca_cert_path, const char *ca_key_path, const char *csr,
                   size_t csr_len, const char *cn, const char *const *orgs, size_t num_orgs,
                   long lifetime_s, char *out, size_t cap, size_t *out_len, char *err,
                   size_t errlen)
{
	if (cn == NULL || *cn == '\0' || num_orgs > CERTS_MAX_ORGS || lifetime_s < 1 ||
	    lifetime_s > MAX_LIFETIME_SECONDS) {
		if (err && errlen)
			snprintf(err, errlen,
			         "signing needs a CN, at most %d O values and a "
			         "lifetime of 1 s to 10 years",
			         CERTS_MAX_ORGS);
		return -EINVAL;
	}
	struct certs_csr_info info;
	int rc = certs_csr_read(csr, csr_len, &info);
	if (rc < 0) {
		if (err && errlen)
			snprintf(err, errlen, "not one valid PEM certificate request");
		return rc;
	}
	X509_REQ *req = certs__csr_parse(csr, csr_len);
	X509 *ca = NULL, *x = NULL;
	EVP_PKEY *ca_key = NULL;
	BIO *b = NULL;
	if (req == NULL)
		return -EBADMSG;
	if ((rc = load_ca(ca_cert_path, ca_key_path, &ca, &ca_key, err, errlen)) < 0)
		goto out;
	rc = -EPROTO;
	long backdate =
	        lifetime_s / 10 < MAX_BACKDATE_SECONDS ? lifetime_s / 10 : MAX_BACKDATE_SECONDS;
	x = X509_new();
	b = BIO_new(BIO_s_mem());
	if (x == NULL || b == NULL || X509_set_version(x, 2) != 1 ||
	    certs__set_random_serial(x) < 0 ||
	    X509_gmtime_adj(X509_getm_notBefore(x), -backdate) == NULL ||
	    X509_gmtime_adj(X509_getm_notAfter(x), lifetime_s) == NULL ||
	    X509_set_pubkey(x, X509_REQ_get0_pubkey(req)) != 1)
		goto fail_build;
	X509_NAME *name = X509_get_subject_name(x);
	for (size_t i = 0; i < num_orgs; i++)
		if (name_add(name, NID_organizationName, orgs[i]) < 0)
			goto fail_build;
	const char *ku = EVP_PKEY_get_base_id(X509_REQ_get0_pubkey(req)) == EVP_PKEY_RSA
	                         ? "critical,digitalSignature,keyEncipherment"
	                         : "critical,digitalSignature";
	if (name_add(name, NID_commonName, cn) < 0 ||
	    X509_set_issuer_name(x, X509_get_subject_name(ca)) != 1 ||
	    certs__add_ext(x, ca, NID_basic_constraints, "critical,CA:FALSE") < 0 ||
	    certs__add_ext(x, ca, NID_key_usage, ku) < 0 ||
	    certs__add_ext(x, ca, NID_ext_key_usage, "clientAuth") < 0 ||
	    certs__add_ext(x, ca, NID_subject_key_identifier, "hash") < 0 ||
	    certs__add_ext(x, ca, NID_authority_key_identifier, "keyid:always") < 0 ||
	    X509_sign(x, ca_key, EVP_sha256()) == 0 || PEM_write_bio_X509(b, x) != 1)
		goto fail_build;
	rc = bio_out(b, out, cap, out_len);
	if (rc < 0 && err && errlen)
		snprintf(err, errlen, "the certificate does not fit in %zu bytes", cap);
	goto out;
fail_build:
	certs__fail(err, errlen, "signing the request failed");
out:
	BIO_free(b);
	X509_free(x);
	X509_free(ca);
	EVP_PKEY_free(ca_key);
	X509_REQ_free(req);
	return rc;
}

int certs_spki_pin(X509 *x, char *out, size_t cap)
{
	if (cap < CERTS_PIN_TEXT_BYTES)
		return -EMSGSIZE;
	unsigned char *der = NULL;
	int n = i2d_X509_PUBKEY(X509_get_X509_PUBKEY(x), &der);
	if (n <= 0)
		return -EPROTO;
	unsigned char md[32];
	unsigned int mdlen = 0;
	int ok = EVP_Digest(der, (size_t)n, md, &mdlen, EVP_sha256(), NULL);
	OPENSSL_free(der);
	if (ok != 1 || mdlen != sizeof md)
		return -EPROTO;
	memcpy(out, "sha256:", 7);
	for (size_t i = 0; i < sizeof md; i++)
		snprintf(out + 7 + 2 * i, 3, "%02x", md[i]);
	return 0;
}

bool certs_pin_valid(const char *pin)
{
	if (pin == NULL || strncmp(pin, "sha256:", 7) != 0 || strlen(pin) != 7 + 64)
		return false;
	for (size_t i = 7; i < 7 + 64; i++)
		if (st_hex_value((unsigned char)pin[i]) < 0)
			return false;
	return true;
}

bool certs_pin_equal(const char *a, const char *b)
{
	if (!certs_pin_valid(a) || !certs_pin_valid(b))
		return false;
	for (size_t i = 7; i < 7 + 64; i++)
		if (st_hex_value((unsigned char)a[i]) != st_hex_value((unsigned char)b[i]))
			return false;
	return true;
}
