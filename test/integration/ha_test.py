#!/usr/bin/python3
"""High availability behind one load balancer (issue 13, DESIGN D12, PROTOCOL.md §5.6, §7).

Three cloudstream replicas, each in a network namespace of its own (lib/netns.py: 10.213.K.1-3
on one bridge, this test's namespace on it as 10.213.K.254; every replica on the same tunnel,
stream and admin ports of its own address), linked by --peers over that network. In front of
them **haproxy** (Debian's package, TCP mode, health checked on each replica's /readyz) for
both the tunnel port and the stream port. Edges dial haproxy's tunnel port: edgestream edges
(extensions, RECONNECT) and KubeEdge-protocol test edges (peers/kubeedge_edge.py, base
protocol, --redial 2 as KubeEdge's edge). Requests go to haproxy's stream port or to each
replica's in turn. Root only (namespaces, iptables): skipped otherwise, failed under CI=true.

Groups:
  move       make before break: SIGTERM the replica holding an edgestream edge while an
             exec-like upload runs through it; the edge opens a new tunnel (RECONNECT) through
             haproxy to another replica, the upload completes with its result, new requests
             succeed through every live replica, and the KubeEdge-protocol edge the replica
             held is told to go (CLOSE_CONNECT) and redials elsewhere.
  mesh       10 edgestream + 2 KubeEdge-protocol edges through haproxy; for every node, logs,
             metrics, an exec-like upgrade (SPDY, bytes echoed) and a port-forward-like upgrade
             through each replica in turn and through haproxy: 100 % succeed, bytes identical.
  kill       SIGKILL the replica holding node X while a request loop for X runs through
             haproxy: requests for X succeed again within 2 s (edgestream) / 5 s
             (KubeEdge-protocol); requests for nodes held elsewhere never fail. Prints the
             failover figures.
  rolling    rolling restart of the 3 replicas one at a time (SIGTERM, wait for exit, start
             again on the same ports) with a request loop over all nodes through haproxy: 0
             failed requests started after the first SIGTERM, for the KubeEdge-protocol nodes
             too (their requests wait for the redial, --node-reconnect-grace; the access logs
             show it).
  partition  iptables in one replica's namespace drops everything between it and the other
             replicas' addresses (its edges and clients still reach it through haproxy and
             directly). Both sides notice (the links' liveness, --peer-dead-timeout) and
             forget each other's nodes; meanwhile a node of each side moves to the other one
             (its old edge frozen with its tunnel open, a new one dialled there): split brain
             on purpose. Throughout, requests for every other node sent to its holder, and
             from the other side of the majority, never fail. Healed: the links come back,
             the newer tunnel of each moved node wins and the older is closed, and then every
             node is held by exactly one replica (each replica's /sessions, and every
             directory holds all the others), within HEAL_LIMIT_S (4 s) of the heal; every
             node reachable through all three and haproxy with identical bytes (logs,
             metrics), no request waiting for its node.
"""
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))
sys.path.insert(0, HERE)
import harness as h  # noqa: E402
from harness import check  # noqa: E402
import netns  # noqa: E402
import replicas_test as rt  # noqa: E402  (request helpers, admin port, metrics)

NAMES = rt.NAMES
DRAIN_TIMEOUT = "15s"
PEER_DEAD_S = 3  # --peer-dead-timeout: a silent link goes after this
# partition: how soon after the heal every link is back and every directory full: a dial
# into the partition is given up after a third of --peer-dead-timeout (1 s here), the redial
# comes at most --peer-redial-max (500 ms, + 1/4 jitter) later; the rest is slack for the
# handshakes and the resync on 2 shared cores. (Before the dial had a deadline of its own it
# waited for lws's 10 s while the kernel retransmitted its SYN 1, 3 and 7 s in.)
HEAL_LIMIT_S = 4.0
ES_NODES = tuple("edge-%d" % i for i in range(1, 11))
KE_NODES = ("edge-11", "edge-12")
HAPROXY = "/usr/sbin/haproxy"
# The same ports in every replica's namespace, each on its own address.
TUNNEL, STREAM, ADMIN = 10000, 10350, 10351


class Front:
    """What edges and kube-apiserver see: haproxy's two ports (anything with ports["tunnel"])."""

    def __init__(self, tunnel, stream):
        self.ports = {"tunnel": tunnel, "stream": stream}


