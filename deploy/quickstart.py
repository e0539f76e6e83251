#!/usr/bin/python3
"""The quick start's chain (deploy/quickstart.sh runs it after installing and building):

    kubectl → nginx playing kube-apiserver → cloudstream → tunnel → edgestream (CRI backend)
            → a real containerd with pod default/demo

    quickstart.py start DIR BUILD    bring it up, show exec, logs and port-forward, leave it running
    quickstart.py stop DIR           stop everything it started, by PID, and remove the pod

Everything lives in DIR (certificates, logs, containerd's state, the kubeconfig); DIR/state.json
records the PIDs. Runs as root (containerd and runc need it)."""
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "integration", "peers"))
from apiserver import Apiserver, free_port  # noqa: E402
from containerd import Containerd  # noqa: E402
import images  # noqa: E402

NODE = "edge-1"
KUBECTL = "/usr/lib/google-cloud-sdk/bin/kubectl.1.32"


def say(*a):
    print("quickstart:", *a, flush=True)


class PidProc:
    """A process we started in an earlier run, known by its PID."""

    def __init__(self, pid):
        self.pid = pid

    def poll(self):
        try:
            os.kill(self.pid, 0)
            return None
        except ProcessLookupError:
            return 0

    def terminate(self):
        self.send(signal.SIGTERM)

    def kill(self):
        self.send(signal.SIGKILL)

    def send(self, sig):
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            pass

    def wait(self, timeout=None):
        deadline = time.monotonic() + (timeout or 3600)
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout)
            time.sleep(0.05)
        return 0


