#!/usr/bin/python3
"""A request forwarded between two cloudstream replicas against the same request served by the
replica that holds the node's tunnel (issue 13; cloudstream/src/peer.h).

    test/bench/replicas_bench.py [--build build/rel] [--mib 1024] [--runs 3] [--requests 2000]
                                 [--cloud-arg=--flag --cloud-arg=value ...] [--strace DIR]
                                 [--perf DIR [--perf-stat EVENTS]] [--congestion reno]

Everything real, on 127.0.0.1: nginx plays the node's kubelet (as in relay_bench.py), edgestream
holds edge-1's tunnel to replica cs-a, and cs-b is linked to cs-a by --peers.
  - local:      curl → cs-a's stream port → tunnel → edgestream → nginx
  - forwarded:  curl → cs-b's stream port → peer link → cs-a → edgestream → nginx
Prints the median of --runs 1 GiB downloads per path and their ratio, and the p50/p99 of
keep-alive GETs of a 4 KiB answer on one connection per path (what the hop adds), and per
process (both replicas and the edge) CPU seconds and context switches per GiB: on a shared
machine those follow the code more than MB/s do. curl's CPU (its rusage) and nginx's (master and
workers) are added up with them into the whole chain's CPU per GiB, which on two cores bounds
the wall time per GiB from below; and the TLS 1.3 suite cs-a chose for a client that offers
OpenSSL's own order (AES-256-GCM first: stream/tlsctx.h). A program, not a test: it asserts
nothing about speed. Use a Release build; for an A/B, alternate two build dirs (--build).
"""
import os
import resource
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402
import relay_bench as rb  # noqa: E402


def ctx_switches(pid):
    """Voluntary and involuntary context switches so far, summed over the process's threads."""
    n = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/status" % (pid, tid)) as f:
                for line in f:
                    if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                        n += int(line.split()[1])
        except FileNotFoundError:
            pass  # a thread that ended meanwhile
    return n


def tree_cpu(pid):
    """CPU seconds of @pid and its children (nginx: the master and its workers)."""
    total = bl.cpu_seconds(pid)
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            total += sum(bl.cpu_seconds(int(c)) for c in f.read().split())
    except (FileNotFoundError, ProcessLookupError):
        pass
    return total


