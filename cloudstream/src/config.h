/*
 * cloudstream/src/config.h — cloudstream's configuration: one table (config.c) drives the JSON
 * config file, the flags, --help and FLAGS.md (stream/config.h).
 */
#ifndef CLOUDSTREAM_CONFIG_H
#define CLOUDSTREAM_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <stream/config.h>

enum cs_ip_policy {
	CS_IP_POLICY_CERT = 0,         /* SessionInternalIP must be an IP SAN of the node cert */
	CS_IP_POLICY_TRUST_HEADER = 1, /* accept it and route on it (trusted edge networks) */
	CS_IP_POLICY_IGNORE = 2,       /* neither check nor route on it */
	CS_IP_POLICY_NODE_ADDRESS = 3, /* routed on once the Node object lists it (identity.h) */
};

enum cs_authz_mode {
	CS_AUTHZ_MODE_ALWAYS_ALLOW = 0, /* --stream-allowed-subjects decides (required) */
	CS_AUTHZ_MODE_WEBHOOK = 1,      /* a SubjectAccessReview per request */
};

struct cs_config {
	/* tunnel server */
	char *tunnel_listen;
	char *tunnel_cert, *tunnel_key, *tunnel_ca;
	int node_name_from;     /* enum st_node_name_from */
	int internal_ip_policy; /* enum cs_ip_policy */
	uint64_t ping_interval_ms, dead_peer_timeout_ms;
	uint64_t max_sessions;
	char *deny_list; /* revoked serials and node names (denylist.h), reloaded on SIGHUP */
	bool node_watch; /* a deleted Node closes its tunnel (nodewatch.c) */
	uint64_t deny_list_check_interval_ms; /* the file is re-read when it changed */
	/* bootstrap and rotation (join_srv.c) */
	char *join_tokens; /* join tokens (join.h); set: edges without a cert may join */
	char *join_uses;   /* where token uses are kept; "": join_tokens + ".uses" */
	char *signer_cert, *signer_key;   /* the CA that signs edge certificates; set: signing on */
	uint64_t signed_cert_lifetime_ms; /* lifetime of the certificates we sign */
	char *csr_signer_name;            /* set: the Kubernetes CSR API signs instead */
	uint64_t csr_wait_ms;             /* how long a join waits for the cluster's approval */
	/* stream server */
	char *stream_listen;
	char *stream_cert, *stream_key, *stream_client_ca;
	struct st_strlist stream_allowed_subjects;
	int stream_http2;       /* 0 off, 1 on: the stream port offers ALPN h2 (front_h2.c) */
	int authorization_mode; /* enum cs_authz_mode */
	bool authentication_token_webhook; /* bearer tokens through TokenReview */
	uint64_t authn_cache_ttl_ms, authz_cache_allowed_ttl_ms, authz_cache_denied_ttl_ms;
	char *edge_target_host;
	/* the front door (door.h): kube-apiserver's HTTPConnect egress */
	char *front_door_listen, *front_door_socket;
	char *front_door_socket_mode; /* octal, e.g. "0660" */
	char *front_door_cert, *front_door_key, *front_door_client_ca;
	struct st_strlist front_door_allowed_subjects;
	struct st_strlist front_door_kubelet_ports;
	uint64_t front_door_dial_timeout_ms;
	bool front_door_pod_ips; /* an IP no node has is looked up as a pod's (apiserver) */
	uint64_t answer_timeout_ms, idle_timeout_ms;
	uint64_t
	        stall_timeout_ms; /* base protocol: a stream that pauses the tunnel and drains nothing */
	/* limits and flow control */
	uint64_t max_streams, max_streams_per_node;
	uint64_t stream_window_bytes, stream_queue_bytes, data_payload_bytes;
	uint64_t
	        stream_first_window_bytes; /* each stream's window starts here, grows to the above */
	uint64_t session_buffer_bytes, process_buffer_bytes;
	/* pod → node through the apiserver (optional) */
	char *apiserver_url;
	char *apiserver_ca, *apiserver_token_file, *apiserver_cert, *apiserver_key;
	uint64_t apiserver_timeout_ms, pod_cache_ttl_ms, pod_cache_entries;
	/* operations */
	char *admin_listen;
	int log_level;  /* enum st_log_level */
	int log_format; /* enum st_log_format */
	int access_log; /* 0 off, 1 on */
	char *ready_file;
	int sandbox;    /* enum st_sandbox_mode */
	int event_loop; /* enum st_loop_kind */
	/* the tunnel port's listener (listen.h) */
	uint64_t tunnel_handshakes_max, tunnel_handshakes_per_source, tunnel_handshake_timeout_ms;
	char *replica_id;
	uint64_t drain_timeout_ms;
	/* a request for a node between tunnels waits this long at most (recent.h) */
	uint64_t node_reconnect_grace_ms, node_reconnect_waiting_max;
	/* the other replicas (peer.h): membership, the peer links' mTLS, readiness */
	struct st_strlist peers; /* host:port of every replica's tunnel port (self included ok) */
	char *peer_dns;          /* NAME:PORT: the replicas are what NAME resolves to */
	char *peer_service;      /* NAMESPACE/NAME: the replicas are its EndpointSlices */
	uint64_t peer_dns_interval_ms; /* how often it is resolved again */
	char *peer_cert, *peer_key, *peer_ca, *peer_server_ca, *peer_server_name;
	char *peer_subject;            /* the CN a peer certificate must carry */
	uint64_t peer_sync_timeout_ms; /* /readyz waits this long at most for the first syncs */
	uint64_t peer_redial_max_ms;   /* backoff cap of a lost link's redial */
	uint64_t peer_dead_timeout_ms; /* a silent link is dropped (pinged at a third of it) */
	/* a peer link stream's window grows to this (tunnel.h: cs_tunnel_link_window_max) */
	uint64_t peer_stream_window_bytes;
	/* per-node serving certificates on the stream port (servecert.h) */
	int serving_certs; /* enum cs_serving_mode */
	char *serving_ca_cert, *serving_ca_key;
	bool serving_csr_approve;
	uint64_t serving_cert_validity_ms;
	uint64_t advertise_kubelet_port; /* 0: off (advertise.c) */
};

extern const struct st_config_spec cs_config_spec;

#endif /* CLOUDSTREAM_CONFIG_H */