class Haproxy:
    def __init__(self, fleet):
        env = fleet.env
        self.env = env
        self.tunnel_port, self.stream_port = h.free_port(), h.free_port()
        # redispatch 1: a connection refused by a dead replica goes to another one at once
        # (without it haproxy retries the same server after its 1 s turn-around).
        cfg = ["global", "  maxconn 4096", "defaults", "  mode tcp",
               "  timeout connect 2s", "  timeout client 1h", "  timeout server 1h",
               "  timeout check 1s", "  option redispatch 1", "  retries 3"]
        for kind, port in (("tunnel", self.tunnel_port), ("stream", self.stream_port)):
            cfg += ["frontend %s" % kind, "  bind 127.0.0.1:%d" % port,
                    "  default_backend %s_replicas" % kind,
                    "backend %s_replicas" % kind, "  balance roundrobin",
                    # a draining replica answers 503 on /readyz: no new connection goes there
                    "  option httpchk GET /readyz", "  http-check expect status 200",
                    "  default-server inter 100ms fall 1 rise 2"]
            for i, name in enumerate(NAMES):
                cfg.append("  server %s %s:%d check port %d" % (
                    name, fleet.addr(i), fleet.port(i, kind), fleet.port(i, "admin")))
        self.cfg = env.path("haproxy.cfg")
        with open(self.cfg, "w") as f:
            f.write("\n".join(cfg) + "\n")
        self.log = open(env.path("haproxy.log"), "wb")
        self.p = subprocess.Popen([HAPROXY, "-db", "-f", self.cfg], stdout=self.log,
                                  stderr=subprocess.STDOUT, preexec_fn=h._die_with_parent)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.stream_port), timeout=1).close()
                break
            except OSError:
                check(self.p.poll() is None, "haproxy exited: %s" % open(
                    env.path("haproxy.log"), "rb").read()[-500:])
                check(time.monotonic() < deadline, "haproxy not listening")
                time.sleep(0.05)
        self.front = Front(self.tunnel_port, self.stream_port)

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(5)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()


class Fleet:
    """Three replicas in their namespaces, one kubelet stand-in behind every edge, haproxy.
    With @lan False the replicas run here on loopback instead, each on ports of its own."""

    def __init__(self, tag, nodes, lan=True):
        self.env = self.hap = None
        self.edges = {}
        self.cs = [None, None, None]
        self.lan = netns.Lan("csha", 3) if lan else None
        self.ports = [{"tunnel": TUNNEL, "stream": STREAM, "admin": ADMIN} if lan else
                      {k: h.free_port() for k in ("tunnel", "stream", "admin")}
                      for _ in range(3)]
        try:
            self.env = h.Env(tag, nodes=nodes)
            self.kubelet = h.start_kubelet(self.env)
            for i in range(3):
                self.start_replica(i)
            self.hap = Haproxy(self)
        except BaseException:
            self.close(True)
            raise

    def start_replica(self, i):
        env, addr = self.env, self.addr(i)
        peers = ",".join("%s:%d" % (self.addr(j), self.port(j, "tunnel")) for j in range(3))
        extra = ["--replica-id", NAMES[i], "--peers", peers, *h.peer_pki_flags(env),
                 "--peer-redial-max", "500ms",
                 "--peer-dead-timeout", "%ds" % PEER_DEAD_S, "--drain-timeout", DRAIN_TIMEOUT]

        def on_addr(argv):
            for kind in ("tunnel", "stream", "admin"):
                argv[argv.index("--%s-listen" % kind) + 1] = "%s:%d" % (addr,
                                                                       self.port(i, kind))
            return argv
        p = rt._orig_start(env, extra=extra, name=NAMES[i],
                           prefix=self.lan.prefix_of(i) if self.lan else (), wrap=on_addr)
        p.host = addr
        self.cs[i] = p
        return p

    def addr(self, i):
        return self.lan.addr(i) if self.lan else "127.0.0.1"

    def port(self, i, kind):
        return self.ports[i][kind]

    def api(self, i):
        return h.Api(self.env, self.port(i, "stream"), host=self.addr(i))

    def tunnel_url(self, i):
        return "wss://%s:%d/v1/kubeedge/connect" % (self.addr(i), self.port(i, "tunnel"))

    def close(self, failed):
        """Processes first (a namespace lives on while one is inside), then the namespaces."""
        try:
            if self.hap:
                self.hap.stop()
            if self.env:  # HA_KEEP=1 keeps the run's directory (logs) after a success too
                h.close_env(self.env, failed or bool(os.environ.get("HA_KEEP")))
        finally:
            if self.lan:
                self.lan.close()


def start_edges(fleet, es_nodes, ke_nodes):
    front = fleet.hap.front
    for node in es_nodes:
        fleet.edges[node] = (h.start_edgestream(fleet.env, front, fleet.kubelet, node=node,
                                                name="edge-" + node), None)
    for node in ke_nodes:
        fleet.edges[node] = (h.start_kubeedge_edge(fleet.env, front, fleet.kubelet, node=node,
                                                   name="ke-" + node,
                                                   extra=("--redial", "2")), None)
    # every replica knows every node held by the others
    n = len(es_nodes) + len(ke_nodes)
    rt.wait_for(lambda: all(sessions(p) + (rt.metric(p, "cloudstream_peer_directory_nodes")
                                           or 0) == n for p in live(fleet)),
                "every node known to every replica", 20)
    rt.ready_all(fleet)