def main():
    ap = bl.parser(__doc__, "rel", mib=1024, runs=3)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--cloud-arg", action="append", default=[], metavar="ARG",
                    help="one more argument to both replicas (repeat for each)")
    ap.add_argument("--perf", metavar="DIR",
                    help="record both replicas with `perf record -g` during the local runs "
                         "(DIR/local-cs-a.data, ...) and the forwarded ones (DIR/forwarded-...)")
    ap.add_argument("--perf-stat", metavar="EVENTS",
                    help="with --perf DIR: `perf stat -e EVENTS` of both replicas instead of "
                         "`perf record -g` (DIR/local-cs-a.txt, ...), e.g. "
                         "sched:sched_waking,ipi:ipi_send_cpu: who wakes whom")
    ap.add_argument("--strace", metavar="DIR",
                    help="count both replicas' and the edge's system calls with `strace -c -f` "
                         "in each phase (DIR/local-cs-a.txt, ...; traced, they run slower: "
                         "read the counts, not the MB/s)")
    bl.add_congestion(ap)
    args = ap.parse_args()
    bl.congestion_netns(args.congestion)
    h = bl.use_build(args.build)

    nbytes = args.mib << 20
    with bl.run_env("replicas-bench") as env:
        kubelet = rb.start_kubelet(env, nbytes)
        tports = [bl.free_port(), bl.free_port()]
        clouds = []
        for i, name in enumerate(("cs-a", "cs-b")):
            def fixed(argv, port=tports[i]):
                argv[argv.index("--tunnel-listen") + 1] = "127.0.0.1:%d" % port
                return argv
            clouds.append(h.start_cloudstream(env, name=name, wrap=fixed, extra=[
                "--log-level", "warn", "--replica-id", name,
                "--peers", ",".join("127.0.0.1:%d" % t for t in tports),
                "--peer-cert", env.path("cloudstream-peer.crt"),
                "--peer-key", env.path("cloudstream-peer.key"),
                "--peer-ca", env.path("peer-ca.crt"),
                "--peer-server-ca", env.path("tunnel-ca.crt"),
                "--peer-server-name", "localhost"] + args.cloud_arg))
        edge = h.start_edgestream(env, clouds[0], kubelet, extra=["--log-level", "warn"])
        target = "/containerLogs/default/x/y"
        api = ["--cert", env.path("apiserver-kubelet-client.crt"),
               "--key", env.path("apiserver-kubelet-client.key")]
        # cs-b knows edge-1 once its link to cs-a synced: wait until a request goes through.
        deadline = time.monotonic() + 10
        while True:
            _, status, _ = bl.curl("https://127.0.0.1:%d/metrics" % clouds[1].ports["stream"],
                                   api, "edge-1:10350")
            if status == 200:
                break
            if time.monotonic() > deadline:
                raise SystemExit("cs-b never routed edge-1 (status %d)" % status)
            time.sleep(0.1)

        watched = clouds + [edge]

        def measure(name, port):
            times, cpus, calls, switches, client, backend = [], [], [], [], [], []
            for _ in range(args.runs):
                before = [bl.cpu_seconds(c.pid) for c in watched]
                sys_before = [bl.syscalls(c.pid) for c in clouds]
                cs_before = [ctx_switches(c.pid) for c in watched]
                ru = resource.getrusage(resource.RUSAGE_CHILDREN)
                ng = tree_cpu(kubelet.pid)
                t, status, size = bl.curl("https://127.0.0.1:%d%s" % (port, target), api,
                                          "edge-1:10350")
                if status != 200 or size != nbytes:
                    raise SystemExit("%s: status %d, %d bytes of %d" % (name, status, size,
                                                                      nbytes))
                times.append(t)
                ru2 = resource.getrusage(resource.RUSAGE_CHILDREN)  # curl, reaped by bl.curl
                client.append(ru2.ru_utime + ru2.ru_stime - ru.ru_utime - ru.ru_stime)
                backend.append(tree_cpu(kubelet.pid) - ng)
                cpus.append([bl.cpu_seconds(c.pid) - b for c, b in zip(watched, before)])
                switches.append([ctx_switches(c.pid) - b for c, b in zip(watched, cs_before)])
                calls.append([(a[0] - b[0], a[1] - b[1]) for a, b in
                              zip([bl.syscalls(c.pid) for c in clouds], sys_before)])
            gib = nbytes / float(1 << 30)
            measure.cpu = [statistics.median(c[i] for c in cpus) / gib for i in range(3)]
            measure.client = statistics.median(client) / gib
            measure.backend = statistics.median(backend) / gib
            measure.switches = [statistics.median(c[i] for c in switches) / gib
                                for i in range(3)]
            measure.calls = [tuple(statistics.median(c[i][k] for c in calls) / gib
                                   for k in range(2)) for i in range(2)]
            return statistics.median(times), min(times), max(times)

        def record(phase):
            """perf record of both replicas until stop() (--perf DIR: PHASE-NAME.data);
            strace -c of both and the edge (--strace DIR: PHASE-NAME.txt)."""
            perfs = []
            if args.strace:
                os.makedirs(args.strace, exist_ok=True)
                for c, n in zip(watched, ("cs-a", "cs-b", "edgestream")):
                    perfs.append(subprocess.Popen(
                        ["strace", "-c", "-f", "-o",
                         os.path.join(args.strace, "%s-%s.txt" % (phase, n)), "-p",
                         str(c.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                time.sleep(0.5)
            if args.perf:
                os.makedirs(args.perf, exist_ok=True)
                for c in clouds:
                    if args.perf_stat:
                        how = ["stat", "-e", args.perf_stat, "-o",
                               os.path.join(args.perf, "%s-%s.txt" % (phase, c.name))]
                    else:
                        how = ["record", "-q", "-g", "-o",
                               os.path.join(args.perf, "%s-%s.data" % (phase, c.name))]
                    perfs.append(subprocess.Popen(
                        ["perf"] + how + ["-p", str(c.pid)], stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL))
                time.sleep(0.5)

            def stop():
                for p in perfs:
                    p.send_signal(2)
                    p.wait()
            return stop

        stop = record("local")
        t_local, lo_l, hi_l = measure("local", clouds[0].ports["stream"])
        cpu_local = measure.cpu
        curl_local = measure.client
        nginx_local = measure.backend
        all_local = sum(cpu_local) - cpu_local[1] + curl_local + nginx_local
        calls_local = measure.calls
        sw_local = measure.switches
        stop()
        stop = record("forwarded")
        t_fwd, lo_f, hi_f = measure("forwarded", clouds[1].ports["stream"])
        cpu_fwd = measure.cpu
        curl_fwd = measure.client
        nginx_fwd = measure.backend
        all_fwd = sum(cpu_fwd) + curl_fwd + nginx_fwd
        calls_fwd = measure.calls
        sw_fwd = measure.switches
        stop()
        ctx = bl.client_ctx(env.pki, ca=None)
        l50, l99, suite = bl.keepalive_latency(clouds[0].ports["stream"], ctx, "edge-1:10350",
                                           args.requests)
        f50, f99, _ = bl.keepalive_latency(clouds[1].ports["stream"], ctx, "edge-1:10350",
                                           args.requests)
        mbps = lambda t: nbytes / t / 1e6  # noqa: E731
        print("%d MiB, median of %d runs, curl as the client" % (args.mib, args.runs))
        print("  local       %8.1f MB/s (runs %.1f..%.1f)" % (mbps(t_local), mbps(hi_l),
                                                              mbps(lo_l)))
        print("  forwarded   %8.1f MB/s (runs %.1f..%.1f) = %.2fx local" % (
            mbps(t_fwd), mbps(hi_f), mbps(lo_f), t_local / t_fwd))
        print("  CPU per GiB: local cs-a %.2f s; forwarded cs-a (holder) %.2f s, cs-b %.2f s; "
              "edgestream local %.2f s, forwarded %.2f s" % (
                  cpu_local[0], cpu_fwd[0], cpu_fwd[1], cpu_local[2], cpu_fwd[2]))
        print("  CPU per GiB of curl (the client): local %.2f s, forwarded %.2f s; of nginx (the "
              "kubelet): local %.2f s, forwarded %.2f s" % (curl_local, curl_fwd, nginx_local,
                                                           nginx_fwd))
        print("  CPU per GiB of the whole chain: local %.2f s, forwarded %.2f s (2 cores: at "
              "least %.2f s and %.2f s of wall time per GiB)" % (all_local, all_fwd,
                                                                 all_local / 2, all_fwd / 2))
        print("  context switches per GiB: local cs-a %d; forwarded cs-a %d, cs-b %d; "
              "edgestream local %d, forwarded %d" % (sw_local[0], sw_fwd[0], sw_fwd[1],
                                                     sw_local[2], sw_fwd[2]))
        # /proc/PID/io counts the read() and write() families: a send() or recv() is not in it.
        print("  read()/write() calls per GiB: local cs-a %d/%d; forwarded cs-a %d/%d, "
              "cs-b %d/%d" % (calls_local[0] + calls_fwd[0] + calls_fwd[1]))
        print("TLS 1.3 suite cs-a chose for a client offering OpenSSL's order: %s" % suite)
        print("keep-alive GET of 4 KiB, %d on one connection: local p50 %.0f µs p99 %.0f µs; "
              "forwarded p50 %.0f µs p99 %.0f µs; the hop adds %.0f µs at p50, %.0f µs at "
              "p99" % (args.requests, l50 * 1e6, l99 * 1e6, f50 * 1e6, f99 * 1e6,
                       (f50 - l50) * 1e6, (f99 - l99) * 1e6))


if __name__ == "__main__":
    main()
