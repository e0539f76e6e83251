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
 */
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <json-c/json.h>

#include <stream/config.h>
#include <stream/log.h>

#include "apiserver.h"
#include "config.h"
#include "dnat_rules.h"

extern char **environ;

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
	char *line;
	size_t line_len;
	bool line_over;
	uint64_t events;
};

static volatile sig_atomic_t stop_flag;

static void on_stop(int sig)
{
	(void)sig;
	stop_flag = 1;
}

static uint64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---- iptables ---------------------------------------------------------------------------- */

/* Runs @argv with @in on its stdin; its stdout goes to *@out (owned by the caller, may be NULL).
 * Returns the exit status, or -errno. */
static int run(const char *const argv[], const char *in, char **out)
{
	int pin[2] = {-1, -1}, pout[2] = {-1, -1};
	if (out)
		*out = NULL;
	if (pipe2(pin, O_CLOEXEC) < 0 || pipe2(pout, O_CLOEXEC) < 0)
		return -errno;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, pin[0], 0);
	posix_spawn_file_actions_adddup2(&fa, pout[1], 1);
	pid_t pid;
	int rc = posix_spawnp(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(pin[0]);
	close(pout[1]);
	if (rc != 0) {
		close(pin[1]);
		close(pout[0]);
		return -rc;
	}
	/* Feed stdin and drain stdout together: either may fill its pipe. */
	size_t in_len = in ? strlen(in) : 0, in_off = 0, cap = 0, len = 0;
	char *buf = NULL;
	if (in_len == 0) {
		close(pin[1]);
		pin[1] = -1;
	}
	int outfd = pout[0];
	while (outfd >= 0 || pin[1] >= 0) {
		struct pollfd p[2] = {{.fd = outfd, .events = POLLIN},
		                      {.fd = pin[1], .events = POLLOUT}};
		if (poll(p, 2, 10000) <= 0)
			break;
		if (pin[1] >= 0 && (p[1].revents & (POLLOUT | POLLERR | POLLHUP))) {
			ssize_t n = write(pin[1], in + in_off, in_len - in_off);
			if (n > 0)
				in_off += (size_t)n;
			if (n <= 0 || in_off == in_len) {
				close(pin[1]);
				pin[1] = -1;
			}
		}
		if (outfd >= 0 && (p[0].revents & (POLLIN | POLLHUP | POLLERR))) {
			if (cap - len < 65536 && cap < CMD_OUT_MAX) {
				char *g = realloc(buf, cap + 65536 + 1);
				if (g == NULL)
					break;
				buf = g;
				cap += 65536;
			}
			ssize_t n = cap > len ? read(outfd, buf + len, cap - len) : 0;
			if (n <= 0) {
				close(outfd);
				outfd = -1;
			} else {
				len += (size_t)n;
			}
		}
	}
	if (pin[1] >= 0)
		close(pin[1]);
	if (outfd >= 0)
		close(outfd);
	int st = 0;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (buf)
		buf[len] = '\0';
	if (out)
		*out = buf;
	else
		free(buf);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static int nat_S(struct ctl *x, const char *chain, char **out)
{
	const char *argv[] = {x->ipt, "-w", "10", "-t", "nat", "-S", chain, NULL};
	return run(argv, NULL, out);
}

/* The host's own IPv4 addresses; true when they changed. */
static bool read_local(struct ctl *x)
{
	struct ifaddrs *ifa = NULL;
	char now[LOCAL_MAX][CS_DNAT_IP_TEXT_BYTES];
	size_t n = 0;
	if (getifaddrs(&ifa) == 0) {
		for (struct ifaddrs *i = ifa; i && n < LOCAL_MAX; i = i->ifa_next)
			if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET)
				inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr,
				          now[n++], CS_DNAT_IP_TEXT_BYTES);
		freeifaddrs(ifa);
	}
	bool changed = n != x->n_local || memcmp(now, x->local, n * sizeof now[0]) != 0;
	memcpy(x->local, now, n * sizeof now[0]);
	x->n_local = n;
	return changed;
}

/* The two jumps: exactly ours in each hook (older ones, e.g. the one-shot tool's with a
 * --dport, are replaced). 0, or -1 after logging. */
