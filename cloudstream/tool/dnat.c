/*
 * cloudstream/tool/dnat.c — cloudstream-dnat-controller: keeps an apiserver host's DNAT rules
 * for edge nodes in step with the Node objects (deploy/README.md "Apiserver hosts").
 *
 * Lists, then watches, the Nodes matching --node-selector through the apiserver (the same
 * credentials code as cloudstream: apiserver_http.c), and keeps one CLOUDSTREAM-DNAT chain in
 * the nat table: for each node's IPv4 InternalIP and the kubelet port it advertises
 * (status.daemonEndpoints.kubeletEndpoint.Port, else --default-port) a DNAT to --to. Loopback
 * and the host's own addresses are never captured (a RETURN for addrtype LOCAL, and no rule
 * for a node address the host holds). Every --resync-interval the chain and its two jumps
 * (OUTPUT, PREROUTING) are compared with what was applied and re-applied when they differ (a
 * flush, a reboot's empty table, another tool). Rules are written with iptables-restore
 * --noflush, the chain replaced in one transaction, so a change never opens a gap.
 *
 * One thread: the watch runs on a curl multi handle polled with a 200 ms timeout, and iptables
 * runs as a child process. SIGTERM/SIGINT end it; the rules stay (the apiserver keeps reaching
 * the edges while the controller restarts); `cloudstream-dnat remove` removes them.
 *
 * This file: the options and the main loop (list, watch, apply when the Nodes changed, resync).
 * The rules are dnat_iptables.c's, the list and the watch dnat_watch.c's (dnat_int.h).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include <stream/clock.h>
#include <stream/config.h>
#include <stream/log.h>

#include "dnat_int.h"

#define OFF(f) offsetof(struct dnat_config, f)
static const char *const backend_names[] = {"auto", "nft", "legacy", NULL};
static const struct st_opt options[] = {
        {.name = "to",
         .type = ST_OPT_STRING,
         .offset = OFF(to),
         .value_name = "IP:PORT",
         .help = "Where the edge nodes' kubelet connections go: cloudstream's stream port "
                 "(an IPv4 address this host reaches, and its port). Required.",
         .example = "--to 203.0.113.20:10350",
         .since = "0.3"},
        {.name = "node-selector",
         .type = ST_OPT_STRING,
         .offset = OFF(node_selector),
         .default_value = "node-role.kubernetes.io/edge",
         .value_name = "SELECTOR",
         .help = "Label selector of the edge Nodes (as kubectl -l takes it). A node that stops "
                 "matching loses its rules.",
         .since = "0.3"},
        {.name = "default-port",
         .type = ST_OPT_U64,
         .offset = OFF(default_port),
         .default_value = "10350",
         .min = 1,
         .max = 65535,
         .value_name = "PORT",
         .help = "The kubelet port of a node that advertises none in "
                 "status.daemonEndpoints.kubeletEndpoint.Port.",
         .since = "0.3"},
        {.name = "backend",
         .type = ST_OPT_ENUM,
         .offset = OFF(backend),
         .default_value = "auto",
         .enum_names = backend_names,
         .value_name = "B",
         .help = "iptables flavour: nft (iptables-nft), legacy (iptables-legacy), auto (what "
                 "`iptables` is).",
         .since = "0.3"},
        {.name = "resync-interval",
         .type = ST_OPT_DURATION_MS,
         .offset = OFF(resync_interval_ms),
         .default_value = "2s",
         .min = 200,
         .max = 3600000,
         .value_name = "DURATION",
         .help = "How often the chain and its jumps are compared with what was applied (and "
                 "re-applied after a flush or a reboot).",
         .since = "0.3"},
        {.name = "watch-timeout",
         .type = ST_OPT_DURATION_MS,
         .offset = OFF(watch_timeout_ms),
         .default_value = "5m",
         .min = 1000,
         .max = 3600000,
         .value_name = "DURATION",
         .help = "timeoutSeconds of each Node watch; the next one continues from its last "
                 "resourceVersion (410 Gone lists again).",
         .since = "0.3"},
        {.name = "apiserver-url",
         .type = ST_OPT_STRING,
         .offset = OFF(apiserver_url),
         .value_name = "URL",
         .help = "The Kubernetes API server. Default: https://$KUBERNETES_SERVICE_HOST:"
                 "$KUBERNETES_SERVICE_PORT (in a pod).",
         .since = "0.3"},
        {.name = "apiserver-ca",
         .type = ST_OPT_STRING,
         .offset = OFF(apiserver_ca),
         .default_value = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
         .value_name = "FILE",
         .help = "CA of the API server's certificate.",
         .since = "0.3"},
        {.name = "apiserver-token-file",
         .type = ST_OPT_STRING,
         .offset = OFF(apiserver_token_file),
         .default_value = "/var/run/secrets/kubernetes.io/serviceaccount/token",
         .value_name = "FILE",
         .help = "Bearer token (read for every call: projected tokens rotate); needs list "
                 "and watch on nodes. Empty: none.",
         .since = "0.3"},
        {.name = "apiserver-cert",
         .type = ST_OPT_STRING,
         .offset = OFF(apiserver_cert),
         .value_name = "FILE",
         .help = "Client certificate for the API server (instead of a token).",
         .since = "0.3"},
        {.name = "apiserver-key",
         .type = ST_OPT_STRING,
         .offset = OFF(apiserver_key),
         .value_name = "FILE",
         .help = "Key of --apiserver-cert.",
         .since = "0.3"},
        {.name = "apiserver-timeout",
         .type = ST_OPT_DURATION_MS,
         .offset = OFF(apiserver_timeout_ms),
         .default_value = "10s",
         .min = 100,
         .max = 600000,
         .value_name = "DURATION",
         .help = "Deadline of a list (a watch runs for --watch-timeout).",
         .since = "0.3"},
        ST_OPT_LOG_LEVEL(OFF(log_level)),
        ST_OPT_READY_FILE(OFF(ready_file),
                          "Written after the first rule set is applied (for tests)."),
};

static const struct st_config_spec spec = {
        .prog = "cloudstream-dnat-controller",
        .summary = "Keeps an apiserver host's DNAT rules for edge nodes in step with the Node "
                   "objects: kube-apiserver's connections to <node-ip>:<kubelet port> go to "
                   "cloudstream.",
        .version = "0.1.0",
        .opts = options,
        .num_opts = sizeof options / sizeof options[0],
};

static volatile sig_atomic_t stop_flag;

static void on_stop(int sig)
{
	(void)sig;
	stop_flag = 1;
}

/* ---- main -------------------------------------------------------------------------------- */

