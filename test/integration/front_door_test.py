#!/usr/bin/python3
"""The front door (cloudstream/src/door.h): kube-apiserver's EgressSelector HTTPConnect egress,
end to end on loopback:

  apiserver-like client ──CONNECT (mTLS, or a unix socket)──▶ cloudstream front door
      ──TCP_CONNECT on the node's tunnel──▶ edgestream ──raw TCP──▶ TLS kubelet stand-in

The client sends exactly what kube-apiserver's dialer sends (egress_selector.go,
tunnelHTTPConnect: "CONNECT <addr> HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\n\\r\\n", then reads one
response and refuses any byte buffered after it), then does its own TLS to the kubelet with
its kubelet client certificate, which the kubelet stand-in verifies and reports (/whoami).

Groups: relay (mTLS and the unix socket: exec over SPDY, logs -f, port-forward, metrics byte for
byte, the CN the kubelet saw), errors (no tunnel, port not allowed, unknown IP, a failed dial,
a base-protocol edge, not CONNECT: status and reason in < 100 ms, nothing disallowed dialled),
stall (one stalled CONNECT and one active on the same node: the active one's throughput against
its solo run; quiet follows that fit a 1 MiB edge budget).
"""
import os
import re
import socket
import ssl
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from harness import (Env, Fail, PEERS, PY, check, close_env, log_mark, run,  # noqa: E402
                     start_cloudstream, wait_log,
                     start_edgestream, start_kubeedge_edge, read_body, read_head, sha256)
import harness as h  # noqa: E402
import standin  # noqa: E402

NODE_IP = "127.0.0.11"    # edge-1's address: an IP SAN of its tunnel certificate; never dialled
OTHER_IP = "127.0.0.12"   # nobody's
KUBELET_PORT = 10250      # what the Node's daemonEndpoints say; the edge dials its own kubelet


def mint_pki(env):
    """The certificates kube-apiserver holds for its egress and its kubelet client, a kubelet
    serving certificate valid for the node's IP and name, and node certificates with IPs."""
    env.mint("ca", "--out", env.path("egress-ca"), "--cn", "front door CA")
    env.mint("server", "--ca", env.path("egress-ca"), "--out", env.path("front-door"),
             "--cn", "cloudstream-front-door", "--ip", "127.0.0.1", "--dns", "localhost")
    env.mint("client", "--ca", env.path("egress-ca"), "--out", env.path("apiserver-egress"),
             "--cn", "kube-apiserver-egress")
    env.mint("client", "--ca", env.path("egress-ca"), "--out", env.path("intruder"),
             "--cn", "someone-else")
    # The apiserver's --kubelet-client-certificate, from the kubelets' client CA.
    env.mint("client", "--ca", env.path("kubelet-ca"), "--out", env.path("apiserver-kubelet"),
             "--cn", "kube-apiserver-kubelet-client", "--org", "system:masters")
    env.mint("server", "--ca", env.path("kubelet-ca"), "--out", env.path("kubelet-edge-1"),
             "--cn", "edge-1", "--ip", "127.0.0.1,%s" % NODE_IP, "--dns", "edge-1,localhost",
             "--force")
    env.mint("client", "--ca", env.path("tunnel-ca"), "--out", env.path("node-edge-1"),
             "--node", "edge-1", "--ip", NODE_IP, "--force")


def start_kubelet_for_node(env, name="kubelet"):
    ready = os.path.join(env.dir, name + ".ready")
    argv = [PY, os.path.join(PEERS, "fake_kubelet.py"), "--listen", "127.0.0.1:0",
            "--cert", env.path("kubelet-edge-1.crt"), "--key", env.path("kubelet-edge-1.key"),
            "--client-ca", env.path("kubelet-ca.crt"), "--ready-file", ready]
    p, text = env.start(name, argv, ready)
    p.port = int(text.strip())
    return p


class Chain:
    """cloudstream (front door on TLS and a unix socket) + edgestream + kubelet stand-in."""

    def __init__(self, tag, edge_extra=(), cloud_extra=(), dial_timeout="3s"):
        self.env = Env(tag, nodes=("edge-1", "edge-2"))
        env = self.env
        mint_pki(env)
        self.sock_path = env.sock("front-door.sock")
        self.kubelet = start_kubelet_for_node(env)
        self.cloud = start_cloudstream(env, extra=[
            "--front-door-listen", "127.0.0.1:0", "--front-door-socket", self.sock_path,
            "--front-door-cert", env.path("front-door.crt"),
            "--front-door-key", env.path("front-door.key"),
            "--front-door-client-ca", env.path("egress-ca.crt"),
            "--front-door-allowed-subjects", "kube-apiserver-egress",
            "--front-door-dial-timeout", dial_timeout] + list(cloud_extra))
        self.door_port = self.cloud.ports["front_door"]
        self.edge = start_edgestream(env, self.cloud, self.kubelet, node="edge-1",
                                     extra=list(edge_extra))
        self.wait_node(NODE_IP)

    def wait_node(self, addr, timeout=10.0):
        """The node's tunnel is registered once a CONNECT no longer says it is unknown."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status, reason, _, s = connect(self, addr, 1, via="uds")
            s.close()
            if status != 502 or "no edge node" not in reason:
                return
            time.sleep(0.05)
        raise Fail("node %s never routable" % addr)


def egress_ctx(env, cert="apiserver-egress"):
    """kube-apiserver's tlsConfig for the egress: caBundle, clientCert, clientKey."""
    ctx = ssl.create_default_context(cafile=env.path("egress-ca.crt"))
    ctx.load_cert_chain(env.path(cert + ".crt"), env.path(cert + ".key"))
    return ctx


