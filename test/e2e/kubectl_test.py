#!/usr/bin/python3
"""End to end with the real peers (lab README §10): kubectl 1.27/1.32/1.33 → nginx playing
kube-apiserver (TLS, client certificates, the kubelet rewrite of lab §4) → cloudstream (TLS,
the apiserver's kubelet client certificate required; the pod's node found through that
apiserver) → tunnel → edgestream (--cri-socket: exec, attach, port-forward and containerLogs
through containerd; node proxy to a kubelet stand-in) → a real containerd with a real
host-network pod default/demo.

    kubectl_test.py GROUP [TEST...]     GROUP: streams | logs | goagent | images | frontdoor

goagent: the example Go agent (edgestream/go/example-agent, built by integration.go_package)
embeds libedgestream in place of the edgestream daemon, and kubectl exec, exec -i, exec -it,
port-forward and the node proxy go through it.

images: cloudstream and edgestream from their OCI images (deploy/build-images.sh, from the
packages integration.packages_build makes), run by the same containerd as the pod (host network,
read-only root, no capabilities, uid 65532 for cloudstream), and a subset of both groups through
them.

frontdoor: nginx reaches the kubelet side the way kube-apiserver does with an
EgressSelectorConfiguration (egress cluster, HTTPConnect over a unix socket): through
peers/egress_shim.py, which makes the dialer's CONNECT to cloudstream's front door for every
connection nginx opens. The lab has no kubelet of its own, so the node the shim dials
(door-node) is an edgestream whose --kubelet-url is cloudstream's stream port: nginx's TLS with
the apiserver's kubelet client certificate runs through the front door, the tunnel and that
edge untouched, and the stream port then serves the request as it does after DNAT (lab-node's
CRI backend, containerd). Every kubectl byte crosses the front door.

Each group is one process with one containerd (starting it is the expensive part). Outputs are
asserted exactly; figures (exec times, cp throughput) are printed for the record. Skipped (77)
when not root or a peer is missing, failed instead under CI=true."""
import http.client
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
INTEGRATION = os.path.join(os.path.dirname(HERE), "integration")
sys.path.insert(0, os.path.join(INTEGRATION, "lib"))
sys.path.insert(0, os.path.join(INTEGRATION, "peers"))
sys.path.insert(0, INTEGRATION)
import harness as h  # noqa: E402
from harness import check, Fail  # noqa: E402
from apiserver import Apiserver, NJS_MODULE, free_port  # noqa: E402
from containerd import Containerd  # noqa: E402
import images  # noqa: E402
import fake_kubelet  # noqa: E402  (its /metrics body is the reference)
import go_agent_test  # noqa: E402  (the Go agent as the edge, group goagent)
import images_test  # noqa: E402  (the daemons from their OCI images, group images)

KUBECTL_DIR = "/usr/lib/google-cloud-sdk/bin"
VERSIONS = ("1.27", "1.32", "1.33")
NODE = "lab-node"
DOOR_NODE = "door-node"  # group frontdoor: the node the egress dialer's CONNECT names
UID = "demo-uid-1"
TOOL = os.path.join(h.BIN, "cri", "stream-cri")
# lab §8: the loop container echoes a numbered line every 2 s and what it reads on stdin
LOOP = ('i=0; while true; do i=$((i+1)); echo "line $i $(date +%T)"; if read -t 2 x; then '
        'echo "got: $x"; echo "stderr-echo: $x" >&2; fi; done')
LINE_RE = re.compile(rb"^line \d+ \d\d:\d\d:\d\d$")
WEB_SIZES = (300000, 700001)  # bytes of /blob behind the two httpd of the "web" container


def kubectl_path(ver):
    return os.path.join(KUBECTL_DIR, "kubectl." + ver)


def missing_peers():
    need = [kubectl_path(v) for v in VERSIONS] + ["/usr/sbin/nginx", "/usr/bin/script"]
    miss = [p for p in need if not os.access(p, os.X_OK)]
    miss += [t for t in ("containerd", "ctr", "runc") if shutil.which(t) is None]
    if not os.path.exists(NJS_MODULE):
        miss.append("libnginx-mod-http-js")
    try:
        import kubernetes  # noqa: F401 - only whether it is there
    except ImportError:
        miss.append("python3-kubernetes")
    return miss


def show(b, n=300):
    """A bounded, readable view of bytes for failure messages."""
    return repr(b[:n]) + ("…(%d bytes)" % len(b) if len(b) > n else "")


