/*
 * edgestream/src/lib_config.c — the library's configuration API (edgestream.h): a configuration
 * (new, set, load from a file, free, copied through the option table), the checks an instance
 * runs on it at start (the cloud URLs, the tunnel's credentials and identity, the allow-list,
 * the kubelet), edgestream_config_check and edgestream_reconfigure.
 *
 * The seam: everything here reads or checks a configuration and builds no loop object (the
 * exceptions are small: a join at start, es_join_bootstrap, before any loop; reconfigure only
 * hands the copy over and wakes the loop, lib_loop.c applies it), so lib.c's start-up and
 * --check-config share one check (es__check_config).
 */
#include "es.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include <certs/certs.h>
#include <stream/log.h>
#include <stream/loop.h>

#include "backend.h"

/* ---- configuration --------------------------------------------------------------------- */

int edgestream_config_new(struct edgestream_config **out)
{
	struct edgestream_config *c = calloc(1, sizeof *c);
	if (c == NULL)
		return -ENOMEM;
	char err[256];
	int rc = st_config_defaults(&es_config_spec, &c->c, err, sizeof err);
	/* Embedded, no admin port unless asked for: the daemon's default is the daemon's (its
	 * st_config_load starts again from the option table). */
	if (rc == 0)
		rc = st_config_set(&es_config_spec, &c->c, "admin-listen", "", err, sizeof err);
	if (rc < 0) {
		st_config_cleanup(&es_config_spec, &c->c);
		free(c);
		return rc;
	}
	*out = c;
	return 0;
}

int edgestream_config_set(struct edgestream_config *cfg, const char *name, const char *value,
                          char *err, size_t errlen)
{
	return st_config_set(&es_config_spec, &cfg->c, name, value, err, errlen);
}

int edgestream_config_load_file(struct edgestream_config *cfg, const char *path, char *err,
                                size_t errlen)
{
	return st_config_load_file(&es_config_spec, &cfg->c, path, err, errlen);
}

void edgestream_config_free(struct edgestream_config *cfg)
{
	if (cfg == NULL)
		return;
	st_config_cleanup(&es_config_spec, &cfg->c);
	free(cfg);
}

/* A deep copy through the option table (st_config_copy_opt, as SIGHUP copies), so the caller
 * may free its configuration. @dst starts zeroed. */
int es__config_copy(struct es_config *dst, const struct es_config *src, char *err, size_t errlen)
{
	for (size_t i = 0; i < es_config_spec.num_opts; i++) {
		int rc = st_config_copy_opt(&es_config_spec.opts[i], dst, src);
		if (rc < 0) {
			snprintf(err, errlen, "%s: out of memory", es_config_spec.opts[i].name);
			return rc;
		}
	}
	return 0;
}

/* Node name and IP from the tunnel certificate, unless configured. */
static int identity(struct edgestream *es, char *err, size_t errlen)
{
	X509 *x;
	int rc = certs_load(es->cfg.tunnel_cert, &x, err, errlen);
	if (rc < 0)
		return rc;
	struct certs_identity id;
	rc = certs_x509_identity(x, &id);
	X509_free(x);
	if (rc < 0) {
		snprintf(err, errlen, "%s: identity unreadable", es->cfg.tunnel_cert);
		return rc;
	}
	if (es->cfg.node_name && es->cfg.node_name[0]) {
		snprintf(es->node, sizeof es->node, "%s", es->cfg.node_name);
	} else {
		enum certs_cn_mode mode = es->cfg.node_name_from == ST_NODE_NAME_FROM_CN
		                                  ? CERTS_CN_PLAIN
		                                  : CERTS_CN_NODE;
		if (certs_node_name_from_cn(id.cn, mode, es->node, sizeof es->node) < 0) {
			snprintf(err, errlen,
			         "%s: CN \"%.80s\" does not name a node (%s); set --node-name or "
			         "--node-name-from",
			         es->cfg.tunnel_cert, id.cn,
			         mode == CERTS_CN_NODE ? "system:node:<name> expected"
			                               : "not a name");
			return -EINVAL;
		}
	}
	if (es->cfg.internal_ip && es->cfg.internal_ip[0])
		snprintf(es->internal_ip, sizeof es->internal_ip, "%s", es->cfg.internal_ip);
	else if (id.num_ips > 0)
		snprintf(es->internal_ip, sizeof es->internal_ip, "%s", id.ips[0]);
	return 0;
}

