#!/usr/bin/python3
"""Integration tests of edgestream, the real daemon on loopback.

    edgestream_test.py cloud|base|ops [test names...]

cloud: the whole chain (TLS "apiserver" client -> cloudstream -> edgestream -> TLS kubelet
       stand-in), extensions negotiated: exec, attach, portForward, logs (also following),
       metrics byte-exact, 100 MiB sha256, isolation, allow-listed local ports, refusals.
base:  a test cloud speaking exactly KubeEdge's base protocol drives edgestream: TEXT frames,
       JSON connect requests, body-only logs/metrics, raw upgrades, no extension ever sent.
h2:    the kubelet stand-in speaks HTTP/2 (ALPN h2): plain requests ride one shared h2
       connection (logs, follow, metrics byte-exact, statuses), a stalled follower beside an
       active one, GOAWAY, the kubelet going away, upgrades still HTTP/1.1; and
       --kubelet-http2 off.
ops:   redial with backoff and jitter after the cloud dies, cloud certificates from another CA
       or with the wrong name refused, certificate reload, admin endpoints, the embedding
       example, SIGTERM, a kubelet behind a TLS front (socat) that refuses session resumption.
"""
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402
import standin  # noqa: E402
from harness import UPGRADE_SPDY, check  # noqa: E402
import cloudstream_test as cst  # noqa: E402
import fake_kubelet  # noqa: E402  (its bodies are the reference)
import tunnelproto as tp  # noqa: E402
from kubeedge_cloud import KubeEdgeCloud  # noqa: E402


class LocalHttp:
    """A plain-HTTP server on 127.0.0.1 standing for node-exporter; counts connections."""

    def __init__(self, body=b"node_exporter_up 1\n"):
        outer = self
        self.connections = 0

        class Handler(standin.Handler):
            protocol_version = "HTTP/1.1"

            def setup(self):
                outer.connections += 1
                super().setup()

            def do_GET(self):  # noqa: N802 - http.server's name
                self.reply(200, body + self.path.encode() + b"\n", "text/plain")

        self.srv = standin.serve(Handler)
        self.port = self.srv.server_address[1]

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


class Chain(h.Chain):
    """kubelet stand-in + cloudstream + edgestream for edge-1 (what cloudstream_test's checks
    expect of a chain), plus a local HTTP port on the allow-list and one that is not."""

    def __init__(self, tag, edge_extra=(), cloud_extra=(), kubelet_extra=()):
        self.allowed = LocalHttp()
        self.forbidden = LocalHttp()
        super().__init__(tag, lambda env, cloud, kubelet: h.start_edgestream(
            env, cloud, kubelet,
            extra=["--local-port", "node-exporter=%d" % self.allowed.port] + list(edge_extra)),
            cloud_extra=cloud_extra, kubelet_extra=kubelet_extra)

    def close(self, failed=False):
        self.allowed.close()
        self.forbidden.close()
        super().close(failed)


def access_log(chain):
    """One info line per request on each side, sharing the stream id: the cloud's says what was
    asked (path without its query), by whom, the status and the bytes; the edge's which backend
    served it and its bytes. A refused request is logged as such."""
    status, _, body, s = chain.get("/containerLogs/default/pod-a/ctr?tailLines=3&secret=x")
    s.close()
    check(status == 200, "logs: %d" % status)
    pat = re.compile(rb"node=edge-1 stream=(\d+) access: GET /containerLogs/default/pod-a/ctr "
                     rb"200 done caller=(\S+) to_edge=0 to_client=(\d+) \d+ ms")
    deadline = time.monotonic() + 5
    while True:
        cloud_log = open(chain.cloud.logpath, "rb").read()
        found = pat.findall(cloud_log)
        if found:
            break
        check(time.monotonic() < deadline, "no access line in cloudstream's log")
        time.sleep(0.05)
    sid, caller, to_client = found[-1]
    check(caller == b"kube-apiserver-kubelet-client", "caller %r" % caller)
    check(int(to_client) > len(body), "to_client %s for a body of %d" % (to_client, len(body)))
    check(b"secret=x" not in cloud_log, "the query reached the access log")
    edge_pat = re.compile(rb"node=edge-1 stream=%s access: LOGS_CONNECT kubelet done "
                          rb"to_cloud=(\d+) from_cloud=0 \d+ ms" % sid)
    deadline = time.monotonic() + 5
    while not edge_pat.search(open(chain.edge.logpath, "rb").read()):
        check(time.monotonic() < deadline, "no access line for stream %s on the edge" % sid)
        time.sleep(0.05)
    # A request the edge refuses: both sides say so, under the same id again.
    status, _, _, s = chain.get("/ports/nosuchport/")
    s.close()
    check(status in (403, 404), "refused: %d" % status)
    deadline = time.monotonic() + 5
    while True:
        m = re.findall(rb"stream=(\d+) access: GET /ports/nosuchport/ %d " % status,
                       open(chain.cloud.logpath, "rb").read())
        if m and re.search(rb"stream=%s access: \S+ no backend refused" % m[-1],
                           open(chain.edge.logpath, "rb").read()):
            break
        check(time.monotonic() < deadline, "refused request: access lines %r" % m)
        time.sleep(0.05)


def kept_kubelet_connections(chain):
    """Plain GETs leave their kubelet connection for the next request (no Connection: close
    toward the kubelet, so none reaches the apiserver either): requests one after another, on
    new apiserver connections or on one kept-alive, ride one kubelet connection; a kubelet that
    closes its side is dialled anew, and the request still succeeds."""
    ports = []
    for _ in range(3):
        st, hdrs, body, s = chain.get("/conn")
        s.close()
        check(st == 200 and "connection" not in hdrs, "/conn: %d %r" % (st, hdrs))
        ports.append(body)
    s = None
    for _ in range(3):
        st, hdrs, body, s = chain.get("/conn", sock=s)
        check(st == 200, "/conn on one apiserver connection: %d" % st)
        ports.append(body)
    s.close()
    check(len(set(ports)) == 1, "six requests, kubelet connections %r" % sorted(set(ports)))
    st, hdrs, body, s = chain.get("/conn?close=1")
    s.close()
    check(st == 200 and hdrs.get("connection") == "close", "close: %d %r" % (st, hdrs))
    for _ in range(3):  # the closed one is never used again
        st, _, after, s = chain.get("/conn")
        s.close()
        check(st == 200 and after != body, "after the kubelet closed: %d %r" % (st, after))
    # logs and metrics still come whole over kept connections
    for _ in range(3):
        st, _, b, s = chain.get("/containerLogs/default/pod-a/ctr?tailLines=3")
        s.close()
        check(st == 200 and b == b"line 1\nline 2\nline 3\n", "logs: %d %r" % (st, b))


def kubelet_close_not_kept(chain):
    """A kubelet answer that says "Connection: close", or is HTTP/1.0 without keep-alive, ends
    its connection: edgestream does not keep it for the next request, even while the kubelet
    has not closed it yet (here it closes 3 s later and reads nothing meanwhile). Before, the
    connection went into the idle pool and the next request was sent on it, to wait for the
    close and a new dial."""
    for q in ("close=1", "v10=1"):
        st, _, body, s = chain.get("/conn?%s&linger=3" % q)
        s.close()
        check(st == 200 and body.isdigit(), "/conn?%s: %d %r" % (q, st, body))
        t0 = time.monotonic()
        st, _, after, s = chain.get("/conn")
        took = time.monotonic() - t0
        s.close()
        check(st == 200 and after.isdigit() and after != body,
              "after /conn?%s: %d %r (that one was %r)" % (q, st, after, body))
        check(took < 1.5, "after /conn?%s the next request took %.2f s: it went on the "
              "connection the kubelet was closing" % (q, took))


def upgrade_echo(chain, method, target):
    s = chain.api.connect()
    s.sendall(h.head(method, target, [("Host", "edge-1:10350")] + UPGRADE_SPDY))
    status, hdrs, rest = h.read_head(s)
    check(status == 101, "%s: status %d" % (target, status))
    payload = os.urandom(200000)
    s.sendall(payload)
    echo = h.recv_until(s, lambda b: len(b) >= len(payload), rest)
    s.close()
    check(echo == payload, "%s: echo differs" % target)


def logs_follow(chain):
    s = chain.api.connect()
    s.sendall(h.head("GET", "/containerLogs/default/pod-a/ctr?tailLines=2&follow=true",
                     [("Host", "edge-1:10350")]))
    status, hdrs, rest = h.read_head(s)
    check(status == 200, "follow: status %d" % status)
    t0 = time.monotonic()
    buf = h.recv_until(s, lambda b: b.count(b"\n") >= 12, rest)  # chunk lines included
    text = b"".join(re.findall(rb"line \d+\n", buf))
    check(text.startswith(b"line 1\nline 2\nline 3\n"), "follow: %r" % text[:80])
    check(time.monotonic() - t0 < 10, "follow: lines did not keep coming")
    s.close()


def local_port(chain):
    st, _, body, s = chain.get("/ports/node-exporter/metrics?x=1")
    s.close()
    check(st == 200, "local port: status %d %r" % (st, body))
    check(body == b"node_exporter_up 1\n/metrics?x=1\n", "local port: body %r" % body)


def local_port_refused(chain):
    before = chain.forbidden.connections
    for target in ("/ports/%d/metrics" % chain.forbidden.port, "/ports/ssh/",
                   "/ports/%d/" % chain.kubelet.port):
        st, _, body, s = chain.get(target)
        s.close()
        check(st == 403 and b"allow-list" in body, "refusal: %d %r" % (st, body))
    check(chain.forbidden.connections == before, "a port outside the allow-list was dialled")


def kubelet_down(chain):
    """The kubelet stops: the answer is a clear error at once, not a hang."""
    chain.env.stop(chain.kubelet)
    t0 = time.monotonic()
    st, _, body, s = chain.get("/metrics")
    s.close()
    check(st == 502 and b"unreachable" in body, "kubelet down: %d %r" % (st, body))
    check(time.monotonic() - t0 < 5, "kubelet down: took %.1f s" % (time.monotonic() - t0))


def edge_metrics(chain):
    st, text = h.admin_get(chain.edge, "/metrics")
    check(st == 200, "edge metrics: %d" % st)
    check('edgestream_tunnel_connected{protocol="extended"} 1' in text, "edge metrics:\n" + text)
    m = re.search(r"^edgestream_streams_total (\d+)$", text, re.M)
    check(m and int(m.group(1)) > 5, "edge metrics: streams_total")
    check(h.admin_get(chain.edge, "/readyz") == (200, "ok\n"), "edge readyz")
    check(h.admin_get(chain.edge, "/healthz") == (200, "ok\n"), "edge healthz")


def group_cloud():
    chain = Chain("es-cloud")
    rc = 1
    try:
        rc = h.run(h.named("cloud", [
            ("exec_echo", lambda: cst.exec_echo(chain)),
            ("attach_echo", lambda: upgrade_echo(chain, "POST",
                                                 "/attach/default/pod-a/ctr?output=1&input=1")),
            ("portforward_echo", lambda: upgrade_echo(chain, "POST",
                                                      "/portForward/default/pod-a")),
            ("logs_tail", lambda: cst.logs_tail(chain)),
            ("access_log", lambda: access_log(chain)),
            ("logs_follow", lambda: logs_follow(chain)),
            ("metrics_same_as_direct", lambda: cst.metrics_same_as_direct(chain)),
            ("status_passthrough", lambda: cst.status_passthrough(chain)),
            ("keep_alive", lambda: cst.keep_alive(chain)),
            ("kept_kubelet_connections", lambda: kept_kubelet_connections(chain)),
            ("kubelet_close_not_kept", lambda: kubelet_close_not_kept(chain)),
            ("refused_upgrade_is_fast", lambda: cst.refused_upgrade_is_fast(chain)),
            ("edge_end_closes_fast", lambda: cst.edge_end_closes_fast(chain)),
            ("big_body_100mib", lambda: cst.big_body(chain)),
            ("expect_continue", lambda: cst.expect_continue(chain)),
            ("isolation", lambda: cst.isolation(chain)),
            ("local_port", lambda: local_port(chain)),
            ("local_port_refused", lambda: local_port_refused(chain)),
            ("edge_metrics", lambda: edge_metrics(chain)),
            ("kubelet_down", lambda: kubelet_down(chain)),
        ]))
        return rc
    finally:
        chain.close(rc != 0)