class Lab:
    """The whole chain, up once per process."""

    def __init__(self, group):
        self.env = h.Env("e2e-" + group, nodes=(NODE,))
        self.group = group
        self.base = self.env.dir
        self.home = os.path.join(self.base, "home")  # kubectl's discovery cache goes here
        os.makedirs(self.home)
        self.ctd = Containerd(self.base)
        self.api = None
        self.sandbox = None
        self.procs = []  # kubectl port-forward and the like, stopped by PID

    # ---- setup ---------------------------------------------------------------------------
    def up(self):
        env = self.env
        t0 = time.monotonic()
        self.ctd.start()
        images.import_into(self.ctd, images.build(os.path.join(self.base, "images")))
        oci = {}  # the daemons' images (group images), else they run from the build tree
        if self.group == "images":
            oci = images_test.build_and_import(self.ctd, os.path.join(self.base, "oci"))

        def wrap(daemon):
            return images_test.wrapper(env, self.ctd, daemon, oci[daemon]) if oci else None
        t_ctd = time.monotonic() - t0
        # The apiserver's own CA, serving certificate and kubectl's client certificate; the
        # kubelet-side trust (stream-ca, apiserver-kubelet-client) is stream-certs quick's.
        env.mint("ca", "--out", env.path("apiserver-ca"), "--cn", "e2e apiserver CA")
        env.mint("server", "--ca", env.path("apiserver-ca"), "--out", env.path("apiserver"),
                 "--cn", "kube-apiserver", "--dns", "localhost", "--ip", "127.0.0.1")
        env.mint("client", "--ca", env.path("apiserver-ca"), "--out", env.path("admin"),
                 "--cn", "kubectl-admin", "--org", "system:masters")
        self.make_pod()
        self.kubelet = h.start_kubelet(env)
        pki = {"cert": env.path("apiserver.crt"), "key": env.path("apiserver.key"),
               "ca": env.path("apiserver-ca.crt"), "client_ca": env.path("apiserver-ca.crt"),
               "admin_cert": env.path("admin.crt"), "admin_key": env.path("admin.key"),
               "kubelet_cert": env.path("apiserver-kubelet-client.crt"),
               "kubelet_key": env.path("apiserver-kubelet-client.key"),
               "kubelet_ca": env.path("stream-ca.crt")}
        # cloudstream finds a pod's node through the apiserver (exec/attach/logs name no node:
        # the Host of an upgrade is the client's, 127.0.0.1). Its port must be known first.
        api_port = free_port()
        door = self.group == "frontdoor"
        door_sock = env.sock("front-door.sock") if door else None
        self.cloud = h.start_cloudstream(env, extra=[
            "--apiserver-url", "https://127.0.0.1:%d" % api_port,
            "--apiserver-ca", env.path("apiserver-ca.crt"),
            "--apiserver-cert", env.path("admin.crt"), "--apiserver-key", env.path("admin.key")]
            + (["--front-door-socket", door_sock] if door else []),
            wrap=wrap("cloudstream"))
        kubelet_side = self.cloud.ports["stream"]
        if door:  # nginx dials the kubelet side through the egress dialer's CONNECT
            ready = os.path.join(self.base, "egress-shim.ready")
            self.shim, text = env.start("egress-shim", [
                h.PY, os.path.join(h.PEERS, "egress_shim.py"), "--listen", "127.0.0.1:0",
                "--uds", door_sock, "--target", "%s:10250" % DOOR_NODE, "--ready-file", ready],
                ready)
            kubelet_side = int(text.strip())
        self.api = Apiserver(self.base, kubelet_side, pki, node=NODE)
        self.api.port = api_port
        self.api.add_pod("default", "demo", ["loop", "shell", "web", "logger", "follower",
                                             "restarts", "ghost"], tty=["shell"], uid=UID)
        # for the error checks: a pod the runtime does not have, one on a node with no tunnel
        self.api.add_pod("default", "nosandbox", ["app"])
        self.api.add_pod("default", "far", ["app"], node="ghost-node")
        self.api.start()
        if self.group == "goagent":  # the Go agent embedding libedgestream is the edge
            self.edge = go_agent_test.start_agent(env, self.cloud, self.kubelet, node=NODE,
                                                  options={"cri-socket": self.ctd.socket})
        else:
            self.edge = h.start_edgestream(env, self.cloud, self.kubelet, node=NODE,
                                           extra=["--cri-socket", self.ctd.socket],
                                           wrap=wrap("edgestream"))
        if door:  # the node the front door reaches: its "kubelet" is the stream port
            env.mint("client", "--ca", env.path("tunnel-ca"), "--out",
                     env.path("node-%s" % DOOR_NODE), "--node", DOOR_NODE)
            stream_port = type("KubeletSide", (), {"port": self.cloud.ports["stream"]})()
            self.door_edge = h.start_edgestream(env, self.cloud, stream_port, node=DOOR_NODE)
        print("setup: containerd + images %.1fs, chain up %.1fs" %
              (t_ctd, time.monotonic() - t0), flush=True)
        return self

    def cri(self, *args):
        r = subprocess.run([TOOL, "--socket", self.ctd.socket] + list(args),
                           capture_output=True, timeout=30)
        check(r.returncode == 0, "stream-cri %s: rc %d %r" % (" ".join(args[:2]), r.returncode,
                                                             r.stderr))
        return r.stdout.decode().strip()

    def container(self, name, script, stdin=False, tty=False, attempt=0, argv=None):
        flags = (["--stdin"] if stdin else []) + (["--tty"] if tty else [])
        return self.cri("create-container", "default", "demo", UID, self.logdir, self.sandbox,
                        name, images.BUSYBOX_IMAGE, "--attempt", str(attempt), *flags, "--",
                        *(argv or ["sh", "-c", script]))

    def make_pod(self):
        """Pod default/demo as lab §8 (loop, shell) plus web (two httpd for port-forward)."""
        self.logdir = os.path.join(self.base, "pods", "default_demo_" + UID)
        os.makedirs(self.logdir)
        self.sandbox = self.cri("run-pod", "default", "demo", UID, self.logdir)
        self.container("loop", LOOP, stdin=True)
        self.container("shell", None, stdin=True, tty=True, argv=["sh"])
        self.web_ports = (free_port(), free_port())
        web = " ".join("mkdir -p /www%d; head -c %d /dev/urandom > /www%d/blob; "
                       "httpd -f -p 127.0.0.1:%d -h /www%d &" % (i, n, i, p, i)
                        for i, (n, p) in enumerate(zip(WEB_SIZES, self.web_ports)))
        self.container("web", web + " wait")

    def log_file(self, ctr, attempt=0):
        return os.path.join(self.logdir, ctr, "%d.log" % attempt)

    def wait_log(self, ctr, marker, attempt=0, timeout=15.0):
        deadline = time.monotonic() + timeout
        data = b""
        while time.monotonic() < deadline:
            p = self.log_file(ctr, attempt)
            data = open(p, "rb").read() if os.path.exists(p) else b""
            if marker in data:
                return data
            time.sleep(0.05)
        raise Fail("container %s: expected %r in its log file, got %s" % (ctr, marker,
                                                                          show(data)))

    def wait_exited(self, cid, timeout=15.0):
        deadline = time.monotonic() + timeout
        st = ""
        while time.monotonic() < deadline:
            st = self.cri("status", cid)
            if "EXITED" in st:
                return st
            time.sleep(0.1)
        raise Fail("container %s: expected EXITED, status is %r" % (cid, st))

    # ---- kubectl -------------------------------------------------------------------------
    def kenv(self, extra=None):
        e = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": self.home,
             "KUBECONFIG": self.api.kubeconfig, "LANG": "C.UTF-8"}
        e.update(extra or {})
        return e

    def kubectl(self, ver, *args, stdin=b"", env=None, timeout=60):
        """Runs kubectl to its end. Returns (rc, stdout, stderr, seconds)."""
        t0 = time.monotonic()
        r = subprocess.run([kubectl_path(ver)] + list(args), input=stdin, capture_output=True,
                           env=self.kenv(env), timeout=timeout, preexec_fn=h._die_with_parent)
        return r.returncode, r.stdout, r.stderr, time.monotonic() - t0

    def popen(self, argv, env=None, stdin=subprocess.DEVNULL):
        p = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=self.kenv(env), preexec_fn=h._die_with_parent)
        self.procs.append(p)
        return p

    def stop_proc(self, p, sig=signal.SIGTERM):
        if p.poll() is None:
            p.send_signal(sig)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if p in self.procs:
            self.procs.remove(p)
        return p.returncode

    def log_mark(self):
        return len(self.api.access_log())

    def requests_since(self, mark, sub, expect=0, query=None):
        """(method, status, upgrade) of the apiserver requests after @mark whose path has @sub
        (and whose query has @query). nginx logs an upgraded request when its connection ends,
        which may be a moment after kubectl exits: with @expect, wait up to 5 s for that many;
        a late line of an earlier request can land after @mark too, hence @query."""
        deadline = time.monotonic() + 5
        while True:
            out = []
            for r in self.api.access_log()[mark:]:
                method, target = r["request"].split(" ")[:2]
                path, _, q = target.partition("?")
                if sub in path and (query is None or query in q):
                    out.append((method, r["status"], r["upgrade"]))
            if len(out) >= expect or time.monotonic() > deadline:
                return out
            time.sleep(0.05)

    # ---- teardown ------------------------------------------------------------------------
    def down(self, failed):
        for p in list(self.procs):
            self.stop_proc(p)
        if failed:
            for p in self.env.procs:
                print("---- %s (last lines) ----\n%s" % (p.name, self.env.tail(p, 25)),
                      flush=True)
            if self.api:
                print("---- nginx (last lines) ----\n" + self.api.tail(), flush=True)
            print("---- containerd (last lines) ----\n" + self.ctd.tail(), flush=True)
        codes = {p.name: self.env.stop(p) for p in reversed(self.env.procs)}
        if self.api:
            self.api.stop()
        if self.sandbox:
            subprocess.run([TOOL, "--socket", self.ctd.socket, "remove-pod", self.sandbox],
                           capture_output=True, timeout=30)
        self.ctd.stop()
        if not failed:
            shutil.rmtree(self.base, ignore_errors=True)
        else:
            print("kept " + self.base, flush=True)
        return codes


