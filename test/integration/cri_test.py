#!/usr/bin/python3
"""The CRI client (cri/, through the stream-cri tool) against a real containerd started for the
test: Version, empty lists, NOT_FOUND with the runtime's message, no runtime on the socket.
Skipped (77) when containerd is not installed or the test is not root."""
import json
import os
import socket
import struct
import threading
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
import harness as h  # noqa: E402
from harness import check  # noqa: E402
from containerd import Containerd  # noqa: E402
import images  # noqa: E402

TOOL = os.path.join(h.BIN, "cri", "stream-cri")


def cri(ctd, *args, socket=None):
    r = subprocess.run([TOOL, "--socket", socket or ctd.socket] + list(args),
                       capture_output=True, timeout=30)
    return r.returncode, r.stdout.decode(), r.stderr.decode()


def version(ctd):
    rc, out, err = cri(ctd, "version")
    check(rc == 0 and out.startswith("runtime containerd ") and "CRI API v1" in out,
          "version: %d %r %r" % (rc, out, err))


def empty_lists(ctd):
    for what in (["sandboxes"], ["sandboxes", "default", "web"], ["containers"]):
        rc, out, err = cri(ctd, *what)
        check(rc == 0 and out == "", "%s: %d %r %r" % (what, rc, out, err))


def not_found(ctd):
    rc, out, err = cri(ctd, "status", "no-such-container")
    check(rc == 1 and "ContainerStatus: NOT_FOUND" in err and "no-such-container" in err,
          "status: %d %r" % (rc, err))
    rc, out, err = cri(ctd, "exec-url", "no-such-container", "ls")
    check(rc == 1 and "Exec: NOT_FOUND" in err, "exec-url: %d %r" % (rc, err))


def no_runtime(ctd):
    rc, out, err = cri(ctd, "version", socket=ctd.socket + ".missing")
    check(rc == 1 and "Couldn't connect" in err, "no runtime: %d %r" % (rc, err))


def pod_life_cycle(ctd, base):
    """A real host-network pod: create, find by the kubelet's labels, status and CRI log file,
    an exec URL from the runtime's streaming server, then remove."""
    logs = os.path.join(base, "pods", "default_demo_demo-uid-1")
    os.makedirs(logs, exist_ok=True)
    rc, out, err = cri(ctd, "run-pod", "default", "demo", "demo-uid-1", logs)
    check(rc == 0 and len(out.strip()) == 64, "run-pod: %d %r %r" % (rc, out, err))
    sandbox = out.strip()
    rc, out, err = cri(ctd, "create-container", "default", "demo", "demo-uid-1", logs, sandbox,
                       "loop", images.BUSYBOX_IMAGE, "--stdin", "--", "sh", "-c",
                       "echo hello from demo; echo to stderr >&2; exec sleep 600")
    check(rc == 0, "create-container: %d %r" % (rc, err))
    container = out.strip()
    rc, out, err = cri(ctd, "sandboxes", "default", "demo")
    check(rc == 0 and out.startswith(sandbox + " default/demo uid=demo-uid-1") and "READY" in out,
          "sandboxes: %r %r" % (out, err))
    rc, out, err = cri(ctd, "containers", sandbox, "loop")
    check(rc == 0 and out.startswith(container) and "RUNNING" in out, "containers: %r" % out)
    log_path = os.path.join(logs, "loop", "0.log")
    deadline = time.monotonic() + 10
    text = ""
    while time.monotonic() < deadline and "to stderr" not in text:
        text = open(log_path).read() if os.path.exists(log_path) else ""
        time.sleep(0.1)
    lines = sorted(l.split(" ", 1)[1] for l in text.splitlines())  # drop the timestamps
    check(lines == ["stderr F to stderr", "stdout F hello from demo"], "log file: %r" % text)
    rc, out, err = cri(ctd, "status", container)
    check(rc == 0 and "RUNNING" in out and ("log=" + log_path) in out, "status: %r" % out)
    rc, out, err = cri(ctd, "exec-url", container, "echo", "hi")
    want = "http://127.0.0.1:%d/exec/" % ctd.stream_port
    check(rc == 0 and out.startswith(want), "exec-url: %r %r" % (out, err))
    rc, out, err = cri(ctd, "port-forward-url", sandbox, "8080")
    check(rc == 0 and "/portforward/" in out, "port-forward-url: %r %r" % (out, err))
    rc, out, err = cri(ctd, "remove-pod", sandbox)
    check(rc == 0, "remove-pod: %r" % err)
    rc, out, err = cri(ctd, "sandboxes")
    check(rc == 0 and out == "", "after remove-pod: %r" % out)


SPDY = [("Connection", "Upgrade"), ("Upgrade", "SPDY/3.1")]