# ---- h2: the kubelet leg over HTTP/2 (edgestream/src/h2conn.c) ----------------------------

def body_of(chain, target):
    st, _, body, s = chain.get(target)
    s.close()
    check(st == 200, "%s: status %d" % (target, st))
    return body


def follow_open(chain, target="/containerLogs/default/pod-a/ctr?tailLines=1&follow=true"):
    s = chain.api.connect(timeout=10)
    s.sendall(h.head("GET", target, [("Host", "edge-1:10350")]))
    status, hdrs, rest = h.read_head(s)
    check(status == 200, "follow: status %d" % status)
    check(hdrs.get("transfer-encoding", "").lower() == "chunked",
          "follow: not chunked over the tunnel: %r" % hdrs)
    return s, rest


def h2_used(chain):
    """The kubelet picked h2 and requests ride it; upgrades (which h2 cannot carry) still work
    over HTTP/1.1 beside it."""
    check(body_of(chain, "/proto") == b"h2", "the request did not go over HTTP/2")
    cst.exec_echo(chain)
    check(body_of(chain, "/proto") == b"h2", "HTTP/2 no longer used after an upgrade")


def h2_shared_connection(chain):
    """Several follows and short requests at once ride one connection: the stand-in sees the
    same client port for every /conn while three follows are open."""
    follows = [follow_open(chain)[0] for _ in range(3)]
    ports = {body_of(chain, "/conn") for _ in range(4)}
    for s in follows:
        s.close()
    check(len(ports) == 1, "requests rode %d connections: %r" % (len(ports), ports))


def h2_head_conversion(chain):
    """The answer the cloud gets is the HTTP/1.1 one: status line and reason, the kubelet's
    headers (canonical case), Content-Length kept, a 404 passed through."""
    st, hdrs, body, s = chain.get("/metrics")
    s.close()
    check(st == 200 and hdrs.get("content-length") == str(len(fake_kubelet.METRICS)),
          "metrics head: %d %r" % (st, hdrs))
    check(hdrs.get("content-type") == "text/plain; version=0.0.4; charset=utf-8",
          "metrics content-type: %r" % hdrs)
    st, _, body, s = chain.get("/nothing/here")
    s.close()
    check(st == 404 and b'"code":404' in body, "404: %d %r" % (st, body))
    st, _, body, s = chain.get("/status/503")
    s.close()
    check(st == 503 and body == b"status 503 from the kubelet\n", "503: %d %r" % (st, body))


def h2_streams_limit(chain, n=7):
    """The stand-in allows 3 concurrent streams a connection (--h2-max-streams 3): 7 requests
    held open ride 3 connections, 3 + 3 + 1, not 7 (nor 1 with 4 queued behind streams that
    may never end). First all 7 at once on a fresh edge (they wait for the first connection,
    which takes 3 once the kubelet's SETTINGS say so), then 7 one after another."""
    for at_once in (True, False):
        socks, ports = [], []
        for _ in range(n):
            s = chain.api.connect(timeout=10)
            s.sendall(h.head("GET", "/conn?hold=6", [("Host", "edge-1:10350")]))
            socks.append(s)
            if not at_once:
                ports.append(read_conn_port(s))
        if at_once:
            ports = [read_conn_port(s) for s in socks]
        for s in socks:
            s.close()
        counts = sorted((ports.count(p) for p in set(ports)), reverse=True)
        check(counts == [3, 3, 1], "streams per connection (%s): %r" % (
            "at once" if at_once else "in turn", counts))
        time.sleep(0.5)  # the cancelled streams leave their connections


def read_conn_port(s):
    status, hdrs, rest = h.read_head(s)
    check(status == 200, "/conn: status %d" % status)
    buf = h.recv_until(s, lambda b: re.search(rb"\r\n(\d+)\n", b) is not None, rest)
    return int(re.search(rb"\r\n(\d+)\n", buf).group(1))


def h2_big_body(chain, n=32 << 20):
    """32 MiB, compared by the stand-in's sha256 (a Content-Length answer: relayed as is, not
    chunked): a bulk stream, whose window grew from 64 KiB to its 1 MiB bound (4 doublings,
    edgestream_kubelet_h2_window_grown_total). The rate is printed for the record (ASan, Python
    h2)."""
    grown0 = h.metric(chain.edge, "edgestream_kubelet_h2_window_grown_total")
    rate = cst.throughput(chain, "/bytes?n=%d&seed=3" % n, n, verify=True)
    grown = h.metric(chain.edge, "edgestream_kubelet_h2_window_grown_total") - grown0
    check(grown == 4, "the bulk stream's window grew %d times, not 4 (64 KiB to 1 MiB)" % grown)
    print("     h2 body: %.1f MB/s, its window grew %d times" % (rate, grown), flush=True)


H2_WINDOW_MAX = 1 << 20  # h2msg.h ES_H2_STREAM_WINDOW_MAX


def h2_bulk_stall_bounded(chain, first=8 << 20):
    """A bulk stream read for @first bytes (its window grows to the bound), then not read at
    all: the kubelet is let to send at most the grown window past what reached the cloud (plus
    the queue's 8 KiB mark; Python's 16 KiB frames add little framing), and the grown window is
    the edge's gauge while the stream lives, 0 once it ended."""
    base = h.metric(chain.cloud, "cloudstream_stream_bytes_total", 'direction="from_edge"')
    s = chain.api.connect(timeout=60)
    s.sendall(h.head("GET", "/stream?tag=bulkstall", [("Host", "edge-1:10350")]))
    st, _, rest = h.read_head(s)
    check(st == 200, "bulk stream: status %d" % st)
    got = len(rest)
    while got < first:
        b = s.recv(1 << 20)
        check(b, "bulk stream: closed after %d bytes" % got)
        got += len(b)
    grown = h.metric(chain.edge, "edgestream_kubelet_h2_window_grown_bytes")
    check(grown == H2_WINDOW_MAX - (64 << 10),
          "the bulk stream's window grew by %d bytes, not to the bound" % grown)
    seen = cst.from_edge_bytes_once_still(chain, base, 0.3)
    time.sleep(0.5)
    seen = h.metric(chain.cloud, "cloudstream_stream_bytes_total", 'direction="from_edge"')
    sent = int(body_of(chain, "/sent?tag=bulkstall"))
    # What reached the cloud, less the chunk framing the edge added (8 bytes per 16 KiB frame
    # from the stand-in; rounded up, so held errs high) and the head.
    body = (seen - base) * 16384 // 16392 - 200
    held = sent - body
    bound = H2_WINDOW_MAX + (8 << 10) + 200  # the window, the queue's mark, the head's guess
    check(held <= bound, "a stalled bulk stream: the kubelet sent %d bytes past what reached "
          "the cloud (bound %d)" % (held, bound))
    print("     h2 bulk stall: read %d, stalled; the kubelet sent %d, the cloud got %d: the edge"
          " was let to take %d bytes past it (bound %d)" % (got, sent, body, held, bound),
          flush=True)
    s.close()
    deadline = time.monotonic() + 10
    while h.metric(chain.edge, "edgestream_kubelet_h2_window_grown_bytes") != 0:
        check(time.monotonic() < deadline, "the grown window outlived its stream")
        time.sleep(0.1)


def h2_window_shrinks_when_quiet(chain, n=8 << 20, pause=8.0):
    """A stream that had a burst (its window grew to 1 MiB, the queue's cap and the budget's
    reservation with it), then goes silent while it stays open (the fake kubelet's /bursts): within
    two periods (ES_H2_FLOW_PERIOD_MS, 2 s) its window is back to 64 KiB and the reservation
    (edgestream_kubelet_h2_window_reserved_bytes) and the budget (edgestream_buffered_bytes)
    have it back. Its second burst grows the window again (4 doublings) and charges it again."""
    def metric(name):
        return h.metric(chain.edge, name)

    grown0 = metric("edgestream_kubelet_h2_window_grown_total")
    shrunk0 = metric("edgestream_kubelet_h2_window_shrunk_total")
    s = chain.api.connect(timeout=60)
    s.sendall(h.head("GET", "/bursts?n=%d&pause=%g&count=2" % (n, pause),
                     [("Host", "edge-1:10350")]))
    st, _, rest = h.read_head(s)
    check(st == 200, "bursts: status %d" % st)
    got = [len(rest)]

    def drain():
        while True:
            try:
                b = s.recv(1 << 20)
            except OSError:
                return
            if not b:
                return
            got[0] += len(b)

    t = threading.Thread(target=drain, daemon=True)
    t.start()
    try:
        for burst in (1, 2):
            deadline = time.monotonic() + 30
            while got[0] < burst * n:
                check(time.monotonic() < deadline, "burst %d: %d bytes" % (burst, got[0]))
                time.sleep(0.02)
            t_end = time.monotonic()
            grown = metric("edgestream_kubelet_h2_window_grown_total") - grown0
            check(grown == 4 * burst, "after burst %d the window grew %d times, not %d" %
                  (burst, grown, 4 * burst))
            reserved = metric("edgestream_kubelet_h2_window_reserved_bytes")
            check(metric("edgestream_kubelet_h2_window_grown_bytes") == H2_WINDOW_MAX - (64 << 10)
                  and reserved >= H2_WINDOW_MAX - (64 << 10),
                  "burst %d: the window is not at its bound, or not reserved (%d)" %
                  (burst, reserved))
            used = metric("edgestream_buffered_bytes")
            # Silent now: two periods at most, and the reservation is back.
            while metric("edgestream_kubelet_h2_window_reserved_bytes") != 0:
                check(time.monotonic() < t_end + pause - 1.0,
                      "burst %d: the quiet stream kept %d bytes reserved" % (
                          burst, metric("edgestream_kubelet_h2_window_reserved_bytes")))
                time.sleep(0.1)
            back = time.monotonic() - t_end
            check(metric("edgestream_kubelet_h2_window_grown_bytes") == 0,
                  "burst %d: the quiet stream's window did not shrink" % burst)
            freed = used - metric("edgestream_buffered_bytes")
            check(freed >= reserved, "burst %d: the budget got %d bytes back, not %d" %
                  (burst, freed, reserved))
            check(metric("edgestream_kubelet_h2_window_shrunk_total") > shrunk0,
                  "no shrink counted")
            print("     h2 quiet: burst %d of %d MiB grew the window to 1 MiB (%d bytes "
                  "reserved); silent, it was back to 64 KiB and the budget had %d bytes back "
                  "%.1f s later" % (burst, n >> 20, reserved, freed, back), flush=True)
    finally:
        s.close()
        t.join(5)


def h2_stalled_beside_active(chain):
    """A follower whose client reads nothing (an endless /stream on the same h2 connection)
    beside an active follower and metrics once every 0.2 s: the stalled stream's kubelet writer
    waits for its own window only. Asserted: the stall happened (the cloud's received bytes stop
    growing far below what the kubelet would send), the active follower keeps getting lines,
    each metrics answer comes in < 1 s and byte-exact, and everything rode one connection. The
    stalled stream had its window grown while the cloud took its first megabytes, so the others
    are shown not to wait behind a grown window either."""
    port0 = body_of(chain, "/conn")
    base = h.metric(chain.cloud, "cloudstream_stream_bytes_total", 'direction="from_edge"')
    stalled = chain.api.connect(timeout=60)
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.sendall(h.head("GET", "/stream", [("Host", "edge-1:10350")]))
    seen = cst.from_edge_bytes_once_still(chain, base, 0.3)
    check(0 < seen - base < 64 << 20, "the stalled stream did not stall (%d bytes)" % (seen - base))
    grown = h.metric(chain.edge, "edgestream_kubelet_h2_window_grown_bytes")
    check(grown > 0, "the stalled stream's window did not grow before it stalled")
    print("     h2 stall: the stalled stream stopped after %d bytes, its window grown by %d"
          % (seen - base, grown), flush=True)
    active, rest = follow_open(chain, "/containerLogs/default/pod-a/ctr?tailLines=1&follow=true"
                                      "&interval=0.1")
    worst, t_end = 0.0, time.monotonic() + 5
    while time.monotonic() < t_end:
        t0 = time.monotonic()
        body = body_of(chain, "/metrics")
        worst = max(worst, time.monotonic() - t0)
        check(body == fake_kubelet.METRICS, "metrics while stalled: %d bytes" % len(body))
        time.sleep(0.2)
    buf = h.recv_until(active, lambda b: len(re.findall(rb"line \d+\n", b)) >= 30, rest)
    check(len(re.findall(rb"line \d+\n", buf)) >= 30, "the active follower stopped")
    check(worst < 1.0, "a metrics answer took %.2f s while a stream was stalled" % worst)
    check(body_of(chain, "/conn") == port0, "the requests did not share one connection")
    # The stalled one lost nothing: it reads again and gets a whole 64 KiB chunk.
    stalled.settimeout(20)
    st, hdrs, rest = h.read_head(stalled)
    check(st == 200, "stalled: status %d" % st)
    data = h.recv_until(stalled, lambda b: len(b) >= 300000, rest)
    check(len(data) >= 300000, "the stalled stream did not resume")
    print("     h2 stall: worst metrics answer %.3f s; the stalled stream resumed" % worst,
          flush=True)
    stalled.close()
    active.close()


