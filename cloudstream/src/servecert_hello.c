/*
 * cloudstream/src/servecert_hello.c — the handshake half of per-node serving certificates
 * (servecert.h): OpenSSL's ClientHello callback on the stream port finds the connection's node
 * (SNI, or the DNAT'd original destination looked up in the registry) and hands it the node's
 * cached certificate when that one covers the address, else leaves the default stream
 * certificate and asks servecert.c for an issue.
 *
 * The seam is the handshake's path: this code runs inside a TLS handshake and only reads the
 * cache and starts issues, never waits; the cache, the issue/poll/renew timers and the answers
 * of the worker pool's jobs are servecert.c's (shared types in servecert_int.h).
 *
 * Loop thread only.
 */
#include "servecert.h"

#include <stdio.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/tls1.h>
#include <openssl/x509v3.h>

#include <stream/log.h>

#include "cs.h"
#include "listen.h"
#include "servecert_int.h"

/* a valid certificate that does not cover the address: issued again at most this often */
#define SC_UNCOVERED_GAP_MS (10u * 60u * 1000u)

/* The ClientHello's server_name (a host name), or "". */
static void client_hello_sni(SSL *ssl, char *out, size_t cap)
{
	const unsigned char *p;
	size_t len;
	out[0] = '\0';
	if (!SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_server_name, &p, &len) || len < 5)
		return;
	size_t list = ((size_t)p[0] << 8) | p[1];
	if (list + 2 > len || p[2] != TLSEXT_NAMETYPE_host_name)
		return;
	size_t n = ((size_t)p[3] << 8) | p[4];
	if (n + 5 > len || n == 0 || n >= cap)
		return;
	for (size_t i = 0; i < n; i++) {
		char ch = (char)p[5 + i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '-' || ch == '.'))
			return;
	}
	memcpy(out, p + 5, n);
	out[n] = '\0';
}

static bool usable(const struct cs_sc_entry *e, const char *ip, const char *sni)
{
	if (e->cert == NULL || X509_cmp_time(X509_get0_notAfter(e->cert), NULL) <= 0)
		return false;
	if (ip[0])
		return X509_check_ip_asc(e->cert, ip, 0) == 1;
	return sni[0] == '\0' || X509_check_host(e->cert, sni, 0, 0, NULL) == 1;
}

/* OpenSSL's ClientHello callback, in the handshake (loop thread): pick the node's certificate
 * from the cache, never wait for one. */
static int on_client_hello(SSL *ssl, int *alert, void *arg)
{
	(void)alert;
	struct cs_server *srv = arg;
	struct cs_servecert *sc = srv->sc;
	if (sc == NULL || sc->stopping)
		return SSL_CLIENT_HELLO_SUCCESS;
	char sni[256], ip[INET6_ADDRSTRLEN];
	client_hello_sni(ssl, sni, sizeof sni);
	cs_socket_orig_dst(SSL_get_fd(ssl), ip, sizeof ip);
	const char *node = NULL;
	if (sni[0] && cs_registry_get(srv->reg, sni, strlen(sni)))
		node = sni;
	else if (ip[0])
		cs_registry_get_by_ip(srv->reg, ip, strlen(ip), &node);
	if (node == NULL) {
		if ((ip[0] || sni[0]) && !sc->no_node_logged) {
			sc->no_node_logged = true;
			st_log(ST_LOG_INFO, NULL, 0,
			       "serving certificates: a connection to %s%s%s names no connected "
			       "node: "
			       "the default stream certificate (said once)",
			       ip[0] ? ip : "", ip[0] && sni[0] ? " / " : "", sni);
		}
		sc->handshakes_default++;
		return SSL_CLIENT_HELLO_SUCCESS;
	}
	struct cs_sc_entry *e = cs__sc_entry_get(sc, node);
	if (e && usable(e, ip, sni)) {
		if (SSL_use_certificate(ssl, e->cert) == 1 &&
		    SSL_use_PrivateKey(ssl, e->key) == 1) {
			sc->handshakes_node++;
			return SSL_CLIENT_HELLO_SUCCESS;
		}
		ERR_clear_error(); /* the default certificate stays */
	}
	sc->handshakes_default++;
	if (e == NULL)
		return SSL_CLIENT_HELLO_SUCCESS;
	if (!e->fallback_logged) {
		e->fallback_logged = true;
		st_log(ST_LOG_INFO, e->node, 0,
		       "serving certificate: none yet for %s%s%s: this handshake gets the default "
		       "stream certificate (said once until the node's is in)",
		       ip[0] ? ip : sni, e->busy ? "; on its way" : "",
		       e->cert ? "; the cached one does not cover it" : "");
	}
	if (e->cert && X509_cmp_time(X509_get0_notAfter(e->cert), NULL) > 0) {
		uint64_t now = st_now_ms();
		if (now < e->uncovered_retry_ms)
			return SSL_CLIENT_HELLO_SUCCESS;
		e->uncovered_retry_ms = now + SC_UNCOVERED_GAP_MS;
		e->next_issue_ms = 0;
		cs__sc_issue_start(e, "the cached certificate does not cover the address");
		return SSL_CLIENT_HELLO_SUCCESS;
	}
	cs__sc_issue_start(e, "handshake");
	return SSL_CLIENT_HELLO_SUCCESS;
}

void cs_servecert_install(struct cs_server *srv, void *ssl_ctx)
{
	if (srv->sc)
		SSL_CTX_set_client_hello_cb(ssl_ctx, on_client_hello, srv);
}