static int ensure_jumps(struct ctl *x)
{
	static const char *const hooks[] = {"OUTPUT", "PREROUTING"};
	for (size_t h = 0; h < 2; h++) {
		char *out = NULL;
		if (nat_S(x, hooks[h], &out) != 0) {
			free(out);
			st_err("%s -t nat -S %s failed", x->ipt, hooks[h]);
			return -1;
		}
		char want[256];
		snprintf(want, sizeof want, "-A %s " CS_DNAT_JUMP_ARGS, hooks[h]);
		bool have = false;
		for (char *l = out, *e; l && *l; l = e ? e + 1 : NULL) {
			e = strchr(l, '\n');
			if (e)
				*e = '\0';
			size_t ll = strlen(l);
			const char *suffix = " -j " CS_DNAT_CHAIN;
			size_t sl = strlen(suffix);
			if (ll < sl || strcmp(l + ll - sl, suffix) != 0)
				continue;
			if (strcmp(l, want) == 0 && !have) {
				have = true;
				continue;
			}
			/* Not ours (or a duplicate): delete it, word by word as -S printed it. */
			const char *argv[64];
			size_t a = 0;
			argv[a++] = x->ipt;
			argv[a++] = "-w";
			argv[a++] = "10";
			argv[a++] = "-t";
			argv[a++] = "nat";
			char *save = NULL;
			for (char *w = strtok_r(l, " ", &save); w && a < 63;
			     w = strtok_r(NULL, " ", &save))
				argv[a++] = strcmp(w, "-A") == 0 ? "-D" : w;
			argv[a] = NULL;
			run(argv, NULL, NULL);
		}
		free(out);
		if (!have) {
			const char *argv[] = {x->ipt,      "-w", "10",          "-t",
			                      "nat",       "-A", hooks[h],      "-p",
			                      "tcp",       "-m", "comment",     "--comment",
			                      CS_DNAT_TAG, "-j", CS_DNAT_CHAIN, NULL};
			if (run(argv, NULL, NULL) != 0) {
				st_err("%s: cannot add the jump in %s", x->ipt, hooks[h]);
				return -1;
			}
		}
	}
	return 0;
}

static int apply(struct ctl *x, const char *why)
{
	read_local(x);
	char *rules = malloc(RULES_MAX_BYTES);
	if (rules == NULL)
		return -1;
	const char *local[LOCAL_MAX];
	for (size_t i = 0; i < x->n_local; i++)
		local[i] = x->local[i];
	ssize_t n = cs_dnat_rules(&x->nodes, x->to_ip, x->to_port, local, x->n_local, rules,
	                          RULES_MAX_BYTES);
	if (n < 0) {
		free(rules);
		st_err("the rule set is over %u bytes", RULES_MAX_BYTES);
		return -1;
	}
	const char *argv[] = {x->ipt_restore, "-w", "10", "--noflush", NULL};
	int rc = run(argv, rules, NULL);
	free(rules);
	if (rc != 0) {
		st_err("%s failed (%d): rules not applied", x->ipt_restore, rc);
		return -1;
	}
	if (ensure_jumps(x) < 0)
		return -1;
	free(x->applied);
	x->applied = NULL;
	nat_S(x, CS_DNAT_CHAIN, &x->applied);
	size_t rules_n = 0;
	for (size_t i = 0; i < x->nodes.n; i++)
		rules_n += x->nodes.v[i].n_ips;
	st_info("%s: %zu nodes, %zu addresses -> %s:%u (%s)", x->ipt, x->nodes.n, rules_n, x->to_ip,
	        (unsigned)x->to_port, why);
	x->dirty = false;
	return 0;
}

/* The chain and the jumps as applied? */
static bool in_place(struct ctl *x)
{
	char *now = NULL;
	bool same = nat_S(x, CS_DNAT_CHAIN, &now) == 0 && now && x->applied &&
	            strcmp(now, x->applied) == 0;
	free(now);
	if (!same)
		return false;
	static const char *const hooks[] = {"OUTPUT", "PREROUTING"};
	for (size_t h = 0; h < 2; h++) {
		char *out = NULL, want[256];
		snprintf(want, sizeof want, "-A %s " CS_DNAT_JUMP_ARGS "\n", hooks[h]);
		bool ok = nat_S(x, hooks[h], &out) == 0 && out && strstr(out, want);
		free(out);
		if (!ok)
			return false;
	}
	return true;
}

/* ---- the apiserver ----------------------------------------------------------------------- */

static void note_rv(struct ctl *x, struct json_object *obj)
{
	struct json_object *m, *rv;
	if (json_object_object_get_ex(obj, "metadata", &m) &&
	    json_object_object_get_ex(m, "resourceVersion", &rv))
		snprintf(x->rv, sizeof x->rv, "%s", json_object_get_string(rv));
}

