/*
 * cloudstream/src/peer_accept.c — the links other replicas dial to us (peer_int.h), on the
 * tunnel port at CS_PEER_PATH: the peer CA added to the port's trust, admission (a certificate
 * from --peer-ca alone with CN --peer-subject, an offer with the peer capability and a replica
 * id; a refusal is answered by tunnel.c as an edge's), our echo, and each admitted link as a
 * tunnel of the peer-link kind (tunnel.h cs_tunnel_link_new) with the replica's directory slot.
 * On it this replica is the cloud role: the other's node list arrives there (peer_directory.c)
 * and streams for its nodes are opened there (peer_forward.c). A newer link from the same
 * replica replaces the older. lws glue. Loop thread only.
 */
#include "peer_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/x509_vfy.h>

#include <stream/ext.h>
#include <stream/log.h>

/* ---- certificates ------------------------------------------------------------------------- */

void cs_peer_trust_ca(struct cs_server *srv, void *ssl_ctx)
{
	const char *ca = srv->cfg.peer_ca;
	if (srv->peers == NULL || ca == NULL || ssl_ctx == NULL)
		return;
	if (X509_STORE_load_locations(SSL_CTX_get_cert_store(ssl_ctx), ca, NULL) != 1) {
		ERR_clear_error();
		st_err("--peer-ca %s: not added to the tunnel port's trust", ca);
	}
}

/* Does the peer's certificate chain to --peer-ca alone? */
static bool chains_to_peer_ca(struct cs_server *srv, struct lws *wsi)
{
	struct cs_peers *p = peers_of(srv);
	SSL *ssl = lws_get_ssl(wsi);
	if (p == NULL || ssl == NULL)
		return false;
	X509 *x = SSL_get_peer_certificate(ssl);
	if (x == NULL)
		return false;
	STACK_OF(X509) *chain = SSL_get_peer_cert_chain(ssl);
	X509_STORE_CTX *ctx = X509_STORE_CTX_new();
	bool ok = ctx && X509_STORE_CTX_init(ctx, p->peer_store, x, chain) == 1 &&
	          X509_verify_cert(ctx) == 1;
	X509_STORE_CTX_free(ctx);
	X509_free(x);
	ERR_clear_error();
	return ok;
}

bool cs_peer_cert_is_peer(struct cs_server *srv, struct lws *wsi)
{
	return srv->peers != NULL && chains_to_peer_ca(srv, wsi);
}

/* The CN of the verified client certificate is --peer-subject. */
static bool peer_subject_ok(struct cs_server *srv, struct lws *wsi, char *cn, size_t cap)
{
	cn[0] = '\0';
	SSL *ssl = lws_get_ssl(wsi);
	X509 *x = ssl ? SSL_get_peer_certificate(ssl) : NULL;
	if (x == NULL)
		return false;
	X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, cn, (int)cap);
	X509_free(x);
	return strcmp(cn, srv->cfg.peer_subject ? srv->cfg.peer_subject : "") == 0;
}

/* ---- admission and our echo --------------------------------------------------------------- */

bool cs_peer_is_peer_upgrade(struct lws *wsi)
{
	char uri[64];
	return lws_hdr_copy(wsi, uri, sizeof uri, WSI_TOKEN_GET_URI) > 0 &&
	       strcmp(uri, CS_PEER_PATH) == 0;
}

/* Admission of a peer link: 0, or the HTTP status to refuse with (and why). */
static int in_admit(struct lws *wsi, struct cs_server *srv, struct st_ext_offer *offer, char *why,
                    size_t cap)
{
	char cn[128];
	char v[ST_EXT_HEADER_MAX_BYTES + 1];
	if (srv->peers == NULL) {
		snprintf(why, cap, "this cloudstream has no peers (--peers)");
		return 404;
	}
	if (!chains_to_peer_ca(srv, wsi)) {
		snprintf(why, cap, "the client certificate is not from --peer-ca");
		return 403;
	}
	if (!peer_subject_ok(srv, wsi, cn, sizeof cn)) {
		snprintf(why, cap, "peer certificate CN \"%.60s\" is not --peer-subject", cn);
		return 403;
	}
	int n = lws_hdr_custom_copy(wsi, v, sizeof v, ST_EXT_HEADER_LWS,
	                            (int)strlen(ST_EXT_HEADER_LWS));
	if (n <= 0 || st_ext_offer_parse(v, (size_t)n, offer) < 0 || !(offer->caps & ST_CAP_PEER) ||
	    !(offer->caps & ST_CAP_FLOW) || offer->replica_id[0] == '\0') {
		snprintf(why, cap, "a peer link offers the peer capability and a replica id");
		return 400;
	}
	return 0;
}