# ---- checks: exec ----------------------------------------------------------------------------

def exec_status(lab, ver):
    """lab §10 #1: stdout, stderr and the exit code of a failing command."""
    rc, out, err, _ = lab.kubectl(ver, "exec", "demo", "-c", "loop", "--", "sh", "-c",
                                  "echo hello-$(hostname); echo to-stderr >&2; exit 7")
    want_out = ("hello-%s\n" % socket.gethostname()).encode()
    want_err = b"to-stderr\ncommand terminated with exit code 7\n"
    check(rc == 7 and out == want_out and err == want_err,
          "kubectl %s exec exit 7: expected rc 7, stdout %r, stderr %r; got rc %d, stdout %s, "
          "stderr %s" % (ver, want_out, want_err, rc, show(out), show(err)))


def exec_stdin(lab, ver):
    """lab §10 #3/#3b: stdin through `cat`, SPDY only (1.27, or 1.30+ with
    KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false) and websocket-first with the SPDY fallback; the
    apiserver saw the request sequence of lab §5."""
    modes = [("spdy", {"KUBECTL_REMOTE_COMMAND_WEBSOCKETS": "false"})]
    if ver != "1.27":
        modes.append(("websocket-first", {}))
    for mode, extra in modes:
        mark = lab.log_mark()
        line = ("three-stdin-%s-%s\n" % (ver, mode)).encode()
        rc, out, err, _ = lab.kubectl(ver, "exec", "-i", "demo", "-c", "loop", "--", "cat",
                                      stdin=line, env=extra)
        check(rc == 0 and out == line and err == b"",
              "kubectl %s exec -i (%s): expected rc 0, stdout %r, no stderr; got rc %d, %s, %s"
              % (ver, mode, line, rc, show(out), show(err)))
        want = [("POST", "101", "SPDY/3.1")]
        if mode == "websocket-first":
            want = [("GET", "403", "websocket")] + want
        seq = lab.requests_since(mark, "/exec", len(want), query="command=cat")
        check(seq == want, "kubectl %s exec -i (%s): expected the apiserver to see %r, saw %r"
              % (ver, mode, want, seq))


