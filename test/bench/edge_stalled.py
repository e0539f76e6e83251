#!/usr/bin/python3
"""edgestream's memory under thousands of stalled downloads: bounded by its process budget.

    test/bench/edge_stalled.py [--build build/rel] [--streams 5000] [--budget 256MiB]

Starts nginx as the node's kubelet (TLS, client certificate required; a Python stand-in could
not serve thousands of downloads at once), cloudstream (budgets wide open, so that the edge is
the one that refuses) and edgestream (--process-buffer-bytes --budget) on 127.0.0.1 from
--build, opens --streams apiserver connections, each a GET of a 1 GiB file, and reads nothing
from any of them. Each stream the edge admits reserves its first credit window and
its queue toward the cloud from the budget; the rest are refused (503 with the reason). Once
every stream is admitted or refused and the bytes stop moving, prints: the edge's RSS growth
beside the budget, what the budget says is in use, the refusals (metric and log lines), and how
long a /metrics request to the same node takes meanwhile.

A program, not a test: it asserts nothing (test/integration covers the behaviour). Needs no
root; opens --streams sockets in this process, cloudstream, edgestream and the fake kubelet each
(the per-process open-file limit must allow it).
"""
import asyncio
import os
import re
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402

DOWNLOAD_LOCATIONS = """    ssl_session_cache shared:bench:1m;
    location = /download {{ root {d}; default_type application/octet-stream; }}
    location = /metrics {{ return 200 "kubelet_up 1\n"; }}
"""


def start_download_nginx(env, nbytes=1 << 30):
    """nginx as the kubelet, for thousands of connections, with a sparse file of @nbytes at
    /download (its directory in .dir)."""
    d = os.path.join(env.dir, "nginx")
    os.makedirs(d)
    with open(os.path.join(d, "download"), "wb") as f:
        f.truncate(nbytes)
    p = bl.start_kubelet_nginx(env, d, DOWNLOAD_LOCATIONS, name="nginx", connections=16384,
                               main="worker_rlimit_nofile 20000;\n")
    p.dir = d
    return p


def size(text):
    m = re.fullmatch(r"(\d+)([KMG]i?B)?", text)
    mult = {None: 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[m.group(2)]
    return int(m.group(1)) * mult


async def stalled_download(ctx, port, statuses, keep):
    # A small receive buffer: the client stops taking bytes after a few KiB, as a stalled
    # kubectl does once its buffers are full, without gigabytes first filling loopback
    # buffers (which measures the chain's throughput, not what a stall holds).
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=sock, ssl=ctx,
                                                   server_hostname="localhost",
                                                   limit=4096)
    writer.write(b"GET /download HTTP/1.1\r\nHost: edge-1:10350\r\n\r\n")
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    statuses[status] = statuses.get(status, 0) + 1
    if status == 503:
        body = await reader.read(4096)
        if b"memory budget spent" not in body:
            raise RuntimeError("503 without the reason: %r" % body[:300])
    keep.append(writer)  # and never read again


async def probe(ctx, port):
    t = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: edge-1:10350\r\nConnection: close\r\n\r\n")
    await writer.drain()
    data = await reader.read()
    writer.close()
    return time.monotonic() - t, data.split(b" ", 2)[1]


async def run(args, env, cloud, edge):
    ctx = bl.client_ctx(env.pki)
    port = cloud.ports["stream"]
    await probe(ctx, port)  # warm: the kubelet TLS context, the first buffers
    pid = edge.pid
    rss0 = bl.status_kib(pid, "VmRSS")
    statuses, keep, tasks = {}, [], []
    t0 = time.monotonic()
    for i in range(args.streams):
        tasks.append(asyncio.create_task(stalled_download(ctx, port, statuses, keep)))
        if i % 100 == 99:
            await asyncio.sleep(100.0 / args.rate)
    await asyncio.gather(*tasks)
    # Settled: every stream answered, and the bytes from the edge stop growing.
    seen = None
    while True:
        m = bl.metrics(edge.ports["admin"])
        now = m.get('edgestream_stream_bytes_total{direction="to_cloud"}')
        if now == seen:
            break
        seen = now
        await asyncio.sleep(1.0)
    up = time.monotonic() - t0
    slowest = 0.0
    for _ in range(5):
        took, status = await probe(ctx, port)
        slowest = max(slowest, took)
        await asyncio.sleep(0.2)
    rss1, hwm = bl.status_kib(pid, "VmRSS"), bl.status_kib(pid, "VmHWM")
    m = bl.metrics(edge.ports["admin"])
    with open(edge.logpath, "rb") as f:
        warned = f.read().count(b"a stream from the cloud refused")
    for w in keep:
        w.close()
    budget = size(args.budget)
    print("edgestream, %d stalled downloads (kubelet backend, clients read nothing), "
          "--process-buffer-bytes %s; settled in %.1f s" % (args.streams, args.budget, up))
    print("  answers: %s" % ", ".join("%d x %d" % (n, s) for s, n in sorted(statuses.items())))
    print("  refused for the budget: %d (edgestream_streams_refused_by_session_total"
          "{reason=\"budget\"}), warned %d time(s) in the log"
          % (m['edgestream_streams_refused_by_session_total{reason="budget"}'], warned))
    print("  budget in use: %.1f MiB of %.1f MiB (peak %.1f MiB)"
          % (m["edgestream_buffered_bytes"] / 2**20, budget / 2**20,
             m["edgestream_buffered_bytes_peak"] / 2**20))
    print("  VmRSS: %d KiB before, %d KiB with the streams (peak %d): +%.1f MiB, %.2f of the "
          "budget" % (rss0, rss1, hwm, (rss1 - rss0) / 1024, (rss1 - rss0) * 1024 / budget))
    print("  a /metrics request to the same node meanwhile: slowest %.3f s (status %s)"
          % (slowest, status.decode()))


def main():
    ap = bl.parser(__doc__, "rel")
    ap.add_argument("--streams", type=int, default=5000)
    ap.add_argument("--rate", type=float, default=200.0, help="streams opened a second")
    ap.add_argument("--budget", default="256MiB", help="edgestream --process-buffer-bytes")
    ap.add_argument("--keep", action="store_true", help="keep the run's directory (logs)")
    ap.add_argument("--debug", action="store_true", help="debug logs from both daemons")
    args = ap.parse_args()
    h = bl.use_build(args.build)
    with bl.run_env("edge-stalled", keep=args.keep) as env:
        kubelet = start_download_nginx(env)
        cloud = h.start_cloudstream(env, ["--session-buffer-bytes", "64GiB",
                                          "--max-streams-per-node", "65536",
                                          "--log-level", "debug" if args.debug else "warn"])
        edge = h.start_edgestream(env, cloud, kubelet,
                                  extra=["--max-streams", "65536",
                                         "--log-level", "debug" if args.debug else "warn",
                                         "--process-buffer-bytes", args.budget])
        asyncio.run(run(args, env, cloud, edge))


if __name__ == "__main__":
    main()
