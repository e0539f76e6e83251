#!/usr/bin/python3
"""The Go binding of libedgestream (edgestream/go) and its example agent, built with Debian's
golang-go against the *installed* library, and the agent in a real chain.

    go_agent_test.py package CC [SANITIZER FLAGS...]
    go_agent_test.py chain [test names...]

package: `cmake --install` of the build tree into a temporary prefix; with nothing but its
         pkg-config file (PKG_CONFIG_PATH), offline (GOPROXY=off, GOFLAGS=-mod=mod, a fresh
         GOCACHE and GOPATH in the run's directory under the build tree's test-tmp/): gofmt,
         go vet and go test of the package (its tests start a
         real cloudstream), go vet and go build of the agent into $ST_BIN_DIR/go/bin/. The
         sanitizer flags of the build tree go to CGO_CFLAGS/CGO_LDFLAGS, since the installed
         archives carry the sanitizer's calls; with AddressSanitizer the package tests end with
         LeakSanitizer's check (-tags lsan). The ctest fixture go_agent, which `chain` and
         e2e.kubectl_goagent need.
chain:   the agent dials a real cloudstream with the certificates of stream-certs and serves
         through it: the kubelet stand-in's /metrics byte for byte, logs, an exec upgrade echo;
         its admin /metrics, SIGHUP, the counters it prints, the tunnel down when the cloud
         goes, SIGTERM -> exit 0; configuration errors exit 2 with the library's message.

Skipped (77) without `go` (deploy/install-deps.sh installs golang-go), failed instead under
CI=true.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))
sys.path.insert(0, HERE)
import harness as h  # noqa: E402
from harness import check  # noqa: E402

GO_DIR = os.path.join(h.SRC, "edgestream", "go")
AGENT_DIR = os.path.join(GO_DIR, "example-agent")
AGENT = os.path.join(h.BIN, "go", "bin", "example-agent")  # built by `package`


def go_missing():
    """None if Debian's go is there; else the exit code (77, or 1 under CI) after saying why."""
    if shutil.which("go"):
        return None
    if os.environ.get("CI") == "true":
        print("CI needs go for the Go binding (deploy/install-deps.sh installs golang-go)")
        return 1
    print("skipped: no go (apt-get install golang-go)")
    return 77


def go_env(cc, flags, prefix, tmp):
    """Offline, hermetic: a fresh GOCACHE per run, because go's cache keys ignore the C headers
    and archives outside the package (a changed edgestream.h would leave a stale struct layout
    in a cached build) and the -L path of the run's temporary prefix; a run costs the few
    cgo packages of the standard library (seconds)."""
    env = dict(os.environ)
    env.update({
        "GOCACHE": os.path.join(tmp, "gocache"), "GOPATH": os.path.join(tmp, "gopath"),
        "GOPROXY": "off", "GOSUMDB": "off", "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local",
        "GO111MODULE": "on", "CGO_ENABLED": "1", "CC": cc,
        "CGO_CFLAGS": " ".join(["-g", "-O1"] + flags), "CGO_LDFLAGS": " ".join(flags),
        "PKG_CONFIG_PATH": os.path.join(prefix, "lib", "pkgconfig"),
    })
    env.pop("GOROOT", None)
    return env


def go(env, cwd, *args, timeout=600, quiet=False):
    """Runs go (or gofmt) in @cwd; prints the command, and its output unless @quiet and it
    worked. Returns the output."""
    print("$ (cd %s && %s)" % (os.path.relpath(cwd, h.SRC), " ".join(args)), flush=True)
    r = subprocess.run(list(args), cwd=cwd, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=timeout)
    out = r.stdout.decode(errors="replace")
    if r.returncode != 0 or not quiet:
        sys.stdout.write(out)
    check(r.returncode == 0, "%s: exit %d" % (" ".join(args[:3]), r.returncode))
    return out


