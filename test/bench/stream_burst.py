#!/usr/bin/python3
"""10,000 quiet `kubectl logs -f` streams opened in one burst: answers, and memory per stream on
both daemons, beside issue 12's targets, in one run.

    test/bench/stream_burst.py [--build build/rel] [--streams 10000] [--settle 12]
                               [--kubelet-http1] [--max-connecting N] [--edge-arg=...] [--cloud-arg=...]
                               [--h2-streams-per-conn K] [--front-door]

Starts the fake kubelet (TLS, client certificate required; HTTP/2 unless --kubelet-http1, as a
real kubelet), cloudstream and edgestream on 127.0.0.1 from --build (a Release build for
meaningful figures), warms both up with 20 follows, reads their VmRSS, then has follow_burst
(test/bench/follow_burst.c: one epoll loop over OpenSSL, its own process and fd limit) open
--streams TLS connections to cloudstream's stream port at once, each `GET
/containerLogs/...?follow=true` (the fake kubelet's follow: a line now, then one every
--interval seconds). Prints how many were answered (200 and their first line), how many got
504 or anything else, and how long the burst took (with --h2-streams-per-conn K the follows go
as HTTP/2 streams, K per connection, as kube-apiserver's Go transport sends them to a kubelet
that offers h2); then, after --settle seconds, each daemon's
(VmRSS with the streams open - VmRSS before them) / streams beside its target.

--front-door: the follows come in through cloudstream's front door on a unix socket instead of
the stream port, as kube-apiserver sends them with an EgressSelector `HTTPConnect` egress over
a unix socket (DESIGN D13): a unix connection and `CONNECT <node-ip>:10250` each, then the
client's own TLS to the fake kubelet inside the tunnel (HTTP/1.1, as kube-apiserver's kubelet
client), which neither daemon terminates: each relays it, the edge over one TCP connection per
stream to the kubelet.

One node holds every stream, so cloudstream gets --max-streams-per-node and a per-node budget
(--session-buffer-bytes) sized for that many streams; edgestream gets --max-streams and keeps
its default --process-buffer-bytes (256 MiB). fds: the client holds one per stream, cloudstream
one per stream plus a few, edgestream one per kubelet connection (HTTP/2: about one per 250
streams; --kubelet-http1: one per stream), each process under its own 20,000 limit.

A program, not a test: it asserts nothing. Needs no root.
"""
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402
import front_door_test  # noqa: E402
h = bl.h
NODE_IP = front_door_test.NODE_IP

CLOUD_TARGET_KIB = 12.0
EDGE_TARGET_KIB = 20.0


def burst(args, env, cloud, n, hold=False):
    """Runs follow_burst for @n streams; returns (its result line, the process: still holding
    the streams open when @hold, else stopped)."""
    if args.front_door:
        where = ["--unix", cloud.door_socket, "--connect", "%s:10250" % NODE_IP,
                 "--host-header", "%s:10250" % NODE_IP, "--ca", env.path("kubelet-ca.crt"),
                 "--cert", env.path("apiserver-kubelet.crt"),
                 "--key", env.path("apiserver-kubelet.key")]
    else:
        where = ["--port", str(cloud.ports["stream"]), "--ca", env.path("stream-ca.crt"),
                 "--cert", env.path("apiserver-kubelet-client.crt"),
                 "--key", env.path("apiserver-kubelet-client.key")]
    argv = [os.path.join(h.BIN, "test", "bench", "follow_burst")] + where + [
            "--n", str(n),
            "--target", "/containerLogs/default/pod-a/ctr?follow=true&tailLines=1&interval=%g"
            % args.interval, "--timeout", str(args.timeout),
            "--max-connecting", str(args.max_connecting),
            "--h2-streams-per-conn", str(args.h2_streams_per_conn)]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline().strip()
    p.stdout.readline()  # "holding"
    if not hold:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=30)
    return line, p


