#!/usr/bin/python3
"""deploy/cloudstream-dnat in network namespaces made for the test, with the real cloudstream.

    ns A (10.231.0.1): an apiserver-like client; the DNAT rule for edge nodes 10.232.0.0/24
    ns B (10.231.0.2): cloudstream, a KubeEdge-protocol test edge for node edge-5 (its
                       certificate carries 10.232.0.5), the kubelet stand-in

10.232.0.5 exists nowhere: only the DNAT rule makes it reachable. Checked, for iptables-nft and
iptables-legacy: unreachable before apply; apply twice (idempotent: the nat table is the same
after the second); the client's request to 10.232.0.5:10350 reaches the node through
cloudstream (routed by its Host IP); a connection from B itself to 10.232.0.5 is routed by
SO_ORIGINAL_DST even with a misleading Host (what kube-apiserver sends on upgrades); loopback is
never captured; with a node network that covers A's own address, A's own :10350 (a listener
there) still answers on that address and on loopback; apply with other networks replaces the
rules (no stale one left); remove restores unreachability.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402
import netns  # noqa: E402
from harness import check  # noqa: E402
from netns import ns_exec, sh  # noqa: E402

TOOL = os.path.join(h.SRC, "deploy", "cloudstream-dnat")
NODE_IP = "10.232.0.5"

CLIENT = r'''
import socket, ssl, sys
pki, host_hdr, target, timeout = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
ctx = ssl.create_default_context(cafile=pki + "/stream-ca.crt")
ctx.check_hostname = False
ctx.load_cert_chain(pki + "/apiserver-kubelet-client.crt", pki + "/apiserver-kubelet-client.key")
try:
    raw = socket.create_connection((target, 10350), timeout=timeout)
except OSError as e:
    print("unreachable", e); sys.exit(3)
s = ctx.wrap_socket(raw)
s.sendall(("GET /healthz HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % host_hdr).encode())
data = b""
while True:
    c = s.recv(65536)
    if not c: break
    data += c
print(data.split(b"\r\n")[0].decode()); print(data.split(b"\r\n\r\n", 1)[1].decode()[:200])
'''


# Stands for a service of the apiserver host's own on :10350: says "own" to whoever connects.
OWN_SERVER = r'''
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 10350)); s.listen(16)
open(sys.argv[1], "w").write("10350")
while True:
    c, _ = s.accept(); c.sendall(b"own\n"); c.close()
'''

PLAIN = r'''
import socket, sys
try:
    c = socket.create_connection((sys.argv[1], 10350), timeout=2)
    print(c.recv(16).decode().strip() or "eof")
except OSError as e:
    print("error", e)
'''


def client(env, ns, host_hdr, target, timeout=1.0):
    r = subprocess.run(ns_exec(ns, h.PY, "-c", CLIENT, env.pki, host_hdr, target, str(timeout)),
                       capture_output=True, text=True, timeout=30)
    return r.returncode, r.stdout + r.stderr


def main():
    if os.geteuid() != 0:
        print("skipped: network namespaces and iptables need root")
        return 77
    env = h.Env("dnat", nodes=("edge-1",))
    net = None
    try:
        # The node network is "somewhere past B" for A; in B, where nothing has a node address,
        # it leads to loopback (B's own connections to a node, caught by OUTPUT).
        net = netns.Pair("csdnat", "v", node_net_local=True)
        a, b = net.a, net.b

        env.mint("client", "--ca", env.path("tunnel-ca"), "--out", env.path("node-edge-5"),
                 "--node", "edge-5", "--ip", NODE_IP)
        wrap = ns_exec(b)
        kubelet = h.start_kubelet(env, prefix=wrap)
        cloud = h.start_cloudstream(env, ["--stream-listen", "10.231.0.2:0"], prefix=wrap)
        edge = h.start_kubeedge_edge(env, cloud, kubelet, node="edge-5",
                                     cert=env.path("node-edge-5.crt"), prefix=wrap)
        own_ready = os.path.join(env.dir, "own.ready")
        env.start("own-10350", [h.PY, "-c", OWN_SERVER, own_ready], own_ready,
                  prefix=ns_exec(a))
        port = cloud.ports["stream"]
        failures = 0
        for backend in ("nft", "legacy"):
            step = h.Steps("dnat." + backend)

            def unreachable_before():
                rc, out = client(env, a, NODE_IP + ":10350", NODE_IP)
                check(rc == 3, "reachable without the rule: %s" % out)

            def apply(ns, nodes="10.232.0.0/24"):
                sh(*ns_exec(ns, TOOL, "apply", "--backend", backend, "--to",
                            "10.231.0.2:%d" % port, "--nodes", nodes))

            def nat_table(ns):
                r = sh(*ns_exec(ns, "iptables-%s-save" % backend, "-t", "nat"))
                return [ln for ln in r.stdout.splitlines() if not ln.startswith(("#", ":"))]

            def apply_twice():
                for ns in (a, b):
                    apply(ns)
                    first = nat_table(ns)
                    apply(ns)
                    check(nat_table(ns) == first, "second apply changed the nat table:\n%s\n%s"
                          % ("\n".join(first), "\n".join(nat_table(ns))))
                    r = sh(*ns_exec(ns, TOOL, "status", "--backend", backend))
                    check("applied (1 OUTPUT jump, 1 PREROUTING jump)" in r.stdout,
                          "status: %s" % r.stdout)

            def plain(ns, target):
                r = subprocess.run(ns_exec(ns, h.PY, "-c", PLAIN, target), capture_output=True,
                                   text=True, timeout=30)
                return r.stdout.strip()

            def own_port_not_captured():
                # The node networks cover A's own address: its own :10350 stays its own.
                apply(a, "10.231.0.0/24,10.232.0.0/24")
                try:
                    for target in ("10.231.0.1", "127.0.0.1"):
                        out = plain(a, target)
                        check(out == "own", "A's own %s:10350 captured: %s" % (target, out))
                    rc, out = client(env, a, NODE_IP + ":10350", NODE_IP, 5)
                    check(rc == 0 and "200" in out.splitlines()[0], "via DNAT: %s" % out)
                finally:
                    apply(a)

            def apply_replaces():
                # Other node networks: the old rule is gone, not kept beside the new one (in
                # both namespaces: B's PREROUTING jump would catch what A sends it too).
                for ns in (a, b):
                    apply(ns, "10.233.0.0/24")
                    r = sh(*ns_exec(ns, TOOL, "status", "--backend", backend))
                    check("10.232.0.0/24" not in r.stdout and "10.233.0.0/24" in r.stdout,
                          "status after re-apply: %s" % r.stdout)
                unreachable_before()
                for ns in (a, b):
                    apply(ns)

            def through_dnat_by_host():
                rc, out = client(env, a, NODE_IP + ":10350", NODE_IP, 5)
                check(rc == 0 and "200" in out.splitlines()[0], "via DNAT: %s" % out)

            def through_dnat_by_orig_dst():
                # Host names the apiserver itself, as on upgrades: only SO_ORIGINAL_DST tells.
                rc, out = client(env, b, "127.0.0.1:6443", NODE_IP, 5)
                check(rc == 0 and "200" in out.splitlines()[0], "by original dst: %s" % out)

            def loopback_not_captured():
                # Nothing listens on B's loopback :10350: a connection must be refused there,
                # not be carried to cloudstream.
                rc, out = client(env, b, "x", "127.0.0.1", 1)
                check(rc == 3, "loopback captured: %s" % out)

            def remove_restores():
                for ns in (a, b):
                    sh(*ns_exec(ns, TOOL, "remove", "--backend", backend))
                    sh(*ns_exec(ns, TOOL, "remove", "--backend", backend))
                    r = sh(*ns_exec(ns, TOOL, "status", "--backend", backend), ok=range(256))
                    check(r.returncode == 3, "status after remove: %s" % r.stdout)
                unreachable_before()

            steps = [("unreachable_before", unreachable_before), ("apply_twice", apply_twice),
                     ("through_dnat_by_host", through_dnat_by_host),
                     ("through_dnat_by_orig_dst", through_dnat_by_orig_dst),
                     ("loopback_not_captured", loopback_not_captured),
                     ("own_port_not_captured", own_port_not_captured),
                     ("apply_replaces", apply_replaces), ("remove_restores", remove_restores)]
            for name, fn in steps:
                step(name, fn)
            failures += len(steps) - len(step.passed)
        env.stop(edge)
        rc = env.stop(cloud)
        check(rc == 0, "cloudstream exit %s" % rc)
        return 1 if failures else 0
    finally:
        env.close()
        if net:
            net.close()


if __name__ == "__main__":
    sys.exit(main())
