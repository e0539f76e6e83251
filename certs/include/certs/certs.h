/*
 * certs/certs.h — certificate authorities and certificates for the tunnel, with the OpenSSL API.
 *
 * Creates CAs (ECDSA P-256 by default, RSA on request), issues server certificates (DNS and IP
 * SANs) and client certificates (node identity CN=system:node:<name>, O=system:nodes; the
 * apiserver's CN=kube-apiserver-kubelet-client), verifies certificates against a CA, and reads
 * the identity (CN, O, SANs) the daemons authorise on.
 *
 * Errors: 0 or a negative errno; functions that can fail for OpenSSL reasons also fill @err
 * (may be NULL) with one line, OpenSSL's error queue drained into it, for the caller to log. The
 * library itself logs nothing. Keys are written 0600 (created that way, never chmod'ed later),
 * certificates 0644, both atomically (temporary file + rename).
 *
 * Thread-safety: every function may run on any thread; nothing global is kept. Signing and key
 * generation take milliseconds (RSA: longer): run them on a worker, not on an event loop.
 */
#ifndef CERTS_CERTS_H
#define CERTS_CERTS_H

#include <stdbool.h>
#include <stddef.h>

#include <openssl/evp.h>
#include <openssl/x509.h>

#define CERTS_MAX_ORGS       8
#define CERTS_MAX_SANS       32
#define CERTS_MAX_NAME_BYTES 253 /* a DNS name; also caps CN and O values we keep */
#define CERTS_IP_TEXT_BYTES  46  /* INET6_ADDRSTRLEN */

enum certs_key_type {
	CERTS_KEY_EC_P256 = 0, /* default: small, fast, what TLS-1.2-only Go peers need */
	CERTS_KEY_RSA = 1,
};

/* What a leaf certificate is for (extendedKeyUsage). */
enum certs_usage {
	CERTS_USAGE_SERVER = 1u << 0,
	CERTS_USAGE_CLIENT = 1u << 1,
};

struct certs_key_opts {
	enum certs_key_type type;
	unsigned rsa_bits; /* 2048, 3072 or 4096; 0 = 2048 */
};

/* A leaf certificate to issue. Arrays may be NULL when their count is 0. */
struct certs_leaf_opts {
	struct certs_key_opts key;
	const char *cn;          /* required */
	const char *const *orgs; /* subject O values */
	size_t num_orgs;
	const char *const *dns; /* DNS SANs */
	size_t num_dns;
	const char *const *ips; /* IP SANs, IPv4 or IPv6 text */
	size_t num_ips;
	unsigned usage; /* enum certs_usage bits, at least one */
	int days;       /* validity from now, >= 1 (0: already expired, for tests) */
};

/* Write mode for the output files. */
enum certs_write {
	CERTS_WRITE_NEW = 0, /* refuse (-EEXIST) when the key or certificate exists */
	CERTS_WRITE_OVERWRITE = 1,
};

/*
 * certs_create_ca() - a self-signed CA: basicConstraints critical CA:TRUE, keyUsage
 * keyCertSign+cRLSign, subject key id. Writes @cert_path (0644) and @key_path (0600).
 * Returns 0, -EINVAL (bad options), -EEXIST, -errno for files, -EPROTO for OpenSSL failures.
 */
int certs_create_ca(const char *cert_path, const char *key_path, const char *cn,
                    const struct certs_key_opts *key, int days, enum certs_write mode, char *err,
                    size_t errlen);

/*
 * certs_issue() - issue a leaf signed by the CA in @ca_cert_path/@ca_key_path: subject CN and
 * O values, exactly the DNS and IP SANs given, keyUsage digitalSignature (+keyEncipherment for
 * RSA), the extendedKeyUsage asked, a random 128-bit serial, notBefore 5 minutes in the past
 * for clock skew. Returns as certs_create_ca().
 */
int certs_issue(const char *ca_cert_path, const char *ca_key_path, const char *cert_path,
                const char *key_path, const struct certs_leaf_opts *opts, enum certs_write mode,
                char *err, size_t errlen);

/*
 * certs_verify() - does @cert_path chain to the CA in @ca_path, is it valid now, does it allow
 * @usage (one of enum certs_usage, or 0 for any), and does it name @name (a DNS name or an IP
 * literal; NULL: no name check)? Returns 0, -EACCES with the reason in @err, or -errno.
 */
