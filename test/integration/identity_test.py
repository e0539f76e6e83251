#!/usr/bin/python3
"""Integration tests of edge identity in cloudstream (issue 16): revocation (the deny list
reloaded on SIGHUP, the admin close), SessionHostNameOverride checks, and IP identity without
trusting the edge (--internal-ip-policy node-address against Node objects served by an apiserver
stand-in, a header never displacing a verified IP, a really shared IP refused with 409).

    identity_test.py GROUP [TEST...]      GROUP: revocation | ip

The edges are the KubeEdge-protocol test edge (peers/kubeedge_edge.py) with `system:node:<name>`
certificates minted per run by stream-certs (without IP SANs unless a test asks for them).
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402
import standin  # noqa: E402
from harness import check  # noqa: E402
from cloudstream_test import raw_upgrade  # noqa: E402


# Who may use the stream port (the apiserver's kubelet client certificate of the test PKI).
ALLOWED = ["--stream-allowed-subjects", "kube-apiserver-kubelet-client"]


def serial_of(cert):
    out = subprocess.run(["openssl", "x509", "-noout", "-serial", "-in", cert],
                         check=True, capture_output=True, text=True).stdout
    return out.strip().split("=", 1)[1]


def wait_exit(p, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.01)
    return p.poll() is not None


def get(env, cloud, host, target="/healthz"):
    st, _, body, s = h.Api(env, cloud.ports["stream"]).request("GET", target, [("Host", host)])
    s.close()
    return st, body.decode(errors="replace")


# ---- the apiserver stand-in: Node objects ---------------------------------------------------

def node_object(name, addresses):
    """A Node as kube-apiserver serves it (GET /api/v1/nodes/NAME, core/v1 JSON), as a KubeEdge
    1.18 edge node registers itself: InternalIP and Hostname addresses, the kubelet endpoint at
    cloudstream's port."""
    return {
        "kind": "Node", "apiVersion": "v1",
        "metadata": {"name": name, "uid": "6f1c1f0e-0000-4000-8000-%012d" % (hash(name) % 10**12),
                     "resourceVersion": "4711", "creationTimestamp": "2026-11-24T09:00:00Z",
                     "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                "node-role.kubernetes.io/edge": ""}},
        "spec": {"taints": [{"key": "node-role.kubernetes.io/edge", "effect": "NoSchedule"}]},
        "status": {
            "addresses": ([{"type": "InternalIP", "address": a} for a in addresses] +
                          [{"type": "Hostname", "address": name}]),
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10350}},
            "conditions": [{"type": "Ready", "status": "True", "reason": "EdgeReady",
                            "lastHeartbeatTime": "2026-11-24T09:30:00Z",
                            "lastTransitionTime": "2026-11-24T09:00:00Z"}],
            "nodeInfo": {"kubeletVersion": "v1.29.5-kubeedge-v1.18.0", "operatingSystem": "linux",
                         "architecture": "amd64", "containerRuntimeVersion": "containerd://1.7.2"},
        },
    }


