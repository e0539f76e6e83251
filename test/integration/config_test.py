#!/usr/bin/env python3
"""The configuration of both daemons (issue 17): YAML files with apiVersion/kind (JSON still
accepted), what a bad file is told, --check-config, SIGHUP reloads, the JSON log format and the
access-log switch.

cloud: cloudstream alone (a request for a node that is not connected is enough for an access
       line): YAML start-up, refusals naming file, line and key, JSON compatibility,
       --check-config, SIGHUP (applied, needs a restart, a bad file keeps the running
       configuration), --log-format json, --access-log.
edge:  a kubelet stand-in + cloudstream + edgestream started from a YAML file: the same for the
       edge daemon.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
import harness as h  # noqa: E402
from harness import check  # noqa: E402

CLOUD = os.path.join(h.BIN, "cloudstream", "cloudstream")
EDGE = os.path.join(h.BIN, "edgestream", "edgestream")
HEADER = "apiVersion: cloudstream.io/v1alpha1\n"


def write(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)  # a reload never reads half a file
    return path


def run(argv):
    r = subprocess.run(argv, capture_output=True, timeout=20)
    return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")


def wait_log(p, pattern, start, timeout=10.0):
    """The first match of @pattern in @p's log after byte @start (log_size, taken before the
    action): a line written before, for another step, never answers."""
    return h.wait_log(p, pattern, start, timeout)


def log_size(p):
    return os.path.getsize(p.logpath)


def json_lines(p, start=0):
    """Every line after byte @start of @p's log, each parsed as one JSON object."""
    out = []
    for line in open(p.logpath, "rb").read()[start:].splitlines():
        try:
            o = json.loads(line)
        except ValueError:
            raise h.Fail("not a JSON line: %r" % line[:300])
        check(isinstance(o, dict) and {"time", "level", "msg"} <= set(o),
              "a JSON line without time, level, msg: %r" % line[:300])
        check(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", o["time"]) is not None,
              "time %r" % o["time"])
        out.append(o)
    return out


# ---- cloudstream ------------------------------------------------------------------------------

def cloud_yaml(env, extra=""):
    """A commented YAML config with everything cloudstream needs, on loopback ports."""
    return (
        "# cloudstream, as an operator would write it\n" + HEADER + "kind: CloudStreamConfig\n"
        "tunnel-listen: 127.0.0.1:0          # edges dial here\n"
        "stream-listen: 127.0.0.1:0\n"
        "admin-listen: 127.0.0.1:0\n"
        "tunnel-cert: %s\ntunnel-key: %s\ntunnel-ca: %s\n"
        "stream-cert: %s\nstream-key: %s\nstream-client-ca: %s\n"
        "stream-allowed-subjects:\n  - kube-apiserver-kubelet-client   # the apiserver's CN\n"
        "sandbox: errno    # on, so a reload's syscalls are in the allow-list\n" % (
            env.path("cloudstream-tunnel.crt"), env.path("cloudstream-tunnel.key"),
            env.path("tunnel-ca.crt"), env.path("cloudstream-stream.crt"),
            env.path("cloudstream-stream.key"), env.path("stream-ca.crt")) + extra)


def start_file(env, exe, path, name):
    """@exe (CLOUD or EDGE) started from the config file @path; its ports from the ready file
    (the edge's also names its node: node= and what follows is not a port)."""
    ready = os.path.join(env.dir, name + ".ready")
    if os.path.exists(ready):
        os.unlink(ready)
    p, text = env.start(name, [exe, "--config", path, "--ready-file", ready], ready)
    p.ports = h.ready_ports(text.split("node=")[0])
    return p


def request_unknown_node(env, cloud):
    """A request for a node that is not connected: refused, and logged as an access line."""
    api = h.Api(env, cloud.ports["stream"])
    status, _, _, s = api.request("GET", "/containerLogs/ns/pod/ctr",
                                  [("Host", "nosuchnode:10350")])
    s.close()
    check(status in (404, 502, 503), "unknown node: %d" % status)
    return status