static void agreed(struct cs_server *srv, const struct st_ext_offer *theirs,
                   struct st_ext_offer *out)
{
	struct st_ext_offer ours = {.version = ST_EXT_VERSION,
	                            .caps = srv->our_caps | ST_CAP_PEER,
	                            .window_bytes = (uint32_t)cs_tunnel_first_window(srv)};
	snprintf(ours.replica_id, sizeof ours.replica_id, "%s", srv->replica);
	st_ext_negotiate(&ours, theirs, out);
}

int cs_peer_link_admit(struct lws *wsi, struct cs_server *srv, char *why, size_t cap)
{
	struct st_ext_offer offer;
	return in_admit(wsi, srv, &offer, why, cap);
}

int cs_peer_in_headers(struct lws *wsi, struct cs_server *srv, void *in)
{
	struct st_ext_offer offer, ag;
	char why[200];
	if (in_admit(wsi, srv, &offer, why, sizeof why) != 0)
		return 0;
	agreed(srv, &offer, &ag);
	char v[ST_EXT_HEADER_MAX_BYTES];
	ssize_t n = st_ext_offer_format(v, sizeof v, &ag);
	struct lws_process_html_args *args = in;
	if (n > 0 && lws_add_http_header_by_name(wsi, (const unsigned char *)ST_EXT_HEADER ":",
	                                         (const unsigned char *)v, (int)n,
	                                         (unsigned char **)&args->p,
	                                         (unsigned char *)args->p + args->max_len))
		return 1;
	return 0;
}

/* ---- the accepted link: a tunnel of the peer-link kind ---------------------------------------- */

static void link_closed(void *user);

/* What the tunnel module tells us of an accepted link (tunnel.h). */
static const struct cs_tunnel_link_ops accepted_link_ops = {
        .dir_msg = cs__peer_dir_msg,
        .closed = link_closed,
};

/* A link another replica dialled: the cloud-role side, a tunnel streams open on. */
int cs_peer_in_established(struct lws *wsi, struct cs_server *srv, struct cs_tunnel **slot)
{
	struct cs_peers *p = peers_of(srv);
	struct st_ext_offer offer, ag;
	char why[200];
	if (p == NULL || p->dir == NULL || in_admit(wsi, srv, &offer, why, sizeof why) != 0)
		return -1;
	if (strcmp(offer.replica_id, srv->replica) == 0)
		return -1; /* ourselves: the dialler saw our echo and stops dialling this address */
	agreed(srv, &offer, &ag);
	int pslot = cs_peerdir_peer_add(p->dir, offer.replica_id);
	if (pslot < 0) {
		st_err("peers: more than %d peers: %s refused", CS_PEERDIR_MAX_PEERS,
		       offer.replica_id);
		return -1;
	}
	struct accepted_link *a = calloc(1, sizeof *a);
	if (a == NULL)
		return -1;
	a->p = p;
	a->slot = pslot;
	if (cs_tunnel_link_new(&a->t, srv, wsi, offer.replica_id, ag.caps, offer.window_bytes,
	                       &accepted_link_ops, a) < 0) {
		free(a);
		return -1;
	}
	struct accepted_link *old = p->slot_owner[pslot];
	if (old != NULL) {
		/* The same replica again (it redialled before we saw the old link go): the new
		 * link's resync replaces what the old one said. */
		st_warn("peers: a new link from %s replaces the old one", offer.replica_id);
		cs_tunnel_link_drop(old->t,
		                    "the link to the replica holding the node was replaced");
	}
	p->slot_owner[pslot] = a;
	a->next = p->acc;
	if (p->acc)
		p->acc->prev = a;
	p->acc = a;
	*slot = a->t;
	char peer[64] = "";
	lws_get_peer_simple(wsi, peer, sizeof peer);
	st_info("peers: link from %s (%s) accepted", offer.replica_id, peer);
	return 0;
}

/* The tunnel module's CLOSED for an accepted link, once its streams ended: the replica's nodes
 * are forgotten with it (unless a newer link from it took over). */
static void link_closed(void *user)
{
	struct accepted_link *a = user;
	struct cs_peers *p = a->p;
	struct cs_server *srv = p->srv;
	if (a->prev)
		a->prev->next = a->next;
	else
		p->acc = a->next;
	if (a->next)
		a->next->prev = a->prev;
	if (p->slot_owner[a->slot] == a) {
		p->slot_owner[a->slot] = NULL;
		size_t gone = cs_peerdir_peer_drop(p->dir, a->slot, &cs__peer_dir_cbs, srv);
		p->links_lost++;
		st_warn("peers: link from %s lost: its %zu nodes forgotten", cs_tunnel_node(a->t),
		        gone);
	}
	cs_tunnel_link_free(a->t);
	free(a);
}
