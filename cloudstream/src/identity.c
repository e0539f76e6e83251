/*
 * cloudstream/src/identity.c — revocation (the deny list and the admin close) and the Node
 * objects' addresses for --internal-ip-policy node-address (see identity.h).
 *
 * File reads and apiserver requests run on the worker pool; their jobs carry copies of what they
 * need and come back to the loop, where the deny list is swapped and the registry changed. A
 * tunnel is named across threads only by its node name and ordinal, never by pointer: a result
 * for a tunnel that was replaced or closed meanwhile finds nothing and is dropped.
 */
#include "identity.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <curl/curl.h>
#include <json-c/json.h>

#include <stream/err.h>
#include <stream/filestamp.h>
#include <stream/log.h>
#include <stream/workq.h>

#include "apiserver.h"
#include "cs.h"
#include "denylist.h"

#define NODE_BODY_MAX      (4u << 20) /* a Node object is a few KiB; images lists grow it */
#define NODE_CACHE_ENTRIES 1024u      /* answers kept; the oldest goes first */

/* One Node object's addresses, as the apiserver last answered. */
struct node_answer {
	char node[CS_NODE_NAME_MAX_BYTES + 1];
	char ips[CS_REGISTRY_MAX_IPS][CS_IP_TEXT_MAX_BYTES + 1]; /* canonical (inet_ntop) */
	size_t n_ips;
	uint64_t expires_ms; /* 0: a lookup is on its way, no answer yet */
};

/* What the deny-list file looked like: any change of these is a change of the file. */
struct cs_identity {
	struct cs_denylist *deny;     /* NULL: nothing is denied */
	struct st_file_stamp loaded;  /* the file the list in force came from */
	struct st_file_stamp refused; /* the last file that did not parse (logged once) */
	bool reloading, reload_again;
	lws_sorted_usec_list_t sul_check; /* --deny-list-check-interval */
	struct cs_server *srv;
	struct node_answer *answers; /* NODE_CACHE_ENTRIES, used as a ring */
	size_t next_answer;
};

static const char *const refusal_names[CS_REFUSE_COUNT] = {
        "path",     "certificate", "hostname_override", "internal_ip", "ip_conflict", "denied",
        "draining", "limit",       "node_deleted",
};

const char *cs_refusal_name(enum cs_refusal r)
{
	return (unsigned)r < CS_REFUSE_COUNT ? refusal_names[r] : "?";
}

/* ---- the deny list ------------------------------------------------------------------------ */

/* Reads and parses @path (any thread). Returns 0 with *@out, or a negative errno with @err. */
static int deny_load(const char *path, struct cs_denylist **out, char *err, size_t cap)
{
	FILE *f = fopen(path, "rb");
	if (f == NULL) {
		int e = errno;
		snprintf(err, cap, "--deny-list %s: %s", path, strerror(e));
		return -e;
	}
	struct stat stt;
	if (fstat(fileno(f), &stt) < 0 || (size_t)stt.st_size > CS_DENYLIST_MAX_FILE_BYTES) {
		fclose(f);
		snprintf(err, cap, "--deny-list %s: unreadable or over %u bytes", path,
		         CS_DENYLIST_MAX_FILE_BYTES);
		return -EMSGSIZE;
	}
	size_t size = (size_t)stt.st_size;
	char *text = malloc(size ? size : 1);
	size_t n = text ? fread(text, 1, size, f) : 0;
	fclose(f);
	if (text == NULL) {
		snprintf(err, cap, "--deny-list %s: out of memory", path);
		return -ENOMEM;
	}
	struct cs_denylist_error pe;
	int rc = cs_denylist_parse(text, n, out, &pe);
	free(text);
	if (rc < 0)
		snprintf(err, cap, "--deny-list %s line %zu: %s", path, pe.line, pe.why);
	return rc;
}

