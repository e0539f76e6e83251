#!/usr/bin/python3
"""cloudstream at fleet scale: idle CPU and RSS with N real mTLS tunnels that ping every 5 s,
a transfer through the chain beside them, and the reconnect storm after a restart, in one run.

    test/bench/loop_bench.py [--build build/release] [--tunnels 1000,5000,19000] [--window 20]
                             [--storm] [--procs 2] [--extra "--flag value"] [--transfer-mib 1024]

For each N: a fresh cloudstream (Release build, --log-level warn), test/bench/tunnel_load
opening N tunnels (one certificate per node, split over --procs processes), then cloudstream's
CPU (utime+stime from /proc/PID/stat) over --window seconds while the tunnels only ping, and
its RSS per tunnel. With --transfer-mib M, the chain (apiserver client -> cloudstream -> tunnel
-> edgestream -> the kubelet stand-in's /bytes) carries M MiB with no other tunnel, then again
beside the N idle ones: MB/s and the ratio. With --storm, after the largest N: cloudstream is
stopped and started again on the same port, and the figures are how long until every tunnel was
back and how many handshakes the clients abandoned at their deadline. A program, not a test: it
prints figures.
"""
import argparse
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
TCK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TCK


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


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

    def __init__(self, build, pki, port, n, procs, prefix):
        argv = [os.path.join(build, "test", "bench", "tunnel_load"), "--port", str(port),
                "--ca-cert", pki + "/tunnel-ca.crt", "--ca-key", pki + "/tunnel-ca.key",
                "--server-ca", pki + "/tunnel-ca.crt", "--n", str(n), "--procs", str(procs),
                "--prefix", prefix, "--quiet"]
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

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        self.p.wait(20)


def transfer(build, pki, port, mib):
    """M MiB of /bytes from the kubelet stand-in through cloudstream -> edgestream: MB/s."""
    import ssl
    import socket as so
    ctx = ssl.create_default_context(cafile=pki + "/stream-ca.crt")
    ctx.check_hostname = False
    ctx.load_cert_chain(pki + "/apiserver-kubelet-client.crt",
                        pki + "/apiserver-kubelet-client.key")
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--tunnels", default="1000,5000,19000")
    ap.add_argument("--window", type=float, default=20.0)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--storm", action="store_true")
    ap.add_argument("--extra", default="", help="more cloudstream flags")
    ap.add_argument("--label", default="")
    ap.add_argument("--transfer-mib", type=int, default=0)
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    os.environ["ST_BIN_DIR"] = build
    sys.path.insert(0, os.path.join(ROOT, "test", "integration", "lib"))
    import harness as h
    env = h.Env("loop-bench", nodes=("edge-1",))
    d, pki = env.dir, env.pki
    extra = shlex.split(a.extra)
    kubelet = h.start_kubelet(env) if a.transfer_mib else None
    ns = [int(x) for x in a.tunnels.split(",")]
    print("loop_bench %s: cloudstream %s %s" % (a.label, build, " ".join(extra)))
    for i, n in enumerate(ns):
        cloud = Cloud(build, pki, d, 0, extra)
        rss0 = rss_kib(cloud.p.pid)
        edge, alone = None, 0.0
        if kubelet:
            cloud.ports = {"tunnel": cloud.port}
            edge = h.start_edgestream(env, cloud, kubelet, extra=["--log-level", "warn"])
            alone = transfer(build, pki, cloud.stream_port, a.transfer_mib)
        t0 = time.monotonic()
        load = Load(build, pki, cloud.port, n, a.procs, "n%d-" % i)
        try:
            _, up = load.wait_for("all-up", 0, 600)
            up_s = time.monotonic() - t0
            time.sleep(6)  # every tunnel has pinged at least once
            c0, w0 = cpu_s(cloud.p.pid), time.monotonic()
            time.sleep(a.window)
            c1, w1 = cpu_s(cloud.p.pid), time.monotonic()
            rss = rss_kib(cloud.p.pid)
            print("tunnels=%d idle_cpu_pct=%.1f (target <= 5) rss_mib=%.1f "
                  "rss_per_tunnel_kib=%.1f connect_all_s=%.1f" %
                  (n, 100.0 * (c1 - c0) / (w1 - w0), rss / 1024.0, (rss - rss0) / n, up_s),
                  flush=True)
            if kubelet:
                beside = transfer(build, pki, cloud.stream_port, a.transfer_mib)
                print("transfer %d MiB through the chain: %.0f MB/s alone, %.0f MB/s beside %d "
                      "idle tunnels: ratio %.2f (target >= 0.9)"
                      % (a.transfer_mib, alone, beside, n, beside / alone), flush=True)
            if a.storm and i == len(ns) - 1:
                port = cloud.port
                mark = len(load.lines)
                cloud.stop()
                cloud = Cloud(build, pki, d, port, extra)
                _, back = load.wait_for("all-up", mark, 600)
                print("storm tunnels=%d all_back_s=%s (target <= 30) dials=%s "
                      "client_timeouts=%s (target 0)" %
                      (n, back["after_s"], back["dials"], back["timeouts"]), flush=True)
        finally:
            load.stop()
            if edge:
                env.stop(edge)
            cloud.stop()
    if kubelet:
        env.stop(kubelet)
    print("logs in %s" % d)


if __name__ == "__main__":
    main()
