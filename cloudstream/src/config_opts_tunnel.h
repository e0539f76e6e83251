/*
 * cloudstream/src/config_opts_tunnel.h — the edges' side of cloudstream's option table (the
 * "tunnel server" section): the tunnel port and its certificates, who may open a tunnel (the
 * node name, SessionInternalIP, the deny list), joins and signing, liveness, the session cap.
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
        ST_OPT_TUNNEL_CERT(
                OFF(tunnel_cert), "/etc/cloudstream/pki/cloudstream-tunnel.crt",
                "Server certificate (PEM, with chain) of the tunnel port. Its names must be "
                "what edges dial. Reloaded on SIGHUP."),
        ST_OPT_TUNNEL_KEY(OFF(tunnel_key), "/etc/cloudstream/pki/cloudstream-tunnel.key",
                          "Private key of --tunnel-cert. Reloaded on SIGHUP."),
        ST_OPT_TUNNEL_CA(OFF(tunnel_ca), "/etc/cloudstream/pki/tunnel-ca.crt",
                         "CA that signs edge node client certificates. Edges must present a "
                         "certificate from it; the node name is taken from that certificate. "
                         "Reloaded on SIGHUP."),
        ST_OPT_NODE_NAME_FROM(
                OFF(node_name_from),
                "How the node name is read from the edge's certificate: system-node-cn "
                "(CN=system:node:<name>, Kubernetes node credentials) or cn (the CN is the "
                "name). A SessionHostNameOverride header naming another node is refused (403)."),
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
        ST_OPT_PING_INTERVAL(
                OFF(ping_interval_ms), "15s", 1000,
                "Quiet time after which cloudstream pings an edge's websocket (one sweep "
                "over all tunnels checks every quarter of it, at most every second)."),
        ST_OPT_DEAD_PEER_TIMEOUT(
                OFF(dead_peer_timeout_ms), "45s", 2000,
                "A tunnel that shows no sign of life (any message, or the PONG to our PING) "
                "for this long is closed; its streams fail with 502 and its node is "
                "unregistered. Time while cloudstream itself is not reading the tunnel "
                "(back-pressure) does not count."),
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
