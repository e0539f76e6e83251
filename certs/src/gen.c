/* Key generation, CA creation and issuing (certs/certs.h). */
#include <certs/certs.h>

#include <arpa/inet.h>
#include <errno.h>
#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "certs_int.h"

/* Certificates are backdated this much: a peer whose clock runs a little behind still accepts
 * a certificate issued a moment ago. */
#define CERTS_BACKDATE_SECONDS (5 * 60)
/* Longest validity we issue (about 100 years); keeps time arithmetic far from overflow. */
#define CERTS_MAX_DAYS 36500

static EVP_PKEY *new_key(const struct certs_key_opts *k, char *err, size_t errlen)
{
	EVP_PKEY *pkey = NULL;
	if (k->type == CERTS_KEY_RSA) {
		unsigned bits = k->rsa_bits ? k->rsa_bits : 2048;
		pkey = EVP_RSA_gen(bits);
	} else {
		pkey = EVP_EC_gen("P-256");
	}
	if (pkey == NULL)
		certs__fail(err, errlen, "key generation failed");
	return pkey;
}

static int check_key_opts(const struct certs_key_opts *k, char *err, size_t errlen)
{
	if (k->type == CERTS_KEY_EC_P256)
		return 0;
	if (k->type == CERTS_KEY_RSA &&
	    (k->rsa_bits == 0 || k->rsa_bits == 2048 || k->rsa_bits == 3072 || k->rsa_bits == 4096))
		return 0;
	if (err && errlen)
		snprintf(err, errlen, "unsupported key: use EC P-256 or RSA 2048/3072/4096");
	return -EINVAL;
}

int certs__set_random_serial(X509 *x)
{
	unsigned char raw[16];
	if (RAND_bytes(raw, sizeof raw) != 1)
		return -1;
	raw[0] &= 0x7f; /* positive */
	raw[0] |= 0x40; /* and never short */
	BIGNUM *bn = BN_bin2bn(raw, sizeof raw, NULL);
	if (bn == NULL)
		return -1;
	ASN1_INTEGER *serial = BN_to_ASN1_INTEGER(bn, NULL);
	BN_free(bn);
	if (serial == NULL)
		return -1;
	int ok = X509_set_serialNumber(x, serial);
	ASN1_INTEGER_free(serial);
	return ok == 1 ? 0 : -1;
}

int certs__add_ext(X509 *x, X509 *issuer, int nid, const char *value)
{
	X509V3_CTX ctx;
	X509V3_set_ctx_nodb(&ctx);
	X509V3_set_ctx(&ctx, issuer, x, NULL, NULL, 0);
	X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
	if (ext == NULL)
		return -1;
	int ok = X509_add_ext(x, ext, -1);
	X509_EXTENSION_free(ext);
	return ok == 1 ? 0 : -1;
}

static int set_subject(X509 *x, const char *cn, const char *const *orgs, size_t num_orgs)
{
	X509_NAME *name = X509_get_subject_name(x);
	for (size_t i = 0; i < num_orgs; i++)
		if (X509_NAME_add_entry_by_NID(name, NID_organizationName, MBSTRING_UTF8,
		                               (const unsigned char *)orgs[i], -1, -1, 0) != 1)
			return -1;
	if (X509_NAME_add_entry_by_NID(name, NID_commonName, MBSTRING_UTF8,
	                               (const unsigned char *)cn, -1, -1, 0) != 1)
		return -1;
	return 0;
}

static bool dns_name_ok(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > CERTS_MAX_NAME_BYTES)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '-' || c == '.' || (c == '*' && i == 0)))
			return false;
	}
	return true;
}

/* Adds @value (taken: freed when this fails) to @gens as a name of @type (GEN_DNS, GEN_IPADD). */
static int push_san(GENERAL_NAMES *gens, int type, ASN1_STRING *value)
{
	GENERAL_NAME *g = GENERAL_NAME_new();
	if (g == NULL) {
		ASN1_STRING_free(value);
		return -ENOMEM;
	}
	GENERAL_NAME_set0_value(g, type, value);
	if (sk_GENERAL_NAME_push(gens, g) == 0) {
		GENERAL_NAME_free(g);
		return -ENOMEM;
	}
	return 0;
}

