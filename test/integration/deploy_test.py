#!/usr/bin/python3
"""deploy/kubernetes and deploy/systemd checked against the real daemons.

The manifests are built as `kubectl apply -k` builds them (kubectl kustomize: the generated
ConfigMaps with their hashed names, the components in temporary overlays), then read as
Kubernetes would read them ($(VAR) expansion from the container's env), then every volume a container mounts is built in a temp
directory (the ConfigMaps' files, the Secret's keys as `stream-certs quick` names them, the edge
host's /etc/edgestream/pki as deploy/README.md installs it, the service-account files, a real
unix socket for the CRI socket), and the daemons run with exactly the manifests' args, paths
moved under that directory. As root the daemons run in a network namespace the test creates,
on the manifests' own listen addresses, so the ready files prove the ports the containerPorts,
Services and probes name; the probes are then made as the kubelet makes them. Without root the
listen addresses are moved to 127.0.0.1:0 and the port checks compare the effective
configuration instead.

Checked: kinds, apiVersions, names, namespaces, selectors and Service ports; that a config edit
renames its ConfigMap and so changes the pod templates (a rollout); the DaemonSet rolls by a
percentage and only past ready (tunnel up) pods; the namespaces' Pod Security labels against
the pods' specs (restricted checked field by field); the admin port closed to the cluster by
the NetworkPolicy and on no Service; each component (cri-k3s, cri-crio, kubeedge, openyurt,
monitoring) built and its flags accepted by the real edgestream, and the monitoring
component's scrape path for edgestream carried through the chain; security contexts; RBAC is
what cloudstream's apiserver calls need; every arg and config key is accepted by the binary
(--print-config); every file path in the effective configuration is inside a mount; the
DaemonSet mounts the CRI socket and /var/log/pods (read-only); memory limits above the
buffer caps; grace periods above the drain time; then cloudstream from the Deployment and
edgestream from the DaemonSet come up, the edge's tunnel registers (with --node-name from the
downward API), a request goes through both, and both exit 0 on SIGTERM. The systemd unit: the
Type matches what the binary offers (no sd_notify: not notify), ExecStart (with the example
EnvironmentFile) runs the real edgestream with the example config, SIGHUP (ExecReload) keeps
it up, SIGTERM exits 0 within TimeoutStopSec, the hardening settings are there, and
`systemd-analyze verify` finds nothing when it is installed.
"""
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402
from harness import check  # noqa: E402

import yaml  # noqa: E402  (python3-yaml)

K8S = os.path.join(h.SRC, "deploy", "kubernetes")
SYSTEMD = os.path.join(h.SRC, "deploy", "systemd")
CLOUD_BIN = os.path.join(h.BIN, "cloudstream", "cloudstream")
EDGE_BIN = os.path.join(h.BIN, "edgestream", "edgestream")
NODE = "edge-1"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

KUBECTL = next((k for k in ("/usr/lib/google-cloud-sdk/bin/kubectl.1.33", shutil.which("kubectl"))
               if k and os.access(k, os.X_OK)), None)
COMPONENTS = ("cri-k3s", "cri-crio", "kubeedge", "openyurt", "monitoring")
CRI_SOCKETS = {"cri-k3s": "/run/k3s/containerd/containerd.sock",
               "cri-crio": "/var/run/crio/crio.sock"}
HOST_NS = "cloudstream-host"  # Pod Security privileged: edgestream, the DNAT controller
# Generated ConfigMaps are named <name>-<hash of the contents>; EXPECTED names them without it.
GENERATED = ("cloudstream-config", "edgestream-config")

EXPECTED = {
    ("v1", "Namespace", "cloudstream"),
    ("v1", "Namespace", HOST_NS),
    ("networking.k8s.io/v1", "NetworkPolicy", "cloudstream"),
    ("v1", "ServiceAccount", "cloudstream"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole", "cloudstream-pod-lookup"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "cloudstream-pod-lookup"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole", "cloudstream-node-events"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "cloudstream-node-events"),
    ("v1", "ConfigMap", "cloudstream-config"),
    ("v1", "ConfigMap", "edgestream-config"),
    ("apps/v1", "Deployment", "cloudstream"),
    ("v1", "Service", "cloudstream-tunnel"),
    ("v1", "Service", "cloudstream-stream"),
    ("v1", "Service", "cloudstream-peers"),
    ("policy/v1", "PodDisruptionBudget", "cloudstream"),
    ("rbac.authorization.k8s.io/v1", "Role", "cloudstream-peers"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding", "cloudstream-peers"),
    ("apps/v1", "DaemonSet", "edgestream"),
}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}

# deploy/README.md: the Secret cloudstream-pki holds these files of `stream-certs quick` under
# their own names (never a CA key).
CLOUD_SECRET_KEYS = {"cloudstream-tunnel.crt", "cloudstream-tunnel.key", "tunnel-ca.crt",
                     "cloudstream-stream.crt", "cloudstream-stream.key", "stream-ca.crt",
                     "cloudstream-peer.crt", "cloudstream-peer.key", "peer-ca.crt"}
# deploy/README.md: what an edge host holds in /etc/edgestream/pki, from which file of
# `stream-certs quick --node NODE`.
EDGE_HOST_FILES = {"edge.crt": "node-%s.crt" % NODE, "edge.key": "node-%s.key" % NODE,
                   "tunnel-ca.crt": "tunnel-ca.crt",
                   "kubelet-client.crt": "edgestream-kubelet-client.crt",
                   "kubelet-client.key": "edgestream-kubelet-client.key",
                   "kubelet-ca.crt": "kubelet-ca.crt"}

PROBE = r'''
import http.client, sys
c = http.client.HTTPConnection(sys.argv[1], int(sys.argv[2]), timeout=5)
c.request("GET", sys.argv[3])
r = c.getresponse()
print(r.status); sys.stdout.write(r.read().decode(errors="replace"))
'''

APISERVER = r'''
import socket, ssl, sys
pki, port, host_hdr, path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
ctx = ssl.create_default_context(cafile=pki + "/stream-ca.crt")
ctx.check_hostname = False
ctx.load_cert_chain(pki + "/apiserver-kubelet-client.crt", pki + "/apiserver-kubelet-client.key")
s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10))
s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (path, host_hdr)).encode())
data = b""
while True:
    c = s.recv(65536)
    if not c: break
    data += c
sys.stdout.write(data.decode(errors="replace"))
'''


# ---- reading the manifests ----