def h2_goaway(chain):
    """The kubelet goes away gracefully (GOAWAY, then closes): the answer in flight completes,
    a follow on that connection ends (not a hang), the next request gets a new connection."""
    port0 = body_of(chain, "/conn")
    s, rest = follow_open(chain)
    check(body_of(chain, "/goaway") == b"going away\n", "goaway answer")
    _, took = h.wait_closed(s, 5)  # raises when it did not end
    s.close()
    check(took < 4, "the follow took %.1f s to end when its connection went" % took)
    port1 = body_of(chain, "/conn")
    check(port1 != port0, "no new connection after GOAWAY (%r)" % port1)
    check(body_of(chain, "/proto") == b"h2", "the new connection is not h2")


def h2_kubelet_gone(chain):
    """The kubelet process dies: an open follow ends, the next request is refused as over
    HTTP/1.1 (502, unreachable) and fast."""
    s, rest = follow_open(chain)
    chain.env.stop(chain.kubelet)
    _, took = h.wait_closed(s, 5)  # raises when it did not end
    s.close()
    check(took < 2, "the follow took %.1f s to end when the kubelet died" % took)
    kubelet_down(chain)


def exits_clean(chain):
    """SIGTERM after all of the above: edgestream exits 0 (under ASan: nothing leaked, no
    error), its HTTP/2 connections (one kept idle) and streams all freed."""
    if chain.kubelet.poll() is None:  # with an idle h2 connection kept open
        check(body_of(chain, "/proto") == b"h2", "not over h2")
    rc = chain.env.stop(chain.edge)
    check(rc == 0, "edgestream exited with %s:\n%s" % (rc, chain.env.tail(chain.edge)))


def group_h2():
    chain = Chain("es-h2", kubelet_extra=("--h2",))
    rc = 1
    try:
        rc = h.run(h.named("h2", [
            ("used", lambda: h2_used(chain)),
            ("logs_tail", lambda: cst.logs_tail(chain)),
            ("logs_follow", lambda: logs_follow(chain)),
            ("metrics_same_as_direct", lambda: cst.metrics_same_as_direct(chain)),
            ("head_conversion", lambda: h2_head_conversion(chain)),
            ("status_passthrough", lambda: cst.status_passthrough(chain)),
            ("keep_alive", lambda: cst.keep_alive(chain)),
            ("shared_connection", lambda: h2_shared_connection(chain)),
            ("body_32mib_sha256", lambda: h2_big_body(chain)),
            # a PUT with a body is no GET/HEAD: HTTP/1.1 beside the h2 connection, 100 relayed
            ("expect_continue_http1", lambda: cst.expect_continue(chain, 16 << 20)),
            ("stalled_beside_active", lambda: h2_stalled_beside_active(chain)),
            ("bulk_stall_bounded", lambda: h2_bulk_stall_bounded(chain)),
            ("window_shrinks_when_quiet", lambda: h2_window_shrinks_when_quiet(chain)),
            ("goaway", lambda: h2_goaway(chain)),
            ("edge_exits_clean", lambda: exits_clean(chain)),
        ]))
    finally:
        chain.close(rc != 0)
    if rc:
        return rc
    chain = Chain("es-h2-gone", kubelet_extra=("--h2",))
    try:
        rc = h.run(h.named("h2", [
            ("kubelet_gone", lambda: h2_kubelet_gone(chain)),
            ("edge_exits_clean_after_loss", lambda: exits_clean(chain)),
        ]))
    finally:
        chain.close(rc != 0)
    if rc:
        return rc
    chain = Chain("es-h2-limit", kubelet_extra=("--h2", "--h2-max-streams", "3"))
    try:
        rc = h.run(h.named("h2", [
            ("streams_limit", lambda: h2_streams_limit(chain)),
        ]))
    finally:
        chain.close(rc != 0)
    if rc:
        return rc
    # A KubeEdge (base-protocol) cloud: logs and metrics carry the body only, de-chunked, as
    # over HTTP/1.1.
    c = BaseChain("es-h2-base", kubelet_extra=("--h2",))
    try:
        rc = h.run(h.named("h2_base", [
            ("logs_body_only", lambda: base_logs_body_only(c)),
            ("metrics_body_only", lambda: base_metrics_body_only(c)),
            ("proto", lambda: check(
                c.cloud.open(tp.METRIC, "/proto", "", {}).read_all() == b"h2", "not over h2")),
        ]))
    finally:
        c.close()
    if rc:
        return rc
    chain = Chain("es-h2-off", kubelet_extra=("--h2",), edge_extra=("--kubelet-http2", "off"))
    try:
        rc = h.run(h.named("h2_off", [
            ("http11", lambda: check(body_of(chain, "/proto") == b"http/1.1",
                                     "--kubelet-http2 off still used HTTP/2")),
            ("metrics_same_as_direct", lambda: cst.metrics_same_as_direct(chain)),
        ]))
        return rc
    finally:
        chain.close(rc != 0)


# ---- stall: clients and backends that stop reading ----------------------------------------

