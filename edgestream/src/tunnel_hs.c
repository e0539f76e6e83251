/*
 * edgestream/src/tunnel_hs.c — the tunnel's upgrade, header by header (tunnel.h): what the edge
 * sends (KubeEdge's SessionHostNameOverride and SessionInternalIP, our extension offer), what
 * the cloud echoes, and why it refused. Loop thread only.
 */
#include "tunnel.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <stream/ext.h>
#include <stream/log.h>

uint64_t es__tunnel_first_window(const struct edgestream *es)
{
	return es->cfg.stream_first_window_bytes < es->cfg.stream_window_bytes
	               ? es->cfg.stream_first_window_bytes
	               : es->cfg.stream_window_bytes;
}

uint64_t es__tunnel_announced_window(const struct edgestream *es)
{
	uint64_t first = es__tunnel_first_window(es);
	return first < ST_QUIET_STREAM_WINDOW_BYTES ? first : ST_QUIET_STREAM_WINDOW_BYTES;
}

void es__tunnel_append_headers(struct edgestream *es, struct lws *wsi, unsigned char **p,
                               unsigned char *end)
{
	/* A header that does not fit fails the handshake in lws; nothing to add here. */
	if (lws_add_http_header_by_name(wsi, (const unsigned char *)"SessionHostNameOverride:",
	                                (const unsigned char *)es->node, (int)strlen(es->node), p,
	                                end))
		return;
	if (es->internal_ip[0] &&
	    lws_add_http_header_by_name(wsi, (const unsigned char *)"SessionInternalIP:",
	                                (const unsigned char *)es->internal_ip,
	                                (int)strlen(es->internal_ip), p, end))
		return;
	if (!es->cfg.extensions)
		return;
	struct st_ext_offer offer = {.version = ST_EXT_VERSION,
	                             .caps = ST_CAP_ALL,
	                             .window_bytes = (uint32_t)es__tunnel_announced_window(es)};
	snprintf(offer.replica_id, sizeof offer.replica_id, "%.128s", es->node);
	/* Two thirds of our dead-peer timeout: a cloud that answers our PINGs that late, coalesced,
	 * still leaves a third of it (10 s by default) for the network's delays. Not offered when
	 * it would not save a PONG. */
	uint64_t within = es->cfg.dead_peer_timeout_ms / 3 * 2;
	if (within > ST_EXT_PONG_WITHIN_MAX_MS)
		within = ST_EXT_PONG_WITHIN_MAX_MS;
	if (within >= ST_EXT_PONG_WITHIN_MIN_MS && within > es->cfg.ping_interval_ms)
		offer.pong_within_ms = (uint32_t)within;
	char v[ST_EXT_HEADER_MAX_BYTES];
	ssize_t n = st_ext_offer_format(v, sizeof v, &offer);
	if (n > 0 && lws_add_http_header_by_name(wsi, (const unsigned char *)ST_EXT_HEADER ":",
	                                         (const unsigned char *)v, (int)n, p, end))
		st_warn("the extension offer did not fit the upgrade request");
}

/* The 101's echo: our extensions, the base protocol, or a broken cloud. 0 or -EPROTO. */
int es__tunnel_read_echo(struct es_tunnel *t, struct lws *wsi, struct st_ext_offer *agreed)
{
	memset(agreed, 0, sizeof *agreed);
	if (!t->es->cfg.extensions)
		return 0;
	char v[ST_EXT_HEADER_MAX_BYTES + 1];
	int n = lws_hdr_custom_copy(wsi, v, sizeof v, ST_EXT_HEADER_LWS,
	                            (int)strlen(ST_EXT_HEADER_LWS));
	if (n <= 0)
		return 0; /* no echo: a KubeEdge cloud, base protocol */
	struct st_ext_offer ours = {.version = ST_EXT_VERSION, .caps = ST_CAP_ALL};
	if (st_ext_offer_parse(v, (size_t)n, agreed) < 0 || st_ext_check_echo(&ours, agreed) < 0) {
		snprintf(t->close_reason, sizeof t->close_reason,
		         "the cloud's extension echo \"%.100s\" is not a subset of our offer", v);
		return -EPROTO;
	}
	return 0;
}

void es__tunnel_note_answer(struct es_tunnel *t, struct lws *wsi)
{
	char refusal[240] = "";
	/* A cloudstream that refused the upgrade says why in a header (lws keeps the answer's
	 * headers, not its body): "not 101" alone tells an operator nothing. */
	unsigned status = wsi ? lws_http_client_http_response(wsi) : 0;
	if (wsi && lws_hdr_custom_copy(wsi, refusal, sizeof refusal, ST_REFUSAL_HEADER_LWS,
	                               (int)strlen(ST_REFUSAL_HEADER_LWS)) <= 0)
		refusal[0] = '\0';
	if (refusal[0])
		snprintf(t->close_reason, sizeof t->close_reason,
		         "the cloud refused the tunnel (%u): %.200s", status, refusal);
	else if (status && status != 101 && t->close_reason[0] == '\0')
		snprintf(t->close_reason, sizeof t->close_reason,
		         "the cloud answered %u instead of upgrading to a websocket", status);
}
