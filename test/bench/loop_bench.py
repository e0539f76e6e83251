#!/usr/bin/python3
"""cloudstream at fleet scale: idle CPU and RSS with N real mTLS tunnels that ping every 5 s,
a transfer through the chain beside them, and the reconnect storm after a restart, in one run,
each figure printed beside its issue-12 target.

    test/bench/loop_bench.py [--build build/release] [--tunnels 1000,5000,19000] [--window 20]
                             [--windows 3] [--storm] [--procs 2] [--extra "--flag value"]
                             [--transfer-mib 1024] [--transfers 3] [--load-nice 0]

For each N: a fresh cloudstream (Release build, --log-level warn), test/bench/tunnel_load
opening N tunnels (one certificate per node, split over --procs processes), then cloudstream's
CPU (utime+stime from /proc/PID/stat, robust to other processes' load) over --windows windows
of --window seconds while the tunnels only ping (each window printed, the median is the
figure), the load tool's own CPU beside it, and cloudstream's RSS per tunnel. With
--transfer-mib M, the chain (apiserver client -> cloudstream -> tunnel -> edgestream -> the
kubelet stand-in's /bytes) carries M MiB --transfers times with no other tunnel, as many times
beside the N idle ones, and again --transfers times once they are gone: MB/s each, and the
ratio of the medians (beside / alone, before and after together). With --storm, after the
largest N: cloudstream is stopped and started again on the same port, and the figures are how
long until every tunnel was back and how many handshakes the clients abandoned at their
deadline. The last lines sum up the largest N against the targets.

--load-nice runs tunnel_load at that nice level: it stands in for N edge machines, whose CPU
is not the cloud's, and on a 2-core machine it otherwise competes with the transfer's own
processes. The load tool's CPU is printed either way. A program, not a test: it prints figures.
"""
import os
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402


class Cloud:
    def __init__(self, build, pki, d, port, extra):
        self.ready = os.path.join(d, "cloud.ready")
        if os.path.exists(self.ready):
            os.unlink(self.ready)
        argv = [os.path.join(build, "cloudstream", "cloudstream"),
                "--tunnel-listen", "127.0.0.1:%d" % port, "--stream-listen", "127.0.0.1:0",
                "--admin-listen", "127.0.0.1:0",
                "--tunnel-cert", pki + "/cloudstream-tunnel.crt",
                "--tunnel-key", pki + "/cloudstream-tunnel.key",
                "--tunnel-ca", pki + "/tunnel-ca.crt",
                "--stream-cert", pki + "/cloudstream-stream.crt",
                "--stream-key", pki + "/cloudstream-stream.key",
                "--stream-client-ca", pki + "/stream-ca.crt",
                "--ready-file", self.ready, "--log-level", "warn",
                "--stream-allowed-subjects", "kube-apiserver-kubelet-client",
                # every tunnel of the bench comes from 127.0.0.1; a fleet has an address each
                "--tunnel-handshakes-per-source", "100000"] + extra
        self.log = open(os.path.join(d, "cloud.log"), "ab")
        self.p = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while not os.path.exists(self.ready):
            if self.p.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("cloudstream did not start; see %s" % self.log.name)
            time.sleep(0.02)
        with open(self.ready) as f:
            ports = dict(l.split("=") for l in f.read().split())
            self.port, self.stream_port = int(ports["tunnel"]), int(ports["stream"])

    def stop(self):
        self.p.send_signal(signal.SIGINT)
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.log.close()


