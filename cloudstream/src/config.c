/*
 * cloudstream/src/config.c — the option table. Every key is a flag (--name) and a JSON key of the
 * --config file; FLAGS.md is generated from this table (cloudstream --help-markdown).
 *
 * The table is one array, in the order FLAGS.md lists the options; its entries live in three
 * fragments by side (config_opts_tunnel.h: edges; config_opts_requests.h: kube-apiserver's
 * requests; config_opts_runtime.h: limits, the apiserver client, operations), included in order
 * below. This file keeps what they share (OFF(), the units, the enum names) and the spec.
 */
#include "config.h"

#include <stddef.h>

#include <stream/limits.h>

#define OFF(field) offsetof(struct cs_config, field)
#define MIB        (1024ull * 1024ull)

static const char *const ip_policy_names[] = {"cert", "trust-header", "ignore", "node-address",
                                              NULL};
static const char *const event_loop_names[] = {"epoll", "poll", NULL}; /* enum st_loop_kind */
static const char *const authz_mode_names[] = {"AlwaysAllow", "Webhook", NULL};
/* enum cs_serving_mode (servecert.h) */
static const char *const serving_mode_names[] = {"off", "ca", "csr", NULL};

static const struct st_opt options[] = {
#include "config_opts_tunnel.h"
#include "config_opts_requests.h"
#include "config_opts_runtime.h"
};

const struct st_config_spec cs_config_spec = {
        .prog = "cloudstream",
        .summary = "The cloud side of the stream tunnel: serves kube-apiserver's kubelet-API "
                   "requests (exec, attach, port-forward, logs, metrics) for edge nodes behind "
                   "NAT, through the websocket tunnels those nodes dial.",
        .version = "0.1.0",
        .kind = "CloudStreamConfig",
        .opts = options,
        .num_opts = sizeof options / sizeof options[0],
};
