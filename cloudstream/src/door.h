/*
 * cloudstream/src/door.h — the front door: kube-apiserver's EgressSelector `HTTPConnect` egress
 * (DESIGN D13). The apiserver opens one connection per tunnel, over TLS with its egress client
 * certificate or over a unix socket, and sends exactly
 *
 *     CONNECT <host>:<port> HTTP/1.1\r\n
 *     Host: 127.0.0.1\r\n
 *     \r\n
 *
 * (staging/src/k8s.io/apiserver/pkg/server/egressselector/egress_selector.go); <host> is a Node
 * address (an IP, or the node name with --kubelet-preferred-address-types=Hostname), <port> the
 * Node's kubelet port. cloudstream resolves the host to a connected edge node, opens a
 * TCP_CONNECT stream on its tunnel (the kubelet's port becomes the edge's named target
 * "kubelet"; another port is asked for as a port, which the edge's allow-list decides), and
 * answers `200 Connection established` only when the edge's OPENED says its dial succeeded;
 * a failure is a 502/503/504 whose reason phrase says why (kube-apiserver shows the reason
 * phrase to the user and drops the body). From then on the bytes, the apiserver's own TLS to
 * the kubelet included, are relayed untouched in both directions, with the tunnel's per-stream
 * credit, half-close and budgets: a front-door connection is one more stream endpoint
 * (tunnel.h).
 *
 * door_parse.c is the pure part (the head, the answers, the edge's codes, the TCP_CONNECT
 * payload); door.c is the lws glue and the endpoint. Loop thread only (door.c).
 */
#ifndef CLOUDSTREAM_DOOR_H
#define CLOUDSTREAM_DOOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The longest CONNECT head read: kube-apiserver's is about 40 bytes; anything near this is not
 * an apiserver. */
#define CS_DOOR_MAX_HEAD_BYTES 8192u
/* The longest host in a CONNECT target (a DNS name). */
#define CS_DOOR_MAX_HOST_BYTES 253u
/* The longest reason phrase we write. */
#define CS_DOOR_MAX_REASON_BYTES 400u

/* A parsed CONNECT request: views into the caller's input. */
struct cs_door_req {
	const char *host; /* an IPv4 or IPv6 address (without its brackets) or a DNS name */
	size_t host_len;
	bool host_is_ip;   /* a literal address: IPv4 dotted, or IPv6 (it was in brackets) */
	uint16_t port;     /* 1..65535 */
	int minor_version; /* HTTP/1.0 or 1.1 */
};

/*
 * cs_door_parse() - one CONNECT head from @p (@len bytes).
 * Returns the head's length (> 0), 0 when it is incomplete (and under CS_DOOR_MAX_HEAD_BYTES),
 * or a negative errno with the status to answer in *@status and the reason in *@why (static):
 * -EBADMSG 400 (malformed head or target), -EMSGSIZE 431 (head too large), -ENOTSUP 405 (not
 * CONNECT: this port only tunnels).
 */
ssize_t cs_door_parse(const uint8_t *p, size_t len, struct cs_door_req *out, int *status,
                      const char **why);

/*
 * cs_door_answer() - the answer head for @status into @out (@cap bytes): 200 is exactly
 * "HTTP/1.1 200 Connection established\r\n\r\n" (the apiserver refuses any byte after it);
 * any other status carries @reason as its reason phrase (control bytes and non-ASCII replaced
 * by '?', cut at CS_DOOR_MAX_REASON_BYTES), then "Content-Length: 0" and "Connection: close".
 * Returns the length, or -EMSGSIZE.
 */
ssize_t cs_door_answer(char *out, size_t cap, int status, const char *reason);

/* cs_door_error_status() - the status for the edge's ERROR @code before OPENED: 504 for a
 * timeout, 503 for a limit, 502 for everything else (a refusal included: the dial did not
 * happen, the reason says why). */
int cs_door_error_status(uint64_t code);

/* Where the edge should dial (the TCP_CONNECT target). */
enum cs_door_target {
	CS_DOOR_TARGET_KUBELET = 0, /* the node's kubelet: target "kubelet", the port unused */
	CS_DOOR_TARGET_PORT = 1,    /* a port on the node: the edge's --local-port decides */
	CS_DOOR_TARGET_POD = 2,     /* a pod IP (dotted IPv4) on the node: its --pod-ports decide */
};

/* cs_door_payload() - the TCP_CONNECT payload for @target and @port into @out (@pod_ip, the
 * dotted IPv4 address, for CS_DOOR_TARGET_POD; else unused). Its length, or -EMSGSIZE/-EINVAL
 * (st_ext_tcp_connect_encode; -EINVAL also for a pod target without an address). */
ssize_t cs_door_payload(uint8_t *out, size_t cap, enum cs_door_target target, uint16_t port,
                        const char *pod_ip);

/* The pod cache's namespace for pod IPs (a name no namespace can have): the key is
 * CS_DOOR_POD_IP_NS "/" <ip>. */
#define CS_DOOR_POD_IP_NS "@pod-ip"

/*
 * cs_door_pod_node() - the node of the pod with IP @ip in a PodList (@json, @len bytes: the
 * answer to GET /api/v1/pods?fieldSelector=status.podIP=<ip>): the first pod whose
 * status.podIP is @ip, that is not hostNetwork (its IP is its node's) and has not ended
 * (phase Succeeded or Failed: its IP may be another pod's now), with a spec.nodeName.
 * Returns 1 with the name in @node (@cap bytes, NUL-terminated), 0 when no pod qualifies,
 * -EBADMSG when @json is not a PodList, -EMSGSIZE for a name over @cap.
 */
int cs_door_pod_node(const char *json, size_t len, const char *ip, char *node, size_t cap);

/* cs_door_ports_parse() - "10250", a kubelet port of --front-door-kubelet-ports: 0 and
 * *@port, or -EINVAL. */
int cs_door_port_parse(const char *s, uint16_t *port);

/* ---- door.c ---------------------------------------------------------------------------- */

struct cs_server;

/* cs_door_setup() - at start (and for --check-config), before the context's vhosts: the
 * kubelet ports, the socket's mode, what --front-door-pod-ips needs; 0, or -EINVAL after
 * logging every problem, -ENOMEM. srv->door is set either way (cs_door_free). */
int cs_door_setup(struct cs_server *srv);
/* cs_door_create_vhosts() - the TLS listener (--front-door-listen) and the unix socket
 * (--front-door-socket), each when configured. 0 or a negative errno (logged). */
int cs_door_create_vhosts(struct cs_server *srv);
/* cs_door_port() - the TLS listener's port, 0 when off. */
int cs_door_port(const struct cs_server *srv);

#endif /* CLOUDSTREAM_DOOR_H */
