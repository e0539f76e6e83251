#!/usr/bin/python3
"""edgestream's loop never blocks: host names are resolved on its workers (edgestream/src/
resolve.h), its ready file is written by a worker.

    edge_noblock_test.py noblock [test names...]

Each edgestream here runs in a mount namespace of its own (unshare -m) where the test's files
are bind-mounted over /etc/hosts and /etc/resolv.conf, so the names it resolves are the test's:

kubelet_by_name:  --kubelet-url https://kubelet.edge.test:PORT (in that /etc/hosts) against a
                  kubelet stand-in whose certificate names only kubelet.edge.test: the requests
                  (HTTP/1.1, then on the kept connection) are answered, so the
                  address was dialled and the name checked; the name was resolved once. Then
                  the kubelet moves to 127.0.0.2 under the same name: one request fails (502),
                  which makes the next dial resolve the name again, and requests are answered.
kubelet_by_name_h2: the same over HTTP/2 (--kubelet-http2 auto).
tcp_target_kubelet_by_name: cloudstream's front door (kube-apiserver's CONNECT) reaches the
                  TCP target "kubelet" dialled at the name's address; the apiserver's TLS
                  inside it is answered.
cloud_by_name:    --cloud-url wss://cloud.edge.test:PORT: the tunnel comes up.
kubelet_name_hangs: the name is not in /etc/hosts and the nameserver (a UDP socket of the
                  test) never answers: while the resolution hangs the edge's loop keeps
                  answering (its /metrics and a local-port stream within 0.5 s), the kubelet
                  request ends with 504 (connect deadline, "resolving its name timed out"),
                  then, once the resolver gave up, with 502 and the reason at once; the failure
                  is logged once and counted. Against the loop-thread resolution this replaced
                  (lws's getaddrinfo) the probes waited for the resolver.
stop_while_name_hangs: the kubelet's name hangs (a nameserver that never answers, resolv.conf
                  timeout:30 attempts:2, so getaddrinfo holds its worker for a minute): SIGTERM
                  makes the edge exit within 3 s, status 0, its usual last line ("stopped")
                  and no sanitizer report; the stop waited ST_WORKQ_ABANDON_MS for the
                  resolution, then left it to its worker (logged). Before, the stop joined
                  the worker: the edge exited when the resolver gave up (60 s).
ready_file_blocks: the ready file's temporary file is a FIFO nobody reads, so writing it
                  blocks: the tunnel is up and the loop answers /metrics all the same (the write
                  hangs a worker); once the test reads the FIFO the worker goes on. Against the
                  loop-thread write this replaced, /metrics did not answer.
"""
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402
import standin  # noqa: E402
from harness import check  # noqa: E402

HANG_NS = "127.0.0.77"  # the never-answering nameserver's address (port 53)
RESOLVER_TIMEOUT_S = 3


def in_own_etc(hosts, resolv):
    """A prefix running a program with @hosts and @resolv (paths) as its /etc/hosts and
    /etc/resolv.conf, in a private mount namespace; the program keeps the PID (exec)."""
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            'mount --bind "$1" /etc/hosts && mount --bind "$2" /etc/resolv.conf && '
            'shift 2 && exec "$@"', "sh", hosts, resolv]


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def etc_files(env, hosts_lines, nameserver="127.0.0.1", timeout_s=RESOLVER_TIMEOUT_S,
              attempts=1):
    hosts = write(env.path("hosts"), "127.0.0.1 localhost\n" + hosts_lines)
    resolv = write(env.path("resolv.conf"), "nameserver %s\noptions timeout:%d attempts:%d\n" %
                   (nameserver, timeout_s, attempts))
    return hosts, resolv


def start_edge(env, cloud, kubelet_url, hosts, resolv, cloud_url=None, extra=()):
    name = "edgestream-edge-1"
    ready = os.path.join(env.dir, name + ".ready")
    if os.path.exists(ready):
        os.unlink(ready)
    argv = [os.path.join(h.BIN, "edgestream", "edgestream"),
            "--cloud-url",
            cloud_url or "wss://127.0.0.1:%d/v1/kubeedge/connect" % cloud.ports["tunnel"],
            "--cloud-server-name", "localhost",
            "--tunnel-cert", env.path("node-edge-1.crt"),
            "--tunnel-key", env.path("node-edge-1.key"),
            "--tunnel-ca", env.path("tunnel-ca.crt"),
            "--kubelet-url", kubelet_url,
            "--kubelet-cert", env.path("edgestream-kubelet-client.crt"),
            "--kubelet-key", env.path("edgestream-kubelet-client.key"),
            "--kubelet-ca", env.path("kubelet-ca.crt"),
            "--admin-listen", "127.0.0.1:0", "--ready-file", ready,
            "--log-level", "debug"] + list(extra)
    p, text = env.start(name, argv, ready, prefix=in_own_etc(hosts, resolv))
    p.ports = h.ready_ports(text.split("node=")[0])
    return p


