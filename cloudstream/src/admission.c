/*
 * cloudstream/src/admission.c — who may open a tunnel, decided before the 101
 * (LWS_CALLBACK_HTTP_CONFIRM_UPGRADE) so a refusal is a real HTTP answer with the reason: the
 * node name comes from the verified client certificate; the certificate's serial or the node on
 * the deny list, or a Node deleted under --node-watch, is refused; a SessionHostNameOverride that
 * is not exactly that name is refused; a SessionInternalIP is taken by the policy and the IP
 * ownership rules (registry.h). Loop thread only; the inputs (the handshake, the headers, the
 * registry, the deny list) do not change between the three calls lws makes us answer.
 */
#include "tunnel_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/bn.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <stream/err.h>
#include <stream/log.h>
#include <stream/status.h>

#include "denylist.h"
#include "identity.h"
#include "peer.h"

/* A custom request header (lower case with colon, as lws stores them) into @out; length or -1. */
static int header_copy(struct lws *wsi, const char *name, char *out, size_t cap)
{
	int n = lws_hdr_custom_copy(wsi, out, (int)cap, name, (int)strlen(name));
	if (n < 0)
		out[0] = '\0';
	return n;
}

/* The certificate's serial in hex ("" when unreadable). */
static void cert_serial(X509 *x, char *out, size_t cap)
{
	out[0] = '\0';
	BIGNUM *bn = ASN1_INTEGER_to_BN(X509_get_serialNumber(x), NULL);
	char *hex = bn ? BN_bn2hex(bn) : NULL;
	if (hex && strlen(hex) < cap)
		snprintf(out, cap, "%s", hex);
	OPENSSL_free(hex);
	BN_free(bn);
}

#define REFUSE(a, st, why, ...)                                                                    \
	do {                                                                                       \
		(a)->status = (st);                                                                \
		(a)->reason = (why);                                                               \
		snprintf((a)->detail, sizeof(a)->detail, __VA_ARGS__);                             \
	} while (0)

/* SessionHostNameOverride: absent or empty, or exactly the certificate's node. Oversized,
 * invalid (a comma is what a proxy makes of the header sent twice) or another node's: refused. */
static void admit_name_override(struct lws *wsi, struct cs_admission *a)
{
	static const char name[] = "sessionhostnameoverride:";
	int len = lws_hdr_custom_length(wsi, name, (int)sizeof name - 1);
	if (len <= 0)
		return;
	if (len > CS_NODE_NAME_MAX_BYTES) {
		REFUSE(a, 403, CS_REFUSE_NAME_OVERRIDE,
		       "SessionHostNameOverride of %d bytes is not a node name (at most %d)", len,
		       CS_NODE_NAME_MAX_BYTES);
		return;
	}
	char hdr[CS_NODE_NAME_MAX_BYTES + 2];
	int n = header_copy(wsi, name, hdr, sizeof hdr);
	if (n <= 0 || !cs_node_name_valid(hdr, (size_t)n)) {
		REFUSE(a, 403, CS_REFUSE_NAME_OVERRIDE,
		       "SessionHostNameOverride \"%.100s\" is not one node name (DNS-1123 "
		       "subdomain; "
		       "was the header sent twice?)",
		       n > 0 ? hdr : "");
		return;
	}
	if (strcmp(hdr, a->node) != 0)
		REFUSE(a, 403, CS_REFUSE_NAME_OVERRIDE,
		       "SessionHostNameOverride \"%.100s\" differs from the certificate's node "
		       "\"%s\"",
		       hdr, a->node);
}