def kustomize(path):
    """`kubectl kustomize @path`: the objects `kubectl apply -k` would send."""
    check(KUBECTL, "no kubectl (the machine image's /usr/lib/google-cloud-sdk/bin/kubectl.1.33)")
    r = subprocess.run([KUBECTL, "kustomize", path], capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, "kubectl kustomize %s: %s" % (path, r.stderr))
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def overlay(tmp, component, base=K8S):
    """The objects of an overlay of @base with @component (what deploy/README.md tells users to
    write), built in @tmp (kustomize wants relative paths)."""
    d = os.path.join(tmp, "overlay-" + component)
    os.makedirs(d, exist_ok=True)
    rel = os.path.relpath(base, d)
    with open(os.path.join(d, "kustomization.yaml"), "w") as f:
        yaml.safe_dump({"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                        "resources": [rel], "components": [rel + "/components/" + component]}, f)
    return kustomize(d)


def base_name(o):
    n = o["metadata"]["name"]
    if o["kind"] == "ConfigMap":
        for g in GENERATED:
            if re.fullmatch(re.escape(g) + r"-[a-z0-9]{10}", n):
                return g
    return n


def load_manifests():
    with open(os.path.join(K8S, "kustomization.yaml")) as f:
        kust = yaml.safe_load(f)
    check(kust.get("apiVersion") == "kustomize.config.k8s.io/v1beta1" and
          kust.get("kind") == "Kustomization", "kustomization.yaml: %r" % kust)
    listed = kust["resources"]
    present = sorted(n for n in os.listdir(K8S)
                     if n.endswith((".yaml", ".yml")) and n != "kustomization.yaml")
    check(sorted(listed) == present, "kustomization resources %s != files %s" % (listed, present))
    objs = kustomize(K8S)
    for o in objs:
        o["_base"] = base_name(o)
    return kust, objs


def find(objs, kind, name):
    """@name as written (or, for a generated ConfigMap, without its hash)."""
    for o in objs:
        if o["kind"] == kind and name in (o["metadata"]["name"], o.get("_base")):
            return o
    raise h.Fail("no %s %s" % (kind, name))


def quantity(q):
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi)?", str(q))
    check(m is not None, "quantity %r" % q)
    return int(m.group(1)) << {None: 0, "Ki": 10, "Mi": 20, "Gi": 30}[m.group(2)]


def expand_vars(arg, env):
    """Kubernetes' $(VAR) expansion in command/args ($$ escapes; unknown names stay)."""
    def sub(m):
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", sub, arg)


def container_env(c):
    """The container's env as the test node would see it (downward API: spec.nodeName)."""
    env = {}
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        else:
            ref = e["valueFrom"]["fieldRef"]["fieldPath"]
            check(ref in ("spec.nodeName", "metadata.name"),
                  "unexpected downward API field %s" % ref)
            env[e["name"]] = NODE if ref == "spec.nodeName" else "cloudstream-7d4b9c-x2x5q"
    return env


# ---- building the mounts ----

class Mounts:
    """The volumes one container mounts, built under @root (a path P of the container is
    root + P here)."""

    def __init__(self, env, root, objs, pod, c):
        self.env = env
        self.root = root
        self.objs = objs
        self.vols = {v["name"]: v for v in pod.get("volumes", [])}
        self.mounts = []  # (mountPath, volume, readOnly)
        for m in c.get("volumeMounts", []):
            check(m["name"] in self.vols, "mount of undeclared volume %s" % m["name"])
            self.mounts.append((m["mountPath"], self.vols[m["name"]], m.get("readOnly", False)))
        if pod.get("automountServiceAccountToken", True) is not False:
            self.mounts.append((SA_DIR, {"name": "<service account>", "sa": True}, True))
        self.mounts.sort(key=lambda t: -len(t[0]))
        self.socks = []

    def under(self, path):
        for mp, vol, ro in self.mounts:
            if path == mp or path.startswith(mp.rstrip("/") + "/"):
                return mp, vol, ro, os.path.relpath(path, mp) if path != mp else ""
        return None

    def local(self, path):
        return self.root + path if self.under(path) else path

    def remap_arg(self, a):
        if a.startswith("--") and "=" in a:
            k, v = a.split("=", 1)
            return k + "=" + self.local(v)
        return self.local(a) if a.startswith("/") else a

    def remap_json(self, v):
        if isinstance(v, str) and v.startswith("/"):
            return self.local(v)
        if isinstance(v, list):
            return [self.remap_json(x) for x in v]
        if isinstance(v, dict):
            return {k: self.remap_json(x) for k, x in v.items()}
        return v

    def build(self):
        """Creates every mount but the Secrets' files (see add_secret_files)."""
        for mp, vol, _ro in self.mounts:
            d = self.root + mp
            if vol.get("sa"):
                os.makedirs(d, exist_ok=True)
                for n, text in (("token", "test-token\n"), ("namespace", "cloudstream\n")):
                    with open(os.path.join(d, n), "w") as f:
                        f.write(text)
                shutil.copy(self.env.path("stream-ca.crt"), os.path.join(d, "ca.crt"))
            elif "configMap" in vol:
                cm = find(self.objs, "ConfigMap", vol["configMap"]["name"])
                os.makedirs(d, exist_ok=True)
                for k, text in cm["data"].items():
                    if k.endswith((".json", ".yaml")):  # a config file: its paths move too
                        text = dump_config(text, self.remap_json(load_config(text)))
                    with open(os.path.join(d, k), "w") as f:
                        f.write(text)
            elif "secret" in vol:
                os.makedirs(d, exist_ok=True)
            elif "hostPath" in vol:
                t = vol["hostPath"].get("type", "")
                check(vol["hostPath"]["path"] == mp,
                      "hostPath %s mounted at %s: the paths the runtime reports would not "
                      "match" % (vol["hostPath"]["path"], mp))
                if t == "Socket":
                    os.makedirs(os.path.dirname(d), exist_ok=True)
                    s = socket.socket(socket.AF_UNIX)
                    # Bound in the run's short socket directory (a socket path holds 108 bytes,
                    # a deep build tree more) and reached through a symlink at the mount path.
                    short = self.env.sock(os.path.basename(d))
                    s.bind(short)
                    os.symlink(short, d)
                    self.socks.append(s)
                elif t == "Directory":
                    os.makedirs(d, exist_ok=True)
                    if mp == "/etc/edgestream/pki":
                        for host_name, quick_name in EDGE_HOST_FILES.items():
                            shutil.copy(self.env.path(quick_name), os.path.join(d, host_name))
                else:
                    raise h.Fail("hostPath %s: type %r (want Directory or Socket, so a missing "
                                 "path fails the pod instead of being created)" % (mp, t))
            else:
                raise h.Fail("volume %s: unexpected kind %s" % (vol["name"], sorted(vol)))

    def add_secret_files(self, eff):
        """The Secret keys the effective configuration @eff names (paths under root), as
        deploy/README.md makes them: the files of `stream-certs quick` under their names."""
        for v in eff.values():
            if not (isinstance(v, str) and v.startswith(self.root + "/")):
                continue
            mp, vol, _ro, rel = self.under(v[len(self.root):])
            if "secret" in vol:
                check(rel in CLOUD_SECRET_KEYS,
                      "%s: not a key of Secret %s (deploy/README.md makes %s)" % (
                          v[len(self.root):], vol["secret"]["secretName"],
                          sorted(CLOUD_SECRET_KEYS)))
                shutil.copy(self.env.path(rel), self.root + mp + "/" + rel)

    def close(self):
        for s in self.socks:
            s.close()


def load_config(text):
    """A daemon's config file, YAML or JSON (JSON is YAML to python3-yaml)."""
    return yaml.safe_load(text)


def dump_config(orig, cfg):
    """@cfg in the format @orig was in (the daemons tell them apart by the first character)."""
    if orig.lstrip().startswith("{"):
        return json.dumps(cfg, indent=1)
    return yaml.safe_dump(cfg, sort_keys=False, default_flow_style=False)


def print_config(binary, args):
    r = subprocess.run([binary] + args + ["--print-config"], capture_output=True, text=True,
                       timeout=30)
    check(r.returncode == 0, "%s %s --print-config: exit %d: %s" % (
        os.path.basename(binary), " ".join(args), r.returncode, r.stderr.strip()))
    return json.loads(r.stdout)


def check_paths_mounted(m, eff, what):
    """Every absolute path in the effective configuration is inside a mount and exists there
    (files written by the daemon, --ready-file, are not configured in the manifests)."""
    for k, v in eff.items():
        for s in (v if isinstance(v, list) else [v]):
            if not (isinstance(s, str) and s.startswith("/")):
                continue
            check(s.startswith(m.root), "%s: --%s %s is in no volume the container mounts" % (
                what, k, s))
            check(os.path.exists(s), "%s: --%s %s: the mount holds no such file" % (
                what, k, s[len(m.root):]))


def listen_port(addr):
    return int(addr.rsplit(":", 1)[1])


def duration_ms(v):
    return int(v)  # --print-config prints durations as ms


# ---- running in a namespace (root) or on loopback ----

class Net:
    def __init__(self):
        self.ns = None
        # ST_DEPLOY_NO_NETNS=1 runs the loopback variant as root too.
        if os.geteuid() == 0 and shutil.which("ip") and not os.environ.get("ST_DEPLOY_NO_NETNS"):
            self.ns = "csdeploy%d" % os.getpid()
            subprocess.run(["ip", "netns", "add", self.ns], check=True)
            subprocess.run(["ip", "netns", "exec", self.ns, "ip", "link", "set", "lo", "up"],
                           check=True)

    def prefix(self):
        return ["ip", "netns", "exec", self.ns] if self.ns else []

    def run_py(self, code, *args):
        r = subprocess.run(self.prefix() + [h.PY, "-c", code] + [str(a) for a in args],
                           capture_output=True, text=True, timeout=30)
        check(r.returncode == 0, "client: %s" % (r.stdout + r.stderr))
        return r.stdout

    def get(self, host, port, path):
        out = self.run_py(PROBE, host, port, path)
        status, _, body = out.partition("\n")
        return int(status), body

    def close(self):
        if self.ns:
            subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)


def start_daemon(env, net, name, binary, args, timeout=30):
    ready = os.path.join(env.dir, name + ".ready")
    if os.path.exists(ready):
        os.unlink(ready)
    p, text = env.start(name, [binary] + args + ["--ready-file", ready], ready,
                        timeout=timeout, prefix=net.prefix())
    p.ports = h.ready_ports(text.split("node=")[0])
    return p