def connect(chain, host, port, via="tls", cert="apiserver-egress", timeout=5.0):
    """What egress_selector.go's tunnelHTTPConnect does: the CONNECT head, one response, and no
    byte after it. Returns (status, reason phrase, seconds to the answer, socket)."""
    if via == "uds":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect(chain.sock_path)
    else:
        raw = socket.create_connection(("127.0.0.1", chain.door_port), timeout=timeout)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # The egress url's host is an IP: Go sends no SNI, and checks the IP SAN.
        s = egress_ctx(chain.env, cert).wrap_socket(raw, server_hostname="127.0.0.1")
    t0 = time.monotonic()
    addr = "[%s]:%d" % (host, port) if ":" in host else "%s:%d" % (host, port)
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (addr, "127.0.0.1")).encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        c = s.recv(4096)
        if not c:
            raise Fail("front door closed without an answer after %r" % buf)
        buf += c
    took = time.monotonic() - t0
    head, rest = buf.split(b"\r\n\r\n", 1)
    line = head.split(b"\r\n")[0].decode()
    _, code, reason = line.split(" ", 2)
    if int(code) == 200:
        check(head == b"HTTP/1.1 200 Connection established", "200 head: %r" % head)
        # Go: "unexpected N bytes of buffered data"; the kubelet waits for our ClientHello.
        check(rest == b"", "bytes after the 200: %r" % rest)
    return int(code), reason, took, s


class InnerTLS:
    """TLS over a connection that may itself be TLS (the front door's mTLS): what Go's
    tls.Client does over the net.Conn the egress dialer returned. Memory BIOs pumped over
    @outer; one thread at a time."""

    def __init__(self, ctx, outer, server_hostname):
        self.outer = outer
        self.inc, self.out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.obj = ctx.wrap_bio(self.inc, self.out, server_hostname=server_hostname)
        self._do(self.obj.do_handshake)

    def _flush(self):
        data = self.out.read()
        if data:
            self.outer.sendall(data)

    def _do(self, fn, *args):
        while True:
            try:
                r = fn(*args)
                self._flush()
                return r
            except ssl.SSLWantReadError:
                self._flush()
                data = self.outer.recv(1 << 18)
                if data:
                    self.inc.write(data)
                else:
                    self.inc.write_eof()

    def sendall(self, data):
        view = memoryview(data)
        while len(view):
            n = self._do(self.obj.write, view[:1 << 16])
            view = view[n:]

    def recv(self, n):
        try:
            return self._do(self.obj.read, n)
        except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
            return b""

    def settimeout(self, t):
        self.outer.settimeout(t)

    def close(self):
        self.outer.close()


def kubelet_tls(chain, s, host=NODE_IP):
    """The apiserver's TLS to the kubelet inside the tunnel: its kubelet client certificate,
    the kubelet's serving certificate checked against the CONNECT host (an IP SAN, or the
    node name as a DNS SAN)."""
    ctx = ssl.create_default_context(cafile=chain.env.path("kubelet-ca.crt"))
    ctx.load_cert_chain(chain.env.path("apiserver-kubelet.crt"),
                        chain.env.path("apiserver-kubelet.key"))
    return InnerTLS(ctx, s, host)


def tunnel(chain, via="tls", host=NODE_IP, port=KUBELET_PORT):
    status, reason, _, s = connect(chain, host, port, via=via)
    check(status == 200, "CONNECT %s:%d via %s: %d %s" % (host, port, via, status, reason))
    return kubelet_tls(chain, s, host)