const char *cs_identity_denied(const struct cs_server *srv, const char *node, const char *serial)
{
	const struct cs_denylist *d = srv->ident ? srv->ident->deny : NULL;
	if (serial && serial[0] && cs_denylist_has_serial(d, serial, strlen(serial)))
		return "is revoked: its certificate serial is on the deny list";
	if (cs_denylist_has_node(d, node, strlen(node)))
		return "is revoked: the node is on the deny list";
	return NULL;
}

/* Closes every tunnel the (new) deny list names. */
static void deny_sweep(struct cs_server *srv)
{
	struct cs_tunnel *t = cs_tunnel_next(srv, NULL);
	while (t) {
		struct cs_tunnel *next = cs_tunnel_next(srv, t);
		if (cs_identity_denied(srv, cs_tunnel_node(t), cs_tunnel_serial(t))) {
			srv->m.tunnels_closed_denied++;
			cs_tunnel_revoke(t, "revoked by the deny list (reloaded)");
		}
		t = next;
	}
}

struct deny_job {
	struct cs_server *srv;
	char *path;
	bool if_changed;          /* the periodic check: read nothing when the file is as loaded */
	struct st_file_stamp old; /* the loaded file's, copied at submit */
	/* results (worker → loop) */
	struct st_file_stamp now;
	bool unchanged;
	struct cs_denylist *list;
	int rc;
	char err[512];
};

static void deny_work(void *arg)
{
	struct deny_job *j = arg;
	st_file_stamp_read(j->path, &j->now);
	if (j->if_changed && st_file_stamp_equal(&j->now, &j->old)) {
		j->unchanged = true;
		return;
	}
	j->rc = deny_load(j->path, &j->list, j->err, sizeof j->err);
}

static void deny_done(void *arg, int status)
{
	struct deny_job *j = arg;
	struct cs_server *srv = j->srv;
	struct cs_identity *id = srv->ident;
	if (status != 0 || id == NULL || j->unchanged) {
		/* nothing to do */
	} else if (j->rc == 0) {
		cs_denylist_free(id->deny);
		id->deny = j->list;
		j->list = NULL;
		id->loaded = j->now;
		st_info("deny list reloaded: %zu serials, %zu nodes", cs_denylist_serials(id->deny),
		        cs_denylist_nodes(id->deny));
		deny_sweep(srv);
	} else if (!j->if_changed || !st_file_stamp_equal(&j->now, &id->refused)) {
		/* once per bad version of the file from the periodic check; at every SIGHUP */
		id->refused = j->now;
		st_err("deny list not reloaded, the old one stays: %s", j->err);
	}
	cs_denylist_free(j->list);
	free(j->path);
	free(j);
	if (id) {
		id->reloading = false;
		if (id->reload_again && status == 0) {
			id->reload_again = false;
			cs_identity_reload(srv);
		}
	}
}

static void deny_start(struct cs_server *srv, bool if_changed)
{
	struct cs_identity *id = srv->ident;
	if (id == NULL || srv->cfg.deny_list == NULL || srv->cfg.deny_list[0] == '\0')
		return;
	if (id->reloading) {
		id->reload_again |= !if_changed; /* a SIGHUP during a check still reads */
		return;
	}
	struct deny_job *j = calloc(1, sizeof *j);
	if (j)
		j->path = strdup(srv->cfg.deny_list);
	int rc = j && j->path ? 0 : -ENOMEM;
	if (rc == 0) {
		j->srv = srv;
		j->if_changed = if_changed;
		j->old = id->loaded;
		rc = st_workq_submit(srv->wq, deny_work, deny_done, j);
	}
	if (rc < 0) {
		if (!if_changed)
			st_err("deny list not reloaded: %s; send SIGHUP again",
			       rc == -EAGAIN ? "worker pool busy" : st_strerror(rc));
		if (j)
			free(j->path);
		free(j);
		return;
	}
	id->reloading = true;
}

void cs_identity_reload(struct cs_server *srv)
{
	deny_start(srv, false);
}