class Load:
    """tunnel_load in the background; its lines are kept and waited for."""

    def __init__(self, build, pki, port, n, procs, prefix, nice=0, pong_within=0):
        argv = (["nice", "-n", str(nice)] if nice else []) + [
                os.path.join(build, "test", "bench", "tunnel_load"), "--port", str(port),
                "--ca-cert", pki + "/tunnel-ca.crt", "--ca-key", pki + "/tunnel-ca.key",
                "--server-ca", pki + "/tunnel-ca.crt", "--n", str(n), "--procs", str(procs),
                "--prefix", prefix, "--pong-within", str(pong_within), "--quiet"]
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        self.lines = []
        self.cv = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            with self.cv:
                self.lines.append(line.strip())
                self.cv.notify_all()

    def wait_for(self, prefix, start, timeout):
        """The first line starting with @prefix at index >= @start, as a dict."""
        deadline = time.monotonic() + timeout
        with self.cv:
            while True:
                for i in range(start, len(self.lines)):
                    if self.lines[i].startswith(prefix):
                        return i, dict(kv.split("=") for kv in self.lines[i].split()[1:])
                left = deadline - time.monotonic()
                if left <= 0:
                    tail = "\n".join(self.lines[-3:])
                    raise SystemExit("no '%s' line after %d s:\n%s" % (prefix, timeout, tail))
                self.cv.wait(left)

    def cpu_s(self):
        """CPU seconds of the tool's processes (the parent and its workers)."""
        pids = [self.p.pid]
        try:
            with open("/proc/%d/task/%d/children" % (self.p.pid, self.p.pid)) as f:
                pids += [int(x) for x in f.read().split()]
        except OSError:
            pass
        total = 0.0
        for pid in pids:
            try:
                total += bl.cpu_seconds(pid)
            except OSError:
                pass
        return total

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        self.p.wait(20)


