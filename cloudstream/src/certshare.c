/*
 * cloudstream/src/certshare.c — shared copies of repeated client certificates (certshare.h).
 *
 * How OpenSSL 3.0 holds a client's certificates (ssl_verify_cert_chain): the stack it parsed is
 * the verification context's untrusted list and its first element the context's certificate;
 * after the callback, the first element becomes the session's peer and the rest its peer
 * chain, and the verified chain is kept too. Swapping an element of that stack (and the
 * context's certificate with it) for an identical one before verifying is therefore seen by
 * all three, through public calls only.
 *
 * Loop thread only.
 */
#include "certshare.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

struct cs_certshare {
	X509 *x[CS_CERTSHARE_SLOTS]; /* one reference each; NULL: empty */
	unsigned next;               /* the slot the next kept certificate takes */
	uint64_t hits;
};

int cs_certshare_new(struct cs_certshare **out)
{
	*out = calloc(1, sizeof **out);
	return *out ? 0 : -ENOMEM;
}

void cs_certshare_free(struct cs_certshare *t)
{
	if (t == NULL)
		return;
	for (unsigned i = 0; i < CS_CERTSHARE_SLOTS; i++)
		X509_free(t->x[i]);
	free(t);
}

uint64_t cs_certshare_hits(const struct cs_certshare *t)
{
	return t ? t->hits : 0;
}

static bool kept(const struct cs_certshare *t, const X509 *x)
{
	for (unsigned i = 0; i < CS_CERTSHARE_SLOTS; i++)
		if (t->x[i] == x)
			return true;
	return false;
}

/* The kept copy of @x's bytes, or NULL. */
static X509 *find(const struct cs_certshare *t, X509 *x)
{
	for (unsigned i = 0; i < CS_CERTSHARE_SLOTS; i++)
		if (t->x[i] && X509_cmp(t->x[i], x) == 0)
			return t->x[i];
	return NULL;
}

static void keep(struct cs_certshare *t, X509 *x)
{
	if (!X509_up_ref(x))
		return;
	X509_free(t->x[t->next]);
	t->x[t->next] = x;
	t->next = (t->next + 1) % CS_CERTSHARE_SLOTS;
}

static int verify_shared(X509_STORE_CTX *ctx, void *arg)
{
	struct cs_certshare *t = arg;
	STACK_OF(X509) *sk = X509_STORE_CTX_get0_untrusted(ctx);
	X509 *leaf = X509_STORE_CTX_get0_cert(ctx);
	for (int i = 0; sk && i < sk_X509_num(sk); i++) {
		X509 *x = sk_X509_value(sk, i);
		if (kept(t, x))
			continue;
		X509 *s = find(t, x);
		if (s == NULL || !X509_up_ref(s))
			continue;
		if (x == leaf) {
			X509_STORE_CTX_set_cert(ctx, s);
			leaf = s;
		}
		(void)sk_X509_set(sk, i, s);
		X509_free(x); /* the stack held the only reference: the parsed copy goes */
		t->hits++;
	}
	int ok = X509_verify_cert(ctx);
	if (ok <= 0 || sk == NULL)
		return ok;
	/* Keep what verified and is not kept yet: the leaf and the intermediates it used. */
	STACK_OF(X509) *chain = X509_STORE_CTX_get0_chain(ctx);
	for (int i = 0; i < sk_X509_num(sk); i++) {
		X509 *x = sk_X509_value(sk, i);
		if (!kept(t, x) && chain && sk_X509_find(chain, x) >= 0)
			keep(t, x);
	}
	return ok;
}

void cs_certshare_install(struct cs_certshare *t, SSL_CTX *ctx)
{
	SSL_CTX_set_cert_verify_callback(ctx, verify_shared, t);
}