def get(t, path):
    t.sendall(("GET %s HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (path, NODE_IP, KUBELET_PORT))
              .encode())
    status, hdrs, rest = read_head(t)
    return status, hdrs, read_body(t, hdrs, rest)


# ---- relay ---------------------------------------------------------------------------------

def relay_checks(chain, via):
    # The kubelet verified the apiserver's own client certificate, end to end.
    t = tunnel(chain, via)
    status, _, body = get(t, "/whoami")
    check(status == 200 and b'"cn": "kube-apiserver-kubelet-client"' in body,
          "kubelet saw %r" % body)
    # metrics, byte for byte, and the connection kept alive for a second request (the
    # apiserver pools these tunnels).
    status, _, body = get(t, "/metrics")
    import importlib.util
    spec = importlib.util.spec_from_file_location("fk", os.path.join(PEERS, "fake_kubelet.py"))
    fk = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fk)
    check(status == 200 and body == fk.METRICS, "metrics differ (%d bytes)" % len(body))
    status, hdrs, body = get(t, "/bytes?n=3000000&seed=5")
    check(status == 200 and sha256(body) == hdrs["x-body-sha256"], "bytes differ")
    t.close()
    # A download that ends with the kubelet's close: every byte arrives before the close.
    t = tunnel(chain, via)
    n = 16 << 20
    t.sendall(("GET /bytes?n=%d&seed=6 HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n\r\n"
               % (n, NODE_IP, KUBELET_PORT)).encode())
    status, hdrs, body = read_head(t)
    body = bytearray(body)
    t.settimeout(10)
    while True:
        c = t.recv(1 << 16)
        if not c:
            break
        body.extend(c)
    check(status == 200 and len(body) == n and sha256(bytes(body)) == hdrs["x-body-sha256"],
          "download closed by the kubelet: %d of %d bytes" % (len(body), n))
    t.close()
    # logs -f: lines keep coming through the tunnel.
    t = tunnel(chain, via)
    t.sendall(("GET /containerLogs/default/demo/app?tailLines=2&follow=true HTTP/1.1\r\n"
               "Host: %s:%d\r\n\r\n" % (NODE_IP, KUBELET_PORT)).encode())
    status, hdrs, rest = read_head(t)
    check(status == 200, "logs status %d" % status)
    buf = rest
    t.settimeout(5)
    while b"line 5\n" not in buf:
        buf += t.recv(4096)
    t.close()
    # exec over SPDY: the 101 and an echo of every byte, upload and download.
    t = tunnel(chain, via)
    t.sendall(("POST /exec/default/demo/app?command=greet&input=1&output=1 HTTP/1.1\r\n"
               "Host: %s:%d\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
               "X-Stream-Protocol-Version: v4.channel.k8s.io\r\nContent-Length: 0\r\n\r\n"
               % (NODE_IP, KUBELET_PORT)).encode())
    status, hdrs, rest = read_head(t)
    check(status == 101 and hdrs.get("upgrade") == "SPDY/3.1", "exec: %d %r" % (status, hdrs))
    want = b"hello from default/demo/app\n"
    buf = rest
    while len(buf) < len(want):
        buf += t.recv(4096)
    check(buf == want, "exec greeting %r" % buf)
    payload = os.urandom(1 << 20)
    got = bytearray()
    for off in range(0, len(payload), 1 << 16):  # stdin in pieces, each echoed back
        t.sendall(payload[off:off + (1 << 16)])
        while len(got) < off + (1 << 16):
            c = t.recv(1 << 16)
            if not c:
                break
            got.extend(c)
    check(bytes(got) == payload, "exec echo: %d of %d bytes" % (len(got), len(payload)))
    t.close()
    # port-forward: one tunnel, an upgrade, then the streams' bytes (the stand-in echoes).
    t = tunnel(chain, via)
    t.sendall(("POST /portForward/default/demo HTTP/1.1\r\nHost: %s:%d\r\n"
               "Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
               "X-Stream-Protocol-Version: portforward.k8s.io\r\nContent-Length: 0\r\n\r\n"
               % (NODE_IP, KUBELET_PORT)).encode())
    status, hdrs, rest = read_head(t)
    check(status == 101, "port-forward: %d" % status)
    t.sendall(b"GET / HTTP/1.0\r\n\r\n")
    buf = rest
    while len(buf) < 18:
        buf += t.recv(4096)
    check(buf == b"GET / HTTP/1.0\r\n\r\n", "port-forward echo %r" % buf)
    t.close()


def relay_tls():
    c = Chain("door-relay-tls")
    failed = True
    try:
        relay_checks(c, "tls")
        # By node name too (--kubelet-preferred-address-types=Hostname): the kubelet's
        # certificate is then checked against the name.
        t = tunnel(c, "tls", host="edge-1")
        status, _, body = get(t, "/healthz")
        check(status == 200 and body == b"ok", "by name: %d %r" % (status, body))
        t.close()
        # SIGHUP reloads the front door's certificate like the other listeners'.
        def served_cert():
            _, _, _, s = connect(c, "edge-1", KUBELET_PORT)
            der = s.getpeercert(binary_form=True)
            s.close()
            return der
        before = served_cert()
        c.env.mint("server", "--ca", c.env.path("egress-ca"), "--out", c.env.path("front-door"),
                   "--cn", "cloudstream-front-door", "--ip", "127.0.0.1", "--force")
        import signal
        c.cloud.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 5
        while served_cert() == before:
            check(time.monotonic() < deadline, "the front door still serves the old certificate")
            time.sleep(0.05)
        # The access log line and the metrics.
        log = open(c.cloud.logpath, "rb").read().decode(errors="replace")
        check("access: CONNECT %s:%d 200 done caller=kube-apiserver-egress" % (
            NODE_IP, KUBELET_PORT) in log, "no access line")
        import urllib.request
        m = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % c.cloud.ports["admin"],
                                   timeout=5).read().decode()
        check('cloudstream_front_door_connects_total{result="ok"}' in m, "no metric")
        check('cloudstream_certificate_expiry_seconds{cert="front_door"}' in m,
              "no expiry metric for the front door's certificate")
        failed = False
    finally:
        close_env(c.env, failed)