def exec_tty(lab, ver):
    """lab §10 #4: a terminal through `script`, its size set before and sent as a resize."""
    k = kubectl_path(ver)
    cmd = ("stty cols 123 rows 45; %s exec -it demo -c shell -- sh -c 'sleep 1; stty size; tty'"
           % k)
    # script's stdin stays open (and silent) until the end: at EOF script would type an EOF
    # character into the terminal, which the remote tty echoes
    out_path = os.path.join(lab.base, "script.out")
    with open(out_path, "wb") as out_f:
        p = subprocess.Popen(["script", "-qec", cmd, "/dev/null"], stdin=subprocess.PIPE,
                             stdout=out_f, stderr=subprocess.STDOUT, env=lab.kenv(),
                             preexec_fn=h._die_with_parent)
        try:
            rc = p.wait(60)
        finally:
            lab.stop_proc(p)
            p.stdin.close()
    out = open(out_path, "rb").read()
    m = re.match(rb"^45 123\r\n/dev/pts/\d+\r\n$", out)
    check(rc == 0 and m is not None,
          "kubectl %s exec -it under script: expected rc 0 and \"45 123\\r\\n/dev/pts/N\\r\\n\","
          " got rc %s, %s" % (ver, rc, show(out)))


def exec_timing(lab):
    """kubectl 1.32 pays nothing for its refused websocket attempt: the median of N
    `exec -- true` is within 1.5 × kubectl 1.27's (SPDY only)."""
    n = 5
    runs = {"1.27": [], "1.32": []}
    for ver in runs:
        lab.kubectl(ver, "exec", "demo", "-c", "loop", "--", "true")  # warm the cache
    for _ in range(n):  # interleaved, so both see the same background load
        for ver, ts in runs.items():
            rc, out, err, dt = lab.kubectl(ver, "exec", "demo", "-c", "loop", "--", "true")
            check(rc == 0 and out == b"" and err == b"",
                  "kubectl %s exec -- true: expected rc 0 and no output, got rc %d %s %s"
                  % (ver, rc, show(out), show(err)))
            ts.append(dt)
    times = {ver: statistics.median(ts) for ver, ts in runs.items()}
    for ver, ts in runs.items():
        print("for the record: kubectl %s exec -- true, median of %d: %.3f s (all: %s)" %
              (ver, n, times[ver], " ".join("%.3f" % t for t in ts)), flush=True)
    check(times["1.32"] <= 1.5 * times["1.27"],
          "kubectl 1.32 exec median expected <= 1.5 x 1.27's (%.3f s), got %.3f s" %
          (times["1.27"], times["1.32"]))


# ---- checks: attach --------------------------------------------------------------------------

def read_lines_until(p, stream, pred, timeout):
    """Reads @stream of @p line by line on a thread until pred(lines) or @timeout."""
    lines = []
    done = threading.Event()

    def reader():
        for line in iter(stream.readline, b""):
            lines.append(line)
            if pred(lines):
                done.set()
        done.set()
    threading.Thread(target=reader, daemon=True).start()
    done.wait(timeout)
    return lines


def attach_stdin(lab, ver):
    """lab §10 #5: attach -i: the line on stdin is read by the loop (stdout "got: …", stderr
    "stderr-echo: …"); kubectl exits 0 when its stdin closes."""
    word = "hello-attach-" + ver
    mark = lab.log_mark()
    p = lab.popen([kubectl_path(ver), "attach", "demo", "-c", "loop", "-i"],
                  stdin=subprocess.PIPE)
    try:
        p.stdin.write((word + "\n").encode())
        p.stdin.flush()
        got = ("got: %s\n" % word).encode()
        out = read_lines_until(p, p.stdout, lambda ls: got in ls, 15)
        check(got in out, "kubectl %s attach -i: expected %r on stdout, got %s" %
              (ver, got, show(b"".join(out))))
        others = [ln for ln in out if ln != got]
        check(all(LINE_RE.match(ln.rstrip(b"\n")) for ln in others),
              "kubectl %s attach -i: expected only \"line N hh:mm:ss\" besides %r, got %s" %
              (ver, got, show(b"".join(out))))
        p.stdin.close()
        rc = p.wait(15)
        err = p.stderr.read()
        want_err = ("If you don't see a command prompt, try pressing enter.\n"
                    "stderr-echo: %s\n" % word).encode()
        check(rc == 0 and err == want_err,
              "kubectl %s attach -i after stdin closed: expected rc 0 and stderr %r, got rc %s, "
              "stderr %s" % (ver, want_err, rc, show(err)))
    finally:
        lab.stop_proc(p)
    want = [("POST", "101", "SPDY/3.1")]
    if ver != "1.27":
        want = [("GET", "403", "websocket")] + want
    seq = lab.requests_since(mark, "/attach", len(want))
    check(seq == want, "kubectl %s attach -i: expected the apiserver to see %r, saw %r" %
          (ver, want, seq))


def attach_plain(lab, ver):
    """lab §10 #6: attach without stdin shows the loop's lines until it is stopped."""
    p = lab.popen([kubectl_path(ver), "attach", "demo", "-c", "loop"])
    try:
        out = read_lines_until(p, p.stdout, lambda ls: len(ls) >= 2, 15)
        check(len(out) >= 2 and all(LINE_RE.match(ln.rstrip(b"\n")) for ln in out[:2]),
              "kubectl %s attach: expected two \"line N hh:mm:ss\" lines, got %s" %
              (ver, show(b"".join(out))))
        check(p.poll() is None, "kubectl %s attach: expected it to run until stopped, it "
              "exited %s" % (ver, p.returncode))
    finally:
        lab.stop_proc(p)


# ---- checks: port-forward and cp -------------------------------------------------------------

def http_get(port, path="/blob", timeout=30):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("GET", path)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, body