def live(fleet):
    return [p for p in fleet.cs if p is not None and p.poll() is None]


def sessions(p):
    return rt.metric(p, "cloudstream_sessions") or 0


def holder(fleet, node, skip=None):
    """The index of the replica (but @skip) whose admin port lists @node's tunnel, or None."""
    for i, p in enumerate(fleet.cs):
        if p is None or p.poll() is not None or i == skip:
            continue
        try:
            st, body = rt.admin_get(p, "/sessions?node=" + node)
        except OSError:
            continue
        for line in body.splitlines():
            if line.split("\t")[0] == node:
                return i
    return None


def front_api(fleet):
    return h.Api(fleet.env, fleet.hap.stream_port)


def with_ha(tag, nodes, body, lan=True):
    fleet = Fleet(tag, nodes, lan)
    failed = True
    try:
        body(fleet)
        # The edges go first; then every replica still running exits 0 on SIGTERM with a
        # clean ASan/UBSan log.
        for p, _ in fleet.edges.values():
            if p.poll() is None:
                fleet.env.stop(p)
        for p in live(fleet):
            h.stop_clean(fleet.env, p)
        failed = False
    finally:
        fleet.close(failed)


def sink_upload(api, node, n, pace_s, result):
    """An exec-like upload: command=sink reads @n bytes, then answers their sha256 and closes
    (the exec's "exit"). Sent in 8 pieces over @pace_s seconds. @result gets (ok, why)."""
    import hashlib
    try:
        s = api.connect()
        s.sendall(h.head("POST", "/exec/default/pod-a/ctr?command=sink&n=%d" % n,
                         [("Host", "%s:10350" % node)] + rt.UPGRADE_SPDY))
        status, hdrs, rest = h.read_head(s)
        if status != 101:
            result.append((False, "status %d" % status))
            return
        data = os.urandom(n)
        piece = n // 8
        for k in range(8):
            s.sendall(data[k * piece:(k + 1) * piece if k < 7 else n])
            time.sleep(pace_s / 8)
        want = hashlib.sha256(data).hexdigest().encode() + b"\n"
        got = h.recv_until(s, lambda b: len(b) >= len(want), rest)
        s.close()
        result.append((got == want, "sha256 %r" % got[:80]))
    except Exception as e:  # noqa: BLE001
        result.append((False, repr(e)))


# ---- move ---------------------------------------------------------------------------------


def move():
    def body(fleet):
        start_edges(fleet, ("edge-1",), ("edge-11",))
        es_at, ke_at = holder(fleet, "edge-1"), holder(fleet, "edge-11")
        check(es_at is not None and ke_at is not None, "holders %r %r" % (es_at, ke_at))
        victim = es_at
        api = fleet.api(victim)
        result = []
        t = threading.Thread(target=sink_upload, args=(api, "edge-1", 4 << 20, 3.0, result),
                             daemon=True)
        t.start()
        time.sleep(0.5)
        p = fleet.cs[victim]
        t0 = time.monotonic()
        p.terminate()  # SIGTERM: drain
        # The edge's new tunnel comes up elsewhere while the upload still runs on the old one.
        rt.wait_for(lambda: holder_other(fleet, "edge-1", victim), "edge-1 up elsewhere", 10)
        moved_ms = (time.monotonic() - t0) * 1000
        check(t.is_alive(), "the upload ended before the move could be seen")
        asked = rt.metric(p, 'cloudstream_drain_moves_total{how="reconnect"}')
        check(asked and asked >= 1, "cloudstream_drain_moves_total{how=reconnect}: %r" % asked)
        for r in range(3):
            if r != victim:
                rt.logs(fleet.api(r), "edge-1")
        rt.logs(front_api(fleet), "edge-1")
        t.join(20)
        check(result and result[0][0], "the upload across the drain: %r" % (result,))
        rc = p.wait(30)
        drained_ms = (time.monotonic() - t0) * 1000
        check(rc == 0, "the drained replica exited %s" % rc)
        log = open(p.logpath, "rb").read()
        check(b"asked to reconnect elsewhere (RECONNECT)" in log, "no RECONNECT in the log")
        check(b"stopping: drained" in log, "not drained:\n" + fleet.env.tail(p, 20))
        edge_log = open(fleet.edges["edge-1"][0].logpath, "rb").read()
        check(b"the retired tunnel" in edge_log, "the edge did not retire its old tunnel:\n" +
              fleet.env.tail(fleet.edges["edge-1"][0], 20))
        if os.environ.get("HA_DEBUG"):
            for line in edge_log.decode().splitlines():
                if "dial" in line or "tunnel" in line or "drain" in line:
                    print("   edge:", line)
        fleet.cs[victim] = None
        ke_ms = None
        if ke_at == victim:
            # told to go (CLOSE_CONNECT) at once (it had no stream), redialled after 2 s
            rt.wait_for(lambda: holder(fleet, "edge-11") is not None, "edge-11 back", 10)
            ke_ms = (time.monotonic() - t0) * 1000
        for r in range(3):
            if fleet.cs[r] is not None:
                rt.logs(fleet.api(r), "edge-1")
                rt.logs(fleet.api(r), "edge-11")
        print("move: edge-1's new tunnel up on another replica %.0f ms after SIGTERM, the 4 MiB "
              "upload started before it completed with its sha256, the replica drained in "
              "%.0f ms%s" % (moved_ms, drained_ms,
                             "; edge-11 (KubeEdge protocol) back %.0f ms after" % ke_ms
                             if ke_ms else ""), flush=True)
    with_ha("ha-move", ("edge-1", "edge-11"), body)