def relay_uds():
    c = Chain("door-relay-uds")
    failed = True
    try:
        relay_checks(c, "uds")
        log = open(c.cloud.logpath, "rb").read().decode(errors="replace")
        check("caller=uid=%d" % os.getuid() in log, "no uid in the access line")
        failed = False
    finally:
        close_env(c.env, failed)


# ---- errors --------------------------------------------------------------------------------

def expect(chain, host, port, status, words, via="tls", cert="apiserver-egress"):
    got, reason, took, s = connect(chain, host, port, via=via, cert=cert)
    s.close()
    print("     %-24s %d %s  (%.1f ms)" % ("%s:%d" % (host, port), got, reason, took * 1000))
    check(got == status, "CONNECT %s:%d: %d %s, want %d" % (host, port, got, reason, status))
    for w in words:
        check(w in reason, "reason %r lacks %r" % (reason, w))
    check(took < 0.1, "answer took %.0f ms" % (took * 1000))


def errors():
    # A local port the edge allows, another it does not, and a listener on a port that is
    # not allowed: it must never see a connection.
    trap = socket.socket()
    trap.bind(("127.0.0.1", 0))
    trap.listen(8)
    trap.setblocking(False)
    trap_port = trap.getsockname()[1]
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))  # bound, not listening: a dial there is refused
    dead_port = dead.getsockname()[1]
    c = Chain("door-errors", edge_extra=["--local-port", "gone=%d" % dead_port],
              cloud_extra=["--node-reconnect-grace", "3s"])
    failed = True
    try:
        # Warm-up, so the figures are not the first connection's.
        expect(c, NODE_IP, 1, 502, [])
        expect(c, "edge-2", KUBELET_PORT, 503, ["edge node edge-2 is not connected"])
        expect(c, OTHER_IP, KUBELET_PORT, 502, ["no edge node", OTHER_IP])
        expect(c, NODE_IP, trap_port, 502,
               ["edge node edge-1", "refused", "TCP port %d is not in this node's allow-list"
                % trap_port])
        expect(c, NODE_IP, dead_port, 502, ["edge node edge-1", "unreachable"])
        expect(c, "edge-2", KUBELET_PORT, 503, ["not connected"], via="uds")
        expect(c, NODE_IP, trap_port, 502, ["allow-list"], via="uds")
        # Round trips on the tunnel right after bulk bytes: with Nagle on the tunnel socket a
        # small message waits for the edge's delayed ACK (~40 ms each).
        took = []
        for _ in range(5):
            t = tunnel(c, "uds")
            get(t, "/healthz")
            t.close()  # its REMOVE goes to the edge, which has nothing to answer at once
            took.append(connect(c, NODE_IP, trap_port, via="uds")[2])
        took.sort()
        print("     refusals between requests: median %.1f ms" % (took[2] * 1000))
        check(took[2] < 0.025, "median refusal %.1f ms (Nagle on the tunnel?)" % (took[2] * 1000))
        # A certificate of the CA but not in --front-door-allowed-subjects.
        expect(c, NODE_IP, KUBELET_PORT, 403, ["someone-else", "allowed-subjects"],
               cert="intruder")
        # Not a CONNECT, and a malformed target.
        raw = socket.socket(socket.AF_UNIX)
        raw.connect(c.sock_path)
        raw.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        status, hdrs, _ = read_head(raw)
        check(status == 405, "GET: %d" % status)
        raw.close()
        raw = socket.socket(socket.AF_UNIX)
        raw.connect(c.sock_path)
        raw.sendall(b"CONNECT nohostport HTTP/1.1\r\n\r\n")
        status, hdrs, _ = read_head(raw)
        check(status == 400, "bad target: %d" % status)
        raw.close()
        try:
            trap.accept()
            raise Fail("the port outside the allow-list was dialled")
        except BlockingIOError:
            pass
        # A base-protocol edge cannot carry raw TCP: a clear error, at once.
        env = c.env
        env.mint("client", "--ca", env.path("tunnel-ca"), "--out", env.path("node-edge-2"),
                 "--node", "edge-2", "--ip", OTHER_IP, "--force")
        start_kubeedge_edge(env, c.cloud, c.kubelet, node="edge-2", protocol="base")
        c.wait_node(OTHER_IP)
        expect(c, OTHER_IP, KUBELET_PORT, 502, ["base protocol", "cannot carry raw TCP"])
        # The kubelet is down: the edge's dial fails, and says so.
        env.stop(c.kubelet)
        expect(c, NODE_IP, KUBELET_PORT, 502, ["edge node edge-1", "unreachable",
                                               "TCP target kubelet"])
        # The edge goes away and comes back: a CONNECT meanwhile (by the node's IP) waits for
        # its redial (--node-reconnect-grace 3s here) and then goes through.
        c.kubelet = start_kubelet_for_node(env, name="kubelet-2")
        mark = log_mark(c.cloud)
        env.stop(c.edge)
        got = []
        waiter = threading.Thread(target=lambda: got.append(connect(c, NODE_IP, KUBELET_PORT)),
                                  daemon=True)
        waiter.start()
        time.sleep(0.2)
        c.edge = start_edgestream(env, c.cloud, c.kubelet, node="edge-1",
                                  extra=["--local-port", "gone=%d" % dead_port],
                                  name="edge-edge-1-again")
        waiter.join(10)
        check(got and got[0][0] == 200, "CONNECT between tunnels: %r" % (got[0][:3] if got
                                                                          else None,))
        t = kubelet_tls(c, got[0][3])
        status, _, _ = get(t, "/healthz")
        t.close()
        check(status == 200, "through the CONNECT that waited: %d" % status)
        print("     CONNECT between the edge's tunnels: 200 after %.0f ms" % (got[0][2] * 1000))
        # The access line is written when the stream ends, which the cloud learns a moment
        # after our close: look for it for a while.
        pattern = r"access: CONNECT %s:%d 200 done .* waited_for_node=\d+ ms" % (
            re.escape(NODE_IP), KUBELET_PORT)
        wait_log(c.cloud, pattern, mark, 5, "the access line showing the wait")
        # It goes away for good: a CONNECT right after waits until the grace's end, then says
        # it waited; after the grace the IP is nobody's again and a name is answered at once.
        env.stop(c.edge)
        got, reason, took, s = connect(c, NODE_IP, KUBELET_PORT)
        s.close()
        print("     %-24s %d %s  (%.1f ms)" % ("%s:%d" % (NODE_IP, KUBELET_PORT), got, reason,
                                              took * 1000))
        check(got == 503 and "waited" in reason and 2.0 <= took <= 4.0,
              "CONNECT to a node just gone: %d %s after %.3f s" % (got, reason, took))
        expect(c, NODE_IP, KUBELET_PORT, 502, ["no edge node"])
        expect(c, "edge-1", KUBELET_PORT, 503, ["edge node edge-1 is not connected"])
        failed = False
    finally:
        trap.close()
        dead.close()
        close_env(c.env, failed)


