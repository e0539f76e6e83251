#!/usr/bin/python3
"""edgestream's memory per quiet `kubectl logs -f` stream (kubelet backend).

    test/bench/edge_rss.py [--build build/h-edge-rel] [--streams 1000] [--rate 1000] [--interval 5]
                           [--kubelet-h2] [--edge-arg=--kubelet-http2=off]

Starts the fake kubelet (TLS, client certificate required), cloudstream and edgestream on
127.0.0.1 from --build (a Release build for meaningful figures), opens --streams apiserver
connections to cloudstream, --rate a second, each one GET /containerLogs/...?follow=true (the
fake kubelet's follow: a line now, then one every --interval seconds), waits until every
stream has its answer head and first line, lets it settle, and reads edgestream's VmRSS (and
its anonymous memory from /proc/PID/smaps_rollup). Prints the figure per stream: (RSS with the
streams open - RSS before them) / streams, and what is left once they are gone; the same per
stream for cloudstream's VmRSS. Any answer other than 200 (a 504) stops the run.

The rate matters: each stream's kubelet TLS handshake holds ~50 KB of OpenSSL buffers for a
moment, and the fake kubelet (Python) completes a few hundred handshakes a second, so at 1,000
streams a second hundreds are under way at once, and glibc keeps that peak's heap (freed, not
returned). At 200 a second the figure is close to what the streams themselves hold.

--kubelet-h2: the fake kubelet offers ALPN h2 (python3-h2), so edgestream's follows ride a few
shared HTTP/2 connections (SETTINGS_MAX_CONCURRENT_STREAMS 250) instead of one TLS connection
each. The fake kubelet's CPU time is printed per stream for both, to show it is not what bounds
the run (it stays well under one core while the streams open).

A program, not a test: it asserts nothing. Needs no root.
"""
import asyncio
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402


async def open_stream(ctx, port, target, ready, keep):
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
    writer.write(("GET %s HTTP/1.1\r\nHost: edge-1:10350\r\n\r\n" % target).encode())
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError("answer %r %r" % (head[:40], await reader.read(200)))
    await reader.readuntil(b"line 1\n")  # the first line went through the whole chain
    ready.append(1)
    keep.append(writer)
    while await reader.read(65536):  # keep reading: a quiet follower, not a stalled one
        pass


async def run(args, env, cloud, edge, kubelet):
    ctx = bl.client_ctx(env.pki)
    port = cloud.ports["stream"]
    target = "/containerLogs/default/pod-a/ctr?follow=true&tailLines=1&interval=%g" % args.interval

    # Warm-up: the process's fixed costs (first TLS contexts, buffers, the tunnel's) come
    # before the baseline.
    ready, keep = [], []
    tasks = [asyncio.create_task(open_stream(ctx, port, target, ready, keep)) for _ in range(20)]
    while len(ready) < 20:
        await asyncio.sleep(0.05)
    for w in keep:
        w.close()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.sleep(2)
    pid = edge.pid
    rss0, anon0 = bl.status_kib(pid, "VmRSS"), bl.anon_kib(pid)
    crss0 = bl.status_kib(cloud.pid, "VmRSS")

    ready, keep = [], []
    t0 = time.monotonic()
    k0 = bl.cpu_seconds(kubelet.pid)
    tasks = []
    for i in range(args.streams):
        tasks.append(asyncio.create_task(open_stream(ctx, port, target, ready, keep)))
        if i % 50 == 49:
            await asyncio.sleep(50.0 / args.rate)
    while len(ready) < args.streams:
        failed = [t for t in tasks if t.done() and t.exception()]
        if failed:
            raise RuntimeError("a stream failed: %r" % failed[0].exception())
        if time.monotonic() - t0 > 180:
            raise RuntimeError("only %d of %d streams up after 180 s" % (len(ready), args.streams))
        await asyncio.sleep(0.1)
    up = time.monotonic() - t0
    k_up = bl.cpu_seconds(kubelet.pid) - k0
    await asyncio.sleep(args.settle)
    open_now = bl.metrics(edge.ports["admin"]).get("edgestream_streams")
    rss1, anon1 = bl.status_kib(pid, "VmRSS"), bl.anon_kib(pid)
    hwm = bl.status_kib(pid, "VmHWM")
    crss1 = bl.status_kib(cloud.pid, "VmRSS")
    for w in keep:
        w.close()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.sleep(2)
    rss2 = bl.status_kib(pid, "VmRSS")
    n = args.streams
    print("edgestream, %d quiet logs -f streams (kubelet backend, a line every %g s), opened "
          "at %g/s, up in %.1f s, %s open by its metric"
          % (n, args.interval, args.rate, up, open_now))
    print("  VmRSS  before %7d KiB, with the streams %7d KiB (peak %d), after %7d KiB"
          % (rss0, rss1, hwm, rss2))
    print("  anon   before %7d KiB, with the streams %7d KiB" % (anon0, anon1))
    print("  per stream: %.1f KiB RSS, %.1f KiB anonymous"
          % ((rss1 - rss0) / n, (anon1 - anon0) / n))
    print("cloudstream: VmRSS before %d KiB, with the streams %d KiB: %.1f KiB per stream; "
          "every one of the %d requests answered 200 with its first line"
          % (crss0, crss1, (crss1 - crss0) / n, n))
    print("  fake kubelet (%s): %.2f s CPU while the streams opened (%.0f%% of one core, "
          "%.2f ms a stream)" % ("offering h2" if args.kubelet_h2 else "HTTP/1.1 only", k_up,
                                  100.0 * k_up / up, 1000.0 * k_up / n))


def main():
    ap = bl.parser(__doc__, "h-edge-rel")
    ap.add_argument("--streams", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=1000.0, help="streams opened a second")
    ap.add_argument("--interval", type=float, default=5.0,
                    help="seconds between the fake kubelet's log lines")
    ap.add_argument("--settle", type=float, default=5.0)
    ap.add_argument("--keep", action="store_true", help="keep the run's directory (logs)")
    ap.add_argument("--kubelet-h2", action="store_true",
                    help="the fake kubelet speaks HTTP/2 (ALPN h2)")
    ap.add_argument("--edge-arg", action="append", default=[],
                    help="an extra edgestream flag (repeatable), e.g. --edge-arg=--kubelet-http2=off")
    args = ap.parse_args()
    h = bl.use_build(args.build)
    with bl.run_env("edge-rss", keep=args.keep) as env:
        kubelet = h.start_kubelet(env, extra=["--h2"] if args.kubelet_h2 else [])
        cloud = h.start_cloudstream(env, ["--session-buffer-bytes", "64GiB",
                                          "--max-streams-per-node", "65536"])
        edge = h.start_edgestream(env, cloud, kubelet,
                                  extra=["--max-streams", "65536", "--log-level", "warn"]
                                  + args.edge_arg)
        asyncio.run(run(args, env, cloud, edge, kubelet))


if __name__ == "__main__":
    main()