static int list_nodes(struct ctl *x)
{
	CURL *h = curl_easy_init();
	if (h == NULL)
		return -1;
	char *sel = curl_easy_escape(h, x->c.node_selector, 0);
	char url[4096], errbuf[CURL_ERROR_SIZE] = "", err[256] = "";
	snprintf(url, sizeof url, "%s/api/v1/nodes?labelSelector=%s", x->c.apiserver_url,
	         sel ? sel : "");
	curl_free(sel);
	struct curl_slist *hdrs = NULL;
	struct cs_api_body b = {.max = LIST_MAX_BYTES};
	long status = 0;
	int rc = -1;
	if (cs_apiserver_setup(h, &x->api, url, &hdrs, errbuf, err, sizeof err) < 0) {
		st_warn("listing Nodes: %s", err);
		goto out;
	}
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, cs_apiserver_collect);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
	CURLcode cc = curl_easy_perform(h);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	if (cc != CURLE_OK || status != 200) {
		st_warn("listing Nodes: %s", cc != CURLE_OK
		                                     ? (errbuf[0] ? errbuf : curl_easy_strerror(cc))
		                                     : "unexpected HTTP status");
		if (cc == CURLE_OK)
			st_warn("listing Nodes: HTTP %ld: %.300s", status, b.p ? b.p : "");
		goto out;
	}
	struct json_object *list = b.p ? json_tokener_parse(b.p) : NULL, *items;
	if (list == NULL || !json_object_object_get_ex(list, "items", &items) ||
	    !json_object_is_type(items, json_type_array)) {
		st_warn("listing Nodes: not a NodeList");
		json_object_put(list);
		goto out;
	}
	struct cs_dnat_set fresh;
	cs_dnat_set_init(&fresh);
	size_t n = json_object_array_length(items);
	for (size_t i = 0; i < n; i++) {
		struct cs_dnat_node node;
		if (cs_dnat_node_parse(json_object_array_get_idx(items, i),
		                       (uint16_t)x->c.default_port, &node) == 0)
			cs_dnat_set_put(&fresh, &node);
	}
	/* Changed when the sets differ. */
	bool same = fresh.n == x->nodes.n &&
	            (fresh.n == 0 || memcmp(fresh.v, x->nodes.v, fresh.n * sizeof *fresh.v) == 0);
	cs_dnat_set_cleanup(&x->nodes);
	x->nodes = fresh;
	x->dirty |= !same;
	note_rv(x, list);
	json_object_put(list);
	st_info("listed %zu edge Nodes (%s) at resourceVersion %s", n, x->c.node_selector, x->rv);
	rc = 0;
out:
	free(b.p);
	curl_slist_free_all(hdrs);
	curl_easy_cleanup(h);
	return rc;
}

static void on_event(struct ctl *x, const char *line, size_t len)
{
	struct json_tokener *tok = json_tokener_new();
	struct json_object *ev = tok ? json_tokener_parse_ex(tok, line, (int)len) : NULL, *t, *obj;
	json_tokener_free(tok);
	if (ev == NULL || !json_object_object_get_ex(ev, "type", &t) ||
	    !json_object_object_get_ex(ev, "object", &obj)) {
		json_object_put(ev);
		return;
	}
	const char *type = json_object_get_string(t);
	x->events++;
	if (strcmp(type, "ERROR") == 0) {
		struct json_object *code;
		int c = json_object_object_get_ex(obj, "code", &code) ? json_object_get_int(code)
		                                                      : 0;
		st_info("watch: ERROR %d%s", c,
		        c == 410 ? " (resourceVersion too old): listing again" : "");
		x->relist = true;
	} else if (strcmp(type, "BOOKMARK") == 0) {
		note_rv(x, obj);
	} else {
		struct cs_dnat_node node;
		if (cs_dnat_node_parse(obj, (uint16_t)x->c.default_port, &node) == 0) {
			int changed = strcmp(type, "DELETED") == 0
			                      ? cs_dnat_set_remove(&x->nodes, node.name)
			                      : cs_dnat_set_put(&x->nodes, &node);
			if (changed > 0) {
				x->dirty = true;
				st_info("Node %s %s (%zu addresses, port %u)", node.name, type,
				        node.n_ips, (unsigned)node.port);
			}
		}
		note_rv(x, obj);
	}
	json_object_put(ev);
}