def edge_streaming(ctd, base):
    """edgestream's CRI backend behind cloudstream: exec, attach and portForward of a real pod
    reach containerd's streaming server (its 101 comes back through the tunnel); an unknown pod
    is a 404 and a bad exec a 400, both with the reason."""
    logs = os.path.join(base, "pods", "default_edge_edge-uid-1")
    os.makedirs(logs, exist_ok=True)
    rc, out, err = cri(ctd, "run-pod", "default", "edge", "edge-uid-1", logs)
    check(rc == 0, "run-pod: %r" % err)
    sandbox = out.strip()
    rc, out, err = cri(ctd, "create-container", "default", "edge", "edge-uid-1", logs, sandbox,
                       "app", images.BUSYBOX_IMAGE, "--stdin", "--", "sleep", "600")
    check(rc == 0, "create-container: %r" % err)
    env = h.Env("cri-edge")
    try:
        cloud = h.start_cloudstream(env)
        h.start_edgestream(env, cloud, None, extra=["--cri-socket", ctd.socket])
        api = h.Api(env, cloud.ports["stream"])
        for method, target, proto in (
                ("POST", "/exec/default/edge/app?command=echo&command=hi&output=1",
                 "v4.channel.k8s.io"),
                ("POST", "/attach/default/edge/app?output=1&input=1", "v4.channel.k8s.io"),
                ("POST", "/portForward/default/edge?port=8080", "portforward.k8s.io")):
            s = api.connect()
            s.sendall(h.head(method, target, [("Host", "edge-1:10350"),
                                              ("X-Stream-Protocol-Version", proto)] + SPDY))
            status, hdrs, _ = h.read_head(s)
            s.close()
            check(status == 101 and hdrs.get("upgrade", "").lower() == "spdy/3.1" and
                  hdrs.get("x-stream-protocol-version") == proto,
                  "%s: %d %r" % (target, status, hdrs))
        st, _, body, s = api.request("POST", "/exec/default/nope/app?command=ls&output=1",
                                     [("Host", "edge-1:10350")] + SPDY)
        s.close()
        check(st == 404 and b"default/nope has no ready sandbox" in body,
              "unknown pod: %d %r" % (st, body))
        st, _, body, s = api.request("POST", "/exec/default/edge/app?output=1",
                                     [("Host", "edge-1:10350")] + SPDY)
        s.close()
        check(st == 400 and b"missing required command parameter" in body,
              "no command: %d %r" % (st, body))
    finally:
        h.close_env(env, False)
        cri(ctd, "remove-pod", sandbox)


def ws_session(api_port, ctx, target, sends=(), protocol="v4.channel.k8s.io", timeout=15.0,
               until=None):
    """A kubelet websocket stream (channel byte + payload) through cloudstream: sends @sends
    (channel, bytes, delay before), collects every channel until the server closes (or @until
    says enough). Returns ({channel: bytes}, negotiated subprotocol)."""
    import asyncio
    import websockets

    async def go():
        got = {}
        async with websockets.connect(
                "wss://edge-1:10350" + target, host="127.0.0.1", port=api_port, ssl=ctx,
                server_hostname="localhost", subprotocols=[protocol], open_timeout=timeout,
                max_size=None) as ws:
            async def sender():
                for ch, data, delay in sends:
                    await asyncio.sleep(delay)
                    await ws.send(bytes([ch]) + data)
            task = asyncio.ensure_future(sender())
            try:
                async for msg in ws:
                    if isinstance(msg, str):
                        msg = msg.encode()
                    if msg:
                        got[msg[0]] = got.get(msg[0], b"") + msg[1:]
                    if until and until(got):
                        break
            except websockets.ConnectionClosed:
                pass
            task.cancel()
            return got, ws.subprotocol
    return asyncio.run(asyncio.wait_for(go(), timeout))