def port_forward(lab, ver):
    """lab §10 #7, more: one kubectl port-forward with two ports, four concurrent connections
    on each, every body equal to what the pod's httpd serves directly (host network)."""
    direct = [http_get(p) for p in lab.web_ports]
    check(all(st == 200 and len(b) == n for (st, b), n in zip(direct, WEB_SIZES)),
          "web container: expected 200 and %r bytes direct, got %r" %
          (WEB_SIZES, [(st, len(b)) for st, b in direct]))
    local = (free_port(), free_port())
    mark = lab.log_mark()
    p = lab.popen([kubectl_path(ver), "port-forward", "--address", "127.0.0.1", "pod/demo"] +
                  ["%d:%d" % lp for lp in zip(local, lab.web_ports)])
    try:
        want = [("Forwarding from 127.0.0.1:%d -> %d\n" % lp).encode()
                for lp in zip(local, lab.web_ports)]
        out = read_lines_until(p, p.stdout, lambda ls: all(w in ls for w in want), 20)
        check(all(w in out for w in want), "kubectl %s port-forward: expected %r, got %s; "
              "stderr %s" % (ver, want, show(b"".join(out)), show(p.stderr.peek()
                                                                 if p.poll() else b"")))
        results = {}

        def fetch(i, k):
            try:
                results[(i, k)] = http_get(local[i])
            except Exception as e:  # noqa: BLE001 - reported below
                results[(i, k)] = (repr(e), b"")
        t0 = time.monotonic()
        threads = [threading.Thread(target=fetch, args=(i, k)) for i in (0, 1) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        dt = time.monotonic() - t0
        for (i, k), (st, body) in sorted(results.items()):
            check(st == 200 and body == direct[i][1],
                  "kubectl %s port-forward port %d connection %d: expected 200 and the %d "
                  "bytes served directly (sha256 %s), got %r and %d bytes (sha256 %s)" %
                  (ver, lab.web_ports[i], k, len(direct[i][1]), h.sha256(direct[i][1])[:16],
                   st, len(body), h.sha256(body)[:16]))
        check(len(results) == 8, "kubectl %s port-forward: %d of 8 connections finished" %
              (ver, len(results)))
        print("for the record: kubectl %s port-forward, 8 concurrent GETs on 2 ports "
              "(%d bytes): %.2f s" % (ver, 4 * sum(WEB_SIZES), dt), flush=True)
        check(p.poll() is None, "kubectl %s port-forward exited %s" % (ver, p.returncode))
        handled = sorted(ln for ln in out if ln.startswith(b"Handling connection for "))
        want_h = sorted([b"Handling connection for %d\n" % lp for lp in local] * 4)
        check(handled == want_h, "kubectl %s port-forward: expected %r, got %r" %
              (ver, want_h, handled))
    finally:
        lab.stop_proc(p)
    # lab §5: 1.31+ try a websocket first, containerd refuses it (403), SPDY follows
    want = [("POST", "101", "SPDY/3.1")]
    if ver >= "1.31":
        want = [("GET", "403", "websocket")] + want
    seq = lab.requests_since(mark, "/portforward", len(want))
    check(seq == want, "kubectl %s port-forward: expected the apiserver to see %r, saw %r" %
          (ver, want, seq))


def copy_both_ways(lab, ver):
    """kubectl cp of a 12 MiB random file into the pod and back (tar over exec stdin and
    stdout), compared byte for byte."""
    size = 12 << 20
    src = os.path.join(lab.base, "cp-%s.bin" % ver)
    back = src + ".back"
    with open(src, "wb") as f:
        f.write(os.urandom(size))
    mark = lab.log_mark()
    rc, out, err, t_in = lab.kubectl(ver, "cp", src, "demo:/tmp/cp.bin", "-c", "loop",
                                     timeout=120)
    seq_in = lab.requests_since(mark, "/exec")
    check(rc == 0, "kubectl %s cp to the pod: expected rc 0, got %d, stderr %s" %
          (ver, rc, show(err)))
    mark = lab.log_mark()
    rc, out, err, t_out = lab.kubectl(ver, "cp", "demo:/tmp/cp.bin", back, "-c", "loop",
                                      timeout=120)
    seq_out = lab.requests_since(mark, "/exec")
    check(rc == 0 and err in (b"", b"tar: removing leading '/' from member names\n"),
          "kubectl %s cp from the pod: expected rc 0 (at most tar's note on stderr), got %d, "
          "stderr %s" % (ver, rc, show(err)))
    a, b = open(src, "rb").read(), open(back, "rb").read()
    check(a == b, "kubectl %s cp round trip: expected %d bytes sha256 %s, got %d bytes sha256 %s"
          % (ver, len(a), h.sha256(a), len(b), h.sha256(b)))
    print("for the record: kubectl %s cp %d MiB: to the pod %.2f s (%.1f MiB/s, requests %s), "
          "back %.2f s (%.1f MiB/s, requests %s)" %
          (ver, size >> 20, t_in, (size >> 20) / t_in, seq_in, t_out, (size >> 20) / t_out,
           seq_out), flush=True)
    os.unlink(src)
    os.unlink(back)


# ---- checks: node proxy, logs, errors --------------------------------------------------------

def node_metrics(lab, ver):
    """lab §10 #13: the node's /metrics through the node proxy (X-Forwarded-Uri routes it)."""
    rc, out, err, _ = lab.kubectl(ver, "get", "--raw", "/api/v1/nodes/%s/proxy/metrics" % NODE)
    want = fake_kubelet.METRICS
    check(rc == 0 and out == want and err == b"",
          "kubectl %s get --raw metrics: expected rc 0 and the kubelet's %d bytes (sha256 %s), "
          "got rc %d, %d bytes (sha256 %s) %s, stderr %s" %
          (ver, len(want), h.sha256(want)[:16], rc, len(out), h.sha256(out)[:16], show(out, 80),
           show(err)))


def unknown_pod(lab, ver):
    """lab §10 #14: the apiserver's NotFound, as kubectl prints it."""
    rc, out, err, _ = lab.kubectl(ver, "logs", "nosuch")
    want = b'error: error from server (NotFound): pods "nosuch" not found in namespace ' \
        b'"default"\n'
    check(rc == 1 and out == b"" and err == want,
          "kubectl %s logs nosuch: expected rc 1 and stderr %r, got rc %d, stdout %s, stderr %s"
          % (ver, want, rc, show(out), show(err)))


def logs_options(lab):
    """lab §10 #8/#10 and more: kubectl logs with --tail, --timestamps, --limit-bytes, --since,
    byte for byte against the kubelet's rules applied to the file containerd wrote."""
    from cri_logs_test import kubelet_logs, records, rfc3339_ns  # the kubelet's rules
    lab.container("logger", "echo one; echo two >&2; echo three; echo four; echo five; "
                  "sleep 6; echo six; echo seven >&2; echo marker-done; exec sleep 600")
    data = lab.wait_log("logger", b"marker-done\n")
    recs, _ = records(data)
    # The time-sensitive ones first, back to back: the last three records are written 6 s
    # after the others, so --since=4s keeps exactly them for 4 s after they are written (a
    # loaded CI machine runs two kubectl calls well within that), and any cut inside the gap
    # is --since=4s's (the streams' records are not strictly ordered by time: "seven" on
    # stderr may carry an earlier stamp than "six").
    cut = rfc3339_ns([r for r in recs if r and r[3] == b"five"][0][0]) + 3 * 10**9
    cases = [(["--since=4s"], {"since_ns": cut}),
             (["--since=4s", "--limit-bytes=9"], None),
             ([], {}),
             (["--tail=2"], {"tail": 2}),
             (["--tail=2", "--timestamps"], {"tail": 2, "timestamps": True}),
             (["--limit-bytes=30"], {"limit": 30}),
             (["--tail=4", "--timestamps", "--limit-bytes=50"],
              {"tail": 4, "timestamps": True, "limit": 50})]
    for args, kw in cases:
        rc, out, err, _ = lab.kubectl("1.32", "logs", "demo", "-c", "logger", *args)
        want = kubelet_logs(data, **kw) if kw is not None else \
            kubelet_logs(data, since_ns=cut, limit=9)
        check(rc == 0 and out == want and err == b"",
              "kubectl logs %s: expected rc 0 and %s, got rc %d, %s, stderr %s" %
              (" ".join(args), show(want), rc, show(out), show(err)))
    for ver in ("1.27", "1.33"):
        rc, out, err, _ = lab.kubectl(ver, "logs", "demo", "-c", "logger", "--tail=2")
        want = kubelet_logs(data, tail=2)
        check(rc == 0 and out == want, "kubectl %s logs --tail=2: expected %s, got rc %d %s %s"
              % (ver, show(want), rc, show(out), show(err)))
    rc, out, err, _ = lab.kubectl("1.32", "logs", "demo", "-c", "loop", "--tail=2",
                                  "--timestamps")
    lines = out.split(b"\n")
    check(rc == 0 and len(lines) == 3 and lines[2] == b"" and all(
        re.match(rb"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z (line \d+ \d\d:\d\d:\d\d|got: .*|"
                 rb"stderr-echo: .*)$", ln) for ln in lines[:2]),
          "kubectl logs demo -c loop --tail=2 --timestamps: expected two lines "
          "\"<RFC3339Nano> line N hh:mm:ss\", got rc %d %s %s" % (rc, show(out), show(err)))


def logs_follow(lab):
    """lab §10 #9: -f on the loop shows one old line then new ones until stopped (timeout →
    124); -f on a container that exits ends with it, every line there."""
    r = subprocess.run(["timeout", "4", kubectl_path("1.32"), "logs", "-f", "demo", "-c", "loop",
                        "--tail=1"], capture_output=True, env=lab.kenv(), timeout=30,
                       preexec_fn=h._die_with_parent)
    lines = r.stdout.split(b"\n")
    nums = [int(ln.split()[1]) for ln in lines if LINE_RE.match(ln)]
    check(r.returncode == 124 and len(nums) >= 2 and nums == list(range(nums[0],
                                                                         nums[0] + len(nums))),
          "timeout 4 kubectl logs -f --tail=1: expected rc 124 and at least two consecutive "
          "\"line N\", got rc %d, %s, stderr %s" % (r.returncode, show(r.stdout),
                                                    show(r.stderr)))
    lab.container("follower", "echo a; sleep 1; echo b >&2; sleep 1; echo c; sleep 0.2")
    lab.wait_log("follower", b"a\n")
    rc, out, err, dt = lab.kubectl("1.32", "logs", "-f", "demo", "-c", "follower", timeout=30)
    check(rc == 0 and out == b"a\nb\nc\n" and err == b"",
          "kubectl logs -f of a container that exits: expected rc 0 and 'a\\nb\\nc\\n', got rc "
          "%d %s %s" % (rc, show(out), show(err)))


def logs_previous(lab):
    """--previous reads the attempt before the running one (a container that exited, then its
    restart)."""
    first = lab.container("restarts", "echo attempt-zero; exit 3")
    lab.wait_log("restarts", b"attempt-zero\n")
    lab.wait_exited(first)
    rc, out, err, _ = lab.kubectl("1.32", "logs", "demo", "-c", "restarts", "--previous")
    want_err = b'Error from server (BadRequest): previous terminated container "restarts" in ' \
        b'pod "demo" not found\n'
    check(rc == 1 and err == want_err,
          "kubectl logs --previous before a restart: expected rc 1, stderr %r; got rc %d, %s, %s"
          % (want_err, rc, show(out), show(err)))
    lab.container("restarts", "echo attempt-one; exec sleep 600", attempt=1)
    lab.wait_log("restarts", b"attempt-one\n", attempt=1)
    for args, want in ((["--previous"], b"attempt-zero\n"), ([], b"attempt-one\n"),
                       (["-p", "--timestamps"], None)):
        rc, out, err, _ = lab.kubectl("1.32", "logs", "demo", "-c", "restarts", *args)
        ok = out == want if want else re.match(
            rb"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z attempt-zero\n$", out) is not None
        check(rc == 0 and ok and err == b"",
              "kubectl logs -c restarts %s: expected rc 0 and %r, got rc %d %s %s" %
              (" ".join(args), want or "<timestamp> attempt-zero\\n", rc, show(out), show(err)))


README = os.path.join(os.path.dirname(os.path.dirname(HERE)), "cloudstream", "README.md")


def readme_error_rows():
    """The rows of cloudstream/README.md's table "What kubectl prints, as the e2e test sees it":
    (kubectl arguments, status, the last line kubectl writes on stderr)."""
    rows, inside = [], False
    with open(README) as f:
        for line in f:
            if line.startswith("#"):
                inside = "as the e2e test sees it" in line
            elif inside and line.startswith("| `kubectl "):
                cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
                check(len(cells) == 3 and all(c.startswith("`") and c.endswith("`")
                                              for c in (cells[0], cells[2])),
                      "cloudstream/README.md: malformed row %r" % line)
                rows.append((cells[0][1:-1].split()[1:], int(cells[1]), cells[2][1:-1]))
    check(len(rows) >= 8, "cloudstream/README.md: %d rows in the e2e error table" % len(rows))
    return rows


def errors_as_documented(lab, ver):
    """Every row of cloudstream/README.md's e2e error table: kubectl exits 1 and its last line
    on stderr is the row's text, which carries the reason (a container the runtime does not
    have, a pod on a node with no tunnel, a refused port); the status is the one the stand-in
    (kube-apiserver's rules) passed, from its access log."""
    for args, status, text in readme_error_rows():
        mark = lab.log_mark()
        rc, out, err, _ = lab.kubectl(ver, *args, timeout=30)
        last = err.decode(errors="replace").rstrip("\n").split("\n")[-1]
        check(rc == 1 and last == text,
              "kubectl %s %s: expected rc 1 and the README's %r, got rc %d, stdout %s, stderr %s"
              % (ver, " ".join(args), text, rc, show(out), show(err)))
        deadline = time.monotonic() + 5  # nginx logs an upgrade when its connection ends
        while True:
            seen = [int(r["status"]) for r in lab.api.access_log()[mark:]
                    if r["kubelet_uri"] and int(r["status"]) >= 400]
            if seen or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        check(seen and all(st == status for st in seen),
              "kubectl %s %s: expected status %d in the apiserver's access log, got %r" %
              (ver, " ".join(args), status, seen))


# ---- checks: the python client ---------------------------------------------------------------

def python_client(lab):
    """python3-kubernetes (websocket v4 straight through: GET, stderr=True spellings):
    kubernetes.stream.stream exec with stdout, stderr, stdin and the exit code, and portforward
    on both web ports, bodies equal to the direct ones."""
    from kubernetes import client, config
    from kubernetes.stream import portforward, stream
    cfg = client.Configuration()
    config.load_kube_config(config_file=lab.api.kubeconfig, client_configuration=cfg)
    core = client.CoreV1Api(client.ApiClient(cfg))
    out = stream(core.connect_get_namespaced_pod_exec, "demo", "default", container="loop",
                 command=["sh", "-c", "echo py-out; echo py-err >&2"], stderr=True, stdin=False,
                 stdout=True, tty=False)
    # stdout and stderr are two channels: their relative order is the runtime's, not ours
    check(sorted(out.splitlines(True)) == ["py-err\n", "py-out\n"],
          "python exec: expected the lines 'py-out\\n' and 'py-err\\n', got %r" % out)
    ws = stream(core.connect_get_namespaced_pod_exec, "demo", "default", container="loop",
                command=["sh", "-c", "read x; echo got-$x; echo e-$x >&2; exit 5"], stderr=True,
                stdin=True, stdout=True, tty=False, _preload_content=False)
    ws.write_stdin("py-stdin\n")
    ws.run_forever(timeout=20)
    got = (ws.read_stdout(timeout=1), ws.read_stderr(timeout=1), ws.returncode)
    ws.close()
    check(got == ("got-py-stdin\n", "e-py-stdin\n", 5),
          "python exec -i: expected ('got-py-stdin\\n', 'e-py-stdin\\n', 5), got %r" % (got,))
    for port, size in zip(lab.web_ports, WEB_SIZES):
        st, direct = http_get(port)
        pf = portforward(core.connect_get_namespaced_pod_portforward, "demo", "default",
                         ports=str(port))
        s = pf.socket(port)
        s.setblocking(True)
        s.settimeout(30)
        s.sendall(b"GET /blob HTTP/1.0\r\nHost: pod\r\n\r\n")
        resp = bytearray()
        while True:
            c = s.recv(1 << 16)
            if not c:
                break
            resp += c
        s.close()
        err = pf.error(port)
        pf.close()
        body = bytes(resp).split(b"\r\n\r\n", 1)[-1]
        check(resp.startswith(b"HTTP/1.") and b" 200 " in resp[:20] and body == direct and
              err is None,
              "python portforward %d: expected 200 and the %d bytes served directly, got %s, "
              "%d body bytes, error %r" % (port, len(direct), show(bytes(resp[:60])), len(body),
                                           err))


def apiserver_rewrite(lab):
    """The stand-in's kubelet-side targets for the requests this group made (lab §4, §6.2):
    only true flags, renamed, keys sorted, command repeated in order; python's True spelling."""
    seen = {}
    for r in lab.api.access_log():
        seen.setdefault(r["kubelet_uri"], r["status"])
    q_exec = ("command=sh&command=-c&command=read+x%3B+echo+got-%24x%3B+echo+e-%24x+%3E%262%3B"
              "+exit+5")
    for uri in ("/containerLogs/default/demo/logger?tailLines=2&timestamps=true",
                "/containerLogs/default/demo/logger?limitBytes=9&sinceSeconds=4",
                "/containerLogs/default/demo/loop?follow=true&tailLines=1",
                "/containerLogs/default/demo/restarts?previous=true&timestamps=true",
                "/exec/default/demo/loop?%s&error=1&input=1&output=1" % q_exec,
                "/portForward/default/demo?port=%d" % lab.web_ports[0],
                "/metrics"):
        check(uri in seen, "the apiserver stand-in: expected a request rewritten to %r, saw %r"
              % (uri, sorted(u for u in seen if u)))


# ---- main ------------------------------------------------------------------------------------

def front_door_carried_it(lab):
    """Group frontdoor, last: every kubelet-side connection nginx made was a CONNECT through the
    front door answered 200 (the shim's dials, cloudstream's access lines), none failed, and
    the door node's edge carried them as raw TCP to its kubelet target."""
    shim = open(lab.shim.logpath, "rb").read().decode(errors="replace")
    ok = len(re.findall(r"dial \d+: 200", shim))
    bad = re.findall(r"dial \d+: failed: .*", shim)
    cloud = open(lab.cloud.logpath, "rb").read().decode(errors="replace")
    connects = len(re.findall(r"access: CONNECT %s:10250 200 " % DOOR_NODE, cloud))
    edge = open(lab.door_edge.logpath, "rb").read().decode(errors="replace")
    raw = len(re.findall(r"access: TCP_CONNECT ", edge))
    print("     for the record: %d dials through the front door, %d CONNECT access lines, %d "
          "raw TCP streams on %s's edge" % (ok, connects, raw, DOOR_NODE), flush=True)
    check(ok >= 10 and not bad, "shim: %d dials answered 200, failures: %r" % (ok, bad[:3]))
    check(connects >= ok - 2, "cloudstream logged %d CONNECTs for %d dials" % (connects, ok))
    check(raw >= ok - 2, "%s's edge dialled its kubelet %d times for %d CONNECTs" % (
        DOOR_NODE, raw, ok))


GROUPS = {
    "streams": [("exec_status", exec_status, VERSIONS), ("exec_stdin", exec_stdin, VERSIONS),
                ("exec_tty", exec_tty, VERSIONS), ("attach_stdin", attach_stdin, VERSIONS),
                ("attach_plain", attach_plain, ("1.27", "1.32")),
                ("port_forward", port_forward, VERSIONS),
                ("cp", copy_both_ways, ("1.32", "1.27")), ("exec_timing", exec_timing, None)],
    "logs": [("logs_options", logs_options, None), ("logs_previous", logs_previous, None),
             ("logs_follow", logs_follow, None), ("node_metrics", node_metrics, VERSIONS),
             ("unknown_pod", unknown_pod, ("1.32",)),
             ("errors_as_documented", errors_as_documented, VERSIONS),
             ("python_client", python_client, None),
             ("apiserver_rewrite", apiserver_rewrite, None)],
    # exec_stdin first: it counts the apiserver's /exec lines after a mark, and nginx writes an
    # upgraded request's line when its connection ends, which can be after kubectl has exited
    # (an exec_status just before would land in its count)
    "goagent": [("exec_stdin", exec_stdin, ("1.32",)), ("exec_status", exec_status, VERSIONS),
                ("exec_tty", exec_tty, ("1.32",)), ("port_forward", port_forward, ("1.32",)),
                ("node_metrics", node_metrics, ("1.32",))],
    # exec_stdin first, as above
    "images": [("exec_stdin", exec_stdin, ("1.32",)), ("exec_status", exec_status, VERSIONS),
               ("exec_tty", exec_tty, ("1.32",)), ("attach_stdin", attach_stdin, ("1.32",)),
               ("port_forward", port_forward, ("1.32",)), ("cp", copy_both_ways, ("1.32",)),
               ("logs_options", logs_options, None), ("node_metrics", node_metrics, ("1.32",))],
    # exec_stdin first, as above
    "frontdoor": [("exec_stdin", exec_stdin, ("1.32",)), ("exec_status", exec_status, VERSIONS),
                  ("exec_tty", exec_tty, ("1.32",)), ("port_forward", port_forward, ("1.32",)),
                  ("logs_follow", logs_follow, None), ("logs_options", logs_options, None),
                  ("node_metrics", node_metrics, VERSIONS),
                  ("front_door_carried_it", front_door_carried_it, None)],
}


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in GROUPS:
        print("usage: kubectl_test.py %s [TEST...]" % "|".join(GROUPS))
        return 2
    group = sys.argv.pop(1)
    miss = missing_peers()
    if group == "goagent" and not os.access(go_agent_test.AGENT, os.X_OK):
        if shutil.which("go") is not None:
            print("FAIL %s is missing: integration.go_package builds it" % go_agent_test.AGENT)
            return 1
        miss.append("go (golang-go)")
    if group == "images":
        if shutil.which("umoci") is None:
            miss.append("umoci")
        elif not os.path.isdir(images_test.PKG_DIR):
            print("FAIL %s is missing: integration.packages_build makes it" %
                  images_test.PKG_DIR)
            return 1
    if os.geteuid() != 0 or miss:
        why = "needs root" if os.geteuid() != 0 else "missing " + ", ".join(miss)
        if os.environ.get("CI") == "true":
            print("CI needs the real peers for the e2e tests: " + why)
            return 1
        print("skipped: " + why)
        return 77
    lab = Lab(group)
    rc = 1
    try:
        lab.up()
        tests = []
        for name, fn, versions in GROUPS[group]:
            for ver in versions or (None,):
                t = (lambda f, v: (lambda: f(lab, v)) if v else (lambda: f(lab)))(fn, ver)
                t.__name__ = "e2e.%s%s" % (name, "_" + ver if ver else "")
                tests.append(t)
        rc = h.run(tests)
    finally:
        codes = lab.down(rc != 0)
        bad = {n: c for n, c in codes.items() if c != 0}
        if bad:
            print("FAIL daemons did not exit 0 after SIGTERM: %r" % bad)
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