static void on_deny_check(lws_sorted_usec_list_t *sul)
{
	struct cs_identity *id = lws_container_of(sul, struct cs_identity, sul_check);
	deny_start(id->srv, true);
	lws_sul_schedule(id->srv->ctx, 0, &id->sul_check, on_deny_check,
	                 (lws_usec_t)id->srv->cfg.deny_list_check_interval_ms * LWS_US_PER_MS);
}

int cs_identity_start(struct cs_server *srv)
{
	struct cs_identity *id = srv->ident;
	if (id && srv->cfg.deny_list && srv->cfg.deny_list[0])
		lws_sul_schedule(srv->ctx, 0, &id->sul_check, on_deny_check,
		                 (lws_usec_t)srv->cfg.deny_list_check_interval_ms * LWS_US_PER_MS);
	return cs_nodewatch_start(srv);
}

void cs_identity_stop(struct cs_server *srv)
{
	if (srv->ident)
		lws_sul_cancel(&srv->ident->sul_check);
	cs_nodewatch_stop(srv);
}

int cs_identity_new(struct cs_server *srv)
{
	const struct cs_config *c = &srv->cfg;
	if (c->internal_ip_policy == CS_IP_POLICY_NODE_ADDRESS &&
	    (c->apiserver_url == NULL || c->apiserver_url[0] == '\0')) {
		st_err("--internal-ip-policy node-address needs --apiserver-url (the Node "
		       "objects)");
		return -EINVAL;
	}
	struct cs_identity *id = calloc(1, sizeof *id);
	if (id == NULL ||
	    (c->internal_ip_policy == CS_IP_POLICY_NODE_ADDRESS &&
	     (id->answers = calloc(NODE_CACHE_ENTRIES, sizeof *id->answers)) == NULL)) {
		free(id);
		st_err("out of memory at start");
		return -ENOMEM;
	}
	if (c->deny_list && c->deny_list[0]) {
		char err[512];
		st_file_stamp_read(c->deny_list, &id->loaded);
		int rc = deny_load(c->deny_list, &id->deny, err, sizeof err);
		if (rc < 0) {
			st_err("%s", err);
			free(id->answers);
			free(id);
			return rc;
		}
		st_info("deny list: %zu serials, %zu nodes", cs_denylist_serials(id->deny),
		        cs_denylist_nodes(id->deny));
	}
	id->srv = srv;
	srv->ident = id;
	return 0;
}

void cs_identity_free(struct cs_server *srv)
{
	struct cs_identity *id = srv->ident;
	if (id == NULL)
		return;
	cs_denylist_free(id->deny);
	free(id->answers);
	free(id);
	srv->ident = NULL;
}

/* ---- shared IPs ---------------------------------------------------------------------------- */

void cs_identity_note_shared(struct cs_server *srv, const char *ip, const char *node)
{
	const char *names[CS_REGISTRY_MAX_IP_OWNERS];
	size_t n =
	        cs_registry_ip_owners(srv->reg, ip, strlen(ip), names, CS_REGISTRY_MAX_IP_OWNERS);
	const char *other = "?";
	for (size_t i = 0; i < n && i < CS_REGISTRY_MAX_IP_OWNERS; i++)
		if (strcmp(names[i], node) != 0)
			other = names[i];
	srv->m.shared_ips++;
	st_log(ST_LOG_WARN, node, 0,
	       "IP %s is verified for both node %s and node %s (%zu nodes share it): requests "
	       "addressed only by it are refused (409) until one leaves",
	       ip, node, other, n);
}

/* ---- Node addresses (node-address policy) -------------------------------------------------- */

static struct node_answer *answer_find(struct cs_identity *id, const char *node)
{
	for (size_t i = 0; id->answers && i < NODE_CACHE_ENTRIES; i++)
		if (id->answers[i].node[0] && strcmp(id->answers[i].node, node) == 0)
			return &id->answers[i];
	return NULL;
}

