"""What the bench programs in test/bench share: where the build is, nginx as the node's kubelet
(or as a TLS hop), the files it serves, free ports, a containerd pod, readings from /proc and
the daemons' /metrics, the TLS contexts of the apiserver and the edge, a curl download and the
keep-alive latency of one connection.

    import benchlib as bl           # also puts test/integration/{lib,peers,} on sys.path
    args = bl.parser(__doc__, "rel").parse_args()
    h = bl.use_build(args.build)    # the harness module, its BIN set to that build
    with bl.run_env("tag") as env:  # h.Env; every process started in it is stopped at the end
        nginx = bl.start_kubelet_nginx(env, d, LOCATIONS)

Processes are started and stopped by PID: nginx and the daemons are registered in the run's
h.Env, which stops each (SIGTERM, then SIGKILL) when the run ends, also after a failure.
Nothing here prints a figure: each program keeps its own output lines (the README quotes them).
"""
import argparse
import contextlib
import os
import socket
import ssl
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
for _sub in ("integration", os.path.join("integration", "peers"),
             os.path.join("integration", "lib")):
    _path = os.path.join(ROOT, "test", _sub)
    if _path not in sys.path:
        sys.path.insert(0, _path)
import harness as h  # noqa: E402

TCK = os.sysconf("SC_CLK_TCK")

# One line of the log files the kubelet stand-ins serve.
LOG_LINE = b"2026-11-22T10:00:00.000000000Z a log line of some typical length, " \
           b"with a counter and a few words\n"


def parser(doc=None, build="rel", mib=None, runs=None):
    """An ArgumentParser whose description is @doc's first line, with --build (default
    build/@build in the tree) and, when given their defaults, --mib and --runs."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0] if doc else None)
    ap.add_argument("--build", default=os.path.join(ROOT, "build", build))
    if mib is not None:
        ap.add_argument("--mib", type=int, default=mib)
    if runs is not None:
        ap.add_argument("--runs", type=int, default=runs)
    return ap


def add_congestion(ap):
    """--congestion ALGO, for congestion_netns()."""
    ap.add_argument("--congestion", metavar="ALGO",
                    help="run everything in a network namespace of its own (root) whose TCP "
                         "congestion control is ALGO (e.g. reno: no pacing), whatever the "
                         "host's net.ipv4.tcp_congestion_control says (bbr paces inside TCP on "
                         "loopback, an hrtimer per socket: cloudstream/README.md)")


def congestion_netns(algo):
    """With @algo: this bench again, in a network namespace of its own whose TCP congestion
    control is @algo (the first call re-executes; the second, inside, prints it)."""
    if not algo:
        return
    if os.environ.get("ST_BENCH_NETNS") != algo:
        argv = [sys.executable, os.path.abspath(sys.argv[0])] + sys.argv[1:]
        os.environ["ST_BENCH_NETNS"] = algo
        os.execvp("unshare", ["unshare", "-n", "sh", "-c",
                              "ip link set lo up && sysctl -qw "
                              "net.ipv4.tcp_congestion_control=\"$0\" && exec \"$@\"",
                              algo] + argv)
    with open("/proc/sys/net/ipv4/tcp_congestion_control") as f:
        print("TCP congestion control in this network namespace: %s" % f.read().strip())


def use_build(build):
    """Points the harness (and the processes it starts, through ST_BIN_DIR) at @build; returns
    the harness module."""
    h.BIN = os.path.abspath(build)
    os.environ["ST_BIN_DIR"] = h.BIN
    return h


@contextlib.contextmanager
def run_env(tag, nodes=("edge-1",), keep=False):
    """An h.Env for one run. At the end every process it started is stopped; its directory is
    removed unless the run failed or @keep (then its path is printed)."""
    env = h.Env(tag, nodes=nodes)
    ok = False
    try:
        yield env
        ok = True
    finally:
        h.close_env(env, not ok or keep)
        if keep:
            print("logs in", env.dir)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- nginx ----------------------------------------------------------------------------------

NGINX_CONF = """user root;
worker_processes 1;
{main}daemon off;
pid {d}/{name}.pid;
error_log {d}/{name}-error.log;
events {{ worker_connections {connections}; }}
http {{
  {access_log}
  client_body_temp_path {d}/tmp; proxy_temp_path {d}/tmp; fastcgi_temp_path {d}/tmp;
  uwsgi_temp_path {d}/tmp; scgi_temp_path {d}/tmp;
{http}  server {{
    listen 127.0.0.1:{port} ssl{listen};
{server}  }}
}}
"""

# The kubelet's TLS: its serving certificate, a client certificate from the kubelet CA required.
# TLS 1.3 as a real kubelet (Go) speaks it: nginx 1.22's default stops at TLS 1.2.
KUBELET_TLS = """    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_certificate {pki}/kubelet.crt;
    ssl_certificate_key {pki}/kubelet.key;
    ssl_client_certificate {pki}/kubelet-ca.crt;
    ssl_verify_client on;
