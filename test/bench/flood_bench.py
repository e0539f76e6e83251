#!/usr/bin/python3
"""cloudstream under a connection flood on its tunnel port, in one run: how much memory, fds and
CPU it spends, whether an apiserver request on a connection opened before is still answered,
and how many log lines it writes.

    test/bench/flood_bench.py [--build build/release] [--n 20000] [--procs 2]

Two floods of --n connections each, opened by --procs processes at --rate a second together
(0: as fast as they can; the rate reached is printed): "silent" connections never send a byte; "stalled" ones send a TLS record header and
nothing more (a handshake that never finishes). Throughout, a GET /metrics through the tunnel on
a kept-alive apiserver connection every 50 ms; its latency is printed (p50, max) beside the same
request's before the flood. A program, not a test: it prints figures.
"""
import multiprocessing
import os
import resource
import socket
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402


def flooder(port, n, rate, payload, ready, done):
    """Opens @n connections at @rate a second (0: as fast as it can), in steps of 10 ms."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    socks = []
    t0 = time.monotonic()
    while len(socks) < n:
        due = n if rate <= 0 else min(n, int((time.monotonic() - t0) * rate) + 1)
        while len(socks) < due:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            socks.append(s)
        if len(socks) < n:
            time.sleep(0.01)
    if payload:
        time.sleep(0.2)
        for s in socks:
            try:
                s.send(payload)
            except OSError:
                pass
    ready.set()
    done.wait()
    for s in socks:
        s.close()


def main():
    ap = bl.parser(None, "release")
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--rate", type=float, default=2500.0,
                    help="connections opened a second, all flooders together (0: as fast as "
                         "they can; the target is stated at >= 2,000/s)")
    a = ap.parse_args()
    bl.use_build(a.build)
    import flood_test as ft
    chain = ft.Chain("flood-bench", cloud_extra=("--log-level", "warn"))
    try:
        pid = chain.cloud.pid
        _, _, _, s = chain.get("/metrics")

        def probe(seconds):
            lat, end = [], time.monotonic() + seconds
            while time.monotonic() < end:
                status, took = ft.timed_get(chain, s)
                if status != 200:
                    raise SystemExit("a request got %d" % status)
                lat.append(took * 1000)
                time.sleep(0.05)
            return lat

        base = probe(2)
        print("before: request p50 %.2f ms, max %.2f ms; cloudstream RSS %.1f MiB, %d fds"
              % (statistics.median(base), max(base), bl.status_kib(pid) / 1024,
                 bl.fds(pid)), flush=True)
        for name, payload in (("silent", b""), ("stalled", b"\x16\x03\x01")):
            with open(chain.cloud.logpath, "rb") as f:
                log0 = len(f.read().splitlines())
            rss0, c0, w0 = bl.status_kib(pid), bl.cpu_seconds(pid), time.monotonic()
            ready = [multiprocessing.Event() for _ in range(a.procs)]
            done = multiprocessing.Event()
            t0 = time.monotonic()
            ps = [multiprocessing.Process(target=flooder, args=(
                chain.cloud.ports["tunnel"], a.n // a.procs, a.rate / a.procs, payload,
                ready[i], done))
                for i in range(a.procs)]
            for p in ps:
                p.start()
            lat = []
            while not all(r.is_set() for r in ready):
                lat += probe(0.2)
            rate = a.n / (time.monotonic() - t0)
            lat += probe(6)  # past the handshake deadline
            peak = bl.status_kib(pid)
            fds = bl.fds(pid)
            cpu = (bl.cpu_seconds(pid) - c0) / (time.monotonic() - w0)
            done.set()
            for p in ps:
                p.join()
            with open(chain.cloud.logpath, "rb") as f:
                lines = len(f.read().splitlines()) - log0
            print("%s flood: %d connections at %.0f/s; request p50 %.2f ms, max %.2f ms "
                  "(target < 100); cloudstream RSS %.1f -> %.1f MiB (target <= 200), %d fds, "
                  "CPU %.0f %% of a core, %d log lines"
                  % (name, a.n, rate, statistics.median(lat), max(lat), rss0 / 1024,
                     peak / 1024, fds, 100 * cpu, lines), flush=True)
            time.sleep(1)
        ft.new_edge_works(chain, "edge-2")
        print("after: a new edge connects and is reachable", flush=True)
    finally:
        chain.close(False)


if __name__ == "__main__":
    main()
