#!/usr/bin/python3
"""cloudstream-dnat-controller in network namespaces made for the test, with the real cloudstream
and the apiserver stand-in (peers/kube_reviews.py + kube_csr.py: Node list and watch with a
label selector, as kube-apiserver answers them).

    ns A (10.231.0.1): the apiserver host: the controller, the apiserver stand-in (its socket
                       made in A), an apiserver-like client, the host's own :10350 and :10250
                       listeners; routes the node network 10.232.0.0/24 via B
    ns B (10.231.0.2): cloudstream, a KubeEdge-protocol test edge for node edge-5, the kubelet
                       stand-in

Checked, each within 5 s of the Node change (the time is printed): a Node added is reachable at
its InternalIP and advertised port; moved to another IP, the old address is no longer captured
and the new one is; advertising another port (10250) moves the rule to that port; a node that
loses the selector's label loses its rules; a deleted Node's rules go; a flushed nat table
(-F and -X) is restored; the host's own :10350 and :10250 are never captured, not even for a
Node that lists the host's address; `cloudstream-dnat status` reads the controller's rules; a
410 on the watch (a compacted resourceVersion) lists again and a change made meanwhile is
followed.
"""
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
import harness as h  # noqa: E402
import standin  # noqa: E402
import netns  # noqa: E402
from harness import check  # noqa: E402
from netns import in_netns, ns_exec, sh  # noqa: E402
from kube_csr import CsrApi  # noqa: E402
from kube_reviews import KubeReviews  # noqa: E402

TOOL = os.path.join(h.SRC, "deploy", "cloudstream-dnat")
EDGE_LABEL = {"node-role.kubernetes.io/edge": ""}
FOLLOW_S = 5.0

CLIENT = r'''
import socket, ssl, sys
pki, host_hdr, target, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
ctx = ssl.create_default_context(cafile=pki + "/stream-ca.crt")
ctx.check_hostname = False
ctx.load_cert_chain(pki + "/apiserver-kubelet-client.crt", pki + "/apiserver-kubelet-client.key")
try:
    raw = socket.create_connection((target, port), timeout=1)
except OSError as e:
    print("unreachable", e); sys.exit(3)
try:
    s = ctx.wrap_socket(raw)
except (OSError, ssl.SSLError) as e:
    print("not cloudstream", e); sys.exit(4)
s.sendall(("GET /healthz HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % host_hdr).encode())
data = b""
while True:
    c = s.recv(65536)
    if not c: break
    data += c
print(data.split(b"\r\n")[0].decode())
'''

OWN_SERVER = r'''
import socket, sys, threading
def serve(port):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port)); s.listen(16)
    while True:
        c, _ = s.accept(); c.sendall(b"own\n"); c.close()
for p in (10350, 10250):
    threading.Thread(target=serve, args=(p,), daemon=True).start()
open(sys.argv[1], "w").write("ok")
threading.Event().wait()
'''

PLAIN = r'''
import socket, sys
try:
    c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2)
    print(c.recv(16).decode().strip() or "eof")
except OSError as e:
    print("error", e)
'''


