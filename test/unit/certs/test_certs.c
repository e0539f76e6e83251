/* Unit tests for the certs library (certs/certs.h): CAs, leaves, verification, identity. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <certs/certs.h>

#include "testutil.h"

static char dir[256];

static const char *path(const char *name)
{
	static char bufs[8][512];
	static int i;
	char *p = bufs[i++ % 8];
	snprintf(p, 512, "%s/%s", dir, name);
	return p;
}

static int setup(void **state)
{
	(void)state;
	if (test_mkdtemp(dir, sizeof dir, "certs") != 0)
		return -1;
	struct certs_key_opts ec = {CERTS_KEY_EC_P256, 0};
	char err[512];
	if (certs_create_ca(path("ca.crt"), path("ca.key"), "test CA", &ec, 30, CERTS_WRITE_NEW,
	                    err, sizeof err) != 0)
		return -1;
	return certs_create_ca(path("other-ca.crt"), path("other-ca.key"), "other CA", &ec, 30,
	                       CERTS_WRITE_NEW, err, sizeof err);
}

static int teardown(void **state)
{
	(void)state;
	return rmtree(dir);
}

static void test_ca_properties(void **state)
{
	(void)state;
	X509 *ca;
	char err[512];
	assert_int_equal(certs_load(path("ca.crt"), &ca, err, sizeof err), 0);
	assert_int_equal(X509_check_ca(ca), 1);
	assert_true(X509_get_key_usage(ca) & KU_KEY_CERT_SIGN);
	EVP_PKEY *pk = X509_get0_pubkey(ca);
	assert_int_equal(EVP_PKEY_get_base_id(pk), EVP_PKEY_EC);
	assert_int_equal(EVP_PKEY_get_bits(pk), 256);
	struct certs_identity id;
	assert_int_equal(certs_x509_identity(ca, &id), 0);
	assert_string_equal(id.cn, "test CA");
	X509_free(ca);
	/* Key 0600, certificate 0644; an existing pair is not overwritten unless asked. */
	struct stat st;
	assert_int_equal(stat(path("ca.key"), &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(stat(path("ca.crt"), &st), 0);
	assert_int_equal(st.st_mode & 0777, 0644);
	struct certs_key_opts ec = {CERTS_KEY_EC_P256, 0};
	assert_int_equal(certs_create_ca(path("ca.crt"), path("ca.key"), "x", &ec, 30,
	                                 CERTS_WRITE_NEW, err, sizeof err),
	                 -EEXIST);
	assert_int_equal(certs_create_ca(path("bad.crt"), path("bad.key"), "", &ec, 30,
	                                 CERTS_WRITE_NEW, err, sizeof err),
	                 -EINVAL);
	struct certs_key_opts rsa1024 = {CERTS_KEY_RSA, 1024};
	assert_int_equal(certs_create_ca(path("bad.crt"), path("bad.key"), "x", &rsa1024, 30,
	                                 CERTS_WRITE_NEW, err, sizeof err),
	                 -EINVAL);
}

static void test_server_leaf_exact(void **state)
{
	(void)state;
	const char *dns[] = {"cloudstream.test", "localhost"};
	const char *ips[] = {"127.0.0.1", "::1", "10.0.0.7"};
	struct certs_leaf_opts o = {.cn = "cloudstream",
	                            .dns = dns,
	                            .num_dns = 2,
	                            .ips = ips,
	                            .num_ips = 3,
	                            .usage = CERTS_USAGE_SERVER,
	                            .days = 10};
	char err[512] = "";
	assert_int_equal(certs_issue(path("ca.crt"), path("ca.key"), path("srv.crt"),
	                             path("srv.key"), &o, CERTS_WRITE_NEW, err, sizeof err),
	                 0);
	X509 *x;
	assert_int_equal(certs_load(path("srv.crt"), &x, err, sizeof err), 0);
	struct certs_identity id;
	assert_int_equal(certs_x509_identity(x, &id), 0);
	assert_string_equal(id.cn, "cloudstream");
	assert_int_equal(id.num_orgs, 0);
	assert_int_equal(id.num_dns, 2);
	assert_string_equal(id.dns[0], "cloudstream.test");
	assert_string_equal(id.dns[1], "localhost");
	assert_int_equal(id.num_ips, 3);
	assert_string_equal(id.ips[0], "127.0.0.1");
	assert_string_equal(id.ips[1], "::1");
	assert_true(certs_identity_has_ip(&id, "10.0.0.7"));
	assert_true(certs_identity_has_ip(&id, "0:0:0:0:0:0:0:1"));
	assert_false(certs_identity_has_ip(&id, "10.0.0.8"));
	assert_false(certs_identity_has_ip(&id, "not-an-ip"));
	assert_int_equal(X509_check_ca(x), 0);
	assert_true(X509_get_extended_key_usage(x) & XKU_SSL_SERVER);
	assert_false(X509_get_extended_key_usage(x) & XKU_SSL_CLIENT);
	X509_free(x);
	/* Verification: right CA/name/purpose pass; every wrong one fails with a reason. */
	assert_int_equal(certs_verify(path("ca.crt"), path("srv.crt"), CERTS_USAGE_SERVER,
	                              "cloudstream.test", err, sizeof err),
	                 0);
	assert_int_equal(certs_verify(path("ca.crt"), path("srv.crt"), CERTS_USAGE_SERVER,
	                              "127.0.0.1", err, sizeof err),
	                 0);
	assert_int_equal(certs_verify(path("ca.crt"), path("srv.crt"), 0, NULL, err, sizeof err),
	                 0);
	assert_int_equal(certs_verify(path("ca.crt"), path("srv.crt"), CERTS_USAGE_SERVER,
	                              "wrong.test", err, sizeof err),
	                 -EACCES);
	assert_non_null(strstr(err, "mismatch"));
	assert_int_equal(certs_verify(path("ca.crt"), path("srv.crt"), CERTS_USAGE_SERVER,
	                              "127.0.0.2", err, sizeof err),
	                 -EACCES);
	assert_int_equal(certs_verify(path("ca.crt"), path("srv.crt"), CERTS_USAGE_CLIENT, NULL,
	                              err, sizeof err),
	                 -EACCES);
	assert_int_equal(
	        certs_verify(path("other-ca.crt"), path("srv.crt"), 0, NULL, err, sizeof err),
	        -EACCES);
	assert_non_null(strstr(err, "issuer"));
	assert_int_equal(
	        certs_verify(path("ca.crt"), path("missing.crt"), 0, NULL, err, sizeof err),
	        -ENOENT);
}

static void test_node_client_and_rsa(void **state)
{
	(void)state;
	const char *orgs[] = {"system:nodes"};
	struct certs_leaf_opts o = {.key = {CERTS_KEY_RSA, 2048},
	                            .cn = "system:node:edge-7",
	                            .orgs = orgs,
	                            .num_orgs = 1,
	                            .usage = CERTS_USAGE_CLIENT,
	                            .days = 5};
	char err[512];
	assert_int_equal(certs_issue(path("ca.crt"), path("ca.key"), path("node.crt"),
	                             path("node.key"), &o, CERTS_WRITE_NEW, err, sizeof err),
	                 0);
	X509 *x;
	assert_int_equal(certs_load(path("node.crt"), &x, err, sizeof err), 0);
	struct certs_identity id;
	assert_int_equal(certs_x509_identity(x, &id), 0);
	assert_int_equal(id.num_orgs, 1);
	assert_string_equal(id.orgs[0], "system:nodes");
	assert_int_equal(id.num_dns + id.num_ips, 0);
	assert_true(X509_get_key_usage(x) & KU_KEY_ENCIPHERMENT);
	assert_int_equal(EVP_PKEY_get_bits(X509_get0_pubkey(x)), 2048);
	char node[64];
	assert_int_equal(certs_node_name_from_cn(id.cn, CERTS_CN_NODE, node, sizeof node), 0);
	assert_string_equal(node, "edge-7");
	X509_free(x);
	assert_int_equal(certs_verify(path("ca.crt"), path("node.crt"), CERTS_USAGE_CLIENT, NULL,
	                              err, sizeof err),
	                 0);
	/* Expired (days 0) fails verification. */
	o.key.type = CERTS_KEY_EC_P256;
	o.days = 0;
	assert_int_equal(certs_issue(path("ca.crt"), path("ca.key"), path("old.crt"),
	                             path("old.key"), &o, CERTS_WRITE_NEW, err, sizeof err),
	                 0);
	assert_int_equal(certs_verify(path("ca.crt"), path("old.crt"), 0, NULL, err, sizeof err),
	                 -EACCES);
	assert_non_null(strstr(err, "expired"));
	/* Bad inputs. */
	const char *bad_dns[] = {"a,DNS:evil"};
	struct certs_leaf_opts b = {
	        .cn = "x", .dns = bad_dns, .num_dns = 1, .usage = CERTS_USAGE_SERVER, .days = 1};
	assert_int_equal(certs_issue(path("ca.crt"), path("ca.key"), path("b.crt"), path("b.key"),
	                             &b, CERTS_WRITE_NEW, err, sizeof err),
	                 -EINVAL);
	const char *bad_ip[] = {"300.1.1.1"};
	b.num_dns = 0;
	b.ips = bad_ip;
	b.num_ips = 1;
	assert_int_equal(certs_issue(path("ca.crt"), path("ca.key"), path("b.crt"), path("b.key"),
	                             &b, CERTS_WRITE_NEW, err, sizeof err),
	                 -EINVAL);
	b.num_ips = 0;
	b.usage = 0;
	assert_int_equal(certs_issue(path("ca.crt"), path("ca.key"), path("b.crt"), path("b.key"),
	                             &b, CERTS_WRITE_NEW, err, sizeof err),
	                 -EINVAL);
	/* A CA key that does not belong to the CA certificate. */
	b.usage = CERTS_USAGE_CLIENT;
	assert_int_equal(certs_issue(path("ca.crt"), path("other-ca.key"), path("b.crt"),
	                             path("b.key"), &b, CERTS_WRITE_NEW, err, sizeof err),
	                 -EINVAL);
}

static void test_node_names(void **state)
{
	(void)state;
	char out[300];
	assert_int_equal(
	        certs_node_name_from_cn("system:node:edge-1", CERTS_CN_NODE, out, sizeof out), 0);
	assert_string_equal(out, "edge-1");
	assert_int_equal(certs_node_name_from_cn("edge-1", CERTS_CN_NODE, out, sizeof out),
	                 -EACCES);
	assert_int_equal(certs_node_name_from_cn("edge-1", CERTS_CN_PLAIN, out, sizeof out), 0);
	assert_int_equal(certs_node_name_from_cn("system:node:", CERTS_CN_NODE, out, sizeof out),
	                 -EACCES);
	static const char *const bad[] = {"Edge", "-edge", "edge-", "a..b", ".a",    "a.",
	                                  "a b",  "a_b",   "a/b",   "a:b",  "edge\n"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		if (certs_node_name_from_cn(bad[i], CERTS_CN_PLAIN, out, sizeof out) != -EACCES)
			fail_msg("accepted '%s'", bad[i]);
	assert_int_equal(certs_node_name_from_cn("a.b-c.d9", CERTS_CN_PLAIN, out, sizeof out), 0);
	/* Length: 253 ok, 254 refused; a buffer one byte short is -EMSGSIZE. */
	char name[260];
	memset(name, 'a', 254);
	name[253] = '\0';
	assert_int_equal(certs_node_name_from_cn(name, CERTS_CN_PLAIN, out, sizeof out), 0);
	assert_int_equal(certs_node_name_from_cn(name, CERTS_CN_PLAIN, out, 253), -EMSGSIZE);
	name[253] = 'a';
	name[254] = '\0';
	assert_int_equal(certs_node_name_from_cn(name, CERTS_CN_PLAIN, out, sizeof out), -EACCES);
}

/* Before a handshake (or after one without a client certificate) there is nothing to read. */
static void test_certs_ssl_peer_identity__no_certificate(void **state)
{
	(void)state;
	SSL_CTX *ctx = SSL_CTX_new(TLS_method());
	assert_non_null(ctx);
	SSL *ssl = SSL_new(ctx);
	assert_non_null(ssl);
	struct certs_identity id;
	assert_int_equal(certs_ssl_peer_identity(ssl, &id), -ENOENT);
	SSL_free(ssl);
	SSL_CTX_free(ctx);
}

/* O= entries match an O value, CN= and bare entries the CN; exactly, never by prefix. */
static void test_certs_identity_listed__entries(void **state)
{
	(void)state;
	struct certs_identity id = {.cn = "kube-apiserver", .num_orgs = 2};
	snprintf(id.orgs[0], sizeof id.orgs[0], "system:masters");
	snprintf(id.orgs[1], sizeof id.orgs[1], "egress");
	/* char *[] as in a parsed flag list (struct st_strlist) */
	char o_nobody[] = "O=nobody", o_egress[] = "O=egress", cn[] = "CN=kube-apiserver",
	     other[] = "other", plain[] = "kube-apiserver", prefix[] = "kube",
	     cn_longer[] = "CN=kube-apiserver-x", o_short[] = "O=egres",
	     o_empty[] = "O=", org_bare[] = "egress", org_as_cn[] = "CN=egress";
	char *by_org[] = {o_nobody, o_egress};
	char *by_cn[] = {cn};
	char *bare[] = {other, plain};
	char *none[] = {prefix, cn_longer, o_short, o_empty, org_bare, org_as_cn};
	assert_true(certs_identity_listed(&id, by_org, 2));
	assert_false(certs_identity_listed(&id, by_org, 1)); /* only the first @n entries */
	assert_true(certs_identity_listed(&id, by_cn, 1));
	assert_true(certs_identity_listed(&id, bare, 2));
	assert_false(certs_identity_listed(&id, none, sizeof none / sizeof none[0]));
	assert_false(certs_identity_listed(&id, NULL, 0));
}

static void test_identity_limits(void **state)
{
	(void)state;
	/* More SANs than the identity holds: refused, not cut. */
	char names[CERTS_MAX_SANS + 1][32];
	const char *dns[CERTS_MAX_SANS + 1];
	for (int i = 0; i <= CERTS_MAX_SANS; i++) {
		snprintf(names[i], sizeof names[i], "n%d.test", i);
		dns[i] = names[i];
	}
	char err[512];
	struct certs_leaf_opts o = {.cn = "many",
	                            .dns = dns,
	                            .num_dns = CERTS_MAX_SANS,
	                            .usage = CERTS_USAGE_SERVER,
	                            .days = 1};
	assert_int_equal(certs_issue(path("ca.crt"), path("ca.key"), path("many.crt"),
	                             path("many.key"), &o, CERTS_WRITE_NEW, err, sizeof err),
	                 0);
	X509 *x;
	assert_int_equal(certs_load(path("many.crt"), &x, err, sizeof err), 0);
	struct certs_identity id;
	assert_int_equal(certs_x509_identity(x, &id), 0);
	assert_int_equal(id.num_dns, CERTS_MAX_SANS);
	/* Add one more SAN by hand to the parsed certificate. */
	GENERAL_NAMES *gens = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
	GENERAL_NAME *g = GENERAL_NAME_new();
	ASN1_IA5STRING *s = ASN1_IA5STRING_new();
	ASN1_STRING_set(s, "extra.test", -1);
	GENERAL_NAME_set0_value(g, GEN_DNS, s);
	sk_GENERAL_NAME_push(gens, g);
	X509_add1_ext_i2d(x, NID_subject_alt_name, gens, 0, X509V3_ADD_REPLACE);
	GENERAL_NAMES_free(gens);
	assert_int_equal(certs_x509_identity(x, &id), -EMSGSIZE);
	X509_free(x);
	o.num_dns = CERTS_MAX_SANS + 1;
	assert_int_equal(certs_issue(path("ca.crt"), path("ca.key"), path("m2.crt"), path("m2.key"),
	                             &o, CERTS_WRITE_NEW, err, sizeof err),
	                 -EINVAL);
}

/* certs_csr_new → certs_sign_csr: the key stays with the caller, the certificate is for it, the
 * subject is the one given (not the request's), no SANs even when asked, clientAuth only, the
 * lifetime in seconds with a tenth backdated; a CA key that is not the CA's is refused. */
static void test_sign_csr_exact(void **state)
{
	(void)state;
	char csr[CERTS_MAX_CSR_BYTES], pem[CERTS_MAX_CERT_BYTES], err[512];
	size_t csr_len, pem_len;
	EVP_PKEY *key = NULL;
	const char *masters[] = {"system:masters"}, *nodes[] = {"system:nodes"};
	assert_int_equal(certs_csr_new(&key, "system:node:evil", masters, 1, csr, sizeof csr,
	                               &csr_len, err, sizeof err),
	                 0);
	assert_non_null(strstr(csr, "BEGIN CERTIFICATE REQUEST"));
	assert_null(strstr(csr, "PRIVATE KEY"));
	assert_int_equal(certs_sign_csr(path("ca.crt"), path("ca.key"), csr, csr_len,
	                                "system:node:edge-5", nodes, 1, 120, pem, sizeof pem,
	                                &pem_len, err, sizeof err),
	                 0);
	assert_int_equal(strlen(pem), pem_len);
	BIO *b = BIO_new_mem_buf(pem, (int)pem_len);
	X509 *x = PEM_read_bio_X509(b, NULL, NULL, NULL);
	BIO_free(b);
	assert_non_null(x);
	assert_int_equal(X509_check_private_key(x, key), 1);
	struct certs_identity id;
	assert_int_equal(certs_x509_identity(x, &id), 0);
	assert_string_equal(id.cn, "system:node:edge-5");
	assert_int_equal(id.num_orgs, 1);
	assert_string_equal(id.orgs[0], "system:nodes");
	assert_int_equal(id.num_dns + id.num_ips, 0);
	assert_int_equal(X509_get_ext_by_NID(x, NID_subject_alt_name, -1), -1);
	assert_true(X509_get_extended_key_usage(x) & XKU_SSL_CLIENT);
	assert_false(X509_get_extended_key_usage(x) & XKU_SSL_SERVER);
	assert_int_equal(X509_check_ca(x), 0);
	int days, secs;
	assert_int_equal(
	        ASN1_TIME_diff(&days, &secs, X509_get0_notBefore(x), X509_get0_notAfter(x)), 1);
	assert_int_equal(days, 0);
	assert_int_equal(secs, 132); /* 120 s + 12 s backdated */
	X509_free(x);
	assert_int_equal(certs_write_key(path("born-here.key"), key, err, sizeof err), 0);
	struct stat st;
	assert_int_equal(stat(path("born-here.key"), &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	EVP_PKEY_free(key);
	/* the wrong key for the CA, a bad lifetime, a bad request */
	assert_int_equal(certs_sign_csr(path("ca.crt"), path("other-ca.key"), csr, csr_len, "x",
	                                NULL, 0, 60, pem, sizeof pem, &pem_len, err, sizeof err),
	                 -EINVAL);
	assert_int_equal(certs_sign_csr(path("ca.crt"), path("ca.key"), csr, csr_len, "x", NULL, 0,
	                                0, pem, sizeof pem, &pem_len, err, sizeof err),
	                 -EINVAL);
	assert_int_equal(certs_sign_csr(path("ca.crt"), path("ca.key"), "junk", 4, "x", NULL, 0, 60,
	                                pem, sizeof pem, &pem_len, err, sizeof err),
	                 -EBADMSG);
	assert_int_equal(certs_sign_csr(path("ca.crt"), path("ca.key"), csr, csr_len, "x", NULL, 0,
	                                60, pem, 100, &pem_len, err, sizeof err),
	                 -EMSGSIZE);
}

/* kubeadm's pin: sha256 of the DER SubjectPublicKeyInfo. */
static void test_spki_pin(void **state)
{
	(void)state;
	X509 *ca;
	char err[512], pin[CERTS_PIN_TEXT_BYTES], other[CERTS_PIN_TEXT_BYTES];
	assert_int_equal(certs_load(path("ca.crt"), &ca, err, sizeof err), 0);
	assert_int_equal(certs_spki_pin(ca, pin, sizeof pin), 0);
	unsigned char *der = NULL, md[32];
	int n = i2d_PUBKEY(X509_get0_pubkey(ca), &der);
	assert_true(n > 0);
	unsigned mdlen;
	assert_int_equal(EVP_Digest(der, (size_t)n, md, &mdlen, EVP_sha256(), NULL), 1);
	OPENSSL_free(der);
	char want[CERTS_PIN_TEXT_BYTES] = "sha256:";
	for (int i = 0; i < 32; i++)
		snprintf(want + 7 + 2 * i, 3, "%02x", md[i]);
	assert_string_equal(pin, want);
	assert_int_equal(certs_spki_pin(ca, other, 10), -EMSGSIZE);
	X509_free(ca);
	assert_true(certs_pin_valid(pin));
	for (char *c = want + 7; *c; c++)
		if (*c >= 'a' && *c <= 'f')
			*c = (char)(*c - 'a' + 'A');
	assert_true(certs_pin_equal(pin, want));
	want[10] = want[10] == '0' ? '1' : '0';
	assert_false(certs_pin_equal(pin, want));
	assert_false(certs_pin_valid("sha256:abc"));
	assert_false(certs_pin_valid(
	        "sha1:0000000000000000000000000000000000000000000000000000000000000000"));
	assert_false(certs_pin_valid(NULL));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_ca_properties),
	        cmocka_unit_test(test_server_leaf_exact),
	        cmocka_unit_test(test_node_client_and_rsa),
	        cmocka_unit_test(test_node_names),
	        cmocka_unit_test(test_identity_limits),
	        cmocka_unit_test(test_certs_identity_listed__entries),
	        cmocka_unit_test(test_certs_ssl_peer_identity__no_certificate),
	        cmocka_unit_test(test_sign_csr_exact),
	        cmocka_unit_test(test_spki_pin),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