/* The node's IPs: the certificate's are verified; SessionInternalIP by the policy. */
static void admit_ips(struct lws *wsi, struct cs_server *srv, struct cs_admission *a)
{
	for (size_t i = 0; i < a->id.num_ips && a->n_ips < CS_REGISTRY_MAX_IPS; i++) {
		a->claims[a->n_ips] = CS_IP_CLAIM_VERIFIED;
		a->ips[a->n_ips++] = a->id.ips[i];
	}
	int policy = srv->cfg.internal_ip_policy;
	if (header_copy(wsi, "sessioninternalip:", a->header_ip, sizeof a->header_ip) <= 0 ||
	    policy == CS_IP_POLICY_IGNORE || certs_identity_has_ip(&a->id, a->header_ip))
		return;
	if (policy == CS_IP_POLICY_CERT) {
		REFUSE(a, 403, CS_REFUSE_INTERNAL_IP,
		       "SessionInternalIP %.46s is not an IP of the node's certificate",
		       a->header_ip);
		return;
	}
	int listed = policy == CS_IP_POLICY_NODE_ADDRESS
	                     ? cs_identity_node_has_ip(srv, a->node, a->header_ip)
	                     : 0;
	enum cs_ip_claim claim = listed == 1 ? CS_IP_CLAIM_VERIFIED : CS_IP_CLAIM_HEADER;
	const char *holder = NULL;
	if (cs_registry_ip_check(srv->reg, a->node, strlen(a->node), a->header_ip, claim,
	                         &holder) == CS_IP_REFUSE) {
		/* Never displace another node's verified IP on the word of a header. */
		REFUSE(a, 403, CS_REFUSE_IP_CONFLICT,
		       "SessionInternalIP %.46s is the verified IP of connected node %.100s%s%s",
		       a->header_ip, holder ? holder : "?",
		       policy != CS_IP_POLICY_NODE_ADDRESS ? ""
		       : listed == 0 ? "; the Node object does not list it in status.addresses"
		                     : "; asking the apiserver whether the Node object lists it, "
		                       "retry",
		       "");
		if (policy == CS_IP_POLICY_NODE_ADDRESS && listed < 0)
			cs_identity_verify_ip(srv, a->node, 0, a->header_ip); /* for the retry */
		return;
	}
	if (policy == CS_IP_POLICY_TRUST_HEADER || listed == 1) {
		a->claims[a->n_ips] = claim;
		a->ips[a->n_ips++] = a->header_ip;
	} else if (policy == CS_IP_POLICY_NODE_ADDRESS && listed != 0) {
		a->verify_header_ip = true; /* routed by it once the Node object confirms it */
	}
}

void cs__tunnel_admit_cert(struct lws *wsi, struct cs_server *srv, struct cs_admission *a)
{
	SSL *ssl = lws_get_ssl(wsi);
	X509 *x = ssl ? SSL_get_peer_certificate(ssl) : NULL;
	if (x == NULL || SSL_get_verify_result(ssl) != X509_V_OK) {
		/* lws requires a verified certificate unless --join-tokens made it optional:
		 * here it is required either way. */
		X509_free(x);
		REFUSE(a, 403, CS_REFUSE_CERT,
		       "a client certificate from the tunnel CA is required");
		return;
	}
	if (cs_peer_cert_is_peer(srv, wsi)) {
		/* The tunnel port trusts --peer-ca for peer links only: never as a node. */
		X509_free(x);
		REFUSE(a, 403, CS_REFUSE_CERT,
		       "a peer certificate (--peer-ca) is not an edge node's: peer links use %s",
		       CS_PEER_PATH);
		return;
	}
	int rc = certs_x509_identity(x, &a->id);
	cert_serial(x, a->serial, sizeof a->serial);
	X509_free(x);
	if (rc < 0) {
		REFUSE(a, 403, CS_REFUSE_CERT, "client certificate identity unreadable: %s",
		       st_strerror(rc));
		return;
	}
	enum certs_cn_mode mode =
	        srv->cfg.node_name_from == ST_NODE_NAME_FROM_CN ? CERTS_CN_PLAIN : CERTS_CN_NODE;
	if (certs_node_name_from_cn(a->id.cn, mode, a->node, sizeof a->node) < 0) {
		REFUSE(a, 403, CS_REFUSE_CERT,
		       "certificate CN \"%.80s\" does not name a node (%s expected)", a->id.cn,
		       mode == CERTS_CN_NODE ? "system:node:<name>" : "a DNS-1123 node name");
		return;
	}
	const char *denied = cs_identity_denied(srv, a->node, a->serial);
	if (denied) {
		REFUSE(a, 403, CS_REFUSE_DENIED, "node %s (certificate serial %s) %s", a->node,
		       a->serial[0] ? a->serial : "?", denied);
		return;
	}
	if (cs_nodewatch_deleted(srv, a->node)) {
		REFUSE(a, 403, CS_REFUSE_NODE_DELETED,
		       "node %s: its Node object was deleted; refused until it exists again",
		       a->node);
		return;
	}
}