def transfer(build, pki, port, mib):
    """M MiB of /bytes from the kubelet stand-in through cloudstream -> edgestream: MB/s."""
    import socket as so
    ctx = bl.client_ctx(pki)
    n = mib << 20
    s = ctx.wrap_socket(so.create_connection(("127.0.0.1", port), timeout=60))
    s.sendall(b"GET /bytes?n=%d HTTP/1.1\r\nHost: edge-1:10350\r\n\r\n" % n)
    buf = bytearray(1 << 20)
    head, got, t0 = b"", 0, None
    while b"\r\n\r\n" not in head:
        head += s.recv(65536)
    head, rest = head.split(b"\r\n\r\n", 1)
    if not head.startswith(b"HTTP/1.1 200"):
        raise SystemExit("transfer: %r" % head[:200])
    got, t0 = len(rest), time.monotonic()
    while got < n:
        k = s.recv_into(buf)
        if k == 0:
            raise SystemExit("transfer: cut after %d bytes" % got)
        got += k
    s.close()
    return n / (time.monotonic() - t0) / 1e6


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    ap = bl.parser(None, "release")
    ap.add_argument("--tunnels", default="1000,5000,19000")
    ap.add_argument("--window", type=float, default=20.0, help="seconds per idle CPU window")
    ap.add_argument("--windows", type=int, default=3, help="idle CPU windows per N (median)")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--storm", action="store_true")
    ap.add_argument("--extra", default="", help="more cloudstream flags")
    ap.add_argument("--label", default="")
    ap.add_argument("--transfer-mib", type=int, default=0)
    ap.add_argument("--transfers", type=int, default=3,
                    help="transfers alone and beside the tunnels per N (medians)")
    ap.add_argument("--load-nice", type=int, default=0, help="nice level of tunnel_load")
    ap.add_argument("--pong-within", type=int, default=20000,
                    help="the tunnels' offer (ms; what edgestream offers with its defaults: 2/3 "
                    "of its 30 s --dead-peer-timeout); 0: KubeEdge edges' requests, every PING "
                    "answered at once")
    a = ap.parse_args()
    h = bl.use_build(a.build)
    build = h.BIN
    env = h.Env("loop-bench", nodes=("edge-1",))
    d, pki = env.dir, env.pki
    extra = shlex.split(a.extra)
    kubelet = h.start_kubelet(env) if a.transfer_mib else None
    ns = [int(x) for x in a.tunnels.split(",")]
    print("loop_bench %s: cloudstream %s %s (load tool nice %d; tunnels %s)"
          % (a.label, build, " ".join(extra), a.load_nice,
             "offering pong-within=%d as edgestream does" % a.pong_within if a.pong_within
             else "as KubeEdge edges, no offer"))
    res = {}
    for i, n in enumerate(ns):
        r = res[n] = {}
        cloud = Cloud(build, pki, d, 0, extra)
        rss0 = bl.status_kib(cloud.p.pid)
        edge, alone = None, []
        if kubelet:
            cloud.ports = {"tunnel": cloud.port}
            edge = h.start_edgestream(env, cloud, kubelet, extra=["--log-level", "warn"])
            alone = [transfer(build, pki, cloud.stream_port, a.transfer_mib)
                     for _ in range(a.transfers)]
        t0 = time.monotonic()
        load = Load(build, pki, cloud.port, n, a.procs, "n%d-" % i, a.load_nice,
                    a.pong_within)
        try:
            _, up = load.wait_for("all-up", 0, 600)
            up_s = time.monotonic() - t0
            time.sleep(6)  # every tunnel has pinged at least once
            cpus, loads = [], []
            for w in range(a.windows):
                c0, l0, w0 = bl.cpu_seconds(cloud.p.pid), load.cpu_s(), time.monotonic()
                time.sleep(a.window)
                c1, l1, w1 = bl.cpu_seconds(cloud.p.pid), load.cpu_s(), time.monotonic()
                cpus.append(100.0 * (c1 - c0) / (w1 - w0))
                loads.append(100.0 * (l1 - l0) / (w1 - w0))
            rss = bl.status_kib(cloud.p.pid)
            r["cpu"], r["rss"] = median(cpus), (rss - rss0) / n
            print("tunnels=%d idle_cpu_pct=%.1f (target <= 5; windows %s) load_tool_cpu_pct=%.1f "
                  "rss_mib=%.1f rss_per_tunnel_kib=%.1f (target <= 24) connect_all_s=%.1f" %
                  (n, r["cpu"], " ".join("%.1f" % x for x in cpus), median(loads),
                   rss / 1024.0, r["rss"], up_s), flush=True)
            totals = [x for x in load.lines if x.startswith("t=")]
            if totals:  # pings sent and PONGs received so far: what the offer saved
                print("  load tool totals: %s" % totals[-1], flush=True)
            beside = []
            if kubelet:
                beside = [transfer(build, pki, cloud.stream_port, a.transfer_mib)
                          for _ in range(a.transfers)]
            if a.storm and i == len(ns) - 1:
                port = cloud.port
                mark = len(load.lines)
                cloud.stop()
                cloud = Cloud(build, pki, d, port, extra)
                _, back = load.wait_for("all-up", mark, 600)
                r["storm"] = (float(back["after_s"]), int(back["timeouts"]))
                print("storm tunnels=%d all_back_s=%s (target <= 30) dials=%s "
                      "client_timeouts=%s (target 0)" %
                      (n, back["after_s"], back["dials"], back["timeouts"]), flush=True)
                totals = [x for x in load.lines if x.startswith("t=")]
                if totals:
                    print("  load tool totals: %s" % totals[-1], flush=True)
            load.stop()
            load = None
            if kubelet:
                # alone again once the tunnels are gone, so drift in the machine's other load
                # (other users of the cores) does not read as the tunnels' cost
                time.sleep(2)
                alone += [transfer(build, pki, cloud.stream_port, a.transfer_mib)
                          for _ in range(a.transfers)]
                r["alone"], r["beside"] = median(alone), median(beside)
                r["ratio"] = r["beside"] / r["alone"]
                print("transfer %d MiB through the chain: %.0f MB/s alone (%s, before and after "
                      "the tunnels), %.0f MB/s beside %d idle tunnels (%s): ratio %.2f "
                      "(target >= 0.9)"
                      % (a.transfer_mib, r["alone"], " ".join("%.0f" % x for x in alone),
                         r["beside"], n, " ".join("%.0f" % x for x in beside), r["ratio"]),
                      flush=True)
        finally:
            if load:
                load.stop()
            if edge:
                env.stop(edge)
            cloud.stop()
    if kubelet:
        env.stop(kubelet)
    n = ns[-1]
    r = res[n]

    def verdict(ok):
        return "met" if ok else "NOT met"
    print("summary at %d tunnels (issue 12):" % n)
    print("  idle CPU          %6.1f %%      target <= 5 %%      %s"
          % (r["cpu"], verdict(r["cpu"] <= 5.0)))
    print("  RSS per tunnel    %6.1f KiB    target <= 24 KiB   %s"
          % (r["rss"], verdict(r["rss"] <= 24.0)))
    if "ratio" in r:
        print("  %d MiB beside/alone %5.2f      target >= 0.9      %s  (%.0f / %.0f MB/s)"
              % (a.transfer_mib, r["ratio"], verdict(r["ratio"] >= 0.9), r["beside"],
                 r["alone"]))
    if "storm" in r:
        print("  storm, all back  %6.1f s      target <= 30 s, 0 client timeouts (%d)   %s"
              % (r["storm"][0], r["storm"][1],
                 verdict(r["storm"][0] <= 30.0 and r["storm"][1] == 0)))
    print("logs in %s" % d)


if __name__ == "__main__":
    main()
