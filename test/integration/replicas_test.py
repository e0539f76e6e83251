#!/usr/bin/python3
"""Several cloudstream replicas serve one fleet (issue 13, DESIGN D12, PROTOCOL.md §7).

Three replicas on loopback, each with its own tunnel, stream and admin ports, linked by --peers
(each list names all three: a replica recognizes itself by its replica id) through a TCP relay
per directed link that the test can cut and heal (a partition without root). Edges connect to
different replicas: edgestream (extensions) and the KubeEdge-protocol Python edge (base).

Groups:
  mesh       every node, through every replica: logs, an exec-like upgrade (SPDY, bytes echoed)
             and metrics; 100 % succeed, bytes identical to what the kubelet stand-in sends
  failover   SIGKILL a replica: its nodes leave the others' directories (link loss: 503 naming
             the node), and a request loop for nodes held elsewhere never fails
  reconnect  the same node admitted by two replicas: the older tunnel is closed, requests go to
             the newer one through every replica
  partition  a replica's links cut while the same node comes up elsewhere, then healed: one
             holder per node, reachable through all three
"""
import os
import re
import signal
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402
import standin  # noqa: E402
from harness import check  # noqa: E402

UPGRADE_SPDY = h.UPGRADE_SPDY  # ha_test and test/bench use rt.UPGRADE_SPDY
NAMES = ("cs-a", "cs-b", "cs-c")


class Relay:
    """A TCP relay 127.0.0.1:port → 127.0.0.1:target that can be cut (every connection closed,
    new ones refused at once) and healed: one per directed peer link."""

    def __init__(self, target):
        self.target = target
        self.cut = False
        self.blackhole = False  # connections kept, bytes dropped: a partition that closes nothing
        self.conns = []
        self.lock = threading.Lock()
        self.ls = socket.socket()
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(16)
        self.port = self.ls.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            if self.cut:
                c.close()
                continue
            try:
                u = socket.create_connection(("127.0.0.1", self.target), timeout=5)
            except OSError:
                c.close()
                continue
            with self.lock:
                self.conns += [c, u]
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, a, b):
        try:
            while True:
                d = a.recv(1 << 16)
                if not d:
                    break
                if not self.blackhole:
                    b.sendall(d)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def set_cut(self, cut):
        self.cut = cut
        if cut:
            with self.lock:
                for s in self.conns:
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                self.conns = []


class Fleet:
    """Three replicas, their relays, certificates, one kubelet stand-in behind every edge
    (made by make_fleet)."""

    def start_replica(self, i):
        env = self.env
        peers = ",".join("127.0.0.1:%d" % (self.relays[i][j].port if j != i
                                           else self.tunnel_ports[i]) for j in range(3))
        extra = ["--replica-id", NAMES[i], "--peers", peers, *h.peer_pki_flags(env),
                 "--peer-redial-max", "500ms",
                 "--peer-dead-timeout", "3s",
                 "--front-door-socket", env.sock("door-%s.sock" % NAMES[i])]
        p = h.start_cloudstream(env, extra=extra, name=NAMES[i])
        # --tunnel-listen 127.0.0.1:0 from the harness is overridden: fixed ports, the relays
        # point at them.
        self.cs[i] = p
        return p

    def api(self, i):
        return h.Api(self.env, self.cs[i].ports["stream"])

    def close(self, failed):
        h.close_env(self.env, failed)


_orig_start = h.start_cloudstream


def _start_fixed(env, extra=(), name="cloudstream", prefix=(), wrap=None):
    port = None
    if name in NAMES and hasattr(env, "fleet_ports"):
        port = env.fleet_ports[NAMES.index(name)]

    def w(argv):
        if port is not None:
            k = argv.index("--tunnel-listen")
            argv[k + 1] = "127.0.0.1:%d" % port
        return argv
    return _orig_start(env, extra=extra, name=name, prefix=prefix, wrap=w)


def make_fleet(tag, nodes):
    # The ports must be known before the replicas start (each one's --peers names the others).
    env_ports = [h.free_port() for _ in NAMES]
    f = Fleet.__new__(Fleet)
    f.env = h.Env(tag, nodes=nodes)
    f.env.fleet_ports = env_ports
    env = f.env
    env.mint("client", "--ca", env.path("peer-ca"), "--out", env.path("peer-wrong"),
             "--cn", "someone-else")
    f.tunnel_ports = env_ports
    f.relays = [[Relay(env_ports[j]) if i != j else None for j in range(3)] for i in range(3)]
    f.edges = {}
    f.cs = [None, None, None]
    try:
        f.kubelet = h.start_kubelet(env)
        for i in range(3):
            f.start_replica(i)
    except Exception:
        f.close(True)
        raise
    return f


