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
import argparse
import asyncio
import os
import re
import socket
import ssl
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration", "lib"))
import harness as h  # noqa: E402


NGINX_CONF = """
user root;
worker_processes 1;
worker_rlimit_nofile 20000;
daemon off;
pid {d}/nginx.pid;
error_log {d}/nginx-error.log;
events {{ worker_connections 16384; }}
http {{
  access_log off;
  client_body_temp_path {d}/tmp; proxy_temp_path {d}/tmp; fastcgi_temp_path {d}/tmp;
  uwsgi_temp_path {d}/tmp; scgi_temp_path {d}/tmp;
  server {{
    listen 127.0.0.1:{port} ssl;
    ssl_certificate {pki}/kubelet.crt;
    ssl_certificate_key {pki}/kubelet.key;
    ssl_client_certificate {pki}/kubelet-ca.crt;
    ssl_verify_client on;
    ssl_session_cache shared:bench:1m;
    location = /download {{ root {d}; default_type application/octet-stream; }}
    location = /metrics {{ return 200 "kubelet_up 1\n"; }}
  }}
}}
"""


class Nginx:
    """nginx as the kubelet, with a 1 GiB (sparse) file to download."""

    def __init__(self, env):
        self.dir = os.path.join(env.dir, "nginx")
        os.makedirs(os.path.join(self.dir, "tmp"))
        with open(os.path.join(self.dir, "download"), "wb") as f:
            f.truncate(1 << 30)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        conf = os.path.join(self.dir, "nginx.conf")
        with open(conf, "w") as f:
            f.write(NGINX_CONF.format(d=self.dir, port=self.port, pki=env.pki))
        self.p = subprocess.Popen(["nginx", "-c", conf, "-p", self.dir],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while socket.socket().connect_ex(("127.0.0.1", self.port)) != 0:
            if time.monotonic() > deadline or self.p.poll() is not None:
                raise SystemExit("nginx did not start: " +
                                 open(os.path.join(self.dir, "nginx-error.log")).read())
            time.sleep(0.05)

    def stop(self):
        self.p.terminate()
        self.p.wait()


def status_kib(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def metrics(port):
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read()
    out = {}
    for line in text.decode().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


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
    ctx = ssl.create_default_context(cafile=env.path("stream-ca.crt"))
    ctx.check_hostname = False
    ctx.load_cert_chain(env.path("apiserver-kubelet-client.crt"),
                        env.path("apiserver-kubelet-client.key"))
    port = cloud.ports["stream"]
    await probe(ctx, port)  # warm: the kubelet TLS context, the first buffers
    pid = edge.pid
    rss0 = status_kib(pid, "VmRSS")
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
        m = metrics(edge.ports["admin"])
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
    rss1, hwm = status_kib(pid, "VmRSS"), status_kib(pid, "VmHWM")
    m = metrics(edge.ports["admin"])
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
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build/rel")
    ap.add_argument("--streams", type=int, default=5000)
    ap.add_argument("--rate", type=float, default=200.0, help="streams opened a second")
    ap.add_argument("--budget", default="256MiB", help="edgestream --process-buffer-bytes")
    ap.add_argument("--keep", action="store_true", help="keep the run's directory (logs)")
    ap.add_argument("--debug", action="store_true", help="debug logs from both daemons")
    args = ap.parse_args()
    h.BIN = os.path.abspath(args.build)
    env = h.Env("edge-stalled", nodes=("edge-1",))
    ok = False
    nginx = None
    try:
        kubelet = nginx = Nginx(env)
        cloud = h.start_cloudstream(env, ["--session-buffer-bytes", "64GiB",
                                          "--max-streams-per-node", "65536",
                                          "--log-level", "debug" if args.debug else "warn"])
        edge = h.start_edgestream(env, cloud, kubelet,
                                  extra=["--max-streams", "65536",
                                         "--log-level", "debug" if args.debug else "warn",
                                         "--process-buffer-bytes", args.budget])
        asyncio.run(run(args, env, cloud, edge))
        ok = True
    finally:
        if nginx:
            nginx.stop()
        h.close_env(env, not ok or args.keep)
        if args.keep:
            print("logs in", env.dir)


if __name__ == "__main__":
    main()