def get(api, target, timeout=15.0):
    st, _, body, s = api.request("GET", target, [("Host", "edge-1:10350")], timeout=timeout)
    s.close()
    return st, body


def timed(fn):
    t0 = time.monotonic()
    r = fn()
    return r, time.monotonic() - t0


def log_count(p, pattern):
    with open(p.logpath, "rb") as f:
        return len(re.findall(pattern, f.read()))


class LocalHttp:
    """node-exporter's stand-in on a loopback port (a local-port stream beside the kubelet's)."""

    def __init__(self):
        class Handler(standin.Handler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):  # noqa: N802 - http.server's name
                self.reply(200, b"node_exporter_up 1\n", "text/plain")

        self.srv = standin.serve(Handler)
        self.port = self.srv.server_address[1]

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


def kubelet_by_name(g):
    env = g.env
    # A kubelet certificate that names kubelet.edge.test only: verified against the name,
    # never the address dialled.
    env.mint("server", "--ca", env.path("kubelet-ca"), "--out", env.path("kubelet-named"),
             "--cn", "kubelet.edge.test", "--dns", "kubelet.edge.test")
    kubelet = h.start_kubelet(env, name="kubelet-named",
                              extra=["--cert", env.path("kubelet-named.crt"),
                                     "--key", env.path("kubelet-named.key")])
    cloud = h.start_cloudstream(env)
    hosts, resolv = etc_files(env, "127.0.0.1 kubelet.edge.test\n")
    edge = start_edge(env, cloud, "https://kubelet.edge.test:%d" % kubelet.port, hosts, resolv)
    api = h.Api(env, cloud.ports["stream"])
    for i in range(3):  # the first waits for (or finds) the answer, the next use the cache
        st, body = get(api, "/pods")
        check(st == 200, "kubelet by name, GET %d: %d %r" % (i, st, body[:200]))
    ok = h.metric(edge, "edgestream_name_resolutions_total", 'name="kubelet",result="ok"')
    check(ok == 1, "the kubelet's name resolved %s times, want once" % ok)
    # The kubelet goes, and comes back at another address under the same name: the failed
    # connect makes the next dial resolve the name again (not each request).
    env.stop(kubelet)
    st, body = get(api, "/pods")
    check(st == 502, "the kubelet gone: %d %r" % (st, body[:200]))
    write(hosts, "127.0.0.1 localhost\n127.0.0.2 kubelet.edge.test\n")  # same inode
    h.start_kubelet(env, name="kubelet-moved",
                    extra=["--cert", env.path("kubelet-named.crt"),
                           "--key", env.path("kubelet-named.key"),
                           "--listen", "127.0.0.2:%d" % kubelet.port])
    for i in range(3):
        st, body = get(api, "/whoami")
        check(st == 200, "the kubelet moved, GET %d: %d %r" % (i, st, body[:200]))
    ok = h.metric(edge, "edgestream_name_resolutions_total", 'name="kubelet",result="ok"')
    check(ok == 2, "the kubelet's name resolved %s times, want twice" % ok)
    h.stop_clean(env, edge)
    print("kubelet_by_name: GETs answered through kubelet.edge.test; after the kubelet moved "
          "to 127.0.0.2, one failed request, then answered again; resolved %d times" % ok)


def kubelet_by_name_h2(g):
    """The same name over HTTP/2 (h2conn.c dials the resolved address too)."""
    env = g.env
    kubelet = h.start_kubelet(env, name="kubelet-h2",
                              extra=["--cert", env.path("kubelet-named.crt"),
                                     "--key", env.path("kubelet-named.key"), "--h2"])
    cloud = h.start_cloudstream(env, name="cloudstream-h2")
    hosts, resolv = etc_files(env, "127.0.0.1 kubelet.edge.test\n")
    edge = start_edge(env, cloud, "https://kubelet.edge.test:%d" % kubelet.port, hosts, resolv,
                      extra=["--kubelet-http2", "auto"])
    api = h.Api(env, cloud.ports["stream"])
    for i in range(3):
        st, body = get(api, "/proto")
        check(st == 200 and body == b"h2", "over h2 by name, GET %d: %d %r" % (i, st, body))
    ok = h.metric(edge, "edgestream_name_resolutions_total", 'name="kubelet",result="ok"')
    check(ok == 1, "the kubelet's name resolved %s times, want once" % ok)
    h.stop_clean(env, edge)