h.start_cloudstream = _start_fixed


admin_get = h.admin_get  # kept under this name: ha_test and test/bench call rt.admin_get


def metric(p, name):
    _, text = admin_get(p, "/metrics")
    m = re.search(r"^%s (\d+)" % re.escape(name), text, re.M)
    return int(m.group(1)) if m else None


def wait_for(pred, what, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise h.Fail("timed out waiting for " + what)


def wait_directory(fleet, n_remote, timeout=10.0):
    """Every live replica knows n_remote[i] nodes held by the others."""
    def ok():
        for i, p in enumerate(fleet.cs):
            if p is None or p.poll() is not None:
                continue
            if metric(p, "cloudstream_peer_directory_nodes") != n_remote[i]:
                return False
        return True
    wait_for(ok, "the directories (%r)" % (n_remote,), timeout)


def get(api, node, target, timeout=10.0):
    status, hdrs, body, s = api.request("GET", target, [("Host", "%s:10350" % node)],
                                        timeout=timeout)
    s.close()
    return status, body


def logs(api, node):
    status, body = get(api, node, "/containerLogs/default/pod-a/ctr?tailLines=5")
    want = "".join("line %d\n" % i for i in range(1, 6)).encode()
    check(status == 200 and body == want,
          "logs of %s: %d %r" % (node, status, body[:200]))


def metrics(api, node, direct):
    status, body = get(api, node, "/metrics")
    check(status == 200 and body == direct, "metrics of %s: %d, %d bytes (want %d)" % (
        node, status, len(body), len(direct)))


def exec_echo(api, node):
    s, _, rest = h.open_exec(api, node, "greet&input=1&output=1", "exec on %s" % node)
    payload = os.urandom(200000)
    s.sendall(payload)
    echo = h.recv_until(s, lambda b: len(b) >= len(payload), rest)
    check(echo == payload, "exec on %s: echo differs (%d bytes)" % (node, len(echo)))
    s.close()


def kubelet_metrics(fleet):
    import ssl
    env = fleet.env
    ctx = ssl.create_default_context(cafile=env.path("kubelet-ca.crt"))
    ctx.check_hostname = False
    ctx.load_cert_chain(env.path("edgestream-kubelet-client.crt"),
                        env.path("edgestream-kubelet-client.key"))
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", fleet.kubelet.port), timeout=10))
    s.sendall(h.head("GET", "/metrics", [("Host", "127.0.0.1")]))
    status, hdrs, rest = h.read_head(s)
    body = h.read_body(s, hdrs, rest)
    s.close()
    return body


def start_edge(fleet, node, i, kind):
    if kind == "edgestream":
        p = h.start_edgestream(fleet.env, fleet.cs[i], fleet.kubelet, node=node,
                               name="edge-%s-%s" % (node, NAMES[i]))
    else:
        p = h.start_kubeedge_edge(fleet.env, fleet.cs[i], fleet.kubelet, node=node,
                                  protocol="base", name="ke-%s-%s" % (node, NAMES[i]))
    fleet.edges[node] = (p, i)
    return p


def ready_all(fleet):
    for p in fleet.cs:
        if p is not None and p.poll() is None:
            wait_for(lambda: admin_get(p, "/readyz")[0] == 200, "%s ready" % p.name)


# node → (replica index, edge kind)
LAYOUT = {"edge-1": (0, "edgestream"), "edge-2": (1, "edgestream"), "edge-3": (2, "edgestream"),
          "edge-4": (0, "kubeedge"), "edge-5": (2, "kubeedge")}


def with_fleet(tag, body, nodes=tuple(LAYOUT)):
    fleet = make_fleet(tag, nodes)
    failed = True
    try:
        body(fleet)
        # The edges go first: a draining replica asks its edges to reconnect elsewhere and
        # waits (--drain-timeout, 30 s) for those that cannot (each knows only its replica),
        # longer than env.stop waits before SIGKILL. Then every replica still running exits
        # 0 on SIGTERM, with a clean ASan/UBSan log.
        for p in fleet.env.procs:
            if p not in fleet.cs and p is not fleet.kubelet:
                fleet.env.stop(p)
        for p in fleet.cs:
            if p is None or p.poll() is not None:
                continue
            h.stop_clean(fleet.env, p)
        failed = False
    finally:
        fleet.close(failed)


def start_layout(fleet):
    for node, (i, kind) in LAYOUT.items():
        start_edge(fleet, node, i, kind)
    held = [sum(1 for n, (i, _) in LAYOUT.items() if i == r) for r in range(3)]
    wait_directory(fleet, [len(LAYOUT) - held[r] for r in range(3)])
    ready_all(fleet)


def upgrade(fleet, i, cert, path):
    """A websocket upgrade to replica @i's tunnel port with client certificate @cert: the
    status and the refusal text."""
    import ssl
    env = fleet.env
    ctx = ssl.create_default_context(cafile=env.path("tunnel-ca.crt"))
    ctx.check_hostname = False
    ctx.load_cert_chain(env.path(cert + ".crt"), env.path(cert + ".key"))
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", fleet.tunnel_ports[i]),
                                                 timeout=10), server_hostname="localhost")
    s.sendall(h.head("GET", path, [("Host", "localhost"), ("Connection", "Upgrade"),
                                   ("Upgrade", "websocket"), ("Sec-WebSocket-Version", "13"),
                                   ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
                                   ("X-Cloudstream-Tunnel",
                                    "v=1; caps=flow,peer; replica=intruder")]))
    status, hdrs, rest = h.read_head(s)
    body = h.read_body(s, hdrs, rest)
    s.close()
    return status, body


