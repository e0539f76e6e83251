#!/usr/bin/python3
"""A request forwarded between two cloudstream replicas against the same request served by the
replica that holds the node's tunnel (issue 13; cloudstream/src/peer.h).

    test/bench/replicas_bench.py [--build build/rel] [--mib 1024] [--runs 3] [--requests 2000]

Everything real, on 127.0.0.1: nginx plays the node's kubelet (as in relay_bench.py), edgestream
holds edge-1's tunnel to replica cs-a, and cs-b is linked to cs-a by --peers.
  - local:      curl → cs-a's stream port → tunnel → edgestream → nginx
  - forwarded:  curl → cs-b's stream port → peer link → cs-a → edgestream → nginx
Prints the median of --runs 1 GiB downloads per path and their ratio, and the p50/p99 of
keep-alive GETs of a 4 KiB answer on one connection per path (what the hop adds). A program,
not a test: it asserts nothing about speed. Use a Release build.
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
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "integration", "lib"))
import relay_bench as rb  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "..", "build", "rel"))
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--perf", metavar="DIR",
                    help="record both replicas with `perf record -g` during the local runs "
                         "(DIR/local-cs-a.data, ...) and the forwarded ones (DIR/forwarded-...)")
    args = ap.parse_args()
    os.environ["ST_BIN_DIR"] = os.path.abspath(args.build)
    import harness as h

    nbytes = args.mib << 20
    env = h.Env("replicas-bench")
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
        kport = rb.free_port()
        conf = os.path.join(d, "kubelet.conf")
        with open(conf, "w") as f:
            f.write(rb.KUBELET_CONF.format(d=d, port=kport, kport=kport, pki=env.pki))
        p = subprocess.Popen(["nginx", "-c", conf, "-p", d], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        procs.append(p)
        rb.wait_port(kport, p, os.path.join(d, "kubelet-error.log"))

        tports = [rb.free_port(), rb.free_port()]
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
                "--peer-server-name", "localhost"]))
        kubelet = type("K", (), {"port": kport})()
        h.start_edgestream(env, clouds[0], kubelet, extra=["--log-level", "warn"])
        target = "/containerLogs/default/x/y"
        api = ["--cert", env.path("apiserver-kubelet-client.crt"),
               "--key", env.path("apiserver-kubelet-client.key")]
        # cs-b knows edge-1 once its link to cs-a synced: wait until a request goes through.
        deadline = time.monotonic() + 10
        while True:
            _, status, _ = rb.curl("https://127.0.0.1:%d/metrics" % clouds[1].ports["stream"],
                                   api, "edge-1:10350")
            if status == 200:
                break
            if time.monotonic() > deadline:
                raise SystemExit("cs-b never routed edge-1 (status %d)" % status)
            time.sleep(0.1)

        def measure(name, port):
            times, cpus, calls = [], [], []
            for _ in range(args.runs):
                before = [rb.cpu_seconds(c.pid) for c in clouds]
                sys_before = [rb.syscalls(c.pid) for c in clouds]
                t, status, size = rb.curl("https://127.0.0.1:%d%s" % (port, target), api,
                                          "edge-1:10350")
                if status != 200 or size != nbytes:
                    raise SystemExit("%s: status %d, %d bytes of %d" % (name, status, size,
                                                                      nbytes))
                times.append(t)
                cpus.append([rb.cpu_seconds(c.pid) - b for c, b in zip(clouds, before)])
                calls.append([(a[0] - b[0], a[1] - b[1]) for a, b in
                              zip([rb.syscalls(c.pid) for c in clouds], sys_before)])
            measure.cpu = [statistics.median(c[i] for c in cpus) / (nbytes / float(1 << 30))
                           for i in range(2)]
            gib = nbytes / float(1 << 30)
            measure.calls = [tuple(statistics.median(c[i][k] for c in calls) / gib
                                   for k in range(2)) for i in range(2)]
            return statistics.median(times), min(times), max(times)

        def latency(port):
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            ctx.load_cert_chain(env.path("apiserver-kubelet-client.crt"),
                                env.path("apiserver-kubelet-client.key"))
            raw = socket.create_connection(("127.0.0.1", port), timeout=30)
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s = ctx.wrap_socket(raw)
            req = b"GET /metrics HTTP/1.1\r\nHost: edge-1:10350\r\n\r\n"
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
                if i >= 50:
                    times.append(dt)
            s.close()
            times.sort()
            return times[len(times) // 2], times[int(len(times) * 0.99)]

        def record(phase):
            """perf record of both replicas until stop() (--perf DIR: PHASE-NAME.data)."""
            perfs = []
            if args.perf:
                os.makedirs(args.perf, exist_ok=True)
                for c in clouds:
                    perfs.append(subprocess.Popen(
                        ["perf", "record", "-q", "-g", "-o",
                         os.path.join(args.perf, "%s-%s.data" % (phase, c.name)), "-p",
                         str(c.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                time.sleep(0.5)

            def stop():
                for p in perfs:
                    p.send_signal(2)
                    p.wait()
            return stop

        stop = record("local")
        t_local, lo_l, hi_l = measure("local", clouds[0].ports["stream"])
        cpu_local = measure.cpu
        calls_local = measure.calls
        stop()
        stop = record("forwarded")
        t_fwd, lo_f, hi_f = measure("forwarded", clouds[1].ports["stream"])
        cpu_fwd = measure.cpu
        calls_fwd = measure.calls
        stop()
        l50, l99 = latency(clouds[0].ports["stream"])
        f50, f99 = latency(clouds[1].ports["stream"])
        mbps = lambda t: nbytes / t / 1e6  # noqa: E731
        print("%d MiB, median of %d runs, curl as the client" % (args.mib, args.runs))
        print("  local       %8.1f MB/s (runs %.1f..%.1f)" % (mbps(t_local), mbps(hi_l),
                                                              mbps(lo_l)))
        print("  forwarded   %8.1f MB/s (runs %.1f..%.1f) = %.2fx local" % (
            mbps(t_fwd), mbps(hi_f), mbps(lo_f), t_local / t_fwd))
        print("  CPU per GiB: local cs-a %.2f s; forwarded cs-a (holder) %.2f s, cs-b %.2f s" % (
            cpu_local[0], cpu_fwd[0], cpu_fwd[1]))
        # /proc/PID/io counts the read() and write() families: a send() or recv() is not in it.
        print("  read()/write() calls per GiB: local cs-a %d/%d; forwarded cs-a %d/%d, "
              "cs-b %d/%d" % (calls_local[0] + calls_fwd[0] + calls_fwd[1]))
        print("keep-alive GET of 4 KiB, %d on one connection: local p50 %.0f µs p99 %.0f µs; "
              "forwarded p50 %.0f µs p99 %.0f µs; the hop adds %.0f µs at p50, %.0f µs at "
              "p99" % (args.requests, l50 * 1e6, l99 * 1e6, f50 * 1e6, f99 * 1e6,
                       (f50 - l50) * 1e6, (f99 - l99) * 1e6))
    finally:
        for p in procs:
            p.terminate()
            p.wait()
        env.close()


if __name__ == "__main__":
    main()
