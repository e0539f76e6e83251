/*
 * cloudstream/src/peer.h — links to the other cloudstream replicas (DESIGN D12, issue 13;
 * stream/PROTOCOL.md §7).
 *
 * Every replica dials every other one's tunnel port at CS_PEER_PATH with its peer certificate.
 * On a link it accepted, a replica is the cloud role: it opens streams there for requests whose
 * node the other replica holds, and it learns, from the other's NODE_UP / NODE_DOWN / SYNC
 * messages, which nodes those are (peerdir.h). On the link it dialled it is the edge role: it
 * announces its own nodes, and relays each incoming stream to the node's tunnel as one more
 * stream endpoint (tunnel.h), with the same per-stream credit on both hops.
 *
 * An accepted link is a tunnel of the peer-link kind (tunnel.h: cs_tunnel_link_new), so an
 * endpoint opens a stream on it exactly as on an edge's tunnel (cs_peer_stream_open adds the
 * node name). The module's parts, and what each owns, are listed in peer_int.h.
 *
 * Loop thread only.
 */
#ifndef CLOUDSTREAM_PEER_H
#define CLOUDSTREAM_PEER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libwebsockets.h>

#include "tunnel.h"

#define CS_PEER_PATH "/v1/cloudstream/peer"

struct cs_server;

/* Start-up, before the context: --peers resolved (getaddrinfo), the peer CA loaded. 0, or
 * -EINVAL after logging why. Nothing to do without --peers. */
int cs_peers_configure(struct cs_server *srv);
/* After the vhosts: the client vhost, the directory, the first dials. 0 or -ENOMEM. */
int cs_peers_start(struct cs_server *srv);
/* At exit: links closed without redial. */
void cs_peers_stop(struct cs_server *srv);
/* After the context is gone: the peer set's memory freed (srv->peers NULL). */
void cs_peers_free(struct cs_server *srv);

/* /readyz: every known peer's node list arrived (SYNC_END), or --peer-sync-timeout passed.
 * *why says what is missing when not. */
bool cs_peers_ready(struct cs_server *srv, const char **why);

/* The tunnel of @t's node (an edge's; tunnel.c) was admitted / is going: announce it on every
 * link we dialled. */
void cs_peers_node_up(struct cs_server *srv, struct cs_tunnel *t);
void cs_peers_node_down(struct cs_server *srv, struct cs_tunnel *t);

/* The tunnel port: is this upgrade for CS_PEER_PATH? */
bool cs_peer_is_peer_upgrade(struct lws *wsi);
/* The tunnel port's TLS context: trust the peer CA too (LOAD_EXTRA_SERVER_VERIFY_CERTS). */
void cs_peer_trust_ca(struct cs_server *srv, void *ssl_ctx);
/* Edge admission: was this client certificate issued by the peer CA? (never a node) */
bool cs_peer_cert_is_peer(struct cs_server *srv, struct lws *wsi);

/* The tunnel port's callbacks for an accepted peer link (tunnel.c hands them over). */
/* CONFIRM_UPGRADE: 0 when admitted, else the HTTP status to refuse with, and why in @why (@cap
 * bytes, NUL-terminated); tunnel.c refuses it as it refuses an edge. */
int cs_peer_link_admit(struct lws *wsi, struct cs_server *srv, char *why, size_t cap);
/* ADD_HEADERS: our echo; returns what cb_tunnel returns. */
int cs_peer_in_headers(struct lws *wsi, struct cs_server *srv, void *in);
/* ESTABLISHED: the link becomes a tunnel of the peer-link kind in *@slot (tunnel.h), which
 * tunnel.c then serves as an edge's and whose CLOSED comes back through its link ops. 0, or
 * -1 to drop the connection. */
int cs_peer_in_established(struct lws *wsi, struct cs_server *srv, struct cs_tunnel **slot);

/*
 * cs_peer_lookup() - the link to the replica that holds @node (directory), or NULL. Sets the
 * node's edge capabilities (*caps), its name as the directory holds it (*node_out, valid until
 * the directory changes) and the holder's replica id (*replica).
 */
struct cs_tunnel *cs_peer_lookup(struct cs_server *srv, const char *node, size_t len,
                                 uint32_t *caps, const char **replica);
/* The same by a node IP: NULL also when two nodes announced it. */
struct cs_tunnel *cs_peer_lookup_ip(struct cs_server *srv, const char *ip, size_t len,
                                    const char **node, uint32_t *caps);

/* cs_peer_stream_open() - cs_stream_open on @link (from cs_peer_lookup) for @node: the
 * payload goes with the node's name in front (PROTOCOL.md §7). Same returns. */
int cs_peer_stream_open(struct cs_tunnel *link, const char *node, struct cs_endpoint *ep,
                        uint64_t type, cs_connect_payload_cb payload, void *user, char *msg,
                        size_t msg_cap);

/* --peer-service NAMESPACE/NAME (peerwatch.c): list, then watch the Service's EndpointSlices
 * on a pool of its own; each change sets the members (cs__peers_service_members). 0 or
 * -ENOMEM. Stop before the context goes; completions from EVENT_WAIT_CANCELLED. */
int cs_peerwatch_start(struct cs_server *srv);
void cs_peerwatch_stop(struct cs_server *srv);
void cs_peerwatch_run_completions(struct cs_server *srv);
/* peer_members.c: the members --peer-service names now (@n addresses with their ports). */
void cs__peers_service_members(struct cs_server *srv, const char (*addrs)[64], const int *ports,
                               size_t n);

/* The peer directory's figures on /metrics. */
struct st_text;
void cs_peers_metrics(struct st_text *t, const struct cs_server *srv);

#endif /* CLOUDSTREAM_PEER_H */