/* subjectAltName built field by field (no config-string parsing of caller input). */
static int add_sans(X509 *x, const struct certs_leaf_opts *o, char *err, size_t errlen)
{
	if (o->num_dns + o->num_ips == 0)
		return 0;
	GENERAL_NAMES *gens = sk_GENERAL_NAME_new_null();
	if (gens == NULL)
		return -ENOMEM;
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < o->num_dns; i++) {
		if (!dns_name_ok(o->dns[i])) {
			if (err && errlen)
				snprintf(err, errlen, "invalid DNS name '%s'", o->dns[i]);
			rc = -EINVAL;
			break;
		}
		ASN1_IA5STRING *s = ASN1_IA5STRING_new();
		if (s == NULL || ASN1_STRING_set(s, o->dns[i], -1) != 1) {
			ASN1_IA5STRING_free(s);
			rc = -ENOMEM;
			break;
		}
		rc = push_san(gens, GEN_DNS, s);
	}
	for (size_t i = 0; rc == 0 && i < o->num_ips; i++) {
		unsigned char addr[16];
		int len = 0;
		if (inet_pton(AF_INET, o->ips[i], addr) == 1)
			len = 4;
		else if (inet_pton(AF_INET6, o->ips[i], addr) == 1)
			len = 16;
		if (len == 0) {
			if (err && errlen)
				snprintf(err, errlen, "invalid IP address '%s'", o->ips[i]);
			rc = -EINVAL;
			break;
		}
		ASN1_OCTET_STRING *s = ASN1_OCTET_STRING_new();
		if (s == NULL || ASN1_OCTET_STRING_set(s, addr, len) != 1) {
			ASN1_OCTET_STRING_free(s);
			rc = -ENOMEM;
			break;
		}
		rc = push_san(gens, GEN_IPADD, s);
	}
	if (rc == 0 && X509_add1_ext_i2d(x, NID_subject_alt_name, gens, 0, X509V3_ADD_DEFAULT) != 1)
		rc = -EPROTO;
	GENERAL_NAMES_free(gens);
	return rc;
}

/* PEM of @x and @pkey to their files, the key first so a certificate never exists without it. */
static int write_pair(X509 *x, EVP_PKEY *pkey, const char *cert_path, const char *key_path,
                      enum certs_write mode, char *err, size_t errlen)
{
	bool overwrite = mode == CERTS_WRITE_OVERWRITE;
	if (!overwrite && (access(cert_path, F_OK) == 0 || access(key_path, F_OK) == 0)) {
		if (err && errlen)
			snprintf(err, errlen, "%s or %s exists (--force replaces it)", cert_path,
			         key_path);
		return -EEXIST;
	}
	int rc = -EPROTO;
	BIO *kb = BIO_new(BIO_s_mem()), *cb = BIO_new(BIO_s_mem());
	if (kb == NULL || cb == NULL ||
	    PEM_write_bio_PrivateKey(kb, pkey, NULL, NULL, 0, NULL, NULL) != 1 ||
	    PEM_write_bio_X509(cb, x) != 1) {
		certs__fail(err, errlen, "PEM encoding failed");
		goto out;
	}
	char *kp, *cp;
	long kl = BIO_get_mem_data(kb, &kp), cl = BIO_get_mem_data(cb, &cp);
	rc = certs__write_file(key_path, kp, (size_t)kl, 0600, overwrite);
	if (rc == 0)
		rc = certs__write_file(cert_path, cp, (size_t)cl, 0644, overwrite);
	if (rc < 0 && err && errlen)
		snprintf(err, errlen, "writing %s: %s", rc == -EEXIST ? cert_path : key_path,
		         strerror(-rc));
	/* Key bytes lived in a memory BIO: wipe them before it is freed. */
	OPENSSL_cleanse(kp, (size_t)kl);
out:
	BIO_free(kb);
	BIO_free(cb);
	return rc;
}

static X509 *new_cert(EVP_PKEY *pkey, int days)
{
	X509 *x = X509_new();
	if (x == NULL)
		return NULL;
	if (X509_set_version(x, 2) != 1 || certs__set_random_serial(x) < 0 ||
	    X509_gmtime_adj(X509_getm_notBefore(x), -CERTS_BACKDATE_SECONDS) == NULL ||
	    X509_gmtime_adj(X509_getm_notAfter(x),
	                    (long)days * 86400L - (days == 0 ? 2 * CERTS_BACKDATE_SECONDS : 0)) ==
	            NULL ||
	    X509_set_pubkey(x, pkey) != 1) {
		X509_free(x);
		return NULL;
	}
	return x;
}