def run(args, env, cloud, edge, kubelet):
    line, _ = burst(args, env, cloud, 20)  # fixed costs (first TLS contexts, buffers) first
    if "answered=20 " not in line:
        raise RuntimeError("warm-up: %s" % line)
    time.sleep(args.settle)
    c0, e0 = bl.status_kib(cloud.pid), bl.status_kib(edge.pid)
    n = args.streams
    line, client = burst(args, env, cloud, n, hold=True)
    try:
        time.sleep(args.settle)
        c1, e1 = bl.status_kib(cloud.pid), bl.status_kib(edge.pid)
        chwm, ehwm = bl.status_kib(cloud.pid, "VmHWM"), bl.status_kib(edge.pid, "VmHWM")
        em = bl.metrics(edge.ports["admin"])
        cm = bl.metrics(cloud.ports["admin"])
    finally:
        client.send_signal(signal.SIGTERM)
        client.wait(timeout=60)
    f = dict(kv.split("=") for kv in line.split()[1:])
    ok = int(f["answered"]) == n
    cloud_kib = (c1 - c0) / n
    edge_kib = (e1 - e0) / n
    if args.front_door:
        client = ("through the front door (unix socket, CONNECT, the client's TLS to the "
                  "kubelet inside; HTTP/1.1, a connection per stream)")
    elif args.h2_streams_per_conn:
        client = "HTTP/2, %d streams per connection" % args.h2_streams_per_conn
    else:
        client = "HTTP/1.1, a connection per stream"
    print("%d quiet logs -f streams, one node, fake kubelet %s, a line every %g s; build %s; "
          "client %s" % (n, "HTTP/1.1" if args.kubelet_http1 else "HTTP/2", args.interval,
                         args.build, client))
    print("| figure | measured | target |")
    print("|---|---|---|")
    print("| burst of %d follow requests: answered (200 + first line) | %s in %s s | all %d |"
          % (n, f["answered"], f["seconds"], n))
    print("| burst: 504 / other status / no answer | %s / %s / %s | 0 / 0 / 0 |"
          % (f["status504"], f["other"], f["failed"]))
    print("| cloudstream RSS per stream | %.1f KiB (%d -> %d KiB) | <= %.0f KiB %s |"
          % (cloud_kib, c0, c1, CLOUD_TARGET_KIB, "ok" if cloud_kib <= CLOUD_TARGET_KIB
             else "SHORT"))
    print("| edgestream RSS per stream | %.1f KiB (%d -> %d KiB) | <= %.0f KiB %s |"
          % (edge_kib, e0, e1, EDGE_TARGET_KIB, "ok" if edge_kib <= EDGE_TARGET_KIB
             else "SHORT"))
    print("| peak RSS (VmHWM) during the burst: cloudstream / edgestream | %d / %d KiB | |"
          % (chwm, ehwm))
    for k in sorted(em):
        if "refused" in k or k.startswith(("edgestream_streams ", "edgestream_budget")):
            if em[k]:
                print("  edge  %s %g" % (k, em[k]))
    for k in sorted(cm):
        if "refused" in k or "budget" in k or "certificates_shared" in k:
            if cm[k]:
                print("  cloud %s %g" % (k, cm[k]))
    print("burst: %s" % ("all answered" if ok else "NOT all answered"))


def main():
    ap = bl.parser(__doc__)
    ap.set_defaults(build="build/rel")  # printed as given
    ap.add_argument("--streams", type=int, default=10000)
    ap.add_argument("--interval", type=float, default=5.0,
                    help="seconds between the fake kubelet's log lines")
    ap.add_argument("--settle", type=float, default=12.0)
    ap.add_argument("--timeout", type=int, default=120, help="seconds the burst may take")
    ap.add_argument("--keep", action="store_true", help="keep the run's directory (logs)")
    ap.add_argument("--max-connecting", type=int, default=0,
                    help="the client's connections in connect or TLS at once (0: all at once)")
    ap.add_argument("--kubelet-http1", action="store_true",
                    help="the fake kubelet speaks HTTP/1.1 only (a TLS connection per follow)")
    ap.add_argument("--h2-streams-per-conn", type=int, default=0,
                    help="the client sends the follows as HTTP/2 streams, K per connection "
                    "(0: HTTP/1.1, a connection each)")
    ap.add_argument("--front-door", action="store_true",
                    help="the follows come through cloudstream's front door on a unix socket "
                    "(CONNECT, then the client's TLS to the kubelet), not the stream port")
    ap.add_argument("--edge-arg", action="append", default=[])
    ap.add_argument("--cloud-arg", action="append", default=[])
    ap.add_argument("--cloud-prefix", default="",
                    help="run cloudstream under this command, e.g. 'heaptrack -o /tmp/cs'")
    args = ap.parse_args()
    if args.front_door and args.h2_streams_per_conn:
        ap.error("--front-door is HTTP/1.1: kube-apiserver's kubelet client does not offer h2")
    bl.use_build(args.build)
    with bl.run_env("stream-burst", keep=args.keep) as env:
        door = []
        if args.front_door:
            # The node's tunnel certificate carries its IP, which the CONNECT names.
            front_door_test.mint_pki(env)
            door = ["--front-door-socket", env.sock("front-door.sock")]
        kubelet = h.start_kubelet(env, extra=[] if args.kubelet_http1 else ["--h2"])
        n = str(max(args.streams, 1024))
        cloud = h.start_cloudstream(env, ["--max-streams-per-node", n,
                                          "--session-buffer-bytes", "1GiB",
                                          "--log-level", "warn"] + door + args.cloud_arg,
                                    prefix=args.cloud_prefix.split())
        cloud.door_socket = env.sock("front-door.sock")
        edge = h.start_edgestream(env, cloud, kubelet,
                                  extra=["--max-streams", n, "--log-level", "warn"]
                                  + args.edge_arg)
        run(args, env, cloud, edge, kubelet)


if __name__ == "__main__":
    main()
