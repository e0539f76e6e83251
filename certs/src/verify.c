/* Verifying a certificate against a CA (certs/certs.h). */
#include <certs/certs.h>

#include <arpa/inet.h>
#include <errno.h>
#include <openssl/err.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <string.h>

#include "certs_int.h"

int certs_verify(const char *ca_path, const char *cert_path, unsigned usage, const char *name,
                 char *err, size_t errlen)
{
	X509 *cert = NULL;
	int rc = certs_load(cert_path, &cert, err, errlen);
	if (rc < 0)
		return rc;
	X509_STORE *store = X509_STORE_new();
	X509_STORE_CTX *ctx = X509_STORE_CTX_new();
	rc = -EPROTO;
	if (store == NULL || ctx == NULL) {
		certs__fail(err, errlen, "out of memory");
		goto out;
	}
	if (X509_STORE_load_file(store, ca_path) != 1) {
		char what[512];
		snprintf(what, sizeof what, "%s: cannot load the CA", ca_path);
		certs__fail(err, errlen, what);
		rc = -EBADMSG;
		goto out;
	}
	if (X509_STORE_CTX_init(ctx, store, cert, NULL) != 1) {
		certs__fail(err, errlen, "verify setup failed");
		goto out;
	}
	if (usage == CERTS_USAGE_SERVER)
		X509_STORE_CTX_set_purpose(ctx, X509_PURPOSE_SSL_SERVER);
	else if (usage == CERTS_USAGE_CLIENT)
		X509_STORE_CTX_set_purpose(ctx, X509_PURPOSE_SSL_CLIENT);
	if (name != NULL) {
		X509_VERIFY_PARAM *param = X509_STORE_CTX_get0_param(ctx);
		unsigned char addr[16];
		bool is_ip =
		        inet_pton(AF_INET, name, addr) == 1 || inet_pton(AF_INET6, name, addr) == 1;
		if ((is_ip ? X509_VERIFY_PARAM_set1_ip_asc(param, name)
		           : X509_VERIFY_PARAM_set1_host(param, name, 0)) != 1) {
			certs__fail(err, errlen, "bad name to verify");
			rc = -EINVAL;
			goto out;
		}
	}
	if (X509_verify_cert(ctx) == 1) {
		rc = 0;
	} else {
		int e = X509_STORE_CTX_get_error(ctx);
		if (err && errlen)
			snprintf(err, errlen, "%s: %s", cert_path,
			         X509_verify_cert_error_string(e));
		ERR_clear_error();
		rc = -EACCES;
	}
out:
	X509_STORE_CTX_free(ctx);
	X509_STORE_free(store);
	X509_free(cert);
	return rc;
}
