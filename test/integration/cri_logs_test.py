#!/usr/bin/python3
"""containerLogs served by edgestream from a real containerd's CRI log files, through
cloudstream, with the kubelet's semantics: every parameter, partial records merged, stdout and
stderr, previous, follow to a container's exit, rotation while following, and the errors.

Expected bodies come from a small reference of the kubelet's rules (kubelet_logs below) applied to
the very log file containerd wrote, so the comparison is byte for byte. Skipped (77) when
containerd is missing or the test is not root."""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
import harness as h  # noqa: E402
from harness import check  # noqa: E402
from containerd import Containerd  # noqa: E402
import images  # noqa: E402

TOOL = os.path.join(h.BIN, "cri", "stream-cri")
NODE = [("Host", "edge-1:10350")]


def cri(ctd, *args):
    r = subprocess.run([TOOL, "--socket", ctd.socket] + list(args), capture_output=True,
                       timeout=30)
    check(r.returncode == 0, "stream-cri %s: %r" % (" ".join(args[:2]), r.stderr))
    return r.stdout.decode().strip()


# ---- the reference: the kubelet's rules (spec/kubelet-http.md §5) on a file's bytes ----------

def rfc3339_ns(ts):
    date, rest = ts[:19], ts[19:]
    frac = ""
    if rest.startswith("."):
        i = 1
        while i < len(rest) and rest[i].isdigit():
            i += 1
        frac, rest = rest[1:i], rest[i:]
    assert rest == "Z", ts
    secs = int(time.mktime(time.strptime(date, "%Y-%m-%dT%H:%M:%S")) - time.timezone)
    return secs * 10**9 + int((frac + "000000000")[:9])


def records(data):
    """Complete lines as (line, parsed or None); the unterminated rest separately."""
    lines = data.split(b"\n")
    out = []
    for line in lines[:-1]:
        parts = line.split(b" ", 3)
        if len(parts) == 4 and parts[1] in (b"stdout", b"stderr") and parts[2][:1] in b"PF":
            out.append((parts[0].decode(), parts[1].decode(), parts[2][:1] == b"P", parts[3]))
        elif len(parts) == 3 and parts[1] in (b"stdout", b"stderr") and parts[2][:1] in b"PF":
            out.append((parts[0].decode(), parts[1].decode(), parts[2][:1] == b"P", b""))
        else:
            out.append(None)
    return out, lines[-1]


def kubelet_logs(data, tail=None, timestamps=False, since_ns=None, limit=None,
                 streams=("stdout", "stderr"), follow=False):
    recs, rest = records(data)
    if rest and not follow:
        recs.append(records(rest + b"\n")[0][0])
    if tail is not None:
        complete = len(recs) - (1 if rest and not follow else 0)
        start = max(0, complete - tail)
        recs = recs[start:start + tail] if not follow else recs[start:]
    out = bytearray()
    mid = {"stdout": False, "stderr": False}
    for r in recs:
        if r is None:
            continue
        ts, stream, partial, content = r
        if stream not in streams or (since_ns is not None and rfc3339_ns(ts) < since_ns):
            continue
        piece = b""
        if timestamps and not mid[stream]:
            whole, _, frac = ts[:-1].partition(".")
            piece += ("%s.%sZ " % (whole, (frac + "000000000")[:9])).encode()
        piece += content + (b"" if partial else b"\n")
        mid[stream] = partial
        if limit is not None and len(out) + len(piece) >= limit:
            out += piece[:limit - len(out)]
            break
        out += piece
    return bytes(out)


# ---- the chain ---------------------------------------------------------------------------

class Chain:
    def __init__(self, ctd):
        self.env = h.Env("cri-logs")
        self.cloud = h.start_cloudstream(self.env)
        self.edge = h.start_edgestream(self.env, self.cloud, None,
                                       extra=["--cri-socket", ctd.socket])
        self.api = h.Api(self.env, self.cloud.ports["stream"])

    def logs(self, pod, ctr, query="", timeout=20.0, proxy=False):
        """As kube-apiserver's pods/log client asks (no X-Forwarded-Uri), or with @proxy as its
        node proxy passes `get --raw /api/v1/nodes/N/proxy/containerLogs/...` on."""
        target = "/containerLogs/default/%s/%s%s" % (pod, ctr, "?" + query if query else "")
        fwd = [("X-Forwarded-Uri", "/api/v1/nodes/edge-1/proxy" + target.split("?")[0])]
        st, hdrs, body, s = self.api.request("GET", target, NODE + (fwd if proxy else []),
                                             timeout=timeout)
        s.close()
        return st, hdrs, body


