/*
 * cloudstream/src/front_h2_alpn.c — ALPN h2 on the stream port without lws's own HTTP/2 role.
 *
 * lws 4.1.6 turns a raw TLS connection whose ALPN is h2 into its own HTTP/2 role right after
 * the handshake (tls.c lws_tls_server_conn_alpn → rops_alpn_negotiated_h2), and the raw
 * callbacks never come again. Our select callback marks the SSLs it chose h2 for, and
 * SSL_get0_alpn_selected, which lws calls through the dynamic linker, is defined here too:
 * the executable comes first in the global lookup scope, so liblws's call binds to ours as
 * long as the symbol is in the executable's dynamic symbol table (ld puts it there because a
 * shared library in the link, libssl, defines it and liblws references it; -rdynamic is not
 * needed). Ours reports no ALPN for a marked SSL: lws keeps the connection raw, and the client
 * still got h2 in its ServerHello. Every other SSL gets OpenSSL's answer.
 *
 * That binding is checked at start-up (cs__h2_alpn_install): if dlsym(RTLD_DEFAULT) does not
 * find our definition (a static or -Bsymbolic link, a linker that did not export it), lws
 * would take the h2 connections and none of our requests would run, so HTTP/2 is not offered
 * (ERR line; ALPN http/1.1 as with --stream-http2 off). Loop thread only (the callbacks run
 * inside lws's handshake on the loop).
 */
#include "front_h2_int.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include <openssl/ssl.h>

#include <stream/log.h>

static int alpn_idx = -1;

typedef void (*alpn_selected_fn)(const SSL *, const unsigned char **, unsigned int *);
static alpn_selected_fn real_alpn_selected; /* OpenSSL's */

void SSL_get0_alpn_selected(const SSL *ssl, const unsigned char **data, unsigned int *len)
{
	alpn_selected_fn real = real_alpn_selected;
	if (alpn_idx >= 0 && SSL_get_ex_data(ssl, alpn_idx) != NULL) {
		*data = NULL;
		*len = 0;
		return;
	}
	if (real == NULL) /* before cs__h2_alpn_install (a program that never installs it) */
		real = (alpn_selected_fn)dlsym(RTLD_NEXT, "SSL_get0_alpn_selected");
	if (real == NULL) {
		*data = NULL;
		*len = 0;
		return;
	}
	real(ssl, data, len);
}

static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                       const unsigned char *in, unsigned int inlen, void *arg)
{
	static const unsigned char ours[] = "\x02h2\x08http/1.1";
	(void)arg;
	unsigned char *sel = NULL;
	unsigned char sel_len = 0;
	if (SSL_select_next_proto(&sel, &sel_len, ours, sizeof ours - 1, in, inlen) !=
	    OPENSSL_NPN_NEGOTIATED)
		return SSL_TLSEXT_ERR_NOACK; /* neither offered: HTTP/1.1 without ALPN */
	if (sel_len == 2 && memcmp(sel, "h2", 2) == 0)
		SSL_set_ex_data(ssl, alpn_idx, (void *)1);
	*out = sel;
	*outlen = sel_len;
	return SSL_TLSEXT_ERR_OK;
}

bool cs__h2_interposed(void)
{
	/* What liblws's PLT slot resolves to is what the global scope gives first. */
	void *seen = dlsym(RTLD_DEFAULT, "SSL_get0_alpn_selected");
	return seen != NULL && seen == (void *)(uintptr_t)SSL_get0_alpn_selected;
}

int cs__h2_alpn_install(void *ssl_ctx)
{
	if (!cs__h2_interposed()) {
		st_log(ST_LOG_ERROR, NULL, 0,
		       "HTTP/2 is not offered on the stream port (HTTP/1.1 only, as with "
		       "--stream-http2 off): SSL_get0_alpn_selected is not this executable's in "
		       "the dynamic symbol table, so lws would take h2 connections into its own "
		       "HTTP/2 role (cloudstream/README.md, Code: HTTP/2)");
		return -ENOSYS;
	}
	if (alpn_idx < 0)
		alpn_idx = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
	/* resolved at start-up, before the sandbox */
	real_alpn_selected = (alpn_selected_fn)dlsym(RTLD_NEXT, "SSL_get0_alpn_selected");
	if (alpn_idx < 0 || real_alpn_selected == NULL) {
		st_log(ST_LOG_ERROR, NULL, 0,
		       "HTTP/2 is not offered on the stream port: OpenSSL's "
		       "SSL_get0_alpn_selected was not found behind ours");
		return -ENOSYS;
	}
	SSL_CTX_set_alpn_select_cb(ssl_ctx, alpn_select, NULL);
	return 0;
}

bool cs__h2_negotiated(const struct cs_front *f)
{
	SSL *ssl = lws_get_ssl(f->wsi);
	return ssl && alpn_idx >= 0 && SSL_get_ex_data(ssl, alpn_idx) != NULL;
}