def timeouts():
    """A dial that hangs on the edge gets the edge's 504 at its --backend-dial-timeout; an edge
    that says nothing at all gets cloudstream's 504 at --front-door-dial-timeout: never an
    unanswered CONNECT (kube-apiserver would wait forever)."""
    # A listener whose accept queue is full: the kernel drops further SYNs, so a dial hangs.
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(0)
    hole_port = hole.getsockname()[1]
    filler = socket.create_connection(("127.0.0.1", hole_port))
    c = Chain("door-timeouts", dial_timeout="1s",
              edge_extra=["--local-port", "hole=%d" % hole_port,
                          "--backend-dial-timeout", "300ms"])
    failed = True
    try:
        status, reason, took, s = connect(c, NODE_IP, hole_port, via="uds")
        s.close()
        print("     %-24s %d %s  (%.0f ms)" % ("%s:%d" % (NODE_IP, hole_port), status, reason,
                                              took * 1000))
        check(status == 504 and "edge node edge-1: timeout" in reason, "hung dial: %d %s" % (
            status, reason))
        check(0.25 < took < 0.95, "the edge's dial timeout answered after %.0f ms" % (
            took * 1000))
        # The edge stops answering altogether (SIGSTOP): cloudstream's own deadline.
        import signal
        c.edge.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while open("/proc/%d/stat" % c.edge.pid).read().rsplit(")", 1)[1].split()[0] != "T":
            check(time.monotonic() < deadline, "the edge did not stop")
            time.sleep(0.01)
        try:
            status, reason, took, s = connect(c, NODE_IP, KUBELET_PORT, via="uds")
            s.close()
        finally:
            c.edge.send_signal(signal.SIGCONT)
        print("     %-24s %d %s  (%.0f ms)" % ("%s:%d" % (NODE_IP, KUBELET_PORT), status, reason,
                                              took * 1000))
        check(status == 504 and "did not answer the dial within 1000 ms" in reason,
              "silent edge: %d %s" % (status, reason))
        check(0.95 < took < 2.5, "cloudstream's dial timeout answered after %.0f ms" % (
            took * 1000))
        # The edge, awake again, serves the next CONNECT.
        t = tunnel(c, "uds")
        status, _, body = get(t, "/healthz")
        check(status == 200 and body == b"ok", "after SIGCONT: %d %r" % (status, body))
        t.close()
        failed = False
    finally:
        filler.close()
        hole.close()
        close_env(c.env, failed)


