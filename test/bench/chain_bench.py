#!/usr/bin/python3
"""Throughput and latency through the whole chain (client → cloudstream → tunnel → edgestream →
backend) against the same client talking to the same backend directly, in one run.

    sudo test/bench/chain_bench.py [--build build/release] [--mib 100] [--requests 300] [--runs 3]

Backends (all real, all on 127.0.0.1):
  - nginx as the node's kubelet (TLS, client certificate required), serving a log body of
    --mib MiB and a 5 KiB /metrics: node edge-1 (edgestream with --kubelet-url).
  - containerd with a host-network pod: exec stdout over websocket v4 (which containerd speaks),
    and a container log file of --mib MiB of output: node edge-2 (edgestream with --cri-socket).
Direct = the same Python client to nginx over TLS, or to containerd's streaming URL.

Prints one line per measurement (median of --runs) and the ratios. A program, not a test: it
asserts nothing about speed. Needs root (containerd) and a Release build for meaningful figures.
"""
import argparse
import asyncio
import os
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration", "lib"))
sys.path.insert(0, os.path.join(HERE, "..", "integration", "peers"))

NGINX_CONF = """
user root;
worker_processes 1;
daemon off;
pid {d}/nginx.pid;
error_log {d}/nginx-error.log;
events {{ worker_connections 256; }}
http {{
  log_format reuse '$connection $ssl_session_reused $http_host $request_uri';
  access_log {d}/access.log reuse;
  client_body_temp_path {d}/tmp; proxy_temp_path {d}/tmp; fastcgi_temp_path {d}/tmp;
  uwsgi_temp_path {d}/tmp; scgi_temp_path {d}/tmp;
  server {{
    listen 127.0.0.1:{port} ssl;
    ssl_certificate {pki}/kubelet.crt;
    ssl_certificate_key {pki}/kubelet.key;
    ssl_client_certificate {pki}/kubelet-ca.crt;
    ssl_verify_client on;
    keepalive_requests 100000;
    ssl_session_cache shared:bench:1m;
    location /containerLogs/ {{ root {d}; default_type text/plain; rewrite ^ /logs.txt break; }}
    location = /metrics {{ root {d}; default_type text/plain; rewrite ^ /metrics.txt break; }}
  }}
}}
"""


class Client:
    """One TLS connection, keep-alive, raw reads (the client costs the same either way)."""

    def __init__(self, port, ctx):
        raw = socket.create_connection(("127.0.0.1", port), timeout=60)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.s = ctx.wrap_socket(raw)

    def get(self, target, host):
        import harness as h
        self.s.sendall(h.head("GET", target, [("Host", host)]))
        status, hdrs, rest = h.read_head(self.s)
        body = h.read_body(self.s, hdrs, rest)
        return status, body

    def close(self):
        self.s.close()


