#!/usr/bin/python3
"""HTTP/2 on cloudstream's stream port (front_h2.c): curl --http2 (Debian's curl, with nghttp2)
as kube-apiserver's kubelet client, through the real cloudstream and edgestream to the TLS
kubelet stand-in; HTTP/1.1 still served on the same port, with ALPN http/1.1 and without ALPN.

    stream_h2_test.py [TEST...]            curl and frame-level checks, certificates
    stream_h2_test.py webhook [TEST...]    bearer tokens and SubjectAccessReviews over HTTP/2

Starts its own processes and stops them by PID at the end.
"""
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import time

import h2.config
import h2.connection
import h2.events

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
import harness as h  # noqa: E402
import standin  # noqa: E402
from harness import check  # noqa: E402
from kube_reviews import KubeReviews  # noqa: E402


class Chain(h.Chain):
    """kubelet stand-in + cloudstream + edgestream for edge-1, and a KubeEdge base-protocol
    test edge for edge-2 (its logs and metrics come back body-only: cloudstream frames them)."""

    def __init__(self, tag):
        super().__init__(tag, lambda env, cloud, kubelet: h.start_edgestream(env, cloud, kubelet),
                         nodes=("edge-1", "edge-2"))
        self.base_edge = h.start_kubeedge_edge(self.env, self.cloud, self.kubelet, node="edge-2",
                                               protocol="base")
        self.env.mint("client", "--ca", self.env.path("stream-ca"), "--out",
                      self.env.path("not-allowed"), "--cn", "someone-else")

    def curl(self, targets, extra=(), cert="apiserver-kubelet-client", node="edge-1",
             timeout=20):
        return curl(self.env, self.cloud, targets, extra, cert, node, timeout)


