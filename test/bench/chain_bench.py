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
import asyncio
import os
import socket
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402

KUBELET_LOCATIONS = """    keepalive_requests 100000;
    ssl_session_cache shared:bench:1m;
    location /containerLogs/ {{ root {d}; default_type text/plain; rewrite ^ /logs.txt break; }}
    location = /metrics {{ root {d}; default_type text/plain; rewrite ^ /metrics.txt break; }}
"""
# The access log tells the edge's kubelet connections apart and whether TLS resumed.
ACCESS_LOG = """log_format reuse '$connection $ssl_session_reused $http_host $request_uri';
  access_log {d}/access.log reuse;"""


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
    ap = bl.parser(__doc__, "release", mib=100, runs=3)
    ap.add_argument("--requests", type=int, default=300)
    args = ap.parse_args()
    h = bl.use_build(args.build)

    with bl.run_env("bench", nodes=("edge-1", "edge-2")) as env, bl.Pod(env) as pod:
        run(args, h, env, pod)


def run(args, h, env, pod):
    nbytes = args.mib << 20
    # nginx as edge-1's kubelet
    d = os.path.join(env.dir, "nginx")
    os.makedirs(d)
    bl.write_lines(os.path.join(d, "logs.txt"), nbytes)
    with open(os.path.join(d, "metrics.txt"), "wb") as f:
        for i in range(100):
            f.write(b'kubelet_metric_total{node="edge-1",n="%03d"} %d\n' % (i, i * 7))
    nginx = bl.start_kubelet_nginx(env, d, KUBELET_LOCATIONS, name="nginx",
                                   connections=256, access_log=ACCESS_LOG)
    nport = nginx.port

    # containerd with a pod for edge-2
    pod.start()
    cri = pod.cri
    cid = pod.container(
        "sh", "-c",
        "yes 'a log line of some typical length, with a counter and a few words' | "
        "head -c %d; echo; echo logs-done; exec sleep 3600" % nbytes)
    log_path = os.path.join(pod.logs, "app", "0.log")
    deadline = time.monotonic() + 300
    while b"logs-done" not in open(log_path, "rb").read()[-200:]:
        if time.monotonic() > deadline:
            raise SystemExit("the container did not write its logs")
        time.sleep(0.2)

    cloud = h.start_cloudstream(env, extra=["--log-level", "warn"])
    h.start_edgestream(env, cloud, nginx, node="edge-1",
                       extra=["--log-level", "warn"])
    h.start_edgestream(env, cloud, None, node="edge-2",
                       extra=["--cri-socket", pod.ctd.socket, "--log-level", "warn"])
    sport = cloud.ports["stream"]
    api_ctx = h.Api(env, sport).ctx
    kctx = bl.client_ctx(env.pki, "edgestream-kubelet-client", "kubelet-ca.crt")
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


if __name__ == "__main__":
    main()