def door_get(fleet, i, node, path):
    """The front door of replica @i (its unix socket): CONNECT node:10250, then the kubelet's
    TLS inside, one GET. Returns (CONNECT status, reason, GET status, body)."""
    import ssl
    env = fleet.env
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(env.sock("door-%s.sock" % NAMES[i]))
    s.sendall(("CONNECT %s:10250 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % node).encode())
    buf = h.recv_until(s, lambda b: b"\r\n\r\n" in b)
    line = buf.split(b"\r\n")[0].decode()
    code, reason = int(line.split(" ", 2)[1]), line.split(" ", 2)[2]
    if code != 200:
        s.close()
        return code, reason, None, None
    ctx = ssl.create_default_context(cafile=env.path("kubelet-ca.crt"))
    ctx.check_hostname = False
    ctx.load_cert_chain(env.path("edgestream-kubelet-client.crt"),
                        env.path("edgestream-kubelet-client.key"))
    t = ctx.wrap_socket(s)
    t.sendall(h.head("GET", path, [("Host", "%s:10250" % node)]))
    status, hdrs, rest = h.read_head(t)
    body = h.read_body(t, hdrs, rest)
    t.close()
    return code, reason, status, body


def dns():
    """--peer-dns: the replicas are what a name resolves to (here localhost, i.e. 127.0.0.1).
    cs-a finds only itself that way (recognized by its replica id, not dialled again) and
    lists cs-b with --peers; cs-b finds cs-a by the name alone. cs-a forwards edge-2's
    requests over the link cs-b dialled to it, which only DNS told cs-b about."""
    env = h.Env("replicas-dns", nodes=("edge-1", "edge-2"))
    failed = True
    try:
        ports = [h.free_port(), h.free_port()]
        env.fleet_ports = ports
        kubelet = h.start_kubelet(env)
        common = h.peer_pki_flags(env) + ["--peer-dns-interval", "1s"]
        a = h.start_cloudstream(env, name=NAMES[0], extra=common + [
            "--replica-id", NAMES[0], "--peer-dns", "localhost:%d" % ports[0],
            "--peers", "127.0.0.1:%d" % ports[1]])
        b = h.start_cloudstream(env, name=NAMES[1], extra=common + [
            "--replica-id", NAMES[1], "--peer-dns", "localhost:%d" % ports[0]])
        h.start_edgestream(env, a, kubelet, node="edge-1")
        h.start_edgestream(env, b, kubelet, node="edge-2")
        fleet = type("F", (), {"cs": [a, b, None]})()
        wait_directory(fleet, [1, 1, None])
        for i, p in enumerate((a, b)):
            api = h.Api(env, p.ports["stream"])
            for node in ("edge-1", "edge-2"):
                logs(api, node)
        with open(a.logpath) as f:
            check("is this replica (cs-a)" in f.read(), "cs-a did not recognize itself")
        with open(b.logpath) as f:
            check("found by --peer-dns localhost" in f.read(), "cs-b found nobody by DNS")
        for p in (a, b):
            check(env.stop(p) == 0, "%s exit status" % p.name)
        print("dns: cs-b found cs-a by --peer-dns alone, cs-a recognized itself in the same "
              "name by its replica id; both nodes reachable through both replicas", flush=True)
        failed = False
    finally:
        h.close_env(env, failed)


def service():
    """--peer-service: the replicas are the endpoints of a headless Service's EndpointSlices,
    listed then watched through the apiserver (peers/kube_endpointslices.py). cs-c's slice
    appears later (a watch event: the others dial it); cs-b's slice is deleted (the others
    stop dialling it, so it forgets their nodes)."""
    sys.path.insert(0, h.PEERS)
    import kube_endpointslices
    env = h.Env("replicas-svc", nodes=("edge-1", "edge-2", "edge-3"))
    failed = True
    api = None
    try:
        ports = [h.free_port() for _ in NAMES]
        env.fleet_ports = ports
        token = standin.write_token(env, "peer-watch-token")
        api = kube_endpointslices.EndpointSlices(env.path("kubelet.crt"), env.path("kubelet.key"),
                                                 "peer-watch-token")
        for i in (0, 1):
            api.put("cloud", "cloudstream-peers-%d" % i, "cloudstream-peers", ["127.0.0.1"],
                    ports[i])
        kubelet = h.start_kubelet(env)
        cs = []
        for i, name in enumerate(NAMES):
            cs.append(h.start_cloudstream(env, name=name, extra=[
                "--replica-id", name, "--peer-service", "cloud/cloudstream-peers",
                *standin.apiserver_flags(env, api.url, token),
                *h.peer_pki_flags(env), "--peer-sync-timeout", "3s"]))
        for i, node in enumerate(("edge-1", "edge-2", "edge-3")):
            h.start_edgestream(env, cs[i], kubelet, node=node)
        fleet = type("F", (), {"cs": cs})()
        # c is in no slice yet: nobody dials it (it learns no node), it dials a and b.
        wait_directory(fleet, [2, 2, 0])
        check(api.calls[:2] == ["list", "watch"], "calls %r" % api.calls[:4])
        api.put("cloud", "cloudstream-peers-2", "cloudstream-peers", ["127.0.0.1"], ports[2])
        wait_directory(fleet, [2, 2, 2])  # the watch event: a and b dial c
        for p in cs:
            for node in ("edge-1", "edge-2", "edge-3"):
                logs(h.Api(env, p.ports["stream"]), node)
        api.delete("cloud", "cloudstream-peers-1")
        wait_directory(fleet, [2, 0, 2])  # nobody dials b now: b forgets the others' nodes
        for p in cs:
            check(env.stop(p) == 0, "%s exit status" % p.name)
        print("service: members from EndpointSlices (list, then watch): a slice added is "
              "dialled, a slice deleted is not any more; every node through every replica",
              flush=True)
        failed = False
    finally:
        if api:
            api.close()
        h.close_env(env, failed)


def readiness():
    """/readyz waits for every peer's full list, at most --peer-sync-timeout (logged)."""
    env = h.Env("replicas-ready", nodes=())
    failed = True
    try:
        nowhere = h.free_port()  # nothing listens there: that peer never syncs
        p = h.start_cloudstream(env, name="lonely", extra=[
            "--replica-id", "lonely", "--peers", "127.0.0.1:%d" % nowhere,
            "--peer-cert", env.path("cloudstream-peer.crt"),
            "--peer-key", env.path("cloudstream-peer.key"),
            "--peer-ca", env.path("peer-ca.crt"), "--peer-server-ca", env.path("tunnel-ca.crt"),
            "--peer-sync-timeout", "2s"])
        t0 = time.monotonic()
        status, text = admin_get(p, "/readyz")
        check(status == 503, "readyz before any sync: %d %r" % (status, text))
        wait_for(lambda: admin_get(p, "/readyz")[0] == 200, "readyz after the timeout", 6)
        took = time.monotonic() - t0
        check(took >= 1.5, "ready after %.1f s, before --peer-sync-timeout" % took)
        with open(p.logpath) as f:
            check("not synced with 127.0.0.1 after --peer-sync-timeout" in f.read(),
                  "the timeout is not logged")
        check(env.stop(p) == 0, "exit status")
        print("readiness: 503 until --peer-sync-timeout (2 s) with an unreachable peer, then "
              "200 (after %.1f s), logged" % took, flush=True)
        failed = False
    finally:
        h.close_env(env, failed)


def mesh():
    def body(fleet):
        start_layout(fleet)
        direct = kubelet_metrics(fleet)
        n = 0
        for node in LAYOUT:
            for r in range(3):
                api = fleet.api(r)
                logs(api, node)
                metrics(api, node, direct)
                exec_echo(api, node)
                n += 3
        out = sum(metric(p, 'cloudstream_peer_streams_total{dir="out"}') or 0 for p in fleet.cs)
        inn = sum(metric(p, 'cloudstream_peer_streams_total{dir="in"}') or 0 for p in fleet.cs)
        # 2 of every 3 requests were forwarded, and each was relayed once at its holder.
        check(out == inn == n * 2 // 3, "forwarded %d, relayed %d, want %d" % (out, inn,
                                                                              n * 2 // 3))
        # The front door forwards its CONNECT tunnels the same way (edgestream edges); a
        # KubeEdge edge held elsewhere is refused as it would be at home (its caps travel in
        # the directory).
        for node, (_, kind) in LAYOUT.items():
            for r in range(3):
                code, reason, status, body_ = door_get(fleet, r, node, "/metrics")
                if kind == "edgestream":
                    check(code == 200 and status == 200 and body_ == direct,
                          "door %s via %s: %d %s %s" % (node, NAMES[r], code, reason, status))
                else:
                    check(code == 502 and "base protocol" in reason,
                          "door %s via %s: %d %s" % (node, NAMES[r], code, reason))
        # An unknown node is still a 503 naming it, from any replica.
        status, body_ = get(fleet.api(1), "ghost-node", "/metrics")
        check(status == 503 and b"ghost-node" in body_, "ghost: %d %r" % (status, body_))
        # A peer certificate is never an edge node's, a wrong CN is no peer, and a node's
        # certificate opens no peer link.
        for cert, path, want in (("cloudstream-peer", "/v1/kubeedge/connect",
                                  b"peer certificate"),
                                 ("peer-wrong", "/v1/cloudstream/peer", b"--peer-subject"),
                                 ("node-edge-1", "/v1/cloudstream/peer", b"--peer-ca")):
            status, text = upgrade(fleet, 1, cert, path)
            check(status == 403 and want in text, "%s at %s: %d %r" % (cert, path, status,
                                                                        text[:200]))
        # A request addressed only by the node's IP (a DNAT'd one, or Host: <node IP>): the
        # directory carries the IP SANs of the node's certificate to every replica.
        env = fleet.env
        env.mint("client", "--ca", env.path("tunnel-ca"), "--out", env.path("node-edge-6"),
                 "--node", "edge-6", "--ip", "10.99.0.6")
        h.start_edgestream(env, fleet.cs[2], fleet.kubelet, node="edge-6")
        held = [sum(1 for _, (i, _) in LAYOUT.items() if i == r) for r in range(3)]
        wait_directory(fleet, [len(LAYOUT) - held[0] + 1, len(LAYOUT) - held[1] + 1,
                               len(LAYOUT) - held[2]])
        for r in range(3):
            status, body_ = get(fleet.api(r), "10.99.0.6", "/metrics")
            check(status == 200 and body_ == direct, "edge-6 by IP via %s: %d" % (NAMES[r],
                                                                                 status))
        print("mesh: %d requests over 5 nodes x 3 replicas, %d forwarded: all identical; a "
              "node addressed by its IP alone through every replica" % (n, out), flush=True)
    with_fleet("replicas-mesh", body)


def failover():
    def body(fleet):
        start_layout(fleet)
        stop = threading.Event()
        errors, count = [], [0]

        def loop(node, r):
            api = fleet.api(r)
            while not stop.is_set():
                try:
                    logs(api, node)
                    count[0] += 1
                except Exception as e:  # noqa: BLE001 - every failure counts
                    errors.append("%s via %s: %s" % (node, NAMES[r], e))
        # Nodes held by cs-a and cs-b, asked through cs-a and cs-b (cs-c is killed).
        threads = [threading.Thread(target=loop, args=(n, r), daemon=True)
                   for n in ("edge-1", "edge-2", "edge-4") for r in (0, 1)]
        for t in threads:
            t.start()
        time.sleep(1.0)
        victim = fleet.cs[2]
        victim.kill()
        victim.wait()
        t0 = time.monotonic()
        # cs-c held edge-3 and edge-5: both leave the others' directories.
        wait_directory(fleet, [1, 2, None])
        gone_s = time.monotonic() - t0
        for r in (0, 1):
            status, body_ = get(fleet.api(r), "edge-3", "/metrics")
            check(status == 503 and b"edge-3" in body_, "edge-3 after the kill via %s: %d" % (
                NAMES[r], status))
        time.sleep(1.0)
        stop.set()
        for t in threads:
            t.join(10)
        check(not errors, "%d of %d requests failed: %s" % (len(errors), count[0] + len(errors),
                                                          errors[:3]))
        print("failover: cs-c's 2 nodes gone from both directories %.0f ms after SIGKILL; "
              "%d requests for nodes held elsewhere, 0 failed" % (gone_s * 1000, count[0]),
              flush=True)
        fleet.cs[2] = None
    with_fleet("replicas-failover", body)


def reconnect():
    def body(fleet):
        start_layout(fleet)
        # edge-1 (held by cs-a) is admitted again by cs-c: a second edge with the same
        # certificate, as a reconnect to another replica looks. The first edge is frozen
        # (SIGSTOP), as the old side of a reconnect is: its tunnel stays open at cs-a, but it
        # will not redial (two live edges of one node would take the node from each other).
        first, _ = fleet.edges["edge-1"]
        first.send_signal(signal.SIGSTOP)
        second = h.start_edgestream(fleet.env, fleet.cs[2], fleet.kubelet, node="edge-1",
                                    name="edge-1-again")
        wait_for(lambda: (metric(fleet.cs[0], "cloudstream_peer_stale_tunnels_closed_total")
                          or 0) >= 1, "cs-a closing its older tunnel of edge-1")
        first.kill()
        first.wait()
        # Every replica sends edge-1's requests to cs-c now.
        wait_directory(fleet, [4, 4, 2])
        for r in range(3):
            logs(fleet.api(r), "edge-1")
        check(second.poll() is None, "the newer tunnel's edge is still up")
        print("reconnect: the older tunnel of edge-1 (cs-a) was closed; all three replicas "
              "route edge-1 to cs-c", flush=True)
    with_fleet("replicas-reconnect", body)


def partition():
    def body(fleet):
        start_layout(fleet)
        cut = [fleet.relays[i][j] for i in range(3) for j in range(3)
               if (i == 2) != (j == 2) and fleet.relays[i][j]]
        # First a partition that closes nothing (bytes dropped): the links' liveness
        # (--peer-dead-timeout 3s) drops them and the directories forget.
        t0 = time.monotonic()
        for r in cut:
            r.blackhole = True
        wait_directory(fleet, [1, 2, 0], timeout=10)
        silent_s = time.monotonic() - t0
        for r in cut:
            r.blackhole = False
        wait_directory(fleet, [3, 4, 3], timeout=10)  # healed: every link back
        # Then cs-c cut off from its peers both ways (every connection closed, new ones
        # refused): a and b forget c's nodes, c forgets everyone's.
        for r in cut:
            r.set_cut(True)
        wait_directory(fleet, [1, 2, 0])
        # Meanwhile edge-2 (held by cs-b) comes up on cs-c too: both hold it. The old edge is
        # frozen (SIGSTOP): its tunnel stays open at cs-b, and it will not redial.
        first, _ = fleet.edges["edge-2"]
        first.send_signal(signal.SIGSTOP)
        second = h.start_edgestream(fleet.env, fleet.cs[2], fleet.kubelet, node="edge-2",
                                    name="edge-2-on-c")
        for i in range(3):
            for j in range(3):
                if fleet.relays[i][j]:
                    fleet.relays[i][j].set_cut(False)
        # Healed: the resync makes cs-c's newer tunnel win; cs-b closes its own.
        wait_for(lambda: (metric(fleet.cs[1], "cloudstream_peer_stale_tunnels_closed_total")
                          or 0) >= 1, "cs-b closing its stale tunnel of edge-2")
        first.kill()
        first.wait()
        wait_directory(fleet, [3, 5, 2], timeout=15)
        for node in LAYOUT:
            for r in range(3):
                logs(fleet.api(r), node)
        check(second.poll() is None, "edge-2's newer edge is still up")
        print("partition: a silent partition dropped the links and their nodes after %.1f s "
              "(--peer-dead-timeout 3 s); healed, every node held by one replica, reachable "
              "through all three" % silent_s, flush=True)
    with_fleet("replicas-partition", body)


if __name__ == "__main__":
    sys.exit(h.run([mesh, failover, reconnect, partition, readiness, dns, service]))