def live_reload():
    """SIGHUP with a configuration file: --front-door-allowed-subjects and
    --front-door-dial-timeout change at once (the next CONNECT is judged by the new list)."""
    env = Env("door-live", nodes=("edge-1",))
    failed = True
    try:
        mint_pki(env)
        path = os.path.join(env.dir, "cloudstream.yaml")

        def write(subject, timeout):
            with open(path, "w") as f:
                f.write("apiVersion: cloudstream.io/v1alpha1\nkind: CloudStreamConfig\n"
                        "front-door-allowed-subjects: [%s]\nfront-door-dial-timeout: %s\n"
                        % (subject, timeout))
        write("kube-apiserver-egress", "3s")
        c = Chain.__new__(Chain)
        c.env = env
        c.sock_path = env.sock("front-door.sock")
        c.kubelet = start_kubelet_for_node(env)
        c.cloud = start_cloudstream(env, extra=[
            "--config", path, "--front-door-listen", "127.0.0.1:0",
            "--front-door-socket", c.sock_path,
            "--front-door-cert", env.path("front-door.crt"),
            "--front-door-key", env.path("front-door.key"),
            "--front-door-client-ca", env.path("egress-ca.crt")])
        c.door_port = c.cloud.ports["front_door"]
        c.edge = start_edgestream(env, c.cloud, c.kubelet, node="edge-1")
        c.wait_node(NODE_IP)
        expect(c, NODE_IP, KUBELET_PORT, 403, ["someone-else"], cert="intruder")
        check(connect(c, NODE_IP, KUBELET_PORT)[0] == 200, "the egress client refused")
        write("someone-else", "2s")
        import signal
        start = os.path.getsize(c.cloud.logpath)
        c.cloud.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 5
        while True:
            log = open(c.cloud.logpath, "rb").read()[start:].decode(errors="replace")
            if "configuration reloaded: front-door-dial-timeout" in log and \
                    "configuration reloaded: front-door-allowed-subjects" in log:
                break
            check(time.monotonic() < deadline, "no reload lines:\n%s" % log)
            time.sleep(0.05)
        check("needs a restart: front-door" not in log, "a front-door option needs a restart:\n"
              + log)
        expect(c, NODE_IP, KUBELET_PORT, 403, ["kube-apiserver-egress"])
        check(connect(c, NODE_IP, KUBELET_PORT, cert="intruder")[0] == 200,
              "the newly listed subject refused")
        failed = False
    finally:
        close_env(env, failed)


def bad_config():
    """Front-door settings that cannot work stop the start (exit 2) and --check-config names
    each of them; a file other than a socket at --front-door-socket is never removed."""
    import subprocess
    from harness import BIN, cloudstream_pki_flags
    env = Env("door-config", nodes=("edge-1",))
    failed = True
    try:
        base = [os.path.join(BIN, "cloudstream", "cloudstream"),
                "--tunnel-listen", "127.0.0.1:0", "--stream-listen", "127.0.0.1:0",
                "--admin-listen", "", *cloudstream_pki_flags(env),
                "--stream-allowed-subjects", "kube-apiserver-kubelet-client"]
        bad = ["--front-door-kubelet-ports", "10250,99999", "--front-door-socket-mode", "0999",
               "--front-door-pod-ips"]
        want = ["--front-door-kubelet-ports 99999: expected up to 8 ports 1..65535",
                "--front-door-socket-mode 0999: expected octal permissions",
                "--front-door-pod-ips needs --apiserver-url"]
        for extra in (["--check-config"], []):
            r = subprocess.run(base + bad + extra, capture_output=True, timeout=30)
            out = (r.stdout + r.stderr).decode(errors="replace")
            check(r.returncode == 2, "exit %d:\n%s" % (r.returncode, out))
            for w in want:
                check(w in out, "%r not said:\n%s" % (w, out))
        # A regular file where the socket should go: refused, and left alone.
        path = os.path.join(env.dir, "not-a-socket")
        with open(path, "w") as f:
            f.write("keep me\n")
        r = subprocess.run(base + ["--front-door-socket", path], capture_output=True,
                           timeout=30)
        out = (r.stdout + r.stderr).decode(errors="replace")
        check(r.returncode != 0 and "exists and is not a socket" in out, "exit %d:\n%s" % (
            r.returncode, out))
        check(open(path).read() == "keep me\n", "the file was touched")
        failed = False
    finally:
        close_env(env, failed)


# ---- a stalled CONNECT does not slow the active one ---------------------------------------

def throughput(chain, n):
    t = tunnel(chain, "tls")
    t0 = time.monotonic()
    status, hdrs, body = get(t, "/bytes?n=%d&seed=3" % n)
    dt = time.monotonic() - t0
    check(status == 200 and len(body) == n, "download %d" % status)
    t.close()
    return n / dt / 1e6


def stalled_connect(c):
    """A CONNECT whose apiserver side reads nothing while the kubelet streams into it; returns
    once cloudstream holds bytes for it (its window fills and stays full)."""
    import urllib.request
    st = tunnel(c, "tls")
    st.sendall(("GET /stream HTTP/1.1\r\nHost: %s\r\n\r\n" % NODE_IP).encode())
    deadline = time.monotonic() + 10
    while True:
        rows = urllib.request.urlopen("http://127.0.0.1:%d/streams" % c.cloud.ports["admin"],
                                      timeout=5).read().decode().splitlines()
        cols = rows[0].lstrip("# ").split("\t")
        stalled = [dict(zip(cols, r.split("\t"))) for r in rows[1:] if "\tconnect\t" in r]
        check(len(stalled) == 1, "streams: %r" % rows)
        held = int(stalled[0].get("QUEUED", "0"))
        if held > 512 * 1024:  # most of its first window: the edge stopped on credit
            time.sleep(0.3)  # and stays stopped
            return st, held
        check(time.monotonic() < deadline, "the stalled CONNECT never filled: %r" % stalled)
        time.sleep(0.05)