def not_found(kind, name):
    """kube-apiserver's 404 Status for a missing object."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": '%s "%s" not found' % (kind, name), "reason": "NotFound",
            "details": {"name": name, "kind": kind}, "code": 404}


class NodeApiserver:
    """Node objects over HTTPS with a bearer token (401 Status without it), as kube-apiserver
    serves them: GET /api/v1/nodes/NAME; the list (GET /api/v1/nodes?limit=N: a NodeList with the
    collection's resourceVersion, and a continue token when more remain); the watch
    (?watch=1&resourceVersion=RV&timeoutSeconds=T: HTTP/1.1 chunked, one JSON event a line,
    {"type": "ADDED"|"DELETED", "object": Node}, every event after RV, until T seconds pass)."""

    def __init__(self, env, nodes):
        token = "identity-token-1"
        self.token_file = standin.write_token(env, token)
        self.nodes = nodes  # name -> [addresses]; tests change it through add/delete
        self.requests = []
        self.rv = 1000
        self.events = []  # (rv, type, object)
        self.cond = threading.Condition()
        outer = self

        class Handler(standin.Handler):
            protocol_version = "HTTP/1.1"

            def watch(self, rv, timeout):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                deadline = time.monotonic() + timeout
                with outer.cond:
                    while True:
                        for erv, etype, obj in outer.events:
                            if erv > rv:
                                line = json.dumps({"type": etype, "object": obj}).encode()
                                line += b"\n"
                                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                                rv = erv
                        self.wfile.flush()
                        left = deadline - time.monotonic()
                        if left <= 0:
                            break
                        outer.cond.wait(left)
                self.wfile.write(b"0\r\n\r\n")

            def do_GET(self):
                outer.requests.append(self.path)
                from urllib.parse import urlsplit, parse_qs
                u = urlsplit(self.path)
                q = {k: v[0] for k, v in parse_qs(u.query).items()}
                parts = u.path.strip("/").split("/")
                if (self.headers.get("Authorization") == "Bearer " + token and
                        parts == ["api", "v1", "nodes"] and q.get("watch") in ("1", "true")):
                    return self.watch(int(q.get("resourceVersion", "0") or 0),
                                      float(q.get("timeoutSeconds", "30")))
                if (self.headers.get("Authorization") == "Bearer " + token and
                        parts == ["api", "v1", "nodes"]):
                    with outer.cond:
                        names = sorted(outer.nodes)
                        limit = int(q.get("limit", "0") or 0) or len(names)
                        meta = {"resourceVersion": str(outer.rv)}
                        if limit < len(names):
                            meta["continue"] = "eyJydiI6MTAwMH0"
                            meta["remainingItemCount"] = len(names) - limit
                        obj = {"kind": "NodeList", "apiVersion": "v1", "metadata": meta,
                               "items": [node_object(n, outer.nodes[n]) for n in names[:limit]]}
                    code = 200
                elif self.headers.get("Authorization") != "Bearer " + token:
                    code, obj = 401, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                      "status": "Failure", "message": "Unauthorized",
                                      "reason": "Unauthorized", "code": 401}
                elif len(parts) == 4 and parts[:3] == ["api", "v1", "nodes"]:
                    name = parts[3]
                    if name in outer.nodes:
                        code, obj = 200, node_object(name, outer.nodes[name])
                    else:
                        code, obj = 404, not_found("nodes", name)
                else:
                    code, obj = 404, not_found("unknown", self.path)
                self.reply(code, json.dumps(obj).encode())

        self.httpd = standin.serve(Handler, env)
        self.url = self.httpd.url

    def flags(self, env):
        return standin.apiserver_flags(env, self.url, self.token_file)

    def _event(self, etype, name, addresses):
        with self.cond:
            self.rv += 1
            obj = node_object(name, addresses)
            obj["metadata"]["resourceVersion"] = str(self.rv)
            self.events.append((self.rv, etype, obj))
            self.cond.notify_all()

    def delete_node(self, name):
        addresses = self.nodes.pop(name)
        self._event("DELETED", name, addresses)

    def add_node(self, name, addresses):
        self.nodes[name] = addresses
        self._event("ADDED", name, addresses)

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


# ---- revocation ------------------------------------------------------------------------------

def group_revocation():
    with h.Group("revocation", "id-revoke", nodes=("edge-1", "edge-2")) as g:
        env = g.env
        deny = os.path.join(env.dir, "deny-list")
        with open(deny, "w") as f:
            f.write("# nothing revoked yet\n")
        kubelet = h.start_kubelet(env)
        cloud = h.start_cloudstream(env, ALLOWED + ["--deny-list", deny,
                                                    "--deny-list-check-interval", "200ms"])
        tport = cloud.ports["tunnel"]
        node1 = env.path("node-edge-1")

        def write_deny(text):
            tmp = deny + ".tmp"
            with open(tmp, "w") as f:
                f.write(text)
            os.rename(tmp, deny)

        def deny_serial_closes_tunnel():
            edge = h.start_kubeedge_edge(env, cloud, kubelet, node="edge-1", name="e1-serial")
            check(get(env, cloud, "edge-1:10350")[0] == 200, "edge-1 not reachable first")
            serial = serial_of(node1 + ".crt")
            # openssl's form with ':' separators and lower case: the same serial
            pretty = ":".join(serial[i:i + 2] for i in range(0, len(serial), 2)).lower()
            write_deny("# revoked: the lost laptop\nserial %s   # edge-1\n" % pretty)
            mark = h.log_mark(cloud)
            t0 = time.monotonic()
            cloud.send_signal(signal.SIGHUP)
            check(wait_exit(edge, 3.0), "edge-1's tunnel still open 3 s after the reload")
            took = time.monotonic() - t0
            print("     deny list: tunnel closed %.3f s after SIGHUP" % took, flush=True)
            check(took <= 1.0, "tunnel closed %.3f s after the reload (> 1 s)" % took)
            check(h.log_has(cloud, "revoked by the deny list", mark), "no log line for the close")
            st, body = raw_upgrade(env, tport, node1, [])
            check(st == 403 and "deny list" in body and serial.lstrip("0") in body,
                  "re-admission: %d %r" % (st, body))
            check(h.log_has(cloud, "refused (403, denied)", mark),
                  "refusal not logged with its reason")
            check(h.metric(cloud, "cloudstream_tunnel_refusals_total", 'reason="denied"') >= 1,
                  "refusal not counted")
            check(h.metric(cloud, "cloudstream_tunnels_closed_total", 'reason="denied"') == 1,
                  "close not counted")
            st, _ = get(env, cloud, "edge-1:10350")
            check(st == 503, "a request for the revoked node: %d" % st)

        def deny_node_name():
            edge = h.start_kubeedge_edge(env, cloud, kubelet, node="edge-2", name="e2-name")
            write_deny("node edge-2\n")
            cloud.send_signal(signal.SIGHUP)
            check(wait_exit(edge, 1.5), "edge-2's tunnel still open after the reload")
            st, body = raw_upgrade(env, tport, env.path("node-edge-2"), [])
            check(st == 403 and "deny list" in body, "edge-2 re-admission: %d %r" % (st, body))
            # edge-1 is no longer listed: admitted again
            st, _ = raw_upgrade(env, tport, node1, [])
            check(st == 101, "edge-1 after its serial left the list: %d" % st)

        def bad_file_keeps_old_list():
            write_deny("node edge-2\nthis is not an entry\n")
            mark = h.log_mark(cloud)
            cloud.send_signal(signal.SIGHUP)
            check(h.log_has(cloud, "deny list not reloaded, the old one stays", mark),
                  "a bad file was not reported")
            check(h.log_has(cloud, "line 2", mark), "the bad line is not named")
            st, _ = raw_upgrade(env, tport, env.path("node-edge-2"), [])
            check(st == 403, "a bad file lifted the revocation: %d" % st)
            write_deny("")
            cloud.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 5
            while raw_upgrade(env, tport, env.path("node-edge-2"), [])[0] != 101:
                check(time.monotonic() < deadline, "edge-2 not admitted after the list emptied")
                time.sleep(0.05)

        def admin_close():
            edge = h.start_kubeedge_edge(env, cloud, kubelet, node="edge-1", name="e1-admin")
            st, body = h.admin_get(cloud, "/nodes/edge-1/close")
            check(st == 405, "GET of the close action: %d %r" % (st, body))
            mark = h.log_mark(cloud)
            t0 = time.monotonic()
            st, body = h.admin_post(cloud, "/nodes/edge-1/close")
            check(st == 200 and "edge-1" in body, "close: %d %r" % (st, body))
            check(wait_exit(edge, 2.0), "edge-1 still connected after the admin close")
            print("     admin close: edge gone after %.3f s" % (time.monotonic() - t0), flush=True)
            st, body = h.admin_post(cloud, "/nodes/edge-1/close")
            check(st == 404 and "no tunnel" in body, "close of a node without tunnel: %d" % st)
            st, _ = h.admin_post(cloud, "/nodes/Not_A_Name/close")
            check(st == 400, "close of an invalid name: %d" % st)
            check(h.metric(cloud, "cloudstream_tunnels_closed_total", 'reason="admin"') == 1,
                  "admin close not counted")
            check(h.log_has(cloud, "closed by the admin port", mark), "admin close not logged")

        def hostname_override_checked():
            st, body = raw_upgrade(env, tport, node1, [("SessionHostNameOverride", "a" * 300)])
            check(st == 403 and "300 bytes" in body, "oversized: %d %r" % (st, body))
            st, body = raw_upgrade(env, tport, node1,
                                   [("SessionHostNameOverride", "edge-1,edge-2")])
            check(st == 403 and "not one node name" in body, "folded: %d %r" % (st, body))
            st, body = raw_upgrade(env, tport, node1, [("SessionHostNameOverride", "edge-1, edge-1")])
            check(st == 403 and "sent twice" in body, "duplicated (folded): %d %r" % (st, body))
            st, body = raw_upgrade(env, tport, node1, [("SessionHostNameOverride", "Edge_1")])
            check(st == 403, "invalid: %d %r" % (st, body))
            st, _ = raw_upgrade(env, tport, node1, [("SessionHostNameOverride", "edge-1")])
            check(st == 101, "its own name: %d" % st)
            check(h.metric(cloud, "cloudstream_tunnel_refusals_total",
                           'reason="hostname_override"') == 4, "refusals not counted by reason")

        def file_change_without_sighup():
            # a ConfigMap-mounted list is replaced by the kubelet; nobody sends SIGHUP
            edge = h.start_kubeedge_edge(env, cloud, kubelet, node="edge-1", name="e1-file")
            t0 = time.monotonic()
            write_deny("node edge-1\n")
            check(wait_exit(edge, 3.0), "edge-1 still connected 3 s after the file changed")
            print("     file changed: tunnel closed %.3f s later (checked every 200 ms)"
                  % (time.monotonic() - t0), flush=True)
            write_deny("")
            deadline = time.monotonic() + 5
            while raw_upgrade(env, tport, node1, [])[0] != 101:
                check(time.monotonic() < deadline, "edge-1 not re-admitted after the file emptied")
                time.sleep(0.05)

        return g.run([
            ("deny_serial_closes_tunnel_within_1s", deny_serial_closes_tunnel),
            ("deny_node_name", deny_node_name),
            ("bad_file_keeps_old_list", bad_file_keeps_old_list),
            ("admin_close", admin_close),
            ("hostname_override_checked", hostname_override_checked),
            ("file_change_without_sighup", file_change_without_sighup),
        ], exit_0=[cloud])


# ---- IP identity -----------------------------------------------------------------------------

def group_ip():
    with h.Group("ip", "id-ip", nodes=("edge-1", "edge-2")) as g:
        env = g.env
        kubelet = h.start_kubelet(env)
        # edge-3 and edge-4/edge-5: certificates with IP SANs (verified by the certificate);
        # edge-4 and edge-5 really share 10.77.0.5 (overlapping site subnets).
        for node, ip in (("edge-3", "10.77.0.3"), ("edge-4", "10.77.0.5"), ("edge-5", "10.77.0.5")):
            env.mint("client", "--ca", env.path("tunnel-ca"), "--out", env.path("cert-" + node),
                     "--node", node, "--ip", ip)
        api = NodeApiserver(env, {"edge-1": ["10.77.0.11"], "edge-2": ["10.77.0.12"],
                                  "edge-6": ["10.77.0.3"]})
        g.on_close(api.stop)
        cloud = h.start_cloudstream(env, ALLOWED + api.flags(env) + [
            "--internal-ip-policy", "node-address", "--pod-cache-ttl", "2s",
            "--node-watch"])
        tport = cloud.ports["tunnel"]

        def wait_status(host, want, timeout=5.0):
            deadline = time.monotonic() + timeout
            while True:
                st, body = get(env, cloud, host)
                if st == want or time.monotonic() > deadline:
                    return st, body
                time.sleep(0.05)

        def kubeedge_cert_without_ip_sans():
            # an unmodified KubeEdge edge: CN=system:node:edge-1, no IP SAN, its InternalIP in
            # the SessionInternalIP header; the Node object lists it.
            out = subprocess.run(["openssl", "x509", "-noout", "-text", "-in",
                                  env.path("node-edge-1.crt")], capture_output=True, text=True)
            check("system:node:edge-1" in out.stdout and "IP Address" not in out.stdout,
                  "the test certificate is not KubeEdge-like")
            mark = h.log_mark(cloud)
            h.start_kubeedge_edge(env, cloud, kubelet, node="edge-1", name="ke-1",
                                  extra=["--internal-ip", "10.77.0.11"])
            st, body = wait_status("10.77.0.11:10350", 200)
            check(st == 200 and body.strip() == "ok", "by its IP: %d %r" % (st, body))
            check("/api/v1/nodes/edge-1" in api.requests, "the Node was not asked for")
            check(h.metric(cloud, "cloudstream_node_address_checks_total",
                           'result="verified"') == 1, "verification not counted")
            check(h.log_has(cloud, "SessionInternalIP 10.77.0.11 verified", mark), "not logged")

        def unlisted_ip_not_routed():
            mark = h.log_mark(cloud)
            h.start_kubeedge_edge(env, cloud, kubelet, node="edge-2", name="ke-2",
                                  extra=["--internal-ip", "10.77.0.99"])
            check(h.log_has(cloud, "SessionInternalIP 10.77.0.99 is not in Node edge-2", mark),
                  "an unlisted IP was not reported")
            st, body = get(env, cloud, "10.77.0.99:10350")
            check(st == 503, "an unlisted IP was routed: %d %r" % (st, body))
            st, _ = get(env, cloud, "edge-2:10350")
            check(st == 200, "edge-2 by name: %d" % st)

        def claim_of_verified_ip_refused():
            h.start_kubeedge_edge(env, cloud, kubelet, node="edge-3", name="ke-3",
                                  cert=env.path("cert-edge-3.crt"))
            check(get(env, cloud, "10.77.0.3:10350")[0] == 200, "edge-3 by its cert IP")
            # edge-2 (its Node does not list 10.77.0.3) claims edge-3's certificate IP
            mark = h.log_mark(cloud)
            for attempt in range(2):
                st, body = raw_upgrade(env, tport, env.path("node-edge-2"),
                                       [("SessionInternalIP", "10.77.0.3")])
                check(st == 403 and "edge-3" in body and "10.77.0.3" in body,
                      "claim %d: %d %r" % (attempt, st, body))
                time.sleep(0.3)  # the Node answer is cached by then
            check("Node object does not list it" in body, "the retry's reason: %r" % body)
            check(h.log_has(cloud, "refused (403, ip_conflict)", mark), "the refusal is not logged")
            st, body = get(env, cloud, "10.77.0.3:10350")
            check(st == 200, "edge-3 lost its IP: %d %r" % (st, body))

        def shared_ip_409():
            mark = h.log_mark(cloud)
            h.start_kubeedge_edge(env, cloud, kubelet, node="edge-4", name="ke-4",
                                  cert=env.path("cert-edge-4.crt"))
            h.start_kubeedge_edge(env, cloud, kubelet, node="edge-5", name="ke-5",
                                  cert=env.path("cert-edge-5.crt"))
            st, body = get(env, cloud, "10.77.0.5:10350")
            check(st == 409 and "edge-4" in body and "edge-5" in body and "shared" in body,
                  "shared IP: %d %r" % (st, body))
            check(get(env, cloud, "edge-4:10350")[0] == 200, "edge-4 by name")
            check(get(env, cloud, "edge-5:10350")[0] == 200, "edge-5 by name")
            # the node proxy path names the node: not ambiguous
            st, _, _, s = h.Api(env, cloud.ports["stream"]).request(
                "GET", "/healthz", [("Host", "10.77.0.5:10350"),
                                    ("X-Forwarded-Uri", "/api/v1/nodes/edge-5/proxy/healthz")])
            s.close()
            check(st == 200, "shared IP with X-Forwarded-Uri: %d" % st)
            check(h.metric(cloud, "cloudstream_shared_ips_total") >= 1, "sharing not counted")
            check(h.metric(cloud, "cloudstream_shared_ip_refusals_total") >= 1, "409 not counted")
            check(h.log_has(cloud, "IP 10.77.0.5 is verified for both node", mark),
                  "sharing not logged")

        def node_verified_ip_shares():
            # edge-6's Node lists 10.77.0.3 (edge-3's certificate IP): verified on both sides,
            # so after the lookup it is shared, never taken.
            env.mint("client", "--ca", env.path("tunnel-ca"), "--out", env.path("cert-edge-6"),
                     "--node", "edge-6")
            st, body = raw_upgrade(env, tport, env.path("cert-edge-6"),
                                   [("SessionInternalIP", "10.77.0.3")])
            check(st == 403 and "asking the apiserver" in body, "first: %d %r" % (st, body))
            deadline = time.monotonic() + 5
            while True:
                try:
                    h.start_kubeedge_edge(env, cloud, kubelet, node="edge-6", name="ke-6",
                                          cert=env.path("cert-edge-6.crt"),
                                          extra=["--internal-ip", "10.77.0.3"], )
                    break
                except h.Fail:
                    check(time.monotonic() < deadline, "edge-6 never admitted")
            st, body = get(env, cloud, "10.77.0.3:10350")
            check(st == 409 and "edge-3" in body and "edge-6" in body, "%d %r" % (st, body))

        def node_deleted_closes_tunnel():
            api.add_node("edge-7", [])
            env.mint("client", "--ca", env.path("tunnel-ca"), "--out", env.path("cert-edge-7"),
                     "--node", "edge-7")
            edge = h.start_kubeedge_edge(env, cloud, kubelet, node="edge-7", name="ke-7",
                                         cert=env.path("cert-edge-7.crt"))
            check(get(env, cloud, "edge-7:10350")[0] == 200, "edge-7 first")
            t0 = time.monotonic()
            api.delete_node("edge-7")
            check(wait_exit(edge, 8.0), "edge-7's tunnel still open 8 s after its Node went")
            took = time.monotonic() - t0
            print("     Node deleted: tunnel closed %.3f s after the delete event" % took,
                  flush=True)
            check(took <= 5.0, "closed %.3f s after the delete (> 5 s)" % took)
            st, body = raw_upgrade(env, tport, env.path("cert-edge-7"), [])
            check(st == 403 and "Node object was deleted" in body, "re-admission: %d %r" % (st, body))
            check(h.metric(cloud, "cloudstream_tunnels_closed_total", 'reason="node_deleted"') == 1,
                  "not counted")
            api.add_node("edge-7", [])
            deadline = time.monotonic() + 5
            while raw_upgrade(env, tport, env.path("cert-edge-7"), [])[0] != 101:
                check(time.monotonic() < deadline, "edge-7 refused after its Node came back")
                time.sleep(0.1)

        return g.run([
            ("kubeedge_cert_without_ip_sans_node_address", kubeedge_cert_without_ip_sans),
            ("unlisted_ip_not_routed", unlisted_ip_not_routed),
            ("claim_of_verified_ip_refused_403", claim_of_verified_ip_refused),
            ("shared_ip_409_names_both", shared_ip_409),
            ("node_verified_ip_shares", node_verified_ip_shares),
            ("node_deleted_closes_tunnel_within_5s", node_deleted_closes_tunnel),
        ], exit_0=[cloud])


# ---- the edge: edged's read-only port, certificate rotation, expiry ----------------------------

class PlainBackend:
    """KubeEdge edged's read-only port as it answers: plain HTTP on loopback, /metrics, /stats."""

    def __init__(self):
        class Handler(standin.Handler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):  # noqa: N802 - http.server's name
                if self.path == "/metrics":
                    body = b"# TYPE kubelet_running_pods gauge\nkubelet_running_pods 3\n"
                    ctype = "text/plain; version=0.0.4"
                elif self.path.startswith("/stats"):
                    body = json.dumps({"node": {"nodeName": "edge-1",
                                                "cpu": {"usageNanoCores": 1234}}}).encode()
                    ctype = "application/json"
                else:
                    body, ctype = b"404 page not found\n", "text/plain"
                self.reply(200 if ctype != "text/plain" else 404, body, ctype)

        self.httpd = standin.serve(Handler)
        self.port = self.httpd.server_address[1]

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def mint_short_lived(env, out, node, seconds_before, seconds_after):
    """A node client certificate (system:node:NODE, O=system:nodes) from the tunnel CA valid from
    now - @seconds_before to now + @seconds_after: stream-certs counts in days."""
    import datetime
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    with open(env.path("tunnel-ca.crt"), "rb") as f:
        ca = x509.load_pem_x509_certificate(f.read())
    with open(env.path("tunnel-ca.key"), "rb") as f:
        ca_key = serialization.load_pem_private_key(f.read(), None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
                                     x509.NameAttribute(NameOID.COMMON_NAME, "system:node:" + node)]))
            .issuer_name(ca.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(seconds=seconds_before))
            .not_valid_after(now + datetime.timedelta(seconds=seconds_after))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False,
                                         False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    with open(out + ".crt", "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(out + ".key", "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    after = getattr(cert, "not_valid_after_utc", None)  # cryptography >= 42
    if after is None:
        after = cert.not_valid_after.replace(tzinfo=datetime.timezone.utc)
    return int(after.timestamp())


def not_after(path):
    out = subprocess.run(["openssl", "x509", "-noout", "-enddate", "-in", path], check=True,
                         capture_output=True, text=True).stdout.strip().split("=", 1)[1]
    import datetime
    t = datetime.datetime.strptime(out, "%b %d %H:%M:%S %Y GMT")
    return int(t.replace(tzinfo=datetime.timezone.utc).timestamp())


def group_edge():
    with h.Group("edge", "id-edge", nodes=("edge-1", "edge-2")) as g:
        env = g.env
        deny = os.path.join(env.dir, "deny-list")
        open(deny, "w").close()
        cloud = h.start_cloudstream(env, ALLOWED + ["--deny-list", deny])
        kubelet = h.start_kubelet(env)
        backend = PlainBackend()
        g.on_close(backend.close)

        def wait_get(host, target="/healthz", want=200, timeout=5.0):
            deadline = time.monotonic() + timeout
            while True:
                st, body = get(env, cloud, host, target)
                if st == want or time.monotonic() > deadline:
                    return st, body
                time.sleep(0.05)

        def edged_read_only_port():
            url = "http://127.0.0.1:%d" % backend.port
            edge = h.start_edgestream(env, cloud, None, node="edge-2", name="es-edged",
                                      extra=["--kubelet-url", url])
            st, body = get(env, cloud, "edge-2:10350", "/metrics")
            check(st == 200 and "kubelet_running_pods 3" in body, "metrics: %d %r" % (st, body))
            st, body = get(env, cloud, "edge-2:10350", "/stats/summary")
            check(st == 200 and json.loads(body)["node"]["nodeName"] == "edge-1",
                  "stats: %d %r" % (st, body))
            env.stop(edge)

        def plain_http_only_to_loopback():
            for url in ("http://10.0.0.5:10350", "http://localhost:10350"):
                try:
                    h.start_edgestream(env, cloud, None, node="edge-2", name="es-bad",
                                       extra=["--kubelet-url", url], timeout=5)
                except h.Fail as e:
                    check("loopback" in str(e), "%s: %s" % (url, e))
                else:
                    raise h.Fail("%s was accepted" % url)

        def rotation_piecemeal_keeps_old_pair():
            # The edge's certificate files, rotated the way a careless script does: the new
            # certificate first, its key a while later. Until both match, the live context must
            # keep the old pair (a redial must still work); then the new pair is used.
            d = os.path.join(env.dir, "rot")
            os.makedirs(d)
            cert, key = os.path.join(d, "edge.crt"), os.path.join(d, "edge.key")
            subprocess.run(["cp", env.path("node-edge-1.crt"), cert], check=True)
            subprocess.run(["cp", env.path("node-edge-1.key"), key], check=True)
            old_serial = serial_of(cert)
            # (the TLS kubelet stand-in, so the test runs against edgestreams of any age)
            edge = h.start_edgestream(env, cloud, kubelet, node="edge-1", name="es-rot", cert=cert,
                                      extra=["--cert-check-interval", "100ms",
                                             "--backoff-initial", "50ms", "--backoff-max", "200ms"])
            check(get(env, cloud, "edge-1:10350")[0] == 200, "before rotation")
            env.mint("client", "--ca", env.path("tunnel-ca"), "--out", os.path.join(d, "new"),
                     "--node", "edge-1")
            new_serial = serial_of(os.path.join(d, "new.crt"))
            with open(os.path.join(d, "new.crt"), "rb") as f, open(cert, "wb") as o:
                o.write(f.read())  # the certificate alone: the key on disk is the old one
            check(h.log_has(edge, "do not load yet", 0),  # the edge is this test's own
                  "the mismatched pair was not noticed")
            time.sleep(0.5)  # several checks
            check(not h.log_has(edge, "reloaded the tunnel certificate", 0, 0.1),
                  "a mismatched pair was swapped in")
            # a new handshake now: it must still work, with the old pair
            st, _ = h.admin_post(cloud, "/nodes/edge-1/close")
            check(st == 200, "admin close: %d" % st)
            st, body = wait_get("edge-1:10350")
            check(st == 200, "redial with the certificate but not yet the key on disk: %d %r"
                  % (st, body))
            # the key arrives: now the new pair is swapped in
            with open(os.path.join(d, "new.key"), "rb") as f, open(key + ".tmp", "wb") as o:
                o.write(f.read())
            os.rename(key + ".tmp", key)
            check(h.log_has(edge, "reloaded the tunnel certificate", 0), "the new pair not loaded")
            # revoke the old serial: the tunnel on the old pair closes, the redial uses the new
            with open(deny, "w") as f:
                f.write("serial %s\n" % old_serial)
            mark = h.log_mark(cloud)
            cloud.send_signal(signal.SIGHUP)
            check(h.log_has(cloud, "revoked by the deny list", mark),
                  "the old-pair tunnel not closed")
            st, body = wait_get("edge-1:10350")
            check(st == 200, "redial with the new pair: %d %r" % (st, body))
            check(new_serial != old_serial, "the same serial twice")
            open(deny, "w").close()
            cloud.send_signal(signal.SIGHUP)
            env.stop(edge)

        def certificate_expiry_metrics():
            want = not_after(env.path("cloudstream-tunnel.crt"))
            got = h.metric(cloud, "cloudstream_certificate_expiry_seconds", 'cert="tunnel"')
            check(int(got) == want, "cloud tunnel: %d, want %d" % (got, want))
            check(h.metric(cloud, "cloudstream_certificate_expiry_seconds", 'cert="stream"') > 0,
                  "cloud stream certificate")
            # an edge certificate 5 minutes old with 60 s left: under a third of its lifetime
            short = os.path.join(env.dir, "short")
            na = mint_short_lived(env, short, "edge-2", 300, 60)
            edge = h.start_edgestream(env, cloud, None, node="edge-2", name="es-short",
                                      cert=short + ".crt",
                                      extra=["--kubelet-url", "http://127.0.0.1:%d" % backend.port])
            got = h.metric(edge, "edgestream_certificate_expiry_seconds", 'cert="tunnel"')
            check(int(got) == na, "edge: %d, want %d" % (got, na))
            check(h.log_has(edge, "the tunnel certificate expires in", 0), "no expiry warning")
            env.stop(edge)

        return g.run([
            ("edged_read_only_port_plain_http", edged_read_only_port),
            ("plain_http_only_to_loopback", plain_http_only_to_loopback),
            ("rotation_piecemeal_keeps_old_pair", rotation_piecemeal_keeps_old_pair),
            ("certificate_expiry_metrics", certificate_expiry_metrics),
        ], exit_0=[cloud])


def main():
    return h.main_by_group({"revocation": group_revocation, "ip": group_ip,
                            "edge": group_edge}, "revocation")


if __name__ == "__main__":
    sys.exit(main())