static int parse_to(struct ctl *x)
{
	const char *to = x->c.to;
	const char *colon = to ? strrchr(to, ':') : NULL;
	if (to == NULL || colon == NULL || (size_t)(colon - to) >= sizeof x->to_ip) {
		fprintf(stderr, "cloudstream-dnat-controller: --to IP:PORT is required\n");
		return -1;
	}
	memcpy(x->to_ip, to, (size_t)(colon - to));
	x->to_ip[colon - to] = '\0';
	struct in_addr a;
	char *end;
	unsigned long p = strtoul(colon + 1, &end, 10);
	if (inet_pton(AF_INET, x->to_ip, &a) != 1 || *end || p < 1 || p > 65535) {
		fprintf(stderr, "cloudstream-dnat-controller: --to %s: expected IPv4:PORT\n", to);
		return -1;
	}
	x->to_port = (uint16_t)p;
	return 0;
}

int main(int argc, char **argv)
{
	static struct ctl x;
	char err[512];
	enum st_config_action action;
	if (st_config_load(&spec, &x.c, argc, argv, &action, err, sizeof err) < 0) {
		fprintf(stderr, "cloudstream-dnat-controller: %s\n", err);
		return 2;
	}
	if (action != ST_CONFIG_RUN) {
		int rc = st_config_act(&spec, &x.c, action, stdout);
		st_config_cleanup(&spec, &x.c);
		return rc < 0 ? 1 : 0;
	}
	st_log_set_level((enum st_log_level)x.c.log_level);
	if (parse_to(&x) < 0)
		return 2;
	char url_buf[512];
	if (x.c.apiserver_url == NULL || x.c.apiserver_url[0] == '\0') {
		const char *host = getenv("KUBERNETES_SERVICE_HOST"),
		           *port = getenv("KUBERNETES_SERVICE_PORT");
		if (host == NULL || port == NULL) {
			fprintf(stderr, "cloudstream-dnat-controller: --apiserver-url is required "
			                "outside a pod\n");
			return 2;
		}
		snprintf(url_buf, sizeof url_buf,
		         strchr(host, ':') ? "https://[%s]:%s" : "https://%s:%s", host, port);
		free(x.c.apiserver_url);
		x.c.apiserver_url = strdup(url_buf);
	}
	x.api.apiserver_url = x.c.apiserver_url;
	x.api.apiserver_ca = x.c.apiserver_ca;
	x.api.apiserver_token_file = x.c.apiserver_token_file;
	x.api.apiserver_cert = x.c.apiserver_cert;
	x.api.apiserver_key = x.c.apiserver_key;
	x.api.apiserver_timeout_ms = x.c.apiserver_timeout_ms;
	static const char *const ipt[3][2] = {{"iptables", "iptables-restore"},
	                                      {"iptables-nft", "iptables-nft-restore"},
	                                      {"iptables-legacy", "iptables-legacy-restore"}};
	x.ipt = ipt[x.c.backend][0];
	x.ipt_restore = ipt[x.c.backend][1];
	x.line = malloc(LINE_MAX_BYTES);
	struct sigaction sa = {.sa_handler = on_stop};
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	if (x.line == NULL || curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK ||
	    (x.multi = curl_multi_init()) == NULL) {
		st_err("cannot start");
		return 1;
	}
	cs_dnat_set_init(&x.nodes);
	cs_kwatch_lines_init(&x.lines, x.line, LINE_MAX_BYTES);
	cs__dnat_read_local(&x);
	st_info("cloudstream-dnat-controller %s: Nodes %s from %s -> %s:%u, %s, resync every %llu "
	        "ms",
	        spec.version, x.c.node_selector, x.c.apiserver_url, x.to_ip, (unsigned)x.to_port,
	        x.ipt, (unsigned long long)x.c.resync_interval_ms);
	bool listed = false, ready = false;
	uint64_t next_list = 0, next_check = 0, backoff = 500;
	while (!stop_flag) {
		uint64_t now = st_now_ms();
		if ((!listed || x.relist) && now >= next_list && x.watch == NULL) {
			x.relist = false;
			if (cs__dnat_list_nodes(&x) == 0) {
				listed = true;
				backoff = 500;
			} else {
				listed = false;
				next_list = now + backoff;
				backoff = backoff * 2 > 30000 ? 30000 : backoff * 2;
			}
		}
		if (listed && x.watch == NULL && !x.relist && cs__dnat_watch_start(&x) < 0) {
			listed = false;
			next_list = now + backoff;
		}
		if (listed && (x.dirty || !ready)) {
			if (cs__dnat_apply(&x, ready ? "Nodes changed" : "start") == 0 && !ready) {
				ready = true;
				next_check = st_now_ms() + x.c.resync_interval_ms;
				if (x.c.ready_file && x.c.ready_file[0]) {
					FILE *f = fopen(x.c.ready_file, "w");
					if (f)
						fclose(f);
				}
			}
		}
		if (ready && st_now_ms() >= next_check) {
			bool moved = cs__dnat_read_local(&x);
			if (moved || !cs__dnat_in_place(&x))
				cs__dnat_apply(
				        &x, moved ? "the host's addresses changed"
				                  : "the chain or a jump was missing or changed: "
				                    "restored");
			next_check = st_now_ms() + x.c.resync_interval_ms;
		}
		int running = 0;
		curl_multi_perform(x.multi, &running);
		CURLMsg *m;
		int left;
		while ((m = curl_multi_info_read(x.multi, &left))) {
			if (m->msg != CURLMSG_DONE || m->easy_handle != x.watch)
				continue;
			long status = 0;
			curl_easy_getinfo(x.watch, CURLINFO_RESPONSE_CODE, &status);
			if (m->data.result != CURLE_OK || status != 200) {
				st_warn("watch ended: %s (HTTP %ld); listing again",
				        m->data.result != CURLE_OK
				                ? (x.watch_err[0]
				                           ? x.watch_err
				                           : curl_easy_strerror(m->data.result))
				                : "unexpected status",
				        status);
				x.relist = true;
				next_list = st_now_ms() + backoff;
			}
			cs__dnat_watch_end(&x);
			break;
		}
		if (x.relist && x.watch) /* a 410 or an over-long event: list again now */
			cs__dnat_watch_end(&x);
		curl_multi_poll(x.multi, NULL, 0, 200, NULL);
	}
	st_info("stopping; the rules stay (cloudstream-dnat remove removes them)");
	cs__dnat_watch_end(&x);
	curl_multi_cleanup(x.multi);
	curl_global_cleanup();
	cs_dnat_set_cleanup(&x.nodes);
	free(x.applied);
	free(x.line);
	st_config_cleanup(&spec, &x.c);
	return 0;
}
