#!/usr/bin/python3
"""High availability behind one load balancer (issue 13, DESIGN D12, PROTOCOL.md §5.6).

Three cloudstream replicas linked by --peers (the replicas_test machinery: fixed tunnel ports,
relays per directed peer link), with fixed stream and admin ports, behind **haproxy** (Debian's
package, TCP mode, health checked on each replica's /readyz) for both the tunnel port and the
stream port. Edges dial haproxy's tunnel port: edgestream edges (extensions, RECONNECT) and
KubeEdge-protocol test edges (peers/kubeedge_edge.py, base protocol, --redial 2 as KubeEdge's
edge). Requests go to haproxy's stream port or to each replica's in turn.

Groups:
  move     make before break: SIGTERM the replica holding an edgestream edge while an exec-like
           upload runs through it; the edge opens a new tunnel (RECONNECT) through haproxy to
           another replica, the upload completes with its result, new requests succeed through
           every live replica, and the KubeEdge-protocol edge the replica held is told to go
           (CLOSE_CONNECT) and redials elsewhere.
  mesh     10 edgestream + 2 KubeEdge-protocol edges through haproxy; for every node, logs,
           metrics, an exec-like upgrade (SPDY, bytes echoed) and a port-forward-like upgrade
           through each replica in turn and through haproxy: 100 % succeed, bytes identical.
  kill     SIGKILL the replica holding node X while a request loop for X runs through haproxy:
           requests for X succeed again within 2 s (edgestream) / 5 s (KubeEdge-protocol);
           requests for nodes held elsewhere never fail. Prints the failover figures.
  rolling  rolling restart of the 3 replicas one at a time (SIGTERM, wait for exit, start again
           on the same ports) with a request loop over all nodes through haproxy: 0 failed
           requests started after the first SIGTERM, for the KubeEdge-protocol nodes too (their
           requests wait for the redial, --node-reconnect-grace; the access logs show it).
"""
import os
import re
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
import replicas_test as rt  # noqa: E402  (Relay, Fleet, request helpers)

NAMES = rt.NAMES
DRAIN_TIMEOUT = "15s"
ES_NODES = tuple("edge-%d" % i for i in range(1, 11))
KE_NODES = ("edge-11", "edge-12")
HAPROXY = "/usr/sbin/haproxy"


def _start_fixed(env, extra=(), name="cloudstream", prefix=(), wrap=None):
    """A replica on fixed tunnel, stream and admin ports (haproxy's configuration names them;
    a restarted replica comes back on the same ones)."""
    ports = None
    if name in NAMES and hasattr(env, "fleet_ports"):
        i = NAMES.index(name)
        ports = (env.fleet_ports[i], env.stream_ports[i], env.admin_ports[i])

    def w(argv):
        if ports is not None:
            for flag, port in zip(("--tunnel-listen", "--stream-listen", "--admin-listen"),
                                  ports):
                argv[argv.index(flag) + 1] = "127.0.0.1:%d" % port
            argv += ["--drain-timeout", DRAIN_TIMEOUT]
        return argv
    return rt._orig_start(env, extra=extra, name=name, prefix=prefix, wrap=w)


h.start_cloudstream = _start_fixed


class Front:
    """What edges and kube-apiserver see: haproxy's two ports (anything with ports["tunnel"])."""

    def __init__(self, tunnel, stream):
        self.ports = {"tunnel": tunnel, "stream": stream}


class Haproxy:
    def __init__(self, env, fleet):
        self.env = env
        self.tunnel_port, self.stream_port = rt.free_port(), rt.free_port()
        # redispatch 1: a connection refused by a dead replica goes to another one at once
        # (without it haproxy retries the same server after its 1 s turn-around).
        cfg = ["global", "  maxconn 4096", "defaults", "  mode tcp",
               "  timeout connect 2s", "  timeout client 1h", "  timeout server 1h",
               "  timeout check 1s", "  option redispatch 1", "  retries 3"]
        for kind, port, backend_ports in (("tunnel", self.tunnel_port, env.fleet_ports),
                                          ("stream", self.stream_port, env.stream_ports)):
            cfg += ["frontend %s" % kind, "  bind 127.0.0.1:%d" % port,
                    "  default_backend %s_replicas" % kind,
                    "backend %s_replicas" % kind, "  balance roundrobin",
                    # a draining replica answers 503 on /readyz: no new connection goes there
                    "  option httpchk GET /readyz", "  http-check expect status 200",
                    "  default-server inter 100ms fall 1 rise 2"]
            for i, name in enumerate(NAMES):
                cfg.append("  server %s 127.0.0.1:%d check port %d" % (
                    name, backend_ports[i], env.admin_ports[i]))
        self.cfg = env.path("haproxy.cfg")
        with open(self.cfg, "w") as f:
            f.write("\n".join(cfg) + "\n")
        self.log = open(env.path("haproxy.log"), "wb")
        self.p = subprocess.Popen([HAPROXY, "-db", "-f", self.cfg], stdout=self.log,
                                  stderr=subprocess.STDOUT)
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


def make(tag, nodes):
    env_stream = [rt.free_port() for _ in NAMES]
    env_admin = [rt.free_port() for _ in NAMES]
    orig_env = h.Env

    class Env(orig_env):  # the ports must be known before the replicas start
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.stream_ports = env_stream
            self.admin_ports = env_admin
    h.Env = Env
    try:
        fleet = rt.make_fleet(tag, nodes)
    finally:
        h.Env = orig_env
    try:
        fleet.hap = Haproxy(fleet.env, fleet)
    except Exception:
        fleet.close(True)
        raise
    return fleet


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


def with_ha(tag, nodes, body):
    fleet = make(tag, nodes)
    failed = True
    try:
        body(fleet)
        # The edges go first; then every replica still running exits 0 on SIGTERM with a
        # clean ASan/UBSan log.
        for p, _ in fleet.edges.values():
            if p.poll() is None:
                fleet.env.stop(p)
        for p in live(fleet):
            rc = fleet.env.stop(p)
            with open(p.logpath, "rb") as f:
                log = f.read()
            check(rc == 0, "%s exited %s" % (p.name, rc))
            check(b"Sanitizer" not in log and b"runtime error" not in log,
                  "%s: sanitizer report:\n%s" % (p.name, fleet.env.tail(p, 30)))
        failed = False
    finally:
        fleet.hap.stop()
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
        ke_out = {n: loops.longest_outage(n, t_first) for n in KE_NODES}
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


if __name__ == "__main__":
    group = sys.argv[1] if len(sys.argv) > 1 else "move"
    sys.argv = sys.argv[1:]
    sys.exit(h.run({"move": [move], "mesh": [mesh], "kill": [kill],
                    "rolling": [rolling]}[group]))