def holder_other(fleet, node, not_at):
    return holder(fleet, node, skip=not_at) is not None


# ---- mesh -------------------------------------------------------------------------------


def port_forward_echo(api, node):
    """A port-forward-like upgrade (SPDY, portforward.k8s.io): bytes echoed back unchanged."""
    s = api.connect()
    s.sendall(h.head("POST", "/portForward/default/pod-a",
                     [("Host", "%s:10350" % node), ("Connection", "Upgrade"),
                      ("Upgrade", "SPDY/3.1"),
                      ("X-Stream-Protocol-Version", "portforward.k8s.io")]))
    status, hdrs, rest = h.read_head(s)
    check(status == 101, "port-forward on %s: status %d" % (node, status))
    payload = os.urandom(65536)
    s.sendall(payload)
    echo = h.recv_until(s, lambda b: len(b) >= len(payload), rest)
    check(echo == payload, "port-forward on %s: echo differs" % node)
    s.close()


def logs_follow(api, node):
    """logs -f: the head and the first lines arrive while the answer stays open."""
    s = api.connect()
    s.sendall(h.head("GET", "/containerLogs/default/pod-a/ctr?follow=true&tailLines=3",
                     [("Host", "%s:10350" % node)]))
    status, hdrs, rest = h.read_head(s)
    check(status == 200, "logs -f on %s: status %d" % (node, status))
    buf = h.recv_until(s, lambda b: b"line 4\n" in b, rest)
    check(b"line 1\n" in buf and b"line 4\n" in buf, "logs -f on %s: %r" % (node, buf[:200]))
    s.close()


def mesh():
    def body(fleet):
        start_edges(fleet, ES_NODES, KE_NODES)
        direct = rt.kubelet_metrics(fleet)
        apis = [("cs-a", fleet.api(0)), ("cs-b", fleet.api(1)), ("cs-c", fleet.api(2)),
                ("haproxy", front_api(fleet))]
        n = 0
        for node in ES_NODES + KE_NODES:
            for _, api in apis:
                rt.logs(api, node)
                logs_follow(api, node)
                rt.metrics(api, node, direct)
                rt.exec_echo(api, node)
                port_forward_echo(api, node)
                n += 5
        held = [sessions(p) for p in fleet.cs]
        check(sum(held) == len(ES_NODES) + len(KE_NODES), "sessions %r" % held)
        print("mesh: 12 nodes (10 edgestream, 2 KubeEdge protocol) spread %r over the replicas "
              "by haproxy; %d requests (logs, logs -f, metrics, exec, port-forward) through each "
              "replica and haproxy: all succeeded, bytes identical" % (held, n), flush=True)
    with_ha("ha-mesh", ES_NODES + KE_NODES, body)


# ---- request loops ------------------------------------------------------------------------