void cs__tunnel_admit(struct lws *wsi, struct cs_server *srv, struct cs_admission *a)
{
	memset(a, 0, sizeof *a);
	char path[128];
	if (lws_hdr_copy(wsi, path, sizeof path, WSI_TOKEN_GET_URI) < 0)
		path[0] = '\0';
	if (strcmp(path, CS_TUNNEL_PATH) != 0 && strcmp(path, CS_TUNNEL_PATH "/") != 0) {
		REFUSE(a, 404, CS_REFUSE_PATH, "no tunnel at this path; edges dial %s",
		       CS_TUNNEL_PATH);
		return;
	}
	cs__tunnel_admit_cert(wsi, srv, a);
	if (a->status != 0)
		return;
	admit_name_override(wsi, a);
	if (a->status == 0)
		admit_ips(wsi, srv, a);
	if (a->status != 0)
		return;
	if (srv->draining) {
		REFUSE(a, 503, CS_REFUSE_DRAINING, "cloudstream is shutting down");
		return;
	}
	if (srv->tun.n >= srv->cfg.max_sessions &&
	    cs_registry_get(srv->reg, a->node, strlen(a->node)) == NULL) {
		REFUSE(a, 503, CS_REFUSE_LIMIT, "session limit reached (%zu)", srv->tun.n);
		return;
	}
	char offer[ST_EXT_HEADER_MAX_BYTES + 1];
	int n = header_copy(wsi, ST_EXT_HEADER_LWS, offer, sizeof offer);
	if (n > 0 && st_ext_offer_parse(offer, (size_t)n, &a->offer) == 0)
		a->has_offer = true; /* a malformed offer means the base protocol, not a refusal */
}

int cs__tunnel_refuse(struct lws *wsi, struct cs_server *srv, const struct cs_admission *a)
{
	srv->m.sessions_rejected++;
	srv->m.tunnel_refusals[a->reason]++;
	char peer[64] = "";
	lws_get_peer_simple(wsi, peer, sizeof peer);
	st_log(ST_LOG_WARN, a->node[0] ? a->node : NULL, 0, "tunnel from %s refused (%d, %s): %s",
	       peer, a->status, cs_refusal_name(a->reason), a->detail);
	if (a->reason == CS_REFUSE_DRAINING && a->node[0])
		cs_tunnel_move_refused(srv, a->node); /* the balancer sent a moving edge back */
	/* On the Node, when it is known: a rollout's draining refusals are no news. */
	if (a->reason != CS_REFUSE_DRAINING && a->reason != CS_REFUSE_PATH)
		cs_node_event(srv, a->node, CS_EVENT_TUNNEL_REFUSED,
		              "cloudstream %s refused the edge's tunnel from %s (%s): %s",
		              srv->replica, peer, cs_refusal_name(a->reason), a->detail);
	uint8_t buf[LWS_PRE + 1024];
	uint8_t *start = buf + LWS_PRE;
	char body[320], reason[240];
	int blen = snprintf(body, sizeof body, "%s\n", a->detail);
	/* The reason again in a header: lws 4.1.6 gives a failed client the headers of the
	 * answer, never its body, so this is how our edges can say why (KubeEdge's ignore it). */
	snprintf(reason, sizeof reason, "%s: %.200s", cs_refusal_name(a->reason), a->detail);
	for (char *c = reason; *c; c++)
		if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e)
			*c = ' ';
	int n = snprintf(
	        (char *)start, sizeof buf - LWS_PRE,
	        "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n" ST_REFUSAL_HEADER
	        ": %s\r\n"
	        "Content-Length: %d\r\nConnection: close\r\n\r\n%s",
	        a->status, st_http_reason_phrase(a->status), reason, blen, body);
	if (n > 0 && (size_t)n < sizeof buf - LWS_PRE)
		lws_write(wsi, start, (size_t)n, LWS_WRITE_HTTP_FINAL);
	return 1;
}