def cloud_yaml_starts(env):
    """cloudstream runs from a YAML file with comments; --print-config shows what it holds."""
    path = write(os.path.join(env.dir, "cloud-start.yaml"), cloud_yaml(env, "max-streams: 77\n"))
    rc, out, err = run([CLOUD, "--config", path, "--print-config"])
    check(rc == 0, "print-config: %d %s" % (rc, err))
    eff = json.loads(out)
    check(eff["max-streams"] == 77 and eff["stream-allowed-subjects"] ==
          ["kube-apiserver-kubelet-client"] and eff["sandbox"] == "errno", "effective %r" % eff)
    p = start_file(env, CLOUD, path, "cloud-yaml")
    request_unknown_node(env, p)
    check(env.stop(p) == 0, "exit after SIGTERM")


def cloud_bad_files(env):
    """Each bad file: exit 2 before anything starts, with the file, the line and the key."""
    good = cloud_yaml(env)
    lines = good.count("\n")
    cases = [
        (good + "max-streams: 5\nmax-streams: 6\n",
         r'%s:%d: key "max-streams" appears more than once' % ("{f}", lines + 2)),
        (good + "max-stream: 5\n", r'{f}:%d: unknown key "max-stream"' % (lines + 1)),
        (good.replace("kind: CloudStreamConfig", "kind: EdgeStreamConfig"),
         r'{f}:3: key "kind": "EdgeStreamConfig", expected "CloudStreamConfig"'),
        (good.replace("v1alpha1", "v1"), r'{f}:2: key "apiVersion"'),
        (good.replace(HEADER, ""), r'{f}: no "apiVersion" key'),
        (good + "idle-timeout: &t 5s\nanswer-timeout: *t\n",
         r'{f}:%d: key "idle-timeout": anchors \(&t\) are not accepted' % (lines + 1)),
        (good + "max-streams: !!int 5\n", r'{f}:%d: key "max-streams": tags' % (lines + 1)),
        (good + "max-streams: 0\n", r'{f}:%d: key "max-streams": --max-streams 0: out of range'
         % (lines + 1)),
        (good + "node-watch: yes\n", r'key "node-watch".*expected true or false'),
        (good + "---\n" + good, r"{f}:%d: a second document" % (lines + 1)),
        # JSON: the version is optional, but right when given; keys still named with lines.
        ('{\n  "kind": "EdgeStreamConfig"\n}\n', r'{f}:2: key "kind"'),
        ('{\n  "max-streams": 1,\n  "max-streams": 2\n}\n',
         r'{f}:3: key "max-streams" appears more than once'),
    ]
    for i, (text, want) in enumerate(cases):
        path = write(os.path.join(env.dir, "bad-%d.yaml" % i), text)
        rc, _, err = run([CLOUD, "--config", path, "--check-config"])
        rx = want.replace("{f}", re.escape(path))
        check(rc == 2 and re.search(rx, err), "case %d: exit %d, want %r in %r" % (
            i, rc, rx, err[-400:]))
    # A JSON file from before the version still loads.
    path = write(os.path.join(env.dir, "old.json"), '{"max-streams": 9, "idle-timeout": "5s"}')
    rc, out, err = run([CLOUD, "--config", path, "--print-config"])
    check(rc == 0 and json.loads(out)["max-streams"] == 9, "old JSON: %d %s" % (rc, err))


def cloud_check_config(env):
    """--check-config: 0 for a good configuration without starting anything (no ready file, no
    listener); 2 with every problem named; a port held by a running daemon is not a problem."""
    path = write(os.path.join(env.dir, "check.yaml"), cloud_yaml(env))
    ready = os.path.join(env.dir, "check.ready")
    rc, out, err = run([CLOUD, "--config", path, "--check-config", "--ready-file", ready])
    check(rc == 0 and "the configuration is good" in out, "good: %d %r %r" % (rc, out, err))
    check(not os.path.exists(ready), "--check-config started the daemon")
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    try:
        rc, out, err = run([CLOUD, "--config", path, "--check-config",
                            "--admin-listen", "127.0.0.1:%d" % port])
        check(rc == 0 and "its port is in use now" in err, "busy port: %d %r" % (rc, err))
    finally:
        busy.close()
    rc, out, err = run([CLOUD, "--config", path, "--check-config",
                        "--stream-key", env.path("cloudstream-tunnel.key"),
                        "--tunnel-listen", "192.0.2.1:10004",
                        "--apiserver-url", "kubernetes.default.svc",
                        "--tunnel-ca", os.path.join(env.dir, "nonexistent-ca.crt")])
    check(rc == 2, "bad: exit %d" % rc)
    for want in ["--stream-cert/--stream-key", "does not match",
                 "--tunnel-listen 192.0.2.1:10004: not an address of this host",
                 "--apiserver-url kubernetes.default.svc: expected https://",
                 "--tunnel-ca: ", "4 problems in the configuration"]:
        check(want in err, "%r not in %r" % (want, err))
    # The checks other options brought to start-up are run too.
    rc, out, err = run([CLOUD, "--config", path, "--check-config",
                        "--front-door-socket-mode", "9x", "--signer-cert", env.path("ca.crt")])
    check(rc == 2 and "--front-door-socket-mode 9x: expected octal" in err and
          "signing needs both" in err and "2 problems" in err, "start-up checks: %r" % err)


