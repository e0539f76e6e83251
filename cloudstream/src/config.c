/*
 * cloudstream/src/config.c — the option table. Every key is a flag (--name) and a JSON key of the
 * --config file; FLAGS.md is generated from this table (cloudstream --help-markdown).
 */
#include "config.h"

#include <stddef.h>

#include <stream/limits.h>

#define OFF(field) offsetof(struct cs_config, field)
#define KIB        1024ull
#define MIB        (1024ull * 1024ull)

static const char *const node_name_from_names[] = {"system-node-cn", "cn", NULL};
static const char *const ip_policy_names[] = {"cert", "trust-header", "ignore", "node-address",
                                              NULL};
static const char *const event_loop_names[] = {"epoll", "poll", NULL}; /* enum st_loop_kind */
static const char *const authz_mode_names[] = {"AlwaysAllow", "Webhook", NULL};
/* enum cs_serving_mode (servecert.h) */
static const char *const serving_mode_names[] = {"off", "ca", "csr", NULL};

static const struct st_opt options[] = {
        /* ---- tunnel server ---- */
        {.name = "tunnel-listen",
         .type = ST_OPT_STRING,
         .offset = OFF(tunnel_listen),
         .default_value = "0.0.0.0:10004",
         .value_name = "ADDR:PORT",
         .help = "Where edge nodes dial the tunnel (wss, mutual TLS). Edges connect to "
                 "wss://<this>/v1/kubeedge/connect. Port 0 picks a free port (see --ready-file).",
         .example = "--tunnel-listen 0.0.0.0:10004",
         .since = "0.1"},
        {.name = "tunnel-cert",
         .type = ST_OPT_STRING,
         .offset = OFF(tunnel_cert),
         .default_value = "/etc/cloudstream/pki/cloudstream-tunnel.crt",
         .value_name = "FILE",
         .help = "Server certificate (PEM, with chain) of the tunnel port. Its names must be "
                 "what edges dial. Reloaded on SIGHUP.",
         .flags = ST_OPT_F_RELOAD,
         .since = "0.1"},
        {.name = "tunnel-key",
         .type = ST_OPT_STRING,
         .offset = OFF(tunnel_key),
         .default_value = "/etc/cloudstream/pki/cloudstream-tunnel.key",
         .value_name = "FILE",
         .help = "Private key of --tunnel-cert. Reloaded on SIGHUP.",
         .flags = ST_OPT_F_RELOAD,
         .since = "0.1"},
        {.name = "tunnel-ca",
         .type = ST_OPT_STRING,
         .offset = OFF(tunnel_ca),
         .default_value = "/etc/cloudstream/pki/tunnel-ca.crt",
         .value_name = "FILE",
         .help = "CA that signs edge node client certificates. Edges must present a "
                 "certificate from it; the node name is taken from that certificate. "
                 "Reloaded on SIGHUP.",
         .flags = ST_OPT_F_RELOAD,
         .since = "0.1"},
        {.name = "node-name-from",
         .type = ST_OPT_ENUM,
         .offset = OFF(node_name_from),
         .default_value = "system-node-cn",
         .enum_names = node_name_from_names,
         .value_name = "MODE",
         .help = "How the node name is read from the edge's certificate: system-node-cn "
                 "(CN=system:node:<name>, Kubernetes node credentials) or cn (the CN is the "
                 "name). A SessionHostNameOverride header naming another node is refused (403).",
         .since = "0.1"},
        {.name = "internal-ip-policy",
         .type = ST_OPT_ENUM,
         .offset = OFF(internal_ip_policy),
         .default_value = "cert",
         .enum_names = ip_policy_names,
         .value_name = "POLICY",
         .help = "What to do with the SessionInternalIP header: cert (accept only an IP of the "
                 "node's certificate, refuse others with 403), trust-header (accept it and "
                 "route requests for that IP to the node), ignore, node-address (route on it "
                 "once the Node object lists it in status.addresses: KubeEdge certificates "
                 "without IP SANs work unmodified; needs --apiserver-url and get on nodes). "
                 "The certificate's IP SANs always route to the node. A header never takes "
                 "an IP another connected node holds verified (403); an IP two nodes hold "
                 "verified is shared, and a request addressed only by it is refused (409) "
                 "naming both.",
         .since = "0.1"},
        {.name = "deny-list",
         .type = ST_OPT_STRING,
         .offset = OFF(deny_list),
         .value_name = "FILE",
         .help = "Revoked edge identities, one a line: \"serial HEX\" (the certificate's "
                 "serial; ':' separators allowed) or \"node NAME\"; '#' starts a comment. "
                 "Read at start (a bad file is a start-up error) and again on SIGHUP, on a "
                 "worker (a bad file then keeps the old list); the tunnels of nodes it names "
                 "are closed at once and their upgrades refused with 403.",
         .example = "--deny-list /etc/cloudstream/deny-list",
         .flags = ST_OPT_F_RELOAD,
         .since = "0.2"},
        {.name = "deny-list-check-interval",
         .type = ST_OPT_DURATION_MS,
         .offset = OFF(deny_list_check_interval_ms),
         .default_value = "10s",
         .min = 100,
         .max = 86400000,
         .value_name = "DURATION",
         .help = "How often --deny-list is checked for changes (a stat on a worker; the file "
                 "is read only when it changed, so a ConfigMap update applies without a "
                 "SIGHUP).",
         .flags = ST_OPT_F_LIVE,
         .since = "0.2"},
        {.name = "join-tokens",
         .type = ST_OPT_STRING,
         .offset = OFF(join_tokens),
         .value_name = "FILE",
         .help = "Join tokens (written by `stream-certs token`): an edge with no certificate "
                 "yet presents one with a signing request for a key it generated itself, "
                 "POST /v1/cloudstream/join on the tunnel port, and gets a certificate from "
                 "--signer-cert. The file is read on a worker at every join (so it is live); "
                 "each token has an expiry, a use count (the uses taken are kept in "
                 "--join-uses, so a restart does not make a used token good again) and "
                 "optionally the one node it may join as. Setting it makes "
                 "client certificates optional in the tunnel port's handshake (one that is "
                 "sent must still verify); a websocket upgrade without one is refused (403). "
                 "Needs --signer-cert and --signer-key.",
         .example = "--join-tokens /etc/cloudstream/join-tokens",
         .since = "0.3"},
        {.name = "join-uses",
         .type = ST_OPT_STRING,
         .offset = OFF(join_uses),
         .value_name = "FILE",
         .help = "Where the uses of join tokens are kept (\"use ID N\" lines, rewritten "
                 "atomically, mode 0600, on a worker before a certificate is signed): a "
                 "restart reads them back, so a single-use token stays used. Default: "
                 "--join-tokens with \".uses\" appended; it must be writable (a token file "
                 "on a read-only mount needs this set). A join is refused (503) when the use "
                 "cannot be recorded. Each replica keeps its own: with several, give "
                 "single-use tokens a node= or use --csr-signer-name.",
         .example = "--join-uses /var/lib/cloudstream/join-uses",
         .since = "0.3"},
        {.name = "signer-cert",
         .type = ST_OPT_STRING,
         .offset = OFF(signer_cert),
         .value_name = "FILE",
         .help = "The CA certificate that signs edge certificates (joins and renewals); it "
                 "must be in --tunnel-ca. Read at every signing, on a worker: replacing the "
                 "file rotates the signing CA without a restart.",
         .example = "--signer-cert /etc/cloudstream/pki/tunnel-ca.crt",
         .since = "0.3"},
        {.name = "signer-key",
         .type = ST_OPT_STRING,
         .offset = OFF(signer_key),
         .value_name = "FILE",
         .help = "The private key of --signer-cert. With both set, an edge may renew its "
                 "certificate before it expires (POST /v1/cloudstream/renew on the tunnel port, "
                 "proving itself with its current certificate; no token).",
         .example = "--signer-key /etc/cloudstream/pki/tunnel-ca.key",
         .since = "0.3"},
        {.name = "csr-signer-name",
         .type = ST_OPT_STRING,
         .offset = OFF(csr_signer_name),
         .value_name = "NAME",
         .help = "Pass joins and renewals to the Kubernetes CSR API (--apiserver-url; needs "
                 "create and get on certificatesigningrequests) with this signerName instead "
                 "of signing with --signer-cert: the edge's own request becomes "
                 "spec.request (usages digital signature and client auth, expirationSeconds "
                 "from --signed-cert-lifetime), so the cluster's approval and signer apply. "
                 "Its CA must be in --tunnel-ca.",
         .example = "--csr-signer-name example.com/edge-client",
         .since = "0.3"},
        {.name = "csr-wait",
         .type = ST_OPT_DURATION_MS,
         .offset = OFF(csr_wait_ms),
         .default_value = "10s",
         .min = 1000,
         .max = 60000,
         .value_name = "DURATION",
         .help = "With --csr-signer-name: how long a join or renewal waits for the cluster to "
                 "approve and sign its CSR (polled on one worker; one such wait at a time, "
                 "others get 503 and retry). Past it: 503 naming the CSR.",
         .since = "0.3"},
        {.name = "signed-cert-lifetime",
         .type = ST_OPT_DURATION_MS,
         .offset = OFF(signed_cert_lifetime_ms),
         .default_value = "8760h",
         .min = 10000,
         .max = 315360000000ull,
         .value_name = "DURATION",
         .help = "Lifetime of the certificates cloudstream signs (joins and renewals); edges "
                 "renew at two thirds of it. Down to 10s for tests.",
         .example = "--signed-cert-lifetime 720h",
         .since = "0.3"},
        {.name = "node-watch",
         .type = ST_OPT_BOOL,
         .offset = OFF(node_watch),
         .default_value = "false",
         .value_name = "BOOL",
         .help = "Watch Node objects through --apiserver-url (needs list and watch on nodes): "
                 "when a Node is deleted, its node's tunnel is closed (within about 2 s) and "
                 "its upgrades are refused with 403 until the Node exists again.",
         .since = "0.2"},
        {.name = "ping-interval",
         .type = ST_OPT_DURATION_MS,
         .offset = OFF(ping_interval_ms),
         .default_value = "15s",
         .min = 1000,
         .max = 3600000,
         .value_name = "DURATION",
         .help = "Quiet time after which cloudstream pings an edge's websocket (one sweep "
                 "over all tunnels checks every quarter of it, at most every second).",
         .since = "0.1"},
        {.name = "dead-peer-timeout",
         .type = ST_OPT_DURATION_MS,
         .offset = OFF(dead_peer_timeout_ms),
         .default_value = "45s",
         .min = 2000,
         .max = 3600000,
         .value_name = "DURATION",
         .help = "A tunnel that shows no sign of life (any message, or the PONG to our PING) "
                 "for this long is closed; its streams fail with 502 and its node is "
                 "unregistered. Time while cloudstream itself is not reading the tunnel "
                 "(back-pressure) does not count.",
         .since = "0.1"},
        {.name = "max-sessions",
         .type = ST_OPT_U64,
         .offset = OFF(max_sessions),
         .default_value = "100000",
         .min = 1,
         .max = 1000000,
         .value_name = "N",
         .help = "Edge nodes connected at once; further nodes are refused with 503 (a node "
                 "that reconnects always replaces its own session).",
         .since = "0.1"},
        /* ---- stream server ---- */
        {.name = "stream-listen",
         .type = ST_OPT_STRING,
         .offset = OFF(stream_listen),
         .default_value = "0.0.0.0:10350",
         .value_name = "ADDR:PORT",
         .help = "Where kube-apiserver's kubelet-API requests arrive (TLS), normally by DNAT of "
                 "<edge-node-ip>:10350 on the apiserver hosts.",
         .since = "0.1"},
        {.name = "stream-cert",
         .type = ST_OPT_STRING,
         .offset = OFF(stream_cert),
         .default_value = "/etc/cloudstream/pki/cloudstream-stream.crt",
         .value_name = "FILE",
         .help = "Server certificate of the stream port; kube-apiserver verifies it against "
                 "its --kubelet-certificate-authority. Reloaded on SIGHUP.",
         .flags = ST_OPT_F_RELOAD,
         .since = "0.1"},
        {.name = "stream-key",
         .type = ST_OPT_STRING,
         .offset = OFF(stream_key),
         .default_value = "/etc/cloudstream/pki/cloudstream-stream.key",
         .value_name = "FILE",
         .help = "Private key of --stream-cert. Reloaded on SIGHUP.",
         .flags = ST_OPT_F_RELOAD,
         .since = "0.1"},
        {.name = "stream-client-ca",
         .type = ST_OPT_STRING,
         .offset = OFF(stream_client_ca),
         .default_value = "/etc/cloudstream/pki/stream-ca.crt",
         .value_name = "FILE",
         .help = "CA of the kube-apiserver's kubelet client certificate "
                 "(--kubelet-client-certificate). Clients without a certificate from it are "
                 "refused in the TLS handshake. Reloaded on SIGHUP.",
         .flags = ST_OPT_F_RELOAD,
         .since = "0.1"},
        {.name = "stream-allowed-subjects",
         .type = ST_OPT_STRING_LIST,
         .offset = OFF(stream_allowed_subjects),
         .value_name = "CN|O=ORG",
         .help = "Client certificates whose CN (or, written O=<org>, one of whose "
                 "organizations) is listed may use the stream port; others are answered 403. "
                 "With --authorization-mode AlwaysAllow it must be set (cloudstream refuses to "
                 "start otherwise); with Webhook it is optional and narrows certificates before "
                 "the SubjectAccessReview.",
         .example = "--stream-allowed-subjects kube-apiserver-kubelet-client",
         .flags = ST_OPT_F_LIVE,
         .since = "0.1"},
        {.name = "authorization-mode",
         .type = ST_OPT_ENUM,
         .offset = OFF(authorization_mode),
         .default_value = "AlwaysAllow",
         .enum_names = authz_mode_names,
         .value_name = "MODE",
         .help = "How stream-port requests are authorized, as the kubelet's flag: AlwaysAllow "
                 "(a client certificate listed in --stream-allowed-subjects may do anything) "
                 "or Webhook (every request is authorized by a SubjectAccessReview to "
                 "--apiserver-url with the kubelet's attributes: resource nodes, the node's "
                 "name, subresource proxy, stats, metrics, log, ...; needs create on "
                 "subjectaccessreviews).",
         .example = "--authorization-mode Webhook",
         .since = "0.3"},
        {.name = "serving-certs",
         .type = ST_OPT_ENUM,
         .offset = OFF(serving_certs),
         .default_value = "off",
         .enum_names = serving_mode_names,
         .value_name = "MODE",
         .help = "Per-node serving certificates on the stream port, as kube-apiserver with "
                 "--kubelet-certificate-authority checks them: each connection gets a "
                 "certificate of the node it was addressed to (its DNAT'd original destination, "
                 "or SNI), naming the Node object's addresses. off: --stream-cert for all; ca: "
                 "signed here with --serving-ca-cert/--serving-ca-key; csr: through the "
                 "Kubernetes CSR API (signer kubernetes.io/kubelet-serving, "
                 "CN=system:node:<name>, O=system:nodes; needs create and get on "
                 "certificatesigningrequests). Issued on the worker pool when a tunnel comes "
                 "up or a handshake finds none (that handshake gets --stream-cert), renewed at "
                 "70-90 % of the lifetime. Needs --apiserver-url and get on nodes.",
         .example = "--serving-certs csr",
         .since = "0.3"},
        {.name = "serving-ca-cert",
         .type = ST_OPT_STRING,
         .offset = OFF(serving_ca_cert),
         .value_name = "FILE",
         .help = "With --serving-certs ca: the CA certificate (PEM) that signs node serving "
                 "certificates; kube-apiserver's --kubelet-certificate-authority must trust it.",
         .since = "0.3"},
        {.name = "serving-ca-key",
         .type = ST_OPT_STRING,
         .offset = OFF(serving_ca_key),
         .value_name = "FILE",
         .help = "With --serving-certs ca: the private key (PEM) of --serving-ca-cert.",
         .since = "0.3"},
        {.name = "serving-csr-approve",
         .type = ST_OPT_BOOL,
         .offset = OFF(serving_csr_approve),
         .default_value = "true",
         .value_name = "BOOL",
         .help = "With --serving-certs csr: approve our own CSRs through the approval "
                 "subresource (needs update on certificatesigningrequests/approval and approve "
                 "on signers kubernetes.io/kubelet-serving). Refused (403) or false: the "
                 "cluster's approver must approve them.",
         .since = "0.3"},
        {.name = "serving-cert-validity",
         .type = ST_OPT_DURATION_MS,
         .offset = OFF(serving_cert_validity_ms),
         .default_value = "720h",
         .min = 30000,
         .max = 31536000000ull,
         .value_name = "DURATION",
         .help = "Lifetime asked for a node serving certificate (ca: its notAfter, capped by "
                 "the CA's; csr: spec.expirationSeconds, at least 10 min as the API requires, "
                 "which the signer may shorten).",
         .since = "0.3"},
        {.name = "advertise-kubelet-port",
         .type = ST_OPT_U64,
         .offset = OFF(advertise_kubelet_port),
         .default_value = "0",
         .min = 0,
         .max = 65535,
         .value_name = "PORT",
         .help = "When an edge node's tunnel comes up, set its Node's "
                 "status.daemonEndpoints.kubeletEndpoint.Port to PORT (as KubeEdge's cloudcore "
                 "does), the port kube-apiserver then dials and cloudstream-dnat-controller "
                 "captures; one PATCH of nodes/<name>/status on the worker pool (needs "
                 "--apiserver-url and patch on nodes/status). A real kubelet on the node writes "
                 "its own port back: for edges without one. 0: off.",
         .example = "--advertise-kubelet-port 10350",
         .since = "0.3"},
        {.name = "authentication-token-webhook",
         .type = ST_OPT_BOOL,
         .offset = OFF(authentication_token_webhook),
         .value_name = "BOOL",
         .help = "Also accept bearer tokens on the stream port, checked by a TokenReview to "
                 "--apiserver-url (as the kubelet's flag; needs create on tokenreviews). "
                 "Client certificates become optional in the TLS handshake; a request with "
                 "neither is answered 401. Needs --authorization-mode Webhook.",
         .since = "0.3"},
        {.name = "authentication-token-webhook-cache-ttl",
         .type = ST_OPT_DURATION_MS,
         .offset = OFF(authn_cache_ttl_ms),
         .default_value = "2m",
         .min = 0,
         .max = 86400000,
         .value_name = "DURATION",
         .help = "How long a TokenReview's answer (authenticated or not) is reused for the "
                 "same token. 0: ask every time.",
         .flags = ST_OPT_F_LIVE,
         .since = "0.3"},
        {.name = "authorization-webhook-cache-authorized-ttl",
         .type = ST_OPT_DURATION_MS,
         .offset = OFF(authz_cache_allowed_ttl_ms),
         .default_value = "5m",
         .min = 0,
         .max = 86400000,
         .value_name = "DURATION",
         .help = "How long an allowing SubjectAccessReview answer is reused for the same user, "
                 "groups, extra and attributes. 0: ask every time.",
         .flags = ST_OPT_F_LIVE,
         .since = "0.3"},
        {.name = "authorization-webhook-cache-unauthorized-ttl",
         .type = ST_OPT_DURATION_MS,
         .offset = OFF(authz_cache_denied_ttl_ms),
         .default_value = "30s",
         .min = 0,
         .max = 86400000,
         .value_name = "DURATION",
         .help = "How long a SubjectAccessReview answer that does not allow is reused. Errors "
                 "are never cached.",
         .flags = ST_OPT_F_LIVE,
         .since = "0.3"},
        {.name = "edge-target-host",
         .type = ST_OPT_STRING,
         .offset = OFF(edge_target_host),
         .default_value = "127.0.0.1:10350",
         .value_name = "HOST:PORT",
         .help = "url.Host written into connect requests. An unmodified KubeEdge edge dials it "
                 "(its edged kubelet server); edgestream ignores it and uses its own backends.",
         .since = "0.1"},
        /* ---- the front door (door.h) ---- */
        {.name = "front-door-listen",
         .type = ST_OPT_STRING,
         .offset = OFF(front_door_listen),
         .value_name = "ADDR:PORT",
         .help = "The front door over TCP: kube-apiserver's EgressSelector HTTPConnect egress "
                 "(egressSelections cluster, transport tcp, url https://<this>) with mutual "
                 "TLS. The apiserver's own TLS then runs end to end to the edge's kubelet. Off "
                 "when empty (the default). Port 0 picks a free port (see --ready-file).",
         .example = "--front-door-listen 0.0.0.0:8131",
         .since = "0.2"},
        {.name = "front-door-socket",
         .type = ST_OPT_STRING,
         .offset = OFF(front_door_socket),
         .value_name = "PATH",
         .help = "The front door on a unix socket (egressSelections cluster, transport uds, "
                 "udsName <this>), for an apiserver on the same host. A socket left at PATH "
                 "is replaced; any other file there is an error. Off when empty.",
         .example = "--front-door-socket /run/cloudstream/front-door.sock",
         .since = "0.2"},
        {.name = "front-door-socket-mode",
         .type = ST_OPT_STRING,
         .offset = OFF(front_door_socket_mode),
         .default_value = "0660",
         .value_name = "OCTAL",
         .help = "Permissions of --front-door-socket. Whoever may connect to it may reach "
                 "every edge node's kubelet port (the kubelet still authenticates the "
                 "apiserver's client certificate inside the tunnel).",
         .since = "0.2"},
        {.name = "front-door-cert",
         .type = ST_OPT_STRING,
         .offset = OFF(front_door_cert),
         .value_name = "FILE",
         .help = "Server certificate of --front-door-listen; its SANs must hold the host of "
                 "the apiserver's egress url exactly (an IP SAN for an IP). Default: "
                 "--stream-cert. Reloaded on SIGHUP.",
         .flags = ST_OPT_F_RELOAD,
         .since = "0.2"},
        {.name = "front-door-key",
         .type = ST_OPT_STRING,
         .offset = OFF(front_door_key),
         .value_name = "FILE",
         .help = "Private key of --front-door-cert. Default: --stream-key. Reloaded on SIGHUP.",
         .flags = ST_OPT_F_RELOAD,
         .since = "0.2"},
        {.name = "front-door-client-ca",
         .type = ST_OPT_STRING,
         .offset = OFF(front_door_client_ca),
         .value_name = "FILE",
         .help = "CA of the apiserver's egress client certificate (tlsConfig clientCert); "
                 "a client without a certificate from it fails the handshake. Default: "
                 "--stream-client-ca. Reloaded on SIGHUP.",
         .flags = ST_OPT_F_RELOAD,
         .since = "0.2"},
        {.name = "front-door-allowed-subjects",
         .type = ST_OPT_STRING_LIST,
         .offset = OFF(front_door_allowed_subjects),
         .value_name = "CN|O=ORG",
         .help = "When set, only client certificates whose CN (or, written O=<org>, one of "
                 "whose organizations) is listed may CONNECT through --front-door-listen; "
                 "others are answered 403. Empty: any certificate of --front-door-client-ca "
                 "(give the front door a CA of its own then).",
         .example = "--front-door-allowed-subjects kube-apiserver-egress",
         .flags = ST_OPT_F_LIVE,
         .since = "0.2"},
        {.name = "front-door-kubelet-ports",
         .type = ST_OPT_STRING_LIST,
         .offset = OFF(front_door_kubelet_ports),
         .default_value = "10250,10350",
         .value_name = "PORT",
         .help = "A CONNECT to a node at one of these ports (the Node's "
                 "daemonEndpoints.kubeletEndpoint.Port: 10250, or 10350 for KubeEdge nodes) "
                 "reaches the node's kubelet: the edge dials its own --kubelet-url, never a "
                 "port the cloud names. Any other port is asked of the edge as a port, which "
                 "its --local-port allow-list grants or refuses.",
         .since = "0.2"},
        {.name = "front-door-dial-timeout",
         .type = ST_OPT_DURATION_MS,
         .offset = OFF(front_door_dial_timeout_ms),
         .default_value = "10s",
         .min = 100,
         .max = 600000,
         .value_name = "DURATION",
         .help = "A CONNECT whose edge has not acknowledged its dial after this long is "
                 "answered 504 (kube-apiserver has no deadline of its own for the answer).",
         .flags = ST_OPT_F_LIVE,
         .since = "0.2"},
        {.name = "front-door-pod-ips",
         .type = ST_OPT_BOOL,
         .offset = OFF(front_door_pod_ips),
         .default_value = "false",
         .help = "A CONNECT to an IP that is no connected node's is looked up as a pod IP "
                 "(GET /api/v1/pods?fieldSelector=status.podIP=IP through --apiserver-url, "
                 "cached for --pod-cache-ttl; needs list on pods): a running pod on an edge "
                 "node is reached through that node's tunnel, where the edge's --pod-ports "
                 "and --pod-cidr decide (webhooks and aggregated APIs served by pods on edge "
                 "nodes). Off: such a CONNECT is answered 502.",
         .flags = ST_OPT_F_LIVE,
         .since = "0.2"},
        {.name = "answer-timeout",
         .type = ST_OPT_DURATION_MS,
         .offset = OFF(answer_timeout_ms),
         .default_value = "30s",
         .min = 100,
         .max = 3600000,
         .value_name = "DURATION",
         .help = "A request whose edge has not started answering after this long fails with "
                 "504. Not applied to follow=true logs from a base-protocol edge, which sends "
                 "nothing until a line appears.",
         .flags = ST_OPT_F_LIVE,
         .since = "0.1"},
        {.name = "idle-timeout",
         .type = ST_OPT_DURATION_MS,
         .offset = OFF(idle_timeout_ms),
         .default_value = "120s",
         .min = 1000,
         .max = 3600000,
         .value_name = "DURATION",
         .help = "An apiserver connection that is between requests (or sending a request head) "
                 "this long is closed.",
         .flags = ST_OPT_F_LIVE,
         .since = "0.1"},
        ST_OPT_STALL_TIMEOUT(
                OFF(stall_timeout_ms),
                "Base-protocol (KubeEdge) edges only, which have no per-stream flow control: "
                "a stream whose queue toward the apiserver is full pauses reading of the "
                "whole tunnel; if its apiserver connection has not drained it to the low mark "
                "after this long the stream is cut (the connection closed, REMOVE to the "
                "edge; counted in cloudstream_stream_stall_cuts_total), so one client that "
                "stops reading, or reads slower than the edge sends, holds up the node's other "
                "streams for at most this long at a time. With our edges per-stream credit "
                "stops only that stream and nothing is cut."),
        /* ---- limits and flow control ---- */
        {.name = "max-streams",
         .type = ST_OPT_U64,
         .offset = OFF(max_streams),
         .default_value = "20000",
         .min = 1,
         .max = 1000000,
         .value_name = "N",
         .help = "Streams open at once, all nodes; further requests get 503.",
         .flags = ST_OPT_F_LIVE,
         .since = "0.1"},
        {.name = "max-streams-per-node",
         .type = ST_OPT_U64,
         .offset = OFF(max_streams_per_node),
         .default_value = "1024",
         .min = 1,
         .max = 65536,
         .value_name = "N",
         .help = "Streams open at once on one node's tunnel; further requests get 503.",
         .since = "0.1"},
        ST_OPT_STREAM_WINDOW_BYTES(
                OFF(stream_window_bytes),
                "Largest per-stream credit window granted to edgestream edges (flow control): "
                "at most this many bytes of one stream wait in cloudstream for a slow "
                "apiserver, and a stalled stream never holds up another. A stream's window "
                "starts at --stream-first-window-bytes and doubles while its apiserver "
                "drains it and the node and process budgets are below three quarters."),
        ST_OPT_STREAM_FIRST_WINDOW_BYTES(
                OFF(stream_first_window_bytes),
                "The credit window each stream to an edgestream edge starts with (announced to "
                "the edge). Reserved from --session-buffer-bytes and --process-buffer-bytes "
                "when the stream opens: a stream whose first window does not fit is refused "
                "with 503, so memory is bounded by the budgets, never by pausing the tunnel."),
        ST_OPT_STREAM_QUEUE_BYTES(
                OFF(stream_queue_bytes),
                "Bytes of one stream queued toward the edge before cloudstream stops reading "
                "that apiserver connection."),
        ST_OPT_DATA_PAYLOAD_BYTES(
                OFF(data_payload_bytes),
                "Largest DATA payload sent on a tunnel (KubeEdge uses 256 bytes, which makes "
                "bulk transfers about 20 times slower)."),
        {.name = "session-buffer-bytes",
         .type = ST_OPT_BYTES,
         .offset = OFF(session_buffer_bytes),
         .default_value = "64MiB",
         .min = 1 * MIB,
         .max = 64ull * 1024 * MIB,
         .value_name = "BYTES",
         .help = "Bytes of one node's streams queued toward apiservers: past it, an edge with "
                 "flow control gets no new stream (503, each stream is bounded by its window "
                 "anyway); a base-protocol edge's tunnel is paused (counted in "
                 "cloudstream_flow_stalls_total{scope=\"tunnel\"}) and --stall-timeout cuts "
                 "the streams that keep it so.",
         .since = "0.1"},
        {.name = "process-buffer-bytes",
         .type = ST_OPT_BYTES,
         .offset = OFF(process_buffer_bytes),
         .default_value = "1GiB",
         .min = 4 * MIB,
         .max = 1024ull * 1024 * MIB,
         .value_name = "BYTES",
         .help = "Bytes queued toward apiservers in the whole process: past it, new streams "
                 "to edges with flow control are refused (503) and base-protocol tunnels "
                 "delivering them are paused; they resume when half is free.",
         .since = "0.1"},
        /* ---- pod -> node through the apiserver ---- */
        {.name = "apiserver-url",
         .type = ST_OPT_STRING,
         .offset = OFF(apiserver_url),
         .value_name = "URL",
         .help = "Kubernetes API server to ask which node runs a pod, for requests that name "
                 "no node otherwise (no DNAT'd destination, Host or X-Forwarded-Uri). Empty: "
                 "off. Needs get on pods (see deploy/ RBAC).",
         .example = "--apiserver-url https://kubernetes.default.svc",
         .since = "0.1"},
        {.name = "apiserver-ca",
         .type = ST_OPT_STRING,
         .offset = OFF(apiserver_ca),
         .value_name = "FILE",
         .help = "CA bundle to verify --apiserver-url with.",
         .since = "0.1"},
        {.name = "apiserver-token-file",
         .type = ST_OPT_STRING,
         .offset = OFF(apiserver_token_file),
         .value_name = "FILE",
         .help = "Bearer token file for --apiserver-url, read at every lookup (projected "
                 "service-account tokens rotate).",
         .example = "--apiserver-token-file /var/run/secrets/kubernetes.io/serviceaccount/token",
         .since = "0.1"},
        {.name = "apiserver-cert",
         .type = ST_OPT_STRING,
         .offset = OFF(apiserver_cert),
         .value_name = "FILE",
         .help = "Client certificate for --apiserver-url (instead of a token).",
         .since = "0.1"},
        {.name = "apiserver-key",
         .type = ST_OPT_STRING,
         .offset = OFF(apiserver_key),
         .value_name = "FILE",
         .help = "Key of --apiserver-cert.",
         .since = "0.1"},
        {.name = "apiserver-timeout",
         .type = ST_OPT_DURATION_MS,
         .offset = OFF(apiserver_timeout_ms),
         .default_value = "5s",
         .min = 100,
         .max = 60000,
         .value_name = "DURATION",
         .help = "Deadline of one pod lookup.",
         .since = "0.1"},
        {.name = "pod-cache-ttl",
         .type = ST_OPT_DURATION_MS,
         .offset = OFF(pod_cache_ttl_ms),
         .default_value = "60s",
         .min = 1000,
         .max = 3600000,
         .value_name = "DURATION",
         .help = "How long a pod's node (or its absence) is remembered.",
         .flags = ST_OPT_F_LIVE,
         .since = "0.1"},
        {.name = "pod-cache-entries",
         .type = ST_OPT_U64,
         .offset = OFF(pod_cache_entries),
         .default_value = "16384",
         .min = 16,
         .max = 1u << 24,
         .value_name = "N",
         .help = "Pods remembered at once.",
         .since = "0.1"},
        /* ---- operations ---- */
        {.name = "admin-listen",
         .type = ST_OPT_STRING,
         .offset = OFF(admin_listen),
         .default_value = "127.0.0.1:10353",
         .value_name = "ADDR:PORT",
         .help = "Plain-HTTP admin port: /metrics (Prometheus), /healthz, /readyz. Empty "
                 "disables it. Keep it on loopback or a private network.",
         .since = "0.1"},
        ST_OPT_LOG_LEVEL(OFF(log_level)),
        ST_OPT_LOG_FORMAT(OFF(log_format)),
        ST_OPT_ACCESS_LOG(OFF(access_log),
                          "One info line per request on the stream port when it ends (node, stream "
                          "id, method, path, caller, status, outcome, bytes each way, duration; "
                          "the edge logs the same stream id): on or off."),
        ST_OPT_READY_FILE(
                OFF(ready_file),
                "Written once every listener is up, with the bound ports "
                "(tunnel=P, stream=P, admin=P, one per line). For tests and supervisors."),
        ST_OPT_SANDBOX(
                OFF(sandbox),
                "seccomp allow-list installed after start-up: errno (other system calls fail "
                "with EPERM), kill (they kill the process), log (only logged), off."),
        {.name = "tunnel-handshakes-max",
         .type = ST_OPT_U64,
         .offset = OFF(tunnel_handshakes_max),
         .default_value = "256",
         .min = 1,
         .max = 100000,
         .value_name = "N",
         .help = "TLS handshakes in progress on the tunnel port at once. While this many are "
                 "under way cloudstream accepts no more: new connections wait in the kernel's "
                 "queue, so a reconnect storm or a flood costs neither memory nor a spinning "
                 "loop. A connection counts from its first bytes until its upgrade request.",
         .since = "0.3"},
        {.name = "tunnel-handshakes-per-source",
         .type = ST_OPT_U64,
         .offset = OFF(tunnel_handshakes_per_source),
         .default_value = "64",
         .min = 1,
         .max = 100000,
         .value_name = "N",
         .help = "Of those, how many may come from one IP address; a connection beyond it is "
                 "closed at once (edges behind one NAT share an address: raise it for them).",
         .since = "0.3"},
        {.name = "tunnel-handshake-timeout",
         .type = ST_OPT_DURATION_MS,
         .offset = OFF(tunnel_handshake_timeout_ms),
         .default_value = "5s",
         .min = 1000,
         .max = 60000,
         .value_name = "DURATION",
         .help = "Deadline for a tunnel connection's first bytes (the kernel drops a connection "
                 "that sends none, before cloudstream ever sees it) and then for its TLS "
                 "handshake.",
         .since = "0.3"},
        {.name = "event-loop",
         .type = ST_OPT_ENUM,
         .offset = OFF(event_loop),
         .default_value = "epoll",
         .enum_names = event_loop_names,
         .value_name = "KIND",
         .help = "What lws waits on: epoll (libev through the libwebsockets-evlib-ev plugin; "
                 "a round costs what is ready, not what is open) or poll (lws's own loop, "
                 "poll() over every socket each round; kept to measure against). Without the "
                 "plugin cloudstream falls back to poll and says so at start.",
         .since = "0.1"},
        {.name = "replica-id",
         .type = ST_OPT_STRING,
         .offset = OFF(replica_id),
         .value_name = "ID",
         .help = "This replica's name in the extension handshake ([A-Za-z0-9._-]); default "
                 "the host name.",
         .since = "0.1"},
        {.name = "peers",
         .type = ST_OPT_STRING_LIST,
         .offset = OFF(peers),
         .value_name = "HOST:PORT",
         .help = "The tunnel ports of the other cloudstream replicas serving the same fleet "
                 "(this one may be listed too: it recognizes itself by its --replica-id). "
                 "Each replica dials every other at /v1/cloudstream/peer, learns which nodes "
                 "it holds and forwards requests for them there. Names are resolved at start. "
                 "Needs --peer-cert, --peer-key, --peer-ca and --peer-server-ca.",
         .since = "0.4"},
        {.name = "peer-dns",
         .type = ST_OPT_STRING,
         .offset = OFF(peer_dns),
         .value_name = "NAME:PORT",
         .help = "The replicas are the addresses NAME resolves to (a headless Service's name, "
                 "publishNotReadyAddresses: true), each at PORT (their tunnel port): resolved "
                 "on the worker pool every --peer-dns-interval; an address that goes is no "
                 "longer dialled. Besides or instead of --peers.",
         .since = "0.4"},
        {.name = "peer-service",
         .type = ST_OPT_STRING,
         .offset = OFF(peer_service),
         .value_name = "NAMESPACE/NAME",
         .help = "The replicas are the endpoints of this (headless) Service's EndpointSlices, "
                 "each at its slice's port named tunnel: listed, then watched through "
                 "--apiserver-url on a worker (RBAC: list and watch endpointslices in "
                 "NAMESPACE). Every endpoint counts, ready or not (a replica becomes ready "
                 "only once its peers dialled it). Besides or instead of --peers.",
         .since = "0.4"},
        {.name = "peer-dns-interval",
         .type = ST_OPT_DURATION_MS,
         .offset = OFF(peer_dns_interval_ms),
         .default_value = "10s",
         .min = 1000,
         .max = 3600000,
         .value_name = "DURATION",
         .help = "How often --peer-dns is resolved again.",
         .since = "0.4"},
        {.name = "peer-cert",
         .type = ST_OPT_STRING,
         .offset = OFF(peer_cert),
         .value_name = "FILE",
         .help = "Client certificate this replica presents to the others (stream-certs "
                 "client --cn cloudstream-peer, from --peer-ca).",
         .since = "0.4"},
        {.name = "peer-key",
         .type = ST_OPT_STRING,
         .offset = OFF(peer_key),
         .value_name = "FILE",
         .help = "Private key of --peer-cert.",
         .since = "0.4"},
        {.name = "peer-ca",
         .type = ST_OPT_STRING,
         .offset = OFF(peer_ca),
         .value_name = "FILE",
         .help = "CA of the replicas' peer certificates: the tunnel port trusts it too, admits "
                 "a certificate from it only at /v1/cloudstream/peer (never as an edge node) "
                 "and only with the CN of --peer-subject.",
         .since = "0.4"},
        {.name = "peer-server-ca",
         .type = ST_OPT_STRING,
         .offset = OFF(peer_server_ca),
         .value_name = "FILE",
         .help = "CA the other replicas' tunnel certificates (--tunnel-cert) chain to, checked "
                 "when dialling them.",
         .since = "0.4"},
        {.name = "peer-server-name",
         .type = ST_OPT_STRING,
         .offset = OFF(peer_server_name),
         .value_name = "NAME",
         .help = "The name the other replicas' tunnel certificates must carry (SNI and the "
                 "check); default: the host of each --peers entry.",
         .since = "0.4"},
        {.name = "peer-subject",
         .type = ST_OPT_STRING,
         .offset = OFF(peer_subject),
         .default_value = "cloudstream-peer",
         .value_name = "CN",
         .help = "The common name a peer certificate must carry.",
         .since = "0.4"},
        {.name = "peer-sync-timeout",
         .type = ST_OPT_DURATION_MS,
         .offset = OFF(peer_sync_timeout_ms),
         .default_value = "10s",
         .min = 0,
         .max = 600000,
         .value_name = "DURATION",
         .help = "/readyz answers 200 once this replica has the full node list of every peer "
                 "(SYNC_END on each link), or once this long has passed since start (logged, "
                 "with the peers still missing).",
         .since = "0.4"},
        {.name = "peer-dead-timeout",
         .type = ST_OPT_DURATION_MS,
         .offset = OFF(peer_dead_timeout_ms),
         .default_value = "10s",
         .min = 1000,
         .max = 600000,
         .value_name = "DURATION",
         .help = "A peer link that brings nothing for this long is dropped (its nodes are "
                 "forgotten, it is dialled again); a quiet link is pinged at a third of it. "
                 "Replicas share a cluster network: shorter than the edges' "
                 "--dead-peer-timeout, so a partition that drops packets costs seconds.",
         .since = "0.4"},
        {.name = "peer-redial-max",
         .type = ST_OPT_DURATION_MS,
         .offset = OFF(peer_redial_max_ms),
         .default_value = "5s",
         .min = 100,
         .max = 300000,
         .value_name = "DURATION",
         .help = "A lost peer link is redialled at once, then with doubling delays (with "
                 "jitter) up to this.",
         .since = "0.4"},
        {.name = "node-reconnect-grace",
         .type = ST_OPT_DURATION_MS,
         .offset = OFF(node_reconnect_grace_ms),
         .default_value = "5s",
         .min = 0,
         .max = 60000,
         .value_name = "DURATION",
         .help = "A request for a node connected to no replica, whose tunnel closed or was "
                 "lost less than this ago (or that a draining replica sent CLOSE_CONNECT), "
                 "waits for the node's redial instead of 503: it proceeds once the tunnel is "
                 "up here or a peer announces it, and gets 503 at the grace's end. A name "
                 "never seen is answered at once. 0 turns waiting off.",
         .since = "0.4"},
        {.name = "node-reconnect-waiting-max",
         .type = ST_OPT_U64,
         .offset = OFF(node_reconnect_waiting_max),
         .default_value = "1000",
         .min = 0,
         .max = 1000000,
         .value_name = "N",
         .help = "Requests that may wait for a node's redial at once "
                 "(--node-reconnect-grace); past it they get 503 at once.",
         .since = "0.4"},
        ST_OPT_DRAIN_TIMEOUT(OFF(drain_timeout_ms), "30s",
                             "On SIGTERM, how long streams in flight may finish before the "
                             "process exits (new requests get 503 meanwhile)."),
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