class Loops:
    """A request loop per node through haproxy's stream port: (start, end, ok, why) each."""

    def __init__(self, fleet, nodes, pause=0.02):
        self.fleet, self.stop, self.rec = fleet, threading.Event(), {n: [] for n in nodes}
        self.threads = [threading.Thread(target=self.loop, args=(n, pause), daemon=True)
                        for n in nodes]
        for t in self.threads:
            t.start()

    def loop(self, node, pause):
        api = front_api(self.fleet)
        want = "".join("line %d\n" % i for i in range(1, 6)).encode()
        while not self.stop.is_set():
            t0, wall = time.monotonic(), time.strftime("%H:%M:%S", time.gmtime()) + (
                "%.3f" % (time.time() % 1))[1:]
            try:
                status, body = rt.get(api, node, "/containerLogs/default/pod-a/ctr?tailLines=5",
                                      timeout=10)
                ok, why = status == 200 and body == want, "%d %r" % (status, body[:120])
            except Exception as e:  # noqa: BLE001 - every failure counts
                ok, why = False, repr(e)
            why = "at %s: %s" % (wall, why)
            self.rec[node].append((t0, time.monotonic(), ok, why))
            time.sleep(pause)

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(15)

    def failed_after(self, node, t):
        return [r for r in self.rec[node] if r[0] >= t and not r[2]]

    def longest_outage(self, node, t):
        """The longest run of failed requests started after @t: from the first one's start
        to the next success's end (seconds)."""
        worst, first = 0.0, None
        for r in (r for r in self.rec[node] if r[0] >= t):
            if not r[2] and first is None:
                first = r[0]
            elif r[2] and first is not None:
                worst, first = max(worst, r[1] - first), None
        if first is not None:
            worst = max(worst, self.rec[node][-1][1] - first)
        return worst

    def recovered(self, node, t):
        """Seconds from @t to the end of the first success among the requests started after
        it, from which on every request succeeded; None if it never settled."""
        rs = [r for r in self.rec[node] if r[0] >= t]
        last_bad = max((i for i, r in enumerate(rs) if not r[2]), default=-1)
        if last_bad + 1 >= len(rs):
            return None
        return rs[last_bad + 1][1] - t


# ---- kill ---------------------------------------------------------------------------------


def kill():
    def body(fleet):
        start_edges(fleet, ES_NODES, KE_NODES)
        where = {n: holder(fleet, n) for n in ES_NODES + KE_NODES}
        # The victim: the replica holding a KubeEdge-protocol node (the slower case), and with
        # it whatever edgestream nodes it holds.
        victim = where["edge-11"]
        lost = [n for n, i in where.items() if i == victim]
        loops = Loops(fleet, ES_NODES + KE_NODES)
        time.sleep(1.5)
        p = fleet.cs[victim]
        t_kill = time.monotonic()  # recovery is counted from the signal
        p.kill()
        p.wait()
        # Requests that reached the victim between the signal and its death (up to haproxy's
        # connection, ~ms) die with it: no balancer hides a lost connection. Counted from its
        # death on, requests for nodes held elsewhere never fail.
        t_dead = time.monotonic()
        fleet.cs[victim] = None
        time.sleep(7)
        loops.finish()
        figures = []
        for n in ES_NODES + KE_NODES:
            if n in lost:
                r = loops.recovered(n, t_kill)
                limit = 2.0 if n in ES_NODES else 5.0
                if os.environ.get("HA_DEBUG") and n in ES_NODES and (r or 9) > 0.5:
                    print("   %s recovered after %s s; its edge's log:" % (n, r))
                    for line in open(fleet.edges[n][0].logpath, errors="replace"):
                        if any(k in line for k in ("tunnel", "dial", "cloud ")):
                            print("     " + line.rstrip()[:200])
                check(r is not None and r <= limit,
                      "%s (held by the killed replica) recovered after %s s (limit %.0f s): %r"
                      % (n, r, limit, loops.failed_after(n, t_kill)[-3:]))
                figures.append((n, r))
            else:
                bad = loops.failed_after(n, t_dead)
                check(not bad, "%s (held elsewhere) failed %d times after the kill: %r" % (
                    n, len(bad), [(round(b[0] - t_kill, 3),) + b[2:] for b in bad[:3]]))
        total = sum(len(v) for v in loops.rec.values())
        es_f = [r for n, r in figures if n in ES_NODES]
        ke_f = [r for n, r in figures if n in KE_NODES]
        print("kill: SIGKILL of %s holding %d nodes; requests for them succeeded again after "
              "%s ms (edgestream, max %.0f) and %s ms (KubeEdge protocol, max %.0f); %d requests "
              "for the %d nodes held elsewhere started after the kill, 0 failed; %d requests in "
              "all" % (NAMES[victim], len(lost), [round(x * 1000) for x in es_f],
                       max(es_f, default=0) * 1000, [round(x * 1000) for x in ke_f],
                       max(ke_f, default=0) * 1000,
                       sum(1 for n in loops.rec if n not in lost for r in loops.rec[n]
                           if r[0] >= t_dead), len(where) - len(lost), total), flush=True)
        check(es_f, "no edgestream node on the killed replica: %r" % where)
    with_ha("ha-kill", ES_NODES + KE_NODES, body)


# ---- rolling ------------------------------------------------------------------------------


def waited_requests(fleet, nodes):
    """How long (ms) each request for @nodes waited for its node's redial, from the access
    logs of every replica, before and after its restart."""
    pat = re.compile(r"node=(\S+) .*access: .* waited_for_node=(\d+) ms")
    out = []
    for p in fleet.cs:
        if p is None:
            continue
        for path in (p.logpath, p.logpath + ".before-restart"):
            if not os.path.exists(path):
                continue
            for line in open(path, errors="replace"):
                m = pat.search(line)
                if m and m.group(1) in nodes:
                    out.append(int(m.group(2)))
    return out



