#!/usr/bin/python3
"""cloudstream's stream port authenticates and authorizes as a kubelet does: client certificates
and bearer tokens (TokenReview), a SubjectAccessReview per request with the kubelet's
attributes, decisions cached for their TTLs, refusals as 401/403 with a Status body; and the
secure default at start-up. The apiserver is peers/kube_reviews.py (kube-apiserver's review
APIs, faithful shapes), the edges are KubeEdge-protocol test edges in front of the kubelet
stand-in.

    cloudstream_authz_test.py [TEST...]
"""
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
import harness as h  # noqa: E402
import standin  # noqa: E402
from harness import UPGRADE_SPDY, check  # noqa: E402
from kube_reviews import KubeReviews  # noqa: E402

TTL_S = 4  # every cache TTL of the Webhook cloudstream

METRICS_USER = "system:serviceaccount:kube-system:metrics-server"
PROM_USER = "system:serviceaccount:monitoring:prometheus"
TOKENS = {
    "metrics-token": {"username": METRICS_USER, "uid": "u-1",
                      "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system"]},
    "prom-token": {"username": PROM_USER, "uid": "u-2",
                   "groups": ["system:serviceaccounts"],
                   "extra": {"authentication.kubernetes.io/pod-name": ["prom-0"]}},
    "cache-token": {"username": "cache-user"},
    "admin-token": {"username": "admin", "groups": ["system:masters"]},
}
RULES = [
    {"user": METRICS_USER, "verbs": ["get"], "resources": ["nodes/metrics", "nodes/stats"]},
    {"user": PROM_USER, "verbs": ["get"], "resources": ["nodes/proxy"]},
    {"user": "cache-user", "verbs": ["get"], "resources": ["nodes/metrics"]},
]


def status_body(body):
    try:
        return json.loads(body)
    except ValueError:
        raise h.Fail("not a Status body: %r" % body[:200])


def check_status(st, body, code, reason, message=None, contains=None):
    check(st == code, "status %d, want %d: %r" % (st, code, body[:300]))
    s = status_body(body)
    check(s.get("kind") == "Status" and s.get("apiVersion") == "v1" and s.get("code") == code and
          s.get("reason") == reason and s.get("status") == "Failure", "Status %r" % s)
    if message is not None:
        check(s.get("message") == message, "message %r, want %r" % (s.get("message"), message))
    if contains is not None:
        check(contains in s.get("message", ""), "message %r lacks %r" % (s.get("message"),
                                                                       contains))
    return s


APISERVER = "apiserver-kubelet-client"  # CN=kube-apiserver-kubelet-client, O=system:masters
NONE = "none"  # no client certificate


