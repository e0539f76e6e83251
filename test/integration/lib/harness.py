"""Shared pieces of the integration tests: temp dirs, certificates minted per run with
stream-certs, processes started on loopback with ready files and stopped by PID, and a TLS
"apiserver" client that speaks raw HTTP/1.1 to cloudstream's stream port.

Every process a test starts is registered and stopped (SIGTERM, then SIGKILL) when the test
ends, whatever happens. Nothing listens anywhere but 127.0.0.1, on ports chosen at run time,
except inside the network namespaces a test makes for itself (netns.py).
"""
import hashlib
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time

BIN = os.environ.get("ST_BIN_DIR", "build")
SRC = os.environ.get("ST_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))))))  # lib → integration → test → the tree
PEERS = os.path.join(SRC, "test", "integration", "peers")
PY = "/usr/bin/python3"  # Debian's python, with python3-websockets


def _die_with_parent():
    """Child side of Popen: SIGTERM when the test process dies, however it dies (a ctest timeout
    kills it without cleanup), so no daemon outlives its test."""
    import ctypes
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Fail(Exception):
    pass


def short_dir(tag):
    """A new private directory with a short path, /tmp/st-<tag>.XXXXXXXX, for unix sockets: a
    socket's path holds at most 108 bytes (sun_path) and $ST_TEST_TMPDIR is inside the build
    tree, which can be deeper than that. Not $TMPDIR, for the same reason. The caller removes
    it (Env.close() does for Env.sock())."""
    return tempfile.mkdtemp(prefix="st-%s." % tag, dir="/tmp")


def skip(why):
    """Ends a test that cannot run here: skipped (exit 77), or failed (1) under CI=true, where
    a skip would hide a runner without what the test needs. Prints why."""
    if os.environ.get("CI") == "true":
        print("FAIL: cannot run under CI: " + why, flush=True)
        sys.exit(1)
    print("skip: " + why, flush=True)
    sys.exit(77)


def check(cond, msg):
    if not cond:
        raise Fail(msg)


class Env:
    """One test run: a temp dir, a PKI and the processes started."""

    def __init__(self, tag, nodes=("edge-1",)):
        base = os.environ.get("ST_TEST_TMPDIR", "/tmp")
        os.makedirs(base, exist_ok=True)
        self.dir = tempfile.mkdtemp(prefix=tag + ".", dir=base)
        self.tag = tag
        self.rundir = None  # short directory for unix sockets, made by the first sock()
        self.procs = []
        self.pki = os.path.join(self.dir, "pki")
        certs = os.path.join(BIN, "certs", "stream-certs")
        args = [certs, "quick", "--out", self.pki]
        for n in nodes:
            args += ["--node", n]
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
        self.certs = certs

    def path(self, name):
        return os.path.join(self.pki, name)

    def sock(self, name):
        """Where a unix socket of this run goes: a short per-run directory (short_dir), removed
        by close() even when the run's directory is kept. Every unix socket a test creates
        belongs there, never under self.dir."""
        if self.rundir is None:
            self.rundir = short_dir(self.tag)
        return os.path.join(self.rundir, name)

    def mint(self, *args):
        subprocess.run([self.certs] + list(args), check=True, stdout=subprocess.DEVNULL)

    def start(self, name, argv, ready_file, timeout=20.0, env=None, prefix=()):
        """Starts a process (after @prefix, e.g. ip netns exec NS, which execs it: the PID is
        the program's), waits for its ready file, returns (proc, ready file text)."""
        log = open(os.path.join(self.dir, name + ".log"), "wb")
        p = subprocess.Popen(list(prefix) + argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                             preexec_fn=_die_with_parent)
        p.name = name
        p.logpath = log.name
        self.procs.append(p)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if os.path.exists(ready_file):
                with open(ready_file) as f:
                    return p, f.read()
            if p.poll() is not None:
                raise Fail("%s exited with %s before it was ready:\n%s" % (
                    name, p.returncode, self.tail(p)))
            time.sleep(0.02)
        raise Fail("%s not ready after %.0f s:\n%s" % (name, timeout, self.tail(p)))

    def tail(self, p, n=40):
        try:
            with open(p.logpath, "rb") as f:
                return b"\n".join(f.read().splitlines()[-n:]).decode(errors="replace")
        except OSError:
            return ""

    def stop(self, p, timeout=10.0):
        """SIGTERM, wait, SIGKILL. Returns the exit status."""
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        return p.returncode

    def close(self, keep=False):
        for p in reversed(self.procs):
            self.stop(p, 5)
        if self.rundir:  # sockets are useless once their processes are gone
            shutil.rmtree(self.rundir, ignore_errors=True)
            self.rundir = None
        if not keep:
            shutil.rmtree(self.dir, ignore_errors=True)


def close_env(env, failed):
    """Stops everything; on failure prints the daemons' last log lines (CI keeps nothing else)
    and keeps the directory."""
    if failed:
        for p in env.procs:
            print("---- %s (last lines) ----\n%s" % (p.name, env.tail(p, 25)), flush=True)
    env.close(keep=failed)


def ready_ports(text):
    ports = {}
    for line in text.splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            ports[k.strip()] = int(v)
    return ports


def cloudstream_pki_flags(env):
    """cloudstream's certificates, keys and CAs from the run's PKI, as flags."""
    return ["--tunnel-cert", env.path("cloudstream-tunnel.crt"),
            "--tunnel-key", env.path("cloudstream-tunnel.key"),
            "--tunnel-ca", env.path("tunnel-ca.crt"),
            "--stream-cert", env.path("cloudstream-stream.crt"),
            "--stream-key", env.path("cloudstream-stream.key"),
            "--stream-client-ca", env.path("stream-ca.crt")]


def peer_pki_flags(env):
    """A cloudstream replica's certificate, key and CAs for its links to the other replicas
    (issue 13), from the run's PKI, as flags; the others' tunnel certificates name localhost."""
    return ["--peer-cert", env.path("cloudstream-peer.crt"),
            "--peer-key", env.path("cloudstream-peer.key"),
            "--peer-ca", env.path("peer-ca.crt"),
            "--peer-server-ca", env.path("tunnel-ca.crt"),
            "--peer-server-name", "localhost"]


def start_cloudstream(env, extra=(), name="cloudstream", prefix=(), wrap=None):
    """The cloud daemon on loopback ports. @wrap(argv) may turn the command line into another
    way of running the same daemon (images_test.py: in a container, from its image). Unless
    @extra says how the stream port authorizes, only the apiserver's client certificate may
    use it (cloudstream refuses to start with neither a subject list nor Webhook)."""
    ready = os.path.join(env.dir, name + ".ready")
    if os.path.exists(ready):
        os.unlink(ready)
    argv = [os.path.join(BIN, "cloudstream", "cloudstream"),
            "--tunnel-listen", "127.0.0.1:0", "--stream-listen", "127.0.0.1:0",
            "--admin-listen", "127.0.0.1:0", *cloudstream_pki_flags(env),
            "--ready-file", ready, "--log-level", "debug"] + list(extra)
    if not any(str(a).startswith(("--stream-allowed-subjects", "--authorization-mode"))
               for a in extra):
        argv += ["--stream-allowed-subjects", "kube-apiserver-kubelet-client"]
    p, text = env.start(name, wrap(argv) if wrap else argv, ready, prefix=prefix)
    p.ports = ready_ports(text)
    return p


def start_kubelet(env, name="kubelet", prefix=(), extra=()):
    ready = os.path.join(env.dir, name + ".ready")
    argv = [PY, os.path.join(PEERS, "fake_kubelet.py"), "--listen", "127.0.0.1:0",
            "--cert", env.path("kubelet.crt"), "--key", env.path("kubelet.key"),
            "--client-ca", env.path("kubelet-ca.crt"), "--ready-file", ready] + list(extra)
    p, text = env.start(name, argv, ready, prefix=prefix)
    p.port = int(text.strip())
    return p


def start_kubeedge_edge(env, cloud, kubelet, node="edge-1", protocol="base", extra=(),
                        name=None, cert=None, prefix=()):
    name = name or "edge-" + node
    ready = os.path.join(env.dir, name + ".ready")
    if os.path.exists(ready):
        os.unlink(ready)
    argv = [PY, os.path.join(PEERS, "kubeedge_edge.py"),
            "--cloud", "wss://127.0.0.1:%d/v1/kubeedge/connect" % cloud.ports["tunnel"],
            "--cert", cert or env.path("node-%s.crt" % node),
            "--key", (cert or env.path("node-%s.crt" % node))[:-4] + ".key",
            "--ca", env.path("tunnel-ca.crt"), "--server-name", "localhost",
            "--node-name", node,
            "--backend", "https://127.0.0.1:%d" % kubelet.port,
            "--backend-cert", env.path("edgestream-kubelet-client.crt"),
            "--backend-key", env.path("edgestream-kubelet-client.key"),
            "--backend-ca", env.path("kubelet-ca.crt"),
            "--protocol", protocol, "--ready-file", ready] + list(extra)
    p, _ = env.start(name, argv, ready, prefix=prefix)
    return p


class Api:
    """The kube-apiserver's side of the stream port: TLS with a client certificate."""

    def __init__(self, env, port, cert="apiserver-kubelet-client", ca="stream-ca",
                 host="127.0.0.1"):
        self.port = port
        self.host = host
        self.ctx = ssl.create_default_context(cafile=env.path("stream-ca.crt"))
        self.ctx.check_hostname = False  # cloudstream answers for many node names and IPs
        if cert:
            self.ctx.load_cert_chain(env.path(cert + ".crt"), env.path(cert + ".key"))

    def connect(self, timeout=10.0):
        raw = socket.create_connection((self.host, self.port), timeout=timeout)
        return self.ctx.wrap_socket(raw)

    def request(self, method, target, headers=(), body=b"", timeout=10.0, sock=None):
        """Sends one request, reads one whole response. Returns (status, headers, body, sock)."""
        s = sock or self.connect(timeout)
        s.settimeout(timeout)
        s.sendall(head(method, target, headers, len(body) if body else None) + body)
        status, hdrs, rest = read_head(s)
        return (status, hdrs, read_body(s, hdrs, rest, method == "HEAD"), s)


def head(method, target, headers=(), content_length=None):
    lines = ["%s %s HTTP/1.1" % (method, target)]
    for k, v in headers:
        lines.append("%s: %s" % (k, v))
    if content_length is not None:
        lines.append("Content-Length: %d" % content_length)
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def recv_until(s, pred, buf=b"", limit=1 << 20):
    buf = bytearray(buf)  # appends in place: bytes += would copy the whole buffer each time
    while not pred(buf):
        chunk = s.recv(1 << 18)
        if not chunk:
            raise Fail("connection closed after %d bytes: %r" % (len(buf), bytes(buf[:200])))
        buf += chunk
        check(len(buf) <= limit, "more than %d bytes without the expected end" % limit)
    return bytes(buf)


def read_head(s, buf=b""):
    buf = recv_until(s, lambda b: b"\r\n\r\n" in b, buf)
    h, rest = buf.split(b"\r\n\r\n", 1)
    lines = h.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    hdrs = {}
    for line in lines[1:]:
        k, v = line.split(":", 1)
        hdrs.setdefault(k.strip().lower(), v.strip())
    return status, hdrs, rest


def read_body(s, hdrs, rest, is_head=False):
    if is_head:
        return b""
    if "content-length" in hdrs:
        n = int(hdrs["content-length"])
        out = bytearray(rest)
        while len(out) < n:
            c = s.recv(1 << 18)
            if not c:
                raise Fail("body cut at %d of %d bytes" % (len(out), n))
            out += c
        return bytes(out[:n])
    if hdrs.get("transfer-encoding", "").lower() == "chunked":
        out = bytearray()
        buf = bytearray(rest)
        pos = 0

        def need(k):
            while len(buf) - pos < k:
                c = s.recv(1 << 18)
                if not c:
                    raise Fail("chunked body cut after %d bytes" % len(out))
                buf.extend(c)

        while True:
            while buf.find(b"\r\n", pos) < 0:
                need(len(buf) - pos + 1)
            end = buf.find(b"\r\n", pos)
            size = int(bytes(buf[pos:end]).split(b";")[0], 16)
            pos = end + 2
            if size == 0:
                while buf.find(b"\r\n", pos) < 0:  # trailers end with an empty line
                    need(len(buf) - pos + 1)
                return bytes(out)
            need(size + 2)
            out += buf[pos:pos + size]
            pos += size + 2
            if pos > (1 << 20):
                del buf[:pos]
                pos = 0
    out = bytearray(rest)
    while True:
        c = s.recv(1 << 18)
        if not c:
            return bytes(out)
        out += c


def wait_closed(s, timeout):
    """Reads until EOF; returns (bytes, seconds it took) or raises on timeout."""
    s.settimeout(timeout)
    t0 = time.monotonic()
    data = b""
    while True:
        try:
            chunk = s.recv(65536)
        except (ConnectionResetError, ssl.SSLError):
            break
        if not chunk:
            break
        data += chunk
    return data, time.monotonic() - t0


def log_mark(p):
    """Where @p's log ends now. Take it before the action whose line a test then waits for
    (wait_log, log_has): the log file lives as long as the process, so a line an earlier test
    or an earlier step wrote would otherwise answer the wait."""
    try:
        return os.path.getsize(p.logpath)
    except OSError:
        return 0


def log_since(p, mark):
    """What @p logged after @mark (log_mark), as text."""
    with open(p.logpath, "rb") as f:
        f.seek(mark)
        return f.read().decode(errors="replace")


def wait_log(p, pattern, since, timeout=10.0, what=None, flags=0):
    """The first match of the regex @pattern in what @p logged after @since (log_mark, taken
    before the action); fails after @timeout, or once @p has exited without writing it."""
    deadline, rx = time.monotonic() + timeout, re.compile(pattern, flags)
    while True:
        exited = p.poll() is not None  # before reading: an exited process's log is complete
        text = log_since(p, since)
        m = rx.search(text)
        if m:
            return m
        check(not exited, "%s exited (%s) waiting for %r" % (p.name, p.returncode, pattern))
        check(time.monotonic() < deadline, "%s: no %r in %s's log since the wait began:\n%s"
              % (what or "log", pattern, p.name, "\n".join(text.splitlines()[-20:])))
        time.sleep(0.05)


def log_has(p, text, since, timeout=5.0):
    """Whether @text appears in what @p logged after @since (log_mark) within @timeout."""
    deadline = time.monotonic() + timeout
    while True:
        if text in log_since(p, since):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def sha256(b):
    return hashlib.sha256(b).hexdigest()


def run(tests):
    """Runs test functions by name (argv selects a subset); prints one line each."""
    want = sys.argv[1:]
    failed = 0
    for t in tests:
        if want and t.__name__ not in want:
            continue
        t0 = time.monotonic()
        try:
            t()
            print("ok   %-45s %.2fs" % (t.__name__, time.monotonic() - t0), flush=True)
        except Exception as e:  # noqa: BLE001 - a test harness reports everything
            failed += 1
            if os.environ.get("ST_TRACEBACK"):
                import traceback
                traceback.print_exc()
            print("FAIL %-45s %s: %s" % (t.__name__, type(e).__name__, e), flush=True)
    return 1 if failed else 0


def start_edgestream(env, cloud, kubelet=None, node="edge-1", extra=(), name=None, cert=None,
                     url=None, prefix=(), timeout=20.0, wrap=None):
    """Our edge daemon dialling @cloud (a cloudstream, or anything with ports["tunnel"]), in
    front of @kubelet. Ready once its tunnel is up (the ready file has admin=P). @wrap: as for
    start_cloudstream."""
    name = name or "edgestream-" + node
    ready = os.path.join(env.dir, name + ".ready")
    if os.path.exists(ready):
        os.unlink(ready)
    cert = cert or env.path("node-%s.crt" % node)
    argv = [os.path.join(BIN, "edgestream", "edgestream"),
            "--cloud-url", url or "wss://127.0.0.1:%d/v1/kubeedge/connect" % cloud.ports["tunnel"],
            "--cloud-server-name", "localhost",
            "--tunnel-cert", cert, "--tunnel-key", cert[:-4] + ".key",
            "--tunnel-ca", env.path("tunnel-ca.crt"),
            "--kubelet-url", "https://127.0.0.1:%d" % kubelet.port if kubelet else "",
            "--kubelet-cert", env.path("edgestream-kubelet-client.crt"),
            "--kubelet-key", env.path("edgestream-kubelet-client.key"),
            "--kubelet-ca", env.path("kubelet-ca.crt"),
            "--admin-listen", "127.0.0.1:0", "--ready-file", ready,
            "--log-level", "debug"] + list(extra)
    p, text = env.start(name, wrap(argv) if wrap else argv, ready, prefix=prefix,
                        timeout=timeout)
    p.ports = ready_ports(text.split("node=")[0])
    return p


# ---- what several test files do the same way ----------------------------------------------------

def named(group, pairs):
    """The test functions of @pairs, (name, function), renamed GROUP.NAME for run()'s lines and
    its argv selection."""
    out = []
    for name, fn in pairs:
        fn.__name__ = group + "." + name
        out.append(fn)
    return out


class Steps:
    """The steps of a test that goes on after one fails: step(name, fn, *args) runs fn(*args),
    prints "ok   PREFIX.NAME" or "FAIL PREFIX.NAME: why" as run() does for a test, and returns
    what fn returned (None when it raised); passed lists the names of those that passed."""

    def __init__(self, prefix):
        self.prefix = prefix
        self.passed = []

    def __call__(self, name, fn, *args):
        try:
            r = fn(*args)
            print("ok   %s.%s" % (self.prefix, name), flush=True)
            self.passed.append(name)
            return r
        except Exception as e:  # noqa: BLE001 - a step reports everything
            print("FAIL %s.%s: %s: %s" % (self.prefix, name, type(e).__name__, e), flush=True)
            return None


def main_by_group(groups, default):
    """main() of a test file in groups: argv[1] names the group (@default without one), the
    words after it select tests of that group (run()). Returns the group's exit status."""
    group = sys.argv[1] if len(sys.argv) > 1 else default
    sys.argv = sys.argv[1:]
    return groups[group]()


def stop_exits_0(env, *procs):
    """Stops each of @procs (SIGTERM); each must exit 0: a clean drain, and in a sanitizer build
    no leak or error report (those make the exit status non-zero)."""
    for p in procs:
        status = env.stop(p)
        check(status == 0, "%s exit status %s" % (p.name, status))


def stop_clean(env, p):
    """Stops @p (SIGTERM): it must exit 0 and its log hold no sanitizer report (UBSan's runtime
    errors leave the exit status alone)."""
    status = env.stop(p)
    with open(p.logpath, "rb") as f:
        log = f.read()
    check(status == 0, "%s exited %s" % (p.name, status))
    check(b"Sanitizer" not in log and b"runtime error" not in log,
          "%s: sanitizer report:\n%s" % (p.name, env.tail(p, 30)))


def plain_request(port, method, path, host="127.0.0.1", headers=()):
    """One plain HTTP/1.1 request to @host:@port (the daemons' admin ports): (status, body as
    text)."""
    s = socket.create_connection((host, port), timeout=5)
    try:
        s.sendall(head(method, path, [("Host", "x")] + list(headers)))
        status, hdrs, rest = read_head(s)
        return status, read_body(s, hdrs, rest).decode()
    finally:
        s.close()


def admin_get(p, path):
    """GET @path on @p's admin port (p.ports["admin"]; at p.host when it has one, else on
    loopback): (status, body as text)."""
    return plain_request(p.ports["admin"], "GET", path, getattr(p, "host", "127.0.0.1"))


def admin_post(p, path):
    """POST @path, without a body, on @p's admin port (admin_get): (status, body as text)."""
    return plain_request(p.ports["admin"], "POST", path, getattr(p, "host", "127.0.0.1"),
                         [("Content-Length", "0")])


def metric(p, name, labels=""):
    """The value of metric @name (with exactly the labels @labels, as written between the
    braces) on @p's admin /metrics; fails when there is no such line."""
    want = name + ("{%s}" % labels if labels else "")
    _, text = admin_get(p, "/metrics")
    for line in text.splitlines():
        if line.startswith(want + " "):
            return float(line.split()[1])
    raise Fail("%s: metric %s not found" % (p.name, want))


def free_port():
    """A loopback TCP port free at the time of the call (another process may take it before it
    is used)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# A SPDY upgrade as kube-apiserver sends it for exec, attach and port-forward.
UPGRADE_SPDY = [("Connection", "Upgrade"), ("Upgrade", "SPDY/3.1"),
                ("X-Stream-Protocol-Version", "v4.channel.k8s.io")]
# What the kubelet stand-in's exec writes first for command=greet (and greet-exit, then closes).
EXEC_GREETING = b"hello from default/pod-a/ctr\n"


def open_exec(api, node, command, what="exec"):
    """An exec of the kubelet stand-in's pod-a/ctr on @node (command=@command: greet, then an
    echo with input=1&output=1) through the stream port of @api (an Api), upgraded to SPDY: the
    101 and the greeting checked. Returns (socket, response headers, what came after the
    greeting)."""
    s = api.connect()
    s.sendall(head("POST", "/exec/default/pod-a/ctr?command=" + command,
                   [("Host", "%s:10350" % node)] + UPGRADE_SPDY))
    status, hdrs, rest = read_head(s)
    check(status == 101, "%s: status %d, want 101" % (what, status))
    buf = recv_until(s, lambda b: len(b) >= len(EXEC_GREETING), rest)
    check(buf[:len(EXEC_GREETING)] == EXEC_GREETING, "%s: greeting %r" % (what, buf))
    return s, hdrs, buf[len(EXEC_GREETING):]


def edge_options(env, cloud, kubelet, node="edge-1"):
    """edgestream's options for @node dialling @cloud's tunnel port (a cloudstream, or anything
    with ports["tunnel"]) in front of @kubelet, named as in a JSON configuration file (the
    library's names, the flags' without --)."""
    return {
        "cloud-url": "wss://127.0.0.1:%d/v1/kubeedge/connect" % cloud.ports["tunnel"],
        "cloud-server-name": "localhost",
        "tunnel-cert": env.path("node-%s.crt" % node),
        "tunnel-key": env.path("node-%s.key" % node),
        "tunnel-ca": env.path("tunnel-ca.crt"),
        "kubelet-url": "https://127.0.0.1:%d" % kubelet.port,
        "kubelet-cert": env.path("edgestream-kubelet-client.crt"),
        "kubelet-key": env.path("edgestream-kubelet-client.key"),
        "kubelet-ca": env.path("kubelet-ca.crt"),
    }


class Chain:
    """What the stream tests run against: a kubelet stand-in, cloudstream, and the edge for
    edge-1 that @start_edge(env, cloud, kubelet) starts (a KubeEdge-protocol test edge,
    edgestream, the Go agent), with the apiserver's client (api) on the stream port. A start
    that fails stops what had started and keeps the directory."""

    def __init__(self, tag, start_edge, nodes=("edge-1",), cloud_extra=(), cloud_prefix=(),
                 kubelet_extra=()):
        self.env = Env(tag, nodes=nodes)
        try:
            self.kubelet = start_kubelet(self.env, extra=kubelet_extra)
            self.cloud = start_cloudstream(self.env, cloud_extra, prefix=cloud_prefix)
            self.edge = start_edge(self.env, self.cloud, self.kubelet)
            self.api = Api(self.env, self.cloud.ports["stream"])
        except Exception:
            close_env(self.env, True)
            raise

    def get(self, target, node="edge-1", headers=(), sock=None):
        """GET @target on @node's kubelet port through cloudstream: (status, headers, body,
        socket), as Api.request."""
        hdrs = [("Host", "%s:10350" % node)] + list(headers)
        return self.api.request("GET", target, hdrs, sock=sock)

    def close(self, failed=False):
        close_env(self.env, failed)



class Group:
    """One group of a test file, as a with-block: its Env (.env) and its tests (run). At the
    end of the block the closers given to on_close() run (last first), then every process is
    stopped and the directory removed, or kept with the daemons' last log lines printed when a
    test failed or the block raised."""

    def __init__(self, group, tag, nodes=("edge-1",)):
        self.group = group
        self.env = Env(tag, nodes=nodes)
        self.failed = True
        self._closers = []

    def __enter__(self):
        return self

    def on_close(self, fn):
        """@fn() runs at the end of the block, before the processes are stopped (what the
        test runs inside this process: a stand-in's server)."""
        self._closers.append(fn)

    def run(self, pairs, exit_0=()):
        """Runs the group's tests, (name, function) pairs (named, run), then stops each process
        of @exit_0, which must exit 0 (stop_exits_0). Returns run()'s status."""
        rc = run(named(self.group, pairs))
        stop_exits_0(self.env, *exit_0)
        self.failed = rc != 0
        return rc

    def __exit__(self, exc_type, exc, tb):
        try:
            for fn in reversed(self._closers):
                fn()
        finally:
            close_env(self.env, self.failed or exc_type is not None)
        return False
