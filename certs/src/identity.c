/* Identity read from certificates, and node names (certs/certs.h). Peer certificates are
 * attacker-controlled input: every value is bounded and checked, and nothing is truncated. */
#include <certs/certs.h>

#include <arpa/inet.h>
#include <errno.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <string.h>

#include "certs_int.h"

#define NODE_PREFIX "system:node:"

/* Copies an ASN1 string that must be a clean string of at most CERTS_MAX_NAME_BYTES. */
static int copy_asn1(const ASN1_STRING *s, char *out)
{
	int len = ASN1_STRING_length(s);
	const unsigned char *p = ASN1_STRING_get0_data(s);
	if (len < 0 || len > CERTS_MAX_NAME_BYTES)
		return -EMSGSIZE;
	if (memchr(p, '\0', (size_t)len) != NULL)
		return -EBADMSG;
	memcpy(out, p, (size_t)len);
	out[len] = '\0';
	return 0;
}

int certs__name_entry_text(X509_NAME_ENTRY *e, char *out)
{
	unsigned char *utf8 = NULL;
	int len = ASN1_STRING_to_UTF8(&utf8, X509_NAME_ENTRY_get_data(e));
	if (len < 0)
		return -EBADMSG;
	int rc = 0;
	if (len > CERTS_MAX_NAME_BYTES)
		rc = -EMSGSIZE;
	else if (memchr(utf8, '\0', (size_t)len) != NULL)
		rc = -EBADMSG;
	else {
		memcpy(out, utf8, (size_t)len);
		out[len] = '\0';
	}
	OPENSSL_free(utf8);
	return rc;
}

int certs_x509_identity(X509 *x, struct certs_identity *id)
{
	memset(id, 0, sizeof *id);
	X509_NAME *subj = X509_get_subject_name(x);
	int idx = X509_NAME_get_index_by_NID(subj, NID_commonName, -1);
	if (idx >= 0) {
		/* Two CNs would make "the" identity ambiguous. */
		if (X509_NAME_get_index_by_NID(subj, NID_commonName, idx) >= 0)
			return -EBADMSG;
		int rc = certs__name_entry_text(X509_NAME_get_entry(subj, idx), id->cn);
		if (rc < 0)
			return rc;
	}
	for (idx = -1; (idx = X509_NAME_get_index_by_NID(subj, NID_organizationName, idx)) >= 0;) {
		if (id->num_orgs == CERTS_MAX_ORGS)
			return -EMSGSIZE;
		int rc = certs__name_entry_text(X509_NAME_get_entry(subj, idx),
		                                id->orgs[id->num_orgs]);
		if (rc < 0)
			return rc;
		id->num_orgs++;
	}
	GENERAL_NAMES *gens = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
	int rc = 0;
	for (int i = 0; gens != NULL && rc == 0 && i < sk_GENERAL_NAME_num(gens); i++) {
		const GENERAL_NAME *g = sk_GENERAL_NAME_value(gens, i);
		int type;
		void *v = GENERAL_NAME_get0_value(g, &type);
		if (type == GEN_DNS) {
			if (id->num_dns == CERTS_MAX_SANS)
				rc = -EMSGSIZE;
			else if ((rc = copy_asn1(v, id->dns[id->num_dns])) == 0)
				id->num_dns++;
		} else if (type == GEN_IPADD) {
			const ASN1_OCTET_STRING *ip = v;
			int len = ASN1_STRING_length(ip);
			int af = len == 4 ? AF_INET : len == 16 ? AF_INET6 : 0;
			if (af == 0)
				continue; /* a malformed IP SAN names nothing */
			if (id->num_ips == CERTS_MAX_SANS)
				rc = -EMSGSIZE;
			else if (inet_ntop(af, ASN1_STRING_get0_data(ip), id->ips[id->num_ips],
			                   CERTS_IP_TEXT_BYTES) != NULL)
				id->num_ips++;
		}
	}
	GENERAL_NAMES_free(gens);
	return rc;
}

int certs_ssl_peer_identity(const SSL *ssl, struct certs_identity *id)
{
	X509 *x = SSL_get1_peer_certificate(ssl);
	if (x == NULL)
		return -ENOENT;
	int rc = SSL_get_verify_result(ssl) == X509_V_OK ? certs_x509_identity(x, id) : -EACCES;
	X509_free(x);
	return rc;
}

bool certs_identity_has_ip(const struct certs_identity *id, const char *ip)
{
	unsigned char want[16], have[16];
	int af = AF_INET;
	if (inet_pton(AF_INET, ip, want) != 1) {
		af = AF_INET6;
		if (inet_pton(AF_INET6, ip, want) != 1)
			return false;
	}
	size_t n = af == AF_INET ? 4 : 16;
	for (size_t i = 0; i < id->num_ips; i++)
		if (inet_pton(af, id->ips[i], have) == 1 && memcmp(have, want, n) == 0)
			return true;
	return false;
}

bool certs_identity_listed(const struct certs_identity *id, char *const *allow, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const char *a = allow[i];
		if (strncmp(a, "O=", 2) == 0) {
			for (size_t k = 0; k < id->num_orgs; k++)
				if (strcmp(id->orgs[k], a + 2) == 0)
					return true;
		} else if (strcmp(id->cn, strncmp(a, "CN=", 3) == 0 ? a + 3 : a) == 0) {
			return true;
		}
	}
	return false;
}

bool certs_valid_node_name(const char *name, size_t len)
{
	if (len == 0 || len > CERTS_MAX_NAME_BYTES)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = name[i];
		bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
		if (!alnum && c != '-' && c != '.')
			return false;
		/* each dot-separated label starts and ends alphanumeric, and is not empty */
		bool edge = i == 0 || i == len - 1 || name[i - 1] == '.' || name[i + 1] == '.';
		if (edge && !alnum)
			return false;
	}
	return true;
}

int certs_node_name_from_cn(const char *cn, enum certs_cn_mode mode, char *out, size_t cap)
{
	const char *name = cn;
	if (mode == CERTS_CN_NODE) {
		if (strncmp(cn, NODE_PREFIX, sizeof NODE_PREFIX - 1) != 0)
			return -EACCES;
		name = cn + sizeof NODE_PREFIX - 1;
	}
	size_t len = strlen(name);
	if (!certs_valid_node_name(name, len))
		return -EACCES;
	if (len + 1 > cap)
		return -EMSGSIZE;
	memcpy(out, name, len + 1);
	return 0;
}