def edge_channels(ctd, base):
    """The streams themselves, through cloudstream → edgestream → containerd (websocket v4,
    which containerd speaks too): exec stdout, stderr and exit code, stdin, a tty with a resize,
    attach both ways, byte for byte."""
    logs = os.path.join(base, "pods", "default_chan_chan-uid-1")
    os.makedirs(logs, exist_ok=True)
    rc, out, err = cri(ctd, "run-pod", "default", "chan", "chan-uid-1", logs)
    check(rc == 0, "run-pod: %r" % err)
    sandbox = out.strip()
    for name, script in (("app", "exec sleep 600"),
                         ("talker", "while read x; do echo heard:$x; echo err:$x >&2; done")):
        rc, out, err = cri(ctd, "create-container", "default", "chan", "chan-uid-1", logs,
                           sandbox, name, images.BUSYBOX_IMAGE, "--stdin", "--", "sh", "-c",
                           script)
        check(rc == 0, "create-container %s: %r" % (name, err))
    env = h.Env("cri-chan")
    try:
        cloud = h.start_cloudstream(env)
        h.start_edgestream(env, cloud, None, extra=["--cri-socket", ctd.socket])
        api = h.Api(env, cloud.ports["stream"])
        port = cloud.ports["stream"]
        q = "command=sh&command=-c&command=" + urllib.parse.quote_plus(
            "echo out-line; echo err-line >&2; exit 3")
        got, proto = ws_session(port, api.ctx, "/exec/default/chan/app?%s&output=1&error=1" % q)
        check(proto == "v4.channel.k8s.io", "subprotocol %r" % proto)
        check(got.get(1) == b"out-line\n" and got.get(2) == b"err-line\n",
              "exec stdout/stderr: %r" % got)
        status = json.loads(got.get(3, b"{}"))
        check(status.get("status") == "Failure" and status.get("reason") == "NonZeroExitCode" and
              status["details"]["causes"][0] == {"reason": "ExitCode", "message": "3"},
              "exit code: %r" % status)
        got, _ = ws_session(port, api.ctx, "/exec/default/chan/app?command=true&output=1")
        check(json.loads(got.get(3, b"{}")).get("status") == "Success", "success: %r" % got)
        # stdin: 64 KiB of random hex through `head`, back on stdout, compared
        blob = os.urandom(32768).hex().encode()
        q = "command=head&command=-c&command=%d" % len(blob)
        got, _ = ws_session(port, api.ctx, "/exec/default/chan/app?%s&input=1&output=1" % q,
                            sends=[(0, blob[i:i + 8192], 0) for i in range(0, len(blob), 8192)])
        check(got.get(1) == blob, "stdin echo: %d of %d bytes" % (len(got.get(1, b"")), len(blob)))
        # a tty and a resize: the terminal size seen inside
        q = "command=sh&command=-c&command=" + urllib.parse.quote_plus("sleep 1; stty size")
        got, _ = ws_session(port, api.ctx, "/exec/default/chan/app?%s&input=1&output=1&tty=1" % q,
                            sends=[(4, b'{"Width":123,"Height":45}', 0.2)])
        check(got.get(1, b"").strip() == b"45 123", "tty size after resize: %r" % got)
        # attach: stdin to a running process, its stdout and stderr back
        got, _ = ws_session(port, api.ctx, "/attach/default/chan/talker?input=1&output=1&error=1",
                            sends=[(0, b"hello\n", 0.3), (0, b"again\n", 0.1)],
                            until=lambda g: g.get(1, b"").count(b"\n") >= 2 and
                            g.get(2, b"").count(b"\n") >= 2)
        check(got.get(1) == b"heard:hello\nheard:again\n" and
              got.get(2) == b"err:hello\nerr:again\n", "attach: %r" % got)
        # port-forward (websocket: channel 0 data, 1 errors, each opened by the port number)
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        pf_port = srv.getsockname()[1]

        def echo_upper():
            c, _ = srv.accept()
            c.settimeout(10)
            data = b""
            while not data.endswith(b"END"):
                data += c.recv(65536)
            c.sendall(data.upper())
            c.close()
        threading.Thread(target=echo_upper, daemon=True).start()
        payload = os.urandom(20000).hex().encode() + b"END"
        got, _ = ws_session(port, api.ctx, "/portForward/default/chan?port=%d" % pf_port,
                            sends=[(0, payload, 0.3)],
                            until=lambda g: len(g.get(0, b"")) >= 2 + len(payload))
        srv.close()
        want_port = struct.pack("<H", pf_port)
        check(got.get(0, b"")[:2] == want_port and got.get(0)[2:] == payload.upper(),
              "port-forward data: %r…" % got.get(0, b"")[:40])
    finally:
        h.close_env(env, False)
        cri(ctd, "remove-pod", sandbox)


def main():
    if os.geteuid() != 0 or shutil.which("containerd") is None:
        print("skipped: needs root and containerd")
        return 77
    base = tempfile.mkdtemp(prefix="cri.", dir=os.environ.get("ST_TEST_TMPDIR", "/tmp"))
    ctd = Containerd(base)
    rc = 1
    try:
        ctd.start()
        images.import_into(ctd, images.build(os.path.join(base, "images")))
        tests = []
        for fn in (version, empty_lists, not_found, no_runtime):
            t = (lambda f: lambda: f(ctd))(fn)
            t.__name__ = "cri." + fn.__name__
            tests.append(t)
        for name, fn in (("pod_life_cycle", pod_life_cycle), ("edge_streaming", edge_streaming),
                         ("edge_channels", edge_channels)):
            t = (lambda f: lambda: f(ctd, base))(fn)
            t.__name__ = "cri." + name
            tests.append(t)
        rc = h.run(tests)
        return rc
    finally:
        if rc != 0:
            print("---- containerd (last lines) ----\n" + ctd.tail())
        ctd.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