def curl(env, cloud, targets, extra=(), cert="apiserver-kubelet-client", node="edge-1",
         timeout=20):
    """curl over HTTP/2 (ALPN h2) to @cloud's stream port: (exit code, stdout, stderr)."""
    port = cloud.ports["stream"]
    # The stream port's certificate is for localhost; the node goes in Host (curl sends it as
    # :authority over HTTP/2).
    argv = ["curl", "-sS", "--http2", "--cacert", env.path("stream-ca.crt"),
            "--resolve", "localhost:%d:127.0.0.1" % port, "-H", "Host: %s:10350" % node]
    if cert:
        argv += ["--cert", env.path(cert + ".crt"), "--key", env.path(cert + ".key")]
    argv += list(extra)
    argv += ["https://localhost:%d%s" % (port, t) for t in targets]
    p = subprocess.run(argv, capture_output=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def metric(chain, name, labels=""):
    return h.metric(chain.cloud, name, labels)


def streams_open(chain):
    _, text = h.admin_get(chain.cloud, "/metrics")
    return sum(float(line.split()[1]) for line in text.splitlines()
               if line.startswith("cloudstream_streams{"))


def wait_streams_open(chain, want, timeout=5.0):
    deadline = time.monotonic() + timeout
    while True:
        n = streams_open(chain)
        if n == want or time.monotonic() > deadline:
            return n
        time.sleep(0.05)


def h1_body(chain, target):
    status, _, body, s = chain.get(target)
    s.close()
    check(status == 200, "HTTP/1.1 %s: status %d" % (target, status))
    return body


def logs_h2(chain):
    """A log over HTTP/2: status 200, the version curl saw is 2, and the body is the bytes the
    HTTP/1.1 answer has (de-chunked)."""
    t = "/containerLogs/default/pod-a/ctr?tailLines=5"
    rc, out, err = chain.curl([t], ["-w", "\n%{http_version} %{http_code}"])
    check(rc == 0, "curl: %d %r" % (rc, err))
    body, _, tail = out.rpartition(b"\n")
    check(tail == b"2 200", "logs over h2: version/status %r" % tail)
    want = "".join("line %d\n" % i for i in range(1, 6)).encode()
    check(body == want, "logs over h2: %r" % body)
    check(body == h1_body(chain, t), "logs: HTTP/2 and HTTP/1.1 bodies differ")


def same_bytes_as_h1(chain):
    """/metrics (Content-Length), /stats/summary and /pods over HTTP/2 give the HTTP/1.1 answer's
    bytes; the response headers carry none HTTP/2 forbids."""
    for t in ("/metrics", "/stats/summary", "/pods", "/metrics/cadvisor"):
        rc, out, err = chain.curl([t], ["-D", "-"])
        check(rc == 0, "%s: curl %d %r" % (t, rc, err))
        head, _, body = out.partition(b"\r\n\r\n")
        check(head.startswith(b"HTTP/2 200"), "%s: head %r" % (t, head[:80]))
        check(not re.search(rb"(?im)^(connection|transfer-encoding|keep-alive):", head),
              "%s: a connection-specific header over h2: %r" % (t, head))
        check(body == h1_body(chain, t), "%s: %d bytes over h2, HTTP/1.1 differs" % (t, len(body)))


def base_edge_h2(chain):
    """Through a KubeEdge base edge (body-only answers, the head synthesized by cloudstream):
    a log and /metrics over HTTP/2 carry the HTTP/1.1 answer's body, and a follow its lines."""
    for t in ("/containerLogs/default/pod-a/ctr?tailLines=4", "/metrics"):
        rc, out, err = chain.curl([t], ["-w", "\n%{http_version} %{http_code}"], node="edge-2")
        body, _, tail = out.rpartition(b"\n")
        check(rc == 0 and tail == b"2 200", "base edge %s over h2: %r %r" % (t, tail, err))
        status, _, h1, s = chain.get(t, node="edge-2")
        s.close()
        check(status == 200 and body == h1, "base edge %s: h2 %d bytes, HTTP/1.1 %d"
              % (t, len(body), len(h1)))
    rc, out, err = chain.curl(["/containerLogs/default/pod-a/ctr?tailLines=1&follow=true"],
                              ["--max-time", "1"], node="edge-2")
    check(rc == 28 and out.count(b"line ") >= 3, "base edge follow over h2: %d %r" % (rc, out))
    check(wait_streams_open(chain, 0) == 0, "base edge follow: a stream left open")


def parallel_follows_one_connection(chain):
    """Several followed logs in parallel on ONE connection (curl --parallel multiplexes): each
    gets its lines; the server counted one HTTP/2 connection and one stream each."""
    n = 6
    conns0 = metric(chain, "cloudstream_apiserver_http2_connections_total")
    streams0 = metric(chain, "cloudstream_apiserver_http2_streams_total")
    targets = ["/containerLogs/default/pod-%d/ctr?tailLines=2&follow=true" % i for i in range(n)]
    rc, out, err = chain.curl(targets, ["-v", "--parallel",
                                        "--parallel-max", str(n), "--max-time", "2"])
    check(rc == 28, "curl: %d (want 28: the follows were still running) %r" % (rc, err[-400:]))
    lines = out.count(b"line ")
    check(lines >= n * 5, "%d follows over h2: %d lines in 2 s" % (n, lines))
    conns = metric(chain, "cloudstream_apiserver_http2_connections_total") - conns0
    streams = metric(chain, "cloudstream_apiserver_http2_streams_total") - streams0
    check(conns == 1 and streams == n, "%d follows: %g connections, %g streams" % (n, conns, streams))
    check(b"Multiplexed connection found" in err or b"multiplex" in err.lower(),
          "curl -v says nothing of multiplexing: %r" % err[-600:])
    left = wait_streams_open(chain, 0)
    check(left == 0, "after the client left: %g streams still open" % left)
    print("     %d follows, one connection, %d lines" % (n, lines), flush=True)


def client_reset_frees_stream(chain):
    """A follow whose client goes away mid-stream (curl killed: the connection, or its RST):
    the tunnel stream is removed."""
    port = chain.cloud.ports["stream"]
    env = chain.env
    p = subprocess.Popen(["curl", "-sS", "-N", "--http2", "--cacert", env.path("stream-ca.crt"),
                          "--resolve", "localhost:%d:127.0.0.1" % port,
                          "-H", "Host: edge-1:10350",
                          "--cert", env.path("apiserver-kubelet-client.crt"),
                          "--key", env.path("apiserver-kubelet-client.key"),
                          "https://localhost:%d/containerLogs/default/pod-a/ctr?follow=true"
                          % port],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        got = p.stdout.read(30)
        check(b"line 1" in got, "follow: %r" % got)
        check(streams_open(chain) == 1, "follow: %g streams open" % streams_open(chain))
    finally:
        p.kill()
        p.wait()
    left = wait_streams_open(chain, 0)
    check(left == 0, "after the client was killed: %g streams open" % left)


def refusals_h2(chain):
    """Our own answers over HTTP/2: 403 for a subject not allowed, 503 for a node not connected
    (Status JSON, as over HTTP/1.1), 413 for a request body; the connection serves on."""
    rc, out, err = chain.curl(["/metrics"], ["-w", "\n%{http_code}"], cert="not-allowed")
    body, _, code = out.rpartition(b"\n")
    check(code == b"403" and json.loads(body)["code"] == 403, "not allowed: %r %r" % (code, body))
    rc, out, err = chain.curl(["/metrics"], ["-w", "\n%{http_code}"], node="edge-9")
    body, _, code = out.rpartition(b"\n")
    st = json.loads(body)
    check(code == b"503" and st["kind"] == "Status" and "edge-9" in st["message"],
          "node not connected: %r %r" % (code, body))
    rc, out, err = chain.curl(["/pods"], ["-w", "\n%{http_code}", "-d", "x=1"])
    body, _, code = out.rpartition(b"\n")
    check(code == b"413", "a request body over h2: %r %r" % (code, body))


def h1_same_port(chain):
    """HTTP/1.1 on the same port: with ALPN http/1.1 (curl --http1.1) and without ALPN (the
    harness's client), and an exec (SPDY upgrade) over HTTP/1.1."""
    t = "/containerLogs/default/pod-a/ctr?tailLines=3"
    rc, out, err = chain.curl([t], ["--http1.1", "-w", "\n%{http_version}"])
    body, _, ver = out.rpartition(b"\n")
    check(rc == 0 and ver == b"1.1" and body == b"line 1\nline 2\nline 3\n",
          "ALPN http/1.1: %r %r" % (ver, body))
    check(h1_body(chain, t) == body, "no ALPN: differs")
    s, hdrs, rest = h.open_exec(chain.api, "edge-1", "greet&input=1&output=1")
    s.sendall(b"ping")
    echo = h.recv_until(s, lambda b: len(b) >= 4, rest)
    s.close()
    check(echo == b"ping", "exec over HTTP/1.1: %r" % echo)


class RawH2:
    """One HTTP/2 connection driven frame by frame (python3-h2), for what curl does not send:
    CONNECT, an oversized head, an explicit RST_STREAM, reading a GOAWAY."""

    def __init__(self, chain, cloud=None):
        env = chain.env
        cloud = cloud or chain.cloud
        ctx = ssl.create_default_context(cafile=env.path("stream-ca.crt"))
        ctx.check_hostname = False
        ctx.load_cert_chain(env.path("apiserver-kubelet-client.crt"),
                            env.path("apiserver-kubelet-client.key"))
        ctx.set_alpn_protocols(["h2"])
        raw = socket.create_connection(("127.0.0.1", cloud.ports["stream"]), timeout=10)
        self.s = ctx.wrap_socket(raw)
        check(self.s.selected_alpn_protocol() == "h2", "ALPN: %r" % self.s.selected_alpn_protocol())
        self.c = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=True, validate_outbound_headers=False,
            normalize_outbound_headers=False))
        self.c.initiate_connection()
        self.flush()
        self.events = []
        self.on_data = None  # a hook for DataReceived: true when it took (and acked) them

    def flush(self):
        self.s.sendall(self.c.data_to_send())

    def request(self, headers, end=True):
        sid = self.c.get_next_available_stream_id()
        self.c.send_headers(sid, headers, end_stream=end)
        self.flush()
        return sid

    def pump(self, until, timeout=10.0):
        """Reads until @until(events so far) is true; returns the events."""
        deadline = time.monotonic() + timeout
        while not until(self.events):
            self.s.settimeout(max(0.1, deadline - time.monotonic()))
            data = self.s.recv(65536)
            if not data:
                self.events.append("closed")
                break
            for ev in self.c.receive_data(data):
                self.events.append(ev)
                if isinstance(ev, h2.events.DataReceived):
                    if self.on_data and self.on_data(ev):
                        continue
                    self.c.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            self.flush()
            check(time.monotonic() < deadline, "h2: timed out, events %r" % self.events[-5:])
        return self.events

    def status(self, sid):
        for ev in self.events:
            if isinstance(ev, h2.events.ResponseReceived) and ev.stream_id == sid:
                return int(dict(ev.headers)[b":status"])
        return None

    def ended(self, sid):
        return lambda evs: any(isinstance(e, (h2.events.StreamEnded, h2.events.StreamReset))
                               and e.stream_id == sid for e in evs) or "closed" in evs

    def close(self):
        self.s.close()


