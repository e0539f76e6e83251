/*
 * cloudstream/src/peer_int.h — what the parts of the peer module (peer.h) share. The module is
 * split by responsibility:
 *
 *   peer_members.c    the peer set: --peers, --peer-dns, --peer-service (peerwatch.c feeds it),
 *                     start and stop, /metrics
 *   peer_dial.c       the links this replica dials: dialling and redial, the client callback,
 *                     and on each link the edge-role side (its session, I/O, liveness)
 *   peer_accept.c     the links other replicas dial to us: the peer certificate, admission, and
 *                     each link as a tunnel of the peer-link kind (tunnel.h cs_tunnel_link_*)
 *   peer_directory.c  NODE_UP / NODE_DOWN / SYNC over the links: our nodes announced, theirs
 *                     learnt into the directory (the pure table and codec are peerdir.c's),
 *                     readiness
 *   peer_forward.c    streams over the links: ours opened on the link to the node's holder, and
 *                     those another replica opens relayed to our nodes' tunnels
 *
 * On a link this replica dialled it is the edge role (struct in_link: it announces its nodes and
 * relays the streams the other opens); on a link it accepted it is the cloud role (struct
 * accepted_link around a struct cs_tunnel: it learns the other's nodes and opens streams there).
 * None of these files knows a struct cs_tunnel's fields: tunnel.h is their only way in.
 *
 * Loop thread only.
 */
#ifndef CLOUDSTREAM_PEER_INT_H
#define CLOUDSTREAM_PEER_INT_H

#include "peer.h"

#include "cs.h"
#include "peerdir.h"

#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <stream/wsctl.h>

/* How many replicas the links and the directory know at most. */
#define PEER_ADDRS_MAX CS_PEERDIR_MAX_PEERS

/* Where a member came from: --peers (for good), --peer-dns or --peer-service (as long as they
 * name it). */
enum member_source { SRC_STATIC = 0, SRC_DNS = 1, SRC_SERVICE = 2 };

struct in_link;
struct pstream;

/* One member of the peer set: a link this replica dials (peer_dial.c). */
struct out_link {
	struct cs_server *srv;
	char host[256]; /* as configured: SNI and the name checked (or --peer-server-name) */
	char addr[64];  /* resolved at start */
	int port;
	struct lws *wsi;   /* the connection in progress or up, else NULL */
	struct in_link *e; /* the link once up (edge role: our nodes, their streams) */
	bool self;         /* the other end said our own replica id: never dialled again */
	bool stopping;     /* no more dials (exit, or the address left the membership) */
	bool used;         /* the slot holds a link (p->out is a table of slots) */
	int source;        /* enum member_source: who named it (a dynamic one takes it away) */
	unsigned fails;    /* dials failed in a row (backoff) */
	char replica[ST_MAX_REPLICA_ID_BYTES + 1]; /* the other's id, from its echo */
	lws_sorted_usec_list_t sul_dial;
};

/* The edge-role side of a link: the one this replica dialled to another (an out_link's). */
struct st_tunnel_reader;

struct in_link {
	struct cs_server *srv;
	struct lws *wsi; /* the client connection; NULL once lws is closing it */
	struct st_session *sess;
	struct st_reasm rx;
	char replica[ST_MAX_REPLICA_ID_BYTES + 1];
	uint64_t ordinal;
	bool sync_pending;        /* a full list must (re)start: SYNC not queued yet */
	bool in_sync;             /* between our SYNC and SYNC_END */
	struct cs_tunnel *cursor; /* the next local tunnel the list names */
	bool kill;
	struct st_liveness live; /* any frame received counts (a PONG too) */
	/* Our own reading of the other replica's frames (stream/tunnelread.h; NULL: lws reads,
	 * on its poll loop): a forwarded upload's bytes come this way. Its PINGs reach us: */
	struct st_tunnel_reader *reader;
	struct st_wsctl ctl;     /* the PING the sweep asks for, the PONG we owe (stream/wsctl.h) */
	struct pstream *streams; /* relayed to our nodes' tunnels (peer_forward.c) */
	struct in_link *next, *prev;
};

/* The cloud-role side of a link another replica dialled to us (peer_accept.c): a tunnel of the
 * peer-link kind, which streams for the nodes that replica holds are opened on. */
struct accepted_link {
	struct cs_peers *p;
	struct cs_tunnel *t; /* created with us at ESTABLISHED, freed with us at CLOSED */
	int slot;            /* the replica's slot in the directory (peerdir.h) */
	struct accepted_link *next, *prev; /* in p->acc */
};

struct cs_peers {
	struct cs_server *srv;
	SSL_CTX *client_ctx; /* ours, lent to the "peer" vhost (stream/tlsctx.h); freed after lws */
	struct out_link *out; /* PEER_ADDRS_MAX slots */
	size_t n_out;         /* slots ever used (a bound for loops) */
	char dns_name[256];   /* --peer-dns: the name, its port */
	int dns_port;
	bool dns_known;     /* the first answer arrived (readiness waits for it) */
	bool service_known; /* the first EndpointSlice list arrived (the same) */
	bool dns_failing;
	lws_sorted_usec_list_t sul_dns;
	struct in_link *in;        /* the edge-role sides of the links we dialled */
	struct accepted_link *acc; /* the cloud-role sides of the links we accepted */
	struct accepted_link *slot_owner[CS_PEERDIR_MAX_PEERS]; /* the accepted link of each peer */
	struct cs_peerdir *dir;
	struct lws_vhost *vh;           /* the client vhost (peer certificate) */
	X509_STORE *peer_store;         /* --peer-ca alone: what a peer certificate chains to */
	struct st_tunnel_writer writer; /* we are the client on dialled links: key 0 */
	uint64_t started_ms;
	lws_sorted_usec_list_t sul_live; /* one liveness sweep over every link */
	bool ready_logged, timeout_logged;
	uint64_t forwarded_out, forwarded_in, stale_closed, links_lost;
};

static inline struct cs_peers *peers_of(const struct cs_server *srv)
{
	return srv->peers;
}

/* peer_dial.c: the client protocol of the "peer" vhost (cs_peers_start creates it). */
extern const struct lws_protocols cs__peer_client_protocols[];
/* peer_dial.c: the dial timer of an out_link (sul_dial; during a dial, its deadline). */
void cs__peer_dial(lws_sorted_usec_list_t *sul);
/* peer_dial.c: the liveness sweep over every link, both kinds (sul_live). */
void cs__peers_live_sweep(lws_sorted_usec_list_t *sul);
/* peer_dial.c: ask for WRITEABLE on @l when it has something to send. */
void cs__peer_in_kick(struct in_link *l);

/* peer_directory.c: what the directory does as peers' entries come and go. */
extern const struct cs_peerdir_cbs cs__peer_dir_cbs;
/* peer_directory.c: a directory message on the accepted link @user (struct accepted_link). */
int cs__peer_dir_msg(void *user, uint64_t type, const uint8_t *payload, size_t len);
/* peer_directory.c: queue as much of our full node list on @l as its peer queue takes. */
void cs__peer_in_fill(struct in_link *l);

/* peer_forward.c: the session callbacks of the edge-role side (streams the other replica
 * opens, relayed to our nodes' tunnels). */
extern const struct st_session_callbacks cs__peer_relay_cbs;
/* peer_forward.c: the link @l is closing: every stream it relayed ends toward the edge. */
void cs__peer_relay_link_lost(struct in_link *l);

#endif /* CLOUDSTREAM_PEER_INT_H */