def timed(fn, runs):
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def ws_exec_stdout(url, ctx, nbytes, host=None, port=None, server_hostname=None):
    import websockets

    async def go():
        got = 0
        kw = {"host": host, "port": port, "server_hostname": server_hostname, "ssl": ctx}
        kw = {k: v for k, v in kw.items() if v is not None}
        async with websockets.connect(url, subprotocols=["v4.channel.k8s.io"], max_size=None,
                                      open_timeout=30, **kw) as ws:
            async for msg in ws:
                if msg and msg[0] == 1:
                    got += len(msg) - 1
                elif msg and msg[0] == 3:
                    break
        return got
    got = asyncio.run(go())
    if got != nbytes:
        raise SystemExit("exec stdout: %d bytes, want %d" % (got, nbytes))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "..", "build", "release"))
    ap.add_argument("--mib", type=int, default=100)
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    os.environ["ST_BIN_DIR"] = os.path.abspath(args.build)
    import harness as h
    from containerd import Containerd, free_port
    import images

    nbytes = args.mib << 20
    env = h.Env("bench", nodes=("edge-1", "edge-2"))
    ctd = Containerd(os.path.join(env.dir, "ctd"))
    nginx = None
    sandbox = None
    tool = os.path.join(h.BIN, "cri", "stream-cri")
    try:
        # nginx as edge-1's kubelet
        d = os.path.join(env.dir, "nginx")
        os.makedirs(os.path.join(d, "tmp"))
        line = b"2026-11-22T10:00:00.000000000Z a log line of some typical length, " \
               b"with a counter and a few words\n"
        with open(os.path.join(d, "logs.txt"), "wb") as f:
            f.write((line * (nbytes // len(line) + 1))[:nbytes])
        with open(os.path.join(d, "metrics.txt"), "wb") as f:
            for i in range(100):
                f.write(b'kubelet_metric_total{node="edge-1",n="%03d"} %d\n' % (i, i * 7))
        nport = free_port()
        with open(os.path.join(d, "nginx.conf"), "w") as f:
            f.write(NGINX_CONF.format(d=d, port=nport, pki=env.pki))
        nginx = subprocess.Popen(["nginx", "-c", os.path.join(d, "nginx.conf"), "-p", d],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while socket.socket().connect_ex(("127.0.0.1", nport)) != 0:
            if time.monotonic() > deadline or nginx.poll() is not None:
                raise SystemExit("nginx did not start: " +
                                 open(os.path.join(d, "nginx-error.log")).read())
            time.sleep(0.05)

        # containerd with a pod for edge-2
        ctd.start()
        images.import_into(ctd, images.build(os.path.join(env.dir, "images")))
        logs = os.path.join(env.dir, "pods", "default_bench_bench-uid")
        os.makedirs(logs)
        cri = lambda *a: subprocess.run([tool, "--socket", ctd.socket] + list(a),  # noqa: E731
                                        check=True, capture_output=True).stdout.decode().strip()
        sandbox = cri("run-pod", "default", "bench", "bench-uid", logs)
        cid = cri("create-container", "default", "bench", "bench-uid", logs, sandbox, "app",
                  images.BUSYBOX_IMAGE, "--", "sh", "-c",
                  "yes 'a log line of some typical length, with a counter and a few words' | "
                  "head -c %d; echo; echo logs-done; exec sleep 3600" % nbytes)
        log_path = os.path.join(logs, "app", "0.log")
        deadline = time.monotonic() + 300
        while b"logs-done" not in open(log_path, "rb").read()[-200:]:
            if time.monotonic() > deadline:
                raise SystemExit("the container did not write its logs")
            time.sleep(0.2)

        cloud = h.start_cloudstream(env, extra=["--log-level", "warn"])
        kubelet = type("K", (), {"port": nport})()
        h.start_edgestream(env, cloud, kubelet, node="edge-1",
                           extra=["--log-level", "warn"])
        h.start_edgestream(env, cloud, None, node="edge-2",
                           extra=["--cri-socket", ctd.socket, "--log-level", "warn"])
        sport = cloud.ports["stream"]
        api_ctx = h.Api(env, sport).ctx
        kctx = ssl.create_default_context(cafile=env.path("kubelet-ca.crt"))
        kctx.check_hostname = False
        kctx.load_cert_chain(env.path("edgestream-kubelet-client.crt"),
                             env.path("edgestream-kubelet-client.key"))
        results = []

        def bulk(name, port, ctx, host, target, want=None):
            def once():
                c = Client(port, ctx)
                st, body = c.get(target, host)
                c.close()
                if st != 200 or (want is not None and len(body) != want):
                    raise SystemExit("%s: %d, %d bytes" % (name, st, len(body)))
            return timed(once, args.runs)

        t_direct = bulk("logs direct", nport, kctx, "127.0.0.1", "/containerLogs/default/x/y",
                        nbytes)
        t_chain = bulk("logs chain", sport, api_ctx, "edge-1:10350",
                       "/containerLogs/default/x/y", nbytes)
        results.append(("%d MiB of logs (kubelet = nginx)" % args.mib, t_direct, t_chain, nbytes))

        cri_bytes = nbytes + len(b"\nlogs-done\n")
        t_cri = bulk("cri logs chain", sport, api_ctx, "edge-2:10350",
                     "/containerLogs/default/bench/app", cri_bytes)
        results.append(("%d MiB of logs from the CRI file (direct = nginx, same bytes)"
                        % args.mib, t_direct * cri_bytes / nbytes, t_cri, cri_bytes))

        cmd = "command=head&command=-c&command=%d&command=/dev/zero&output=1" % nbytes

        def exec_direct():
            url = cri("exec-url", cid, "head", "-c", str(nbytes), "/dev/zero")
            ws_exec_stdout(url.replace("http://", "ws://"), None, nbytes)

        def exec_chain():
            ws_exec_stdout("wss://edge-2:10350/exec/default/bench/app?" + cmd, api_ctx, nbytes,
                           host="127.0.0.1", port=sport, server_hostname="localhost")
        results.append(("%d MiB of exec stdout (websocket v4, containerd)" % args.mib,
                        timed(exec_direct, args.runs), timed(exec_chain, args.runs), nbytes))

        def latencies(port, ctx, host):
            # A connection per request on both paths: the edge asks its backend with
            # Connection: close (one backend connection per stream), and the backend's
            # "Connection: close" reaches the client, as it does from a real kubelet.
            out = []
            for i in range(args.requests):
                t0 = time.perf_counter()
                c = Client(port, ctx)
                try:
                    st, body = c.get("/metrics", host)
                except h.Fail as e:
                    raise SystemExit("/metrics #%d on %s: %s" % (i, host, e))
                out.append(time.perf_counter() - t0)
                c.close()
                if st != 200:
                    raise SystemExit("metrics: %d" % st)
            out.sort()
            return out[len(out) // 2], out[int(len(out) * 0.99) - 1]

        latencies(nport, kctx, "127.0.0.1")  # warm both paths
        latencies(sport, api_ctx, "edge-1:10350")
        d50, d99 = latencies(nport, kctx, "127.0.0.1")
        c50, c99 = latencies(sport, api_ctx, "edge-1:10350")

        # The edge's requests carry Host 127.0.0.1:PORT, the direct client's 127.0.0.1.
        chain_lines = [line.split() for line in open(os.path.join(d, "access.log"))
                       if line.split()[3] == "/metrics" and ":" in line.split()[2]]
        conns = {f[0]: f[1] for f in chain_lines}
        print("chain /metrics requests: %d over %d kubelet connections (%d of them resumed "
              "TLS sessions)" % (len(chain_lines), len(conns),
                                 sum(1 for r in conns.values() if r == "r")))
        print("\nthrough cloudstream + edgestream vs direct, median of %d runs (%s build)"
              % (args.runs, os.path.basename(os.path.abspath(args.build))))
        print("%-62s %10s %10s %7s" % ("", "direct", "chain", "ratio"))
        for name, td, tc, n in results:
            print("%-62s %7.0f MB/s %6.0f MB/s %6.2f" % (name, n / td / 1e6, n / tc / 1e6,
                                                        td / tc))
        print("%-62s %7.2f ms %8.2f ms %+6.2f ms" % (
            "%d sequential /metrics (TLS connect + GET): p50" % args.requests, d50 * 1e3, c50 * 1e3,
            (c50 - d50) * 1e3))
        print("%-62s %7.2f ms %8.2f ms %+6.2f ms" % ("  p99", d99 * 1e3, c99 * 1e3,
                                                    (c99 - d99) * 1e3))
    finally:
        if sandbox:
            subprocess.run([tool, "--socket", ctd.socket, "remove-pod", sandbox],
                           capture_output=True)
        if nginx:
            nginx.terminate()
            nginx.wait()
        ctd.stop()
        env.close()


if __name__ == "__main__":
    main()
