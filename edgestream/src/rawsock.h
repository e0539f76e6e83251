/*
 * edgestream/src/rawsock.h — the raw client socket under a backend connection, for both kinds
 * of them: conn.h's (HTTP/1.1, raw TCP) and h2conn.h's (the kubelet over HTTP/2). Loop thread
 * only.
 *
 * lws may run the new socket's callbacks inside lws_client_connect_via_info() itself: an
 * address it cannot reach fails there (CLIENT_CONNECTION_ERROR), a local one may even connect
 * there (RAW_CONNECTED). A failure met inside the call must not free the connection under the
 * caller's feet, so it is only noted (es_rawsock_noted) and es_rawsock_connect() reports it when
 * the call is over. Connects never nest (nothing dials while a failure is only noted), so the
 * note lives in the instance, for the one connect under way.
 */
#ifndef EDGESTREAM_RAWSOCK_H
#define EDGESTREAM_RAWSOCK_H

#include <stdbool.h>
#include <stddef.h>

#include <libwebsockets.h>

struct edgestream;

/*
 * es_rawsock_connect() - connect a raw socket to @host:@port (an address: no DNS on the loop) on
 * the instance's client vhost, served by the protocol named @protocol, its opaque user data
 * @owner (borrowed: the caller's connection). Returns 0 with *@wsi set (connected, or the
 * connect under way), or -1 when it failed: *@wsi was let go (es_rawsock_let_go, for a socket a
 * callback stored inside the call) and @why (@why_cap bytes) holds what a callback noted, or
 * "" when lws refused without saying why (the caller words it).
 */
int es_rawsock_connect(struct edgestream *es, struct lws **wsi, const char *host, int port,
                       const char *protocol, void *owner, char *why, size_t why_cap);

/*
 * es_rawsock_noted() - @owner's socket failed with @why (borrowed, copied). True when this
 * happened inside es_rawsock_connect() for @owner: noted (the first reason is kept), and the
 * caller does nothing more now (the connect reports it). False otherwise: the caller acts.
 */
bool es_rawsock_noted(struct edgestream *es, const void *owner, const char *why);

/*
 * es_rawsock_let_go() - the socket *@wsi no longer reaches its owner (its opaque user data is
 * cleared, so its later callbacks find nothing) and lws closes it soon; *@wsi becomes NULL. A
 * no-op when *@wsi is NULL. lws frees the wsi, never us.
 */
void es_rawsock_let_go(struct lws **wsi);

#endif /* EDGESTREAM_RAWSOCK_H */