def stall_round(c, n):
    """Five downloads alone and five beside a stalled CONNECT, alternated (the order too): the
    medians, and what the stalled one held."""
    solo, both = [], []
    held = 0
    for r in range(5):
        if r % 2 == 0:
            solo.append(throughput(c, n))
        st, held = stalled_connect(c)
        both.append(throughput(c, n))
        st.close()
        if r % 2 == 1:
            solo.append(throughput(c, n))
    print("     solo %s MB/s, beside a stalled CONNECT %s MB/s" % (
        " ".join("%.1f" % x for x in solo), " ".join("%.1f" % x for x in both)))
    # Each run against its neighbour (measured a moment apart, under the same load from
    # whatever else runs on the machine), then the median of those ratios.
    ratio = statistics.median(b / a for a, b in zip(solo, both))
    return statistics.median(solo), statistics.median(both), held, ratio


def stall():
    c = Chain("door-stall")
    failed = True
    try:
        n = 32 << 20
        throughput(c, 8 << 20)  # warm-up
        # Five alternated pairs, the median of their ratios, and another round (up to three)
        # when one falls short: the machine is shared (and sanitizer builds are slow and
        # uneven), while a stalled stream that held up the tunnel would stop the active one
        # altogether.
        for attempt in range(3):
            solo, both, held, ratio = stall_round(c, n)
            print("     a stalled CONNECT holds %d bytes in cloudstream (its window); medians "
                  "%.1f vs %.1f MB/s; median of the pairs' ratios %.2fx" % (held, both, solo,
                                                                          ratio))
            if ratio >= 0.9:
                break
        check(ratio >= 0.9, "active CONNECT at %.2fx of its solo throughput" % ratio)
        failed = False
    finally:
        close_env(c.env, failed)


def quiet_follows(n=48):
    """Through the front door each of kube-apiserver's kubelet connections is a TCP stream whose
    TLS the edge cannot read, so, like a `logs -f` on the stream port, it starts at the quiet
    window and reserves its queue toward the cloud only when it has to hold bytes: @n quiet
    follows fit an edge budget of 1 MiB (reserved whole at open, 188 KiB each, 5 did), a
    download beside them arrives whole, and the budget is empty once they end."""
    c = Chain("door-quiet", edge_extra=("--process-buffer-bytes", "1MiB"))
    failed = True
    follows = []
    try:
        for i in range(n):
            t = tunnel(c, "uds")
            t.sendall(("GET /containerLogs/default/demo/app?tailLines=1&follow=true HTTP/1.1"
                       "\r\nHost: %s:%d\r\n\r\n" % (NODE_IP, KUBELET_PORT)).encode())
            status, _, _ = read_head(t)
            check(status == 200, "follow %d: status %d" % (i, status))
            follows.append(t)
        used = h.metric(c.edge, "edgestream_buffered_bytes")
        t = tunnel(c, "uds")
        status, hdrs, body = get(t, "/bytes?n=3000000&seed=9")
        check(status == 200 and sha256(body) == hdrs["x-body-sha256"], "download differs")
        t.close()
        refused = h.metric(c.edge, "edgestream_streams_refused_by_session_total",
                           'reason="budget"')
        print("     %d quiet follows through the unix socket: the edge's budget holds %d KiB "
              "of 1024, %d refused; a 3 MB download beside them intact" % (n, used // 1024,
                                                                            refused))
        check(refused == 0, "%d streams refused for the budget" % refused)
        check(used <= n * 8192 + 64 * 1024, "the follows reserve %d bytes" % used)
        for t in follows:
            t.close()
        follows = []
        deadline = time.monotonic() + 10
        while h.metric(c.edge, "edgestream_buffered_bytes") > 0:
            check(time.monotonic() < deadline, "the edge's budget was not given back")
            time.sleep(0.1)
        failed = False
    finally:
        for t in follows:
            t.close()
        close_env(c.env, failed)


# ---- pod IPs (--front-door-pod-ips, the edge's --pod-ports) ---------------------------------

POD_IP = "127.0.0.21"        # a pod on edge-1, inside its --pod-cidr
POD_IP_AWAY = "127.0.0.22"   # a pod on edge-2, which has no tunnel
POD_IP_ENDED = "127.0.0.23"  # a pod that ended: its IP is nobody's now
POD_IP_OUTSIDE = "127.0.0.40"  # a pod on edge-1 per the apiserver, outside the edge's CIDR


