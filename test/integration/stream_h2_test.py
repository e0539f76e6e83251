#!/usr/bin/python3
"""HTTP/2 on cloudstream's stream port (front_h2.c): curl --http2 (Debian's curl, with nghttp2)
as kube-apiserver's kubelet client, through the real cloudstream and edgestream to the TLS
kubelet stand-in; HTTP/1.1 still served on the same port, with ALPN http/1.1 and without ALPN.

    stream_h2_test.py [TEST...]

Starts its own processes and stops them by PID at the end.
"""
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402
from harness import check  # noqa: E402


class Chain(h.Chain):
    """kubelet stand-in + cloudstream + edgestream for edge-1."""

    def __init__(self, tag):
        super().__init__(tag, lambda env, cloud, kubelet: h.start_edgestream(env, cloud, kubelet))
        self.env.mint("client", "--ca", self.env.path("stream-ca"), "--out",
                      self.env.path("not-allowed"), "--cn", "someone-else")

    def curl(self, targets, extra=(), cert="apiserver-kubelet-client", node="edge-1",
             timeout=20):
        """curl over HTTP/2 (ALPN h2) to the stream port: (exit code, stdout, stderr)."""
        port = self.cloud.ports["stream"]
        # The stream port's certificate is for localhost; the node goes in Host (curl sends
        # it as :authority over HTTP/2).
        argv = ["curl", "-sS", "--http2", "--cacert", self.env.path("stream-ca.crt"),
                "--resolve", "localhost:%d:127.0.0.1" % port, "-H", "Host: %s:10350" % node]
        if cert:
            argv += ["--cert", self.env.path(cert + ".crt"),
                     "--key", self.env.path(cert + ".key")]
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


def access_logged(chain):
    """HTTP/2 requests have their access line like HTTP/1.1's."""
    text = open(chain.cloud.logpath, "rb").read()
    check(re.search(rb"access: GET /stats/summary 200 done caller=kube-apiserver-kubelet-client",
                    text), "no access line for an h2 request")


def main():
    chain = Chain("cs-h2")
    rc = 1
    try:
        tests = [logs_h2, same_bytes_as_h1, parallel_follows_one_connection,
                 client_reset_frees_stream, refusals_h2, h1_same_port, access_logged]
        rc = h.run(h.named("h2", [(t.__name__, (lambda t=t: t(chain))) for t in tests]))
        h.stop_exits_0(chain.env, chain.cloud)
        return rc
    finally:
        chain.close(rc != 0)


if __name__ == "__main__":
    sys.exit(main())
