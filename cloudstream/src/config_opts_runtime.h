/*
 * cloudstream/src/config_opts_runtime.h — the process's side of cloudstream's option table
 * (the "limits and flow control", "pod -> node through the apiserver" and "operations"
 * sections): stream and byte budgets, the apiserver client, the admin port, logs, replicas,
 * reconnect grace and drain.
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
        ST_OPT_ADMIN_LISTEN(
                OFF(admin_listen), "127.0.0.1:10353",
                "Plain-HTTP admin port: /metrics (Prometheus), /healthz, /readyz. Empty "
                "disables it. Keep it on loopback or a private network."),
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
                 "forgotten, it is dialled again); a quiet link is pinged at a third of it, "
                 "and a dial that is no link after a third of it (at least 1 s) is made "
                 "again. "
                 "Replicas share a cluster network: shorter than the edges' "
                 "--dead-peer-timeout, so a partition that drops packets costs seconds.",
         .since = "0.4"},
        {.name = "peer-stream-window-bytes",
         .type = ST_OPT_BYTES,
         .offset = OFF(peer_stream_window_bytes),
         .default_value = "4MiB",
         .min = 65536,
         .max = ST_MAX_STREAM_WINDOW_BYTES,
         .value_name = "BYTES",
         .help = "Largest per-stream credit window on a peer link, both ways (a request "
                 "forwarded to the replica holding its node): as --stream-window-bytes, it "
                 "starts at --stream-first-window-bytes and doubles while the stream drains "
                 "and the budgets are below three quarters. Larger than an edge's because a "
                 "forwarded stream crosses two hops and three processes: a deeper window "
                 "keeps the holder writing while the forwarding replica and its client wait "
                 "for the CPU (cloudstream/README.md, Several replicas).",
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
