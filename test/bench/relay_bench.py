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
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402

KUBELET_LOCATIONS = """    keepalive_requests 1000000;
    location /containerLogs/ {{ root {d}; default_type text/plain; rewrite ^ /big.txt break; }}
    location = /metrics {{ root {d}; default_type text/plain; rewrite ^ /small.txt break; }}
"""

PROXY_SERVER = """    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_certificate {pki}/cloudstream-stream.crt;
    ssl_certificate_key {pki}/cloudstream-stream.key;
    location / {{
      proxy_pass https://127.0.0.1:{kport};
      proxy_ssl_protocols TLSv1.2 TLSv1.3;
      proxy_ssl_certificate {pki}/edgestream-kubelet-client.crt;
      proxy_ssl_certificate_key {pki}/edgestream-kubelet-client.key;
      proxy_buffering off;
      proxy_http_version 1.1;
    }}
"""

SYSCALLS = ("read", "write", "recvfrom", "sendto", "setsockopt", "epoll_wait")


def start_kubelet(env, nbytes, http2=False):
    """nginx as the node's kubelet in @env.dir/www: GET /containerLogs/... answers @nbytes of
    log lines, GET /metrics 4 KiB; ALPN h2 offered too when @http2, as a real kubelet does.
    Returns the process (its port in .port)."""
    d = os.path.join(env.dir, "www")
    os.makedirs(d)
    bl.write_lines(os.path.join(d, "big.txt"), nbytes)
    bl.write_lines(os.path.join(d, "small.txt"), 4096)
    return bl.start_kubelet_nginx(env, d, KUBELET_LOCATIONS, http2=http2)


def main():
    ap = bl.parser(__doc__, "rel", mib=1024, runs=3)
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
    ap.add_argument("--kubelet-h2", action="store_true",
                    help="the kubelet nginx offers HTTP/2 (ALPN h2), as a real kubelet does: the "
                         "edge's GETs then go over its HTTP/2 client (h2conn.c) instead of "
                         "HTTP/1.1 (conn.c); curl's direct leg stays on HTTP/1.1")
    bl.add_congestion(ap)
    args = ap.parse_args()
    bl.congestion_netns(args.congestion)
    h = bl.use_build(args.build)

    nbytes = args.mib << 20
    with bl.run_env("relay-bench") as env:
        kubelet = start_kubelet(env, nbytes, args.kubelet_h2)
        kport = kubelet.port
        pport = bl.start_nginx(env, os.path.join(env.dir, "www"), "proxy", PROXY_SERVER,
                               kport=kport).port
        cloud = h.start_cloudstream(env, extra=["--log-level", "warn"])
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
        kub = (["--http1.1"] if args.kubelet_h2 else []) + [
               "--cert", env.path("edgestream-kubelet-client.crt"),
               "--key", env.path("edgestream-kubelet-client.key")]

        # nginx's worker: where the kubelet's side of the bytes is paid (on loopback the receive
        # work of a segment runs in whichever process makes its sender transmit).
        with open("/proc/%d/task/%d/children" % (kubelet.pid, kubelet.pid)) as f:
            kworker = int(f.read().split()[0])
        kcpu = {}

        def measure(name, url, cargs, host=None, pids=()):
            times, cpus, calls, kcpus = [], [], [], []
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
                before = [bl.cpu_seconds(p) for p in pids]
                k_before = bl.cpu_seconds(kworker)
                sys_before = [bl.syscalls(p) for p in pids]
                t, status, size = bl.curl(url, cargs, host)
                kcpus.append(bl.cpu_seconds(kworker) - k_before)
                after = [bl.cpu_seconds(p) for p in pids]
                sys_after = [bl.syscalls(p) for p in pids]
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
            kcpu.setdefault(name, []).extend(kcpus)
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
            for who, xs in (("chain", mine), ("baseline", theirs)):
                print("  %-8s runs, CPU per GiB cloudstream / edgestream: %s" % (who, "  ".join(
                    "%.2f/%.2f" % (x[1][0] / gib, x[1][1] / gib) for x in xs)))

        # Python offers AES-256-GCM first: the suites say what each server picks.
        d50, d99, d_suite = bl.keepalive_latency(
            kport, bl.client_ctx(env.pki, "edgestream-kubelet-client", None), "127.0.0.1",
            args.requests)
        # Each daemon's CPU per GET (the 50 warm-up GETs counted too): where a path's extra
        # latency is work rather than loop rounds. /proc counts clock ticks, so the figure is
        # only as fine as one tick over the GETs (10 ms / 2,050 = 5 µs at the default count).
        cpu_before = [bl.cpu_seconds(p) for p in (cloud.pid, edge.pid)]
        c50, c99, c_suite = bl.keepalive_latency(
            cloud.ports["stream"], bl.client_ctx(env.pki, ca=None), "edge-1:10350", args.requests)
        gets = args.requests + 50
        cpu_get = [(bl.cpu_seconds(p) - b) / gets * 1e6
                   for p, b in zip((cloud.pid, edge.pid), cpu_before)]
        if base is not None:  # the baseline's chain right after, on the same kubelet
            cpu_before = [bl.cpu_seconds(p) for p in (base[0].pid, base[1].pid)]
            b50, b99, _ = bl.keepalive_latency(
                base[0].ports["stream"], bl.client_ctx(env.pki, ca=None), "edge-1:10350",
                args.requests)
            cpu_base = [(bl.cpu_seconds(p) - b) / gets * 1e6
                        for p, b in zip((base[0].pid, base[1].pid), cpu_before)]
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
        print("  the kubelet nginx's CPU per GiB: %s" % ", ".join(
            "%s %.2f s" % (n, statistics.median(kcpu[n]) / gib) for n in
            ("direct", "nginx hop", "chain", "baseline chain") if n in kcpu))
        (cr, cw), (er, ew) = measure.calls
        print("  system calls per MiB (reads/writes, one run): cloudstream %.0f/%.0f, "
              "edgestream %.0f/%.0f" % (cr / args.mib, cw / args.mib, er / args.mib,
                                        ew / args.mib))
        for name, counted in sorted(measure.counted.items(), reverse=True):
            for who, counts in zip(("cloudstream", "edgestream"), counted):
                print("  %s, %s: system calls per MiB (perf stat): %s" % (name, who, ", ".join(
                    "%s %.1f" % (c, counts.get(c, 0)) for c in SYSCALLS)))
        print("TLS suite a client offering AES-256-GCM first gets: kubelet nginx %s, "
              "cloudstream's stream port %s" % (d_suite, c_suite))
        print("keep-alive GET of 4 KiB, %d on one connection: direct p50 %.0f µs p99 %.0f µs; "
              "chain p50 %.0f µs p99 %.0f µs; the chain adds %.0f µs at p50, %.0f µs at p99" %
              (args.requests, d50 * 1e6, d99 * 1e6, c50 * 1e6, c99 * 1e6, (c50 - d50) * 1e6,
               (c99 - d99) * 1e6))
        print("  CPU per keep-alive GET: cloudstream %.1f µs, edgestream %.1f µs (one clock tick "
              "over the GETs: %.1f µs)" % (cpu_get[0], cpu_get[1], 1e6 / bl.TCK / gets))
        if base is not None:
            print("  baseline chain p50 %.0f µs p99 %.0f µs, adds %.0f µs at p50, %.0f µs at p99; "
                  "CPU per GET: cloudstream %.1f µs, edgestream %.1f µs" %
                  (b50 * 1e6, b99 * 1e6, (b50 - d50) * 1e6, (b99 - d99) * 1e6, cpu_base[0],
                   cpu_base[1]))


if __name__ == "__main__":
    main()
