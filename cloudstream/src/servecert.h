/*
 * cloudstream/src/servecert.h — per-node serving certificates on the stream port
 * (--serving-certs ca|csr).
 *
 * kube-apiserver dials a node's IP (through the DNAT) and, with --kubelet-certificate-authority,
 * checks the answering certificate against that IP. One stream certificate cannot name every
 * node, so at each TLS ClientHello the connection's node is found (the DNAT'd original
 * destination, or SNI when the client sent one, looked up in the tunnel registry) and, when a
 * certificate of that node's is cached and covers the address, it replaces the default one for
 * that connection only.
 *
 * Certificates are issued on the worker pool, never on the handshake's path:
 *   - ca:  a key and certificate signed here with --serving-ca-cert/--serving-ca-key;
 *   - csr: a CertificateSigningRequest (signer kubernetes.io/kubelet-serving, subject
 *          CN=system:node:<name>, O=system:nodes, the Node's addresses as SANs), approved by
 *          cloudstream through the approval subresource when its RBAC allows (else the cluster's
 *          approver), then polled until the signer wrote status.certificate.
 * An issue starts when a node's tunnel comes up and when a handshake finds no usable
 * certificate (that handshake gets the default certificate; logged once per node). A cached
 * certificate is renewed at 70-90 % of its lifetime, as the kubelet's certificate manager does;
 * a node without a tunnel by then is forgotten.
 *
 * Loop thread only, except the jobs (servecert_issue.c), which touch only their own job and the
 * read-only configuration and CA.
 */
#ifndef CLOUDSTREAM_SERVECERT_H
#define CLOUDSTREAM_SERVECERT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cs_server;
struct st_text;

enum cs_serving_mode {
	CS_SERVING_OFF = 0, /* the stream certificate for every connection */
	CS_SERVING_CA = 1,  /* signed here with the operator's serving CA */
	CS_SERVING_CSR = 2, /* through the Kubernetes CSR API */
};

/* cs_servecert_new() - start-up, before the vhosts: checks the options and loads the serving
 * CA. 0 (also when off), or -EINVAL/-ENOMEM after logging why (the daemon exits 2). */
int cs_servecert_new(struct cs_server *srv);

/* cs_servecert_free() - NULL-safe; at exit, after the worker pool is gone. */
void cs_servecert_free(struct cs_server *srv);

/* cs_servecert_stop() - before the worker pool goes: cancels the timers. */
void cs_servecert_stop(struct cs_server *srv);

/* cs_servecert_install() - from the stream vhost's SSL_CTX callback: hooks the ClientHello.
 * @ssl_ctx is an SSL_CTX. */
void cs_servecert_install(struct cs_server *srv, void *ssl_ctx);

/* cs_servecert_node_up() - @node's tunnel came up: issue its certificate unless one is cached
 * or on the way. */
void cs_servecert_node_up(struct cs_server *srv, const char *node);

/* cs_servecert_metrics() - cloudstream_serving_cert* lines for /metrics. */
void cs_servecert_metrics(struct st_text *t, const struct cs_server *srv);

#endif /* CLOUDSTREAM_SERVECERT_H */