def rolling():
    def body(fleet):
        start_edges(fleet, ES_NODES, KE_NODES)
        loops = Loops(fleet, ES_NODES + KE_NODES)
        time.sleep(1.0)
        t_first = time.monotonic()
        uploads, steps = [], []
        for i in range(3):
            p = fleet.cs[i]
            held = [n for n in ES_NODES if holder(fleet, n) == i]
            result = []
            if held:  # an exec-like upload through the replica, across its restart
                up = threading.Thread(target=sink_upload,
                                      args=(fleet.api(i), held[0], 2 << 20, 2.0, result),
                                      daemon=True)
                up.start()
                time.sleep(0.3)
            t0 = time.monotonic()
            p.terminate()
            rc = p.wait(40)
            stopped = time.monotonic() - t0
            check(rc == 0, "%s exited %s" % (NAMES[i], rc))
            if held:
                up.join(20)
                check(result and result[0][0], "upload through %s: %r" % (NAMES[i], result))
                uploads.append(held[0])
            fleet.cs[i] = None
            os.replace(p.logpath, p.logpath + ".before-restart")  # kept for a failure
            fleet.start_replica(i)
            rt.wait_for(lambda: rt.admin_get(fleet.cs[i], "/readyz")[0] == 200,
                        "%s ready again" % NAMES[i], 20)
            time.sleep(0.5)  # haproxy: rise 2 x 100 ms
            steps.append((NAMES[i], stopped))
        time.sleep(1.0)
        loops.finish()
        es_bad = {n: loops.failed_after(n, t_first) for n in ES_NODES}
        es_bad = {n: v for n, v in es_bad.items() if v}
        ke_gap = {n: [r for r in loops.failed_after(n, t_first)] for n in KE_NODES}
        total = sum(1 for n in loops.rec for r in loops.rec[n] if r[0] >= t_first)
        check(not es_bad, "edgestream nodes failed during the rolling restart: %r" % (
            {n: (len(v), v[:2]) for n, v in es_bad.items()},))
        # The KubeEdge-protocol edges are between tunnels for ~2 s each time (CLOSE_CONNECT,
        # then KubeEdge's redial): requests meanwhile wait for the redial on whichever replica
        # they reach (--node-reconnect-grace) and then go on, so none fails either.
        check(not any(ke_gap.values()),
              "KubeEdge-protocol nodes failed during the rolling restart: %r" % (
                  {n: (len(v), v[:2]) for n, v in ke_gap.items() if v},))
        waited = waited_requests(fleet, KE_NODES)
        check(waited, "no request for a KubeEdge-protocol node waited for its redial: the "
              "restart did not exercise the wait")
        print("rolling: %s drained and restarted one at a time (%s); %d requests over 12 nodes "
              "started after the first SIGTERM: 0 failed for the 10 edgestream nodes, %s for "
              "the KubeEdge-protocol nodes (told to go, CLOSE_CONNECT, they redial after 2 s: "
              "%d requests waited for the redial, %s ms at most, and then succeeded); "
              "uploads across their replica's restart completed: %s" % (
                  ", ".join(n for n, _ in steps),
                  ", ".join("%s %.1f s" % (n, s) for n, s in steps), total,
                  {n: len(v) for n, v in ke_gap.items()}, len(waited), max(waited, default=0),
                  uploads), flush=True)
    with_ha("ha-rolling", ES_NODES + KE_NODES, body)


# ---- partition ----------------------------------------------------------------------------


def sessions_of(fleet, i):
    """The nodes replica @i holds a tunnel of (its admin port's /sessions)."""
    _, body = rt.admin_get(fleet.cs[i], "/sessions")
    return [line.split("\t")[0] for line in body.splitlines()[1:]
            if line and not line.startswith("#")]


def where(fleet, nodes):
    """node -> the replicas whose /sessions lists it (each list in replica order)."""
    held = {n: [] for n in nodes}
    for i in range(3):
        for n in sessions_of(fleet, i):
            held.setdefault(n, []).append(i)
    return held


def converged(fleet, nodes):
    """Every node held by exactly one replica; every replica's directory holds every node
    the others hold; every replica has its 2 links out and its 2 links in. (ok, what)."""
    held = where(fleet, nodes)
    if any(len(v) != 1 for v in held.values()):
        return False, "holders %r" % held
    for i, p in enumerate(fleet.cs):
        local = sum(1 for v in held.values() if v == [i])
        d = rt.metric(p, "cloudstream_peer_directory_nodes")
        out = rt.metric(p, 'cloudstream_peer_links{dir="out"}')
        inn = rt.metric(p, 'cloudstream_peer_links{dir="in"}')
        if d != len(nodes) - local or out != 2 or inn != 2:
            return False, "%s: %d local, directory %s, links out %s in %s" % (
                NAMES[i], local, d, out, inn)
    return True, "converged"


