#!/usr/bin/python3
"""The metrics-server and Prometheus recipes of deploy/monitoring, checked three ways:

  - shape: the RBAC objects parse and grant exactly what the README says (metrics-server: get
    nodes/metrics, get/list/watch pods and nodes; Prometheus: list/watch nodes, get nodes/proxy
    and nodes/metrics), bound to the right service accounts; metrics-server's Deployment patch
    runs it on control-plane nodes with --kubelet-use-node-status-port, InternalIP and the
    kubelet-serving CA mounted where the flag says;
  - Prometheus' own check: `promtool check config` of prometheus.yml. Debian's promtool is built
    without Kubernetes service discovery, so the test checks a copy where each
    kubernetes_sd_configs block is replaced by a file_sd_configs one, and the pod's token and CA
    paths by files of the test's (promtool checks they exist); everything else is the recipe's. The relabel rules are then applied (Prometheus' replace/keep
    semantics) to a discovered edge node to get each job's scrape URL;
  - live: each URL's kubelet-side path is requested at cloudstream's stream port (with
    --authorization-mode Webhook and token authentication) with the token of a user that has
    exactly the recipe's ClusterRole in the stand-in's RBAC (peers/kube_reviews.py), as
    kube-apiserver's node proxy would forward it (or as Prometheus does directly): every scrape
    answers 200 (the exporter job through edgestream's /ports/node-exporter to a local HTTP
    server), and with metrics-server's role /metrics/resource answers 200 but /logs/ 403.
"""
import copy
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))
sys.path.insert(0, os.path.join(HERE, "peers"))
import harness as h  # noqa: E402
import standin  # noqa: E402
from harness import check  # noqa: E402
from kube_reviews import KubeReviews  # noqa: E402

MON = os.path.join(h.SRC, "deploy", "monitoring")
MS_USER = "system:serviceaccount:kube-system:metrics-server"
PROM_USER = "system:serviceaccount:monitoring:prometheus"


def load(name):
    with open(os.path.join(MON, name)) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def find(objs, kind, name):
    for o in objs:
        if o["kind"] == kind and o["metadata"]["name"] == name:
            return o
    raise h.Fail("no %s %s" % (kind, name))


def rules_of(role):
    """RBAC rules → the stand-in's rules for @user (resource or resource/subresource)."""
    out = []
    for r in role["rules"]:
        check(r["apiGroups"] == [""], "core group only: %r" % r)
        out.append((sorted(r["verbs"]), sorted(r["resources"])))
    return out