def rss_kib(p):
    with open("/proc/%d/status" % p.pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def many_stalled_clients(chain, n=300, seconds=10):
    """Our edge (per-stream credit): 300 clients on endless downloads that read nothing. Each
    stream's first window (64 KiB) is reserved from the node's budget (16 MiB here): the first
    256 get streams, the rest a 503 with the reason. Then, for 10 s: no request to that node
    waits more than 1 s (a /metrics client every 0.5 s gets 200 or that 503), the tunnel is never
    paused or dropped, and what cloudstream holds for the node stays within the budget."""
    connects0 = int(h.metric(chain.edge, "edgestream_tunnel_connects_total"))
    rss0 = rss_kib(chain.cloud)
    stalled = []
    for _ in range(n):
        s = chain.api.connect()
        s.sendall(h.head("GET", "/stream", [("Host", "edge-1:10350")]))
        stalled.append(s)
    # Every stream opened or refused, every first window sent: the burst is over.
    seen, deadline = None, time.monotonic() + 60
    while time.monotonic() < deadline:
        now = (h.metric(chain.cloud, "cloudstream_budget_refusals_total"),
               h.metric(chain.cloud, "cloudstream_stream_bytes_total", 'direction="from_edge"'))
        if now == seen:
            break
        seen = now
        time.sleep(0.5)
    t0 = time.monotonic()
    worst, statuses = 0.0, {}
    while time.monotonic() - t0 < seconds:
        t = time.monotonic()
        status, _, body, s = chain.get("/metrics")
        s.close()
        took = time.monotonic() - t
        worst = max(worst, took)
        statuses[status] = statuses.get(status, 0) + 1
        if status == 503:
            check(b"do not read" in body, "503 without the reason: %r" % body[:300])
        else:
            check(status == 200, "metrics: status %d %r" % (status, body[:200]))
        time.sleep(max(0.0, 0.5 - took))
    refused = h.metric(chain.cloud, "cloudstream_budget_refusals_total")
    pauses = h.metric(chain.cloud, "cloudstream_flow_stalls_total", 'scope="tunnel"')
    peak = h.metric(chain.cloud, "cloudstream_buffered_bytes_peak")
    rss = rss_kib(chain.cloud)
    for s in stalled:
        s.close()
    print("     %d stalled clients: %d refused for the budget; then /metrics %r, slowest "
          "%.3f s; held at most %d KiB (budget 16384 KiB); %d tunnel pauses; RSS %d -> %d KiB"
          % (n, refused, statuses, worst, peak // 1024, pauses, rss0, rss), flush=True)
    check(worst < 1.0, "a request waited %.3f s" % worst)
    check(pauses == 0, "the tunnel was paused %d times" % pauses)
    check(int(h.metric(chain.edge, "edgestream_tunnel_connects_total")) == connects0,
          "the tunnel was dropped")
    check(refused > 0, "the node's budget was never reached: the test tests nothing")
    # The process budget also carries the 503 answers queued to the refused clients (no
    # stream, no window): a few KiB beside the node's 16 MiB of windows.
    check(peak <= (16 << 20) + (64 << 10),
          "cloudstream held %d bytes for the node, over its budget" % peak)


def edge_budget_refuses_streams():
    """The edge's own budget (--process-buffer-bytes 1MiB): an exec stream reserves its first
    window (64 KiB, an upload's; a logs or metrics stream's would be the quiet 4 KiB) and its
    output floor (4 KiB, the session), and its memory toward the cloud (8 KiB queue mark + 112
    KiB burst for a connection backend: one 64 KiB read, a record it completes and translation
    room; the relay; only a `logs -f` reserves that when needed): 5 streams fit, the 6th to
    20th are refused (ERROR limit: the cloud answers 503 with the reason), counted and logged
    once; when the streams end the budget is empty."""
    chain = Chain("es-budget", edge_extra=("--process-buffer-bytes", "1MiB",
                                           "--stream-first-window-bytes", "64KiB"))
    try:
        socks, statuses = [], []
        for _ in range(20):
            s = chain.api.connect()
            s.sendall(h.head("POST", "/exec/default/pod-a/ctr?command=greet&input=1",
                             [("Host", "edge-1:10350")] + UPGRADE_SPDY))
            status, hdrs, rest = h.read_head(s)
            if status != 101:
                body = h.read_body(s, hdrs, rest)
                check(status == 503 and b"memory budget spent" in body,
                      "refusal: %d %r" % (status, body[:300]))
            statuses.append(status)
            socks.append(s)
        check(statuses.count(101) == 5 and statuses.count(503) == 15,
              "statuses: %r" % statuses)
        m = h.metric(chain.edge, "edgestream_streams_refused_by_session_total", 'reason="budget"')
        check(m == 15, "refusals counted: %r" % m)
        check(h.metric(chain.edge, "edgestream_buffered_bytes") ==
              5 * (65536 + 4096 + 8192 + 65536 + 49152), "budget in use")
        for s in socks:
            s.close()
        deadline = time.monotonic() + 5
        while h.metric(chain.edge, "edgestream_buffered_bytes") != 0:
            check(time.monotonic() < deadline, "the edge's budget was not given back")
            time.sleep(0.05)
        with open(chain.edge.logpath, "rb") as f:
            warns = f.read().count(b"a stream from the cloud refused")
        check(warns == 1, "refusal logged %d times, want once" % warns)
    finally:
        chain.close(False)


def edge_budget_holds_stalled_downloads(n=60):
    """Endless downloads nobody reads, against a 4 MiB edge budget: the cloud grants each
    stream credit, but what the edge queues toward the cloud beyond a stream's floor must fit
    the budget, so the budget's peak never passes its limit (before: the queue was charged by
    force within the cloud's credit, and the peak passed the limit as soon as the tunnel fell
    behind); the streams the budget cannot take are refused, counted; everything is given back
    when the clients go."""
    budget = 4 << 20
    chain = Chain("es-stalled", edge_extra=("--process-buffer-bytes", "4MiB"))
    try:
        socks = []
        for _ in range(n):
            s = chain.api.connect()
            s.sendall(h.head("GET", "/stream", [("Host", "edge-1:10350")]))
            socks.append(s)
        # Every stream admitted or refused and the admitted ones' credit used up: the gauge
        # settles.
        seen, deadline = None, time.monotonic() + 60
        while time.monotonic() < deadline:
            now = (h.metric(chain.edge, "edgestream_buffered_bytes_peak"),
                   h.metric(chain.cloud, "cloudstream_budget_refusals_total"),
                   h.metric(chain.cloud, "cloudstream_stream_bytes_total", 'direction="from_edge"'))
            if now == seen:
                break
            seen = now
            time.sleep(1.0)
        peak = h.metric(chain.edge, "edgestream_buffered_bytes_peak")
        refused = h.metric(chain.edge, "edgestream_streams_refused_by_session_total",
                           'reason="budget"')
        print("     %d stalled downloads: %d refused for the budget; the edge's budget peaked at "
              "%d of %d bytes" % (n, refused, peak, budget), flush=True)
        check(refused > 0, "no stream was refused: the budget was never full, the test tests "
              "nothing")
        check(peak <= budget, "the edge's budget peaked at %d bytes, over its %d" % (peak, budget))
        for s in socks:
            s.close()
        deadline = time.monotonic() + 10
        while h.metric(chain.edge, "edgestream_buffered_bytes") != 0:
            check(time.monotonic() < deadline, "the edge's budget was not given back")
            time.sleep(0.1)
    finally:
        chain.close(False)


def group_stall():
    chain = Chain("es-stall", cloud_extra=("--session-buffer-bytes", "16MiB"))
    rc = 1
    try:
        rc = h.run(h.named("stall", [
            ("many_stalled_clients", lambda: many_stalled_clients(chain)),
            ("metrics_after", lambda: cst.metrics_same_as_direct(chain)),
            ("edge_budget_refuses_streams", edge_budget_refuses_streams),
            ("edge_budget_holds_stalled_downloads", edge_budget_holds_stalled_downloads),
        ]))
        return rc
    finally:
        chain.close(rc != 0)


# ---- base: an unmodified KubeEdge cloud ----------------------------------------------------

class BaseChain:
    def __init__(self, tag="es-base", kubelet_extra=()):
        self.env = h.Env(tag, nodes=("edge-1",))
        try:
            self.kubelet = h.start_kubelet(self.env, extra=kubelet_extra)
            self.cloud = KubeEdgeCloud(self.env.path("cloudstream-tunnel.crt"),
                                       self.env.path("cloudstream-tunnel.key"),
                                       self.env.path("tunnel-ca.crt")).start()
            self.edge = h.start_edgestream(
                self.env, self.cloud, self.kubelet,
                extra=("--stall-timeout", "500ms", "--dead-peer-timeout", "6s",
                       "--ping-interval", "2s"))
            self.cloud.wait_session("edge-1")
        except Exception:
            self.env.close(keep=True)
            raise

    def close(self):
        self.cloud.stop()
        self.env.close()


def base_handshake(c):
    hdrs = c.cloud.upgrade_headers["edge-1"]
    check(hdrs.get("sessionhostnameoverride") == "edge-1", "headers: %r" % hdrs)
    check("origin" not in hdrs, "an Origin header went to a Go server: %r" % hdrs)
    check(tp.EXT_HEADER.lower() in hdrs, "our offer is missing")  # offered, never echoed


def base_exec(c):
    st = c.cloud.open(tp.EXEC, "/exec/default/pod-a/ctr", "command=greet&input=1",
                      {"Connection": ["Upgrade"], "Upgrade": ["SPDY/3.1"],
                       "X-Stream-Protocol-Version": ["v4.channel.k8s.io"]}, method="POST")
    buf = st.read_until(lambda b: b"hello from default/pod-a/ctr\n" in b)
    check(buf.startswith(b"HTTP/1.1 101 "), "exec: %r" % buf[:60])
    payload = bytes(range(256)) * 100
    st.send(payload)
    st.read_until(lambda b: b.endswith(payload))
    st.remove()


def base_logs_body_only(c):
    st = c.cloud.open(tp.LOGS, "/containerLogs/default/pod-a/ctr", "tailLines=4",
                      {"Accept": ["*/*"]})
    body = st.read_all()
    check(body == b"line 1\nline 2\nline 3\nline 4\n", "logs: %r" % body)


def base_metrics_body_only(c):
    st = c.cloud.open(tp.METRIC, "/metrics", "", {})
    body = st.read_all()
    _, _, direct = cst.kubelet_direct(c.env, c.kubelet, "/metrics")
    check(body == direct, "metrics: %d bytes vs %d" % (len(body), len(direct)))


def base_expect_continue_body_only(c, n=4 << 20):
    """Base protocol: a METRIC PUT with "Expect: 100-continue" to a backend that answers 100
    Continue and 103 Early Hints first. A KubeEdge cloud takes the DATA as the body alone (its
    edge's HTTP client eats interim heads), so the edge drops them: the body is exactly the
    final answer's."""
    st = c.cloud.open(tp.METRIC, "/upload", "hints=2",
                      {"Expect": ["100-continue"], "Content-Length": [str(n)]}, method="PUT")
    payload = os.urandom(n)
    for off in range(0, n, 65536):
        st.send(payload[off:off + 65536])
    body = st.read_all(timeout=30)
    check(body == ("%s %d\n" % (h.sha256(payload), n)).encode(),
          "body-only upload answer: %r" % body[:300])


def base_refusal(c):
    """A path outside the allow-list: an HTTP error on upgrades, a bare REMOVE otherwise."""
    st = c.cloud.open(tp.EXEC, "/ports/22/", "", {"Connection": ["Upgrade"],
                                                   "Upgrade": ["SPDY/3.1"]}, method="POST")
    body = st.read_all()
    check(body.startswith(b"HTTP/1.1 403 ") and b"allow-list" in body, "refusal: %r" % body)
    st = c.cloud.open(tp.METRIC, "/ports/22/metrics", "", {})
    check(st.read_all() == b"", "refusal: a body for a base METRIC")


def base_unknown_ids_and_binary(c):
    c.cloud.send(999, tp.DATA, b"for nobody")      # ignored, like KubeEdge does
    c.cloud.raw_binary_frame(tp.encode(998, tp.REMOVE))  # BINARY accepted too
    base_metrics_body_only(c)


EXEC_SPDY = {"Connection": ["Upgrade"], "Upgrade": ["SPDY/3.1"],
             "X-Stream-Protocol-Version": ["v4.channel.k8s.io"]}


def proc_cpu_seconds(p):
    with open("/proc/%d/stat" % p.pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def edge_removes(c):
    """edgestream_tunnel_removes_total by kind."""
    _, text = h.admin_get(c.edge, "/metrics")
    out = {"answered": 0, "crossed": 0, "repeated": 0}
    out.update((k, int(v)) for k, v in re.findall(
        r'^edgestream_tunnel_removes_total\{kind="(\w+)"\} (\d+)$', text, re.M))
    return out


def quiet_after(c, streams, what):
    """Once the loops ended: every stream got exactly one REMOVE from the edge, the cloud sends
    no more, and edgestream spends no CPU (a second of it, measured in /proc) once it has read
    the REMOVEs already on their way (a loop that ran long, as while the cloud did not read,
    leaves thousands in the socket buffers)."""
    sent = [st.cloud_removes for st in streams]
    seen, deadline = None, time.monotonic() + 10
    while time.monotonic() < deadline:
        now = edge_removes(c)["repeated"]
        if now == seen:
            break
        seen = now
        time.sleep(0.2)
    cpu0 = proc_cpu_seconds(c.edge)
    time.sleep(1.0)
    cpu = proc_cpu_seconds(c.edge) - cpu0
    print("     %s: edgestream used %.3f s of CPU in the second after" % (what, cpu), flush=True)
    for st, n in zip(streams, sent):
        check(st.edge_removes == 1, "%s: stream %d got %d REMOVEs from the edge, want 1"
              % (what, st.cid, st.edge_removes))
        check(st.cloud_removes == n, "%s: stream %d: the cloud still sends REMOVE (%d -> %d)"
              % (what, st.cid, n, st.cloud_removes))
    check(cpu <= 0.05, "%s: edgestream used %.3f s of CPU in the second after" % (what, cpu))


def base_remove_loop_client_killed(c):
    """kubectl exec killed: KubeEdge's cloud loops REMOVE until the edge answers; we answer
    once, within 100 ms, and then all is quiet."""
    before = edge_removes(c)
    st = c.cloud.open(tp.EXEC, "/exec/default/pod-a/ctr", "command=greet&input=1", EXEC_SPDY,
                      method="POST")
    st.read_until(lambda b: b"hello from default/pod-a/ctr\n" in b)
    st.apiserver_gone()
    took = st.wait_loop_end(5)
    print("     client killed: the loop stopped after %.1f ms, %d REMOVEs sent"
          % (took * 1000, st.cloud_removes), flush=True)
    check(took < 0.1, "client killed: the REMOVE loop ran %.3f s" % took)
    quiet_after(c, [st], "client killed")
    after = edge_removes(c)
    check(after["answered"] == before["answered"] + 1, "removes: %r -> %r" % (before, after))


def base_remove_loop_normal_end(c):
    """An exec that ends by itself, 25 times: the edge's REMOVE and the cloud's loop race (the
    cloud reads EOF from the apiserver once kubectl has the output); every loop stops within
    100 ms and every stream ends with exactly one REMOVE from the edge."""
    streams, took = [], []
    for _ in range(25):
        st = c.cloud.open(tp.EXEC, "/exec/default/pod-a/ctr", "command=greet-exit", EXEC_SPDY,
                          method="POST")
        st.read_until(lambda b: b"hello from default/pod-a/ctr\n" in b)
        st.apiserver_gone()
        took.append(st.wait_loop_end(5))
        streams.append(st)
    print("     normal end: loops stopped after %.1f ms at most, %d REMOVEs sent in all"
          % (max(took) * 1000, sum(st.cloud_removes for st in streams)), flush=True)
    check(max(took) < 0.1, "normal end: a REMOVE loop ran %.3f s" % max(took))
    quiet_after(c, streams, "normal end")


def base_remove_crossing(c):
    """The edge's REMOVE still queued (the tunnel toward the cloud full: the cloud does not
    read, another stream's output fills it) when the cloud's REMOVE arrives: the edge's goes
    as the answer, once, and the loop stops once the cloud reads again."""
    before = edge_removes(c)
    c.cloud.pause_reading()
    resumed = False
    try:
        bulk = c.cloud.open(tp.EXEC, "/exec/default/pod-a/ctr", "command=blast&n=%d" % (64 << 20),
                            EXEC_SPDY, method="POST")
        time.sleep(1.0)  # the tunnel's socket buffers fill up
        streams = []
        for _ in range(3):  # the backend's end must reach the edge first: give it time
            st = c.cloud.open(tp.EXEC, "/exec/default/pod-a/ctr", "command=greet-exit",
                              EXEC_SPDY, method="POST")
            time.sleep(0.5)
            st.apiserver_gone()
            time.sleep(0.2)
            streams.append(st)
            if edge_removes(c)["crossed"] > before["crossed"]:
                break
        c.cloud.resume_reading()
        resumed = True
        for st in streams:
            st.wait_loop_end(10)
        bulk.apiserver_gone()
        bulk.wait_loop_end(10)
    finally:
        if not resumed:
            c.cloud.resume_reading()
    after = edge_removes(c)
    print("     crossing: %r -> %r" % (before, after), flush=True)
    check(after["crossed"] > before["crossed"], "crossing: no REMOVE crossed ours")
    quiet_after(c, streams + [bulk], "crossing")


def base_unknown_remove(c):
    """A REMOVE for an ID the edge never knew is answered once, however often it comes."""
    before = edge_removes(c)
    for _ in range(5):
        c.cloud.send(4242, tp.REMOVE)
    deadline = time.monotonic() + 5
    while (4242, tp.REMOVE) not in c.cloud.unknown and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)
    got = c.cloud.unknown.count((4242, tp.REMOVE))
    check(got == 1, "unknown id: %d REMOVEs came back, want 1" % got)
    after = edge_removes(c)
    check(after["answered"] == before["answered"] + 1 and
          after["repeated"] == before["repeated"] + 4, "removes: %r -> %r" % (before, after))


def base_stalled_backend_is_cut(c):
    """The mirror on the edge: a backend that stops reading (exec command=stall) while the
    cloud uploads. The base protocol has no credit, so the edge pauses the tunnel for it; after
    --stall-timeout (500 ms here) the stream is cut (REMOVE to the cloud, counted), the tunnel
    lives on (--dead-peer-timeout 6s) and other requests are answered meanwhile in < 1 s."""
    _, text = h.admin_get(c.edge, "/metrics")
    cuts0 = int(re.search(r"^edgestream_stream_stall_cuts_total (\d+)$", text, re.M).group(1))
    connects0 = int(re.search(r"^edgestream_tunnel_connects_total (\d+)$", text, re.M).group(1))
    st = c.cloud.open(tp.EXEC, "/exec/default/pod-a/ctr", "command=stall", EXEC_SPDY,
                      method="POST")
    st.read_until(lambda b: b.startswith(b"HTTP/1.1 101 "))
    t0 = time.monotonic()

    def upload():
        for _ in range(512):  # up to 32 MiB, the kernel's buffers are several
            if st.removed.is_set():
                return
            try:
                st.send(b"x" * 65536)
            except Exception:  # noqa: BLE001 - the tunnel may be paused past send's timeout
                return
    threading.Thread(target=upload, daemon=True).start()
    worst = 0.0
    while not st.removed.is_set() and time.monotonic() - t0 < 10:
        t = time.monotonic()
        m = c.cloud.open(tp.METRIC, "/metrics", "", {})
        m.read_all(timeout=5)
        worst = max(worst, time.monotonic() - t)
        time.sleep(0.1)
    cut_after = time.monotonic() - t0
    check(st.removed.wait(10), "the stalled stream was never cut")
    _, text = h.admin_get(c.edge, "/metrics")
    cuts = int(re.search(r"^edgestream_stream_stall_cuts_total (\d+)$", text, re.M).group(1))
    connects = int(re.search(r"^edgestream_tunnel_connects_total (\d+)$", text, re.M).group(1))
    print("     stalled backend: cut after %.1f s, other requests %.3f s at most"
          % (cut_after, worst), flush=True)
    check(cuts == cuts0 + 1, "stall cuts %d -> %d" % (cuts0, cuts))
    check(connects == connects0, "the tunnel was dropped")
    check(worst < 1.0, "a request waited %.3f s" % worst)
    base_metrics_body_only(c)  # the tunnel still carries requests


def base_no_extension_sent(c):
    check(c.cloud.opcodes == {1}, "frames other than TEXT: %r" % c.cloud.opcodes)
    ext = [t for t in c.cloud.types if t >= 64]
    check(not ext, "extension messages to a base cloud: %r" % ext)


def group_base():
    c = BaseChain()
    try:
        return h.run(h.named("base", [
            ("handshake", lambda: base_handshake(c)),
            ("exec", lambda: base_exec(c)),
            ("logs_body_only", lambda: base_logs_body_only(c)),
            ("metrics_body_only", lambda: base_metrics_body_only(c)),
            ("expect_continue_body_only", lambda: base_expect_continue_body_only(c)),
            ("refusal", lambda: base_refusal(c)),
            ("unknown_ids_and_binary", lambda: base_unknown_ids_and_binary(c)),
            ("remove_loop_client_killed", lambda: base_remove_loop_client_killed(c)),
            ("remove_loop_normal_end", lambda: base_remove_loop_normal_end(c)),
            ("remove_crossing", lambda: base_remove_crossing(c)),
            ("unknown_remove", lambda: base_unknown_remove(c)),
            ("stalled_backend_is_cut", lambda: base_stalled_backend_is_cut(c)),
            ("no_extension_sent", lambda: base_no_extension_sent(c)),
        ]))
    finally:
        c.close()


# ---- ops ----------------------------------------------------------------------------------

def dial_delays(logpath):
    with open(logpath, "rb") as f:
        text = f.read().decode(errors="replace")
    return [int(x) for x in re.findall(r"next dial in (\d+) ms", text)]


def redial_with_backoff(env):
    kubelet = h.start_kubelet(env, name="kubelet-redial")
    cloud = h.start_cloudstream(env, name="cloud-redial")
    tport = cloud.ports["tunnel"]
    edge = h.start_edgestream(env, cloud, kubelet, name="edge-redial",
                              extra=["--backoff-initial", "200ms", "--backoff-max", "1600ms"])
    time.sleep(0.3)  # up for longer than a flap (backoff.h)
    cloud.kill()  # gone without a drain (a drain moves the edge: RECONNECT, ha_test.py)
    cloud.wait()
    time.sleep(4.5)
    delays = dial_delays(edge.logpath)
    check(len(delays) >= 4, "redial: delays %r" % delays)
    # The first redial after a tunnel that was up comes at once (failover to another replica
    # is not a backoff window); then the sequence from its start, equal jitter: the n-th
    # failure waits in [d/2, d], d = 200 * 2^(n-1) capped at 1600.
    for i, d in enumerate(delays):
        cap = min(200 * 2 ** (i - 1), 1600) if i else 0
        lo, hi = (0, 0) if i == 0 else (cap // 2, cap)
        check(lo <= d <= hi, "redial: delay %d = %d ms outside [%d, %d] (%r)"
              % (i, d, lo, hi, delays))
    check(len(set(delays)) > 1, "redial: no jitter %r" % delays)
    # The cloud comes back on the same port: the tunnel returns and carries new requests.
    cloud2 = h.start_cloudstream(env, ["--tunnel-listen", "127.0.0.1:%d" % tport],
                                 name="cloud-redial-2")
    api = h.Api(env, cloud2.ports["stream"])
    deadline = time.monotonic() + 10
    while True:
        st, _, body, s = api.request("GET", "/metrics", [("Host", "edge-1:10350")])
        s.close()
        if st == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    check(st == 200, "redial: after the cloud came back %d %r" % (st, body[:100]))
    for p in (edge, cloud2, kubelet):
        env.stop(p)


def refuses_cloud(env, name, extra, want, prefix=()):
    """edgestream must not bring the tunnel up; its log says why."""
    kubelet = h.start_kubelet(env, name="kubelet-" + name)
    cloud = h.start_cloudstream(env, name="cloud-" + name, extra=extra)
    try:
        h.start_edgestream(env, cloud, kubelet, name="edge-" + name, timeout=3,
                           extra=["--backoff-initial", "100ms"], prefix=prefix)
    except h.Fail:
        pass
    else:
        raise h.Fail("%s: the tunnel came up" % name)
    log = open(os.path.join(env.dir, "edge-%s.log" % name), "rb").read().decode(errors="replace")
    check(want in log, "%s: %r not in the log:\n%s" % (name, want, log[-1500:]))
    check(h.metric(cloud, "cloudstream_sessions") == 0, "%s: a session" % name)
    env.stop(cloud)
    env.stop(kubelet)


def cloud_cert_other_ca(env):
    env.mint("ca", "--out", env.path("rogue-ca"))
    env.mint("server", "--ca", env.path("rogue-ca"), "--out", env.path("rogue-cloud"),
             "--cn", "cloudstream", "--dns", "localhost", "--ip", "127.0.0.1")
    refuses_cloud(env, "other-ca", ["--tunnel-cert", env.path("rogue-cloud.crt"),
                                    "--tunnel-key", env.path("rogue-cloud.key")],
                  "unable to get local issuer certificate")
    # The same CA in the edge's system trust store (OpenSSL's default paths follow
    # SSL_CERT_FILE): the tunnel trusts --tunnel-ca alone, not the public CAs lws would add
    # to its own client context (Debian builds it with LWS_SSL_CLIENT_USE_OS_CA_CERTS).
    refuses_cloud(env, "system-ca", ["--tunnel-cert", env.path("rogue-cloud.crt"),
                                     "--tunnel-key", env.path("rogue-cloud.key")],
                  "unable to get local issuer certificate",
                  prefix=("env", "SSL_CERT_FILE=" + env.path("rogue-ca.crt"),
                          "SSL_CERT_DIR=/nonexistent"))


def cloud_cert_wrong_name(env):
    env.mint("server", "--ca", env.path("tunnel-ca"), "--out", env.path("misnamed-cloud"),
             "--cn", "cloudstream", "--dns", "cloud.elsewhere.test")
    refuses_cloud(env, "wrong-name", ["--tunnel-cert", env.path("misnamed-cloud.crt"),
                                      "--tunnel-key", env.path("misnamed-cloud.key")],
                  "hostname mismatch")


def cert_reload_and_sigterm(env):
    kubelet = h.start_kubelet(env, name="kubelet-reload")
    cloud = h.start_cloudstream(env, name="cloud-reload")
    edge = h.start_edgestream(env, cloud, kubelet, name="edge-reload")
    # Rotate the node certificate in place; SIGHUP makes edgestream look now.
    env.mint("client", "--ca", env.path("tunnel-ca"), "--out", env.path("node-edge-1"),
             "--node", "edge-1", "--force")
    edge.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 5
    while b"reloaded the tunnel certificate" not in open(edge.logpath, "rb").read():
        check(time.monotonic() < deadline, "reload: not in the log")
        time.sleep(0.05)
    st, text = h.admin_get(edge, "/metrics")
    check("edgestream_cert_reloads_total 1" in text, "reload: counter")
    check(env.stop(edge) == 0, "SIGTERM: exit status %s" % edge.returncode)
    env.stop(cloud)
    env.stop(kubelet)


def drain_on_sigterm(env):
    """SIGTERM drains (stream/drain.h): a new stream is refused with 503 "edgestream is shutting
    down" while a follow in flight keeps getting its lines; the edge exits 0 once that stream
    ends. A second SIGTERM stops at once; the drain timeout stops a stream that never ends."""
    kubelet = h.start_kubelet(env, name="kubelet-drain")
    cloud = h.start_cloudstream(env, name="cloud-drain")
    api = h.Api(env, cloud.ports["stream"])
    follow = "/containerLogs/default/pod-a/ctr?follow=true&tailLines=1&interval=0.1"

    def open_follow():
        s = api.connect()
        s.sendall(h.head("GET", follow, [("Host", "edge-1:10350")]))
        status, _, rest = h.read_head(s)
        check(status == 200, "follow: %d" % status)
        return s, rest

    def lines_after(s, n):
        got = b""
        deadline = time.monotonic() + 10
        while got.count(b"line ") < n:
            check(time.monotonic() < deadline, "follow stopped moving: %r" % got[-200:])
            got += s.recv(65536)
        return got

    for case in ("ends", "second", "deadline"):
        edge = h.start_edgestream(env, cloud, kubelet, name="edge-drain-" + case,
                                  extra=("--drain-timeout",
                                         "1500ms" if case == "deadline" else "20s"))
        s, _ = open_follow()
        t0 = time.monotonic()
        edge.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 5
        while b"draining 1 streams" not in open(edge.logpath, "rb").read():
            check(time.monotonic() < deadline, "%s: no drain in the log" % case)
            time.sleep(0.02)
        st, _, body, s2 = api.request("GET", "/healthz", [("Host", "edge-1:10350")])
        s2.close()
        check(st == 503 and b"edgestream is shutting down" in body,
              "%s: a new stream while draining: %d %r" % (case, st, body[:200]))
        lines_after(s, 5)  # the stream in flight goes on
        check(edge.poll() is None, "%s: exited while a stream was in flight" % case)
        if case == "ends":
            s.close()  # the last stream ends: the edge closes the tunnel and exits
        elif case == "second":
            edge.send_signal(signal.SIGTERM)
        rc = edge.wait(10)
        took = time.monotonic() - t0
        check(rc == 0, "%s: exit status %s" % (case, rc))
        if case == "deadline":
            check(1.4 < took < 6, "deadline: exited after %.2f s (drain timeout 1.5 s)" % took)
        else:
            check(took < 6, "%s: exited after %.2f s (drain timeout 20 s)" % (case, took))
        log = open(edge.logpath, "rb").read()
        want = {"ends": b"stopping: drained", "second": b"stopping: asked again while draining",
                "deadline": b"stopping: drain timeout"}[case]
        check(want in log, "%s: %r not in the log" % (case, want))
        s.close()
    env.stop(cloud)
    env.stop(kubelet)


def ctl_lists_sessions_and_streams(_env):
    """cloudstream-ctl over the admin port: with 3 nodes connected and 2 follows open it lists
    exactly those 3 sessions and those 2 streams, with the bytes each client really got."""
    env = h.Env("es-ctl", nodes=("edge-1", "edge-2", "edge-3"))
    try:
        kubelet = h.start_kubelet(env, name="kubelet-ctl")
        cloud = h.start_cloudstream(env, name="cloud-ctl")
        edges = {}
        for node in ("edge-1", "edge-2", "edge-3"):
            edges[node] = h.start_edgestream(env, cloud, kubelet, node=node)
        api = h.Api(env, cloud.ports["stream"])
        ctl = os.path.join(h.BIN, "cloudstream", "cloudstream-ctl")
        admin = "127.0.0.1:%d" % cloud.ports["admin"]

        def run_ctl(*args):
            r = subprocess.run([ctl, "--admin", admin] + list(args), capture_output=True,
                               text=True, timeout=10)
            check(r.returncode == 0, "ctl %r: %d %s" % (args, r.returncode, r.stderr))
            return r.stdout

        got = {}
        socks = []
        for node in ("edge-1", "edge-2"):
            s = api.connect()
            s.sendall(h.head("GET", "/containerLogs/default/pod-a/ctr?follow=true&tailLines=3"
                             "&interval=60", [("Host", "%s:10350" % node)]))
            data = b""
            while b"line 3\n" not in data:
                chunk = s.recv(65536)
                check(chunk, "%s: follow closed" % node)
                data += chunk
            got[node] = len(data)
            socks.append(s)
        rows = [ln.split("\t") for ln in run_ctl("--tsv", "sessions").splitlines()]
        check(rows[0][:2] == ["NODE", "PROTOCOL"], "sessions header %r" % rows[0])
        by_node = {r[0]: r for r in rows[1:]}
        check(sorted(by_node) == ["edge-1", "edge-2", "edge-3"], "sessions %r" % rows)
        for node, want in (("edge-1", "1"), ("edge-2", "1"), ("edge-3", "0")):
            check(by_node[node][1] == "extended" and by_node[node][5] == want,
                  "session %s: %r" % (node, by_node[node]))
        deadline = time.monotonic() + 5
        while True:  # the last bytes' accounting lands as the client's socket takes them
            rows = [ln.split("\t") for ln in run_ctl("--tsv", "streams").splitlines()]
            streams = {r[0]: r for r in rows[1:]}
            if all(n in streams and int(streams[n][8]) == got[n] for n in got):
                break
            check(time.monotonic() < deadline, "streams %r, clients got %r" % (rows, got))
            time.sleep(0.05)
        check(len(rows) == 3 and sorted(streams) == ["edge-1", "edge-2"], "streams %r" % rows)
        for node, r in streams.items():
            check(r[2:6] == ["logs", "GET", "/containerLogs/default/pod-a/ctr",
                             "kube-apiserver-kubelet-client"] and r[7] == "0",
                  "stream of %s: %r" % (node, r))
        one = run_ctl("streams", "edge-2").splitlines()
        check(len(one) == 2 and one[1].startswith("edge-2 "), "streams edge-2: %r" % one)
        table = run_ctl("sessions")
        check(re.search(r"^edge-3 +extended ", table, re.M), "table: %r" % table)
        # Last RTT per session: the kernel's smoothed RTT of the tunnel (loopback: under 50 ms).
        rows = [ln.split("\t") for ln in run_ctl("--tsv", "sessions").splitlines()]
        check(rows[0][9] == "RTT_MS", "sessions header %r" % rows[0])
        rtts = {r[0]: float(r[9]) for r in rows[1:]}
        check(all(0 <= v < 50 for v in rtts.values()), "rtt %r" % rtts)
        # The edges' own listings: same shape, and the stream ids the cloud listed.
        for node, edge in edges.items():
            st, text = h.admin_get(edge, "/tunnels")
            tl = [ln.split("\t") for ln in text.splitlines()]
            check(st == 200 and tl[0][:2] == ["CLOUD", "PROTOCOL"] and len(tl) == 2,
                  "%s /tunnels %d %r" % (node, st, text))
            want = "1" if node in got else "0"
            check(tl[1][1] == "extended" and tl[1][5] == want and float(tl[1][9]) < 50 and
                  int(tl[1][6]) > 0 and int(tl[1][7]) > 0, "%s tunnel %r" % (node, tl[1]))
            st, text = h.admin_get(edge, "/streams")
            sl = [ln.split("\t") for ln in text.splitlines()]
            check(st == 200 and sl[0][:3] == ["NODE", "STREAM", "KIND"],
                  "%s /streams %d %r" % (node, st, text))
            if node in got:
                check(len(sl) == 2 and sl[1][0] == node and sl[1][1] == streams[node][1] and
                      sl[1][2] == "logs" and int(sl[1][5]) > 0,
                      "%s edge streams %r, cloud's %r" % (node, sl, streams[node]))
            else:
                check(len(sl) == 1, "%s edge streams %r" % (node, sl))
            st, _ = h.admin_get(edge, "/nodes/x/close")
            check(st == 404, "edge admin: an unknown action is 404, got %d" % st)
            # cloudstream-ctl prints the edge's listings too, ?node= as on the cloud
            eadm = "127.0.0.1:%d" % edge.ports["admin"]
            r = subprocess.run([ctl, "--admin", eadm, "tunnels"], capture_output=True,
                               text=True, timeout=10)
            check(r.returncode == 0 and re.search(r"^127\.0\.0\.1:\d+/v1/kubeedge/connect +"
                                                  r"extended ", r.stdout, re.M),
                  "ctl tunnels at %s: %r" % (node, r))
            for who, want in ((node, len(sl)), ("edge-9", 1)):
                r = subprocess.run([ctl, "--admin", eadm, "--tsv", "streams", who],
                                   capture_output=True, text=True, timeout=10)
                check(r.returncode == 0 and len(r.stdout.splitlines()) == want,
                      "ctl streams %s at %s: %r" % (who, node, r))
        # Latency histograms: one answer per follow on each side, and the process metrics.
        st, text = h.admin_get(cloud, "/metrics")
        cloud_text = text
        check('cloudstream_request_ttfb_seconds_count{kind="logs"} 2\n' in text and
              'cloudstream_request_ttfb_seconds_bucket{kind="logs",le="+Inf"} 2\n' in text,
              "cloud ttfb: %r" % re.findall(r"cloudstream_request_ttfb.*logs.*", text))
        for name in ("process_cpu_seconds_total", "process_resident_memory_bytes",
                     "process_open_fds", "process_max_fds", "process_start_time_seconds"):
            m = re.search(r"^%s ([0-9.]+)$" % name, text, re.M)
            check(m and float(m.group(1)) > 0, "cloud %s: %r" % (name, m))
        start = float(re.search(r"^process_start_time_seconds (\S+)$", text, re.M).group(1))
        check(time.time() - 600 < start <= time.time() + 1, "start time %r" % start)
        for node, edge in edges.items():
            st, text = h.admin_get(edge, "/metrics")
            n = 1 if node in got else 0
            check('edgestream_request_ttfb_seconds_count{kind="logs"} %d\n' % n in text and
                  re.search(r"^process_open_fds [1-9]", text, re.M),
                  "%s ttfb: %r" % (node, re.findall(r"edgestream_request_ttfb.*logs.*", text)))
        print("     rtt ms %r; the cloud's logs TTFB reached 2 at le=%r" % (
            rtts, re.findall(r'ttfb_seconds_bucket\{kind="logs",le="([0-9.+Inf]+)"\} 2',
                             cloud_text)[:1]))
        bad = subprocess.run([ctl, "--admin", admin, "streams", "Bad/Name"],
                             capture_output=True, text=True, timeout=10)
        check(bad.returncode == 2 and "not a node name" in bad.stderr, "bad name: %r" % (bad,))
        down = subprocess.run([ctl, "--admin", "127.0.0.1:1", "sessions"], capture_output=True,
                              text=True, timeout=10)
        check(down.returncode == 1 and "cannot ask" in down.stderr, "no cloud: %r" % (down,))
        for s in socks:
            s.close()
    finally:
        env.close()


def embedding_example(env):
    """The example program embeds the library (both ways of running it) and carries a request;
    its hooks and the host's signals (edgestream.h, "Process-wide state"): the host's own
    SIGPIPE handler stays installed, a SIGPIPE raised on a library thread never reaches it, the
    log hook gets the library's lines, the certificate hook reports the certificate in use at
    start, a rotated pair taken after edgestream_reload, and a pair that does not match refused
    (the previous one stays)."""
    kubelet = h.start_kubelet(env, name="kubelet-embed")
    cloud = h.start_cloudstream(env, name="cloud-embed")
    api = h.Api(env, cloud.ports["stream"])
    for drive in ("thread", "host"):
        # the agent's own copies of the node's files, which it rotates
        crt, key = env.path("embed-%s.crt" % drive), env.path("embed-%s.key" % drive)
        shutil.copy(env.path("node-edge-1.crt"), crt)
        shutil.copy(env.path("node-edge-1.key"), key)
        argv = [os.path.join(h.BIN, "edgestream", "edgestream-embed-example"), "--drive", drive,
                "--provoke-sigpipe",
                "cloud-url=wss://127.0.0.1:%d/v1/kubeedge/connect" % cloud.ports["tunnel"],
                "cloud-server-name=localhost",
                "tunnel-cert=" + crt, "tunnel-key=" + key,
                "tunnel-ca=" + env.path("tunnel-ca.crt"),
                "kubelet-url=https://127.0.0.1:%d" % kubelet.port,
                "kubelet-cert=" + env.path("edgestream-kubelet-client.crt"),
                "kubelet-key=" + env.path("edgestream-kubelet-client.key"),
                "kubelet-ca=" + env.path("kubelet-ca.crt"), "cert-check-interval=1h"]
        errpath = env.path("embed-%s.stderr" % drive)
        errf = open(errpath, "wb")
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=errf,
                             preexec_fn=h._die_with_parent)
        lines = []

        def until(prefix):
            while True:
                line = p.stdout.readline().decode()
                check(line, "embed %s: no %r in %r" % (drive, prefix, lines))
                lines.append(line.rstrip("\n"))
                if line.startswith(prefix):
                    return line.rstrip("\n")
        try:
            check(until("sigpipe disposition=") == "sigpipe disposition=kept",
                  "embed %s: the host's SIGPIPE handler was replaced: %r" % (drive, lines))
            first = until("certificate ")
            check(re.fullmatch(r"certificate result=0 not_before=\d+ not_after=(\d+) path=%s"
                               % re.escape(crt), first), "embed %s: %r" % (drive, first))
            check(until("connected ").startswith("connected node=edge-1 protocol=extended"),
                  "embed %s: %r" % (drive, lines))
            check(until("provoked sigpipe ") == "provoked sigpipe write=-1 errno=Broken pipe",
                  "embed %s: %r" % (drive, lines))
            st, _, body, s = api.request("GET", "/containerLogs/default/pod-a/ctr?tailLines=3",
                                         [("Host", "edge-1:10350")])
            s.close()
            check(st == 200 and body == b"line 1\nline 2\nline 3\n", "embed: %d %r" % (st, body))
            # the agent rotates the pair: a new one is taken ...
            env.mint("client", "--ca", env.path("tunnel-ca"), "--out",
                     env.path("embed-new-%s" % drive), "--node", "edge-1")
            for src, dst in ((env.path("embed-new-%s.crt" % drive), crt),
                             (env.path("embed-new-%s.key" % drive), key)):
                shutil.copy(src, dst + ".tmp")
                os.replace(dst + ".tmp", dst)
            p.send_signal(signal.SIGHUP)
            ok = until("certificate ")
            check(re.fullmatch(r"certificate result=0 not_before=\d+ not_after=\d+ path=.*", ok),
                  "embed %s: rotated: %r" % (drive, ok))
            # ... a key that does not match its certificate is not, and says why
            shutil.copy(env.path("node-edge-2.key") if os.path.exists(env.path("node-edge-2.key"))
                        else env.path("edgestream-kubelet-client.key"), key + ".tmp")
            os.replace(key + ".tmp", key)
            p.send_signal(signal.SIGHUP)
            bad = until("certificate ")
            check(re.fullmatch(r"certificate result=-\d+ not_before=\d+ not_after=\d+ path=\S+ "
                               r"reason=.+", bad), "embed %s: mismatched pair: %r" % (drive, bad))
            p.send_signal(signal.SIGTERM)
            out = p.communicate(timeout=10)[0].decode()
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            errf.close()
        check(p.returncode == 0, "embed %s: exit %s" % (drive, p.returncode))
        m = re.search(r"stopped connects=1 streams=(\d+)", out)
        check(m and int(m.group(1)) >= 1, "embed %s: %r" % (drive, out))
        m = re.search(r"hooks log_lines=(\d+) cert_events=(\d+) sigpipe_handler_calls=(\d+)", out)
        check(m and int(m.group(1)) > 0 and m.group(2) == "3" and m.group(3) == "0",
              "embed %s: hooks %r" % (drive, out))
        with open(errpath, errors="replace") as f:
            err = f.read()
        check(re.search(r"^edgestream: \S+ info  .*edgestream 0\.1\.0: node edge-1", err, re.M) and
              re.search(r"^edgestream: .*do not load yet", err, re.M),
              "embed %s: the log hook's lines on the agent's stderr:\n%s" % (drive, err[-2000:]))
        print("     embed %s: %s log lines through the hook; %s; %s" % (
            drive, m.group(1), first, bad.split(" reason=")[1][:80]))
    env.stop(cloud)
    env.stop(kubelet)


def dead_peer(env):
    """A cloud that stops answering (SIGSTOP: the TCP connection stays, nothing comes back) is
    detected by the pings within the dead-peer timeout, and the edge redials."""
    kubelet = h.start_kubelet(env, name="kubelet-dead")
    cloud = h.start_cloudstream(env, name="cloud-dead")
    edge = h.start_edgestream(env, cloud, kubelet, name="edge-dead",
                              extra=["--ping-interval", "200ms", "--dead-peer-timeout", "1s",
                                     "--backoff-initial", "100ms"])
    cloud.send_signal(signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 6
        while b"(dead peer)" not in open(edge.logpath, "rb").read():
            check(time.monotonic() < deadline, "dead peer not detected:\n" + env.tail(edge))
            time.sleep(0.05)
    finally:
        cloud.send_signal(signal.SIGCONT)
    api = h.Api(env, cloud.ports["stream"])
    deadline = time.monotonic() + 10
    while True:  # the redial lands on the same (resumed) cloud
        st, _, body, s = api.request("GET", "/healthz", [("Host", "edge-1:10350")])
        s.close()
        if st == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    check(st == 200, "after the dead peer: %d %r" % (st, body[:100]))
    for p in (edge, cloud, kubelet):
        env.stop(p)


def coalesced_pongs_keep_tunnel(env, seconds=9.0):
    """The edge offers 2/3 of its dead-peer timeout as pong-within (PROTOCOL.md §5.1), and the
    cloud answers its PINGs only that often: pinging every 300 ms with a 4 s dead-peer
    timeout, the quiet tunnel stays up (no dead peer, no second tunnel) and requests pass."""
    kubelet = h.start_kubelet(env, name="kubelet-coalesce")
    cloud = h.start_cloudstream(env, name="cloud-coalesce")
    edge = h.start_edgestream(env, cloud, kubelet, name="edge-coalesce",
                              extra=["--ping-interval", "300ms", "--dead-peer-timeout", "4s"])
    try:
        time.sleep(seconds)
        log = open(edge.logpath, "rb").read()
        ups = log.count(b"tunnel up to")
        check(b"(dead peer)" not in log and ups == 1,
              "%d tunnels, dead peer %s:\n%s" % (ups, b"(dead peer)" in log, env.tail(edge)))
        api = h.Api(env, cloud.ports["stream"])
        st, _, body, sk = api.request("GET", "/healthz", [("Host", "edge-1:10350")])
        sk.close()
        check(st == 200, "after %.0f quiet seconds: %d %r" % (seconds, st, body[:100]))
        print("     %.0f s quiet at a 300 ms ping, 4 s dead-peer timeout: one tunnel, no dead peer"
              % seconds)
    finally:
        for p in (edge, cloud, kubelet):
            env.stop(p)


def backend_handshake_timeout(env):
    """A "kubelet" that accepts TCP and never answers TLS: a 504 after the handshake timeout."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    cloud = h.start_cloudstream(env, name="cloud-silent")

    class Silent:
        port = silent.getsockname()[1]
    edge = h.start_edgestream(env, cloud, Silent, name="edge-silent",
                              extra=["--backend-handshake-timeout", "300ms"])
    api = h.Api(env, cloud.ports["stream"])
    t0 = time.monotonic()
    st, _, body, s = api.request("GET", "/metrics", [("Host", "edge-1:10350")])
    s.close()
    took = time.monotonic() - t0
    silent.close()
    check(st == 504 and b"TLS handshake timed out" in body, "silent kubelet: %d %r" % (st, body))
    check(took < 3, "silent kubelet: answered after %.1f s" % took)
    env.stop(edge)
    env.stop(cloud)


def start_tls_front(env, backend_port, name):
    """Debian's socat as a TLS terminator in front of a plain-HTTP kubelet stand-in, the way a
    kubelet behind an OpenSSL-based front would look: client certificates required (verify=1)
    and no session id context, so OpenSSL answers every attempt to resume a session with an
    internal_error alert ("session id context uninitialized"). Ready once a TLS handshake with
    the kubelet client certificate works (a probe that does not offer a session)."""
    port = h.free_port()
    argv = ["socat", "-d", "-d",
            "OPENSSL-LISTEN:%d,bind=127.0.0.1,reuseaddr,fork,cert=%s,key=%s,cafile=%s,verify=1"
            % (port, env.path("kubelet.crt"), env.path("kubelet.key"),
               env.path("kubelet-ca.crt")),
            "TCP:127.0.0.1:%d" % backend_port]
    log = open(os.path.join(env.dir, name + ".log"), "wb")
    p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                         preexec_fn=h._die_with_parent)
    p.name, p.logpath, p.port = name, log.name, port
    env.procs.append(p)
    ctx = ssl.create_default_context(cafile=env.path("kubelet-ca.crt"))
    ctx.check_hostname = False
    ctx.load_cert_chain(env.path("edgestream-kubelet-client.crt"),
                        env.path("edgestream-kubelet-client.key"))
    deadline = time.monotonic() + 10
    while True:
        try:
            with ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=5)):
                return p
        except OSError:
            check(p.poll() is None, "socat exited:\n" + env.tail(p))
            check(time.monotonic() < deadline, "socat not listening:\n" + env.tail(p))
            time.sleep(0.05)


def kubelet_refuses_resumption(env):
    """A kubelet behind a TLS front that refuses session resumption with an internal_error
    alert: the first new kubelet connection that offers the kept session fails its handshake,
    edgestream sends the request again on a new connection with a full handshake, counts it,
    and offers no session to that kubelet again. 100 GETs in a row (every fourth one makes the
    kubelet close its connection, so the next is served by a new TLS connection; some on new
    apiserver connections, some on one kept alive) all succeed, byte-exact."""
    ready = os.path.join(env.dir, "kubelet-plain.ready")
    kubelet, text = env.start("kubelet-plain", [
        h.PY, os.path.join(h.PEERS, "fake_kubelet.py"), "--listen", "127.0.0.1:0",
        "--ready-file", ready], ready)
    front = start_tls_front(env, int(text.strip()), "socat-front")
    cloud = h.start_cloudstream(env, name="cloud-resume")
    edge = h.start_edgestream(env, cloud, front, name="edge-resume")
    api = h.Api(env, cloud.ports["stream"])
    blob = b"".join(fake_kubelet.body_chunks(70000, 5))
    cases = [("/metrics", fake_kubelet.METRICS), ("/healthz", b"ok"),
             ("/bytes?n=70000&seed=5", blob), ("/pods", b'{"kind":"pods"}'),
             ("/containerLogs/default/pod-a/ctr?tailLines=3", b"line 1\nline 2\nline 3\n")]
    failed = []
    s = None
    for i in range(100):
        closes = i % 4 == 3
        target, want = ("/conn?close=1", None) if closes else cases[i % len(cases)]
        if i % 3 == 0 and s is not None:  # now and then a new apiserver connection
            s.close()
            s = None
        try:
            st, hdrs, body, s = chain_get(api, target, s)
        except (OSError, h.Fail) as e:
            failed.append((i, target, repr(e)))
            s = None
            continue
        ok = st == 200 and (body == want if want is not None else body.isdigit())
        if not ok:
            failed.append((i, target, "%d %r" % (st, body[:200])))
        if not ok or hdrs.get("connection") == "close":
            s.close()
            s = None
    if s is not None:
        s.close()
    check(not failed, "%d of 100 requests failed, first %r" % (len(failed), failed[:3]))
    # Then four at once, four times: new kubelet connections beside the kept one, which would
    # each offer a session if resumption were still on.
    for _ in range(4):
        results = [None] * 4

        def one(k):
            try:
                st, _, body, s = chain_get(api, "/bytes?n=70000&seed=5", None)
                s.close()
                results[k] = (st, body == blob)
            except (OSError, h.Fail) as e:
                results[k] = repr(e)
        threads = [threading.Thread(target=one, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        check(results == [(200, True)] * 4, "at once: %r" % results)
    st, metrics = h.admin_get(edge, "/metrics")
    m = re.search(r"^edgestream_kubelet_tls_resumption_refused_total (\d+)$", metrics, re.M)
    check(m and int(m.group(1)) == 1, "resumption refused: %r" % (m and m.group(0)))
    check("edgestream_backend_failures_total 0\n" in metrics, "backend failures counted")
    # socat saw exactly one resumption attempt, and more than 25 TLS connections (the probe,
    # one after each kubelet close, some for the requests at once): every later one was a full
    # handshake.
    socat_log = open(front.logpath, "rb").read().decode(errors="replace")
    refused = socat_log.count("session id context uninitialized")
    accepted = socat_log.count("accepting connection from")
    check(refused == 1, "socat refused %d resumptions" % refused)
    check(accepted > 25, "only %d TLS connections to the front" % accepted)
    edge_log = open(edge.logpath, "rb").read().decode(errors="replace")
    warns = [ln for ln in edge_log.splitlines() if "refused to resume" in ln]
    check(len(warns) == 1 and " warn " in warns[0] and "alert internal error" in warns[0],
          "the warning: %r" % warns)
    check(env.stop(edge) == 0, "edgestream exit status %s" % edge.returncode)
    for p in (cloud, front, kubelet):
        env.stop(p)


def chain_get(api, target, sock):
    return api.request("GET", target, [("Host", "edge-1:10350")], sock=sock)


def bad_config(env):
    exe = os.path.join(h.BIN, "edgestream", "edgestream")
    r = subprocess.run([exe, "--tunnel-cert", env.path("node-edge-1.crt")],
                       capture_output=True, timeout=10)
    check(r.returncode == 2 and b"cloud-url is required" in r.stderr, "no url: %r" % r.stderr)
    r = subprocess.run([exe, "--cloud-url", "wss://x:1/", "--tunnel-cert",
                        env.path("node-edge-1.crt"), "--tunnel-key", env.path("kubelet.key"),
                        "--tunnel-ca", env.path("tunnel-ca.crt")], capture_output=True, timeout=10)
    check(r.returncode == 2 and b"does not match" in r.stderr, "key mismatch: %r" % r.stderr)
    r = subprocess.run([exe, "--local-port", "ssh"], capture_output=True, timeout=10)
    check(r.returncode == 2, "bad allow-list entry accepted")
    # An admin address this host does not have: a start-up error, not a daemon without it.
    r = subprocess.run([exe, "--cloud-url", "wss://127.0.0.1:1/", "--cloud-server-name",
                        "localhost", "--tunnel-cert", env.path("node-edge-1.crt"),
                        "--tunnel-key", env.path("node-edge-1.key"),
                        "--tunnel-ca", env.path("tunnel-ca.crt"), "--kubelet-url", "",
                        "--admin-listen", "192.0.2.1:10354", "--sandbox", "off"],
                       capture_output=True, timeout=10)
    check(r.returncode == 2 and b"admin-listen 192.0.2.1:10354: cannot listen there" in r.stderr,
          "admin address not on the host: %d %r" % (r.returncode, r.stderr[-300:]))
    # --cloud-url lists: an empty entry, a wrong scheme inside the list, more than 8 entries.
    base = ["--cloud-server-name", "localhost", "--tunnel-cert", env.path("node-edge-1.crt"),
            "--tunnel-key", env.path("node-edge-1.key"), "--tunnel-ca", env.path("tunnel-ca.crt"),
            "--kubelet-url", "", "--check-config"]
    for urls, want in (("wss://a:1/,,wss://b:1/", b"an empty or overlong entry"),
                       ("wss://a:1/, https://b:1/", b"cloud-url https://b:1/: expected wss://"),
                       (",".join(["wss://a:1/"] * 9), b"cloud-url: more than 8 URLs")):
        r = subprocess.run([exe, "--cloud-url", urls] + base, capture_output=True, timeout=10)
        check(r.returncode == 2 and want in r.stderr, "--cloud-url %r: %d %r" % (
            urls, r.returncode, r.stderr[-300:]))
    r = subprocess.run([exe, "--cloud-url", " wss://a:1/x , wss://b:2/y "] + base,
                       capture_output=True, timeout=10)
    check(r.returncode == 0, "a list with spaces: %d %r" % (r.returncode, r.stderr[-300:]))


def refusal_reason_logged(env):
    """A cloudstream that refuses the tunnel says why (X-Cloudstream-Refusal, lws gives a failed
    client the answer's headers, not its body) and edgestream logs it, not just "not 101"."""
    deny = os.path.join(env.dir, "deny-reason.txt")
    with open(deny, "w") as f:
        f.write("node edge-1\n")
    cloud = h.start_cloudstream(env, ["--deny-list", deny], name="cloud-refusal")
    exe = os.path.join(h.BIN, "edgestream", "edgestream")
    log = os.path.join(env.dir, "edge-refusal.log")
    with open(log, "wb") as out:
        p = subprocess.Popen([exe, "--cloud-url",
                              "wss://127.0.0.1:%d/v1/kubeedge/connect" % cloud.ports["tunnel"],
                              "--cloud-server-name", "localhost",
                              "--tunnel-cert", env.path("node-edge-1.crt"),
                              "--tunnel-key", env.path("node-edge-1.key"),
                              "--tunnel-ca", env.path("tunnel-ca.crt"), "--kubelet-url", "",
                              "--admin-listen", "", "--sandbox", "off"],
                             stdout=out, stderr=subprocess.STDOUT, preexec_fn=h._die_with_parent)
    try:
        deadline = time.monotonic() + 10
        want = b"the cloud refused the tunnel (403): denied: node edge-1"
        while want not in open(log, "rb").read():
            check(time.monotonic() < deadline and p.poll() is None,
                  "no refusal reason in the edge's log: %r" % open(log, "rb").read()[-400:])
            time.sleep(0.05)
    finally:
        p.terminate()
        p.wait(10)
    env.stop(cloud)


def cloudstream_bad_config(env):
    """cloudstream's start-up errors: exit 2, with the flag and the reason, for a certificate
    that does not load, a listen address the host does not have or a port in use, and
    apiserver options that cannot work (all found at start, not at the first request)."""
    exe = os.path.join(h.BIN, "cloudstream", "cloudstream")
    base = h.cloudstream_pki_flags(env) + [
        "--stream-allowed-subjects", "kube-apiserver-kubelet-client",
        "--tunnel-listen", "127.0.0.1:0", "--stream-listen", "127.0.0.1:0",
        "--admin-listen", "127.0.0.1:0", "--sandbox", "off"]
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    token = os.path.join(env.dir, "empty-token")
    open(token, "w").close()
    cases = [
        (["--tunnel-cert", "/nonexistent.crt"], b"--tunnel-cert/--tunnel-key: /nonexistent.crt"),
        (["--stream-listen", "192.0.2.1:10350"],
         b"--stream-listen 192.0.2.1:10350: cannot listen there: Cannot assign requested"),
        (["--admin-listen", "127.0.0.1:%d" % busy.getsockname()[1]],
         b"cannot listen there: Address already in use"),
        (["--apiserver-url", "kubernetes.default.svc"], b"expected https://HOST[:PORT]"),
        (["--apiserver-url", "https://127.0.0.1:1", "--apiserver-token-file", "/nonexistent"],
         b"--apiserver-token-file /nonexistent: No such file"),
        (["--apiserver-url", "https://127.0.0.1:1", "--apiserver-token-file", token],
         b"--apiserver-token-file %s: empty" % token.encode()),
        (["--apiserver-url", "https://127.0.0.1:1", "--apiserver-ca", "/nonexistent.crt"],
         b"--apiserver-ca: /nonexistent.crt"),
    ]
    try:
        for extra, want in cases:
            r = subprocess.run([exe] + base + extra, capture_output=True, timeout=10)
            check(r.returncode == 2 and want in r.stderr,
                  "%r: exit %d %r" % (extra, r.returncode, r.stderr[-300:]))
    finally:
        busy.close()


def cloud_urls_in_turn(env):
    """--cloud-url lists several URLs, tried in turn: a dead first entry is passed over at once
    (no backoff inside a round), a host name is resolved on a worker (localhost: the name stays
    the certificate's), and after an established tunnel drops, the first redial comes at once:
    the edge is up on the next cloud within a fraction of --backoff-initial (5 s here) after the
    SIGKILL of the one it held."""
    kubelet = h.start_kubelet(env, name="kubelet-urls")
    a = h.start_cloudstream(env, name="cloud-urls-a")
    b = h.start_cloudstream(env, name="cloud-urls-b")
    dead = h.free_port()
    urls = ",".join("wss://%s:%d/v1/kubeedge/connect" % hp for hp in (
        ("127.0.0.1", dead), ("localhost", a.ports["tunnel"]), ("localhost", b.ports["tunnel"])))
    t0 = time.monotonic()
    edge = h.start_edgestream(env, a, kubelet, name="edge-urls", url=urls,
                              extra=["--backoff-initial", "5s", "--backoff-max", "10s"])
    first_s = time.monotonic() - t0
    log = open(edge.logpath, "rb").read()
    check(b"tunnel up to localhost:%d (127.0.0.1)" % a.ports["tunnel"] in log,
          "not up on the second URL, resolved:\n" + env.tail(edge))
    check(first_s < 4, "up after %.2f s: a backoff between the entries?" % first_s)
    check(h.metric(a, "cloudstream_sessions") == 1, "cloud a holds no tunnel")
    time.sleep(1.2)  # up for more than a flap (backoff.h): the next redial is at once
    a.kill()
    a.wait()
    t1 = time.monotonic()
    while h.metric(b, "cloudstream_sessions") != 1:
        check(time.monotonic() - t1 < 4, "not up on cloud b 4 s after the kill:\n" +
              env.tail(edge))
        time.sleep(0.005)
    moved_ms = (time.monotonic() - t1) * 1000
    check(moved_ms < 1000, "up on cloud b %.0f ms after the kill (want < 1 s: at once)" %
          moved_ms)
    api = h.Api(env, b.ports["stream"])
    st, _, body, s = api.request("GET", "/healthz", [("Host", "edge-1:10350")])
    s.close()
    check(st == 200, "through cloud b: %d %r" % (st, body[:100]))
    print("cloud_urls_in_turn: up on the 2nd URL in %.2f s (1st refused); after SIGKILL of its "
          "cloud, up on the 3rd %.0f ms later (--backoff-initial 5s)" % (first_s, moved_ms),
          flush=True)
    for p in (edge, b, kubelet):
        env.stop(p)


def two_instances(env):
    """Two instances in one process (edgestream.h, logging): each logs at its own
    configuration's level to its own hook — no line of one reaches the other's hook, the one at
    warn has no info lines, the one at debug has debug lines — and both stop and free cleanly
    (the ASan build checks for leaks at exit)."""
    kubelet = h.start_kubelet(env, name="kubelet-two")
    cloud = h.start_cloudstream(env, name="cloud-two")
    api = h.Api(env, cloud.ports["stream"])
    if not os.path.exists(env.path("node-edge-2.crt")):
        env.mint("client", "--ca", env.path("tunnel-ca"), "--out", env.path("node-edge-2"),
                 "--node", "edge-2")
    files = []
    for tag, node, level in (("A", "edge-1", "debug"), ("B", "edge-2", "warn")):
        path = os.path.join(env.dir, "two-%s.json" % tag)
        with open(path, "w") as f:
            json.dump(dict(h.edge_options(env, cloud, kubelet, node),
                           **{"admin-listen": "", "log-level": level}), f)
        files.append(path)
    p = subprocess.Popen([os.path.join(h.BIN, "edgestream", "edgestream-two-instances")] + files,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         preexec_fn=h._die_with_parent)
    lines = []
    try:
        up = set()
        while up != {"A", "B"}:
            line = p.stdout.readline().decode()
            if not line:
                raise h.Fail("two instances: stopped early: %r %r" % (lines,
                                                                     p.stderr.read()[-500:]))
            lines.append(line.rstrip("\n"))
            m = re.match(r"([AB]) connected (\S+)$", lines[-1])
            if m:
                check(m.group(2) == {"A": "edge-1", "B": "edge-2"}[m.group(1)], lines[-1])
                up.add(m.group(1))
        for node in ("edge-1", "edge-2"):
            st, _, body, s = api.request("GET", "/containerLogs/default/pod-a/ctr?tailLines=3",
                                         [("Host", node + ":10350")])
            s.close()
            check(st == 200 and body == b"line 1\nline 2\nline 3\n", "%s: %d %r" % (node, st,
                                                                                     body))
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    lines += out.decode().splitlines()
    a = [ln for ln in lines if ln.startswith("A ") and not ln.startswith("A connected")]
    b = [ln for ln in lines if ln.startswith("B ") and not ln.startswith("B connected")]
    check(lines[-1] == "stopped", "two instances did not stop cleanly: %r" % lines[-5:])
    check(p.returncode == 0, "two instances: exit %s, stderr %r" % (p.returncode,
                                                                   err.decode()[-2000:]))
    check(not any("edge-2" in ln for ln in a), "A's hook got edge-2's lines: %r" %
          [ln for ln in a if "edge-2" in ln][:3])
    check(not any("edge-1" in ln for ln in b), "B's hook got edge-1's lines: %r" %
          [ln for ln in b if "edge-1" in ln][:3])
    check(any(" debug " in ln for ln in a), "A (debug) logged no debug line: %r" % a[:5])
    check(any("node=edge-1" in ln and " info " in ln for ln in a),
          "A logged no info line about its node (its access log): %r" % a[:5])
    check(not any(" info " in ln or " debug " in ln for ln in b),
          "B (warn) logged info/debug lines: %r" % [ln for ln in b
                                                    if " info " in ln or " debug " in ln][:3])
    print("     A: %d lines (debug), B: %d lines (warn), none crossed" % (len(a), len(b)))


def group_ops():
    env = h.Env("es-ops", nodes=("edge-1",))
    try:
        return h.run(h.named("ops", [
            ("redial_with_backoff", lambda: redial_with_backoff(env)),
            ("cloud_cert_other_ca", lambda: cloud_cert_other_ca(env)),
            ("cloud_cert_wrong_name", lambda: cloud_cert_wrong_name(env)),
            ("cert_reload_and_sigterm", lambda: cert_reload_and_sigterm(env)),
            ("drain_on_sigterm", lambda: drain_on_sigterm(env)),
            ("ctl_lists_sessions_and_streams", lambda: ctl_lists_sessions_and_streams(env)),
            ("embedding_example", lambda: embedding_example(env)),
            ("two_instances", lambda: two_instances(env)),
            ("dead_peer", lambda: dead_peer(env)),
            ("coalesced_pongs_keep_tunnel", lambda: coalesced_pongs_keep_tunnel(env)),
            ("backend_handshake_timeout", lambda: backend_handshake_timeout(env)),
            ("kubelet_refuses_resumption", lambda: kubelet_refuses_resumption(env)),
            ("bad_config", lambda: bad_config(env)),
            ("cloudstream_bad_config", lambda: cloudstream_bad_config(env)),
            ("refusal_reason_logged", lambda: refusal_reason_logged(env)),
            ("cloud_urls_in_turn", lambda: cloud_urls_in_turn(env)),
        ]))
    finally:
        env.close()


def main():
    return h.main_by_group({"cloud": group_cloud, "base": group_base, "ops": group_ops,
                            "stall": group_stall, "h2": group_h2}, "cloud")


if __name__ == "__main__":
    sys.exit(main())