static bool set_default(const struct es_config *c, const char *name, const char *value)
{
	(void)c;
	const struct st_opt *o = NULL;
	for (size_t i = 0; i < es_config_spec.num_opts; i++)
		if (strcmp(es_config_spec.opts[i].name, name) == 0)
			o = &es_config_spec.opts[i];
	return o && o->default_value && value && strcmp(o->default_value, value) == 0;
}

/* Where the tunnel's certificate comes from: the kubelet's rotating file, a join at start
 * (--join-token, when the files do not hold a usable pair yet), or the files as given. */
static int tunnel_credentials(struct edgestream *es, char *err, size_t errlen)
{
	struct es_config *c = &es->cfg;
	const char *krc = c->kubelet_rotating_cert;
	bool join = c->join_token && c->join_token[0];
	if (krc && krc[0]) {
		if (join || c->rotate_certificate ||
		    !set_default(c, "tunnel-cert", c->tunnel_cert) ||
		    !set_default(c, "tunnel-key", c->tunnel_key)) {
			snprintf(err, errlen,
			         "kubelet-rotating-cert replaces --tunnel-cert and --tunnel-key, "
			         "and "
			         "the kubelet rotates it: not with --join-token or "
			         "--rotate-certificate");
			return -EINVAL;
		}
		char *a = strdup(krc), *b = strdup(krc);
		if (a == NULL || b == NULL) {
			free(a);
			free(b);
			snprintf(err, errlen, "out of memory");
			return -ENOMEM;
		}
		free(c->tunnel_cert);
		free(c->tunnel_key);
		c->tunnel_cert = a; /* the certificate's PEM block and the key's, in one file */
		c->tunnel_key = b;
		return 0;
	}
	if ((join || c->rotate_certificate) && !es->curl_global)
		es->curl_global =
		        curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK; /* no thread yet */
	if (!join || certs_check_pair(c->tunnel_cert, c->tunnel_key, err, errlen) == 0)
		return 0; /* joined before: the token is not needed (and may be spent) */
	err[0] = '\0';
	return es_join_bootstrap(es, err, errlen);
}

int es_parse_cloud_urls(struct edgestream *es, const char *value, const char *server_name,
                        char *err, size_t errlen)
{
	es->n_urls = 0;
	const char *p = value;
	for (;;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		while (len > 0 && (*p == ' ' || *p == '\t')) {
			p++;
			len--;
		}
		while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t'))
			len--;
		char one[3 * ES_HOST_MAX];
		struct es_cloud_url *u = &es->urls[es->n_urls];
		if (es->n_urls == ES_MAX_CLOUD_URLS) {
			snprintf(err, errlen, "cloud-url: more than %u URLs", ES_MAX_CLOUD_URLS);
			return -EINVAL;
		}
		if (len == 0 || len >= sizeof one) {
			snprintf(err, errlen, "cloud-url %.200s: an empty or overlong entry",
			         value);
			return -EINVAL;
		}
		memcpy(one, p, len);
		one[len] = '\0';
		if (es_parse_url(one, "wss", 443, u->host, sizeof u->host, &u->port, u->path,
		                 sizeof u->path) < 0) {
			snprintf(err, errlen, "cloud-url %.200s: expected wss://HOST[:PORT][/PATH]",
			         one);
			return -EINVAL;
		}
		snprintf(u->name, sizeof u->name, "%s",
		         server_name && server_name[0] ? server_name : u->host);
		es->n_urls++;
		if (comma == NULL)
			break;
		p = comma + 1;
	}
	memcpy(es->cloud_host, es->urls[0].host, sizeof es->cloud_host);
	memcpy(es->cloud_path, es->urls[0].path, sizeof es->cloud_path);
	memcpy(es->cloud_name, es->urls[0].name, sizeof es->cloud_name);
	es->cloud_port = es->urls[0].port;
	return 0;
}

