/* Fuzz target: identity extraction from peer certificates and node-name parsing (certs.h).
 * The first byte picks: DER certificate -> identity, or raw CN -> node name. */
#include <openssl/x509.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <certs/certs.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const uint8_t *p = data + 1;
	size_t len = size - 1;
	if (data[0] & 1) {
		const unsigned char *q = p;
		X509 *x = d2i_X509(NULL, &q, (long)len);
		if (x == NULL)
			return 0;
		struct certs_identity id;
		int rc = certs_x509_identity(x, &id);
		if (rc == 0) {
			if (strlen(id.cn) > CERTS_MAX_NAME_BYTES || id.num_dns > CERTS_MAX_SANS ||
			    id.num_ips > CERTS_MAX_SANS || id.num_orgs > CERTS_MAX_ORGS)
				abort();
			for (size_t i = 0; i < id.num_ips; i++)
				if (!certs_identity_has_ip(&id, id.ips[i]))
					abort();
			char node[CERTS_MAX_NAME_BYTES + 1];
			if (certs_node_name_from_cn(id.cn, CERTS_CN_NODE, node, sizeof node) == 0 &&
			    !certs_valid_node_name(node, strlen(node)))
				abort();
		}
		X509_free(x);
		return 0;
	}
	char cn[512];
	if (len >= sizeof cn)
		len = sizeof cn - 1;
	memcpy(cn, p, len);
	cn[len] = '\0';
	char node[CERTS_MAX_NAME_BYTES + 1];
	for (int mode = 0; mode < 2; mode++)
		if (certs_node_name_from_cn(cn, (enum certs_cn_mode)mode, node, sizeof node) == 0 &&
		    (strlen(node) == 0 || !certs_valid_node_name(node, strlen(node))))
			abort();
	return 0;
}