def cloud_by_name(g):
    env = g.env
    kubelet = h.start_kubelet(env, name="kubelet-c")
    cloud = h.start_cloudstream(env, name="cloudstream-c")
    hosts, resolv = etc_files(env, "127.0.0.1 cloud.edge.test\n")
    edge = start_edge(env, cloud, "https://127.0.0.1:%d" % kubelet.port, hosts, resolv,
                      cloud_url="wss://cloud.edge.test:%d/v1/kubeedge/connect" %
                      cloud.ports["tunnel"])
    ok = h.metric(edge, "edgestream_name_resolutions_total", 'name="cloud",result="ok"')
    check(ok >= 1, "the cloud's name: %s resolutions" % ok)
    api = h.Api(env, cloud.ports["stream"])
    st, body = get(api, "/pods")
    check(st == 200, "through the tunnel dialled by name: %d %r" % (st, body[:200]))
    h.stop_clean(env, edge)


class SilentNameserver:
    """A UDP socket on HANG_NS:53 that reads queries and never answers; counts them."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((HANG_NS, 53))
        self.sock.settimeout(0.2)
        self.queries = 0
        self.stop = False
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop:
            try:
                self.sock.recvfrom(4096)
                self.queries += 1
            except socket.timeout:
                pass

    def close(self):
        self.stop = True
        self.t.join()
        self.sock.close()


def silent_ns(g):
    """The group's SilentNameserver (one socket on HANG_NS:53 for every test), its count reset."""
    if getattr(g, "silent_ns", None) is None:
        g.silent_ns = SilentNameserver()
        g.on_close(g.silent_ns.close)
    g.silent_ns.queries = 0
    return g.silent_ns


def kubelet_name_hangs(g):
    env = g.env
    ns = silent_ns(g)
    local = LocalHttp()
    g.on_close(local.close)
    kubelet = h.start_kubelet(env, name="kubelet-h")
    cloud = h.start_cloudstream(env, name="cloudstream-h")
    hosts, resolv = etc_files(env, "", nameserver=HANG_NS)
    edge = start_edge(env, cloud, "https://kubelet.hang.test:%d" % kubelet.port, hosts, resolv,
                      extra=["--backend-dial-timeout", "1500ms",
                             "--local-port", "node-exporter=%d" % local.port])
    api = h.Api(env, cloud.ports["stream"])
    out = {}

    def kubelet_get():
        out["kubelet"] = timed(lambda: get(api, "/pods"))

    t = threading.Thread(target=kubelet_get)
    t.start()
    time.sleep(0.3)  # the kubelet stream waits on the name now
    worst = 0.0
    for _ in range(4):
        (st, text), dt = timed(lambda: h.admin_get(edge, "/metrics"))
        check(st == 200, "/metrics while the name hangs: %d" % st)
        worst = max(worst, dt)
        (st, body), dt = timed(lambda: get(api, "/ports/node-exporter/metrics"))
        check(st == 200 and body == b"node_exporter_up 1\n",
              "a local port while the name hangs: %d %r" % (st, body))
        worst = max(worst, dt)
        time.sleep(0.1)
    check(worst < 0.5, "the loop answered in %.2f s at worst while the name hung" % worst)
    t.join(20)
    (st, body), dt = out["kubelet"]
    check(st == 504 and b"resolving its name timed out" in body,
          "the kubelet while its name hangs: %d %r after %.1f s" % (st, body[:300], dt))
    check(ns.queries >= 1, "the nameserver got no query")
    # The resolver gives up (timeout:3): then the next request fails at once with the reason.
    deadline = time.monotonic() + 3 * RESOLVER_TIMEOUT_S + 5
    while h.metric(edge, "edgestream_name_resolutions_total",
                   'name="kubelet",result="failed"') < 1:
        check(time.monotonic() < deadline, "no failed resolution counted")
        time.sleep(0.2)
    (st, body), dt = timed(lambda: get(api, "/pods"))
    check(st == 502 and b"cannot resolve kubelet.hang.test" in body,
          "the kubelet once its name failed: %d %r" % (st, body[:300]))
    check(dt < 1.0, "the failure took %.2f s" % dt)
    (st, body), _ = timed(lambda: get(api, "/pods"))
    check(st == 502, "again: %d" % st)
    n = log_count(edge, rb"\(the kubelet's name\)")
    check(n == 1, "the resolution failure was logged %d times, want once" % n)
    h.stop_clean(env, edge)
    print("kubelet_name_hangs: loop answered within %.3f s at worst; kubelet 504 after %.1f s, "
          "then 502 at once (%.3f s); %d DNS queries seen" % (worst, out["kubelet"][1], dt,
                                                              ns.queries))