class Setup:
    def __init__(self):
        self.env = env = h.Env("cs-authz", nodes=("edge-1", "edge-2"))
        try:
            # A node's client certificate from the stream CA (the cluster CA signs these), and a
            # client whose subject is in no list.
            env.mint("client", "--ca", env.path("stream-ca"), "--out",
                     env.path("stream-node-edge-1"), "--node", "edge-1")
            env.mint("client", "--ca", env.path("stream-ca"), "--out", env.path("someone"),
                     "--cn", "someone-else")
            self.caller_token = "cloudstream-sa-token"
            self.token_file = standin.write_token(env, self.caller_token)
            self.kube = KubeReviews(env.path("kubelet.crt"), env.path("kubelet.key"),
                                    self.caller_token, TOKENS, RULES,
                                    {("default", "web"): "edge-1"})
            self.kubelet = h.start_kubelet(env)
            self.cloud = h.start_cloudstream(env, self.webhook_flags() + [
                "--authorization-webhook-cache-authorized-ttl", "%ds" % TTL_S,
                "--authorization-webhook-cache-unauthorized-ttl", "%ds" % TTL_S,
                "--authentication-token-webhook-cache-ttl", "%ds" % TTL_S])
            self.edges = [h.start_kubeedge_edge(env, self.cloud, self.kubelet, node=n)
                          for n in ("edge-1", "edge-2")]
        except Exception:
            env.close(keep=True)
            raise

    def webhook_flags(self):
        return (["--authorization-mode", "Webhook", "--authentication-token-webhook"] +
                standin.apiserver_flags(self.env, self.kube.url, self.token_file))

    def api(self, port, token, cert):
        """A client with @cert; by default the apiserver's, or none when a token is used."""
        cert = cert or (NONE if token else APISERVER)
        return h.Api(self.env, port or self.cloud.ports["stream"],
                     cert=None if cert == NONE else cert)

    def request(self, method, target, node="edge-1", token=None, cert=None, headers=(),
                port=None):
        api = self.api(port, token, cert)
        hdrs = [("Host", "%s:10350" % node)] + list(headers)
        if token:
            hdrs.append(("Authorization", "Bearer " + token))
        st, rh, body, s = api.request(method, target, hdrs)
        s.close()
        return st, body

    def exec_(self, token=None, cert=None, node="edge-1", port=None):
        api = self.api(port, token, cert)
        s = api.connect()
        hdrs = [("Host", "%s:10350" % node)] + UPGRADE_SPDY
        if token:
            hdrs.append(("Authorization", "Bearer " + token))
        s.sendall(h.head("POST", "/exec/default/pod-a/ctr?command=greet&output=1", hdrs))
        st, rh, rest = h.read_head(s)
        body = b"" if st == 101 else h.read_body(s, rh, rest)
        s.close()
        return st, body


