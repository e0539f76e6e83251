#!/usr/bin/python3
"""Hostile floods on cloudstream's tunnel port (cloudstream/src/listen.h): the real daemon, a test
edge, the kubelet stand-in and an apiserver client, as in cloudstream_test.py.

    flood_test.py GROUP      GROUP: silent | gate | emfile

silent: 2,500 connections that never send a byte; an apiserver request on a connection opened
        before keeps being answered at once, another edge still connects, cloudstream holds no
        fd and no memory for them.
gate:   connections that start a TLS handshake and stall hold the handshake slots until
        --tunnel-handshake-timeout; one source gets --tunnel-handshakes-per-source of them, the
        others are closed at once; once they expire a real edge connects.
emfile: under a 64-fd limit, connections that exhaust the fds make cloudstream pause accepting:
        it does not spin (CPU) nor flood its log, and recovers when they go.
vanish: hundreds of tunnels (test/bench/tunnel_load) whose edges vanish at once, without a TLS
        close: each is counted (cloudstream_tunnels_closed_total{reason="edge_gone"}), none is a
        WARN line; hundreds that go silent together (a partition: tunnel_load stopped) are each
        counted as dead, their WARN lines held to the budget; tunnels that end for an error
        (unmasked frames) likewise; what the budget held back is summed up in one line.
"""
import os
import resource
import signal
import socket
import ssl
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
import harness as h  # noqa: E402
from harness import check  # noqa: E402

CLK = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK


def proc_rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def sanitized(pid):
    """An ASan build: its RSS holds freed memory in quarantine, so RSS says little."""
    with open("/proc/%d/exe" % pid, "rb") as f:
        return b"__asan_init" in f.read()


def proc_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def open_silent(port, n):
    """n TCP connections that never send anything (non-blocking connects, then waited for)."""
    socks = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        socks.append(s)
    return socks


class Chain(h.Chain):
    """cloudstream_test's chain (a KubeEdge-protocol edge), with cloudstream started after
    @cloud_prefix (e.g. prlimit)."""

    def __init__(self, tag, cloud_extra=(), cloud_prefix=()):
        super().__init__(tag, lambda env, cloud, kubelet: h.start_kubeedge_edge(
            env, cloud, kubelet, protocol="base"),
            nodes=("edge-1", "edge-2"), cloud_extra=cloud_extra, cloud_prefix=cloud_prefix)


def timed_get(chain, s):
    """GET /metrics on the kept-alive apiserver connection @s: (status, seconds)."""
    t = time.monotonic()
    status, _, _, s2 = chain.get("/metrics", sock=s)
    check(s2 is s, "the apiserver connection was not kept alive")
    return status, time.monotonic() - t


def new_edge_works(chain, node):
    edge = h.start_kubeedge_edge(chain.env, chain.cloud, chain.kubelet, node=node,
                                 name="edge-" + node)
    deadline = time.monotonic() + 15
    while True:
        status, _, body, s = chain.get("/containerLogs/default/pod-a/ctr?tailLines=1", node=node)
        s.close()
        if status == 200:
            break
        check(time.monotonic() < deadline, "%s never became reachable: %d %r"
              % (node, status, body[:200]))
        time.sleep(0.2)
    chain.env.stop(edge)


def silent(chain):
    pid = chain.cloud.pid
    status, _, _, s = chain.get("/metrics")
    check(status == 200, "before the flood: status %d" % status)
    rss0, fds0 = proc_rss_kib(pid), proc_fds(pid)
    t0 = time.monotonic()
    flood = open_silent(chain.cloud.ports["tunnel"], 2500)
    opened_s = time.monotonic() - t0
    worst = 0.0
    for _ in range(10):  # answered on the old connection, one after another, while they sit
        status, took = timed_get(chain, s)
        check(status == 200, "during the flood: status %d" % status)
        worst = max(worst, took)
    new_edge_works(chain, "edge-2")
    rss1, fds1 = proc_rss_kib(pid), proc_fds(pid)
    print("     2500 silent connections opened in %.2f s; requests answered in %.3f s at most; "
          "cloudstream RSS %+d KiB, fds %d -> %d" % (opened_s, worst, rss1 - rss0, fds0, fds1),
          flush=True)
    check(worst < 1.0, "a request during the flood took %.3f s" % worst)
    # They never reached cloudstream: no fd, no OpenSSL state (45 KB each before).
    check(fds1 - fds0 < 50, "cloudstream holds %d more fds during the flood" % (fds1 - fds0))
    check(sanitized(pid) or rss1 - rss0 < 20 * 1024,
          "cloudstream grew %d KiB during the flood" % (rss1 - rss0))
    for x in flood:
        x.close()
    s.close()