def cloud_sighup(env):
    """SIGHUP reads the file again: log-level, access-log, log-format and max-streams change
    now, tunnel-listen is logged as needing a restart and keeps its port, and a file that does
    not load changes nothing."""
    path = os.path.join(env.dir, "hup.yaml")
    write(path, cloud_yaml(env, "log-level: info\nmax-streams: 100\n"))
    p = start_file(env, CLOUD, path, "cloud-hup")
    start = log_size(p)
    request_unknown_node(env, p)
    wait_log(p, r"node=nosuchnode access: GET /containerLogs/ns/pod/ctr 503", start)
    # tunnel-listen "127.0.0.1:0" -> another address: a restart; the rest applies.
    write(path, cloud_yaml(env, "log-level: debug\nmax-streams: 50\naccess-log: off\n"
                                "log-format: json\n").replace(
        "tunnel-listen: 127.0.0.1:0", "tunnel-listen: 127.0.0.1:1"))
    start = log_size(p)
    p.send_signal(signal.SIGHUP)
    wait_log(p, r"configuration reloaded: access-log off \(was on\)", start)
    # The certificates reload on another worker than the configuration: their line comes in
    # text or, after the switch, in JSON.
    wait_log(p, r'reloaded stream certificate', start)
    text = open(p.logpath, "rb").read()[start:].decode()
    for want in ["configuration reloaded: log-level debug (was info)",
                 "configuration reloaded: max-streams 50 (was 100)",
                 "configuration reloaded: log-format json (was text)",
                 'needs a restart: tunnel-listen (runs with "127.0.0.1:0", the file says '
                 '"127.0.0.1:1")']:
        check(want in text, "%r not in the log:\n%s" % (want, text))
    # The tunnel port is the one it had.
    socket.create_connection(("127.0.0.1", p.ports["tunnel"]), timeout=5).close()
    # No access line now; the lines after the reload are JSON.
    start = log_size(p)
    request_unknown_node(env, p)
    time.sleep(0.5)
    lines = json_lines(p, start)
    check(lines, "no log line for the refused request")
    check(not any(o["msg"].startswith("access:") for o in lines), "access line with it off")
    # A bad file: logged with the file, line and key; the running configuration stays.
    write(path, cloud_yaml(env, "access-log: on\nmax-streams: 1\nmax-streams: 2\n"))
    start = log_size(p)
    p.send_signal(signal.SIGHUP)
    m = wait_log(p, r'configuration not reloaded, the running one stays: [^"]*hup\.yaml:\d+: '
                    r'key \\"max-streams\\" appears more than once', start)
    check(m is not None, "")
    start = log_size(p)
    request_unknown_node(env, p)
    time.sleep(0.3)
    check(not any(o["msg"].startswith("access:") for o in json_lines(p, start)),
          "the bad file's access-log: on was applied")
    # A good file again: the access line comes back, as JSON with node and stream.
    write(path, cloud_yaml(env, "log-format: json\n"))
    start = log_size(p)
    p.send_signal(signal.SIGHUP)
    wait_log(p, r"configuration reloaded: access-log on", start)
    start = log_size(p)
    request_unknown_node(env, p)
    wait_log(p, r'"msg":"access: GET /containerLogs/ns/pod/ctr', start)
    acc = [o for o in json_lines(p, start) if o["msg"].startswith("access:")]
    check(acc and acc[0]["node"] == "nosuchnode" and "stream" not in acc[0] and  # never routed
          acc[0]["level"] == "info", "access line %r" % acc)
    # stream-allowed-subjects applies to the next connection: the apiserver's CN is refused.
    base = cloud_yaml(env, "log-format: json\n")
    write(path, base.replace("  - kube-apiserver-kubelet-client", "  - someone-else"))
    start = log_size(p)
    p.send_signal(signal.SIGHUP)
    wait_log(p, r"configuration reloaded: stream-allowed-subjects someone-else", start)
    api = h.Api(env, p.ports["stream"])
    status, _, _, s = api.request("GET", "/containerLogs/ns/pod/ctr",
                                  [("Host", "nosuchnode:10350")])
    s.close()
    check(status == 403, "a CN no longer listed: %d" % status)
    # An empty list without Webhook would open the port to any client certificate: refused.
    write(path, base.replace("  - kube-apiserver-kubelet-client", "").replace(
        "stream-allowed-subjects:", "stream-allowed-subjects: []"))
    start = log_size(p)
    p.send_signal(signal.SIGHUP)
    wait_log(p, r"configuration not reloaded, the running one stays: stream-allowed-subjects "
                r"is empty", start)
    check(env.stop(p) == 0, "exit after SIGTERM")