def wait_true(pred, what, timeout):
    """Polls @pred (returning (ok, state)) until ok; the last state in the failure."""
    deadline = time.monotonic() + timeout
    state = None
    while time.monotonic() < deadline:
        try:
            ok, state = pred()
        except OSError as e:  # an admin read cut short (seen once under load): ask again
            ok, state = False, repr(e)
        if ok:
            return time.monotonic()
        time.sleep(0.05)
    raise h.Fail("timed out waiting for %s: %s" % (what, state))


class Pinned:
    """A request loop per (node, replica): logs through that replica's stream port, recorded
    as (start, end, ok, why)."""

    def __init__(self, fleet, pairs):
        self.fleet, self.stop = fleet, threading.Event()
        self.rec = {pair: [] for pair in pairs}
        self.threads = [threading.Thread(target=self.loop, args=(pair,), daemon=True)
                        for pair in pairs]
        for t in self.threads:
            t.start()

    def loop(self, pair):
        node, i = pair
        api = self.fleet.api(i)
        want = "".join("line %d\n" % k for k in range(1, 6)).encode()
        while not self.stop.is_set():
            t0 = time.monotonic()
            try:
                status, body = rt.get(api, node, "/containerLogs/default/pod-a/ctr?tailLines=5",
                                      timeout=10)
                ok, why = status == 200 and body == want, "%d %r" % (status, body[:120])
            except Exception as e:  # noqa: BLE001 - every failure counts
                ok, why = False, repr(e)
            self.rec[pair].append((t0, time.monotonic(), ok, why))
            time.sleep(0.05)

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(15)

    def failures(self):
        return {pair: [(round(r[0], 3), r[3]) for r in v if not r[2]]
                for pair, v in self.rec.items() if any(not r[2] for r in v)}