def test_shapes():
    ms = load("metrics-server-rbac.yaml")
    role = find(ms, "ClusterRole", "system:metrics-server")
    check(rules_of(role) == [(["get"], ["nodes/metrics"]),
                             (["get", "list", "watch"], ["nodes", "pods"])],
          "metrics-server rules %r" % role["rules"])
    b = find(ms, "ClusterRoleBinding", "system:metrics-server")
    check(b["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                           "name": "system:metrics-server"} and
          b["subjects"] == [{"kind": "ServiceAccount", "name": "metrics-server",
                             "namespace": "kube-system"}], "metrics-server binding %r" % b)
    pr = load("prometheus-rbac.yaml")
    role = find(pr, "ClusterRole", "prometheus-edge-nodes")
    check(rules_of(role) == [(["list", "watch"], ["nodes"]),
                             (["get"], ["nodes/metrics", "nodes/proxy"])],
          "prometheus rules %r" % role["rules"])
    b = find(pr, "ClusterRoleBinding", "prometheus-edge-nodes")
    check(b["subjects"] == [{"kind": "ServiceAccount", "name": "prometheus",
                             "namespace": "monitoring"}] and
          b["roleRef"]["name"] == "prometheus-edge-nodes", "prometheus binding %r" % b)
    find(pr, "ServiceAccount", "prometheus")
    (patch,) = load("metrics-server-patch.yaml")
    spec = patch["spec"]["template"]["spec"]
    check(spec["nodeSelector"] == {"node-role.kubernetes.io/control-plane": ""},
          "metrics-server must run where the DNAT is")
    (c,) = spec["containers"]
    args = c["args"]
    check("--kubelet-use-node-status-port" in args and
          "--kubelet-preferred-address-types=InternalIP" in args and
          "--kubelet-insecure-tls" not in args, "args %r" % args)
    ca = [a.split("=", 1)[1] for a in args if a.startswith("--kubelet-certificate-authority=")]
    check(len(ca) == 1 and any(ca[0].startswith(m["mountPath"] + "/")
                               for m in c["volumeMounts"]), "CA %r not mounted" % ca)


def file_sd_copy(tmp):
    """prometheus.yml with kubernetes_sd_configs → file_sd_configs (Debian's promtool has no
    Kubernetes SD); the node and pod metadata labels become the targets' labels."""
    with open(os.path.join(MON, "prometheus.yml")) as f:
        cfg = yaml.safe_load(f)
    targets = os.path.join(tmp, "targets.json")
    with open(targets, "w") as f:
        json.dump([{"targets": ["10.232.0.5:10350"],
                    "labels": {"__meta_kubernetes_node_name": "edge-1"}}], f)
    out = copy.deepcopy(cfg)
    # promtool stats the token and CA files: the pod's paths become files of this run's.
    files = {}

    def local(path):
        if path not in files:
            files[path] = os.path.join(tmp, "f%d-%s" % (len(files), os.path.basename(path)))
            with open(files[path], "w") as f:
                f.write("x\n")
        return files[path]
    for job in out["scrape_configs"]:
        if "kubernetes_sd_configs" in job:
            del job["kubernetes_sd_configs"]
            job["file_sd_configs"] = [{"files": [targets]}]
        if "authorization" in job:
            job["authorization"]["credentials_file"] = local(
                job["authorization"]["credentials_file"])
        if "tls_config" in job:
            job["tls_config"]["ca_file"] = local(job["tls_config"]["ca_file"])
    p = os.path.join(tmp, "prometheus-file-sd.yml")
    with open(p, "w") as f:
        yaml.safe_dump(out, f)
    return cfg, p


def relabel(labels, rules):
    """Prometheus' replace (default) and keep, with ${1} and anchored regexes."""
    labels = dict(labels)
    for r in rules:
        src = ";".join(labels.get(s, "") for s in r.get("source_labels", []))
        rx = re.compile("^(?:%s)$" % r.get("regex", "(.*)"))
        m = rx.match(src)
        action = r.get("action", "replace")
        if action == "keep":
            if not m:
                return None
            continue
        check(action == "replace", "action %s not modelled" % action)
        if m:
            val = re.sub(r"\$\{(\d+)\}", lambda g: m.group(int(g.group(1))) or "",
                         r.get("replacement", "${1}"))
            labels[r["target_label"]] = val
    return labels


def scrape_urls(cfg):
    """job → (scheme, address, path) for the discovered edge node edge-1 at 10.232.0.5:10350."""
    out = {}
    for job in cfg["scrape_configs"]:
        sd = (job.get("kubernetes_sd_configs") or [{}])[0]
        if sd.get("role") != "node":
            continue
        check(sd.get("selectors") == [{"role": "node", "label": "node-role.kubernetes.io/edge"}],
              "%s: edge nodes only" % job["job_name"])
        lab = relabel({"__address__": "10.232.0.5:10350",
                       "__metrics_path__": job.get("metrics_path", "/metrics"),
                       "__meta_kubernetes_node_name": "edge-1"}, job.get("relabel_configs", []))
        out[job["job_name"]] = (job.get("scheme", "http"), lab["__address__"],
                                lab["__metrics_path__"])
    return out


class Exporter(http.server.BaseHTTPRequestHandler):
    """node_exporter on the edge's loopback."""

    def do_GET(self):
        body = b"# TYPE node_up gauge\nnode_up 1\n"
        self.send_response(200 if self.path == "/metrics" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def main():
    results = []

    def step(name, fn, *a):
        try:
            r = fn(*a)
            results.append(True)
            print("ok   monitoring.%s%s" % (name, r or ""), flush=True)
            return r
        except Exception as e:  # noqa: BLE001
            results.append(False)
            print("FAIL monitoring.%s: %s: %s" % (name, type(e).__name__, e), flush=True)
            return None

    step("rbac_and_patch_shapes", test_shapes)
    tmp = tempfile.mkdtemp(prefix="mon.", dir=os.environ.get("ST_TEST_TMPDIR", "/tmp"))
    cfg, copy_path = file_sd_copy(tmp)

    def promtool_config():
        if subprocess.run(["sh", "-c", "command -v promtool"], capture_output=True).returncode:
            if os.environ.get("CI"):
                raise h.Fail("promtool is missing (Debian package prometheus)")
            return " (skipped: no promtool)"
        r = subprocess.run(["promtool", "check", "config", copy_path], capture_output=True,
                           text=True, timeout=60)
        check(r.returncode == 0, "promtool: %s%s" % (r.stdout, r.stderr))
        return ": %d scrape jobs" % len(cfg["scrape_configs"])

    step("promtool_check_config", promtool_config)
    urls = {}

    def relabelled():
        urls.update(scrape_urls(cfg))
        want = {
            "edge-kubelet-via-apiserver": ("https", "kubernetes.default.svc:443",
                                           "/api/v1/nodes/edge-1/proxy/metrics"),
            "edge-cadvisor-via-apiserver": ("https", "kubernetes.default.svc:443",
                                            "/api/v1/nodes/edge-1/proxy/metrics/cadvisor"),
            "edge-kubelet-direct": ("https", "10.232.0.5:10350", "/metrics"),
            "edge-node-exporter": ("https", "kubernetes.default.svc:443",
                                   "/api/v1/nodes/edge-1/proxy/ports/node-exporter/metrics"),
        }
        check(urls == want, "scrape URLs %r" % urls)

    step("relabelled_scrape_urls", relabelled)

    # ---- live, through cloudstream with Webhook authorization ---------------------------
    env = h.Env("monitoring", nodes=("edge-1",))
    failed = True
    exporter = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Exporter)
    threading.Thread(target=exporter.serve_forever, daemon=True).start()
    kube = None
    try:
        ms_role = find(load("metrics-server-rbac.yaml"), "ClusterRole", "system:metrics-server")
        pr_role = find(load("prometheus-rbac.yaml"), "ClusterRole", "prometheus-edge-nodes")
        rules = []
        for user, role in ((MS_USER, ms_role), (PROM_USER, pr_role)):
            for r in role["rules"]:
                rules.append({"user": user, "verbs": r["verbs"], "resources": r["resources"]})
        tokens = {"ms-token": {"username": MS_USER, "groups": ["system:serviceaccounts"]},
                  "prom-token": {"username": PROM_USER, "groups": ["system:serviceaccounts"]}}
        token_file = standin.write_token(env, "cs-token")
        kube = KubeReviews(env.path("kubelet.crt"), env.path("kubelet.key"), "cs-token",
                           tokens, rules)
        kubelet = h.start_kubelet(env)
        cloud = h.start_cloudstream(env, [
            "--authorization-mode", "Webhook", "--authentication-token-webhook"] +
            standin.apiserver_flags(env, kube.url, token_file))
        h.start_edgestream(env, cloud, kubelet, extra=[
            "--local-port", "node-exporter=%d" % exporter.server_address[1]])
        api = h.Api(env, cloud.ports["stream"], cert=None)

        def get(token, path):
            st, _, body, s = api.request("GET", path, [("Host", "edge-1:10350"),
                                                       ("Authorization", "Bearer " + token)])
            s.close()
            return st, body

        def kubelet_path(url_path):
            # kube-apiserver's node proxy forwards what follows /proxy (pkg/registry/core/node/
            # rest/proxy.go); a direct scrape sends the path as it is.
            m = re.match(r"^/api/v1/nodes/[^/]+/proxy(/.*)$", url_path)
            return m.group(1) if m else url_path

        def prometheus_jobs():
            seen = []
            for job, (_, _, path) in sorted(urls.items()):
                st, body = get("prom-token", kubelet_path(path))
                check(st == 200, "%s: %s -> %d %r" % (job, kubelet_path(path), st, body[:200]))
                seen.append("%s %s" % (job, kubelet_path(path)))
            st, body = get("prom-token", "/ports/node-exporter/metrics")
            check(b"node_up 1" in body, "exporter body %r" % body[:200])
            return ": 200 for " + ", ".join(seen)

        def metrics_server_role():
            st, body = get("ms-token", "/metrics/resource")
            check(st == 200, "/metrics/resource %d %r" % (st, body[:200]))
            st, body = get("ms-token", "/logs/")
            check(st == 403, "/logs/ with metrics-server's role: %d %r" % (st, body[:200]))
            st, body = get("ms-token", "/ports/node-exporter/metrics")
            check(st == 403, "exporter with metrics-server's role: %d" % st)
            return ": /metrics/resource 200, /logs/ 403, /ports/ 403"

        step("prometheus_scrapes_through_cloudstream", prometheus_jobs)
        step("metrics_server_token", metrics_server_role)
        failed = not all(results)
        return 1 if failed else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        exporter.shutdown()
        if kube:
            kube.close()
        h.close_env(env, failed)


if __name__ == "__main__":
    sys.exit(main())
