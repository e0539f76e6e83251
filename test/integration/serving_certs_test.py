#!/usr/bin/python3
"""Per-node serving certificates (--serving-certs): a client that verifies the stream port's
certificate against the kubelet-serving CA and the node's IP, as kube-apiserver does with
--kubelet-certificate-authority, reaches three nodes by their IPs through the DNAT.

    ns A (10.231.0.1): the client; routes the node network 10.232.0.0/24 via B
    ns B (10.231.0.2): deploy/cloudstream-dnat (PREROUTING), cloudstream, the kubelet stand-in,
                       KubeEdge-protocol test edges edge-5/6/7 (certificates with 10.232.0.N),
                       and the apiserver stand-in (peers/kube_reviews.py + kube_csr.py: Nodes,
                       the CSR API, an optional approver, the kubelet-serving signer), its
                       socket made in B from this process (setns)

The node IPs exist nowhere: only the DNAT reaches cloudstream, which learns the node from the
connection's original destination. Groups:
    csr           cloudstream creates and approves its CSRs; edge-5 and edge-6 are up before the
                  first handshake, edge-7's Node and tunnel appear later; each handshake
                  verifies; the CSRs are kube-apiserver's shapes (signer, usages, the caller as
                  spec.username, Approved by cloudstream, certificate from the signer)
    csr_approver  cloudstream may not approve (403): the cluster's approver does, handshakes
                  verify all the same
    ca            signed by cloudstream with the serving CA's key; a 30 s validity is renewed
                  (a new serial) before it ends
"""
import base64
import os
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
import harness as h  # noqa: E402
import standin  # noqa: E402
import netns  # noqa: E402
from harness import check  # noqa: E402
from netns import in_netns, ns_exec, sh  # noqa: E402
from cryptography import x509  # noqa: E402
from kube_csr import CsrApi  # noqa: E402
from kube_reviews import KubeReviews  # noqa: E402

TOOL = os.path.join(h.SRC, "deploy", "cloudstream-dnat")
NODES = {"edge-5": "10.232.0.5", "edge-6": "10.232.0.6", "edge-7": "10.232.0.7"}

# kube-apiserver's side: verify the serving certificate against the kubelet-serving CA and the
# IP dialled (no SNI for an IP), present the apiserver's client certificate, GET /healthz.
CLIENT = r'''
import socket, ssl, sys
pki, ip = sys.argv[1], sys.argv[2]
ctx = ssl.create_default_context(cafile=pki + "/kubelet-serving-ca.crt")
ctx.load_cert_chain(pki + "/apiserver-kubelet-client.crt", pki + "/apiserver-kubelet-client.key")
try:
    raw = socket.create_connection((ip, 10350), timeout=5)
    s = ctx.wrap_socket(raw, server_hostname=ip)
except (OSError, ssl.SSLError) as e:
    print("fail", e); sys.exit(1)
cert = s.getpeercert()
s.sendall(("GET /healthz HTTP/1.1\r\nHost: %s:10350\r\nConnection: close\r\n\r\n" % ip).encode())
data = b""
while True:
    c = s.recv(65536)
    if not c: break
    data += c
print("ok", cert["serialNumber"], dict(x[0] for x in cert["subject"]).get("commonName"),
      data.split(b"\r\n")[0].decode())
'''


def handshake(env, net, ip):
    r = subprocess.run(ns_exec(net.a, h.PY, "-c", CLIENT, env.pki, ip), capture_output=True,
                       text=True, timeout=30)
    return r.stdout.strip() + r.stderr.strip()


def wait_verified(env, net, node, timeout=15.0):
    """Handshakes to @node's IP until one verifies (the first may get the default certificate
    while the node's is issued). Returns (answer, attempts, seconds)."""
    t0 = time.monotonic()
    attempts = 0
    out = ""
    while time.monotonic() - t0 < timeout:
        attempts += 1
        out = handshake(env, net, NODES[node])
        if out.startswith("ok"):
            check(out.endswith("HTTP/1.1 200 OK"), "%s: request through: %s" % (node, out))
            check(" system:node:%s " % node in out, "%s: wrong certificate: %s" % (node, out))
            return out, attempts, time.monotonic() - t0
        time.sleep(0.3)
    raise h.Fail("%s: no verified handshake in %.0f s: %s" % (node, timeout, out))


