/*
 * cloudstream/src/config_opts_requests.h — the requests' side of cloudstream's option table
 * (the "stream server" and "front door" sections): the stream port kube-apiserver connects to,
 * who may use it (certificates, tokens, reviews), the front door's CONNECT listeners, and the
 * timeouts of a request.
 *
 * Not a header: a run of table entries, included only inside the options[] initializer of
 * config.c, between the other sections, so the table stays one array in one order (FLAGS.md,
 * --help and --print-config list the options in it). Hence no include guard. It uses
 * config.c's OFF(), MIB and its enum-name arrays. Pure data (test/check.sh).
 *
 * clang-format cannot tell entries outside their array from a block, so it is off in this file;
 * the indentation is the one clang-format gives them inside the array in config.c.
 */
// clang-format off
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
        {.name = "stream-http2",
         .type = ST_OPT_ENUM,
         .offset = OFF(stream_http2),
         .default_value = "on",
         .enum_names = st_on_off_names,
         .value_name = "on|off",
         .help = "Offer HTTP/2 on the stream port (TLS ALPN h2, then http/1.1): a client that "
                 "chooses it sends its requests as streams, up to 250 on one connection, each "
                 "handled as an HTTP/1.1 request is; upgrades (exec, attach, port-forward) and "
                 "requests with a body stay on HTTP/1.1. off: HTTP/1.1 only (ALPN http/1.1).",
         .example = "--stream-http2 off",
         .since = "0.4"},
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
                 "this long is closed. Over HTTP/2: a connection without streams this long is "
                 "closed, and a stream whose request is not complete this long after its "
                 "HEADERS is answered 408 (the connection's other streams go on).",
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