def get_headers(path, extra=()):
    return [(":method", "GET"), (":scheme", "https"), (":authority", "edge-1:10350"),
            (":path", path)] + list(extra)


def raw_h2_limits(chain):
    """Over one connection: CONNECT is answered 405 (upgrades are HTTP/1.1's), a head over the
    limit 431, an explicit RST_STREAM of a follow removes its tunnel stream, and the connection
    goes on serving a log after all of them."""
    c = RawH2(chain)
    try:
        sid = c.request([(":method", "CONNECT"), (":authority", "edge-1:10350")])
        c.pump(c.ended(sid))
        check(c.status(sid) == 405, "CONNECT over h2: %r" % c.status(sid))
        # An exec's HTTP/1.1 upgrade sent over HTTP/2 (Upgrade is a field HTTP/2 forbids):
        # nghttp2 resets the stream, and it is logged once for the connection.
        mark = h.log_mark(chain.cloud)
        sid = c.request(get_headers("/exec/default/pod-a/ctr?command=sh",
                                    [("upgrade", "SPDY/3.1")]))
        c.pump(c.ended(sid))
        check(c.status(sid) is None and
              any(isinstance(e, h2.events.StreamReset) and e.stream_id == sid
                  for e in c.events), "an Upgrade field over h2: %r %r"
              % (c.status(sid), c.events[-3:]))
        h.wait_log(chain.cloud, "a malformed request", mark, what="the malformed request's line")
        sid = c.request(get_headers("/metrics", [("x-big", "a" * 16000)] * 5))
        c.pump(c.ended(sid))
        check(c.status(sid) == 431, "an oversized head: %r" % c.status(sid))
        sid = c.request(get_headers("/containerLogs/default/pod-a/ctr?follow=true&tailLines=1"))
        c.pump(lambda evs: any(isinstance(e, h2.events.DataReceived) and e.stream_id == sid
                               for e in evs))
        check(wait_streams_open(chain, 1) == 1, "the follow has no tunnel stream")
        c.c.reset_stream(sid)
        c.flush()
        left = wait_streams_open(chain, 0)
        check(left == 0, "after RST_STREAM: %g tunnel streams open" % left)
        sid = c.request(get_headers("/containerLogs/default/pod-a/ctr?tailLines=2"))
        c.pump(c.ended(sid))
        body = b"".join(e.data for e in c.events
                        if isinstance(e, h2.events.DataReceived) and e.stream_id == sid)
        check(c.status(sid) == 200 and body == b"line 1\nline 2\n",
              "the connection after them: %r %r" % (c.status(sid), body))
    finally:
        c.close()