def stop_while_name_hangs(g):
    env = g.env
    ns = silent_ns(g)
    kubelet = h.start_kubelet(env, name="kubelet-s")
    cloud = h.start_cloudstream(env, name="cloudstream-s")
    hosts, resolv = etc_files(env, "", nameserver=HANG_NS, timeout_s=30, attempts=2)
    edge = start_edge(env, cloud, "https://kubelet.stop.test:%d" % kubelet.port, hosts, resolv)
    # The start-up prefetch of the kubelet's name is on a worker now, waiting on the nameserver.
    deadline = time.monotonic() + 10
    while ns.queries < 1:
        check(time.monotonic() < deadline, "the nameserver got no query")
        time.sleep(0.05)
    time.sleep(0.3)
    t0 = time.monotonic()
    edge.send_signal(signal.SIGTERM)
    try:
        edge.wait(20)
    except subprocess.TimeoutExpired:
        pass
    dt = time.monotonic() - t0
    check(edge.returncode is not None, "the edge did not exit within 20 s of SIGTERM while its "
          "kubelet's name hung")
    check(dt < 3.0, "the edge exited %.2f s after SIGTERM while its kubelet's name hung" % dt)
    h.stop_clean(env, edge)  # status 0, no sanitizer report
    with open(edge.logpath, "rb") as f:
        lines = f.read().rstrip().split(b"\n")
    check(lines[-1].endswith(b"stopped"), "the edge's last line: %r" % lines[-1])
    check(log_count(edge, rb"stopping without waiting for 1 blocking call") == 1,
          "the abandoned resolution was not logged")
    print("stop_while_name_hangs: exited %.3f s after SIGTERM (status 0) while getaddrinfo "
          "hung; %d DNS queries seen" % (dt, ns.queries))


def tcp_target_kubelet_by_name(g):
    """cloudstream's front door: kube-apiserver's CONNECT to the node's kubelet becomes a
    TCP_CONNECT to the edge's target "kubelet", which dials --kubelet-url's name's address
    (local_port.c's connection, the same cache); the apiserver's TLS inside it is answered."""
    import front_door_test as fdt
    env = g.env
    fdt.mint_pki(env)

    class Door:
        pass

    chain = Door()
    chain.env = env
    chain.sock_path = env.sock("front-door.sock")
    kubelet = fdt.start_kubelet_for_node(env, name="kubelet-door")
    cloud = h.start_cloudstream(env, name="cloudstream-door", extra=[
        "--front-door-listen", "127.0.0.1:0", "--front-door-socket", chain.sock_path,
        "--front-door-cert", env.path("front-door.crt"),
        "--front-door-key", env.path("front-door.key"),
        "--front-door-client-ca", env.path("egress-ca.crt"),
        "--front-door-allowed-subjects", "kube-apiserver-egress"])
    chain.door_port = cloud.ports["front_door"]
    hosts, resolv = etc_files(env, "127.0.0.1 kubelet.edge.test\n")
    edge = start_edge(env, cloud, "https://kubelet.edge.test:%d" % kubelet.port, hosts, resolv,
                      extra=["--kubelet-server-name", "localhost"])
    fdt.Chain.wait_node(chain, fdt.NODE_IP)
    t = fdt.tunnel(chain, via="uds")
    st, _, body = fdt.get(t, "/pods")
    t.close()
    check(st == 200, "GET through the front door: %d %r" % (st, body[:200]))
    check(log_count(edge, rb"TCP target kubelet \(kubelet\.edge\.test:%d\)" % kubelet.port) >= 1,
          "the edge did not dial the TCP target kubelet by its name")
    ok = h.metric(edge, "edgestream_name_resolutions_total", 'name="kubelet",result="ok"')
    check(ok == 1, "the kubelet's name resolved %s times, want once" % ok)
    h.stop_clean(env, edge)