def wait_for(fn, what, timeout=10.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            if fn():
                return
        except h.Fail as e:
            last = e
        time.sleep(0.1)
    raise h.Fail("%s: not within %.0f s (%s)" % (what, timeout, last))


# ---- the checks ----

def project_version():
    with open(os.path.join(h.SRC, "CMakeLists.txt")) as f:
        return re.search(r"project\(\w+ VERSION ([\d.]+)", f.read()).group(1)


def test_objects(objs, kust):
    got = {(o["apiVersion"], o["kind"], o["_base"]) for o in objs}
    check(got == EXPECTED, "objects: missing %s, unexpected %s" % (
        sorted(EXPECTED - got), sorted(got - EXPECTED)))
    check("namespace" not in kust, "kustomization.yaml namespace: would move every object into "
          "one namespace (two Pod Security levels need two)")
    host = {("DaemonSet", "edgestream"), ("ConfigMap", "edgestream-config")}
    for o in objs:
        if o["kind"] not in CLUSTER_SCOPED:
            want = HOST_NS if (o["kind"], o["_base"]) in host else "cloudstream"
            check(o["metadata"].get("namespace") == want,
                  "%s %s: namespace %s, want %s" % (o["kind"], o["metadata"]["name"],
                                                     o["metadata"].get("namespace"), want))
    for kind, name in (("Deployment", "cloudstream"), ("DaemonSet", "edgestream")):
        w = find(objs, kind, name)
        sel = w["spec"]["selector"]["matchLabels"]
        labels = w["spec"]["template"]["metadata"]["labels"]
        check(all(labels.get(k) == v for k, v in sel.items()), "%s selector %s" % (kind, sel))
    dep = find(objs, "Deployment", "cloudstream")
    pod = dep["spec"]["template"]
    c = pod["spec"]["containers"][0]
    cports = {p["name"]: p["containerPort"] for p in c["ports"]}
    for svc_name, port in (("cloudstream-tunnel", 10004), ("cloudstream-stream", 10350)):
        svc = find(objs, "Service", svc_name)
        check(all(pod["metadata"]["labels"].get(k) == v
                  for k, v in svc["spec"]["selector"].items()), "%s selector" % svc_name)
        (sp,) = svc["spec"]["ports"]
        check(sp["port"] == port and sp["targetPort"] in cports and
              cports[sp["targetPort"]] == port, "%s ports %s" % (svc_name, sp))
    # Every generated ConfigMap is what a workload mounts, by its hashed name.
    for kind, name, cm in (("Deployment", "cloudstream", "cloudstream-config"),
                           ("DaemonSet", "edgestream", "edgestream-config")):
        vols = find(objs, kind, name)["spec"]["template"]["spec"]["volumes"]
        names = [v["configMap"]["name"] for v in vols if "configMap" in v]
        check(names == [find(objs, "ConfigMap", cm)["metadata"]["name"]] and names[0] != cm,
              "%s %s mounts %s, not the generated %s-<hash>" % (kind, name, names, cm))
    # kustomization.yaml's images: keep the names the workloads use, at the project version.
    imgs = {i["name"]: i for i in kust.get("images", [])}
    for n in ("cloudstream", "edgestream"):
        i = imgs.get("localhost/" + n, {})
        check(i.get("newTag") == project_version(), "kustomization images: %s %s" % (n, i))


def pod_workloads(objs):
    return [o for o in objs if o["kind"] in ("Deployment", "DaemonSet", "StatefulSet", "Job")]


def test_config_rollout(objs, tmp):
    """A config edit renames its ConfigMap (the hash of its contents), so the pod templates
    change and `kubectl apply -k` rolls the pods; an unchanged copy builds the same names."""
    def templates(built):
        return {(o["kind"], o["metadata"]["name"]): o["spec"]["template"]
                for o in pod_workloads(built)}
    for edited in (None, "cloudstream", "edgestream"):
        d = os.path.join(tmp, "rollout-%s" % edited)
        shutil.copytree(K8S, d)
        if edited:
            with open(os.path.join(d, "config", edited + ".yaml"), "a") as f:
                f.write("# an edit\n")
        built = kustomize(d)
        for o in built:
            o["_base"] = base_name(o)
        old, new = templates(objs), templates(built)
        for g in GENERATED:
            same = find(built, "ConfigMap", g)["metadata"]["name"] == \
                find(objs, "ConfigMap", g)["metadata"]["name"]
            check(same == (not edited or not g.startswith(edited)),
                  "edit %s: ConfigMap %s renamed: %s" % (edited, g, not same))
        for key in old:
            rolls = edited is not None and key[1] == edited
            check((old[key] != new[key]) == rolls,
                  "edit of %s: the pod template of %s %s %s" % (
                      edited, key[0], key[1], "did not change" if rolls else "changed"))


def test_rollout_strategy(objs):
    ds = find(objs, "DaemonSet", "edgestream")["spec"]
    ru = ds["updateStrategy"]["rollingUpdate"]
    m = re.fullmatch(r"(\d+)%", str(ru.get("maxUnavailable")))
    check(ds["updateStrategy"]["type"] == "RollingUpdate" and m and 1 <= int(m.group(1)) <= 25,
          "DaemonSet maxUnavailable %r: a percentage of the fleet (1-25 %%)" %
          ru.get("maxUnavailable"))
    check(str(ru.get("maxSurge", 0)) in ("0", "0%"), "maxSurge %r: hostNetwork pods cannot "
          "surge (the admin port)" % ru.get("maxSurge"))
    (c,) = ds["template"]["spec"]["containers"]
    check(ds.get("minReadySeconds", 0) > 0 and c["readinessProbe"]["httpGet"]["path"] ==
          "/readyz", "a pod counts once /readyz (tunnel up) held for minReadySeconds")
    dep = find(objs, "Deployment", "cloudstream")["spec"]
    # Several replicas (README, "High availability"): one at a time, a new one first.
    check(dep["replicas"] == 3 and dep["strategy"] == {
        "type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
        "cloudstream: 3 replicas, RollingUpdate maxUnavailable 0 maxSurge 1: %s" % dep)
    sel = dep["selector"]["matchLabels"]
    pdb = find(objs, "PodDisruptionBudget", "cloudstream")["spec"]
    check(pdb["selector"]["matchLabels"] == sel and pdb.get("maxUnavailable") == 1,
          "PodDisruptionBudget: one replica at a time %s" % pdb)
    anti = dep["template"]["spec"]["affinity"]["podAntiAffinity"]
    terms = [t["podAffinityTerm"] for t in
             anti.get("preferredDuringSchedulingIgnoredDuringExecution", [])]
    check(any(t["topologyKey"] == "kubernetes.io/hostname" and
              t["labelSelector"]["matchLabels"] == sel for t in terms),
          "pod anti-affinity by host: %s" % anti)
    peers = find(objs, "Service", "cloudstream-peers")["spec"]
    check(peers.get("clusterIP") == "None" and peers.get("publishNotReadyAddresses") is True and
          peers["selector"] == sel and [p["port"] for p in peers["ports"]] == [10004],
          "the peer Service: headless, not-ready pods published, the tunnel port: %s" % peers)
    cfg = load_config(find(objs, "ConfigMap", "cloudstream-config")["data"]["cloudstream.yaml"])
    check(cfg.get("peer-service") == "cloudstream/cloudstream-peers" and
          [p["name"] for p in peers["ports"]] == ["tunnel"],
          "peer-service %r: the peer Service, its port named tunnel" % cfg.get("peer-service"))
    (c,) = dep["template"]["spec"]["containers"]
    check("--replica-id=$(POD_NAME)" in c["args"], "each replica's id is its pod's name")
    # At 2,000 nodes the rollout goes in waves of maxUnavailable:
    waves = -(-2000 // max(1, 2000 * int(m.group(1)) // 100))
    print("     edgestream rolls %s at a time: %d waves over 2,000 nodes (maxUnavailable 1: 2,000)"
          % (ru["maxUnavailable"], waves))


# Pod Security Standards (v1.33), the checks that apply to our specs.
BASELINE_CAPS = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                 "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                      "persistentVolumeClaim", "projected", "secret"}


def pss_violations(pod):
    """{level: [why]} for a pod spec: what keeps it out of baseline and out of restricted."""
    out = {"baseline": [], "restricted": []}
    b, r = out["baseline"], out["restricted"]
    for f in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(f):
            b.append(f)
    psc = pod.get("securityContext", {})
    if psc.get("sysctls"):
        b.append("sysctls")
    for v in pod.get("volumes", []):
        kinds = set(v) - {"name"}
        if "hostPath" in kinds:
            b.append("hostPath volume " + v["name"])
        elif not kinds <= RESTRICTED_VOLUMES:
            r.append("volume type %s" % sorted(kinds))
    cs = pod.get("initContainers", []) + pod["containers"]
    for c in cs:
        sc = c.get("securityContext", {})
        if sc.get("privileged"):
            b.append("privileged " + c["name"])
        if any(p.get("hostPort") for p in c.get("ports", [])):
            b.append("hostPort " + c["name"])
        caps = sc.get("capabilities", {})
        extra = set(caps.get("add", [])) - BASELINE_CAPS
        if extra:
            b.append("capabilities %s" % sorted(extra))
        if "ALL" not in caps.get("drop", []) or set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            r.append("capabilities of %s: drop ALL, add at most NET_BIND_SERVICE" % c["name"])
        if sc.get("allowPrivilegeEscalation") is not False:
            r.append("allowPrivilegeEscalation of " + c["name"])
        if not sc.get("runAsNonRoot", psc.get("runAsNonRoot")):
            r.append("runAsNonRoot of " + c["name"])
        if sc.get("runAsUser", psc.get("runAsUser")) == 0:
            r.append("runAsUser 0 in " + c["name"])
        seccomp = sc.get("seccompProfile", psc.get("seccompProfile", {})).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            r.append("seccompProfile of " + c["name"])
        if sc.get("seccompProfile", {}).get("type") == "Unconfined":
            b.append("seccomp Unconfined")
    r.extend(b)  # restricted includes baseline
    return out


def test_pod_security(objs):
    """The namespaces' Pod Security labels hold their pods: cloudstream passes restricted;
    cloudstream-host needs privileged, for exactly hostNetwork and hostPath (edgestream) and
    hostNetwork, the xtables lock and NET_ADMIN/NET_RAW (the optional DNAT controller), nothing
    else."""
    levels = {}
    for ns in (o for o in objs if o["kind"] == "Namespace"):
        lab = ns["metadata"].get("labels", {})
        level = lab.get("pod-security.kubernetes.io/enforce")
        check(level in ("restricted", "baseline", "privileged"),
              "namespace %s: no enforce label" % ns["metadata"]["name"])
        for mode in ("enforce", "audit", "warn"):
            check(lab.get("pod-security.kubernetes.io/%s" % mode) == level and
                  re.fullmatch(r"v1\.\d+|latest",
                               lab.get("pod-security.kubernetes.io/%s-version" % mode, "")),
                  "namespace %s: %s label and version" % (ns["metadata"]["name"], mode))
        levels[ns["metadata"]["name"]] = level
    check(levels == {"cloudstream": "restricted", HOST_NS: "privileged"}, "levels %s" % levels)
    with open(os.path.join(K8S, "optional", "dnat-controller.yaml")) as f:
        optional = [d for d in yaml.safe_load_all(f) if d]
    expect = {("Deployment", "cloudstream"): [],
              ("DaemonSet", "edgestream"): ["hostNetwork", "hostPath volume pki",
                                            "hostPath volume cri-socket",
                                            "hostPath volume pod-logs"],
              ("DaemonSet", "cloudstream-dnat"): ["hostNetwork", "hostPath volume xtables-lock",
                                                  "capabilities ['NET_ADMIN', 'NET_RAW']"]}
    for o in pod_workloads(objs) + pod_workloads(optional):
        key = (o["kind"], o["metadata"]["name"])
        v = pss_violations(o["spec"]["template"]["spec"])
        ns = o["metadata"]["namespace"]
        check(ns in levels, "%s %s in namespace %s, which the manifests do not make" % (
            key + (ns,)))
        if levels[ns] != "privileged":
            check(not v[levels[ns]], "%s %s breaks %s: %s" % (key + (levels[ns], v[levels[ns]])))
        check(key in expect and v["baseline"] == expect[key],
              "%s %s needs privileged for %s; expected only %s" % (
                  key + (v["baseline"], expect.get(key))))


def test_admin_closed(objs):
    """cloudstream's admin port (no authentication of its own) is on no Service and closed by
    the NetworkPolicy, which opens every other containerPort; edgestream's stays on loopback."""
    dep = find(objs, "Deployment", "cloudstream")
    pod = dep["spec"]["template"]
    (c,) = pod["spec"]["containers"]
    cports = {p["name"]: p["containerPort"] for p in c["ports"]}
    check("admin" in cports, "containerPort admin (the probes)")
    check(not any(k.startswith("prometheus.io/") for k in pod["metadata"].get("annotations", {})),
          "prometheus.io annotations invite scraping the closed port")
    for svc in (o for o in objs if o["kind"] == "Service"):
        for sp in svc["spec"]["ports"]:
            check(sp["targetPort"] not in ("admin", cports["admin"]),
                  "Service %s exposes the admin port" % svc["metadata"]["name"])
    pols = [o for o in objs if o["kind"] == "NetworkPolicy" and
            all(pod["metadata"]["labels"].get(k) == v
                for k, v in o["spec"]["podSelector"].get("matchLabels", {}).items())]
    check(len(pols) == 1 and pols[0]["spec"]["policyTypes"] == ["Ingress"],
          "one Ingress NetworkPolicy selects the cloudstream pods: %s" % pols)
    allowed = set()
    for rule in pols[0]["spec"]["ingress"]:
        check("from" not in rule, "the open ports are open to every source: %s" % rule)
        for p in rule["ports"]:
            allowed.add(p["port"] if isinstance(p["port"], str) else
                        next(n for n, v in cports.items() if v == p["port"]))
    check(allowed == set(cports) - {"admin"}, "the policy opens %s; want every containerPort "
          "but admin: %s" % (sorted(allowed), sorted(set(cports) - {"admin"})))
    ds = find(objs, "DaemonSet", "edgestream")
    (ec,) = ds["spec"]["template"]["spec"]["containers"]
    adm = [a for a in ec["args"] if a.startswith("--admin-listen=")]
    check(adm and adm[0].split("=", 1)[1].startswith("127.0.0.1:"),
          "edgestream's admin port on the node's loopback: %s" % adm)


def ds_args(objs):
    (c,) = find(objs, "DaemonSet", "edgestream")["spec"]["template"]["spec"]["containers"]
    return c["args"]


def test_components(objs, tmp):
    """Each component in an overlay of the base: builds, changes what it says, and the real
    edgestream accepts the DaemonSet's flags with the ConfigMap's file."""
    cm = find(objs, "ConfigMap", "edgestream-config")
    raw = os.path.join(tmp, "edgestream-config.yaml")
    with open(raw, "w") as f:
        f.write(cm["data"]["edgestream.yaml"])
    base_ds = find(objs, "DaemonSet", "edgestream")
    base_dep = find(objs, "Deployment", "cloudstream")

    def effective(built):
        args = [expand_vars(a, {"NODE_NAME": NODE}) for a in ds_args(built)
                if not a.startswith("--config=")]
        return print_config(EDGE_BIN, ["--config", raw] + args)

    base_eff = effective(objs)
    check(base_eff["cri-socket"] == "/run/containerd/containerd.sock", "base: containerd's socket")
    for comp in COMPONENTS:
        built = overlay(tmp, comp)
        for o in built:
            o["_base"] = base_name(o)
        eff = effective(built)
        ds = find(built, "DaemonSet", "edgestream")
        pod = ds["spec"]["template"]["spec"]
        (c,) = pod["containers"]
        extra = [a for a in c["args"] if a not in ds_args(objs)]
        if comp in CRI_SOCKETS:
            sock = CRI_SOCKETS[comp]
            vol = next(v for v in pod["volumes"] if v["name"] == "cri-socket")
            mnt = next(m for m in c["volumeMounts"] if m["name"] == "cri-socket")
            check(vol["hostPath"] == {"path": sock, "type": "Socket"} and
                  mnt["mountPath"] == sock and eff["cri-socket"] == sock and
                  extra == ["--cri-socket=" + sock],
                  "%s: volume %s, mount %s, --cri-socket %s, added %s" % (
                      comp, vol, mnt, eff["cri-socket"], extra))
        elif comp == "kubeedge":
            check(eff["kubelet-url"] == "http://127.0.0.1:10350" and
                  pod["nodeSelector"] == {"node-role.kubernetes.io/edge": ""},
                  "kubeedge: kubelet-url %s, nodeSelector %s" % (eff["kubelet-url"],
                                                                  pod["nodeSelector"]))
        elif comp == "openyurt":
            check(pod["nodeSelector"] == {"openyurt.io/is-edge-worker": "true"} and not extra,
                  "openyurt: nodeSelector %s" % pod["nodeSelector"])
            aff = find(built, "Deployment", "cloudstream")["spec"]["template"]["spec"]["affinity"]
            terms = aff["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            check(terms["nodeSelectorTerms"] == [{"matchExpressions": [
                {"key": "openyurt.io/is-edge-worker", "operator": "NotIn", "values": ["true"]}]}],
                "openyurt: cloudstream's affinity %s" % terms)
        elif comp == "monitoring":
            adm = base_eff["admin-listen"]
            check(extra == ["--local-port=edgestream=%d" % listen_port(adm)] and
                  "edgestream=%d" % listen_port(adm) in eff["local-port"],
                  "monitoring: edgestream's admin port allow-listed: %s %s" % (
                      extra, eff["local-port"]))
            pm = find(built, "PodMonitor", "cloudstream")
            cports = {p["name"] for p in base_dep["spec"]["template"]["spec"]["containers"][0]
                      ["ports"]}
            (ep,) = pm["spec"]["podMetricsEndpoints"]
            check(pm["spec"]["selector"]["matchLabels"] ==
                  base_dep["spec"]["selector"]["matchLabels"] and ep["port"] == "admin" and
                  "admin" in cports and ep["path"] == "/metrics" and
                  {"targetLabel": "job", "replacement": "cloudstream"} in ep["relabelings"],
                  "PodMonitor %s" % pm["spec"])
            np_ = find(built, "NetworkPolicy", "cloudstream-admin-from-monitoring")
            (rule,) = np_["spec"]["ingress"]
            check([p["port"] for p in rule["ports"]] == ["admin"] and rule["from"],
                  "the admin port opened to the monitoring namespace only: %s" % rule)
            sc = find(built, "ScrapeConfig", "edgestream")["spec"]
            path = next(r for r in sc["relabelings"] if r.get("targetLabel") == "__metrics_path__")
            check(sc["jobName"] == "edgestream" and path["replacement"] ==
                  "/api/v1/nodes/${1}/proxy/ports/edgestream/metrics" and
                  sc["kubernetesSDConfigs"][0]["selectors"][0]["label"] in base_ds["spec"][
                      "template"]["spec"]["nodeSelector"],
                  "ScrapeConfig %s" % sc)
            # the alert rules' jobs are the ones these make
            with open(os.path.join(h.SRC, "deploy", "prometheus", "alerts.yaml")) as f:
                jobs = set(re.findall(r'job="([a-z]+)"', f.read()))
            check(jobs <= {"cloudstream", "edgestream"}, "alert jobs %s" % jobs)
        # Nothing else in the DaemonSet changed than the component says.
        if comp != "openyurt":
            same = json.loads(json.dumps(ds))
            (sc_,) = same["spec"]["template"]["spec"]["containers"]
            sc_["args"] = [a for a in sc_["args"] if a not in extra]
            if comp in CRI_SOCKETS:
                for v in same["spec"]["template"]["spec"]["volumes"]:
                    if v["name"] == "cri-socket":
                        v["hostPath"]["path"] = "/run/containerd/containerd.sock"
                for m in sc_["volumeMounts"]:
                    if m["name"] == "cri-socket":
                        m["mountPath"] = "/run/containerd/containerd.sock"
            base = json.loads(json.dumps(base_ds))
            for o in (same, base):
                o.pop("_base", None)
            check(same == base, "%s changed more of the DaemonSet than it says" % comp)
        print("     %s: %s" % (comp, extra or "nodeSelector, affinity"))