int certs_verify(const char *ca_path, const char *cert_path, unsigned usage, const char *name,
                 char *err, size_t errlen);

/* certs_load() - read the first certificate of a PEM file. *out is the caller's (X509_free).
 * Returns 0, -errno, or -EBADMSG. */
int certs_load(const char *path, X509 **out, char *err, size_t errlen);

/* certs_check_cert() - can @path be read as a PEM certificate now? Daemons check their files at
 * start so a typo fails with the path in the message. 0, -EINVAL (no path), -errno, -EBADMSG. */
int certs_check_cert(const char *path, char *err, size_t errlen);

/* certs_check_pair() - the same, and the PEM private key in @key_path matches the certificate.
 * 0, -EINVAL (no path, or the key is not the certificate's), -errno, -EBADMSG. */
int certs_check_pair(const char *cert_path, const char *key_path, char *err, size_t errlen);

/* ---- identity ------------------------------------------------------------------------------ */

/* What the daemons authorise on, copied out of a certificate (bounded). */
struct certs_identity {
	char cn[CERTS_MAX_NAME_BYTES + 1];
	char orgs[CERTS_MAX_ORGS][CERTS_MAX_NAME_BYTES + 1];
	size_t num_orgs;
	char dns[CERTS_MAX_SANS][CERTS_MAX_NAME_BYTES + 1];
	size_t num_dns;
	char ips[CERTS_MAX_SANS][CERTS_IP_TEXT_BYTES]; /* canonical text (inet_ntop) */
	size_t num_ips;
};

/*
 * certs_x509_identity() - read CN, O values, DNS and IP SANs from @x.
 * Returns 0; -EMSGSIZE when a value or a count exceeds the limits above (refuse rather than
 * cut: a truncated name could match another node); -EBADMSG for a CN or O that is not a clean
 * string (embedded NUL, more than one CN).
 */
int certs_x509_identity(X509 *x, struct certs_identity *id);

/*
 * certs_ssl_peer_identity() - certs_x509_identity() of the certificate the peer of @ssl (after
 * its handshake; borrowed) presented, once OpenSSL verified it. Returns 0; -ENOENT when the peer
 * presented none; -EACCES when it did not verify; certs_x509_identity()'s errors.
 */
int certs_ssl_peer_identity(const SSL *ssl, struct certs_identity *id);

/* certs_identity_has_ip() - does one of the IP SANs equal @ip (any text form)? */
bool certs_identity_has_ip(const struct certs_identity *id, const char *ip);

/*
 * certs_identity_listed() - does @id match one of the @n entries of @allow (borrowed)? An entry
 * "O=<org>" matches one of its O values, "CN=<name>" or a bare "<name>" its CN; every
 * comparison is exact. An empty list matches nothing (the caller decides what no list means).
 */
bool certs_identity_listed(const struct certs_identity *id, char *const *allow, size_t n);

/* How a node name is taken from a client certificate's CN. */
enum certs_cn_mode {
	CERTS_CN_NODE = 0,  /* "system:node:<name>" required (Kubernetes node credentials) */
	CERTS_CN_PLAIN = 1, /* the CN itself is the node name */
};

/*
 * certs_node_name_from_cn() - the node name in @cn, checked to be a valid Kubernetes node name
 * (a DNS-1123 subdomain: lower-case alphanumerics, '-' and '.', at most 253 bytes, starting and
 * ending alphanumeric). Writes it NUL-terminated to @out. Returns 0, -EACCES (no
 * "system:node:" prefix in node mode, or an invalid name), or -EMSGSIZE (@cap too small).
 */
int certs_node_name_from_cn(const char *cn, enum certs_cn_mode mode, char *out, size_t cap);

/* certs_valid_node_name() - is @name a DNS-1123 subdomain? */
bool certs_valid_node_name(const char *name, size_t len);

/* ---- keys born on the node, signing requests, CA pins (bootstrap and rotation) --------------- */

#define CERTS_MAX_CSR_BYTES  8192u  /* a PEM CSR we sign: EC or RSA-4096, a few names */
#define CERTS_MAX_CERT_BYTES 16384u /* a PEM certificate we hand out */
#define CERTS_PIN_TEXT_BYTES 72u    /* "sha256:" + 64 hex + NUL */