int certs_create_ca(const char *cert_path, const char *key_path, const char *cn,
                    const struct certs_key_opts *key, int days, enum certs_write mode, char *err,
                    size_t errlen)
{
	if (cn == NULL || *cn == '\0' || days < 1 || days > CERTS_MAX_DAYS) {
		if (err && errlen)
			snprintf(err, errlen, "a CA needs a CN and 1..%d days", CERTS_MAX_DAYS);
		return -EINVAL;
	}
	int rc = check_key_opts(key, err, errlen);
	if (rc < 0)
		return rc;
	EVP_PKEY *pkey = new_key(key, err, errlen);
	if (pkey == NULL)
		return -EPROTO;
	rc = -EPROTO;
	X509 *x = new_cert(pkey, days);
	if (x == NULL || set_subject(x, cn, NULL, 0) < 0 ||
	    X509_set_issuer_name(x, X509_get_subject_name(x)) != 1 ||
	    certs__add_ext(x, x, NID_basic_constraints, "critical,CA:TRUE") < 0 ||
	    certs__add_ext(x, x, NID_key_usage, "critical,keyCertSign,cRLSign,digitalSignature") <
	            0 ||
	    certs__add_ext(x, x, NID_subject_key_identifier, "hash") < 0 ||
	    X509_sign(x, pkey, EVP_sha256()) == 0) {
		certs__fail(err, errlen, "creating the CA certificate failed");
		goto out;
	}
	rc = write_pair(x, pkey, cert_path, key_path, mode, err, errlen);
out:
	X509_free(x);
	EVP_PKEY_free(pkey);
	return rc;
}

int certs_issue(const char *ca_cert_path, const char *ca_key_path, const char *cert_path,
                const char *key_path, const struct certs_leaf_opts *o, enum certs_write mode,
                char *err, size_t errlen)
{
	if (o->cn == NULL || *o->cn == '\0' || o->days < 0 || o->days > CERTS_MAX_DAYS ||
	    (o->usage & (CERTS_USAGE_SERVER | CERTS_USAGE_CLIENT)) == 0 ||
	    o->num_orgs > CERTS_MAX_ORGS || o->num_dns + o->num_ips > CERTS_MAX_SANS) {
		if (err && errlen)
			snprintf(err, errlen,
			         "a certificate needs a CN, a usage, 0..%d days, at "
			         "most %d O values and %d SANs",
			         CERTS_MAX_DAYS, CERTS_MAX_ORGS, CERTS_MAX_SANS);
		return -EINVAL;
	}
	int rc = check_key_opts(&o->key, err, errlen);
	if (rc < 0)
		return rc;
	X509 *ca = NULL, *x = NULL;
	EVP_PKEY *ca_key = NULL, *pkey = NULL;
	if ((rc = certs_load(ca_cert_path, &ca, err, errlen)) < 0 ||
	    (rc = certs__load_key(ca_key_path, &ca_key, err, errlen)) < 0)
		goto out;
	if (X509_check_private_key(ca, ca_key) != 1) {
		certs__fail(err, errlen, "the CA key does not match the CA certificate");
		rc = -EINVAL;
		goto out;
	}
	rc = -EPROTO;
	pkey = new_key(&o->key, err, errlen);
	if (pkey == NULL)
		goto out;
	char eku[64];
	snprintf(eku, sizeof eku, "%s%s%s", (o->usage & CERTS_USAGE_SERVER) ? "serverAuth" : "",
	         (o->usage & CERTS_USAGE_SERVER) && (o->usage & CERTS_USAGE_CLIENT) ? "," : "",
	         (o->usage & CERTS_USAGE_CLIENT) ? "clientAuth" : "");
	const char *ku = o->key.type == CERTS_KEY_RSA ? "critical,digitalSignature,keyEncipherment"
	                                              : "critical,digitalSignature";
	x = new_cert(pkey, o->days);
	if (x == NULL || set_subject(x, o->cn, o->orgs, o->num_orgs) < 0 ||
	    X509_set_issuer_name(x, X509_get_subject_name(ca)) != 1 ||
	    certs__add_ext(x, ca, NID_basic_constraints, "critical,CA:FALSE") < 0 ||
	    certs__add_ext(x, ca, NID_key_usage, ku) < 0 ||
	    certs__add_ext(x, ca, NID_ext_key_usage, eku) < 0 ||
	    certs__add_ext(x, ca, NID_subject_key_identifier, "hash") < 0 ||
	    certs__add_ext(x, ca, NID_authority_key_identifier, "keyid:always") < 0) {
		certs__fail(err, errlen, "building the certificate failed");
		goto out;
	}
	if ((rc = add_sans(x, o, err, errlen)) < 0)
		goto out;
	if (X509_sign(x, ca_key, EVP_sha256()) == 0) {
		certs__fail(err, errlen, "signing failed");
		rc = -EPROTO;
		goto out;
	}
	rc = write_pair(x, pkey, cert_path, key_path, mode, err, errlen);
out:
	X509_free(x);
	X509_free(ca);
	EVP_PKEY_free(pkey);
	EVP_PKEY_free(ca_key);
	return rc;
}
