/*
 * cloudstream/src/peer.h — links to the other cloudstream replicas (DESIGN D12, issue 13;
 * stream/PROTOCOL.md §7).
 *
 * Every replica dials every other one's tunnel port at CS_PEER_PATH with its peer certificate.
 * On the link it dialled, a replica is the cloud role: it opens streams there for requests whose
 * node the other replica holds, and it learns, from the other's NODE_UP / NODE_DOWN / SYNC
 * messages, which nodes those are (peerdir.h). On a link it accepted it is the edge role: it
 * announces its own nodes, and relays each incoming stream to the node's tunnel as one more
 * stream endpoint (tunnel.h), with the same per-stream credit on both hops.
 *
 * The dialling side's link is a struct cs_tunnel (tunnel_int.h: client = true), so an endpoint
 * opens a stream on it exactly as on an edge's tunnel (cs_peer_stream_open adds the node name).
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
/* At exit: links closed without redial, memory freed. */
void cs_peers_stop(struct cs_server *srv);

/* /readyz: every known peer's node list arrived (SYNC_END), or --peer-sync-timeout passed.
 * *why says what is missing when not. */
bool cs_peers_ready(struct cs_server *srv, const char **why);

/* The tunnel of @t's node was admitted / is going: announce it on every accepted link. */
void cs_peers_node_up(struct cs_server *srv, struct cs_tunnel *t);
void cs_peers_node_down(struct cs_server *srv, struct cs_tunnel *t);

/* The tunnel port: is this upgrade for CS_PEER_PATH? */
bool cs_peer_is_peer_upgrade(struct lws *wsi);
/* The tunnel port's TLS context: trust the peer CA too (LOAD_EXTRA_SERVER_VERIFY_CERTS). */
void cs_peer_trust_ca(struct cs_server *srv, void *ssl_ctx);
/* Edge admission: was this client certificate issued by the peer CA? (never a node) */
bool cs_peer_cert_is_peer(struct cs_server *srv, struct lws *wsi);

/* The tunnel port's callbacks for an accepted peer link (tunnel.c hands them over): each
 * returns what cb_tunnel returns. The link then is a struct cs_tunnel in the pss (cloud role:
 * tunnel.c reads and writes it as an edge's), whose CLOSED goes to cs__peer_link_closed. */
int cs_peer_in_confirm(struct lws *wsi, struct cs_server *srv);
int cs_peer_in_headers(struct lws *wsi, struct cs_server *srv, void *in);
int cs_peer_in_established(struct lws *wsi, struct cs_server *srv, struct cs_tunnel **slot);

/* The edge-role side of a link this replica dialled (peer.c's client callbacks). */
int cs_peer_in_receive(void *slot, const uint8_t *in, size_t len, bool first, bool final);
int cs_peer_in_writeable(void *slot);
void cs_peer_in_pong(void *slot);
void cs_peer_in_closed(void *slot);

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
/* peer.c: the members --peer-service names now (@n addresses with their ports). */
void cs__peers_service_members(struct cs_server *srv, const char (*addrs)[64], const int *ports,
                               size_t n);

/* The peer directory's figures on /metrics. */
struct st_text;
void cs_peers_metrics(struct st_text *t, const struct cs_server *srv);

#endif /* CLOUDSTREAM_PEER_H */