def flow_control_per_stream(chain):
    """A stream whose client does not read (its HTTP/2 window stays shut) stops its edge stream
    once the tunnel credit and the bounded queue are full: cloudstream takes no more of its
    64 MiB than about its flow window (1 MiB) plus the stream's HTTP/2 window; another stream
    on the same connection is answered meanwhile; once the client reads, all 64 MiB come, the
    kubelet's bytes (X-Body-Sha256)."""
    n = 64 << 20
    c = RawH2(chain)
    try:
        before = metric(chain, "cloudstream_stream_bytes_total", 'direction="from_edge"')
        big = c.request(get_headers("/bytes?n=%d&seed=3" % n))
        got = bytearray()
        held = [0]

        def stalled(ev):  # the connection's window is opened again, not the stream's
            if ev.stream_id != big:
                return False
            got.extend(ev.data)
            held[0] += ev.flow_controlled_length
            c.c.increment_flow_control_window(ev.flow_controlled_length)
            return True
        c.on_data = stalled
        c.pump(lambda evs: len(got) >= 65535 or c.ended(big)(evs), timeout=10)
        time.sleep(1.0)
        taken = metric(chain, "cloudstream_stream_bytes_total", 'direction="from_edge"') - before
        check(taken <= (1 << 20) + 65535 + (256 << 10),
              "a stream nobody reads: cloudstream took %d bytes of the edge's %d" % (taken, n))
        small = c.request(get_headers("/containerLogs/default/pod-a/ctr?tailLines=1"))
        c.pump(c.ended(small))
        check(c.status(small) == 200, "another stream beside a stalled one: %r" % c.status(small))

        def reading(ev):
            if ev.stream_id != big:
                return False
            got.extend(ev.data)
            c.c.acknowledge_received_data(ev.flow_controlled_length, big)
            return True
        c.on_data = reading
        c.c.increment_flow_control_window(held[0], big)
        c.flush()
        c.pump(c.ended(big), timeout=60)
        want = [v for k, v in next(e.headers for e in c.events
                                   if isinstance(e, h2.events.ResponseReceived)
                                   and e.stream_id == big) if k == b"x-body-sha256"]
        check(len(got) == n and want and h.sha256(bytes(got)).encode() == want[0],
              "after reading: %d of %d bytes, sha256 %r" % (len(got), n, want))
        print("     a stalled stream: cloudstream took %d of %d bytes" % (taken, n), flush=True)
    finally:
        c.close()