def group_cloud():
    with h.Group("cloud", "cfg-cloud", nodes=("edge-1",)) as g:
        env = g.env
        return g.run([
            ("yaml_starts", lambda: cloud_yaml_starts(env)),
            ("bad_files", lambda: cloud_bad_files(env)),
            ("check_config", lambda: cloud_check_config(env)),
            ("sighup", lambda: cloud_sighup(env))])


# ---- edgestream -------------------------------------------------------------------------------

def edge_yaml(env, cloud, kubelet, extra=""):
    return (
        "# edgestream on edge-1\n" + HEADER + "kind: EdgeStreamConfig\n"
        "cloud-url: wss://127.0.0.1:%d/v1/kubeedge/connect\n"
        "cloud-server-name: localhost      # the name in the cloud's certificate\n"
        "tunnel-cert: %s\ntunnel-key: %s\ntunnel-ca: %s\n"
        "kubelet-url: https://127.0.0.1:%d\n"
        "kubelet-cert: %s\nkubelet-key: %s\nkubelet-ca: %s\n"
        "admin-listen: 127.0.0.1:0\n"
        "sandbox: errno\n" % (
            cloud.ports["tunnel"], env.path("node-edge-1.crt"), env.path("node-edge-1.key"),
            env.path("tunnel-ca.crt"), kubelet.port, env.path("edgestream-kubelet-client.crt"),
            env.path("edgestream-kubelet-client.key"), env.path("kubelet-ca.crt")) + extra)


def logs_request(env, cloud):
    api = h.Api(env, cloud.ports["stream"])
    status, _, body, s = api.request("GET", "/containerLogs/default/pod-a/ctr",
                                     [("Host", "edge-1:10350")])
    s.close()
    check(status == 200 and body, "logs through the edge: %d" % status)


def edge_check_and_bad_files(env, cloud, kubelet):
    good = edge_yaml(env, cloud, kubelet)
    path = write(os.path.join(env.dir, "edge-check.yaml"), good)
    rc, out, err = run([EDGE, "--config", path, "--check-config"])
    check(rc == 0 and "the configuration is good" in out, "good: %d %r %r" % (rc, out, err))
    rc, out, err = run([EDGE, "--config", path, "--check-config",
                        "--tunnel-key", env.path("kubelet.key"),
                        "--admin-listen", "192.0.2.1:10354"])
    check(rc == 2 and "does not match" in err and
          "admin-listen 192.0.2.1:10354: not an address of this host" in err,
          "bad: %d %r" % (rc, err))
    # A node that joins at start: its tunnel files do not exist yet, and the check must not
    # spend the token by joining.
    missing = os.path.join(env.dir, "not-joined")
    rc, out, err = run([EDGE, "--config", path, "--check-config",
                        "--join-token", "abcdef.0123456789abcdef",
                        "--tunnel-cert", missing + ".crt", "--tunnel-key", missing + ".key"])
    check(rc == 0 and "not joined yet" in err and "--check-config does not join" in err and
          not os.path.exists(missing + ".crt"), "join: %d %r" % (rc, err))
    rc, out, err = run([EDGE, "--config", path, "--check-config", "--cloud-url", "http://x"])
    check(rc == 2 and "cloud-url http://x: expected wss://" in err, "url: %d %r" % (rc, err))
    for text, want in [
            (good.replace("EdgeStreamConfig", "CloudStreamConfig"),
             r'{f}:3: key "kind": "CloudStreamConfig", expected "EdgeStreamConfig"'),
            (good + "kubelet-idle-timeout: 5s\nkubelet-idle-timeout: 6s\n",
             r'{f}:%d: key "kubelet-idle-timeout" appears more than once' % (
                 good.count("\n") + 2)),
            (good + "tunnel-listen: 1\n", r'{f}:%d: unknown key "tunnel-listen"' % (
                good.count("\n") + 1))]:
        bad = write(os.path.join(env.dir, "edge-bad.yaml"), text)
        rc, _, err = run([EDGE, "--config", bad])
        rx = want.replace("{f}", re.escape(bad))
        check(rc == 2 and re.search(rx, err), "exit %d, want %r in %r" % (rc, rx, err))


