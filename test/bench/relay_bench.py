#!/usr/bin/python3
"""Bulk throughput and CPU per GiB of each relay, against a direct connection and one nginx TLS
proxy hop measured in the same run.

    test/bench/relay_bench.py [--build build/rel] [--mib 1024] [--runs 3] [--baseline DIR]

Everything real, on 127.0.0.1, with curl as the client (it is not the bound: it reads a GiB
over TLS in well under a CPU-second):
  - direct:    curl → nginx playing the node's kubelet (TLS, client certificate required)
  - nginx hop: curl → nginx TLS proxy (a second nginx, set up like an apiserver's proxy hop:
               TLS in, TLS with a client certificate out) → the kubelet nginx
  - chain:     curl → cloudstream's stream port → tunnel (wss) → edgestream → the kubelet nginx
For the chain, the CPU time each daemon spent (utime + stime from /proc, read before and after)
is divided by the bytes moved. Prints the median of --runs per path and the ratios. With
--baseline DIR (another Release build, e.g. of the commit before a change), a second chain of
that build's daemons is measured in the same run, its runs alternating with the first's, and
both are printed side by side. A program, not a test: it asserts nothing about speed. Use a
Release build.
"""
import argparse
import os
import socket
import ssl
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration", "lib"))

KUBELET_CONF = """
user root;
worker_processes 1;
daemon off;
pid {d}/kubelet.pid;
error_log {d}/kubelet-error.log;
events {{ worker_connections 64; }}
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
    keepalive_requests 1000000;
    location /containerLogs/ {{ root {d}; default_type text/plain; rewrite ^ /big.txt break; }}
    location = /metrics {{ root {d}; default_type text/plain; rewrite ^ /small.txt break; }}
  }}
}}
"""

PROXY_CONF = """
user root;
worker_processes 1;
daemon off;
pid {d}/proxy.pid;
error_log {d}/proxy-error.log;
events {{ worker_connections 64; }}
http {{
  access_log off;
  client_body_temp_path {d}/tmp; proxy_temp_path {d}/tmp; fastcgi_temp_path {d}/tmp;
  uwsgi_temp_path {d}/tmp; scgi_temp_path {d}/tmp;
  server {{
    listen 127.0.0.1:{port} ssl;
    ssl_certificate {pki}/cloudstream-stream.crt;
    ssl_certificate_key {pki}/cloudstream-stream.key;
    location / {{
      proxy_pass https://127.0.0.1:{kport};
      proxy_ssl_certificate {pki}/edgestream-kubelet-client.crt;
      proxy_ssl_certificate_key {pki}/edgestream-kubelet-client.key;
      proxy_buffering off;
      proxy_http_version 1.1;
    }}
  }}
}}
"""


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, proc, log):
    deadline = time.monotonic() + 10
    while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit("nginx did not start: " + open(log).read())
        time.sleep(0.05)


SYSCALLS = ("read", "write", "recvfrom", "sendto", "setsockopt", "epoll_wait")


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def syscalls(pid):
    """read-like and write-like system calls so far (/proc/PID/io: syscr, syscw)."""
    with open("/proc/%d/io" % pid) as f:
        io = dict(line.split(": ") for line in f.read().splitlines())
    return int(io["syscr"]), int(io["syscw"])