/* The canonical text of IP @in, or "" when it is not an IP. */
static void ip_canon(const char *in, char *out, size_t cap)
{
	unsigned char a[16];
	out[0] = '\0';
	if (inet_pton(AF_INET, in, a) == 1)
		inet_ntop(AF_INET, a, out, (socklen_t)cap);
	else if (inet_pton(AF_INET6, in, a) == 1)
		inet_ntop(AF_INET6, a, out, (socklen_t)cap);
}

int cs_identity_node_has_ip(struct cs_server *srv, const char *node, const char *ip)
{
	struct node_answer *a = srv->ident ? answer_find(srv->ident, node) : NULL;
	if (a == NULL || a->expires_ms == 0 || a->expires_ms <= st_now_ms())
		return -ENOENT;
	char c[CS_IP_TEXT_MAX_BYTES + 1];
	ip_canon(ip, c, sizeof c);
	for (size_t i = 0; i < a->n_ips; i++)
		if (c[0] && strcmp(a->ips[i], c) == 0)
			return 1;
	return 0;
}

struct node_job {
	struct cs_server *srv;
	char node[CS_NODE_NAME_MAX_BYTES + 1];
	char ip[CS_IP_TEXT_MAX_BYTES + 1];
	uint64_t ordinal; /* the tunnel to give the IP to; 0: only fill the cache */
	/* results (worker → loop) */
	long http_status;
	char ips[CS_REGISTRY_MAX_IPS][CS_IP_TEXT_MAX_BYTES + 1];
	size_t n_ips;
	char error[CURL_ERROR_SIZE + 64];
	struct cs_api_body body;
};

/* status.addresses[].address of a Node object: the IPs (hostnames are skipped). */
static void node_addresses(struct node_job *j)
{
	struct json_tokener *tok = json_tokener_new_ex(32);
	struct json_object *obj =
	        tok ? json_tokener_parse_ex(tok, j->body.p, (int)j->body.len) : NULL;
	json_tokener_free(tok);
	struct json_object *status, *addrs;
	if (obj == NULL) {
		snprintf(j->error, sizeof j->error, "the apiserver's answer is not JSON");
	} else if (json_object_object_get_ex(obj, "status", &status) &&
	           json_object_object_get_ex(status, "addresses", &addrs) &&
	           json_object_is_type(addrs, json_type_array)) {
		size_t n = json_object_array_length(addrs);
		for (size_t i = 0; i < n && j->n_ips < CS_REGISTRY_MAX_IPS; i++) {
			struct json_object *e = json_object_array_get_idx(addrs, i), *addr;
			if (!json_object_object_get_ex(e, "address", &addr) ||
			    !json_object_is_type(addr, json_type_string))
				continue;
			ip_canon(json_object_get_string(addr), j->ips[j->n_ips], sizeof j->ips[0]);
			if (j->ips[j->n_ips][0])
				j->n_ips++;
		}
	}
	json_object_put(obj);
}

static void node_work(void *arg)
{
	struct node_job *j = arg;
	const struct cs_config *c = &j->srv->cfg;
	char url[1024];
	snprintf(url, sizeof url, "%s/api/v1/nodes/%s", c->apiserver_url, j->node);
	j->body.max = NODE_BODY_MAX;
	j->http_status = cs_apiserver_call(c, url, &(struct cs_api_request){0}, &j->body, j->error,
	                                   sizeof j->error);
	if (j->http_status == 200 && j->body.p)
		node_addresses(j);
	free(j->body.p);
	j->body = (struct cs_api_body){0};
}

