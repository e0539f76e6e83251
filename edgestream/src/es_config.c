/*
 * edgestream/src/es_config.c — the option table. Every key is a daemon flag (--name), a JSON key of
 * the --config file and a name for edgestream_config_set(); FLAGS.md is generated from it
 * (edgestream --help-markdown).
 */
#include "es_config.h"

#include <stddef.h>

#include <stream/limits.h>

#define OFF(field) offsetof(struct es_config, field)

static const char *const kubelet_http2_names[] = {"auto", "off", NULL};

static const struct st_opt options[] = {
        /* ---- tunnel ---- */
        {.name = "cloud-url",
         .type = ST_OPT_STRING,
         .offset = OFF(cloud_url),
         .value_name = "URL[,URL...]",
         .help = "The cloud's tunnel endpoint. Required. Several URLs separated by commas (at "
                 "most 8: cloudstream replicas without a load balancer in front) are tried in "
                 "turn: a dial that fails goes on to the next at once, a whole round that "
                 "failed backs off (--backoff-initial). Host names are resolved on a worker "
                 "thread, never on the event loop; the answer is kept until a dial to it "
                 "fails (then the next address, or the name again), refreshed in the "
                 "background once 5 min old; the "
                 "certificate is checked against --cloud-server-name or the URL's host.",
         .example = "--cloud-url wss://cloudstream.example:10004/v1/kubeedge/connect",
         .since = "0.1"},
        {.name = "cloud-server-name",
         .type = ST_OPT_STRING,
         .offset = OFF(cloud_server_name),
         .value_name = "NAME",
         .help = "Name (DNS or IP) the cloud's certificate must carry; default the host of "
                 "--cloud-url. The certificate is always verified against --tunnel-ca (the "
                 "KubeEdge edge does not verify it at all).",
         .since = "0.1"},
        ST_OPT_TUNNEL_CERT(
                OFF(tunnel_cert), "/etc/edgestream/pki/edge.crt",
                "This node's client certificate (PEM) for the tunnel; the cloud takes the node "
                "name from it. Re-read when the file changes (see --cert-check-interval)."),
        ST_OPT_TUNNEL_KEY(OFF(tunnel_key), "/etc/edgestream/pki/edge.key",
                          "Private key of --tunnel-cert."),
        ST_OPT_TUNNEL_CA(OFF(tunnel_ca), "/etc/edgestream/pki/tunnel-ca.crt",
                         "CA that signed the cloud's tunnel certificate."),
        {.name = "join-token",
         .type = ST_OPT_STRING,
         .offset = OFF(join_token),
         .value_name = "TOKEN",
         .help = "A join token from `stream-certs token` ([a-z0-9]{6}.[a-z0-9]{16}): when "
                 "--tunnel-cert and --tunnel-key do not hold a usable pair at start, edgestream "
                 "generates a key here (written 0600 to --tunnel-key; it never leaves the "
                 "node), fetches the cloud's CA without trusting it, checks it against "
                 "--cloud-ca-hash, sends a signing request with the token to cloudstream "
                 "(HTTPS to --join-url, verified with the pinned CA) and writes the "
                 "certificate to --tunnel-cert and the cloud's CA bundle to --tunnel-ca. Needs "
                 "--node-name and --cloud-ca-hash. A refusal (reused, expired, another node's "
                 "or unknown token) stops the start with cloudstream's reason.",
         .example = "--join-token abcdef.0123456789abcdef",
         .flags = ST_OPT_F_SECRET,
         .since = "0.3"},
        {.name = "cloud-ca-hash",
         .type = ST_OPT_STRING,
         .offset = OFF(cloud_ca_hash),
         .value_name = "sha256:HEX",
         .help = "The cloud's CA as `stream-certs ca-hash` prints it (kubeadm's "
                 "--discovery-token-ca-cert-hash form: SHA-256 of the CA's "
                 "SubjectPublicKeyInfo). A join refuses a cloud whose CA bundle has no such "
                 "certificate, or whose server certificate does not chain to it.",
         .example = "--cloud-ca-hash "
                    "sha256:5fa6baf9ab7590f12a54f85d38cdaed07c2c0520429e70e10e496c76105ad8a8",
         .since = "0.3"},
        {.name = "join-url",
         .type = ST_OPT_STRING,
         .offset = OFF(join_url),
         .value_name = "URL",
         .help = "Where joins and renewals go: https://HOST:PORT of cloudstream's tunnel port "
                 "(its certificate must name HOST). Default: the host and port of --cloud-url, "
                 "the certificate checked for --cloud-server-name as the tunnel's is.",
         .since = "0.3"},
        {.name = "rotate-certificate",
         .type = ST_OPT_BOOL,
         .offset = OFF(rotate_certificate),
         .default_value = "false",
         .value_name = "BOOL",
         .help = "Renew --tunnel-cert at two thirds of its lifetime: a new key is generated "
                 "here, its signing request is sent with the current certificate (mTLS, no "
                 "token) to cloudstream, and the new key, certificate and CA bundle are written "
                 "and swapped into the tunnel's TLS context (the tunnel and its streams stay "
                 "up; the next handshake uses them). A failed renewal is retried. Needs a "
                 "cloudstream with --signer-cert and --signer-key.",
         .since = "0.3"},
        {.name = "kubelet-rotating-cert",
         .type = ST_OPT_STRING,
         .offset = OFF(kubelet_rotating_cert),
         .value_name = "FILE",
         .help = "Use the kubelet's own rotating client certificate for the tunnel: one PEM "
                 "file holding the certificate and its key (system:node:<name>), usually the "
                 "symlink /var/lib/kubelet/pki/kubelet-client-current.pem that the kubelet "
                 "replaces when it rotates. Replaces --tunnel-cert and --tunnel-key; re-read "
                 "when the link or file changes (--cert-check-interval). cloudstream's "
                 "--tunnel-ca must then hold the cluster's CA.",
         .example = "--kubelet-rotating-cert /var/lib/kubelet/pki/kubelet-client-current.pem",
         .flags = ST_OPT_F_RELOAD,
         .since = "0.3"},
        {.name = "node-name",
         .type = ST_OPT_STRING,
         .offset = OFF(node_name),
         .value_name = "NAME",
         .help = "Node name sent as SessionHostNameOverride. Default: the name in "
                 "--tunnel-cert (see --node-name-from); a different name is refused by "
                 "cloudstream, so this is only for KubeEdge clouds that need it.",
         .since = "0.1"},
        ST_OPT_NODE_NAME_FROM(OFF(node_name_from),
                              "How the certificate names the node: system-node-cn "
                              "(CN=system:node:<name>) or cn (the CN is the name)."),
        {.name = "internal-ip",
         .type = ST_OPT_STRING,
         .offset = OFF(internal_ip),
         .value_name = "IP",
         .help = "Sent as SessionInternalIP; cloudstream accepts it only when the certificate "
                 "carries that IP. Default: the first IP of the certificate, if any.",
         .since = "0.1"},
        {.name = "extensions",
         .type = ST_OPT_BOOL,
         .offset = OFF(extensions),
         .default_value = "true",
         .value_name = "BOOL",
         .help = "Offer our protocol extensions (flow control, half-close, error codes, binary "
                 "frames, raw responses, TCP). A KubeEdge cloud ignores the offer and gets the "
                 "base protocol either way.",
         .since = "0.1"},
        ST_OPT_PING_INTERVAL(
                OFF(ping_interval_ms), "5s", 100,
                "Quiet time after which the edge pings the cloud (KubeEdge's edge pings every "
                "5 s); anything received resets it."),
        ST_OPT_DEAD_PEER_TIMEOUT(
                OFF(dead_peer_timeout_ms), "30s", 200,
                "Nothing received from the cloud (no message, no PONG) for this long: the "
                "tunnel is dead, drop it and redial. Time while the edge itself is not reading "
                "the tunnel (back-pressure) does not count."),
        {.name = "connect-timeout",
         .type = ST_OPT_DURATION_MS,
         .offset = OFF(connect_timeout_ms),
         .default_value = "10s",
         .min = 1000,
         .max = 600000,
         .value_name = "DURATION",
         .help = "Deadline for dialling the cloud: TCP, TLS and the websocket upgrade.",
         .since = "0.1"},
        {.name = "backoff-initial",
         .type = ST_OPT_DURATION_MS,
         .offset = OFF(backoff_initial_ms),
         .default_value = "1s",
         .min = 10,
         .max = 3600000,
         .value_name = "DURATION",
         .help = "First redial delay; each failure doubles it up to --backoff-max, and each "
                 "delay is drawn in [d/2, d] (jitter) so edges do not redial in lockstep. After "
                 "a tunnel that was up drops, the first redial is drawn in [0, 2 * this] "
                 "instead: a fleet cut off by one cloud restart spreads over that window.",
         .since = "0.1"},
        {.name = "backoff-max",
         .type = ST_OPT_DURATION_MS,
         .offset = OFF(backoff_max_ms),
         .default_value = "60s",
         .min = 10,
         .max = 3600000,
         .value_name = "DURATION",
         .help = "Longest redial delay.",
         .since = "0.1"},
        {.name = "backoff-reset",
         .type = ST_OPT_DURATION_MS,
         .offset = OFF(backoff_reset_ms),
         .default_value = "60s",
         .min = 0,
         .max = 3600000,
         .value_name = "DURATION",
         .help = "A tunnel up this long counts as stable: the next redial starts again from "
                 "--backoff-initial.",
         .since = "0.1"},
        {.name = "cert-check-interval",
         .type = ST_OPT_DURATION_MS,
         .offset = OFF(cert_check_interval_ms),
         .default_value = "10s",
         .min = 100,
         .max = 86400000,
         .value_name = "DURATION",
         .help = "How often the certificate files are checked for changes (a rotated "
                 "certificate is used from the next handshake; SIGHUP checks at once).",
         .flags = ST_OPT_F_LIVE,
         .since = "0.1"},
        /* ---- backends ---- */
        {.name = "kubelet-url",
         .type = ST_OPT_STRING,
         .offset = OFF(kubelet_url),
         .default_value = "https://127.0.0.1:10250",
         .value_name = "URL",
         .help = "The local kubelet (https://HOST:PORT) that serves kubelet API paths; empty: "
                 "no kubelet backend (such requests are refused). On a KubeEdge node, edged's "
                 "read-only port: http://127.0.0.1:10350 (plain http is accepted only to a "
                 "loopback IP; --kubelet-cert/-key/-ca are then unused). A host name is "
                 "resolved on a worker thread (at start, again when a connect to its address "
                 "fails, in the background once the answer is 5 min old), never on the event "
                 "loop; the "
                 "address is dialled, the name is the one the certificate is checked against "
                 "(unless --kubelet-server-name) and the Host header's. A name that does not "
                 "resolve fails the request with ERROR unreachable (502) and the reason.",
         .since = "0.1"},
        {.name = "kubelet-server-name",
         .type = ST_OPT_STRING,
         .offset = OFF(kubelet_server_name),
         .value_name = "NAME",
         .help = "Name the kubelet's serving certificate must carry; default the host of "
                 "--kubelet-url.",
         .since = "0.1"},
        {.name = "kubelet-cert",
         .type = ST_OPT_STRING,
         .offset = OFF(kubelet_cert),
         .value_name = "FILE",
         .help = "Client certificate edgestream presents to the kubelet (the kubelet "
                 "authorises it; e.g. the apiserver-kubelet-client identity).",
         .since = "0.1"},
        {.name = "kubelet-key",
         .type = ST_OPT_STRING,
         .offset = OFF(kubelet_key),
         .value_name = "FILE",
         .help = "Private key of --kubelet-cert.",
         .since = "0.1"},
        {.name = "kubelet-ca",
         .type = ST_OPT_STRING,
         .offset = OFF(kubelet_ca),
         .value_name = "FILE",
         .help = "CA of the kubelet's serving certificate; default the system store.",
         .since = "0.1"},
        {.name = "local-port",
         .type = ST_OPT_STRING_LIST,
         .offset = OFF(local_ports),
         .value_name = "NAME=PORT",
         .help = "Allow-list of local ports (127.0.0.1, plain HTTP or TCP) the cloud may "
                 "reach: HTTP via the path /ports/NAME/... (for example "
                 "/api/v1/nodes/<node>/proxy/ports/node-exporter/metrics) and raw TCP via "
                 "TCP_CONNECT. Repeat the flag or separate with commas. None by default: "
                 "every other port is refused and never dialled.",
         .example = "--local-port node-exporter=9100,app-debug=6060",
         .since = "0.1"},
        {.name = "pod-ports",
         .type = ST_OPT_STRING_LIST,
         .offset = OFF(pod_ports),
         .value_name = "PORT",
         .help = "Ports on which the cloud may reach pod IPs of this node with TCP_CONNECT "
                 "(cloudstream's front door: webhooks and aggregated APIs served by pods "
                 "here). Empty by default: pod IPs are refused and never dialled. Needs "
                 "--pod-cidr. (The kubelet itself is the TCP target \"kubelet\", "
                 "--kubelet-url's host and port, and needs nothing here.)",
         .example = "--pod-ports 443,8443",
         .since = "0.2"},
        {.name = "pod-cidr",
         .type = ST_OPT_STRING_LIST,
         .offset = OFF(pod_cidrs),
         .value_name = "CIDR",
         .help = "IPv4 ranges the pod IPs of --pod-ports must lie in (this node's pod "
                 "CIDR); any other address is refused and never dialled.",
         .example = "--pod-cidr 10.244.3.0/24",
         .since = "0.2"},
        {.name = "backend-dial-timeout",
         .type = ST_OPT_DURATION_MS,
         .offset = OFF(backend_dial_timeout_ms),
         .default_value = "5s",
         .min = 100,
         .max = 600000,
         .value_name = "DURATION",
         .help = "Deadline for a backend's TCP connect, including the wait for the "
                 "kubelet's address when its name is being resolved; the cloud gets ERROR "
                 "timeout (or an HTTP 504 for a base-protocol cloud).",
         .flags = ST_OPT_F_LIVE,
         .since = "0.1"},
        {.name = "backend-handshake-timeout",
         .type = ST_OPT_DURATION_MS,
         .offset = OFF(backend_handshake_timeout_ms),
         .default_value = "10s",
         .min = 100,
         .max = 600000,
         .value_name = "DURATION",
         .help = "Deadline for the TLS handshake with the kubelet.",
         .flags = ST_OPT_F_LIVE,
         .since = "0.1"},
        ST_OPT_DRAIN_TIMEOUT(
                OFF(drain_timeout_ms), "10s",
                "On SIGTERM (edgestream_stop() when embedded), how long streams in flight may "
                "finish before the tunnel closes; new streams are refused meanwhile (the cloud "
                "answers 503, \"edgestream is shutting down\"). A second SIGTERM, or 0, stops "
                "at once. Keep it under the DaemonSet's terminationGracePeriodSeconds."),
        ST_OPT_STALL_TIMEOUT(
                OFF(stall_timeout_ms),
                "Base-protocol (KubeEdge) clouds only, which have no per-stream flow control: "
                "a stream whose queue toward its backend is full pauses reading of the whole "
                "tunnel; if the backend has not drained it to the low mark after this long "
                "the stream is cut (REMOVE to the cloud; counted in "
                "edgestream_stream_stall_cuts_total), so one backend that stops reading holds "
                "up the other streams for at most this long at a time."),
        {.name = "kubelet-idle-connections",
         .type = ST_OPT_U64,
         .offset = OFF(kubelet_idle_connections),
         .default_value = "8",
         .min = 0,
         .max = 1024,
         .value_name = "N",
         .help = "Kubelet connections kept open after a plain HTTP request (metrics, stats, "
                 "logs) for the next one, so a short request skips the TCP and TLS set-up. 0: "
                 "a connection per request (Connection: close).",
         .since = "0.1"},
        {.name = "kubelet-idle-timeout",
         .type = ST_OPT_DURATION_MS,
         .offset = OFF(kubelet_idle_timeout_ms),
         .default_value = "30s",
         .min = 100,
         .max = 3600000,
         .value_name = "DURATION",
         .help = "How long an idle kubelet connection is kept.",
         .flags = ST_OPT_F_LIVE,
         .since = "0.1"},
        {.name = "kubelet-http2",
         .type = ST_OPT_ENUM,
         .offset = OFF(kubelet_http2),
         .enum_names = kubelet_http2_names,
         .default_value = "auto",
         .value_name = "auto|off",
         .help = "auto: the kubelet connection offers ALPN h2 and, when the kubelet picks it, "
                 "plain GET and HEAD requests (logs, follow too, metrics, stats, pods) become "
                 "streams on one shared connection per kubelet (another opens only at the "
                 "kubelet's SETTINGS_MAX_CONCURRENT_STREAMS), each with its own flow control "
                 "following the cloud; the cloud sees the same HTTP/1.1 answer. A kubelet that "
                 "picks http/1.1 gets HTTP/1.1 connections from then on. Upgrades "
                 "(exec/attach/portForward) always go over HTTP/1.1. off: HTTP/1.1 only.",
         .since = "0.3"},
        {.name = "cri-socket",
         .type = ST_OPT_STRING,
         .offset = OFF(cri_socket),
         .value_name = "PATH",
         .help = "The container runtime's CRI socket (e.g. /run/containerd/containerd.sock). "
                 "When set, exec, attach and portForward are served through the runtime (the "
                 "edge finds the pod and container by the kubelet's labels, asks the runtime "
                 "for a streaming URL per request and relays the upgrade to it), and "
                 "containerLogs from the runtime's log files with the kubelet's semantics. "
                 "Empty: they go to the kubelet.",
         .since = "0.1"},
        {.name = "cri-timeout",
         .type = ST_OPT_DURATION_MS,
         .offset = OFF(cri_timeout_ms),
         .default_value = "10s",
         .min = 100,
         .max = 600000,
         .value_name = "DURATION",
         .help = "Deadline for each call to the runtime (the cloud gets ERROR timeout).",
         .since = "0.1"},
        /* ---- limits and flow control ---- */
        {.name = "max-streams",
         .type = ST_OPT_U64,
         .offset = OFF(max_streams),
         .default_value = "1024",
         .min = 1,
         .max = 65536,
         .value_name = "N",
         .help = "Streams open at once; more are refused with ERROR limit.",
         .since = "0.1"},
        ST_OPT_STREAM_WINDOW_BYTES(
                OFF(stream_window_bytes),
                "Largest per-stream credit window granted to the cloud (with flow control): at "
                "most this many bytes of one stream wait here for a slow backend. A stream's "
                "window starts at --stream-first-window-bytes and doubles while its backend "
                "drains it and --process-buffer-bytes is below three quarters used."),
        ST_OPT_STREAM_FIRST_WINDOW_BYTES(
                OFF(stream_first_window_bytes),
                "The credit window each upload stream (exec, attach, port-forward, TCP) starts "
                "with, reserved from --process-buffer-bytes when the cloud opens the stream. "
                "Log and metric streams start at 4 KiB (the window announced to the cloud, or "
                "this one when smaller) and grow the same way if a request body comes."),
        {.name = "process-buffer-bytes",
         .type = ST_OPT_BYTES,
         .offset = OFF(process_buffer_bytes),
         .default_value = "256MiB",
         .min = 1024 * 1024,
         .max = 64ull * 1024 * 1024 * 1024,
         .value_name = "BYTES",
         .help = "The edge's memory budget for what the cloud may send ahead (with flow "
                 "control) and what waits for the cloud's credit: every stream's credit window "
                 "is charged to it, and so is what a stream's queue toward the cloud holds while "
                 "it holds it (past the limit such a stream's backend pauses); a stream whose "
                 "first window does not fit is refused (ERROR limit, the cloud answers 503; "
                 "counted in edgestream_streams_refused_by_session_total{reason=\"budget\"}), "
                 "and windows grow only while it is below three quarters used.",
         .since = "0.2"},
        ST_OPT_STREAM_QUEUE_BYTES(
                OFF(stream_queue_bytes),
                "Bytes of one stream queued toward the cloud before edgestream stops reading "
                "that backend connection."),
        ST_OPT_DATA_PAYLOAD_BYTES(
                OFF(data_payload_bytes),
                "Largest DATA payload sent on the tunnel (KubeEdge uses 256 bytes)."),
        /* ---- operations ---- */
        ST_OPT_ADMIN_LISTEN(OFF(admin_listen), "127.0.0.1:10354",
                            "Plain-HTTP admin port: /metrics (Prometheus), /healthz, /readyz "
                            "(ready = the tunnel is up). Empty disables it."),
        ST_OPT_LOG_LEVEL(OFF(log_level)),
        ST_OPT_LOG_FORMAT(OFF(log_format)),
        ST_OPT_ACCESS_LOG(
                OFF(access_log),
                "One info line per stream when it ends (node, stream id, kind, path, bytes each "
                "way, duration; the cloud logs the same stream id): on or off."),
        ST_OPT_READY_FILE(
                OFF(ready_file),
                "Written when the tunnel first comes up, with the admin port (admin=P) and "
                "the node name (node=N). For tests and supervisors."),
        ST_OPT_SANDBOX(OFF(sandbox),
                       "seccomp allow-list installed after start-up (daemon only; an embedding "
                       "program decides for itself): errno, kill, log or off."),
};

const struct st_config_spec es_config_spec = {
        .prog = "edgestream",
        .summary = "The edge side of the stream tunnel: dials the cloud (wss, mutual TLS, the "
                   "cloud's certificate verified), keeps the tunnel alive, and serves each "
                   "request against the local kubelet or allow-listed local ports.",
        .version = "0.1.0",
        .kind = "EdgeStreamConfig",
        .opts = options,
        .num_opts = sizeof options / sizeof options[0],
};