def gate(chain):
    """--tunnel-handshakes-max 4 --tunnel-handshakes-per-source 2 --tunnel-handshake-timeout 2s."""
    port = chain.cloud.ports["tunnel"]
    stalled = []
    t_open = time.monotonic()
    for _ in range(2):  # a TLS record header, then nothing: a handshake that never ends
        x = socket.create_connection(("127.0.0.1", port))
        x.sendall(b"\x16\x03\x01")
        stalled.append(x)
    time.sleep(0.3)
    # The same source's third is closed at once (it had sent its bytes, so it was accepted).
    third = socket.create_connection(("127.0.0.1", port))
    third.sendall(b"\x16\x03\x01")
    _, took = h.wait_closed(third, 3)
    third.close()
    check(took < 1.0, "a third handshake from one source took %.2f s to be refused" % took)
    # What /metrics shows meanwhile: two handshakes held, one refused for its source.
    inflight = h.metric(chain.cloud, "cloudstream_tunnel_handshakes_in_flight")
    refused = h.metric(chain.cloud, "cloudstream_tunnel_refused_per_source_total")
    check(inflight == 2, "handshakes in flight by /metrics: %g, want 2" % inflight)
    check(refused == 1, "refused per source by /metrics: %g, want 1" % refused)
    # The stalled ones hold their slots until the deadline (2 s), then end.
    for x in stalled:
        h.wait_closed(x, 6)  # raises if it outlives the deadline
        lived = time.monotonic() - t_open
        check(lived > 1.5, "a stalled handshake ended after %.2f s, before its deadline" % lived)
        x.close()
    new_edge_works(chain, "edge-2")


def emfile(chain):
    pid = chain.cloud.pid
    port = chain.cloud.ports["tunnel"]
    status, _, _, s = chain.get("/metrics")
    check(status == 200, "before: status %d" % status)
    with open(chain.cloud.logpath, "rb") as f:
        log0 = len(f.read().splitlines())
    hogs = []
    for _ in range(80):  # each sends a byte, so the kernel hands it over and it takes an fd
        x = socket.create_connection(("127.0.0.1", port))
        x.sendall(b"\x16")
        hogs.append(x)
    time.sleep(0.5)
    c0, w0 = proc_cpu_s(pid), time.monotonic()
    time.sleep(2.0)
    cpu = (proc_cpu_s(pid) - c0) / (time.monotonic() - w0)
    status, took = timed_get(chain, s)
    with open(chain.cloud.logpath, "rb") as f:
        lines = f.read().splitlines()[log0:]
    listener = [ln for ln in lines if b"tunnel listener" in ln or b"lws:" in ln]
    print("     at the fd limit: cloudstream CPU %.0f %% of a core, %d listener/lws log lines, "
          "a request answered in %.3f s" % (100 * cpu, len(listener), took), flush=True)
    check(status == 200, "at the fd limit: status %d" % status)
    check(cpu < 0.3, "cloudstream spins at the fd limit: %.0f %% of a core" % (100 * cpu))
    check(len(listener) <= 25, "%d listener/lws log lines at the fd limit" % len(listener))
    check(any(b"Too many open files" in ln for ln in listener),
          "the fd limit was never reached (log: %r)" % listener[-5:])
    pauses = h.metric(chain.cloud, "cloudstream_tunnel_accept_pauses_total")
    check(pauses >= 1, "no accept pause counted at the fd limit")
    for x in hogs:
        x.close()
    time.sleep(2.5)  # the hogs' handshakes end; accepting resumes
    new_edge_works(chain, "edge-2")
    s.close()


VANISH_TUNNELS = 400
PARTITION_TUNNELS = 200
DROP_WARN_LINES = 20  # per 10 s: DROP_WARN_LINES_PER_WINDOW in cloudstream/src/tunnel_io.c


def log_mark(cloud):
    return os.path.getsize(cloud.logpath)


def log_since(cloud, mark):
    with open(cloud.logpath, "rb") as f:
        f.seek(mark)
        return f.read().decode(errors="replace").splitlines()


