/*
 * edgestream/src/rawsock.c — the raw client socket under a backend connection (rawsock.h):
 * the connect, a failure met inside it, letting the socket go. Loop thread only.
 */
#include "rawsock.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "es.h"

int es_rawsock_connect(struct edgestream *es, struct lws **wsi, const char *host, int port,
                       const char *protocol, void *owner, char *why, size_t why_cap)
{
	struct lws_client_connect_info i;
	memset(&i, 0, sizeof i);
	i.context = es->ctx;
	i.vhost = es->vh_client;
	i.address = host;
	i.port = port;
	i.host = i.address;
	i.method = "RAW";
	i.local_protocol_name = protocol;
	i.opaque_user_data = owner;
	assert(es->connecting == NULL); /* connects never nest (rawsock.h) */
	es->connecting = owner;
	es->connect_failed = false;
	struct lws *w = lws_client_connect_via_info(&i);
	es->connecting = NULL;
	if (w && !es->connect_failed) {
		*wsi = w;
		return 0;
	}
	/* A socket a callback stored inside the call (RAW_CONNECTED, then a failure). */
	es_rawsock_let_go(wsi);
	snprintf(why, why_cap, "%s", es->connect_failed ? es->connect_error : "");
	return -1;
}

bool es_rawsock_noted(struct edgestream *es, const void *owner, const char *why)
{
	if (owner == NULL || es->connecting != owner)
		return false;
	if (!es->connect_failed) {
		es->connect_failed = true;
		snprintf(es->connect_error, sizeof es->connect_error, "%s", why);
	}
	return true;
}

void es_rawsock_let_go(struct lws **wsi)
{
	if (*wsi == NULL)
		return;
	lws_set_opaque_user_data(*wsi, NULL);
	lws_set_timeout(*wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
	*wsi = NULL;
}