class Pod:
    def __init__(self, ctd, base, name):
        self.ctd, self.name, self.uid = ctd, name, name + "-uid"
        self.dir = os.path.join(base, "pods", "default_%s_%s" % (name, self.uid))
        os.makedirs(self.dir, exist_ok=True)
        self.sandbox = cri(ctd, "run-pod", "default", name, self.uid, self.dir)

    def container(self, ctr, script, attempt=0):
        return cri(self.ctd, "create-container", "default", self.name, self.uid, self.dir,
                   self.sandbox, ctr, images.BUSYBOX_IMAGE, "--attempt", str(attempt), "--",
                   "sh", "-c", script)

    def log_path(self, ctr, attempt=0):
        return os.path.join(self.dir, ctr, "%d.log" % attempt)

    def wait_log(self, ctr, marker, attempt=0, timeout=15.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            p = self.log_path(ctr, attempt)
            data = open(p, "rb").read() if os.path.exists(p) else b""
            if marker in data:
                return data
            time.sleep(0.05)
        raise h.Fail("%s/%s: %r never appeared in the log file" % (self.name, ctr, marker))

    def wait_exited(self, cid, timeout=15.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "EXITED" in cri(self.ctd, "status", cid):
                return
            time.sleep(0.1)
        raise h.Fail("container %s did not exit" % cid)

    def remove(self):
        subprocess.run([TOOL, "--socket", self.ctd.socket, "remove-pod", self.sandbox],
                       capture_output=True, timeout=30)


LONG = 20000  # over containerd's 16 KiB line limit: a P record and an F record
SCRIPT = ("echo one; echo two >&2; head -c %d /dev/zero | tr '\\0' x; echo; echo three; "
          "sleep 3; echo four; echo five >&2; echo marker-done; exec sleep 600" % LONG)


def every_parameter(ctd, base, chain):
    """One container's file read with each option, byte-for-byte against the reference."""
    pod = Pod(ctd, base, "logs")
    try:
        pod.container("app", SCRIPT)
        data = pod.wait_log("app", b"marker-done\n")
        recs, _ = records(data)
        check(any(r and r[2] for r in recs), "no partial (P) record in %r" % data[:300])
        t_q = time.time_ns()
        st, hdrs, body = chain.logs("logs", "app", "sinceSeconds=2")
        check(st == 200, "sinceSeconds: %d %r" % (st, body))
        want = kubelet_logs(data, since_ns=t_q - 2 * 10**9)
        check(body == want and b"four\n" in body and b"three" not in body,
              "sinceSeconds=2: %r, want %r" % (body, want))
        four = [r for r in recs if r and r[3] == b"four"][0][0]
        cases = [
            ("", {}),
            ("tailLines=2", {"tail": 2}),
            ("tailLines=0", {"tail": 0}),
            ("tailLines=1000", {"tail": 1000}),
            ("tail=3", {"tail": 3}),
            ("timestamps=true", {"timestamps": True}),
            ("timestamps=true&tailLines=4", {"timestamps": True, "tail": 4}),
            ("limitBytes=30", {"limit": 30}),
            ("limitBytes=10000&timestamps=true", {"limit": 10000, "timestamps": True}),
            ("sinceTime=" + four, {"since_ns": rfc3339_ns(four)}),
            ("stream=Stdout", {"streams": ("stdout",)}),
            ("stream=Stderr&timestamps=1", {"streams": ("stderr",), "timestamps": True}),
        ]
        for query, kw in cases:
            st, hdrs, body = chain.logs("logs", "app", query)
            want = kubelet_logs(data, **kw)
            check(st == 200 and hdrs.get("transfer-encoding") == "chunked" and
                  hdrs.get("content-type", "").startswith("text/plain"),
                  "%r: %d %r" % (query, st, hdrs))
            check(body == want, "%r: %d bytes %r…, want %d bytes %r…" %
                  (query, len(body), body[:120], len(want), want[:120]))
        # partial records come out as one line
        st, _, body = chain.logs("logs", "app")
        check(b"\n" + b"x" * LONG + b"\n" in body, "the long line is not whole")
        print("every parameter: %d cases, %d-byte file" % (len(cases) + 1, len(data)))
    finally:
        pod.remove()


def previous(ctd, base, chain):
    """`previous` reads the attempt before the newest; with none, 400 as the kubelet says."""
    pod = Pod(ctd, base, "prev")
    try:
        first = pod.container("app", "echo attempt-zero; exit 3")
        pod.wait_log("app", b"attempt-zero")
        pod.wait_exited(first)
        st, _, body = chain.logs("prev", "app", "previous=true")
        check(st == 400 and body == b'previous terminated container "app" in pod "prev" not found',
              "previous without one: %d %r" % (st, body))
        pod.container("app", "echo attempt-one; exec sleep 600", attempt=1)
        pod.wait_log("app", b"attempt-one", attempt=1)
        st, _, body = chain.logs("prev", "app", "previous=true")
        check(st == 200 and body == b"attempt-zero\n", "previous: %d %r" % (st, body))
        st, _, body = chain.logs("prev", "app")
        check(st == 200 and body == b"attempt-one\n", "current: %d %r" % (st, body))
        # following a terminated container reads it and ends
        st, _, body = chain.logs("prev", "app", "previous=true&follow=true", timeout=10)
        check(st == 200 and body == b"attempt-zero\n", "previous+follow: %d %r" % (st, body))
    finally:
        pod.remove()


class Follower(threading.Thread):
    """A follow request read to its end on its own thread."""

    def __init__(self, chain, pod, ctr, query):
        super().__init__(daemon=True)
        self.s = chain.api.connect(timeout=30)
        target = "/containerLogs/default/%s/%s?%s" % (pod, ctr, query)
        self.s.sendall(h.head("GET", target, NODE))
        self.status, self.hdrs, self.rest = h.read_head(self.s)  # sent before any line
        self.body, self.error, self.ended = None, None, None
        self.start()

    def run(self):
        try:
            self.body = h.read_body(self.s, self.hdrs, self.rest)
            self.ended = time.monotonic()
        except Exception as e:  # noqa: BLE001 - reported by the test
            self.error = e
        finally:
            self.s.close()


def follow(ctd, base, chain):
    """follow: the head comes at once, lines as they are written, and the answer ends when the
    container exits (its last lines included)."""
    pod = Pod(ctd, base, "follow")
    try:
        cid = pod.container("ticker", "sleep 1; i=0; while [ $i -lt 8 ]; do i=$((i+1)); "
                            "echo tick $i; echo tock $i >&2; sleep 0.25; done; printf no-newline")
        f = Follower(chain, "follow", "ticker", "follow=true&timestamps=true")
        check(f.status == 200, "follow: %d" % f.status)
        f.join(20)
        check(not f.is_alive(), "follow did not end after the container exited")
        check(f.error is None, "follow: %r" % f.error)
        pod.wait_exited(cid)
        data = open(pod.log_path("ticker"), "rb").read()
        want = kubelet_logs(data, timestamps=True)
        check(f.body == want, "follow body %r, want %r" % (f.body[-200:], want[-200:]))
        # containerd ends an unterminated last line with a P record: no newline added
        check(f.body.endswith(b"Z no-newline"), "the last, unterminated record: %r"
              % f.body[-60:])
        # tailLines only picks the start when following
        pod2 = Pod(ctd, base, "follow2")
        try:
            pod2.container("t", "echo a; echo b; echo c; sleep 1.5; echo d; sleep 0.5")
            pod2.wait_log("t", b"c\n")
            f = Follower(chain, "follow2", "t", "follow=true&tailLines=1")
            f.join(20)
            check(f.error is None and f.body == b"c\nd\n", "follow+tail: %r %r" %
                  (f.body, f.error))
        finally:
            pod2.remove()
    finally:
        pod.remove()


def edge_streams(chain):
    s = socket.create_connection(("127.0.0.1", chain.edge.ports["admin"]), timeout=5)
    s.sendall(h.head("GET", "/metrics", [("Host", "x")]))
    status, hdrs, rest = h.read_head(s)
    text = h.read_body(s, hdrs, rest).decode()
    s.close()
    return int(re.search(r"^edgestream_streams (\d+)$", text, re.M).group(1))


def client_goes(ctd, base, chain):
    """Followers of a running container whose clients go away (one before any line, one after
    some, several at once on one directory): their streams end, the shared watch goes with the
    last one, and new followers still work."""
    pod = Pod(ctd, base, "gone")
    try:
        pod.container("app", "i=0; while true; do i=$((i+1)); echo g $i; sleep 0.1; done")
        pod.wait_log("app", b"g 2\n")
        for round_ in range(2):
            socks = []
            for i in range(4):
                s = chain.api.connect(timeout=10)
                s.sendall(h.head("GET", "/containerLogs/default/gone/app?follow=true&tailLines=1",
                                 NODE))
                st, hdrs, rest = h.read_head(s)
                check(st == 200, "follower %d: %d" % (i, st))
                if i % 2:
                    h.recv_until(s, lambda b: b.count(b"\n") >= 3, rest)  # a few lines first
                socks.append(s)
            check(edge_streams(chain) >= 4, "followers not counted")
            for s in socks:
                s.close()
            deadline = time.monotonic() + 10
            while edge_streams(chain) != 0 and time.monotonic() < deadline:
                time.sleep(0.1)
            check(edge_streams(chain) == 0, "round %d: %d streams left after the clients went"
                  % (round_, edge_streams(chain)))
    finally:
        pod.remove()


def rotation(ctd, base, chain):
    """A log rotated while followed (renamed, then ReopenContainerLog as the kubelet does): the
    old file is read to its end, then the new one from its start; nothing lost or repeated."""
    pod = Pod(ctd, base, "rot")
    try:
        cid = pod.container("app", "i=0; while [ $i -lt 30 ]; do i=$((i+1)); echo r $i; "
                            "sleep 0.1; done")
        pod.wait_log("app", b"r 3\n")
        f = Follower(chain, "rot", "app", "follow=true")
        pod.wait_log("app", b"r 8\n")
        old = pod.log_path("app") + ".20261122-000000"
        os.rename(pod.log_path("app"), old)
        cri(ctd, "reopen-log", cid)
        f.join(20)
        check(not f.is_alive() and f.error is None, "rotation: %r" % f.error)
        data = open(old, "rb").read() + open(pod.log_path("app"), "rb").read()
        want = b"".join(b"r %d\n" % i for i in range(1, 31))
        check(kubelet_logs(data) == want, "the files themselves: %r" % data)
        check(f.body == want, "followed across the rotation: %r" % f.body)
    finally:
        pod.remove()


def errors(ctd, base, chain):
    """Bad options → 400/422 (the kubelet's codes), a pod or container the runtime does not have
    → 400 "is not available" (the kubelet's validateContainerLogStatus). To kube-apiserver's
    pods/log client the body is the text alone and 422 is 400 (it shows a 400's body, not a
    422's: stream/status.h); through the node proxy a Status JSON with the kubelet's code."""
    pod = Pod(ctd, base, "errs")
    try:
        pod.container("app", "echo hi; exec sleep 600")
        pod.wait_log("app", b"hi")
        for query, code, text in (
                ("tailLines=-1", 422, "tailLines must be 0 or more"),
                ("tailLines=x", 400, "Unable to decode query."),
                ("sinceSeconds=0", 422, "sinceSeconds must be a positive integer"),
                ("limitBytes=0", 422, "limitBytes must be a positive integer"),
                ("stream=Both", 422, None), ("sinceSeconds=5&sinceTime=2026-01-01T00:00:00Z",
                                              422, None),
                ("sinceTime=yesterday", 400, "Unable to decode query."),
                ("stream=Stdout&tailLines=1", 422, None)):
            st, hdrs, body = chain.logs("errs", "app", query)
            check(st == 400 and hdrs.get("content-type") == "text/plain; charset=utf-8" and
                  not body.startswith(b"{") and (text is None or body == text.encode()),
                  "%r (pods/log): %d %r %r, want 400 and the text %r" % (query, st,
                                                                         hdrs.get("content-type"),
                                                                         body, text))
            st, hdrs, body = chain.logs("errs", "app", query, proxy=True)
            check(st == code and b'"kind":"Status"' in body and
                  hdrs.get("content-type") == "application/json",
                  "%r (node proxy): %d %r, want %d" % (query, st, body, code))
        for pod_name, ctr in (("errs", "nope"), ("nope", "app")):
            want = 'container "%s" in pod "%s" is not available' % (ctr, pod_name)
            st, hdrs, body = chain.logs(pod_name, ctr)
            check(st == 400 and body == want.encode() and
                  hdrs.get("content-type") == "text/plain; charset=utf-8",
                  "%s/%s (pods/log): %d %r, want 400 %r" % (pod_name, ctr, st, body, want))
            st, hdrs, body = chain.logs(pod_name, ctr, proxy=True)
            check(st == 400 and json.loads(body)["message"] == want and
                  json.loads(body)["reason"] == "BadRequest",
                  "%s/%s (node proxy): %d %r, want 400 %r" % (pod_name, ctr, st, body, want))
        st, _, body = chain.logs("errs", "app")  # the stream still works after all that
        check(st == 200 and body == b"hi\n", "after the errors: %d %r" % (st, body))
    finally:
        pod.remove()


def main():
    if os.geteuid() != 0 or shutil.which("containerd") is None:
        if os.environ.get("CI") == "true":
            print("CI needs root and containerd for this test")
            return 1
        print("skipped: needs root and containerd")
        return 77
    base = tempfile.mkdtemp(prefix="cri-logs.", dir=os.environ.get("ST_TEST_TMPDIR", "/tmp"))
    ctd = Containerd(base)
    rc = 1
    chain = None
    try:
        ctd.start()
        images.import_into(ctd, images.build(os.path.join(base, "images")))
        chain = Chain(ctd)
        tests = []
        for fn in (every_parameter, previous, follow, client_goes, rotation, errors):
            t = (lambda f: lambda: f(ctd, base, chain))(fn)
            t.__name__ = "cri_logs." + fn.__name__
            tests.append(t)
        rc = h.run(tests)
        return rc
    finally:
        if chain:
            h.close_env(chain.env, rc != 0)
        if rc != 0:
            print("---- containerd (last lines) ----\n" + ctd.tail())
        ctd.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
