#!/usr/bin/python3
"""--advertise-kubelet-port: when an edge's tunnel comes up, cloudstream sets its Node's
status.daemonEndpoints.kubeletEndpoint.Port, as KubeEdge's cloudcore does. Against the apiserver
stand-in (peers/kube_reviews.py + kube_csr.py: PATCH nodes/<name>/status, merge patches, 404 for
an unknown Node, 415 for another content type).

Checked: the Node's port is 10250 before, the edge connects, within 5 s the stand-in saw exactly
one PATCH of edge-1's status with a JSON merge patch of that field alone and the Node says
10350 (a watch of Nodes sees it MODIFIED); a reconnect patches again (the kubelet or an operator
may have changed it meanwhile); an edge whose Node does not exist is still served and the 404 is
logged; the metrics count both; without --apiserver-url cloudstream refuses to start (exit 2).
"""
import os
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
import harness as h  # noqa: E402
import standin  # noqa: E402
from harness import check  # noqa: E402
from kube_csr import CsrApi  # noqa: E402
from kube_reviews import KubeReviews  # noqa: E402

WANT = {"status": {"daemonEndpoints": {"kubeletEndpoint": {"Port": 10350}}}}


def wait(what, cond, timeout=5.0):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if cond():
            return time.monotonic() - t0
        time.sleep(0.05)
    raise h.Fail("%s: not within %.0f s" % (what, timeout))


def main():
    env = h.Env("advport", nodes=("edge-1", "edge-2"))
    failed = True
    env.mint("ca", "--out", env.path("kubelet-serving-ca"))
    csr = CsrApi((env.path("kubelet-serving-ca.crt"), env.path("kubelet-serving-ca.key")),
                 nodes={"edge-1": [{"type": "InternalIP", "address": "10.0.0.1"}]})
    kube = KubeReviews(env.path("kubelet.crt"), env.path("kubelet.key"), "tok", csr=csr)
    results = []
    try:
        token_file = standin.write_token(env, "tok")
        check(csr.node_object("edge-1")["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
              == 10250, "stand-in default")
        # Refused at start without an apiserver.
        bad = h.start_cloudstream
        try:
            bad(env, ["--advertise-kubelet-port", "10350"], name="no-apiserver")
            raise h.Fail("started without --apiserver-url")
        except h.Fail as e:
            check("exited with 2" in str(e) and "needs --apiserver-url" in str(e),
                  "refusal: %s" % e)
        print("ok   advertise.needs_apiserver_url", flush=True)
        kubelet = h.start_kubelet(env)
        cloud = h.start_cloudstream(env, [
            "--advertise-kubelet-port", "10350"] +
            standin.apiserver_flags(env, kube.url, token_file))
        rv0 = csr.rv
        edge = h.start_kubeedge_edge(env, cloud, kubelet, node="edge-1")
        t = wait("patched", lambda: len(csr.node_status_patches) >= 1)
        check(csr.node_status_patches == [("edge-1", WANT, "application/merge-patch+json")],
              "patches %r" % csr.node_status_patches)
        check(csr.node_object("edge-1")["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
              == 10350, "Node %r" % csr.node_object("edge-1"))
        seen = []
        csr.watch_nodes(rv0, "", 0.2, lambda ev: seen.append(ev) or True)
        check([e["type"] for e in seen] == ["MODIFIED"] and
              seen[0]["object"]["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] == 10350,
              "watch %r" % seen)
        print("ok   advertise.tunnel_up_patches_the_node: after %.2f s, one merge patch" % t,
              flush=True)
        results.append(True)

        # Someone sets it back; a reconnect sets it again.
        csr.patch_node_status("edge-1", {"status": {"daemonEndpoints": {
            "kubeletEndpoint": {"Port": 10250}}}}, "application/merge-patch+json")
        env.stop(edge)
        edge = h.start_kubeedge_edge(env, cloud, kubelet, node="edge-1")
        wait("patched again", lambda: csr.node_object("edge-1")["status"]["daemonEndpoints"]
             ["kubeletEndpoint"]["Port"] == 10350)
        print("ok   advertise.reconnect_patches_again", flush=True)

        # No Node object: the tunnel is served all the same, the 404 is said.
        mark = h.log_mark(cloud)
        edge2 = h.start_kubeedge_edge(env, cloud, kubelet, node="edge-2")
        h.wait_log(cloud, r"node=edge-2 advertising kubelet port \d+ failed: HTTP 404 \(no such "
                   r"Node\)", mark, 5, "404 logged")
        api = h.Api(env, cloud.ports["stream"])
        st, _, body, s = api.request("GET", "/healthz", [("Host", "edge-2:10350")])
        s.close()
        check(st == 200, "edge-2 request %d %r" % (st, body))
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % cloud.ports["admin"],
                                    timeout=5) as r:
            m = r.read().decode()
        check('cloudstream_advertised_port_patches_total{result="ok"} 2' in m and
              'cloudstream_advertised_port_patches_total{result="failed"} 1' in m,
              "metrics:\n" + "\n".join(ln for ln in m.splitlines() if "advertised" in ln))
        print("ok   advertise.unknown_node_logged_and_served", flush=True)
        for p in (edge, edge2):
            env.stop(p)
        rc = env.stop(cloud)
        check(rc == 0, "cloudstream exit %s" % rc)
        failed = False
        return 0
    except h.Fail as e:
        print("FAIL advertise: %s" % e, flush=True)
        return 1
    finally:
        kube.close()
        h.close_env(env, failed)


if __name__ == "__main__":
    sys.exit(main())