static size_t on_watch_data(char *p, size_t size, size_t n, void *user)
{
	struct ctl *x = user;
	size_t len = size * n;
	for (size_t i = 0; i < len; i++) {
		if (p[i] == '\n') {
			if (!x->line_over && x->line_len)
				on_event(x, x->line, x->line_len);
			x->line_len = 0;
			x->line_over = false;
			continue;
		}
		if (x->line_len >= LINE_MAX_BYTES) {
			x->line_over =
			        true; /* one event over 4 MiB: skipped; the next list repairs */
			x->relist = true;
			continue;
		}
		x->line[x->line_len++] = p[i];
	}
	return len;
}

static void watch_end(struct ctl *x)
{
	if (x->watch) {
		curl_multi_remove_handle(x->multi, x->watch);
		curl_easy_cleanup(x->watch);
		x->watch = NULL;
	}
	curl_slist_free_all(x->watch_hdrs);
	x->watch_hdrs = NULL;
	x->line_len = 0;
	x->line_over = false;
}

static int watch_start(struct ctl *x)
{
	x->watch = curl_easy_init();
	if (x->watch == NULL)
		return -1;
	char *sel = curl_easy_escape(x->watch, x->c.node_selector, 0);
	char url[4096], err[256] = "";
	snprintf(url, sizeof url,
	         "%s/api/v1/nodes?watch=1&labelSelector=%s&resourceVersion=%s&timeoutSeconds=%llu"
	         "&allowWatchBookmarks=true",
	         x->c.apiserver_url, sel ? sel : "", x->rv,
	         (unsigned long long)(x->c.watch_timeout_ms / 1000));
	curl_free(sel);
	x->watch_err[0] = '\0';
	if (cs_apiserver_setup(x->watch, &x->api, url, &x->watch_hdrs, x->watch_err, err,
	                       sizeof err) < 0) {
		st_warn("watching Nodes: %s", err);
		watch_end(x);
		return -1;
	}
	/* The watch runs for its timeout; only the connection has the apiserver deadline. */
	curl_easy_setopt(x->watch, CURLOPT_TIMEOUT_MS, (long)(x->c.watch_timeout_ms + 30000));
	curl_easy_setopt(x->watch, CURLOPT_WRITEFUNCTION, on_watch_data);
	curl_easy_setopt(x->watch, CURLOPT_WRITEDATA, x);
	curl_multi_add_handle(x->multi, x->watch);
	return 0;
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
	read_local(&x);
	st_info("cloudstream-dnat-controller %s: Nodes %s from %s -> %s:%u, %s, resync every %llu "
	        "ms",
	        spec.version, x.c.node_selector, x.c.apiserver_url, x.to_ip, (unsigned)x.to_port,
	        x.ipt, (unsigned long long)x.c.resync_interval_ms);
	bool listed = false, ready = false;
	uint64_t next_list = 0, next_check = 0, backoff = 500;
	while (!stop_flag) {
		uint64_t now = mono_ms();
		if ((!listed || x.relist) && now >= next_list && x.watch == NULL) {
			x.relist = false;
			if (list_nodes(&x) == 0) {
				listed = true;
				backoff = 500;
			} else {
				listed = false;
				next_list = now + backoff;
				backoff = backoff * 2 > 30000 ? 30000 : backoff * 2;
			}
		}
		if (listed && x.watch == NULL && !x.relist && watch_start(&x) < 0) {
			listed = false;
			next_list = now + backoff;
		}
		if (listed && (x.dirty || !ready)) {
			if (apply(&x, ready ? "Nodes changed" : "start") == 0 && !ready) {
				ready = true;
				next_check = mono_ms() + x.c.resync_interval_ms;
				if (x.c.ready_file && x.c.ready_file[0]) {
					FILE *f = fopen(x.c.ready_file, "w");
					if (f)
						fclose(f);
				}
			}
		}
		if (ready && mono_ms() >= next_check) {
			bool moved = read_local(&x);
			if (moved || !in_place(&x))
				apply(&x, moved ? "the host's addresses changed"
				                : "the chain or a jump was missing or changed: "
				                  "restored");
			next_check = mono_ms() + x.c.resync_interval_ms;
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
				next_list = mono_ms() + backoff;
			}
			watch_end(&x);
			break;
		}
		if (x.relist && x.watch) /* a 410 or an over-long event: list again now */
			watch_end(&x);
		curl_multi_poll(x.multi, NULL, 0, 200, NULL);
	}
	st_info("stopping; the rules stay (cloudstream-dnat remove removes them)");
	watch_end(&x);
	curl_multi_cleanup(x.multi);
	curl_global_cleanup();
	cs_dnat_set_cleanup(&x.nodes);
	free(x.applied);
	free(x.line);
	st_config_cleanup(&spec, &x.c);
	return 0;
}