def many_streams_churn(chain):
    """250 follows on one connection (the SETTINGS limit), half reset by the client at once,
    the rest answered, more opened in their place, then the connection closed with streams in
    flight: every tunnel stream is gone afterwards (and ASan sees no misuse)."""
    c = RawH2(chain)
    try:
        c.pump(lambda evs: any(isinstance(e, h2.events.RemoteSettingsChanged) for e in evs))
        limit = c.c.remote_settings.max_concurrent_streams
        check(limit == 250, "SETTINGS_MAX_CONCURRENT_STREAMS %r" % limit)
        path = "/containerLogs/default/pod-%d/ctr?follow=true&tailLines=1&interval=5"
        sids = [c.request(get_headers(path % i)) for i in range(limit)]
        c.pump(lambda evs: len({e.stream_id for e in evs
                                if isinstance(e, h2.events.ResponseReceived)}) >= limit,
               timeout=30)
        check(all(c.status(s) == 200 for s in sids), "250 follows: not all 200")
        check(wait_streams_open(chain, limit) == limit, "250 follows: tunnel streams %g"
              % streams_open(chain))
        for s in sids[::2]:
            c.c.reset_stream(s)
        c.flush()
        check(wait_streams_open(chain, limit // 2) == limit // 2,
              "125 reset: tunnel streams %g" % streams_open(chain))
        more = [c.request(get_headers(path % (1000 + i))) for i in range(limit // 2)]
        c.pump(lambda evs: all(c.status(s) for s in more), timeout=30)
        check(all(c.status(s) == 200 for s in more), "the streams opened in their place")
        check(wait_streams_open(chain, limit) == limit, "refilled: %g" % streams_open(chain))
    finally:
        c.close()
    left = wait_streams_open(chain, 0, timeout=10)
    check(left == 0, "the connection closed with 250 streams: %g still open" % left)


def edge_gone_resets_stream(chain):
    """The tunnel goes away during a follow whose head was sent: its HTTP/2 stream is reset
    (the client sees the answer cut, not a clean end), and the connection serves on. (Stops
    edge-2's test edge.)"""
    c = RawH2(chain)
    try:
        hd = get_headers("/containerLogs/default/pod-a/ctr?follow=true&tailLines=1")
        hd[2] = (":authority", "edge-2:10350")
        sid = c.request(hd)
        c.pump(lambda evs: any(isinstance(e, h2.events.DataReceived) and e.stream_id == sid
                               for e in evs))
        chain.base_edge.kill()
        chain.base_edge.wait()
        c.pump(c.ended(sid))
        check(any(isinstance(e, h2.events.StreamReset) and e.stream_id == sid
                  for e in c.events), "the edge went away: stream %d not reset: %r"
              % (sid, c.events[-3:]))
        sid2 = c.request(get_headers("/containerLogs/default/pod-a/ctr?tailLines=1"))
        c.pump(c.ended(sid2))
        check(c.status(sid2) == 200, "the connection after a reset: %r" % c.status(sid2))
    finally:
        c.close()


def goaway_on_drain(chain):
    """SIGTERM: an HTTP/2 connection with a follow in progress gets GOAWAY (no new streams),
    its follow goes on until the edge moves or the drain ends; the daemon exits 0."""
    c = RawH2(chain)
    try:
        sid = c.request(get_headers("/containerLogs/default/pod-a/ctr?follow=true&tailLines=1"))
        c.pump(lambda evs: any(isinstance(e, h2.events.DataReceived) for e in evs))
        chain.cloud.send_signal(15)
        c.pump(lambda evs: any(isinstance(e, h2.events.ConnectionTerminated) for e in evs))
        ga = [e for e in c.events if isinstance(e, h2.events.ConnectionTerminated)][0]
        check(ga.error_code == 0 and ga.last_stream_id == sid,
              "GOAWAY: code %r last stream %r" % (ga.error_code, ga.last_stream_id))
    finally:
        c.close()
    rc = chain.cloud.wait(timeout=40)
    check(rc == 0, "cloudstream exit %r after SIGTERM" % rc)


def access_logged(chain):
    """HTTP/2 requests have their access line like HTTP/1.1's."""
    text = open(chain.cloud.logpath, "rb").read()
    check(re.search(rb"access: GET /stats/summary 200 done caller=kube-apiserver-kubelet-client",
                    text), "no access line for an h2 request")


def stream_251_refused(chain):
    """A client that sends 251 requests at once on one connection, before it has read the
    SETTINGS (follow_burst, an nghttp2 client: python-h2 would hold the 251st back): 250
    follows are answered, the 251st is reset with REFUSED_STREAM and counted in
    cloudstream_apiserver_http2_streams_refused_total, not as a malformed request."""
    env = chain.env
    refused0 = metric(chain, "cloudstream_apiserver_http2_streams_refused_total")
    bad0 = metric(chain, "cloudstream_request_errors_total", 'reason="bad_request"')
    argv = [os.path.join(h.BIN, "test", "bench", "follow_burst"),
            "--port", str(chain.cloud.ports["stream"]), "--ca", env.path("stream-ca.crt"),
            "--cert", env.path("apiserver-kubelet-client.crt"),
            "--key", env.path("apiserver-kubelet-client.key"), "--n", "251",
            "--h2-streams-per-conn", "251", "--h2-eager", "1", "--host-header", "edge-1:10350",
            "--target", "/containerLogs/default/pod-a/ctr?follow=true&tailLines=1&interval=60",
            "--expect", "line 1", "--timeout", "30", "--hold", "1"]
    p = subprocess.run(argv, capture_output=True, timeout=60)
    out = p.stdout.decode()
    m = re.search(r"burst n=(\d+) answered=(\d+) status504=(\d+) other=(\d+) failed=(\d+)", out)
    check(p.returncode == 0 and m, "follow_burst: %d %r %r" % (p.returncode, out, p.stderr))
    check(m.group(2, 5) == ("250", "1"), "251 streams at once: %s" % m.group(0))
    refused = metric(chain, "cloudstream_apiserver_http2_streams_refused_total") - refused0
    bad = metric(chain, "cloudstream_request_errors_total", 'reason="bad_request"') - bad0
    check(refused == 1 and bad == 0, "the 251st: refused counted %g, bad_request %g (%r %r)"
          % (refused, bad, out, p.stderr))
    left = wait_streams_open(chain, 0, timeout=10)
    check(left == 0, "after follow_burst left: %g tunnel streams" % left)
    print("     %s; refused_total +%d" % (m.group(0), refused), flush=True)


def edge_gone_before_answer_502(chain):
    """The tunnel goes away after a stream was opened on it but before the edge answered (a
    follow of an empty log through a KubeEdge base edge, which sends nothing until a line
    comes; the edge is killed): the HTTP/2 stream gets our 502 Status, as over HTTP/1.1, and
    the connection serves on. (Runs after edge_gone_resets_stream: starts a new edge-2.)"""
    edge = h.start_kubeedge_edge(chain.env, chain.cloud, chain.kubelet, node="edge-2",
                                 protocol="base", name="edge-edge-2-again")
    c = RawH2(chain)
    try:
        hd = get_headers("/containerLogs/default/pod-a/ctr?follow=true&tailLines=0"
                         "&interval=60")
        hd[2] = (":authority", "edge-2:10350")
        sid = c.request(hd)
        check(wait_streams_open(chain, 1) == 1, "the follow has no tunnel stream")
        time.sleep(0.2)
        c.pump(lambda evs: True, timeout=1)
        check(c.status(sid) is None, "answered before the edge went: %r" % c.status(sid))
        edge.kill()
        edge.wait()
        c.pump(c.ended(sid))
        body = b"".join(e.data for e in c.events
                        if isinstance(e, h2.events.DataReceived) and e.stream_id == sid)
        check(c.status(sid) == 502, "the edge went before answering: status %r %r"
              % (c.status(sid), c.events[-3:]))
        # pods/log's client takes our errors as text (the message alone, stream/status.h)
        check(b"edge node edge-2" in body, "the 502's body: %r" % body)
        sid2 = c.request(get_headers("/containerLogs/default/pod-a/ctr?tailLines=1"))
        c.pump(c.ended(sid2))
        check(c.status(sid2) == 200, "the connection after a 502: %r" % c.status(sid2))
    finally:
        c.close()


def deadlines(chain):
    """A cloudstream with --idle-timeout 1s: a stream whose request never ends (HEADERS
    without END_STREAM, or a header block without its CONTINUATION) is answered 408 after
    about that long, its connection serving on; a
    connection whose only stream is a quiet follow is not timed out (2.5 s, then another
    request on it); once its last stream is gone, the idle connection is closed. And an
    HTTP/1.1 head trickled in on the same port is cut after the same --idle-timeout."""
    env = chain.env
    cloud = h.start_cloudstream(env, ["--idle-timeout", "1s"], name="cloudstream-idle")
    edge = None
    try:
        edge = h.start_edgestream(env, cloud, chain.kubelet, name="edgestream-idle")
        c = RawH2(chain, cloud)
        try:
            t0 = time.monotonic()
            sid = c.request(get_headers("/metrics"), end=False)
            c.pump(c.ended(sid), timeout=6)
            took = time.monotonic() - t0
            body = b"".join(e.data for e in c.events
                            if isinstance(e, h2.events.DataReceived) and e.stream_id == sid)
            check(c.status(sid) == 408 and 0.8 < took < 4,
                  "a request without END_STREAM: %r after %.1f s" % (c.status(sid), took))
            check(json.loads(body).get("code") == 408, "the 408's body: %r" % body)
            follow = c.request(get_headers("/containerLogs/default/pod-a/ctr?follow=true"
                                           "&tailLines=1&interval=60"))
            c.pump(lambda evs: any(isinstance(e, h2.events.DataReceived) and
                                   e.stream_id == follow for e in evs))
            time.sleep(2.5)
            sid = c.request(get_headers("/containerLogs/default/pod-a/ctr?tailLines=1"))
            c.pump(c.ended(sid))
            check(c.status(sid) == 200 and not any(
                isinstance(e, (h2.events.StreamReset, h2.events.ConnectionTerminated))
                and getattr(e, "stream_id", follow) == follow for e in c.events)
                and "closed" not in c.events,
                "a quiet follow past --idle-timeout: %r %r" % (c.status(sid), c.events[-3:]))
            c.c.reset_stream(follow)
            c.flush()
            t0 = time.monotonic()
            c.pump(lambda evs: "closed" in evs or any(
                isinstance(e, h2.events.ConnectionTerminated) for e in evs), timeout=6)
            took = time.monotonic() - t0
            check(took < 4, "the idle connection closed after %.1f s" % took)
            print("     408 for a request without END_STREAM; idle connection closed after "
                  "%.1f s" % took, flush=True)
        finally:
            c.close()
        status, took = unfinished_header_block(chain, cloud)
        check(status == 408 and 0.8 < took < 4, "a header block without its CONTINUATION: "
              "%r after %.1f s" % (status, took))
        took = http11_trickled_head(env, cloud)
        check(0.8 < took < 4, "an HTTP/1.1 head trickled in was cut after %.1f s" % took)
        print("     the same deadline over HTTP/1.1: a head trickled in byte by byte was cut "
              "after %.1f s (--idle-timeout 1s)" % took, flush=True)
    finally:
        if edge:
            env.stop(edge)
        h.stop_exits_0(env, cloud)


def http11_trickled_head(env, cloud):
    """HTTP/1.1 on the same port (no ALPN): a request head sent one byte every 0.1 s, never
    finished. Its deadline is the same --idle-timeout, from the handshake (lws's timeout, not
    pushed back by the bytes): the seconds until the connection was closed."""
    s = h.Api(env, cloud.ports["stream"]).connect()
    t0 = time.monotonic()
    head = h.head("GET", "/containerLogs/default/pod-a/ctr", [("Host", "edge-1:10350")])
    try:
        for i in range(100):  # 10 s at most
            s.sendall(head[i % (len(head) - 4):i % (len(head) - 4) + 1])
            s.settimeout(0.1)
            try:
                if s.recv(4096) == b"":
                    break
            except socket.timeout:
                pass
    except OSError:
        pass  # closed under our feet: the deadline
    took = time.monotonic() - t0
    s.close()
    return took


def unfinished_header_block(chain, cloud):
    """HEADERS without END_HEADERS, and no CONTINUATION ever (frames written by hand: python-h2
    would not): the stream's answer (its :status) and how long it took."""
    import hpack
    import hyperframe.frame as hf
    env = chain.env
    ctx = ssl.create_default_context(cafile=env.path("stream-ca.crt"))
    ctx.check_hostname = False
    ctx.load_cert_chain(env.path("apiserver-kubelet-client.crt"),
                        env.path("apiserver-kubelet-client.key"))
    ctx.set_alpn_protocols(["h2"])
    raw = socket.create_connection(("127.0.0.1", cloud.ports["stream"]), timeout=6)
    s = ctx.wrap_socket(raw)
    try:
        block = hpack.Encoder().encode(get_headers("/metrics"))
        hd = hf.HeadersFrame(1, block, flags=["END_STREAM"])  # no END_HEADERS
        s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + hf.SettingsFrame(0).serialize() +
                  hd.serialize())
        t0 = time.monotonic()
        buf, dec = b"", hpack.Decoder()
        while True:
            data = s.recv(65536)
            if not data:
                return None, time.monotonic() - t0
            buf += data
            while len(buf) >= 9:
                fr, length = hf.Frame.parse_frame_header(memoryview(buf[:9]))
                if len(buf) < 9 + length:
                    break
                fr.parse_body(memoryview(buf[9:9 + length]))
                buf = buf[9 + length:]
                if isinstance(fr, hf.HeadersFrame) and fr.stream_id == 1:
                    return (int(dict(dec.decode(fr.data))[":status"]),
                            time.monotonic() - t0)
                if isinstance(fr, (hf.RstStreamFrame, hf.GoAwayFrame)):
                    return fr.__class__.__name__, time.monotonic() - t0
    except socket.timeout:
        return "nothing", time.monotonic() - t0
    finally:
        s.close()


def alpn_interposed(chain):
    """The executable exports SSL_get0_alpn_selected (front_h2_alpn.c: liblws binds to it),
    and the start-up check found it in effect (no ERR line; h2 chosen on the port)."""
    exe = os.path.join(h.BIN, "cloudstream", "cloudstream")
    out = subprocess.run(["readelf", "--dyn-syms", "-W", exe], capture_output=True,
                         check=True).stdout.decode()
    defined = [line for line in out.splitlines()
               if line.split()[-1:] == ["SSL_get0_alpn_selected"] and " UND " not in line]
    check(len(defined) == 1 and " FUNC " in defined[0] and " GLOBAL " in defined[0],
          "SSL_get0_alpn_selected in the dynamic symbols: %r" % defined)
    text = open(chain.cloud.logpath, "rb").read()
    check(b"HTTP/2 is not offered" not in text, "the start-up check failed")


METRICS_USER = "system:serviceaccount:kube-system:metrics-server"


def group_webhook():
    """Bearer tokens over HTTP/2 (--authentication-token-webhook, --authorization-mode Webhook,
    peers/kube_reviews.py as the apiserver): no certificate and no token is 401; a token whose
    user may read nodes/metrics gets /metrics and a 403 for a log; the `authorization` header
    of each stream is its own, on one connection."""
    env = h.Env("cs-h2-authz")
    rc = 1
    kube = None
    try:
        token_file = standin.write_token(env, "cloudstream-sa-token")
        kube = KubeReviews(env.path("kubelet.crt"), env.path("kubelet.key"),
                           "cloudstream-sa-token",
                           {"metrics-token": {"username": METRICS_USER, "uid": "u-1"}},
                           [{"user": METRICS_USER, "verbs": ["get"],
                             "resources": ["nodes/metrics"]}])
        kubelet = h.start_kubelet(env)
        cloud = h.start_cloudstream(env, ["--authorization-mode", "Webhook",
                                          "--authentication-token-webhook"]
                                    + standin.apiserver_flags(env, kube.url, token_file))
        h.start_edgestream(env, cloud, kubelet)

        def codes(out):
            return out.decode().split()

        def unauthenticated_401():
            rc_, out, err = curl(env, cloud, ["/metrics"], ["-o", "/dev/null", "-w",
                                                            "%{http_version} %{http_code}"],
                                 cert=None)
            check(codes(out) == ["2", "401"], "no certificate, no token over h2: %r %r"
                  % (out, err))

        def tokens_per_stream():
            ok = ["-H", "Authorization: Bearer metrics-token"]
            rc_, out, err = curl(env, cloud, ["/metrics", "/containerLogs/default/pod-a/ctr"],
                                 ok + ["--parallel", "-o", "/dev/null", "-o", "/dev/null",
                                       "-w", "%{http_version} %{http_code}\n"], cert=None)
            check(sorted(out.decode().split("\n")[:2]) == ["2 200", "2 403"],
                  "a metrics token over h2: /metrics and a log: %r %r" % (out, err))

        def http2_off():
            """--stream-http2 off: a client offering h2 gets HTTP/1.1 (ALPN http/1.1)."""
            off = h.start_cloudstream(env, ["--stream-http2", "off", "--authorization-mode",
                                            "Webhook", "--authentication-token-webhook"]
                                      + standin.apiserver_flags(env, kube.url, token_file),
                                      name="cloudstream-h1")
            try:
                rc_, out, err = curl(env, off, ["/metrics"],
                                     ["-H", "Authorization: Bearer metrics-token", "-o",
                                      "/dev/null", "-w", "%{http_version} %{http_code}"],
                                     cert=None)
                check(codes(out) == ["1.1", "503"], "--stream-http2 off: %r %r" % (out, err))
            finally:
                h.stop_exits_0(env, off)

        rc = h.run(h.named("webhook", [("unauthenticated_401", unauthenticated_401),
                                       ("tokens_per_stream", tokens_per_stream),
                                       ("http2_off", http2_off)]))
        h.stop_exits_0(env, cloud)
        return rc
    finally:
        if kube:
            kube.close()
        h.close_env(env, rc != 0)


def main():
    if sys.argv[1:2] == ["webhook"]:
        del sys.argv[1]
        return group_webhook()
    chain = Chain("cs-h2")
    rc = 1
    try:
        tests = [logs_h2, same_bytes_as_h1, base_edge_h2, parallel_follows_one_connection,
                 client_reset_frees_stream, refusals_h2, raw_h2_limits,
                 flow_control_per_stream, many_streams_churn, stream_251_refused,
                 h1_same_port, access_logged, alpn_interposed, deadlines,
                 edge_gone_resets_stream, edge_gone_before_answer_502,
                 goaway_on_drain]  # the last two stop edge-2's edge and cloudstream
        rc = h.run(h.named("h2", [(t.__name__, (lambda t=t: t(chain))) for t in tests]))
        return rc
    finally:
        chain.close(rc != 0)


if __name__ == "__main__":
    sys.exit(main())