def metrics(net, cloud):
    def get():  # the admin port is on B's loopback
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % cloud.ports["admin"],
                                    timeout=5) as r:
            return r.read().decode()
    return in_netns(net.b, get)


def run_group(group):
    env = h.Env("srvcert-" + group)
    net = None
    failed = True
    kube = None
    try:
        net = netns.Pair("cssrv", "s")
        wrap = ns_exec(net.b)
        env.mint("ca", "--out", env.path("kubelet-serving-ca"), "--cn", "kubelet-serving")
        for n, ip in NODES.items():
            env.mint("client", "--ca", env.path("tunnel-ca"), "--out", env.path("node-" + n),
                     "--node", n, "--ip", ip)
        token = "cloudstream-sa-token"
        token_file = standin.write_token(env, token)
        addrs = {n: [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": n}]
                 for n, ip in NODES.items() if n != "edge-7"}
        csr = CsrApi((env.path("kubelet-serving-ca.crt"), env.path("kubelet-serving-ca.key")),
                     auto_approve=(group == "csr_approver"), nodes=addrs)
        kube = in_netns(net.b, lambda: KubeReviews(
            env.path("kubelet.crt"), env.path("kubelet.key"), token, csr=csr,
            caller_can_approve=(group != "csr_approver")))
        kubelet = h.start_kubelet(env, prefix=wrap)
        extra = (["--stream-listen", "10.231.0.2:0"] +
                 standin.apiserver_flags(env, kube.url, token_file))
        if group == "ca":
            extra += ["--serving-certs", "ca", "--serving-ca-cert",
                      env.path("kubelet-serving-ca.crt"), "--serving-ca-key",
                      env.path("kubelet-serving-ca.key"), "--serving-cert-validity", "30s"]
        else:
            extra += ["--serving-certs", "csr"]
        cloud = h.start_cloudstream(env, extra, prefix=wrap)
        sh(*ns_exec(net.b, TOOL, "apply", "--to", "10.231.0.2:%d" % cloud.ports["stream"],
                    "--nodes", "10.232.0.0/24"))
        edges = {}
        for n in ("edge-5", "edge-6"):
            edges[n] = h.start_kubeedge_edge(env, cloud, kubelet, node=n,
                                             cert=env.path("node-%s.crt" % n), prefix=wrap)
        # The cluster grows: edge-7's Node and tunnel appear after cloudstream started.
        for n in ("edge-5", "edge-6"):
            out, attempts, secs = wait_verified(env, net, n)
            print("ok   serving.%s.%s verified after %d handshake(s), %.2f s: %s" % (
                group, n, attempts, secs, out), flush=True)
        with csr.cond:
            csr.nodes["edge-7"] = [{"type": "InternalIP", "address": NODES["edge-7"]},
                                   {"type": "Hostname", "address": "edge-7"}]
        edges["edge-7"] = h.start_kubeedge_edge(env, cloud, kubelet, node="edge-7",
                                                cert=env.path("node-edge-7.crt"), prefix=wrap)
        out, attempts, secs = wait_verified(env, net, "edge-7")
        print("ok   serving.%s.edge-7 (added later) verified after %d handshake(s), %.2f s: %s"
              % (group, attempts, secs, out), flush=True)
        # Every node again: each answer is its own certificate, at once.
        serials = {}
        for n in NODES:
            out = handshake(env, net, NODES[n])
            check(out.startswith("ok") and " system:node:%s " % n in out, "%s again: %s" % (n, out))
            serials[n] = out.split()[1]
        check(len(set(serials.values())) == 3, "serials not distinct: %s" % serials)
        m = metrics(net, cloud)
        print("     metrics:\n       " + "\n       ".join(
            ln for ln in m.splitlines() if ln.startswith("cloudstream_serving")), flush=True)

        if group == "csr":
            # A node reached by an address its Node does not list (here its certificate's IP
            # SAN routes 10.232.0.18 to it, the Node says 10.232.0.8): its certificate cannot
            # cover it; handshakes there get the default certificate, and cause one more CSR,
            # not one per handshake.
            env.mint("client", "--ca", env.path("tunnel-ca"), "--out", env.path("node-edge-8"),
                     "--node", "edge-8", "--ip", "10.232.0.18")
            with csr.cond:
                csr.nodes["edge-8"] = [{"type": "InternalIP", "address": "10.232.0.8"}]
            edges["edge-8"] = h.start_kubeedge_edge(env, cloud, kubelet, node="edge-8",
                                                    cert=env.path("node-edge-8.crt"),
                                                    prefix=wrap)

            def csrs_of(node):
                return [o for o in csr.all() if x509.load_pem_x509_csr(base64.b64decode(
                    o["spec"]["request"])).subject.rfc4514_string().startswith(
                        "CN=system:node:%s," % node)]
            deadline = time.monotonic() + 20
            while "node=edge-8 serving certificate in" not in open(cloud.logpath).read():
                check(time.monotonic() < deadline, "no certificate for edge-8")
                time.sleep(0.2)
            outs = [handshake(env, net, "10.232.0.18") for _ in range(5)]
            check(all(o.startswith("fail") for o in outs), "uncovered address verified: %r" % outs)
            time.sleep(2)
            n8 = len(csrs_of("edge-8"))
            check(n8 == 2, "edge-8: %d CSRs for 5 handshakes to an address it cannot cover" % n8)
            print("ok   serving.csr.uncovered_address: 5 handshakes to 10.232.0.18 refused by "
                  "the client, 2 CSRs in all (tunnel up, one retry)", flush=True)
        if group.startswith("csr"):
            objs = csr.all()
            check(len(objs) >= 3, "CSRs: %d" % len(objs))
            for o in objs:
                sp, st = o["spec"], o["status"]
                check(sp["signerName"] == "kubernetes.io/kubelet-serving", "signer %r" % sp)
                check(sp["usages"] == ["digital signature", "server auth"], "usages %r" % sp)
                check(sp["username"] == "system:serviceaccount:kube-system:cloudstream",
                      "username %r" % sp["username"])
                conds = {c["type"]: c for c in st.get("conditions", [])}
                check("Approved" in conds and st.get("certificate"), "status %r" % st)
                want = "CloudstreamApprove" if group == "csr" else "AutoApproved"
                check(conds["Approved"]["reason"] == want, "approved by %r" % conds["Approved"])
            who = {w for _, w in csr.approvals}
            print("ok   serving.%s.csr_objects: %d CSRs, approved by %s" % (
                group, len(objs), sorted(who)), flush=True)
            if group == "csr_approver":
                log = open(cloud.logpath).read()
                check("not allowed to approve CSRs (403" in log, "no 403 notice in the log")
        if group == "ca":
            # 30 s validity: renewed at 70-90 % (21-27 s); the old one served until then.
            first = serials["edge-5"]
            t0 = time.monotonic()
            deadline = t0 + 40
            while time.monotonic() < deadline:
                out = handshake(env, net, NODES["edge-5"])
                check(out.startswith("ok"), "during renewal: %s" % out)
                if out.split()[1] != first:
                    break
                time.sleep(1)
            check(out.split()[1] != first, "not renewed: still serial %s" % first)
            print("ok   serving.ca.renewed: serial %s -> %s, %.1f s after the checks began; "
                  "every handshake verified meanwhile" % (first, out.split()[1],
                                                          time.monotonic() - t0), flush=True)

        for e in edges.values():
            env.stop(e)
        rc = env.stop(cloud)
        check(rc == 0, "cloudstream exit %s" % rc)
        failed = False
        return 0
    except h.Fail as e:
        print("FAIL serving.%s: %s" % (group, e), flush=True)
        return 1
    finally:
        if kube:
            kube.close()
        h.close_env(env, failed)
        if net:
            net.close()


def main():
    if os.geteuid() != 0:
        print("skipped: network namespaces and iptables need root")
        return 77
    groups = sys.argv[1:] or ["csr", "csr_approver", "ca"]
    rc = 0
    for g in groups:
        rc |= run_group(g)
    return rc


if __name__ == "__main__":
    sys.exit(main())