def group_package(argv):
    miss = go_missing()
    if miss is not None:
        return miss
    if len(argv) < 1:
        print("usage: go_agent_test.py package CC [SANITIZER FLAGS...]")
        return 2
    cc, flags = argv[0], argv[1:]
    os.makedirs(os.path.dirname(AGENT), exist_ok=True)
    base = os.environ.get("ST_TEST_TMPDIR", "/tmp")
    os.makedirs(base, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="go-package.", dir=base)
    try:
        prefix = os.path.join(tmp, "prefix")
        subprocess.run(["cmake", "--install", h.BIN, "--prefix", prefix], check=True,
                       stdout=subprocess.DEVNULL)
        env = go_env(cc, flags, prefix, tmp)
        print(subprocess.run(["go", "version"], env=env, capture_output=True,
                             text=True).stdout.strip())
        print("pkg-config: " + subprocess.run(["pkg-config", "--libs", "edgestream"], env=env,
                                              capture_output=True, text=True).stdout.strip())
        unformatted = go(env, GO_DIR, "gofmt", "-l", ".", quiet=True)
        check(unformatted.strip() == "", "gofmt -l: not formatted:\n" + unformatted)
        tags = ["-tags", "lsan"] if "-fsanitize=address" in flags else []
        go(env, GO_DIR, "go", "vet", *tags, ".")
        out = go(env, GO_DIR, "go", "test", *tags, "-count=1", "-timeout", "240s", "-v", ".",
                 quiet=True)
        # the library's log lines are noise once the tests pass: keep the verdicts
        for line in out.splitlines():
            if re.match(r"^(--- |ok |PASS|FAIL)", line):
                print("    " + line)
        check(" SKIP:" not in out, "a Go test skipped (ST_BIN_DIR?)")
        go(env, AGENT_DIR, "go", "vet", ".")
        go(env, AGENT_DIR, "go", "build", "-o", AGENT + ".new", ".")
        os.replace(AGENT + ".new", AGENT)
        # GOFLAGS=-mod=mod may rewrite go.mod/go.sum: they must already be complete
        for d in (GO_DIR, AGENT_DIR):
            check(not os.path.exists(os.path.join(d, "go.sum")), "%s/go.sum appeared" % d)
        print("ok: built %s against the installed library" % AGENT)
        return 0
    except h.Fail as e:
        print("FAIL %s" % e)
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---- the agent in a chain -------------------------------------------------------------------

def write_config(env, cloud, kubelet, name, node="edge-1", extra=None):
    """The agent's edgestream options as the JSON file an agent ships; returns (path, ready)."""
    ready = os.path.join(env.dir, name + ".ready")
    if os.path.exists(ready):
        os.unlink(ready)
    opts = h.edge_options(env, cloud, kubelet, node)
    opts.update({"admin-listen": "127.0.0.1:0", "ready-file": ready})
    opts.update(extra or {})
    path = os.path.join(env.dir, name + ".json")
    with open(path, "w") as f:
        json.dump(opts, f, indent=1)
    return path, ready


def start_agent(env, cloud, kubelet, name="go-agent", node="edge-1", options=None, args=()):
    """The example agent (built by `package`) as the edge of @node, with edgestream @options
    on top of write_config's; ready once its tunnel is up (the library writes the ready file:
    admin=P, node=N). e2e.kubectl_goagent starts it this way too."""
    conf, ready = write_config(env, cloud, kubelet, name, node, options)
    p, text = env.start(name, [AGENT, "-config", conf] + list(args), ready)
    p.ports = h.ready_ports(text.split("node=")[0])
    return p


def log_text(p):
    with open(p.logpath, "rb") as f:
        return f.read().decode(errors="replace")


def wait_log(p, pattern, since, what, timeout=10.0):
    """The first match of @pattern (a line: re.M) in what the agent @p printed after @since
    (h.log_mark, taken before the action): an earlier step's line never answers."""
    return h.wait_log(p, pattern, since, timeout, what, re.M)


class Chain(h.Chain):
    """kubelet stand-in + cloudstream + the Go agent as edge-1 (also .agent): what
    cloudstream_test's checks expect of a chain (env, kubelet, api, get)."""

    def __init__(self):
        super().__init__("go-agent", lambda env, cloud, kubelet: start_agent(
            env, cloud, kubelet, args=["-stats-every", "300ms"]))
        self.agent = self.edge


def tunnel_up(c):
    """The Connected handler ran (after the library wrote the ready file); the Certificate
    handler reported the certificate in use, and the library's lines came through the log hook
    into the agent's log."""
    wait_log(c.agent, r"^tunnel up node=edge-1 protocol=extended$", 0, "tunnel up")
    wait_log(c.agent, r"^certificate in_use not_after=\d{4}-\d\d-\d\dT\S+Z path=\S+$", 0,
             "certificate handler")
    wait_log(c.agent, r"^edgestream: \S+ info  .*edgestream 0\.1\.0: node edge-1", 0,
             "log hook")


def agent_admin_metrics(c):
    """The library's admin endpoint runs inside the agent."""
    st, text = h.admin_get(c.agent, "/metrics")
    check(st == 200, "admin /metrics: %d" % st)
    check('edgestream_tunnel_connected{protocol="extended"} 1' in text, "admin:\n" + text)
    check(h.admin_get(c.agent, "/readyz") == (200, "ok\n"), "admin /readyz")


def stats_printed(c):
    """The agent prints the counters it reads through the binding (-stats-every)."""
    m = wait_log(c.agent, r"^stats connected=true connects=1 disconnects=0 streams=([1-9]\d*) "
                 r"open=\d+ refused=0 to_cloud=([1-9]\d*) from_cloud=\d+$", 0,
                 "stats")  # any line since the start: printed every -stats-every
    print("     agent's counters: streams=%s to_cloud=%s" % m.groups(), flush=True)


