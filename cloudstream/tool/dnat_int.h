/*
 * cloudstream/tool/dnat_int.h — what the three files of cloudstream-dnat-controller share:
 * dnat.c (options, the main loop), dnat_iptables.c (applying and checking the rules) and
 * dnat_watch.c (listing and watching the Nodes). One thread.
 */
#ifndef CLOUDSTREAM_TOOL_DNAT_INT_H
#define CLOUDSTREAM_TOOL_DNAT_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>

#include "config.h"
#include "dnat_rules.h"
#include "kwatch.h"

#define LINE_MAX_BYTES  (4u << 20)  /* one watch event */
#define LIST_MAX_BYTES  (64u << 20) /* one list answer */
#define CMD_OUT_MAX     (16u << 20)
#define RULES_MAX_BYTES (64u << 20)
#define LOCAL_MAX       64u

struct dnat_config {
	char *to;
	char *node_selector;
	uint64_t default_port;
	int backend; /* 0 auto (iptables), 1 nft, 2 legacy */
	uint64_t resync_interval_ms;
	uint64_t watch_timeout_ms;
	char *apiserver_url, *apiserver_ca, *apiserver_token_file, *apiserver_cert, *apiserver_key;
	uint64_t apiserver_timeout_ms;
	int log_level;
	char *ready_file;
};

/* The controller's state (main's, one per process). */
struct ctl {
	struct dnat_config c;
	struct cs_config api; /* only the apiserver fields, for cs_apiserver_setup() */
	char to_ip[CS_DNAT_IP_TEXT_BYTES];
	uint16_t to_port;
	const char *ipt, *ipt_restore;
	struct cs_dnat_set nodes;
	char rv[64];
	bool dirty, relist;
	char *applied; /* `iptables -S CHAIN` after our last apply */
	char local[LOCAL_MAX][CS_DNAT_IP_TEXT_BYTES];
	size_t n_local;
	/* the watch in flight */
	CURLM *multi;
	CURL *watch;
	struct curl_slist *watch_hdrs;
	char watch_err[CURL_ERROR_SIZE];
	char *line; /* LINE_MAX_BYTES: the watch's events, split by @lines */
	struct cs_kwatch_lines lines;
	uint64_t events;
};

/* ---- dnat_iptables.c ----------------------------------------------------------------------- */

/* The host's own IPv4 addresses into x->local; true when they changed. */
bool cs__dnat_read_local(struct ctl *x);

/* Writes the chain for x->nodes (one iptables-restore --noflush transaction) and the two jumps;
 * x->applied is then what the chain reads back as. @why goes in the log line. 0, or -1 after
 * logging. */
int cs__dnat_apply(struct ctl *x, const char *why);

/* The chain and the jumps as applied? */
bool cs__dnat_in_place(struct ctl *x);

/* ---- dnat_watch.c -------------------------------------------------------------------------- */

/* Lists the Nodes (blocking, the apiserver deadline) into x->nodes, x->dirty set when they
 * changed, x->rv the list's resourceVersion. 0, or -1 after logging. */
int cs__dnat_list_nodes(struct ctl *x);

/* Starts the watch from x->rv on x->multi; its events update x->nodes as they come. 0, or -1
 * after logging. */
int cs__dnat_watch_start(struct ctl *x);

/* Ends the watch in flight, if any. */
void cs__dnat_watch_end(struct ctl *x);

#endif /* CLOUDSTREAM_TOOL_DNAT_INT_H */