def edge_sighup(env, cloud, kubelet):
    path = os.path.join(env.dir, "edge-hup.yaml")
    write(path, edge_yaml(env, cloud, kubelet, "log-level: info\n"))
    p = start_file(env, EDGE, path, "edge-hup")
    start = log_size(p)
    logs_request(env, cloud)
    wait_log(p, r"node=edge-1 stream=\d+ access: LOGS_CONNECT kubelet done", start)
    write(path, edge_yaml(env, cloud, kubelet, "log-level: debug\naccess-log: off\n"
                                               "log-format: json\nbackend-dial-timeout: 7s\n"
                                               "max-streams: 10\n"))
    start = log_size(p)
    p.send_signal(signal.SIGHUP)
    wait_log(p, r"needs a restart: max-streams", start)
    text = open(p.logpath, "rb").read()[start:].decode()
    for want in ["configuration reloaded: log-level debug (was info)",
                 "configuration reloaded: access-log off (was on)",
                 "configuration reloaded: backend-dial-timeout 7000 ms (was 5000 ms)",
                 "needs a restart: max-streams (runs with 1024, the file says 10)"]:
        check(want in text, "%r not in the log:\n%s" % (want, text))
    start = log_size(p)
    logs_request(env, cloud)
    time.sleep(0.5)
    lines = json_lines(p, start)
    check(not any(o["msg"].startswith("access:") for o in lines), "edge access line with it off")
    # A file that does not load: the running configuration stays, the tunnel too.
    write(path, "kind: EdgeStreamConfig\n")
    start = log_size(p)
    p.send_signal(signal.SIGHUP)
    wait_log(p, r'configuration not reloaded, the running one stays: [^"]*edge-hup\.yaml: no '
                r'\\"apiVersion\\" key', start)
    logs_request(env, cloud)
    # Access log on again: the edge's JSON access line has node and stream.
    write(path, edge_yaml(env, cloud, kubelet, "log-format: json\n"))
    start = log_size(p)
    p.send_signal(signal.SIGHUP)
    wait_log(p, r"configuration reloaded: access-log on", start)
    start = log_size(p)
    logs_request(env, cloud)
    wait_log(p, r'"msg":"access: LOGS_CONNECT kubelet done', start)
    acc = [o for o in json_lines(p, start) if o["msg"].startswith("access:")]
    check(acc and acc[0]["node"] == "edge-1" and isinstance(acc[0]["stream"], int),
          "edge access line %r" % acc)
    check(env.stop(p) == 0, "exit after SIGTERM")


def group_edge():
    with h.Group("edge", "cfg-edge", nodes=("edge-1",)) as g:
        env = g.env
        kubelet = h.start_kubelet(env)
        cloud = h.start_cloudstream(env)
        return g.run([
            ("check_and_bad_files", lambda: edge_check_and_bad_files(env, cloud, kubelet)),
            ("sighup", lambda: edge_sighup(env, cloud, kubelet))])


def main():
    return h.main_by_group({"cloud": group_cloud, "edge": group_edge}, "cloud")


if __name__ == "__main__":
    sys.exit(main())