def main():
    if os.geteuid() != 0:
        print("skipped: network namespaces and iptables need root")
        return 77
    env = h.Env("dnatctl", nodes=("edge-1",))
    net = None
    kube = None
    failed = True
    results = []
    try:
        net = netns.Pair("csdc", "d", node_net_local=True)
        a, b = net.a, net.b

        env.mint("ca", "--out", env.path("kubelet-serving-ca"))
        env.mint("client", "--ca", env.path("tunnel-ca"), "--out", env.path("node-edge-5"),
                 "--node", "edge-5", "--ip", "10.232.0.5")
        token = "dnat-controller-token"
        token_file = standin.write_token(env, token)
        csr = CsrApi((env.path("kubelet-serving-ca.crt"), env.path("kubelet-serving-ca.key")))
        kube = in_netns(a, lambda: KubeReviews(env.path("kubelet.crt"), env.path("kubelet.key"),
                                               token, csr=csr))
        wrap_b = ns_exec(b)
        kubelet = h.start_kubelet(env, prefix=wrap_b)
        cloud = h.start_cloudstream(env, ["--stream-listen", "10.231.0.2:0"], prefix=wrap_b)
        h.start_kubeedge_edge(env, cloud, kubelet, node="edge-5",
                              cert=env.path("node-edge-5.crt"), prefix=wrap_b)
        own_ready = os.path.join(env.dir, "own.ready")
        env.start("own-ports", [h.PY, "-c", OWN_SERVER, own_ready], own_ready,
                  prefix=ns_exec(a))
        ready = os.path.join(env.dir, "ctl.ready")
        ctl, _ = env.start("dnat-controller", [
            os.path.join(h.BIN, "cloudstream", "cloudstream-dnat-controller"),
            "--to", "10.231.0.2:%d" % cloud.ports["stream"],
            *standin.apiserver_flags(env, kube.url, token_file),
            "--backend", "nft", "--resync-interval", "1s", "--watch-timeout", "2s",
            "--ready-file", ready, "--log-level", "debug"], ready, prefix=ns_exec(a))

        def client(ip, port, host="edge-5:10350"):
            r = subprocess.run(ns_exec(a, h.PY, "-c", CLIENT, env.pki, host, ip, str(port)),
                               capture_output=True, text=True, timeout=30)
            return r.returncode, (r.stdout + r.stderr).strip()

        def reached(ip, port):
            rc, out = client(ip, port)
            return rc == 0 and out.startswith("HTTP/1.1 200")

        def rules():
            return sh(*ns_exec(a, "iptables-nft", "-w", "10", "-t", "nat", "-S")).stdout

        def follow(what, cond):
            t0 = time.monotonic()
            while time.monotonic() - t0 < FOLLOW_S:
                if cond():
                    return time.monotonic() - t0
                time.sleep(0.1)
            raise h.Fail("%s: not within %.0f s; nat table:\n%s" % (what, FOLLOW_S, rules()))

        def step(name, fn):
            try:
                r = fn()
                results.append(True)
                print("ok   dnat_controller.%s%s" % (name, r or ""), flush=True)
            except Exception as e:  # noqa: BLE001
                results.append(False)
                print("FAIL dnat_controller.%s: %s" % (name, e), flush=True)

        def empty_at_start():
            check("-A OUTPUT -p tcp -m comment --comment cloudstream-dnat -j CLOUDSTREAM-DNAT"
                  in rules(), "no jump: %s" % rules())
            rc, out = client("10.232.0.5", 10350)
            check(rc == 3, "reachable before any Node: %s" % out)

        def node_added():
            csr.set_node("edge-5", [{"type": "InternalIP", "address": "10.232.0.5"},
                                    {"type": "Hostname", "address": "edge-5"}],
                         labels=EDGE_LABEL, port=10350)
            t = follow("added", lambda: reached("10.232.0.5", 10350))
            return ": reachable after %.2f s" % t

        def node_moved():
            csr.set_node("edge-5", [{"type": "InternalIP", "address": "10.232.0.9"}],
                         labels=EDGE_LABEL, port=10350)
            t = follow("moved", lambda: reached("10.232.0.9", 10350) and
                       client("10.232.0.5", 10350)[0] == 3)
            check("10.232.0.5" not in rules(), "old address still in the rules")
            return ": new address reachable, old one not, after %.2f s" % t

        def port_advertised():
            csr.set_node("edge-5", [{"type": "InternalIP", "address": "10.232.0.9"}],
                         labels=EDGE_LABEL, port=10250)
            t = follow("port", lambda: reached("10.232.0.9", 10250) and
                       client("10.232.0.9", 10350)[0] == 3)
            return ": 10250 captured, 10350 no more, after %.2f s" % t

        def label_removed():
            csr.set_node("edge-5", [{"type": "InternalIP", "address": "10.232.0.9"}],
                         labels={}, port=10250)
            t = follow("unlabelled", lambda: client("10.232.0.9", 10250)[0] == 3)
            csr.set_node("edge-5", [{"type": "InternalIP", "address": "10.232.0.9"}],
                         labels=EDGE_LABEL, port=10250)
            t2 = follow("labelled again", lambda: reached("10.232.0.9", 10250))
            return ": rules gone after %.2f s, back after %.2f s" % (t, t2)

        def flushed():
            # The controller is held (SIGSTOP) while the table is flushed and the flush is
            # seen to bite: its 1 s resync could otherwise restore the rules before a probe
            # runs on a loaded machine. The clock starts when it may run again.
            os.kill(ctl.pid, signal.SIGSTOP)
            try:
                sh(*ns_exec(a, "iptables-nft", "-w", "10", "-t", "nat", "-F"))
                sh(*ns_exec(a, "iptables-nft", "-w", "10", "-t", "nat", "-X",
                            "CLOUDSTREAM-DNAT"))
                check(client("10.232.0.9", 10250)[0] == 3, "reachable right after the flush")
            finally:
                os.kill(ctl.pid, signal.SIGCONT)
            t_flush = time.monotonic()
            follow("restored", lambda: reached("10.232.0.9", 10250))
            return ": restored, reachable %.2f s after the flush" % (time.monotonic() - t_flush)

        def own_never():
            # A Node that lists this host's own address: no rule; the own ports stay own.
            csr.set_node("self", [{"type": "InternalIP", "address": "10.231.0.1"}],
                         labels=EDGE_LABEL, port=10350)
            csr.set_node("self-b", [{"type": "InternalIP", "address": "10.231.0.1"}],
                         labels=EDGE_LABEL, port=10250)
            time.sleep(1.5)
            check("10.231.0.1" not in rules(), "the host's address in the rules:\n" + rules())
            for target in ("10.231.0.1", "127.0.0.1"):
                for port in (10350, 10250):
                    r = subprocess.run(ns_exec(a, h.PY, "-c", PLAIN, target, str(port)),
                                       capture_output=True, text=True, timeout=30)
                    check(r.stdout.strip() == "own", "own %s:%d captured: %s" % (
                        target, port, r.stdout))
            csr.delete_node("self")
            csr.delete_node("self-b")

        def oneshot_status():
            r = sh(*ns_exec(a, TOOL, "status", "--backend", "nft"))
            check("applied (1 OUTPUT jump, 1 PREROUTING jump)" in r.stdout and
                  "10.232.0.9/32" in r.stdout, "status: %s" % r.stdout)

        def watch_410_relists():
            # etcd compacted past the controller's resourceVersion: its next watch gets a 410
            # ERROR event and it lists again; a change made meanwhile is still followed.
            lists = open(ctl.logpath).read().count("listed ")
            csr.compact_nodes()
            t410 = follow("410 and a new list", lambda: "ERROR 410" in open(ctl.logpath).read()
                          and open(ctl.logpath).read().count("listed ") > lists)
            csr.set_node("edge-5", [{"type": "InternalIP", "address": "10.232.0.9"}],
                         labels=EDGE_LABEL, port=10350)
            t = follow("after 410", lambda: reached("10.232.0.9", 10350))
            return ": 410 and a new list after %.2f s, the next change followed after %.2f s" % (
                t410, t)

        def node_deleted():
            csr.delete_node("edge-5")
            t = follow("deleted", lambda: client("10.232.0.9", 10350)[0] == 3)
            check("10.232.0.9" not in rules(), "rules left: " + rules())
            return ": unreachable after %.2f s" % t

        step("empty_at_start", empty_at_start)
        step("node_added", node_added)
        step("node_moved", node_moved)
        step("port_advertised", port_advertised)
        step("label_removed", label_removed)
        step("flushed_table_restored", flushed)
        step("own_ports_never_captured", own_never)
        step("oneshot_status_reads_it", oneshot_status)
        step("watch_410_relists", watch_410_relists)
        step("node_deleted", node_deleted)
        rc = env.stop(ctl)
        check(rc == 0, "controller exit %s" % rc)
        rc = env.stop(cloud)
        check(rc == 0, "cloudstream exit %s" % rc)
        failed = not all(results)
        return 1 if failed else 0
    finally:
        if kube:
            kube.close()
        h.close_env(env, failed)
        if net:
            net.close()


if __name__ == "__main__":
    sys.exit(main())