def partition():
    def body(fleet):
        nodes = ES_NODES + KE_NODES
        lan = fleet.lan
        start_edges(fleet, ES_NODES, KE_NODES)
        ok, state = converged(fleet, nodes)
        check(ok, "before the partition: %s" % state)
        held = {n: v[0] for n, v in where(fleet, nodes).items()}
        # The victim: a replica holding an edgestream node, while the others hold one too
        # (haproxy spreads the 12 edges round robin: about 4 each).
        victim = next(i for i in (2, 1, 0)
                      if any(held[n] == i for n in ES_NODES) and
                      any(held[n] != i for n in ES_NODES))
        rest = [i for i in range(3) if i != victim]
        # The nodes that move during the partition: x from the majority to the victim, y
        # from the victim to the majority (rest[0]).
        x = next(n for n in ES_NODES if held[n] in rest)
        y = next(n for n in ES_NODES if held[n] == victim)
        x_from, y_to = held[x], rest[0]
        steady = [n for n in nodes if n not in (x, y)]
        # Throughout: every other node through its holder, and a majority node through the
        # other majority replica too (forwarded on a link the partition leaves alone).
        pairs = [(n, held[n]) for n in steady]
        pairs += [(n, rest[1] if held[n] == rest[0] else rest[0]) for n in steady
                  if held[n] in rest]
        loops = Pinned(fleet, pairs)
        time.sleep(0.5)

        # ---- partition: the victim's namespace drops all it exchanges with the others
        t_cut = time.monotonic()
        for i in rest:
            lan.iptables(victim, "-A", "INPUT", "-s", lan.addr(i), "-j", "DROP")
            lan.iptables(victim, "-A", "OUTPUT", "-d", lan.addr(i), "-j", "DROP")
        n_victim = sum(1 for n in nodes if held[n] == victim)

        def split():
            st = [(rt.metric(p, "cloudstream_peer_directory_nodes"),
                   rt.metric(p, 'cloudstream_peer_links{dir="out"}'),
                   rt.metric(p, 'cloudstream_peer_links{dir="in"}')) for p in fleet.cs]
            want = [(0, 0, 0) if i == victim else
                    (len(nodes) - n_victim - sum(1 for n in nodes if held[n] == i), 1, 1)
                    for i in range(3)]
            return st == want, "directory, links out, links in: %r (want %r)" % (st, want)
        t_split = wait_true(split, "both sides to drop the links (--peer-dead-timeout %d s)"
                            % PEER_DEAD_S, PEER_DEAD_S * 3 + 5)

        # Split brain on purpose: x comes up on the victim, y on the majority, while their
        # old tunnels stay open (the old edges frozen: a half-open tunnel, as after a NAT
        # or link loss the edge noticed first; frozen, they never redial).
        for n, to in ((x, victim), (y, y_to)):
            old, _ = fleet.edges[n]
            old.send_signal(signal.SIGSTOP)
            new = h.start_edgestream(fleet.env, None, fleet.kubelet, node=n,
                                     url=fleet.tunnel_url(to), name="edge-%s-moved" % n)
            fleet.edges[n + "/moved"] = (new, to)
        both = where(fleet, nodes)
        check(sorted(both[x]) == sorted([x_from, victim]) and
              sorted(both[y]) == sorted([victim, y_to]),
              "during the partition, x=%s on %r, y=%s on %r" % (x, both[x], y, both[y]))
        # Each side serves its new tunnel: the victim x, the majority y (from both of its
        # replicas).
        rt.logs(fleet.api(victim), x)
        for i in rest:
            rt.logs(fleet.api(i), y)
        # Held a while longer: the links' redials run into the partition (their SYNs dropped)
        # and must still come back once it heals.
        time.sleep(float(os.environ.get("HA_PARTITION_HOLD", "4")))

        # ---- heal
        t_heal = time.monotonic()
        lan.iptables(victim, "-F", "INPUT")
        lan.iptables(victim, "-F", "OUTPUT")

        def stale_closed():
            c = [rt.metric(p, "cloudstream_peer_stale_tunnels_closed_total") or 0
                 for p in fleet.cs]
            return c[x_from] >= 1 and c[victim] >= 1, "stale tunnels closed %r" % c
        t_stale = wait_true(stale_closed, "the older tunnels of %s and %s closed" % (x, y),
                            30)
        # The newer tunnel won everywhere: the frozen edges may go now (they never redial).
        for n in (x, y):
            old, _ = fleet.edges.pop(n)
            old.kill()
            old.wait()
        t_conv = wait_true(lambda: converged(fleet, nodes),
                           "one holder per node, every directory full, every link up", 30)
        check(t_conv - t_heal <= HEAL_LIMIT_S,
              "converged %.1f s after the heal (limit %.0f s)" % (t_conv - t_heal,
                                                                 HEAL_LIMIT_S))
        final = {n: v[0] for n, v in where(fleet, nodes).items()}
        check(final[x] == victim and final[y] == y_to,
              "the newer tunnels lost: x=%s on %s, y=%s on %s" % (x, NAMES[final[x]], y,
                                                                 NAMES[final[y]]))
        loops.finish()
        bad = loops.failures()
        n_loop = sum(len(v) for v in loops.rec.values())
        check(not bad, "requests failed during the partition or its healing: %r" % (
            {"%s via %s" % (n, NAMES[i]): v[:2] for (n, i), v in bad.items()},))

        # ---- every node through every replica and haproxy, bytes identical, none waiting
        marks = [os.path.getsize(p.logpath) for p in fleet.cs]
        direct = rt.kubelet_metrics(fleet)
        apis = [fleet.api(i) for i in range(3)] + [front_api(fleet)]
        n_req, slowest = 0, 0.0
        for n in nodes:
            for api in apis:
                t0 = time.monotonic()
                rt.logs(api, n)
                rt.metrics(api, n, direct)
                slowest = max(slowest, time.monotonic() - t0)
                n_req += 2
        for p, mark in zip(fleet.cs, marks):
            with open(p.logpath, "rb") as f:
                f.seek(mark)
                waited = [line for line in f.read().splitlines() if b"waited_for_node" in line]
            check(not waited, "%s: requests after the heal waited for their node: %r" % (
                p.name, waited[:2]))
        print("partition: %s cut off from its peers by iptables in its namespace; both sides "
              "dropped the links %.1f s later (--peer-dead-timeout %d s); %s moved to %s and "
              "%s to %s meanwhile (split brain); healed: older tunnels closed %.1f s after, "
              "converged (one holder per node, every directory full, every link "
              "up) %.1f s after; %d requests to holders and across the majority during it all, "
              "0 failed; then %d requests (logs, metrics) for 12 nodes through each "
              "replica and haproxy: all identical, none waited, slowest node %.0f ms"
              % (NAMES[victim], t_split - t_cut, PEER_DEAD_S, x, NAMES[victim], y,
                 NAMES[y_to], t_stale - t_heal, t_conv - t_heal, n_loop, n_req,
                 slowest * 1000), flush=True)
    with_ha("ha-partition", ES_NODES + KE_NODES, body)


if __name__ == "__main__":
    group = sys.argv[1] if len(sys.argv) > 1 else "move"
    sys.argv = sys.argv[1:]
    no = netns.require()
    if no is not None:
        sys.exit(no)
    sys.exit(h.run({"move": [move], "mesh": [mesh], "kill": [kill], "rolling": [rolling],
                    "partition": [partition]}[group]))
