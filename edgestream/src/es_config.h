/*
 * edgestream/src/es_config.h — edgestream's configuration: one table (config.c) drives the JSON
 * config file, the daemon's flags, edgestream_config_set() of the library, --help and FLAGS.md.
 */
#ifndef EDGESTREAM_CONFIG_H
#define EDGESTREAM_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include <stream/config.h>

struct es_config {
	/* tunnel */
	char *cloud_url; /* wss://host:port/v1/kubeedge/connect */
	char *cloud_server_name;
	char *tunnel_cert, *tunnel_key, *tunnel_ca;
	char *node_name;
	int node_name_from; /* enum st_node_name_from */
	char *internal_ip;
	bool extensions;
	uint64_t ping_interval_ms, dead_peer_timeout_ms, connect_timeout_ms;
	uint64_t backoff_initial_ms, backoff_max_ms, backoff_reset_ms;
	uint64_t cert_check_interval_ms;
	/* bootstrap and rotation (join.c) */
	char *join_token;            /* a bootstrap token: obtain --tunnel-cert from the cloud */
	char *cloud_ca_hash;         /* sha256:<hex>: the cloud's CA, pinned by its public key */
	char *join_url;              /* https://host:port; default from --cloud-url */
	bool rotate_certificate;     /* renew --tunnel-cert at 2/3 of its lifetime */
	char *kubelet_rotating_cert; /* cert and key in one file (the kubelet's) for the tunnel */
	/* backends */
	char *kubelet_url; /* https://127.0.0.1:10250, or "" for none */
	char *kubelet_server_name;
	char *kubelet_cert, *kubelet_key, *kubelet_ca;
	struct st_strlist local_ports; /* name=port */
	struct st_strlist pod_ports;   /* ports pod IPs may be reached on (TCP_CONNECT) */
	struct st_strlist pod_cidrs;   /* where those pod IPs must lie */
	uint64_t backend_dial_timeout_ms, backend_handshake_timeout_ms;
	uint64_t drain_timeout_ms; /* graceful stop (stream/drain.h) */
	uint64_t stall_timeout_ms; /* base protocol: a backend that keeps the tunnel paused */
	uint64_t kubelet_idle_connections, kubelet_idle_timeout_ms;
	int kubelet_http2; /* enum es_kubelet_http2 */
	char *cri_socket;  /* "" = no CRI backend */
	uint64_t cri_timeout_ms;
	/* limits and flow control */
	uint64_t max_streams;
	uint64_t stream_window_bytes, stream_queue_bytes, data_payload_bytes;
	uint64_t
	        stream_first_window_bytes; /* each stream's window starts here, grows to the above */
	uint64_t process_buffer_bytes;     /* the windows of every stream, all tunnels */
	/* operations */
	char *admin_listen;
	int log_level;  /* enum st_log_level */
	int log_format; /* enum st_log_format */
	int access_log; /* 0 off, 1 on */
	char *ready_file;
	int sandbox; /* enum st_sandbox_mode */
};

/* --kubelet-http2: plain kubelet requests as HTTP/2 streams when the kubelet offers it. */
enum es_kubelet_http2 { ES_KUBELET_HTTP2_AUTO = 0, ES_KUBELET_HTTP2_OFF };

extern const struct st_config_spec es_config_spec;

#endif /* EDGESTREAM_CONFIG_H */