def daemon(d, name, argv):
    """Starts a daemon in its own session (it outlives us) and waits for its ready file."""
    ready = os.path.join(d, name + ".ready")
    if os.path.exists(ready):
        os.unlink(ready)
    log = open(os.path.join(d, name + ".log"), "wb")
    p = subprocess.Popen(argv + ["--ready-file", ready], stdout=log, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 20
    while not os.path.exists(ready):
        if p.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("quickstart: %s did not start; see %s" % (name, log.name))
        time.sleep(0.05)
    ports = dict(line.split("=", 1) for line in open(ready).read().split() if "=" in line)
    return p.pid, ports


def run(title, argv, env, stdin=None, timeout=60):
    print("\n$ " + title, flush=True)
    r = subprocess.run(argv, env=env, input=stdin, capture_output=True, timeout=timeout)
    sys.stdout.write(r.stdout.decode(errors="replace"))
    sys.stdout.write(r.stderr.decode(errors="replace"))
    print("(exit status %d)" % r.returncode, flush=True)
    return r


def start(d, build):
    os.makedirs(d, exist_ok=True)
    if os.path.exists(os.path.join(d, "state.json")):
        say("already running (%s); stop it first: ./deploy/quickstart.sh stop" % d)
        return 1
    state = {"pids": {}}
    certs = os.path.join(build, "certs", "stream-certs")
    cri_tool = os.path.join(build, "cri", "stream-cri")
    pki = os.path.join(d, "pki")

    def mint(*a):
        subprocess.run([certs] + list(a), check=True, stdout=subprocess.DEVNULL)
    mint("quick", "--out", pki, "--node", NODE, "--force")
    mint("ca", "--out", pki + "/apiserver-ca", "--cn", "quickstart apiserver CA", "--force")
    mint("server", "--ca", pki + "/apiserver-ca", "--out", pki + "/apiserver", "--cn",
         "kube-apiserver", "--dns", "localhost", "--ip", "127.0.0.1", "--force")
    mint("client", "--ca", pki + "/apiserver-ca", "--out", pki + "/admin", "--cn",
         "kubectl-admin", "--org", "system:masters", "--force")
    say("certificates in %s (stream-certs)" % pki)

    ctd = Containerd(d)
    ctd.start(keep=True)
    state["pids"]["containerd"] = ctd.proc.pid
    state["containerd_socket"] = ctd.socket
    save(d, state)
    images.import_into(ctd, images.build(os.path.join(d, "images")))
    say("containerd %s up (socket %s), images imported" % (
        subprocess.run(["containerd", "--version"], capture_output=True).stdout.decode().split()[2],
        ctd.socket))

    uid = "demo-uid-1"
    logs = os.path.join(d, "pods", "default_demo_" + uid)
    os.makedirs(logs, exist_ok=True)

    def cri(*a):
        return subprocess.run([cri_tool, "--socket", ctd.socket] + list(a), check=True,
                              capture_output=True).stdout.decode().strip()
    sandbox = cri("run-pod", "default", "demo", uid, logs)
    state["sandbox"] = sandbox
    save(d, state)
    cri("create-container", "default", "demo", uid, logs, sandbox, "app", images.BUSYBOX_IMAGE,
        "--stdin", "--", "sh", "-c",
        "mkdir -p /tmp/www; echo hello through port-forward > /tmp/www/index.html; "
        "httpd -p 127.0.0.1:18080 -h /tmp/www; "
        "i=0; while true; do i=$((i+1)); echo \"demo line $i\"; [ $i -lt 3 ] || sleep 2; done")
    say("pod default/demo running (host network), container app: three log lines, then one "
        "every 2 s, and an httpd on 127.0.0.1:18080")
    deadline = time.monotonic() + 15
    log_file = os.path.join(logs, "app", "0.log")
    while time.monotonic() < deadline and (not os.path.exists(log_file) or
                                           open(log_file, "rb").read().count(b"\n") < 3):
        time.sleep(0.1)

    api_port = free_port()
    bins = {n: os.path.join(build, n, n) for n in ("cloudstream", "edgestream")}
    pid, cports = daemon(d, "cloudstream", [
        bins["cloudstream"], "--tunnel-listen", "127.0.0.1:0", "--stream-listen", "127.0.0.1:0",
        "--admin-listen", "127.0.0.1:0",
        "--tunnel-cert", pki + "/cloudstream-tunnel.crt",
        "--tunnel-key", pki + "/cloudstream-tunnel.key", "--tunnel-ca", pki + "/tunnel-ca.crt",
        "--stream-cert", pki + "/cloudstream-stream.crt",
        "--stream-key", pki + "/cloudstream-stream.key",
        "--stream-client-ca", pki + "/stream-ca.crt",
        "--stream-allowed-subjects", "kube-apiserver-kubelet-client",
        "--apiserver-url", "https://127.0.0.1:%d" % api_port,
        "--apiserver-ca", pki + "/apiserver-ca.crt",
        "--apiserver-cert", pki + "/admin.crt", "--apiserver-key", pki + "/admin.key"])
    state["pids"]["cloudstream"] = pid
    save(d, state)
    pid, eports = daemon(d, "edgestream", [
        bins["edgestream"],
        "--cloud-url", "wss://127.0.0.1:%s/v1/kubeedge/connect" % cports["tunnel"],
        "--cloud-server-name", "localhost",
        "--tunnel-cert", pki + "/node-%s.crt" % NODE, "--tunnel-key", pki + "/node-%s.key" % NODE,
        "--tunnel-ca", pki + "/tunnel-ca.crt", "--kubelet-url", "",
        "--cri-socket", ctd.socket, "--admin-listen", "127.0.0.1:0"])
    state["pids"]["edgestream"] = pid
    save(d, state)
    say("cloudstream up (tunnel :%s, stream :%s, admin :%s); edgestream connected as %s "
        "(admin :%s)" % (cports["tunnel"], cports["stream"], cports["admin"], NODE,
                         eports["admin"]))

    apipki = {"cert": pki + "/apiserver.crt", "key": pki + "/apiserver.key",
              "ca": pki + "/apiserver-ca.crt", "client_ca": pki + "/apiserver-ca.crt",
              "admin_cert": pki + "/admin.crt", "admin_key": pki + "/admin.key",
              "kubelet_cert": pki + "/apiserver-kubelet-client.crt",
              "kubelet_key": pki + "/apiserver-kubelet-client.key",
              "kubelet_ca": pki + "/stream-ca.crt"}
    api = Apiserver(d, int(cports["stream"]), apipki, node=NODE)
    api.port = api_port
    api.add_pod("default", "demo", ["app"], uid=uid)
    api.start(keep=True)
    state["pids"]["nginx"] = api.proc.pid
    state["kubeconfig"] = api.kubeconfig
    save(d, state)
    say("nginx playing kube-apiserver on https://127.0.0.1:%d; kubeconfig %s" %
        (api_port, api.kubeconfig))

    env = dict(os.environ, KUBECONFIG=api.kubeconfig, HOME=os.path.join(d, "home"))
    k = [KUBECTL]
    ok = True
    r = run("kubectl exec demo -- sh -c 'echo hello from $(hostname); echo to-stderr >&2; "
            "exit 3'", k + ["exec", "demo", "--", "sh", "-c",
                            "echo hello from $(hostname); echo to-stderr >&2; exit 3"], env)
    ok &= r.returncode == 3 and r.stdout.startswith(b"hello from")
    r = run("echo typed-on-stdin | kubectl exec -i demo -- cat",
            k + ["exec", "-i", "demo", "--", "cat"], env, stdin=b"typed-on-stdin\n")
    ok &= r.returncode == 0 and r.stdout == b"typed-on-stdin\n"
    r = run("kubectl logs demo --tail=3 --timestamps",
            k + ["logs", "demo", "--tail=3", "--timestamps"], env)
    ok &= r.returncode == 0 and r.stdout.count(b"demo line") == 3
    pf_port = free_port()
    print("\n$ kubectl port-forward pod/demo %d:18080 & curl http://127.0.0.1:%d/" %
          (pf_port, pf_port), flush=True)
    pf = subprocess.Popen(k + ["port-forward", "pod/demo", "%d:18080" % pf_port], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    body = b""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            body = urllib.request.urlopen("http://127.0.0.1:%d/" % pf_port, timeout=5).read()
            break
        except OSError:
            time.sleep(0.2)
    pf.terminate()
    pf.wait()
    sys.stdout.write(body.decode(errors="replace"))
    ok &= body == b"hello through port-forward\n"
    print("\n%s\n" % ("-" * 72))
    say("everything above went kubectl → nginx → cloudstream → tunnel → edgestream → "
        "containerd." if ok else "SOME STEPS ABOVE FAILED (logs in %s)" % d)
    print("""
It is still running. Keep typing kubectl commands:

    export KUBECONFIG=%(kc)s HOME=%(home)s
    %(k)s exec -it demo -- sh
    %(k)s logs -f demo

Daemon logs: %(d)s/cloudstream.log, %(d)s/edgestream.log; metrics:
    curl http://127.0.0.1:%(ca)s/metrics; curl http://127.0.0.1:%(ea)s/metrics
Stop everything (by PID) and remove the pod:

    ./deploy/quickstart.sh stop
""" % {"kc": api.kubeconfig, "home": env["HOME"], "k": KUBECTL, "d": d,
       "ca": cports["admin"], "ea": eports["admin"]})
    return 0 if ok else 1


def save(d, state):
    with open(os.path.join(d, "state.json.tmp"), "w") as f:
        json.dump(state, f)
    os.rename(os.path.join(d, "state.json.tmp"), os.path.join(d, "state.json"))


def stop(d, build):
    path = os.path.join(d, "state.json")
    if not os.path.exists(path):
        say("nothing recorded in %s: nothing to stop" % d)
        return 0
    state = json.load(open(path))
    pids = state.get("pids", {})
    for name in ("nginx", "edgestream", "cloudstream"):
        if name in pids:
            p = PidProc(pids[name])
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
            say("stopped %s (pid %d)" % (name, pids[name]))
    if "containerd" in pids:
        ctd = Containerd(d)
        ctd.proc = PidProc(pids["containerd"])
        if state.get("sandbox") and ctd.proc.poll() is None:
            subprocess.run([os.path.join(build, "cri", "stream-cri"), "--socket", ctd.socket,
                            "remove-pod", state["sandbox"]], capture_output=True, timeout=60)
            say("removed pod default/demo")
        ctd.stop()
        say("stopped containerd (pid %d), its containers and mounts" % pids["containerd"])
    os.unlink(path)
    say("done; %s keeps the logs and certificates (rm -rf it to clean up)" % d)
    return 0


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("start", "stop"):
        print(__doc__)
        return 2
    build = sys.argv[3] if len(sys.argv) > 3 else os.path.join(ROOT, "build", "release")
    if os.geteuid() != 0:
        say("run as root (containerd and runc need it)")
        return 1
    return (start if sys.argv[1] == "start" else stop)(os.path.abspath(sys.argv[2]), build)


if __name__ == "__main__":
    sys.exit(main())