def test_rbac(objs):
    # cloudstream's apiserver calls: GET of one pod, which the ClusterRole grants, and with
    # --authorization-mode Webhook / --authentication-token-webhook (off in these manifests)
    # the TokenReviews and SubjectAccessReviews that deploy/README's system:auth-delegator
    # binding grants. Find every API path in its sources.
    paths = set()
    src = os.path.join(h.SRC, "cloudstream", "src")
    for n in os.listdir(src):
        with open(os.path.join(src, n), errors="replace") as f:
            # URLs are built as "%s/api/..." with --apiserver-url in front.
            paths |= set(re.findall(r'"%s(/api[^"]*)"', f.read()))
    webhook_only = {"/apis/authentication.k8s.io/v1/tokenreviews",
                    "/apis/authorization.k8s.io/v1/subjectaccessreviews"}
    # --internal-ip-policy node-address (get nodes) and --node-watch (list, watch nodes), off in
    # these manifests: deploy/MIGRATION.md says which rule to add with them.
    # (the list and the watch are built by kwatch_run.c from the collection's URL)
    nodes_only = {"/api/v1/nodes/%s", "/api/v1/nodes"}
    # --serving-certs csr: the CSR calls, granted by the optional
    # deploy/kubernetes/optional/serving-certs-rbac.yaml (checked below).
    serving_only = {"/apis/certificates.k8s.io/v1/certificatesigningrequests",
                    "/apis/certificates.k8s.io/v1/certificatesigningrequests/%s",
                    "/apis/certificates.k8s.io/v1/certificatesigningrequests/%s/approval"}
    # Node events (events_post.c): POST .../events, PATCH .../events/<name>.
    events = {"/api/v1/namespaces/%s/events", "/api/v1/namespaces/%s/events/%s"}
    check(events <= paths, "the Node events' calls moved: %s" % sorted(paths))
    # --advertise-kubelet-port: optional/advertise-port-rbac.yaml (checked below).
    serving_only |= {"/api/v1/nodes/%s/status"}
    # --front-door-pod-ips: pods listed by IP (off in these manifests; deploy/README.md, "the
    # front door", names the rule: list pods).
    pod_ips_only = {"/api/v1/pods?fieldSelector=status.podIP%%3D%s"}
    # peer-service (the replicas from the peer Service's EndpointSlices, as these manifests
    # configure): the Role cloudstream-peers grants its list and watch (checked below).
    pod_ips_only |= {"/apis/discovery.k8s.io/v1/namespaces/%s/endpointslices?labelSelector="}
    check(paths - webhook_only - nodes_only - serving_only - events - pod_ips_only ==
          {"/api/v1/namespaces/%s/pods/%s"},
          "cloudstream's API calls changed: %s; update the ClusterRole and this test"
          % sorted(paths))
    for name, rules in (
            ("cloudstream-pod-lookup",
             [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]),
            ("cloudstream-node-events",
             [{"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]}])):
        role = find(objs, "ClusterRole", name)
        check(role["rules"] == rules, "ClusterRole %s grants more or less than %s: %s" % (
            name, rules, role["rules"]))
        b = find(objs, "ClusterRoleBinding", name)
        check(b["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                               "name": name}, "roleRef %s" % b["roleRef"])
        check(b["subjects"] == [{"kind": "ServiceAccount", "name": "cloudstream",
                                 "namespace": "cloudstream"}], "subjects %s" % b["subjects"])
    # Membership from the cluster: EndpointSlices of the peer Service, list and watch, in
    # cloudstream's namespace only.
    role = find(objs, "Role", "cloudstream-peers")
    check(role["metadata"]["namespace"] == "cloudstream" and role["rules"] == [
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
         "verbs": ["list", "watch"]}], "Role cloudstream-peers: %s" % role["rules"])
    b = find(objs, "RoleBinding", "cloudstream-peers")
    check(b["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                           "name": "cloudstream-peers"} and
          b["subjects"] == [{"kind": "ServiceAccount", "name": "cloudstream",
                             "namespace": "cloudstream"}], "RoleBinding %s" % b)
    spec = find(objs, "Deployment", "cloudstream")["spec"]["template"]["spec"]
    check(spec.get("serviceAccountName") == "cloudstream", "Deployment's service account")
    with open(os.path.join(h.SRC, "deploy", "kubernetes", "optional",
                           "serving-certs-rbac.yaml")) as f:
        sv = [d for d in yaml.safe_load_all(f) if d]
    role = find(sv, "ClusterRole", "cloudstream-serving-certs")
    check(role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
        {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"],
         "verbs": ["create", "get"]}], "serving-certs rules: %s" % role["rules"])
    role = find(sv, "ClusterRole", "cloudstream-serving-certs-approver")
    check(role["rules"] == [
        {"apiGroups": ["certificates.k8s.io"],
         "resources": ["certificatesigningrequests/approval"], "verbs": ["update"]},
        {"apiGroups": ["certificates.k8s.io"], "resources": ["signers"],
         "resourceNames": ["kubernetes.io/kubelet-serving"], "verbs": ["approve"]}],
        "serving-certs approver rules: %s" % role["rules"])
    # The DNAT controller's DaemonSet: list/watch nodes only, host network, NET_ADMIN.
    with open(os.path.join(h.SRC, "deploy", "kubernetes", "optional",
                           "dnat-controller.yaml")) as f:
        dn = [d for d in yaml.safe_load_all(f) if d]
    check(find(dn, "ClusterRole", "cloudstream-dnat")["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]}],
        "dnat controller rules")
    b = find(dn, "ClusterRoleBinding", "cloudstream-dnat")
    check(b["subjects"] == [{"kind": "ServiceAccount", "name": "cloudstream-dnat",
                             "namespace": HOST_NS}], "dnat binding %s" % b)
    pod = find(dn, "DaemonSet", "cloudstream-dnat")["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    check(pod.get("hostNetwork") is True and pod.get("serviceAccountName") == "cloudstream-dnat"
          and c["securityContext"]["capabilities"] == {"drop": ["ALL"],
                                                       "add": ["NET_ADMIN", "NET_RAW"]} and
          c["command"] == ["cloudstream-dnat-controller"] and
          any(a.startswith("--to=") for a in c["args"]), "dnat DaemonSet %s" % pod)
    with open(os.path.join(h.SRC, "deploy", "kubernetes", "optional",
                           "advertise-port-rbac.yaml")) as f:
        ap = [d for d in yaml.safe_load_all(f) if d]
    check(find(ap, "ClusterRole", "cloudstream-advertise-port")["rules"] == [
        {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]}],
        "advertise-port rules")
    for n in ("cloudstream-serving-certs", "cloudstream-serving-certs-approver",
              "cloudstream-advertise-port"):
        b = find(sv + ap, "ClusterRoleBinding", n)
        check(b["roleRef"]["name"] == n and b["subjects"] == [
            {"kind": "ServiceAccount", "name": "cloudstream", "namespace": "cloudstream"}],
            "binding %s: %s" % (n, b))


def test_security(objs):
    for kind, name, non_root in (("Deployment", "cloudstream", True),
                                 ("DaemonSet", "edgestream", False)):
        pod = find(objs, kind, name)["spec"]["template"]["spec"]
        (c,) = pod["containers"]
        sc, psc = c.get("securityContext", {}), pod.get("securityContext", {})
        what = "%s %s" % (kind, name)
        check(sc.get("readOnlyRootFilesystem") is True, what + ": readOnlyRootFilesystem")
        check(sc.get("allowPrivilegeEscalation") is False, what + ": allowPrivilegeEscalation")
        check(not sc.get("privileged"), what + ": privileged")
        check(sc.get("capabilities") == {"drop": ["ALL"]}, what + ": capabilities %s" %
              sc.get("capabilities"))
        seccomp = sc.get("seccompProfile") or psc.get("seccompProfile")
        check(seccomp == {"type": "RuntimeDefault"}, what + ": seccomp %s" % seccomp)
        if non_root:
            check(psc.get("runAsNonRoot") is True and psc.get("runAsUser", 0) > 0,
                  what + ": runs as root")
        # The image deploy/build-images.sh builds (localhost/<daemon>:<project version>), and
        # never pulled: nodes without a registry have it imported.
        want = "localhost/%s:%s" % (name, project_version())
        check(c["image"] == want, what + ": image %s, deploy/build-images.sh builds %s" % (
            c["image"], want))
        check(c.get("imagePullPolicy") == "IfNotPresent", what + ": imagePullPolicy")


def test_cloudstream(env, net, objs):
    dep = find(objs, "Deployment", "cloudstream")
    tmpl = dep["spec"]["template"]
    pod = tmpl["spec"]
    (c,) = pod["containers"]
    check(c["command"] == ["/usr/bin/cloudstream"], "command %s (the image's binary)" % (
        c["command"],))
    cenv = container_env(c)
    args = [expand_vars(a, cenv) for a in c["args"]]
    m = Mounts(env, os.path.join(env.dir, "cloud-root"), objs, pod, c)
    # The ConfigMap's file alone loads in the real daemon, and says what it says.
    cm = find(objs, "ConfigMap", "cloudstream-config")
    raw = os.path.join(env.dir, "cloudstream.yaml")
    with open(raw, "w") as f:
        f.write(cm["data"]["cloudstream.yaml"])
    file_cfg = load_config(cm["data"]["cloudstream.yaml"])
    check(file_cfg.get("apiVersion") == "cloudstream.io/v1alpha1" and
          file_cfg.get("kind") == "CloudStreamConfig", "the ConfigMap's file has no version")
    eff = print_config(CLOUD_BIN, ["--config", raw])
    for k, v in file_cfg.items():
        if k in ("apiVersion", "kind"):
            continue
        if isinstance(v, (str, list)) and not re.fullmatch(r"[\d.]+(ms|s|m|h|KiB|MiB|GiB)?",
                                                           str(v)):
            check(eff[k] == v, "config %s: file %r, effective %r" % (k, v, eff[k]))
    # Every arg is a real flag; every path it names is mounted.
    m.build()
    margs = [m.remap_arg(a) for a in args]
    eff = print_config(CLOUD_BIN, margs)
    m.add_secret_files(eff)
    check_paths_mounted(m, eff, "cloudstream")
    check(eff["apiserver-url"] == "https://kubernetes.default.svc",
          "apiserver-url %s (pod lookup for upgrades)" % eff["apiserver-url"])
    # Ports: containerPorts, probes, Prometheus.
    cports = {p["name"]: p["containerPort"] for p in c["ports"]}
    for key, pname in (("tunnel-listen", "tunnel"), ("stream-listen", "stream"),
                       ("admin-listen", "admin")):
        check(listen_port(eff[key]) == cports[pname], "--%s %s vs containerPort %s=%d" % (
            key, eff[key], pname, cports[pname]))
        check(eff[key].startswith("0.0.0.0:"), "--%s %s: not reachable on the pod IP" % (
            key, eff[key]))
    check(c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "admin"},
          "liveness %s" % c["livenessProbe"])
    check(c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "admin"},
          "readiness %s" % c["readinessProbe"])
    limit = quantity(c["resources"]["limits"]["memory"])
    check(eff["process-buffer-bytes"] < limit, "process-buffer-bytes %d >= memory limit %d" % (
        eff["process-buffer-bytes"], limit))
    check(pod["terminationGracePeriodSeconds"] * 1000 > duration_ms(eff["drain-timeout"]),
          "terminationGracePeriodSeconds not above drain-timeout")
    # Run it as the Deployment does.
    if not net.ns:
        margs += ["--tunnel-listen", "127.0.0.1:0", "--stream-listen", "127.0.0.1:0",
                  "--admin-listen", "127.0.0.1:0"]
    cloud = start_daemon(env, net, "cloudstream", CLOUD_BIN, margs)
    cloud.mounts = m
    if net.ns:
        # (a listener the configuration leaves off is in the ready file as port 0)
        listening = {k: v for k, v in cloud.ports.items() if v}
        check(listening == cports, "ready file %s vs containerPorts %s" % (cloud.ports, cports))
    # Ready once synced with every peer the peer Service names: here none resolves (no cluster
    # DNS in the test), so once --peer-sync-timeout passed, as a lone first replica would.
    sync_s = duration_ms(eff["peer-sync-timeout"]) / 1000
    deadline = time.monotonic() + sync_s + 5
    for probe, want in (("livenessProbe", 200), ("readinessProbe", 200)):
        while True:
            st, body = net.get("127.0.0.1", cloud.ports["admin"], c[probe]["httpGet"]["path"])
            if st == want or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        check(st == want, "cloudstream %s: %d %s" % (probe, st, body))
    st, body = net.get("127.0.0.1", cloud.ports["admin"], "/metrics")  # the PodMonitor's path
    check(st == 200 and "cloudstream_sessions 0" in body, "metrics: %d %s" % (st, body[:200]))
    return cloud


def test_edgestream(env, net, objs, cloud, kubelet, monitoring_args=()):
    """@monitoring_args: what components/monitoring adds to the DaemonSet's args (the admin
    port allow-listed as a local port): run with it, edgestream's /metrics is scraped as the
    ScrapeConfig scrapes it, through the apiserver's path, cloudstream and the tunnel."""
    ds = find(objs, "DaemonSet", "edgestream")
    pod = ds["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    check(c["command"] == ["/usr/bin/edgestream"], "command %s (the image's binary)" % c["command"])
    check(pod.get("hostNetwork") is True, "hostNetwork: the kubelet and the runtime's streaming "
          "server are on the node's loopback")
    check(pod["nodeSelector"] == {"node-role.kubernetes.io/edge": ""},
          "nodeSelector %s" % pod["nodeSelector"])
    tol = {(t["key"], t.get("operator"), t.get("effect")) for t in pod["tolerations"]}
    check(("node-role.kubernetes.io/edge", "Exists", "NoSchedule") in tol, "tolerations %s" % tol)
    check(pod.get("automountServiceAccountToken") is False, "edgestream needs no API token")
    cenv = container_env(c)
    check(cenv.get("NODE_NAME") == NODE, "NODE_NAME from the downward API")
    args = [expand_vars(a, cenv) for a in c["args"]] + list(monitoring_args)
    check(not any("$(" in a for a in args), "unexpanded $(VAR) in %s" % args)
    check("--node-name=%s" % NODE in args, "--node-name from the downward API: %s" % args)
    m = Mounts(env, os.path.join(env.dir, "edge-root"), objs, pod, c)
    cm = find(objs, "ConfigMap", "edgestream-config")
    raw = os.path.join(env.dir, "edgestream.yaml")
    with open(raw, "w") as f:
        f.write(cm["data"]["edgestream.yaml"])
    print_config(EDGE_BIN, ["--config", raw])
    m.build()
    margs = [m.remap_arg(a) for a in args]
    eff = print_config(EDGE_BIN, margs)
    m.add_secret_files(eff)
    check_paths_mounted(m, eff, "edgestream")
    # The CRI socket and the log files, from the host at the host's paths.
    cri = eff["cri-socket"][len(m.root):]
    u = m.under(cri)
    check(u and u[1].get("hostPath", {}).get("type") == "Socket" and u[3] == "",
          "--cri-socket %s is not a hostPath Socket mount" % cri)
    u = m.under("/var/log/pods/ns_pod_uid/c/0.log")
    check(u and u[0] == "/var/log/pods" and u[2] and
          u[1].get("hostPath", {}).get("path") == "/var/log/pods",
          "/var/log/pods is not mounted read-only from the host")
    # Probes: the kubelet probes a hostNetwork pod from the node, at the admin address.
    adm = eff["admin-listen"]
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        g = c[probe]["httpGet"]
        check(g["path"] == path and "%s:%d" % (g.get("host", ""), g["port"]) == adm,
              "%s %s vs --admin-listen %s" % (probe, g, adm))
    limit = quantity(c["resources"]["limits"]["memory"])
    need = eff["max-streams"] * (eff["stream-window-bytes"] + eff["stream-queue-bytes"])
    check(need < limit, "max-streams x (window + queue) = %d >= memory limit %d" % (need, limit))
    # Run it as the DaemonSet does, against the cloudstream above, with a kubelet stand-in.
    margs += ["--cloud-url", "wss://127.0.0.1:%d/v1/kubeedge/connect" % cloud.ports["tunnel"],
              "--cloud-server-name", "localhost",
              "--kubelet-url", "https://127.0.0.1:%d" % kubelet.port]
    if not net.ns:
        margs += ["--admin-listen", "127.0.0.1:0"]
    edge = start_daemon(env, net, "edgestream", EDGE_BIN, margs)
    aport = edge.ports["admin"]
    if net.ns:
        check(aport == listen_port(adm), "admin port %d vs %s" % (aport, adm))
    for probe in ("livenessProbe", "readinessProbe"):
        st, body = net.get("127.0.0.1", aport, c[probe]["httpGet"]["path"])
        check(st == 200, "edgestream %s: %d %s" % (probe, st, body))
    st, body = net.get("127.0.0.1", cloud.ports["admin"], "/metrics")
    check("cloudstream_sessions 1" in body, "the tunnel did not register: %s" % body[:300])
    # kube-apiserver → cloudstream → tunnel → edgestream → the kubelet.
    out = net.run_py(APISERVER, env.pki, cloud.ports["stream"], NODE + ":10250", "/healthz")
    check(out.startswith("HTTP/1.1 200") and out.endswith("ok"), "through the chain: %s" % out)
    if monitoring_args and net.ns:  # the admin port at the manifests' own address
        # Prometheus' GET /api/v1/nodes/<node>/proxy/ports/edgestream/metrics, as kube-apiserver
        # passes it on to the node's kubelet port: /ports/edgestream/metrics.
        out = net.run_py(APISERVER, env.pki, cloud.ports["stream"], NODE + ":10250",
                         "/ports/edgestream/metrics")
        check(out.startswith("HTTP/1.1 200") and "edgestream_tunnel_connected{" in out and
              "edgestream_request_ttfb_seconds_bucket" in out,
              "edgestream's /metrics through the chain: %s" % out[:300])
        print("     edgestream /metrics through the apiserver path and the tunnel: %d bytes" %
              len(out))
    rc = env.stop(edge, pod["terminationGracePeriodSeconds"])
    check(rc == 0, "edgestream exit %s after SIGTERM" % rc)
    m.close()
    m.args = margs
    return m


def metric(net, port, name):
    _, body = net.get("127.0.0.1", port, "/metrics")
    for line in body.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise h.Fail("no metric %s" % name)


def test_wrong_node(env, net, objs, cloud, m):
    """The DaemonSet's --node-name=$(NODE_NAME) on a host whose certificate names another node:
    cloudstream refuses the tunnel (403) rather than registering the node under either name."""
    args = [a if not a.startswith("--node-name=") else "--node-name=edge-2" for a in m.args]
    before = metric(net, cloud.ports["admin"], "cloudstream_sessions_rejected_total")
    log = open(os.path.join(env.dir, "edgestream-wrong-node.log"), "wb")
    p = subprocess.Popen(net.prefix() + [EDGE_BIN] + args + ["--admin-listen", "127.0.0.1:0"],
                         stdout=log, stderr=subprocess.STDOUT, preexec_fn=h._die_with_parent)
    p.name, p.logpath = "edgestream-wrong-node", log.name
    env.procs.append(p)
    wait_for(lambda: metric(net, cloud.ports["admin"], "cloudstream_sessions_rejected_total") >
             before, "cloudstream rejects the tunnel")
    check(metric(net, cloud.ports["admin"], "cloudstream_sessions") == 0, "a session registered")
    check(p.poll() is None, "edgestream exited instead of redialling: %s" % env.tail(p))
    check(env.stop(p) == 0, "edgestream exit status after SIGTERM")
    check("403" in env.tail(p, 200), "no 403 in edgestream's log:\n%s" % env.tail(p))


# ---- systemd ----

def parse_unit(path):
    sections, cur, pending = {}, None, ""
    with open(path) as f:
        for line in f:
            line = pending + line.rstrip("\n")
            pending = ""
            if line.endswith("\\"):
                pending = line[:-1] + " "
                continue
            s = line.strip()
            if not s or s[0] in "#;":
                continue
            if s.startswith("["):
                cur = sections.setdefault(s.strip("[]"), {})
                continue
            k, _, v = s.partition("=")
            cur.setdefault(k.strip(), []).append(v.strip())
    return sections


def parse_env_file(path):
    env = {}
    with open(path) as f:
        for line in f:
            s = line.strip()
            if s and not s.startswith("#"):
                (kv,) = shlex.split(s)
                k, _, v = kv.partition("=")
                env[k] = v
    return env


def expand_exec(line, env):
    """systemd's ExecStart: $VAR splits into words, ${VAR} is one word, unset is empty."""
    out = []
    for w in shlex.split(line):
        m = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", w)
        if m:
            out += env.get(m.group(1), "").split()
            continue
        out.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda x: env.get(x.group(1), ""),
                          w))
    return out


def test_systemd(env, net, cloud, kubelet, edge_mounts):
    unit_path = os.path.join(SYSTEMD, "edgestream.service")
    u = parse_unit(unit_path)
    svc = u["Service"]

    def one(k):
        check(k in svc and len(svc[k]) == 1, "[Service] %s: %s" % (k, svc.get(k)))
        return svc[k][0]

    with open(EDGE_BIN, "rb") as f:
        binary = f.read()
    notify = b"NOTIFY_SOCKET" in binary or b"sd_notify" in binary
    check(one("Type") == ("notify" if notify else "simple"),
          "Type=%s but the binary %s sd_notify" % (one("Type"),
                                                   "has" if notify else "has no"))
    check(one("Restart") == "on-failure", "Restart")
    check(one("ExecReload") == "/bin/kill -HUP $MAINPID", "ExecReload: SIGHUP reloads certs")
    check(svc.get("KillSignal", ["SIGTERM"]) == ["SIGTERM"], "KillSignal: SIGTERM stops")
    for k, v in (("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"),
                 ("ProtectHome", "yes"), ("PrivateTmp", "yes"), ("PrivateDevices", "yes"),
                 ("CapabilityBoundingSet", ""), ("RestrictSUIDSGID", "yes"),
                 ("MemoryDenyWriteExecute", "yes"), ("ProtectKernelModules", "yes")):
        check(svc.get(k) == [v], "hardening: %s=%s expected, got %s" % (k, v, svc.get(k)))
    check(u["Install"]["WantedBy"] == ["multi-user.target"], "[Install]")
    (envfile,) = svc["EnvironmentFile"]
    check(envfile == "-/etc/default/edgestream", "EnvironmentFile %s" % envfile)
    uenv = parse_env_file(os.path.join(SYSTEMD, "edgestream.env"))
    argv = expand_exec(one("ExecStart"), uenv)
    check(argv[0] == "/usr/local/bin/edgestream", "ExecStart binary %s" % argv[0])
    check(argv[1:3] == ["--config", "/etc/edgestream/edgestream.yaml"], "ExecStart %s" % argv)
    # Without the EnvironmentFile, the unit still starts (it is optional: "-").
    check(expand_exec(one("ExecStart"), {})[1:] == argv[1:3], "ExecStart without the env file")
    # The example config as /etc/edgestream/edgestream.yaml; its certificate paths are those
    # the edge host holds (the same /etc/edgestream/pki as the DaemonSet's hostPath).
    with open(os.path.join(SYSTEMD, "edgestream.yaml")) as f:
        text = f.read()
    example = load_config(text)
    check(example.get("kind") == "EdgeStreamConfig", "the example config has no kind")
    root = edge_mounts.root
    os.makedirs(root + "/etc/edgestream", exist_ok=True)
    with open(root + "/etc/edgestream/edgestream.yaml", "w") as f:
        f.write(dump_config(text, edge_mounts.remap_json(example)))
    args = [edge_mounts.local(a) if a == "/etc/edgestream/edgestream.yaml" else a
            for a in argv[1:]]
    if not args[1].startswith(root):
        args[1] = root + args[1]
    eff = print_config(EDGE_BIN, args)
    for k, v in eff.items():
        if isinstance(v, str) and v.startswith("/") and k != "cri-socket":
            check(os.path.exists(v), "systemd example: --%s %s does not exist on an edge host "
                  "set up as deploy/README.md says" % (k, v[len(root):] if v.startswith(root)
                                                       else v))
    # Run it as systemd would, then reload and stop it as systemctl would.
    args += ["--cloud-url", "wss://127.0.0.1:%d/v1/kubeedge/connect" % cloud.ports["tunnel"],
             "--cloud-server-name", "localhost",
             "--kubelet-url", "https://127.0.0.1:%d" % kubelet.port]
    if not net.ns:
        args += ["--admin-listen", "127.0.0.1:0"]
    p = start_daemon(env, net, "edgestream-systemd", EDGE_BIN, args)
    aport = p.ports["admin"]
    st, _ = net.get("127.0.0.1", aport, "/readyz")
    check(st == 200, "systemd edgestream /readyz %d" % st)
    p.send_signal(signal.SIGHUP)
    wait_for(lambda: "SIGHUP" in env.tail(p, 50), "SIGHUP logged")
    check(p.poll() is None, "edgestream died on SIGHUP")
    st, _ = net.get("127.0.0.1", aport, "/readyz")
    check(st == 200, "after SIGHUP /readyz %d" % st)
    t0 = time.monotonic()
    rc = env.stop(p, float(re.sub(r"s$", "", one("TimeoutStopSec"))))
    check(rc == 0, "edgestream exit %s after SIGTERM (systemd counts it a failure)" % rc)
    check(time.monotonic() - t0 < 5, "SIGTERM took %.1f s" % (time.monotonic() - t0))
    # systemd's own reading of the unit, with ExecStart pointing at the built binary.
    sa = shutil.which("systemd-analyze")
    if sa is None:
        print("note: systemd-analyze not installed; unit not verified by systemd", flush=True)
        return
    tmp = os.path.join(env.dir, "systemd")
    os.makedirs(tmp, exist_ok=True)
    with open(unit_path) as f:
        text = f.read().replace("/usr/local/bin/edgestream", os.path.abspath(EDGE_BIN))
    with open(os.path.join(tmp, "edgestream.service"), "w") as f:
        f.write(text)
    r = subprocess.run([sa, "verify", os.path.join(tmp, "edgestream.service")],
                       capture_output=True, text=True, timeout=60)
    mine = [ln for ln in (r.stdout + r.stderr).splitlines() if "edgestream" in ln]
    check(r.returncode == 0 and not mine, "systemd-analyze verify: rc %d\n%s" % (
        r.returncode, r.stdout + r.stderr))
    # Its exposure score, offline (systemd 252 has --offline).
    r = subprocess.run([sa, "security", "--offline=true", os.path.join(tmp, "edgestream.service")],
                       capture_output=True, text=True, timeout=60)
    m = re.search(r"Overall exposure level for edgestream.service: ([\d.]+)", r.stdout)
    if m is None:
        print("note: systemd-analyze security --offline unsupported here", flush=True)
        return
    check(float(m.group(1)) <= 2.5, "exposure %s (was 1.9):\n%s" % (m.group(1), r.stdout))


def main():
    kust, objs = load_manifests()
    env = h.Env("deploy", nodes=(NODE,))
    net = None
    failed = True
    step = h.Steps("deploy")

    try:
        net = Net()
        where = ("daemons in network namespace %s, on the manifests' own addresses" % net.ns
                 if net.ns else "no network namespace: daemons on 127.0.0.1:0")
        print("note: " + where, flush=True)
        step("objects", test_objects, objs, kust)
        step("config_rollout", test_config_rollout, objs, env.dir)
        step("rollout_strategy", test_rollout_strategy, objs)
        step("pod_security", test_pod_security, objs)
        step("admin_closed", test_admin_closed, objs)
        step("components", test_components, objs, env.dir)
        mon = overlay(env.dir, "monitoring")
        monitoring_args = [a for a in ds_args(mon) if a not in ds_args(objs)]
        step("rbac", test_rbac, objs)
        step("security", test_security, objs)
        kubelet = step("kubelet_stand_in", h.start_kubelet, env, "kubelet", net.prefix())
        cloud = step("cloudstream", test_cloudstream, env, net, objs)
        edge_mounts = None
        if cloud and kubelet:
            edge_mounts = step("edgestream", test_edgestream, env, net, objs, cloud, kubelet,
                               monitoring_args)
        if edge_mounts:
            step("edgestream_wrong_node", test_wrong_node, env, net, objs, cloud, edge_mounts)
            step("systemd", test_systemd, env, net, cloud, kubelet, edge_mounts)
        if cloud:
            def stop_cloud():
                rc = env.stop(cloud, 45)
                check(rc == 0, "cloudstream exit %s after SIGTERM" % rc)
            step("cloudstream_sigterm", stop_cloud)
        want = ["objects", "config_rollout", "rollout_strategy", "pod_security", "admin_closed",
                "components", "rbac", "security", "kubelet_stand_in", "cloudstream", "edgestream",
                "edgestream_wrong_node", "systemd", "cloudstream_sigterm"]
        failed = step.passed != want
        return 1 if failed else 0
    finally:
        h.close_env(env, failed)
        if net:
            net.close()


if __name__ == "__main__":
    sys.exit(main())