def pods():
    """Webhooks and aggregated APIs on edge pods: the apiserver CONNECTs to the pod IP, cloudstream
    asks the apiserver which pod has it, and the pod's edge dials it only on --pod-ports inside
    --pod-cidr."""
    sys.path.insert(0, PEERS)
    from kube_reviews import KubeReviews
    env = Env("door-pods", nodes=("edge-1", "edge-2"))
    kube = None
    failed = True
    trap = None
    try:
        mint_pki(env)
        env.mint("server", "--ca", env.path("kubelet-ca"), "--out", env.path("webhook"),
                 "--cn", "webhook.default.svc", "--ip", POD_IP, "--force")
        ready = os.path.join(env.dir, "webhook.ready")
        webhook, text = env.start("webhook", [
            PY, os.path.join(PEERS, "fake_kubelet.py"), "--listen", "%s:0" % POD_IP,
            "--cert", env.path("webhook.crt"), "--key", env.path("webhook.key"),
            "--client-ca", env.path("kubelet-ca.crt"), "--ready-file", ready], ready)
        port = int(text.strip())
        # A listener outside the edge's pod CIDR, on the same port: it must never be dialled.
        trap = socket.socket()
        trap.bind((POD_IP_OUTSIDE, port))
        trap.listen(8)
        trap.setblocking(False)
        token_file = standin.write_token(env, "cloudstream-sa-token")
        kube = KubeReviews(env.path("kubelet.crt"), env.path("kubelet.key"),
                           "cloudstream-sa-token", pod_ips={
                               POD_IP: [{"namespace": "default", "name": "webhook",
                                         "nodeName": "edge-1"}],
                               POD_IP_AWAY: [{"namespace": "default", "name": "far",
                                              "nodeName": "edge-2"}],
                               POD_IP_ENDED: [{"namespace": "default", "name": "done",
                                               "nodeName": "edge-1", "phase": "Succeeded"}],
                               POD_IP_OUTSIDE: [{"namespace": "default", "name": "odd",
                                                 "nodeName": "edge-1"}]})
        c = Chain.__new__(Chain)  # the chain by hand: the apiserver stand-in comes first
        c.env = env
        c.sock_path = env.sock("front-door.sock")
        c.kubelet = start_kubelet_for_node(env)
        c.cloud = start_cloudstream(env, extra=[
            "--front-door-socket", c.sock_path, "--front-door-pod-ips"] +
            standin.apiserver_flags(env, kube.url, token_file))
        c.door_port = 0
        c.edge = start_edgestream(env, c.cloud, c.kubelet, node="edge-1", extra=[
            "--pod-ports", str(port), "--pod-cidr", "127.0.0.16/28"])
        c.wait_node(NODE_IP)
        # The pod, end to end: the webhook stand-in verifies the apiserver's certificate.
        status, reason, took, s = connect(c, POD_IP, port, via="uds")
        check(status == 200, "CONNECT pod: %d %s" % (status, reason))
        print("     %-24s 200 after a pod lookup (%.1f ms)" % ("%s:%d" % (POD_IP, port),
                                                              took * 1000))
        t = kubelet_tls(c, s, POD_IP)
        st, _, body = get(t, "/whoami")
        check(st == 200 and b'"cn": "kube-apiserver-kubelet-client"' in body, "pod saw %r" % body)
        t.close()
        # Cached: the next CONNECT asks nothing.
        expect_uds = lambda host, p, code, words: expect(c, host, p, code, words, via="uds")
        status, reason, took, s = connect(c, POD_IP, port, via="uds")
        s.close()
        check(status == 200 and took < 0.1, "cached pod CONNECT: %d in %.0f ms" % (
            status, took * 1000))
        asked = [k for kind, k in kube.calls if kind == "PodIP"]
        check(asked == ["status.podIP=%s" % POD_IP], "apiserver asked %r" % asked)
        # Refusals: another port, a pod on a node without a tunnel, an ended pod, an address
        # outside the edge's pod CIDR.
        expect_uds(POD_IP, port + 1 if port < 65535 else port - 1, 502,
                   ["edge node edge-1", "refused", "is not in this node's --pod-ports"])
        connect(c, POD_IP_AWAY, port, via="uds")[3].close()  # the lookup
        expect_uds(POD_IP_AWAY, port, 503, ["pod IP %s is on node edge-2" % POD_IP_AWAY,
                                            "not connected"])
        connect(c, POD_IP_ENDED, port, via="uds")[3].close()
        expect_uds(POD_IP_ENDED, port, 502, ["no running pod has IP %s" % POD_IP_ENDED])
        connect(c, POD_IP_OUTSIDE, port, via="uds")[3].close()
        expect_uds(POD_IP_OUTSIDE, port, 502, ["refused", "is not in this node's --pod-cidr"])
        try:
            trap.accept()
            raise Fail("an address outside the pod CIDR was dialled")
        except BlockingIOError:
            pass
        failed = False
    finally:
        if trap:
            trap.close()
        if kube:
            kube.close()
        close_env(env, failed)


GROUPS = {"relay": [relay_tls, relay_uds], "errors": [errors, timeouts, live_reload, bad_config],
          "stall": [stall, quiet_follows],
          "pods": [pods]}

if __name__ == "__main__":
    group = sys.argv[1] if len(sys.argv) > 1 else None
    every = [t for g in GROUPS.values() for t in g]
    tests = GROUPS.get(group) or [t for t in every if t.__name__ == group] or every
    sys.argv = sys.argv[:1]
    sys.exit(run(tests))