def sighup_reloads(c):
    """SIGHUP: the agent re-checks the certificate files and reads its -config again, handing
    it to the running tunnel (Tunnel.Reconfigure): a live option changes, another is named as
    needing a restart."""
    path = os.path.join(c.env.dir, "go-agent.json")
    with open(path) as f:
        opts = json.load(f)
    opts.update({"backend-dial-timeout": "7s", "max-streams": "10"})
    with open(path + ".tmp", "w") as f:
        json.dump(opts, f)
    os.rename(path + ".tmp", path)
    mark = h.log_mark(c.agent)
    c.agent.send_signal(signal.SIGHUP)
    wait_log(c.agent, r"^reload: checking the certificate files$", mark, "SIGHUP")
    wait_log(c.agent, r"certificate files unchanged", mark, "the library's reload")
    wait_log(c.agent, r"configuration reloaded: backend-dial-timeout 7000 ms \(was 5000 ms\)",
             mark, "the new configuration applied")
    wait_log(c.agent, r"needs a restart: max-streams \(runs with 1024, the file says 10\)",
             mark, "the restart-only option named")


def cloud_gone(c):
    """cloudstream stops: the Disconnected handler reports it with the redial delay."""
    mark = h.log_mark(c.agent)
    check(c.env.stop(c.cloud) == 0, "cloudstream: exit %s after SIGTERM" % c.cloud.returncode)
    m = wait_log(c.agent, r"^tunnel down err=\"[^\"]*\" retry_in=(\S+) reason=(.*)$", mark,
                 "tunnel down")
    print("     tunnel down: retry_in=%s reason=%s" % m.groups(), flush=True)


def sigterm_exit_0(c):
    mark = h.log_mark(c.agent)
    check(c.env.stop(c.agent) == 0, "agent: exit %s after SIGTERM" % c.agent.returncode)
    m = wait_log(c.agent, r"^stopped connects=1 streams=(\d+) bytes_to_cloud=(\d+) "
                 r"bytes_from_cloud=(\d+)$", mark, "final counters")
    streams, to_cloud, _ = (int(x) for x in m.groups())
    check(streams >= 4 and to_cloud > 10240, "final counters: %s" % m.group(0))


def config_errors(env, cloud, kubelet):
    """What the library refuses comes back as the agent's exit 2 with the library's reason."""
    cases = [
        ([AGENT, "-set", "no-such-option=1"], "unknown option --no-such-option"),
        ([AGENT, "-set", "ping-interval=soon"], "not a duration"),
        ([AGENT], "cloud-url is required"),
        ([AGENT, "-config", os.path.join(env.dir, "nowhere.json")], "nowhere.json"),
    ]
    conf, _ = write_config(env, cloud, kubelet, "bad-key",
                           extra={"tunnel-key": env.path("node-edge-1.crt")})  # not a key
    cases.append(([AGENT, "-config", conf], "edgestream: new:"))
    for argv, want in cases:
        r = subprocess.run(argv, capture_output=True, timeout=30)
        err = r.stderr.decode(errors="replace")
        check(r.returncode == 2 and want in err,
              "%s: exit %d, want 2 and %r in:\n%s" % (argv[1:], r.returncode, want, err))


def group_chain():
    miss = go_missing()
    if miss is not None:
        return miss
    if not os.access(AGENT, os.X_OK):
        print("FAIL %s is missing: integration.go_package builds it (ctest fixture go_agent)"
              % AGENT)
        return 1
    import cloudstream_test as cst  # its checks, against a chain with the agent as the edge
    c = Chain()
    rc = 1
    try:
        rc = h.run(h.named("go_agent", [
            ("tunnel_up", lambda: tunnel_up(c)),
            ("metrics_same_as_direct", lambda: cst.metrics_same_as_direct(c)),
            ("logs_tail", lambda: cst.logs_tail(c)),
            ("exec_echo", lambda: cst.exec_echo(c)),
            ("keep_alive", lambda: cst.keep_alive(c)),
            ("agent_admin_metrics", lambda: agent_admin_metrics(c)),
            ("stats_printed", lambda: stats_printed(c)),
            ("sighup_reloads", lambda: sighup_reloads(c)),
            ("config_errors", lambda: config_errors(c.env, c.cloud, c.kubelet)),
            ("cloud_gone", lambda: cloud_gone(c)),
            ("sigterm_exit_0", lambda: sigterm_exit_0(c)),
        ]))
        return rc
    finally:
        h.close_env(c.env, rc != 0)


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ("package", "chain"):
        print(__doc__)
        return 2
    group = sys.argv[1]
    if group == "package":
        return group_package(sys.argv[2:])
    sys.argv = sys.argv[1:]  # h.run takes test names from argv[1:]
    return group_chain()


if __name__ == "__main__":
    sys.exit(main())