def main():
    t = Setup()
    env, kube = t.env, t.kube
    failed = True
    others = {"sar": 0}  # SARs the stand-in got from the other cloudstream instances
    try:
        def no_credential_401():
            st, body = t.request("GET", "/metrics", cert=NONE)
            check_status(st, body, 401, "Unauthorized", "Unauthorized")
            n = kube.count("TokenReview", "nope")
            st, body = t.request("GET", "/metrics", token="nope")
            check_status(st, body, 401, "Unauthorized", "Unauthorized")
            check(kube.count("TokenReview", "nope") == n + 1, "no TokenReview for the token")
            st, body = t.request("GET", "/metrics", cert=NONE,
                                 headers=[("Authorization", "Basic eDp5")])
            check_status(st, body, 401, "Unauthorized", "Unauthorized")

        def metrics_token_reads_metrics():
            for path in ("/metrics", "/metrics/cadvisor", "/stats/summary"):
                st, body = t.request("GET", path, token="metrics-token")
                check(st == 200 and body, "%s: %d %r" % (path, st, body[:200]))
            # Every call cloudstream made says who it is (kube-apiserver's audit log).
            with kube.lock:
                agents = set(kube.user_agents)
            check(agents and all(a.startswith("cloudstream/") for a in agents),
                  "User-Agent of the apiserver calls: %r" % agents)

        def metrics_token_cannot_exec():
            st, body = t.exec_(token="metrics-token")
            check_status(st, body, 403, "Forbidden",
                         "Forbidden (user=%s, verb=create, resource=nodes, "
                         "subresource(s)=[proxy])" % METRICS_USER)
            # Through the node proxy: a Status; to kube-apiserver's pods/log client (no
            # X-Forwarded-Uri) the message alone, as text, as the kubelet writes it.
            want = ("Forbidden (user=%s, verb=get, resource=nodes, subresource(s)=[proxy])"
                    % METRICS_USER)
            st, body = t.request("GET", "/containerLogs/default/pod-a/ctr", token="metrics-token",
                                 headers=[("X-Forwarded-Uri", "/api/v1/nodes/edge-1/proxy/"
                                           "containerLogs/default/pod-a/ctr")])
            check_status(st, body, 403, "Forbidden", want)
            st, body = t.request("GET", "/containerLogs/default/pod-a/ctr", token="metrics-token")
            check(st == 403 and body.decode().strip() == want, "pods/log: %d %r" % (st, body))

        def proxy_token_as_the_kubelet_maps_it():
            # nodes/proxy get: logs, and /pods through its fallback from pods to proxy; the
            # kubelet maps /metrics to nodes/metrics, which this token does not have.
            st, body = t.request("GET", "/containerLogs/default/pod-a/ctr?tailLines=2",
                                 token="prom-token")
            check(st == 200 and body == b"line 1\nline 2\n", "logs: %d %r" % (st, body))
            st, body = t.request("GET", "/pods", token="prom-token")
            check(st == 200, "/pods: %d %r" % (st, body))
            sars = [json.loads(k) for kind, k in kube.reviews()
                    if kind == "SubjectAccessReview" and PROM_USER in k]
            subs = [s["resourceAttributes"]["subresource"] for s in sars]
            check("pods" in subs and "proxy" in subs, "SARs for /pods: %r" % subs)
            # the user's uid and extra reach the SAR as the TokenReview gave them
            check(sars[0].get("uid") == "u-2" and sars[0].get("extra") ==
                  {"authentication.kubernetes.io/pod-name": ["prom-0"]} and
                  "system:authenticated" in sars[0]["groups"], "SAR spec %r" % sars[0])
            check(sars[0]["resourceAttributes"] == {"verb": "get", "version": "v1",
                                                    "resource": "nodes",
                                                    "subresource": "proxy", "name": "edge-1"},
                  "attributes %r" % sars[0]["resourceAttributes"])
            st, body = t.request("GET", "/metrics", token="prom-token")
            check_status(st, body, 403, "Forbidden", contains="subresource(s)=[metrics]")

        def apiserver_cert_system_masters():
            st, _ = t.exec_()  # apiserver-kubelet-client: O=system:masters
            check(st == 101, "exec with the apiserver's certificate: %d" % st)
            st, body = t.exec_(token="admin-token")
            check(st == 101, "exec with a system:masters token: %d %r" % (st, body))

        def node_cert_cannot_exec_other_node():
            cert = "stream-node-edge-1"
            st, body = t.exec_(cert=cert, node="edge-2")
            check_status(st, body, 403, "Forbidden",
                         "Forbidden (user=system:node:edge-1, verb=create, resource=nodes, "
                         "subresource(s)=[proxy])")
            sar = [json.loads(k) for kind, k in kube.reviews()
                   if kind == "SubjectAccessReview" and "system:node:edge-1" in k][-1]
            check(sar["user"] == "system:node:edge-1" and sar["groups"] ==
                  ["system:nodes", "system:authenticated"] and
                  sar["resourceAttributes"]["name"] == "edge-2", "SAR %r" % sar)

        def token_not_forwarded():
            st, body = t.request("GET", "/headers", token="admin-token")
            check(st == 200, "/headers: %d %r" % (st, body))
            hdrs = json.loads(body)
            check("authorization" not in hdrs, "the token reached the kubelet: %r" % hdrs)

        def one_review_per_identity_and_attributes():
            tr0 = kube.count("TokenReview", "cache-token")
            sar0 = kube.count("SubjectAccessReview", "cache-user")
            check(tr0 == 0 and sar0 == 0, "cache-token used before: %d %d" % (tr0, sar0))
            results = []

            def one():
                results.append(t.request("GET", "/metrics", token="cache-token")[0])
            threads = [threading.Thread(target=one) for _ in range(8)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            for _ in range(5):
                one()
            check(results == [200] * 13, "statuses %r" % results)
            check(kube.count("TokenReview", "cache-token") == 1,
                  "%d TokenReviews for one token" % kube.count("TokenReview", "cache-token"))
            check(kube.count("SubjectAccessReview", "cache-user") == 1,
                  "%d SARs" % kube.count("SubjectAccessReview", "cache-user"))
            for _ in range(3):  # a denial is cached too
                st, body = t.exec_(token="cache-token")
                check(st == 403, "exec: %d" % st)
            check(kube.count("SubjectAccessReview", "cache-user") == 2,
                  "%d SARs after 3 denied execs" % kube.count("SubjectAccessReview",
                                                              "cache-user"))
            print("     13 requests (8 at once) + 3 denied: 1 TokenReview, 2 SARs; waiting for "
                  "the TTL (%d s)" % TTL_S, flush=True)
            time.sleep(TTL_S + 0.5)
            st, _ = t.request("GET", "/metrics", token="cache-token")
            check(st == 200, "after the TTL: %d" % st)
            check(kube.count("TokenReview", "cache-token") == 2 and
                  kube.count("SubjectAccessReview", "cache-user") == 3,
                  "after the TTL: %d TokenReviews, %d SARs" % (
                      kube.count("TokenReview", "cache-token"),
                      kube.count("SubjectAccessReview", "cache-user")))

        def refuses_start_without_authorization():
            base = [os.path.join(h.BIN, "cloudstream", "cloudstream"),
                    "--tunnel-listen", "127.0.0.1:0", "--stream-listen", "127.0.0.1:0",
                    "--admin-listen", "", *h.cloudstream_pki_flags(env)]
            for extra, words in (
                    ([], ["--stream-allowed-subjects", "--authorization-mode Webhook"]),
                    (["--authentication-token-webhook", "--stream-allowed-subjects", "x"],
                     ["--authentication-token-webhook needs --authorization-mode Webhook"]),
                    (["--authorization-mode", "Webhook"], ["need --apiserver-url"])):
                p = subprocess.run(base + extra, capture_output=True, timeout=20)
                err = p.stderr.decode()
                check(p.returncode == 2, "%r: exit %d" % (extra, p.returncode))
                for w in words:
                    check(w in err, "%r: %r not in %r" % (extra, w, err))
            print("     %s" % err.strip().splitlines()[-1], flush=True)

        def refused_subject_403():
            # The subject-list mode (harness default: kube-apiserver-kubelet-client).
            cloud = h.start_cloudstream(env, name="cloud-subjects")
            port = cloud.ports["stream"]
            st, body = t.request("GET", "/metrics", cert="someone", port=port)
            check_status(st, body, 403, "Forbidden",
                         "Forbidden (user=someone-else): the client certificate's subject is "
                         "not in --stream-allowed-subjects")
            st, body = t.exec_(cert="someone", port=port)
            check_status(st, body, 403, "Forbidden")
            st, body = t.request("GET", "/healthz", port=port)
            check(st == 503, "a listed client: %d %r" % (st, body))  # no edge on this one
            check(env.stop(cloud) == 0, "cloud-subjects exit")

        def node_ca_warned_and_refused():
            # The stream port trusting the edges' CA: a warning at start, and the edges'
            # own certificates are refused what the SAR does not allow.
            cloud = h.start_cloudstream(env, t.webhook_flags() + [
                "--stream-client-ca", env.path("tunnel-ca.crt")], name="cloud-nodeca")
            with open(cloud.logpath) as f:
                log = f.read()
            check("--stream-client-ca is the edge nodes' CA" in log, "no warning: %s" % log)
            edge = h.start_kubeedge_edge(env, cloud, t.kubelet, node="edge-2",
                                         name="edge-2-nodeca")
            api = h.Api(env, cloud.ports["stream"], cert="node-edge-1")
            s = api.connect()
            s.sendall(h.head("POST", "/exec/default/far/ctr?command=greet",
                             [("Host", "edge-2:10350")] + UPGRADE_SPDY))
            st, rh, rest = h.read_head(s)
            body = h.read_body(s, rh, rest)
            s.close()
            check_status(st, body, 403, "Forbidden", contains="user=system:node:edge-1")
            others["sar"] += 1  # that one SAR was this instance's
            env.stop(edge)
            check(env.stop(cloud) == 0, "cloud-nodeca exit")

        def metrics_match_the_stand_in():
            # cloudstream's counters agree with what the apiserver saw (this cloudstream only:
            # the other instances of this run are stopped, their calls are subtracted).
            s = h.socket.create_connection(("127.0.0.1", t.cloud.ports["admin"]), timeout=5)
            s.sendall(h.head("GET", "/metrics", [("Host", "x")]))
            st, rh, rest = h.read_head(s)
            text = h.read_body(s, rh, rest).decode()
            s.close()
            got = {}
            for line in text.splitlines():
                if line.startswith("cloudstream_authz_"):
                    k, v = line.rsplit(" ", 1)
                    got[k] = float(v)
            tr = got['cloudstream_authz_reviews_total{kind="token_review"}']
            sar = got['cloudstream_authz_reviews_total{kind="subject_access_review"}']
            check(tr == kube.count("TokenReview") and
                  sar == kube.count("SubjectAccessReview") - others["sar"],
                  "metrics %r, the stand-in saw %d TokenReviews, %d SARs (%d from others)" % (
                      got, kube.count("TokenReview"), kube.count("SubjectAccessReview"),
                      others["sar"]))
            check(got["cloudstream_authz_cache_hits_total"] > 0 and
                  got["cloudstream_authz_review_errors_total"] == 0, "metrics %r" % got)
            print("     %d TokenReviews, %d SARs, %d answers from the cache" % (
                tr, sar, got["cloudstream_authz_cache_hits_total"]), flush=True)

        def stand_in_shapes():
            ctx = ssl.create_default_context(cafile=env.path("kubelet-ca.crt"))
            ctx.check_hostname = False

            def post(path, obj, token=t.caller_token):
                req = urllib.request.Request(kube.url + path, json.dumps(obj).encode(),
                                             {"Content-Type": "application/json",
                                              "Authorization": "Bearer " + token})
                try:
                    with urllib.request.urlopen(req, context=ctx) as r:
                        return r.status, json.loads(r.read())
                except urllib.error.HTTPError as e:
                    return e.code, json.loads(e.read())
            tr = "/apis/authentication.k8s.io/v1/tokenreviews"
            st, o = post(tr, {"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1",
                              "spec": {"token": "unknown"}})
            check(st == 201 and o["status"] == {"user": {}}, "unknown token: %d %r" % (st, o))
            st, o = post(tr, {"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1",
                              "spec": {}})
            check(st == 400 and o["reason"] == "BadRequest", "empty token: %d %r" % (st, o))
            st, o = post(tr, {"spec": {"token": "x"}}, token="wrong")
            check(st == 401 and o["reason"] == "Unauthorized", "caller: %d %r" % (st, o))
            st, o = post("/apis/authorization.k8s.io/v1/subjectaccessreviews",
                         {"kind": "SubjectAccessReview",
                          "apiVersion": "authorization.k8s.io/v1",
                          "spec": {"user": "x"}})
            check(st == 422 and o["reason"] == "Invalid", "no attributes: %d %r" % (st, o))

            # Events, as kube-apiserver takes them on core/v1
            def call(method, path, obj, ctype="application/json"):
                req = urllib.request.Request(kube.url + path, json.dumps(obj).encode(),
                                             {"Content-Type": ctype,
                                              "Authorization": "Bearer " + t.caller_token},
                                             method=method)
                try:
                    with urllib.request.urlopen(req, context=ctx) as r:
                        return r.status, json.loads(r.read())
                except urllib.error.HTTPError as e:
                    return e.code, json.loads(e.read())
            evs = "/api/v1/namespaces/default/events"
            ev = {"metadata": {"name": "shape.1"}, "involvedObject": {"kind": "Node",
                                                                      "name": "n"},
                  "reason": "R", "message": "m", "count": 1, "type": "Warning"}
            st, o = call("POST", evs, ev)
            check(st == 201 and o["metadata"]["namespace"] == "default" and
                  o["metadata"]["resourceVersion"], "create: %d %r" % (st, o))
            st, o = call("POST", evs, ev)
            check(st == 409 and o["reason"] == "AlreadyExists", "again: %d %r" % (st, o))
            st, o = call("POST", "/api/v1/namespaces/kube-system/events",
                         dict(ev, metadata={"name": "shape.2"}))
            check(st == 422 and o["reason"] == "Invalid" and
                  "does not match event.namespace" in o["message"],
                  "a Node's event outside default: %d %r" % (st, o))
            st, o = call("POST", evs, dict(ev, metadata={"name": "x", "namespace": "other"}))
            check(st == 400 and o["reason"] == "BadRequest", "namespace: %d %r" % (st, o))
            st, o = call("POST", "/api/v1/namespaces/nope/events", dict(ev, metadata={}))
            check(st == 404 and o["reason"] == "NotFound", "no namespace: %d %r" % (st, o))
            st, o = call("POST", evs, dict(ev, metadata={}))
            check(st == 422 and "name or generateName is required" in o["message"],
                  "no name: %d %r" % (st, o))
            smp = "application/strategic-merge-patch+json"
            st, o = call("PATCH", evs + "/shape.1", {"count": 2}, "application/json")
            check(st == 415 and o["reason"] == "UnsupportedMediaType", "ctype: %d %r" % (st, o))
            st, o = call("PATCH", evs + "/shape.9", {"count": 2}, smp)
            check(st == 404 and o["reason"] == "NotFound", "patch missing: %d %r" % (st, o))
            st, o = call("PATCH", evs + "/shape.1", {"count": 7, "message": "m2"}, smp)
            check(st == 200 and o["count"] == 7 and o["message"] == "m2" and
                  o["involvedObject"]["name"] == "n", "patch: %d %r" % (st, o))
            kube.expire_events()

        def node_events():
            """Refused and flapping tunnels become Events on their Node, folded: a repeat
            raises the count of the Event already there (a PATCH), it does not make another."""
            cloud = h.start_cloudstream(env, t.webhook_flags() + [
                "--replica-id", "cs-events", "--max-sessions", "1"], name="cloud-events")
            try:
                for i in range(4):  # edge-2 comes and goes: flapping
                    e = h.start_kubeedge_edge(env, cloud, t.kubelet, node="edge-2",
                                              name="flap-%d" % i)
                    env.stop(e)
                e1 = h.start_kubeedge_edge(env, cloud, t.kubelet, node="edge-1",
                                           name="events-e1")

                def knock():
                    ctx = ssl.create_default_context(cafile=env.path("tunnel-ca.crt"))
                    ctx.check_hostname = False
                    ctx.load_cert_chain(env.path("node-edge-2.crt"), env.path("node-edge-2.key"))
                    raw = socket.create_connection(("127.0.0.1", cloud.ports["tunnel"]), 5)
                    s = ctx.wrap_socket(raw, server_hostname="localhost")
                    s.sendall(h.head("GET", "/v1/kubeedge/connect", [
                        ("Host", "localhost"), ("Upgrade", "websocket"),
                        ("Connection", "Upgrade"), ("Sec-WebSocket-Version", "13"),
                        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")]))
                    st, _, _ = h.read_head(s)
                    s.close()
                    check(st == 503, "edge-2 past --max-sessions: %d" % st)

                # edge-2 again, while edge-1 holds the only session: refused (limit), 5 times
                for _ in range(5):
                    knock()
                deadline = time.monotonic() + 30
                while True:
                    got = {e["reason"]: e for e in kube.events_about("edge-2", "cs-events")}
                    if got.get("TunnelRefused", {}).get("count") == 5 and \
                            "TunnelFlapping" in got:
                        break
                    check(time.monotonic() < deadline, "events %r" % got)
                    time.sleep(0.2)
                refused, flap = got["TunnelRefused"], got["TunnelFlapping"]
                check(refused["involvedObject"] == {"kind": "Node", "name": "edge-2",
                                                    "uid": "edge-2", "apiVersion": "v1"} and
                      refused["metadata"]["namespace"] == "default" and
                      refused["type"] == "Warning" and
                      refused["source"] == {"component": "cloudstream", "host": "cs-events"} and
                      "(limit): session limit reached" in refused["message"] and
                      refused["firstTimestamp"] <= refused["lastTimestamp"],
                      "TunnelRefused %r" % refused)
                check(flap["message"] == "the node's tunnel came up 4 times within 5 minutes",
                      "TunnelFlapping %r" % flap)
                with kube.lock:
                    calls = [c for c in kube.event_calls if c[1] == refused["metadata"]["name"]]
                check(calls == [("POST", refused["metadata"]["name"]),
                                ("PATCH", refused["metadata"]["name"])],
                      "one create and one patch for 5 refusals: %r" % calls)
                # --event-ttl expired it: the next refusal's PATCH finds nothing (404) and a
                # new Event is created with what was not told yet
                kube.expire_events()
                knock()
                deadline = time.monotonic() + 30
                while True:
                    again = [e for e in kube.events_about("edge-2", "cs-events")
                             if e["reason"] == "TunnelRefused"]
                    if again:
                        break
                    check(time.monotonic() < deadline, "no Event after the expiry")
                    time.sleep(0.2)
                check(len(again) == 1 and again[0]["count"] == 1 and
                      again[0]["metadata"]["name"] != refused["metadata"]["name"],
                      "after the expiry: %r" % again)
                with kube.lock:
                    tail = kube.event_calls[-2:]
                check(tail == [("PATCH", refused["metadata"]["name"]),
                               ("POST", again[0]["metadata"]["name"])],
                      "expired: a PATCH (404), then a POST: %r" % tail)
                # the stand-in has the Event before cloudstream has its answer: wait for that
                deadline = time.monotonic() + 10
                while True:
                    cloud_m = urllib.request.urlopen(
                        "http://127.0.0.1:%d/metrics" % cloud.ports["admin"],
                        timeout=10).read().decode()
                    if 'cloudstream_node_events_total{result="created"} 3\n' in cloud_m:
                        break
                    check(time.monotonic() < deadline, "metrics: %r" % [
                        ln for ln in cloud_m.splitlines() if "node_events" in ln])
                    time.sleep(0.1)
                check('cloudstream_node_events_total{result="patched"} 1\n' in cloud_m and
                      'cloudstream_node_events_total{result="failed"} 0\n' in cloud_m,
                      "metrics: %r" % [ln for ln in cloud_m.splitlines() if "node_events" in ln])
                print("     5 refusals -> 1 Event count=5 (%s .. %s), calls %r" % (
                    refused["firstTimestamp"], refused["lastTimestamp"], calls))
                env.stop(e1)
            finally:
                code = env.stop(cloud)
            check(code == 0, "cloud-events exit %s" % code)

        rc = h.run([
            no_credential_401, metrics_token_reads_metrics, metrics_token_cannot_exec,
            proxy_token_as_the_kubelet_maps_it, apiserver_cert_system_masters,
            node_cert_cannot_exec_other_node, token_not_forwarded,
            one_review_per_identity_and_attributes, refuses_start_without_authorization,
            refused_subject_403, node_ca_warned_and_refused, metrics_match_the_stand_in,
            stand_in_shapes, node_events,
        ])
        code = env.stop(t.cloud)
        check(code == 0, "cloudstream exit %s" % code)
        failed = rc != 0
        return rc
    finally:
        kube.close()
        h.close_env(env, failed)


if __name__ == "__main__":
    sys.exit(main())