"""


def start_nginx(env, d, name, server, port=None, http="", connections=64, main="",
                access_log="access_log off;", http2=False, **kw):
    """nginx in the foreground with its files in @d (config @d/@name.conf, @d/@name.pid,
    @d/@name-error.log, temp files in @d/tmp), one TLS server on 127.0.0.1:@port (a free one
    when None), offering ALPN h2 as well when @http2. @server (the server block's directives), @http (more http-level directives)
    and @access_log are formatted with d, pki (the run's PKI), port and @kw. Registered in
    @env, which stops it; returns the process once it accepts connections, its port in .port."""
    os.makedirs(os.path.join(d, "tmp"), exist_ok=True)
    port = port or free_port()
    fmt = dict(kw, d=d, pki=env.pki, port=port)
    path = os.path.join(d, name + ".conf")
    with open(path, "w") as f:
        f.write(NGINX_CONF.format(d=d, name=name, port=port, connections=connections,
                                  main=main, listen=" http2" if http2 else "", access_log=access_log.format(**fmt),
                                  http=http.format(**fmt), server=server.format(**fmt)))
    p = subprocess.Popen(["nginx", "-c", path, "-p", d], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, preexec_fn=h._die_with_parent)
    p.name, p.logpath, p.port = "nginx " + name, os.path.join(d, name + "-error.log"), port
    env.procs.append(p)
    deadline = time.monotonic() + 10
    while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
        if time.monotonic() > deadline or p.poll() is not None:
            p.kill()
            raise SystemExit("nginx (%s) did not start: %s" % (name, open(p.logpath).read()))
        time.sleep(0.05)
    return p


def start_kubelet_nginx(env, d, locations, name="kubelet", **kw):
    """nginx as the node's kubelet (KUBELET_TLS) serving @locations (more server directives,
    formatted as start_nginx's @server); the other arguments as start_nginx's."""
    return start_nginx(env, d, name, KUBELET_TLS + locations, **kw)


def write_lines(path, nbytes, line=LOG_LINE):
    """@path: @nbytes of @line repeated (the last one cut), written a few MiB at a time."""
    chunk = line * ((4 << 20) // len(line))
    with open(path, "wb") as f:
        for _ in range(nbytes // len(chunk)):
            f.write(chunk)
        f.write(chunk[:nbytes % len(chunk)])


# ---- the relay floor -------------------------------------------------------------------------

def start_floor_relay(env, name, upstream_port, upstream_cert=None, alpn="http/1.1",
                      buffer_kib=None):
    """test/bench/tls_relay_floor (the cheapest TLS → TLS byte relay) on a free loopback port,
    serving the kubelet stand-in's certificate (no client certificate asked for), relaying to
    127.0.0.1:@upstream_port over TLS verified against the kubelet CA (the kubelet nginx and
    another floor relay both serve kubelet.crt), with @upstream_cert(.crt, .key) as its client
    certificate, passing the ALPN protocols of @alpn through. Registered in @env (stopped by
    PID); returns the process, its port in .port."""
    tool = os.path.join(h.BIN, "test", "bench", "tls_relay_floor")
    if not os.path.exists(tool):
        raise SystemExit("%s is missing: build the tls_relay_floor target" % tool)
    ready = os.path.join(env.dir, name + ".ready")
    argv = [tool, "--cert", env.path("kubelet.crt"), "--key", env.path("kubelet.key"),
            "--upstream-port", str(upstream_port), "--upstream-ca", env.path("kubelet-ca.crt"),
            "--alpn", alpn, "--ready-file", ready]
    if buffer_kib:
        argv += ["--buffer-kib", str(buffer_kib)]
    if upstream_cert:
        argv += ["--upstream-cert", env.path(upstream_cert + ".crt"),
                 "--upstream-key", env.path(upstream_cert + ".key")]
    p, text = env.start(name, argv, ready)
    p.port = int(text.strip().split("=")[1])
    return p


def start_floor_pair(env, kubelet_port, alpn="http/1.1", buffer_kib=None):
    """Two floor relays in a row in front of the kubelet nginx on @kubelet_port, the chain's
    shape without anything but TLS: (in, out), in = the one a client dials (cloudstream's place:
    TLS in, TLS to out), out = the one that dials the kubelet with the edge's kubelet client
    certificate (edgestream's place). Their CPU per GiB is the floor for each daemon's."""
    out = start_floor_relay(env, "floor-out", kubelet_port, "edgestream-kubelet-client", alpn,
                            buffer_kib)
    return start_floor_relay(env, "floor-in", out.port, None, alpn, buffer_kib), out


# ---- containerd -----------------------------------------------------------------------------

class Pod:
    """A real containerd under the run's directory (peers/containerd.py) with the test images,
    a host-network pod default/bench and its containers, driven by stream-cri. start() may
    fail half way: close() (or the end of a with block) undoes what was done."""

    def __init__(self, env):
        from containerd import Containerd
        self.env = env
        self.ctd = Containerd(os.path.join(env.dir, "ctd"))
        self.tool = os.path.join(h.BIN, "cri", "stream-cri")
        self.logs = os.path.join(env.dir, "pods", "default_bench_bench-uid")
        self.sandbox = None

    def cri(self, *a):
        """stream-cri's output for @a."""
        return subprocess.run([self.tool, "--socket", self.ctd.socket] + list(a), check=True,
                              capture_output=True).stdout.decode().strip()

    def start(self):
        import images
        self.ctd.start()
        images.import_into(self.ctd, images.build(os.path.join(self.env.dir, "images")))
        os.makedirs(self.logs)
        self.sandbox = self.cri("run-pod", "default", "bench", "bench-uid", self.logs)
        return self

    def container(self, *argv):
        """Container "app" of busybox running @argv; returns its id."""
        import images
        return self.cri("create-container", "default", "bench", "bench-uid", self.logs,
                        self.sandbox, "app", images.BUSYBOX_IMAGE, "--", *argv)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self.sandbox:
            subprocess.run([self.tool, "--socket", self.ctd.socket, "remove-pod", self.sandbox],
                           capture_output=True)
        self.ctd.stop()


# ---- /proc and /metrics ---------------------------------------------------------------------

def cpu_seconds(pid):
    """utime + stime of @pid so far (/proc/PID/stat)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TCK


def status_kib(pid, key="VmRSS"):
    """A KiB figure of /proc/PID/status (VmRSS, VmHWM...); 0 when it has none."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def anon_kib(pid):
    """Anonymous memory of @pid (/proc/PID/smaps_rollup); 0 when unreadable."""
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                if line.startswith("Anonymous:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def syscalls(pid):
    """read-like and write-like system calls so far (/proc/PID/io: syscr, syscw)."""
    with open("/proc/%d/io" % pid) as f:
        io = dict(line.split(": ") for line in f.read().splitlines())
    return int(io["syscr"]), int(io["syscw"])


def fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def metrics(port):
    """A daemon's admin /metrics as {"name{labels}": value} (comments and non-numbers left)."""
    import urllib.request
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read()
    out = {}
    for line in text.decode().splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.rpartition(" ")
            try:
                out[k] = float(v)
            except ValueError:
                pass
    return out


# ---- clients --------------------------------------------------------------------------------

def client_ctx(pki, cert="apiserver-kubelet-client", ca="stream-ca.crt"):
    """A TLS client context with the client certificate @cert(.crt, .key) of the PKI directory
    @pki, verifying the server against @ca without checking its name; ca=None: no verification
    at all."""
    ctx = ssl.create_default_context(cafile=os.path.join(pki, ca) if ca else None)
    ctx.check_hostname = False
    if ca is None:
        ctx.verify_mode = ssl.CERT_NONE
    ctx.load_cert_chain(os.path.join(pki, cert + ".crt"), os.path.join(pki, cert + ".key"))
    return ctx


def curl(url, args, host=None):
    """One curl download to /dev/null: (seconds, status, bytes)."""
    argv = ["curl", "-sS", "-k", "-o", "/dev/null", "-w", "%{http_code} %{size_download}"]
    if host:
        argv += ["-H", "Host: " + host]
    t0 = time.perf_counter()
    out = subprocess.run(argv + list(args) + [url], check=True, capture_output=True,
                         text=True).stdout.split()
    return time.perf_counter() - t0, int(out[0]), int(out[1])


def keepalive_latency(port, ctx, host, requests, size=4096, warm=50):
    """@warm then @requests GET /metrics on one keep-alive TLS connection (TCP_NODELAY), each
    answer 200 with @size bytes: (p50, p99 in seconds, the TLS suite)."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=30)
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s = ctx.wrap_socket(raw)
    suite = s.cipher()[0]
    req = ("GET /metrics HTTP/1.1\r\nHost: %s\r\n\r\n" % host).encode()
    times = []
    for i in range(requests + warm):
        t0 = time.perf_counter()
        s.sendall(req)
        status, hdrs, rest = h.read_head(s)
        body = h.read_body(s, hdrs, rest)
        dt = time.perf_counter() - t0
        if status != 200 or len(body) != size:
            raise SystemExit("GET /metrics on %d: %d, %d bytes" % (port, status, len(body)))
        if i >= warm:  # the first ones warm the connections up
            times.append(dt)
    s.close()
    times.sort()
    return times[len(times) // 2], times[int(len(times) * 0.99)], suite