def closed_total(cloud, reason):
    return h.metric(cloud, 'cloudstream_tunnels_closed_total{reason="%s"}' % reason)


def wait_closed_total(cloud, reason, want, timeout):
    deadline = time.monotonic() + timeout
    while True:
        n = closed_total(cloud, reason)
        if n >= want:
            return n
        check(time.monotonic() < deadline, "tunnels_closed_total{reason=%r}: %g, want %d"
              % (reason, n, want))
        time.sleep(0.1)


def unmasked_frame_tunnel(chain):
    """One tunnel as edge-2 whose first frame is unmasked (RFC 6455 §5.1: the server closes)."""
    ctx = ssl.create_default_context(cafile=chain.env.path("tunnel-ca.crt"))
    ctx.load_cert_chain(chain.env.path("node-edge-2.crt"), chain.env.path("node-edge-2.key"))
    raw = socket.create_connection(("127.0.0.1", chain.cloud.ports["tunnel"]), timeout=10)
    s = ctx.wrap_socket(raw, server_hostname="localhost")
    s.sendall(h.head("GET", "/v1/kubeedge/connect", [
        ("Host", "localhost"), ("Upgrade", "websocket"), ("Connection", "Upgrade"),
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="), ("Sec-WebSocket-Version", "13"),
        ("SessionHostNameOverride", "edge-2")]))
    status, _, _ = h.read_head(s)
    check(status == 101, "tunnel upgrade: %d" % status)
    s.sendall(b"\x82\x01x")  # BINARY, 1 byte, no mask
    h.wait_closed(s, 5)
    s.close()


def tunnel_load(chain, n, prefix):
    """test/bench/tunnel_load with @n tunnels, in a process group of its own, once all are up."""
    load = subprocess.Popen(
        [os.path.join(h.BIN, "test", "bench", "tunnel_load"), "--port",
         str(chain.cloud.ports["tunnel"]), "--ca-cert", chain.env.path("tunnel-ca.crt"),
         "--ca-key", chain.env.path("tunnel-ca.key"), "--server-ca", chain.env.path("tunnel-ca.crt"),
         "--n", str(n), "--prefix", prefix, "--quiet"], stdout=subprocess.PIPE, text=True,
        start_new_session=True)
    for line in load.stdout:  # "all-up n=N ..." once every tunnel is open
        if line.startswith("all-up"):
            return load
    load.wait()
    raise h.Fail("tunnel_load ended before its tunnels were up")


def kill_group(p):
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()