def ready_file_blocks(g):
    env = g.env
    kubelet = h.start_kubelet(env, name="kubelet-r")
    cloud = h.start_cloudstream(env, name="cloudstream-r")
    ready = os.path.join(env.dir, "edge-fifo.ready")
    admin = h.free_port()
    argv = [os.path.join(h.BIN, "edgestream", "edgestream"),
            "--cloud-url", "wss://127.0.0.1:%d/v1/kubeedge/connect" % cloud.ports["tunnel"],
            "--cloud-server-name", "localhost",
            "--tunnel-cert", env.path("node-edge-1.crt"),
            "--tunnel-key", env.path("node-edge-1.key"),
            "--tunnel-ca", env.path("tunnel-ca.crt"),
            "--kubelet-url", "https://127.0.0.1:%d" % kubelet.port,
            "--kubelet-cert", env.path("edgestream-kubelet-client.crt"),
            "--kubelet-key", env.path("edgestream-kubelet-client.key"),
            "--kubelet-ca", env.path("kubelet-ca.crt"),
            "--admin-listen", "127.0.0.1:%d" % admin, "--ready-file", ready]
    # The daemon writes READY.tmp.PID, then renames it: a FIFO there (the shell execs the
    # daemon, so $$ is its PID) blocks the open until someone reads.
    log = open(os.path.join(env.dir, "edgestream-fifo.log"), "wb")
    p = subprocess.Popen(["sh", "-c", 'mkfifo "$0.tmp.$$" && exec "$@"', ready] + argv,
                         stdout=log, stderr=subprocess.STDOUT)
    p.name, p.logpath = "edgestream-fifo", log.name
    env.procs.append(p)
    fifo = "%s.tmp.%d" % (ready, p.pid)
    p.ports = {"admin": admin}
    deadline = time.monotonic() + 20
    connected = 0.0
    while connected != 1.0:
        check(time.monotonic() < deadline and p.poll() is None,
              "the tunnel did not come up, or /metrics did not answer:\n" + env.tail(p))
        try:
            connected = h.metric(p, "edgestream_tunnel_connected", 'protocol="extended"')
        except (OSError, h.Fail):
            time.sleep(0.1)
    time.sleep(0.3)  # the write is under way (blocked) now
    (st, _), dt = timed(lambda: h.admin_get(p, "/metrics"))
    check(st == 200 and dt < 0.5, "/metrics while the ready file blocks: %d in %.2f s" %
          (st, dt))
    check(os.path.exists(fifo) and not os.path.exists(ready), "the write did not block")
    want = b"admin=%d\nnode=edge-1\n" % admin
    with open(fifo, "rb") as f:  # lets the worker go on (its fsync then fails on a FIFO)
        got = f.read(len(want))
    check(got == want, "ready file: %r" % got)
    # The worker's failure is logged (fsync on a FIFO: EINVAL) and its descriptor closed.
    h.wait_log(p, r"--ready-file .*: Invalid argument", 0)
    fds = os.listdir("/proc/%d/fd" % p.pid)
    left = [fd for fd in fds if os.readlink("/proc/%d/fd/%s" % (p.pid, fd)).startswith(fifo)]
    check(not left, "the FIFO is still open in the daemon: fds %s" % left)
    h.stop_clean(env, p)
    print("ready_file_blocks: /metrics answered in %.3f s while the ready file's write blocked"
          % dt)


def group_noblock():
    if subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode != 0:
        h.skip("needs unshare --mount (root)")
    with h.Group("noblock", "es-noblock") as g:
        return g.run([
            ("kubelet_by_name", lambda: kubelet_by_name(g)),
            ("kubelet_by_name_h2", lambda: kubelet_by_name_h2(g)),
            ("cloud_by_name", lambda: cloud_by_name(g)),
            ("kubelet_name_hangs", lambda: kubelet_name_hangs(g)),
            ("stop_while_name_hangs", lambda: stop_while_name_hangs(g)),
            ("ready_file_blocks", lambda: ready_file_blocks(g)),
            ("tcp_target_kubelet_by_name", lambda: tcp_target_kubelet_by_name(g)),
        ])


if __name__ == "__main__":
    sys.exit(h.main_by_group({"noblock": group_noblock}, "noblock"))
