#!/usr/bin/python3
"""Bulk throughput and CPU per GiB of each relay, against a direct connection and one nginx TLS
proxy hop measured in the same run.

    test/bench/relay_bench.py [--build build/rel] [--mib 1024] [--runs 3] [--baseline DIR] [--floor]

Everything real, on 127.0.0.1, with curl as the client (it is not the bound: it reads a GiB
over TLS in well under a CPU-second):
  - direct:    curl → nginx playing the node's kubelet (TLS, client certificate required)
  - nginx hop: curl → nginx TLS proxy (a second nginx, set up like an apiserver's proxy hop:
               TLS in, TLS with a client certificate out) → the kubelet nginx
  - floor pair (--floor; it adds ~40 % to the bench's time): curl → tls_relay_floor →
               tls_relay_floor → the kubelet nginx: two relays that only terminate and
               originate TLS (test/bench/tls_relay_floor.c: no framing, no parsing, one
               SSL_write and one send() per read round), the lower bound for any pair of TLS
               relays on these cores. HTTP/1.1 with the direct leg's curl arguments (also under
               --kubelet-h2); the relays pass ALPN through.
  - chain:     curl → cloudstream's stream port → tunnel (wss) → edgestream → the kubelet nginx
For the chain and the floor pair, the CPU time each relay spent (utime + stime from /proc, read
before and after) is divided by the bytes moved. Each round runs every leg once in turn (so
drift hits all alike); prints the median of --runs per leg and the ratios, the floor's beside
the chain's. With --baseline DIR (another Release build, e.g. of the commit before a change), a
second chain of that build's daemons is one more leg of each round, printed side by side. A
program, not a test: it asserts nothing about speed. Use a Release build.
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
    ap.add_argument("--floor", action="store_true",
                    help="one more leg per round: the floor pair (curl → tls_relay_floor → "
                         "tls_relay_floor → the kubelet nginx), what any pair of TLS-terminating "
                         "relays costs here (adds about 40 %% to the bench's time, so not by "
                         "default)")
    ap.add_argument("--floor-buffer-kib", type=int, metavar="N",
                    help="plaintext per read round of the floor relays (tls_relay_floor "
                         "--buffer-kib; its default when not given)")
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
        floor = None if not args.floor else bl.start_floor_pair(
            env, kport, buffer_kib=args.floor_buffer_kib)
        target = "/containerLogs/default/x/y"
        api = ["--cert", env.path("apiserver-kubelet-client.crt"),
               "--key", env.path("apiserver-kubelet-client.key")]
        kub = (["--http1.1"] if args.kubelet_h2 else []) + [
               "--cert", env.path("edgestream-kubelet-client.crt"),
               "--key", env.path("edgestream-kubelet-client.key")]

        # The legs, one run of each in turn per round, so all see the same load. A leg's pids
        # are the relays whose CPU and system calls are read around its runs; its whos name them.
        chain_url = "https://127.0.0.1:%d" + target
        legs = [("direct", "https://127.0.0.1:%d%s" % (kport, target), kub, None, (), ()),
                ("nginx hop", "https://127.0.0.1:%d%s" % (pport, target), api, None, (), ())]
        if floor:  # the same curl arguments as direct: HTTP/1.1 through both relays
            legs.append(("floor pair", "https://127.0.0.1:%d%s" % (floor[0].port, target), kub,
                         None, (floor[0].pid, floor[1].pid), ("floor-in", "floor-out")))
        legs.append(("chain", chain_url % cloud.ports["stream"], api, "edge-1:10350",
                     (cloud.pid, edge.pid), ("cloudstream", "edgestream")))
        if base is not None:
            legs.append(("baseline chain", chain_url % base[0].ports["stream"], api,
                         "edge-1:10350", (base[0].pid, base[1].pid),
                         ("baseline-cloudstream", "baseline-edgestream")))

        # nginx's worker: where the kubelet's side of the bytes is paid (on loopback the receive
        # work of a segment runs in whichever process makes its sender transmit).
        with open("/proc/%d/task/%d/children" % (kubelet.pid, kubelet.pid)) as f:
            kworker = int(f.read().split()[0])
        kcpu = {}

        def once(name, url, cargs, host, pids):
            """One download: (seconds, CPU-s of each of @pids, /proc/PID/io call counts); the
            kubelet nginx's CPU-s go to kcpu[@name]."""
            before = [bl.cpu_seconds(p) for p in pids]
            k_before = bl.cpu_seconds(kworker)
            sys_before = [bl.syscalls(p) for p in pids]
            t, status, size = bl.curl(url, cargs, host)
            kcpu.setdefault(name, []).append(bl.cpu_seconds(kworker) - k_before)
            after = [bl.cpu_seconds(p) for p in pids]
            sys_after = [bl.syscalls(p) for p in pids]
            if status != 200 or size != nbytes:
                raise SystemExit("%s: status %d, %d bytes of %d" % (name, status, size, nbytes))
            return (t, [a - b for a, b in zip(after, before)],
                    [(a[0] - b[0], a[1] - b[1]) for a, b in zip(sys_after, sys_before)])

        # perf record / perf stat run over all rounds: between its own leg's runs a relay is
        # idle (a tunnel ping now and then), so what they see is its leg's runs.
        perfs, stats = [], []
        if args.perf:
            os.makedirs(args.perf, exist_ok=True)
        for name, _, _, _, pids, whos in legs:
            for who, pid in zip(whos, pids):
                if args.perf and not name.startswith("baseline"):
                    perfs.append(subprocess.Popen(
                        ["perf", "record", "-g", "-q", "-o", os.path.join(args.perf, who + ".data"),
                         "-p", str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                if args.syscalls:
                    stats.append((name, subprocess.Popen(
                        ["perf", "stat", "-x", ",", "-e", ",".join(
                            "syscalls:sys_enter_" + c for c in SYSCALLS), "-p", str(pid)],
                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)))
        if perfs or stats:
            time.sleep(0.5)
        results = {leg[0]: [] for leg in legs}
        for _ in range(args.runs):
            for name, url, cargs, host, pids, _ in legs:
                results[name].append(once(name, url, cargs, host, pids))
        for p in perfs:
            p.send_signal(2)
            p.wait()
        counted = {}  # per MiB, each relay of each leg
        for name, p in stats:
            p.send_signal(2)
            counts = {}
            for line in p.communicate()[1].splitlines():
                f = line.split(",")
                if len(f) > 2 and f[2].startswith("syscalls:sys_enter_"):
                    counts[f[2][len("syscalls:sys_enter_"):]] = int(f[0]) \
                        if f[0].isdigit() else 0
            counted.setdefault(name, []).append(
                {c: n / float(args.mib * args.runs) for c, n in counts.items()})

        def leg(name):
            """A leg's median seconds and median CPU-s of each relay over the runs."""
            rs = results[name]
            return (statistics.median(r[0] for r in rs),
                    [statistics.median(r[1][i] for r in rs) for i in range(len(rs[0][1]))])

        gib = nbytes / float(1 << 30)
        t_direct, _ = leg("direct")
        t_hop, _ = leg("nginx hop")
        t_chain, (c_cloud, c_edge) = leg("chain")
        chain_calls = results["chain"][len(results["chain"]) // 2][2]
        if base is not None:
            tb, (bc, be) = leg("baseline chain")
            for who, name in (("chain", "chain"), ("baseline", "baseline chain")):
                print("  %-8s runs, CPU per GiB cloudstream / edgestream: %s" % (who, "  ".join(
                    "%.2f/%.2f" % (r[1][0] / gib, r[1][1] / gib) for r in results[name])))
        if floor:
            t_floor, (f_in, f_out) = leg("floor pair")

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
        if floor:
            print("  floor pair  %8.1f MB/s  = %.2fx direct, %.2fx the nginx hop (curl → "
                  "tls_relay_floor → tls_relay_floor → the kubelet nginx, HTTP/1.1)" %
                  (mbps(t_floor), t_direct / t_floor, t_hop / t_floor))
            print("  CPU per GiB, floor relays: in (cloudstream's place) %.2f s, out "
                  "(edgestream's place) %.2f s" % (f_in / gib, f_out / gib))
            print("  chain ÷ floor pair (throughput) %.2f; CPU ÷ the floor relay in its place: "
                  "cloudstream %.2f, edgestream %.2f; both relays %.2f s vs %.2f s per GiB "
                  "(%.2f)" % (
                      t_floor / t_chain, c_cloud / f_in if f_in else float("inf"),
                      c_edge / f_out if f_out else float("inf"), (c_cloud + c_edge) / gib,
                      (f_in + f_out) / gib, (c_cloud + c_edge) / (f_in + f_out)
                      if f_in + f_out else float("inf")))
            for who, name in (("chain", "chain"), ("floor", "floor pair")):
                print("  %-8s runs, MB/s and CPU per GiB of its two relays: %s" % (who, "  ".join(
                    "%.0f %.2f/%.2f" % (mbps(r[0]), r[1][0] / gib, r[1][1] / gib)
                    for r in results[name])))
        print("  the kubelet nginx's CPU per GiB: %s" % ", ".join(
            "%s %.2f s" % (n, statistics.median(kcpu[n]) / gib) for n in
            ("direct", "nginx hop", "floor pair", "chain", "baseline chain") if n in kcpu))
        (cr, cw), (er, ew) = chain_calls
        print("  system calls per MiB (reads/writes, one run): cloudstream %.0f/%.0f, "
              "edgestream %.0f/%.0f" % (cr / args.mib, cw / args.mib, er / args.mib,
                                        ew / args.mib))
        for name, _, _, _, _, whos in legs:
            for who, counts in zip(whos, counted.get(name, ())):
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