/*
 * certs_csr_new() - a fresh EC P-256 key (*@key_out, the caller's: EVP_PKEY_free; it never
 * leaves memory unless the caller writes it with certs_write_key) and a PKCS#10 request for it,
 * subject CN=@cn and O=@orgs, no extensions, signed with that key (proof of possession), as PEM
 * into @csr (@cap bytes; *@csr_len without the NUL). Returns 0, -EINVAL (no CN, too many O),
 * -EMSGSIZE (@cap too small), -EPROTO (OpenSSL).
 */
int certs_csr_new(EVP_PKEY **key_out, const char *cn, const char *const *orgs, size_t num_orgs,
                  char *csr, size_t cap, size_t *csr_len, char *err, size_t errlen);

/* certs_write_key() - @key as PEM to @path, 0600 from creation, atomically (replaces the
 * file); the PEM bytes are wiped from memory afterwards. 0 or -errno/-EPROTO. */
int certs_write_key(const char *path, EVP_PKEY *key, char *err, size_t errlen);

/* certs_write_file() - @len bytes to @path with @mode (0644 for certificates), atomically
 * (temporary file, fsync, rename), replacing it. 0 or -errno. */
int certs_write_file(const char *path, const void *data, size_t len, unsigned mode);

/* What a signing request asks for, read by certs_csr_read(). */
struct certs_csr_info {
	char cn[CERTS_MAX_NAME_BYTES + 1];
	char orgs[CERTS_MAX_ORGS][CERTS_MAX_NAME_BYTES + 1];
	size_t num_orgs;
	bool has_extensions; /* it asks for extensions (SANs, usages): we never grant them */
	int key_bits;        /* of its public key */
};

/*
 * certs_csr_read() - parse @len bytes holding exactly one PEM "CERTIFICATE REQUEST" (nothing
 * else but whitespace), check its signature with its own key (the requester holds the key),
 * and copy out its subject. Pure (no I/O; treats the bytes as hostile). Returns 0; -EMSGSIZE
 * over CERTS_MAX_CSR_BYTES or a name over the limits; -EBADMSG not one PEM CSR, a bad
 * signature, a subject that is not clean strings (two CNs, a NUL), or a weak key (EC under
 * 256 bits, RSA under 2048).
 */
int certs_csr_read(const char *pem, size_t len, struct certs_csr_info *out);

/*
 * certs_sign_csr() - a client certificate (extendedKeyUsage clientAuth, keyUsage
 * digitalSignature, CA:FALSE, a random 128-bit serial) for the public key of the PEM request
 * @csr (checked by certs_csr_read first), with the subject CN=@cn, O=@orgs chosen by the
 * caller (never copied from the request) and no SANs, valid @lifetime_s seconds from now
 * (backdated by a tenth of the lifetime, at most 5 minutes, for clock skew), signed by the CA
 * in @ca_cert_path/@ca_key_path. PEM into @out (@cap, *@out_len). Returns 0, -EINVAL (bad
 * arguments, a CA key that is not the CA's), -EBADMSG (the request), -EMSGSIZE, -errno for the
 * CA files, -EPROTO.
 */
int certs_sign_csr(const char *ca_cert_path, const char *ca_key_path, const char *csr,
                   size_t csr_len, const char *cn, const char *const *orgs, size_t num_orgs,
                   long lifetime_s, char *out, size_t cap, size_t *out_len, char *err,
                   size_t errlen);

/*
 * certs_spki_pin() - the pin of @x the way kubeadm's --discovery-token-ca-cert-hash writes it:
 * "sha256:" and the lower-case hex SHA-256 of its DER SubjectPublicKeyInfo, into @out
 * (>= CERTS_PIN_TEXT_BYTES). Returns 0, -EMSGSIZE, -EPROTO.
 */
int certs_spki_pin(X509 *x, char *out, size_t cap);

/* certs_pin_valid() - is @pin "sha256:" followed by 64 hex digits (any case)? */
bool certs_pin_valid(const char *pin);

/* certs_pin_equal() - do two pins name the same hash (hex case ignored)? */
bool certs_pin_equal(const char *a, const char *b);

#endif /* CERTS_CERTS_H */