int es__check_config(struct edgestream *es, char *err, size_t errlen)
{
	struct es_config *c = &es->cfg;
	if (c->cloud_url == NULL || c->cloud_url[0] == '\0') {
		snprintf(err, errlen,
		         "cloud-url is required (wss://HOST:PORT/v1/kubeedge/connect)");
		return -EINVAL;
	}
	int urc = es_parse_cloud_urls(es, c->cloud_url, c->cloud_server_name, err, errlen);
	if (urc < 0)
		return urc;
	int rc = tunnel_credentials(es, err, errlen);
	if (rc < 0)
		return rc;
	rc = certs_check_pair(c->tunnel_cert, c->tunnel_key, err, errlen);
	if (rc < 0 || (rc = certs_check_cert(c->tunnel_ca, err, errlen)) < 0)
		return rc;
	if ((rc = identity(es, err, errlen)) < 0)
		return rc;
	if (c->cri_socket && c->cri_socket[0]) {
		if (strlen(c->cri_socket) >= ES_CRI_SOCKET_MAX) {
			snprintf(err, errlen, "cri-socket: path too long");
			return -EINVAL;
		}
		es->cri_enabled = true;
	}
	if (c->backoff_max_ms < c->backoff_initial_ms) {
		snprintf(err, errlen, "backoff-max is below backoff-initial");
		return -EINVAL;
	}
	for (size_t i = 0; i < c->local_ports.n; i++)
		if ((rc = es_allow_add(&es->allow, c->local_ports.v[i], err, errlen)) < 0)
			return -EINVAL;
	for (size_t i = 0; i < c->pod_ports.n; i++)
		if ((rc = es_allow_add_pod_port(&es->allow, c->pod_ports.v[i], err, errlen)) < 0)
			return -EINVAL;
	for (size_t i = 0; i < c->pod_cidrs.n; i++)
		if ((rc = es_allow_add_pod_cidr(&es->allow, c->pod_cidrs.v[i], err, errlen)) < 0)
			return -EINVAL;
	if (es->allow.n_pod_ports > 0 && es->allow.n_pod_cidrs == 0) {
		snprintf(err, errlen,
		         "--pod-ports needs --pod-cidr (which pod IPs are this node's)");
		return -EINVAL;
	}
	if (c->kubelet_url && c->kubelet_url[0] && (rc = es_kubelet_setup(es, err, errlen)) < 0)
		return rc;
	return 0;
}

int edgestream_reconfigure(struct edgestream *es, const struct edgestream_config *cfg)
{
	char err[256];
	struct es_config *c = calloc(1, sizeof *c);
	if (c == NULL)
		return -ENOMEM;
	if (es__config_copy(c, &cfg->c, err, sizeof err) < 0) {
		st_config_cleanup(&es_config_spec, c);
		free(c);
		return -ENOMEM;
	}
	struct es_config *old = atomic_exchange(&es->pending_cfg, c);
	if (old) { /* not applied yet: this one replaces it */
		st_config_cleanup(&es_config_spec, old);
		free(old);
	}
	if (es->ctx)
		lws_cancel_service(es->ctx);
	return 0;
}

int edgestream_config_check(const struct edgestream_config *cfg, char *err, size_t errlen)
{
	struct edgestream *es = calloc(1, sizeof *es);
	if (es == NULL)
		return -ENOMEM;
	es->inotify_fd = -1;
	pthread_mutex_init(&es->stats_lock, NULL);
	es_log_scope_init(es, cfg);
	const struct st_log_scope *prev = st_log_enter(&es->log_scope);
	err[0] = '\0';
	int rc = es__config_copy(&es->cfg, &cfg->c, err, errlen);
	const struct es_config *c = &es->cfg;
	char why[256];
	if (rc == 0 && c->join_token && c->join_token[0] &&
	    certs_check_pair(c->tunnel_cert, c->tunnel_key, why, sizeof why) < 0) {
		/* Not joined yet: the join at start makes the tunnel files, and a check must not
		 * spend the token (check_config would join). The cloud's URL is checked. */
		st_info("not joined yet (%s): the tunnel certificate comes from --join-token at "
		        "start; --check-config does not join",
		        why);
		if (c->cloud_url == NULL) {
			snprintf(err, errlen,
			         "cloud-url (none): expected wss://HOST[:PORT][/PATH]");
			rc = -EINVAL;
		} else {
			rc = es_parse_cloud_urls(es, c->cloud_url, c->cloud_server_name, err,
			                         errlen);
		}
	} else if (rc == 0) {
		rc = es__check_config(es, err, errlen);
	}
	es->cri_enabled = false; /* curl was never initialised */
	const char *admin = cfg->c.admin_listen;
	if (admin && admin[0]) {
		bool port_free;
		int lrc = st_loop_check_listen(admin, &port_free);
		if (lrc < 0) {
			size_t n = strlen(err);
			snprintf(err + n, errlen - n, "%sadmin-listen %s: %s", n ? "; " : "", admin,
			         lrc == -EINVAL ? "expected ADDR:PORT, [IPv6]:PORT or :PORT"
			                        : "not an address of this host");
			rc = rc < 0 ? rc : lrc;
		} else if (!port_free) {
			st_info("admin-listen %s: the address is this host's; its port is in use "
			        "now "
			        "(a running edgestream?)",
			        admin);
		}
	}
	edgestream_free(es);
	st_log_enter(prev);
	return rc;
}