def vanish(chain):
    cloud = chain.cloud
    # The test edge answers no PING: with --dead-peer-timeout 5s it would be found dead over and
    # over. Only tunnel_load's tunnels (which answer) and the raw ones below stay.
    chain.env.stop(chain.edge)
    gone0, err0 = closed_total(cloud, "edge_gone"), closed_total(cloud, "edge_error")
    load = tunnel_load(chain, VANISH_TUNNELS, "vanish-")
    mark = log_mark(cloud)
    try:
        load.send_signal(signal.SIGTERM)  # its processes exit: sockets closed, no close_notify
        load.wait(20)
    finally:
        if load.poll() is None:
            kill_group(load)
    gone = wait_closed_total(cloud, "edge_gone", gone0 + VANISH_TUNNELS, 30) - gone0
    lines = log_since(cloud, mark)
    warns = [ln for ln in lines if " warn " in ln or " error " in ln]
    dropped = [ln for ln in lines if "tunnel dropped" in ln]
    print("     %d tunnels vanished: edge_gone counted %d, %d warn/error lines, %d 'tunnel "
          "dropped' lines (%d log lines in all, 'tunnel up'/'tunnel down' at info)"
          % (VANISH_TUNNELS, gone, len(warns), len(dropped), len(lines)), flush=True)
    check(gone == VANISH_TUNNELS, "edge_gone counted %d of %d" % (gone, VANISH_TUNNELS))
    check(not warns, "warn lines for vanished edges: %r" % warns[:5])
    check(not dropped, "'tunnel dropped' lines at info: %r" % dropped[:5])

    # A partition: every tunnel of tunnel_load silent at once (SIGSTOP), each found dead
    # (--dead-peer-timeout 5s), counted; WARN lines held to the budget.
    load = tunnel_load(chain, PARTITION_TUNNELS, "silent-")
    mark = log_mark(cloud)
    dead0 = closed_total(cloud, "dead")
    try:
        os.killpg(load.pid, signal.SIGSTOP)
        dead = wait_closed_total(cloud, "dead", dead0 + PARTITION_TUNNELS, 30) - dead0
        t_dead = time.monotonic()  # the budget's window began before this
    finally:
        kill_group(load)
    lines = log_since(cloud, mark)
    dead_warns = [ln for ln in lines if "tunnel dropped: nothing received" in ln]
    print("     %d tunnels silent at once: dead counted %d, %d WARN lines for them"
          % (PARTITION_TUNNELS, dead, len(dead_warns)), flush=True)
    check(dead == PARTITION_TUNNELS, "dead counted %d of %d" % (dead, PARTITION_TUNNELS))
    warns = [ln for ln in lines if " warn " in ln]
    check(len(dead_warns) == len(warns) == DROP_WARN_LINES,
          "%d WARN lines (%d for dead tunnels) for %d dead tunnels, want %d"
          % (len(warns), len(dead_warns), PARTITION_TUNNELS, DROP_WARN_LINES))
    time.sleep(max(0.0, 10.5 - (time.monotonic() - t_dead)))  # the budget's next window

    # Errors: each counted, WARN lines held to the budget for the window; each window's first
    # line says how many the last one held back (the partition's, then these).
    n_err = DROP_WARN_LINES + 10
    mark = log_mark(cloud)
    t0 = time.monotonic()
    for _ in range(n_err):
        unmasked_frame_tunnel(chain)
    err = wait_closed_total(cloud, "edge_error", err0 + n_err, 10) - err0
    took = time.monotonic() - t0
    lines = log_since(cloud, mark)
    warns = [ln for ln in lines if "tunnel dropped: an unmasked frame" in ln]
    check(took < 9.0, "%d bad tunnels took %.1f s, over the log window" % (n_err, took))
    check(err == n_err, "edge_error counted %d of %d" % (err, n_err))
    check(len(warns) == DROP_WARN_LINES, "%d WARN lines for %d bad tunnels in one window, "
          "want %d" % (len(warns), n_err, DROP_WARN_LINES))
    time.sleep(max(0.0, 10.5 - (time.monotonic() - t0)))  # the next window
    unmasked_frame_tunnel(chain)
    wait_closed_total(cloud, "edge_error", err0 + n_err + 1, 10)
    lines = log_since(cloud, mark)
    summary = [ln.split(" ", 2)[2].strip() for ln in lines
               if "more tunnel warnings not logged" in ln]
    print("     %d tunnels dropped for an unmasked frame: edge_error counted %d, %d WARN lines "
          "in the first 10 s; summaries: %r" % (n_err, err, len(warns), summary), flush=True)
    check(len(summary) == 2 and
          summary[0].startswith("%d more " % (PARTITION_TUNNELS - DROP_WARN_LINES)) and
          summary[1].startswith("%d more " % (n_err - DROP_WARN_LINES)),
          "the summary lines: %r" % summary)


def limit_fds(n):
    def pre():
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))
    return pre


def main():
    raise_nofile()
    group = sys.argv[1] if len(sys.argv) > 1 else "silent"
    sys.argv = sys.argv[1:]
    if group == "silent":
        chain = Chain("flood-silent")
        tests = [("silent", lambda: silent(chain))]
    elif group == "gate":
        chain = Chain("flood-gate", cloud_extra=(
            "--tunnel-handshakes-max", "4", "--tunnel-handshakes-per-source", "2",
            "--tunnel-handshake-timeout", "2s"))
        tests = [("gate", lambda: gate(chain))]
    elif group == "vanish":
        chain = Chain("flood-vanish", cloud_extra=("--log-level", "info", "--ping-interval",
                                                   "1s", "--dead-peer-timeout", "5s"))
        tests = [("vanish", lambda: vanish(chain))]
    else:
        chain = Chain("flood-emfile", cloud_extra=(
            "--tunnel-handshakes-per-source", "1000", "--tunnel-handshake-timeout", "2s"),
            cloud_prefix=("prlimit", "--nofile=64"))
        tests = [("emfile", lambda: emfile(chain))]
    rc = 1
    try:
        rc = h.run(h.named("flood", tests))
        return rc
    finally:
        chain.close(rc != 0)


if __name__ == "__main__":
    sys.exit(main())