/* The Node's answer is in: cache it, and give the tunnel its IP when the Node lists it. */
static void node_done(void *arg, int status)
{
	struct node_job *j = arg;
	struct cs_server *srv = j->srv;
	struct cs_identity *id = srv->ident;
	bool answered = status == 0 && j->error[0] == '\0' &&
	                (j->http_status == 200 || j->http_status == 404);
	struct node_answer *a = id ? answer_find(id, j->node) : NULL;
	if (a && answered) {
		memcpy(a->ips, j->ips, sizeof a->ips);
		a->n_ips = j->n_ips;
		a->expires_ms = st_now_ms() + srv->cfg.pod_cache_ttl_ms;
	} else if (a && a->expires_ms == 0) {
		a->node[0] = '\0'; /* no answer: the next admission asks again */
	}
	if (status != 0 || j->ordinal == 0 || id == NULL)
		goto out;
	struct cs_tunnel *t = cs_registry_get(srv->reg, j->node, strlen(j->node));
	if (t == NULL || cs_tunnel_ordinal(t) != j->ordinal)
		goto out; /* gone or replaced: the new tunnel has its own lookup */
	if (!answered) {
		st_log(ST_LOG_WARN, j->node, 0,
		       "SessionInternalIP %s not verified: the apiserver lookup of the Node failed "
		       "(%s, HTTP %ld); not routed by it",
		       j->ip, j->error[0] ? j->error : "unexpected status", j->http_status);
		goto out;
	}
	char c[CS_IP_TEXT_MAX_BYTES + 1];
	ip_canon(j->ip, c, sizeof c);
	bool listed = false;
	for (size_t i = 0; i < j->n_ips; i++)
		listed |= c[0] && strcmp(j->ips[i], c) == 0;
	if (!listed) {
		srv->m.node_ip_unlisted++;
		st_log(ST_LOG_WARN, j->node, 0,
		       "SessionInternalIP %s is not in Node %s's status.addresses%s: not routed by "
		       "it",
		       j->ip, j->node, j->http_status == 404 ? " (no such Node)" : "");
		goto out;
	}
	enum cs_ip_verdict v;
	int rc = cs_registry_add_ip(srv->reg, j->node, strlen(j->node), t, j->ip,
	                            CS_IP_CLAIM_VERIFIED, &v);
	if (rc < 0) {
		st_log(ST_LOG_WARN, j->node, 0, "SessionInternalIP %s not registered: %s", j->ip,
		       st_strerror(rc));
		goto out;
	}
	srv->m.node_ip_verified++;
	st_log(ST_LOG_INFO, j->node, 0,
	       "SessionInternalIP %s verified: Node %s lists it in status.addresses", j->ip,
	       j->node);
	if (v == CS_IP_SHARE)
		cs_identity_note_shared(srv, j->ip, j->node);
out:
	free(j);
}

int cs_identity_verify_ip(struct cs_server *srv, const char *node, uint64_t ordinal, const char *ip)
{
	struct cs_identity *id = srv->ident;
	if (id == NULL || id->answers == NULL || strlen(node) > CS_NODE_NAME_MAX_BYTES ||
	    strlen(ip) > CS_IP_TEXT_MAX_BYTES)
		return -EINVAL;
	struct node_answer *a = answer_find(id, node);
	if (a && a->expires_ms == 0 && ordinal == 0)
		return 0; /* one lookup on its way fills the cache for the retry */
	struct node_job *j = calloc(1, sizeof *j);
	if (j == NULL)
		return -ENOMEM;
	j->srv = srv;
	j->ordinal = ordinal;
	snprintf(j->node, sizeof j->node, "%s", node);
	snprintf(j->ip, sizeof j->ip, "%s", ip);
	int rc = st_workq_submit(srv->wq, node_work, node_done, j);
	if (rc < 0) {
		free(j);
		return rc;
	}
	if (a == NULL) {
		a = &id->answers[id->next_answer];
		id->next_answer = (id->next_answer + 1) % NODE_CACHE_ENTRIES;
		memset(a, 0, sizeof *a);
		snprintf(a->node, sizeof a->node, "%s", node);
	}
	a->expires_ms = a->expires_ms > st_now_ms() ? a->expires_ms : 0;
	return 0;
}