def curl(url, args, host=None):
    argv = ["curl", "-sS", "-k", "-o", "/dev/null", "-w", "%{http_code} %{size_download}"]
    if host:
        argv += ["-H", "Host: " + host]
    t0 = time.perf_counter()
    out = subprocess.run(argv + list(args) + [url], check=True, capture_output=True,
                         text=True).stdout.split()
    return time.perf_counter() - t0, int(out[0]), int(out[1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "..", "build", "rel"))
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--requests", type=int, default=2000,
                    help="keep-alive GETs of a 4 KiB answer, on one connection, per path")
    ap.add_argument("--baseline", metavar="DIR",
                    help="a second build whose chain is measured alternately, for before/after")
    ap.add_argument("--perf", metavar="DIR",
                    help="record each daemon with `perf record` during the chain runs into DIR")
    ap.add_argument("--syscalls", action="store_true",
                    help="count each daemon's system calls by kind with `perf stat` during "
                         "the chain runs (/proc/PID/io counts read() and write() only, not "
                         "send() and recv())")
    args = ap.parse_args()
    os.environ["ST_BIN_DIR"] = os.path.abspath(args.build)
    import harness as h

    nbytes = args.mib << 20
    env = h.Env("relay-bench")
    procs = []
    try:
        d = os.path.join(env.dir, "www")
        os.makedirs(os.path.join(d, "tmp"))
        line = b"2026-11-22T10:00:00.000000000Z a log line of some typical length, " \
               b"with a counter and a few words\n"
        block = (line * (4 << 20 // len(line) + 1))[:4 << 20]
        with open(os.path.join(d, "big.txt"), "wb") as f:
            for _ in range(nbytes // len(block)):
                f.write(block)
            f.write(block[:nbytes % len(block)])
        with open(os.path.join(d, "small.txt"), "wb") as f:
            f.write((line * 64)[:4096])
        kport, pport = free_port(), free_port()
        for name, conf in (("kubelet", KUBELET_CONF), ("proxy", PROXY_CONF)):
            path = os.path.join(d, name + ".conf")
            with open(path, "w") as f:
                f.write(conf.format(d=d, port=kport if name == "kubelet" else pport,
                                    kport=kport, pki=env.pki))
            p = subprocess.Popen(["nginx", "-c", path, "-p", d], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
            procs.append(p)
            wait_port(kport if name == "kubelet" else pport, p,
                      os.path.join(d, name + "-error.log"))

        cloud = h.start_cloudstream(env, extra=["--log-level", "warn"])
        kubelet = type("K", (), {"port": kport})()
        edge = h.start_edgestream(env, cloud, kubelet, extra=["--log-level", "warn"])
        base = None
        if args.baseline:
            h.BIN = os.path.abspath(args.baseline)
            bcloud = h.start_cloudstream(env, extra=["--log-level", "warn"], name="cloud-base")
            bedge = h.start_edgestream(env, bcloud, kubelet, extra=["--log-level", "warn"],
                                       name="edge-base")
            h.BIN = os.path.abspath(args.build)
            base = (bcloud, bedge)
        target = "/containerLogs/default/x/y"
        api = ["--cert", env.path("apiserver-kubelet-client.crt"),
               "--key", env.path("apiserver-kubelet-client.key")]
        kub = ["--cert", env.path("edgestream-kubelet-client.crt"),
               "--key", env.path("edgestream-kubelet-client.key")]

        def measure(name, url, cargs, host=None, pids=()):
            times, cpus, calls = [], [], []
            perfs = []
            if args.perf and pids:
                os.makedirs(args.perf, exist_ok=True)
                for who, pid in zip(("cloudstream", "edgestream"), pids):
                    perfs.append(subprocess.Popen(
                        ["perf", "record", "-g", "-q", "-o", os.path.join(args.perf, who + ".data"),
                         "-p", str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                time.sleep(0.5)
            stats = []
            if args.syscalls and pids:
                for pid in pids:
                    stats.append(subprocess.Popen(
                        ["perf", "stat", "-x", ",", "-e", ",".join(
                            "syscalls:sys_enter_" + c for c in SYSCALLS), "-p", str(pid)],
                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
                time.sleep(0.5)
            for _ in range(args.runs):
                before = [cpu_seconds(p) for p in pids]
                sys_before = [syscalls(p) for p in pids]
                t, status, size = curl(url, cargs, host)
                after = [cpu_seconds(p) for p in pids]
                sys_after = [syscalls(p) for p in pids]
                calls.append([(a[0] - b[0], a[1] - b[1]) for a, b in zip(sys_after, sys_before)])
                if status != 200 or size != nbytes:
                    raise SystemExit("%s: status %d, %d bytes of %d" % (name, status, size,
                                                                      nbytes))
                times.append(t)
                cpus.append([a - b for a, b in zip(after, before)])
            for p in perfs:
                p.send_signal(2)
                p.wait()
            counted = []
            for p in stats:
                p.send_signal(2)
                err = p.communicate()[1]
                counts = {}
                for line in err.splitlines():
                    f = line.split(",")
                    if len(f) > 2 and f[2].startswith("syscalls:sys_enter_"):
                        counts[f[2][len("syscalls:sys_enter_"):]] = int(f[0]) \
                            if f[0].isdigit() else 0
                counted.append(counts)
            if counted:  # per MiB, the last call of each chain
                measure.counted[name] = [{c: n / float(args.mib * args.runs)
                                          for c, n in counts.items()} for counts in counted]
            t = statistics.median(times)
            cpu = [statistics.median(c[i] for c in cpus) for i in range(len(pids))]
            measure.calls = calls[len(calls) // 2] if calls else None
            return t, cpu

        measure.counted = {}
        gib = nbytes / float(1 << 30)
        t_direct, _ = measure("direct", "https://127.0.0.1:%d%s" % (kport, target), kub)
        t_hop, _ = measure("nginx hop", "https://127.0.0.1:%d%s" % (pport, target), api)
        chain_url = "https://127.0.0.1:%d" + target
        if base is None:
            t_chain, (c_cloud, c_edge) = measure(
                "chain", chain_url % cloud.ports["stream"], api, host="edge-1:10350",
                pids=(cloud.pid, edge.pid))
        else:  # one run of each chain in turn, so both see the same load
            runs, args.runs = args.runs, 1
            mine, theirs, calls_mine = [], [], []
            for _ in range(runs):
                mine.append(measure("chain", chain_url % cloud.ports["stream"], api,
                                    host="edge-1:10350", pids=(cloud.pid, edge.pid)))
                calls_mine.append(measure.calls)
                theirs.append(measure("baseline chain", chain_url % base[0].ports["stream"],
                                      api, host="edge-1:10350",
                                      pids=(base[0].pid, base[1].pid)))
            args.runs = runs
            med = lambda xs, f: statistics.median(f(x) for x in xs)  # noqa: E731
            t_chain = med(mine, lambda x: x[0])
            c_cloud, c_edge = med(mine, lambda x: x[1][0]), med(mine, lambda x: x[1][1])
            tb = med(theirs, lambda x: x[0])
            bc, be = med(theirs, lambda x: x[1][0]), med(theirs, lambda x: x[1][1])
            measure.calls = calls_mine[len(calls_mine) // 2]
        def latency(port, certfile, keyfile, host):
            ctx = ssl.create_default_context(cafile=env.path("kubelet-ca.crt"))
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            ctx.load_cert_chain(certfile, keyfile)
            raw = socket.create_connection(("127.0.0.1", port), timeout=30)
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s = ctx.wrap_socket(raw)
            latency.suites.append(s.cipher()[0])  # Python offers AES-256-GCM first
            req = ("GET /metrics HTTP/1.1\r\nHost: %s\r\n\r\n" % host).encode()
            times = []
            for i in range(args.requests + 50):
                t0 = time.perf_counter()
                s.sendall(req)
                status, hdrs, rest = h.read_head(s)
                body = h.read_body(s, hdrs, rest)
                dt = time.perf_counter() - t0
                if status != 200 or len(body) != 4096:
                    raise SystemExit("GET /metrics on %d: %d, %d bytes" % (port, status,
                                                                          len(body)))
                if i >= 50:  # the first ones warm the connections up
                    times.append(dt)
            s.close()
            times.sort()
            return times[len(times) // 2], times[int(len(times) * 0.99)]

        latency.suites = []
        d50, d99 = latency(kport, env.path("edgestream-kubelet-client.crt"),
                           env.path("edgestream-kubelet-client.key"), "127.0.0.1")
        c50, c99 = latency(cloud.ports["stream"], env.path("apiserver-kubelet-client.crt"),
                           env.path("apiserver-kubelet-client.key"), "edge-1:10350")
        mbps = lambda t: nbytes / t / 1e6  # noqa: E731
        print("%d MiB, median of %d runs, curl as the client" % (args.mib, args.runs))
        print("  direct      %8.1f MB/s" % mbps(t_direct))
        print("  nginx hop   %8.1f MB/s  = %.2fx direct" % (mbps(t_hop), t_direct / t_hop))
        print("  chain       %8.1f MB/s  = %.2fx direct, %.2fx the nginx hop" %
              (mbps(t_chain), t_direct / t_chain, t_hop / t_chain))
        print("  CPU per GiB: cloudstream %.2f s, edgestream %.2f s (edge/cloud %.2f)" %
              (c_cloud / gib, c_edge / gib, c_edge / c_cloud if c_cloud else float("inf")))
        if base is not None:
            print("  baseline    %8.1f MB/s  = %.2fx direct, %.2fx the nginx hop (%s)" %
                  (mbps(tb), t_direct / tb, t_hop / tb, args.baseline))
            print("  CPU per GiB, baseline: cloudstream %.2f s, edgestream %.2f s "
                  "(edge/cloud %.2f); chain / baseline throughput %.2f" %
                  (bc / gib, be / gib, be / bc if bc else float("inf"), tb / t_chain))
        (cr, cw), (er, ew) = measure.calls
        print("  system calls per MiB (reads/writes, one run): cloudstream %.0f/%.0f, "
              "edgestream %.0f/%.0f" % (cr / args.mib, cw / args.mib, er / args.mib,
                                        ew / args.mib))
        for name, counted in sorted(measure.counted.items(), reverse=True):
            for who, counts in zip(("cloudstream", "edgestream"), counted):
                print("  %s, %s: system calls per MiB (perf stat): %s" % (name, who, ", ".join(
                    "%s %.1f" % (c, counts.get(c, 0)) for c in SYSCALLS)))
        print("TLS suite a client offering AES-256-GCM first gets: kubelet nginx %s, "
              "cloudstream's stream port %s" % tuple(latency.suites))
        print("keep-alive GET of 4 KiB, %d on one connection: direct p50 %.0f µs p99 %.0f µs; "
              "chain p50 %.0f µs p99 %.0f µs; the chain adds %.0f µs at p50, %.0f µs at p99" %
              (args.requests, d50 * 1e6, d99 * 1e6, c50 * 1e6, c99 * 1e6, (c50 - d50) * 1e6,
               (c99 - d99) * 1e6))
    finally:
        for p in procs:
            p.terminate()
            p.wait()
        env.close()


if __name__ == "__main__":
    main()
