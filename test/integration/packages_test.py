#!/usr/bin/python3
"""The Debian packages (deploy/build-packages.sh) installed on this machine with `dpkg -i`, run
as their systemd units say, removed and purged.

Root only (skipped with 77 otherwise, failed instead under CI=true): it changes the machine. It
is idempotent: packages of ours left by an interrupted run are purged first, and whatever
happens the packages and the certificates it put into /etc are gone at the end. Runs with the
.deb files in $ST_PKG_DIR (the ctest fixture integration.packages_build makes them), one run at
a time on the machine (a lock in /run/lock), waiting for dpkg's lock when apt holds it.

Checked:
- the four packages install together; versions are the project's; the daemons' Depends are
  exactly Debian 12's libc6 libcurl4 libev4 libjson-c5 libyaml-0-2 libseccomp2 libssl3
  libwebsockets17 libnghttp2-14 (HTTP/2: edgestream's kubelet client, cloudstream's stream
  port) (with the bounds dpkg-shlibdeps computed) and libwebsockets-evlib-ev (lws dlopens it);
  conffiles are the example config and the env file;
- certificates from the installed stream-certs, put where deploy/README.md says (mode 0600 in
  /etc/<daemon>/pki, which the package makes 0700);
- cloudstream as its unit says, without systemd: EnvironmentFile, LoadCredential (copies of the
  pki files in a credentials directory, %d) and DynamicUser (a uid of no account, via setpriv);
  only the listen addresses and --ready-file are added. It becomes ready (/readyz 200);
- edgestream as its unit says (EnvironmentFile, ExecStart, as root) with the installed example
  config, plus --cloud-url/--cloud-server-name toward that cloudstream and a loopback admin
  port: its tunnel comes up (ready file, /readyz 200, cloudstream_sessions 1); SIGHUP keeps it
  up; SIGTERM ends both with exit 0 within the units' TimeoutStopSec;
- `systemd-analyze verify` of both installed units finds nothing, and their offline exposure
  is at most 2.5 (when systemd-analyze is there);
- libedgestream-dev: the installed example compiles with `pkg-config --cflags --libs
  edgestream` alone and runs (and stops on its missing configuration);
- `dpkg -r` removes the programs and keeps the conffiles; `dpkg --purge` then leaves every path
  the packages hold, the dpkg database and the systemd enablement state as they were before.
Not covered: the maintainer scripts' systemd branch (no systemd runs here).
"""
import fcntl
import glob
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))
sys.path.insert(0, HERE)
import harness as h  # noqa: E402
from harness import check  # noqa: E402
from deploy_test import EDGE_HOST_FILES, NODE, parse_env_file, expand_exec, parse_unit  # noqa: E402

PKG_DIR = os.environ.get("ST_PKG_DIR", os.path.join(h.BIN, "packages-release", "packages"))
PKGS = ("cloudstream", "edgestream", "stream-tools", "libedgestream-dev")
# libev4 and lws's libev plugin: the loop the daemons run on (stream/loop.h).
# libyaml-0-2: the YAML config files.
RUNTIME_DEPS = {"libc6", "libcurl4", "libjson-c5", "libyaml-0-2", "libseccomp2", "libssl3",
                "libwebsockets17", "libev4", "libwebsockets-evlib-ev"}
UNIT_DIR = "/lib/systemd/system"
CLOUD_PKI = ("cloudstream-tunnel.crt", "cloudstream-tunnel.key", "tunnel-ca.crt",
             "cloudstream-stream.crt", "cloudstream-stream.key", "stream-ca.crt")
LOCK = "/run/lock/cloudstream-packages-test.lock"


def dpkg(*args, ok=True):
    """dpkg, waiting up to 2 min while another dpkg/apt holds the lock."""
    deadline = time.monotonic() + 120
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    while True:
        r = subprocess.run(["dpkg"] + list(args), capture_output=True, text=True, timeout=300,
                           env=env)
        if r.returncode and "lock" in r.stderr and time.monotonic() < deadline:
            time.sleep(1)
            continue
        if ok:
            check(r.returncode == 0, "dpkg %s: rc %d\n%s%s" % (" ".join(args), r.returncode,
                                                                r.stdout, r.stderr))
        return r


def status(pkg):
    r = subprocess.run(["dpkg-query", "-W", "-f", "${Status}", pkg], capture_output=True,
                       text=True)
    return r.stdout.strip() if r.returncode == 0 else "not-installed"


def query(pkg, field):
    return subprocess.run(["dpkg-query", "-W", "-f", "${%s}" % field, pkg], capture_output=True,
                          text=True, check=True).stdout


def debs():
    found = {}
    for p in PKGS:
        files = sorted(glob.glob(os.path.join(PKG_DIR, "%s_*.deb" % p)))
        check(len(files) == 1, "%s: want one %s_*.deb, found %s" % (PKG_DIR, p, files))
        found[p] = files[0]
    return found


def footprint(deb_files):
    """Every path the packages ship, the dpkg database's files for them, and where systemd
    enablement would live: {path: exists}."""
    paths = set()
    for f in deb_files.values():
        out = subprocess.run(["dpkg-deb", "--fsys-tarfile", f], capture_output=True,
                             check=True).stdout
        names = subprocess.run(["tar", "-t"], input=out, capture_output=True,
                               check=True).stdout.decode().split("\n")
        paths |= {"/" + n.lstrip("./").rstrip("/") for n in names if n.strip("./")}
    for p in PKGS:
        paths |= set(glob.glob("/var/lib/dpkg/info/%s.*" % p))
        paths.add("/var/lib/dpkg/info/%s.list" % p)
    for d in ("cloudstream", "edgestream"):
        paths.add("/etc/systemd/system/multi-user.target.wants/%s.service" % d)
        paths |= set(glob.glob("/var/lib/systemd/deb-systemd-helper-*/**/%s.service*" % d,
                               recursive=True))
    return {p: os.path.lexists(p) for p in sorted(paths)}


def project_version():
    with open(os.path.join(h.SRC, "CMakeLists.txt")) as f:
        return re.search(r"project\(\w+ VERSION ([\d.]+)", f.read()).group(1)


def unit(name):
    u = parse_unit(os.path.join(UNIT_DIR, name + ".service"))
    svc = u["Service"]

    def one(k):
        check(k in svc and len(svc[k]) == 1, "%s [Service] %s: %s" % (name, k, svc.get(k)))
        return svc[k][0]
    (envfile,) = svc["EnvironmentFile"]
    check(envfile == "-/etc/default/" + name, "%s EnvironmentFile %s" % (name, envfile))
    return svc, one, parse_env_file(envfile[1:])


def free_uid():
    """A uid in systemd's DynamicUser range that no account has."""
    for uid in range(61184, 65519):
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
    raise h.Fail("no free uid")


def get(port, path):
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request("GET", path)
    r = c.getresponse()
    return r.status, r.read().decode(errors="replace")


def wait_for(fn, what, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if fn():
            return
        time.sleep(0.1)
    raise h.Fail("%s: not within %.0f s" % (what, timeout))


# ---- the steps -------------------------------------------------------------------------------

def test_install(files):
    dpkg("-i", *files.values())
    ver = project_version()
    for p in PKGS:
        check(status(p) == "install ok installed", "%s: %s" % (p, status(p)))
        check(query(p, "Version").startswith(ver + "-"), "%s version %s, project %s" % (
            p, query(p, "Version"), ver))
    for d in ("cloudstream", "edgestream"):
        deps = query(d, "Depends")
        names = {x.split()[0] for x in deps.split(", ")}
        want = RUNTIME_DEPS | {"libnghttp2-14"}  # both speak HTTP/2
        check(names == want, "%s Depends: %s" % (d, deps))
        conf = {line.split()[0] for line in query(d, "Conffiles").splitlines() if line.strip()}
        check(conf == {"/etc/%s/%s.yaml" % (d, d), "/etc/default/" + d},
              "%s conffiles %s" % (d, conf))
        out = subprocess.run(["/usr/bin/" + d, "--version"], capture_output=True, text=True)
        check(out.returncode == 0 and out.stdout.strip() == "%s %s" % (d, ver),
              "%s --version: %r" % (d, out.stdout + out.stderr))
        st = os.stat("/etc/%s/pki" % d)
        check(st.st_mode & 0o777 == 0o700 and st.st_uid == 0, "/etc/%s/pki mode %o" % (
            d, st.st_mode & 0o777))
    check(set(query("stream-tools", "Depends").replace(",", "").split()) >= {"libssl3"},
          "stream-tools Depends")


def test_pki(env):
    """Certificates from the installed stream-certs, installed as deploy/README.md says."""
    pki = os.path.join(env.dir, "pki-pkg")
    subprocess.run(["/usr/bin/stream-certs", "quick", "--out", pki, "--node", NODE], check=True,
                   stdout=subprocess.DEVNULL)
    for n in CLOUD_PKI:
        shutil.copy(os.path.join(pki, n), "/etc/cloudstream/pki/" + n)
        os.chmod("/etc/cloudstream/pki/" + n, 0o600)
    for host_name, quick_name in EDGE_HOST_FILES.items():
        shutil.copy(os.path.join(pki, quick_name), "/etc/edgestream/pki/" + host_name)
        os.chmod("/etc/edgestream/pki/" + host_name, 0o600)
    return pki


def test_cloudstream(env):
    svc, one, uenv = unit("cloudstream")
    check(one("DynamicUser") == "yes" and "User" not in svc, "cloudstream: DynamicUser")
    check(one("Type") == "simple", "cloudstream Type")
    uid = free_uid()
    os.chmod(env.dir, 0o711)  # the service's user reaches its directories in it
    # LoadCredential=: systemd copies each file, as root, into a directory only the service's
    # user reads; %d names it.
    cred = os.path.join(env.dir, "credentials")
    os.makedirs(cred, mode=0o700)
    ids = []
    for lc in svc["LoadCredential"]:
        cid, _, path = lc.partition(":")
        check(path.startswith("/etc/cloudstream/pki/"), "LoadCredential %s" % lc)
        shutil.copy(path, os.path.join(cred, cid))
        os.chmod(os.path.join(cred, cid), 0o400)
        os.chown(os.path.join(cred, cid), uid, uid)
        ids.append(cid)
    check(sorted(ids) == sorted(CLOUD_PKI), "credentials %s" % ids)
    os.chown(cred, uid, uid)
    argv = expand_exec(one("ExecStart").replace("%d", cred), uenv)
    check(argv[0] == "/usr/bin/cloudstream" and argv[1:3] == ["--config",
                                                              "/etc/cloudstream/cloudstream.yaml"],
          "cloudstream ExecStart %s" % argv)
    run = os.path.join(env.dir, "cloud-run")
    os.makedirs(run)
    os.chown(run, uid, uid)
    ready = os.path.join(run, "ready")
    argv += ["--tunnel-listen", "127.0.0.1:0", "--stream-listen", "127.0.0.1:0",
             "--admin-listen", "127.0.0.1:0", "--ready-file", ready]
    p, text = env.start("cloudstream", argv, ready, prefix=[
        "setpriv", "--reuid=%d" % uid, "--regid=%d" % uid, "--clear-groups", "--"])
    p.ports = h.ready_ports(text)
    p.stop_timeout = float(one("TimeoutStopSec").rstrip("s"))
    check(os.stat("/proc/%d" % p.pid).st_uid == uid, "cloudstream does not run as uid %d" % uid)
    for path in ("/healthz", "/readyz"):
        st, body = get(p.ports["admin"], path)
        check(st == 200, "cloudstream %s: %d %s" % (path, st, body))
    return p


def test_edgestream(env, cloud):
    svc, one, uenv = unit("edgestream")
    check("User" not in svc and "DynamicUser" not in svc, "edgestream runs as root (CRI socket)")
    argv = expand_exec(one("ExecStart"), uenv)
    check(argv[:3] == ["/usr/bin/edgestream", "--config", "/etc/edgestream/edgestream.yaml"],
          "edgestream ExecStart %s" % argv)
    ready = os.path.join(env.dir, "edgestream.ready")
    argv += ["--cloud-url", "wss://127.0.0.1:%d/v1/kubeedge/connect" % cloud.ports["tunnel"],
             "--cloud-server-name", "localhost", "--admin-listen", "127.0.0.1:0",
             "--ready-file", ready]
    p, text = env.start("edgestream", argv, ready)
    p.ports = h.ready_ports(text.split("node=")[0])
    p.stop_timeout = float(one("TimeoutStopSec").rstrip("s"))
    st, body = get(p.ports["admin"], "/readyz")
    check(st == 200, "edgestream /readyz: %d %s" % (st, body))
    st, body = get(cloud.ports["admin"], "/metrics")
    check("cloudstream_sessions 1" in body, "the tunnel did not register: %s" % body[:300])
    # ExecReload: SIGHUP reads the installed YAML config again and checks the certificates;
    # the daemon stays up.
    p.send_signal(signal.SIGHUP)
    wait_for(lambda: "configuration reloaded: nothing changed" in env.tail(p, 50),
             "SIGHUP: the configuration read again")
    check(p.poll() is None, "edgestream died on SIGHUP")
    return p


def test_stop(env, *procs):
    for p in procs:
        t0 = time.monotonic()
        rc = env.stop(p, p.stop_timeout)
        check(rc == 0, "%s exit %s after SIGTERM:\n%s" % (p.name, rc, env.tail(p)))
        check(time.monotonic() - t0 < 5, "%s: SIGTERM took %.1f s" % (
            p.name, time.monotonic() - t0))


def test_units(env):
    sa = shutil.which("systemd-analyze")
    if sa is None:
        print("note: systemd-analyze not installed; units not verified by systemd", flush=True)
        return
    for d in ("cloudstream", "edgestream"):
        path = os.path.join(UNIT_DIR, d + ".service")
        r = subprocess.run([sa, "verify", path], capture_output=True, text=True, timeout=60)
        mine = [ln for ln in (r.stdout + r.stderr).splitlines() if d in ln]
        check(r.returncode == 0 and not mine, "systemd-analyze verify %s: rc %d\n%s" % (
            d, r.returncode, r.stdout + r.stderr))
        r = subprocess.run([sa, "security", "--offline=true", path], capture_output=True,
                           text=True, timeout=60)
        m = re.search(r"Overall exposure level for %s.service: ([\d.]+)" % d, r.stdout)
        if m is None:
            print("note: systemd-analyze security --offline unsupported here", flush=True)
            continue
        print("for the record: %s.service exposure %s" % (d, m.group(1)), flush=True)
        check(float(m.group(1)) <= 2.5, "%s exposure %s:\n%s" % (d, m.group(1), r.stdout))


def test_dev(env):
    example = "/usr/share/doc/libedgestream-dev/examples/embed.c"
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "edgestream"],
                           capture_output=True, text=True, check=True).stdout.split()
    libdirs = {os.path.normpath(f[2:]) for f in flags if f.startswith("-L")}
    check(libdirs == {"/usr/lib/edgestream"}, "pkg-config edgestream: %s" % flags)
    exe = os.path.join(env.dir, "embed")
    r = subprocess.run(["cc", "-o", exe, example] + flags, capture_output=True, text=True,
                       timeout=120)
    check(r.returncode == 0, "cc embed.c $(pkg-config ...): %s" % r.stderr)
    r = subprocess.run([exe], capture_output=True, text=True, timeout=30)
    check(r.returncode != 0 and "cloud-url is required" in r.stdout + r.stderr,
          "the example without a configuration: rc %d %s" % (r.returncode, r.stdout + r.stderr))


def drop_pki():
    for d, names in (("cloudstream", CLOUD_PKI), ("edgestream", EDGE_HOST_FILES)):
        for n in names:
            try:
                os.unlink("/etc/%s/pki/%s" % (d, n))
            except FileNotFoundError:
                pass


def test_remove_purge(before):
    drop_pki()
    dpkg("-r", *PKGS)
    for b in ("cloudstream", "edgestream", "stream-certs", "stream-cri"):
        check(not os.path.exists("/usr/bin/" + b), "/usr/bin/%s after dpkg -r" % b)
    for d in ("cloudstream", "edgestream"):
        check(status(d) == "deinstall ok config-files", "%s after -r: %s" % (d, status(d)))
        check(os.path.exists("/etc/%s/%s.yaml" % (d, d)), "%s: conffile gone after -r" % d)
    for p in ("stream-tools", "libedgestream-dev"):
        check(status(p) in ("deinstall ok not-installed", "not-installed",
                            "unknown ok not-installed"), "%s after -r: %s" % (p, status(p)))
    dpkg("--purge", *PKGS)
    for p in PKGS:
        check(status(p) in ("not-installed", "unknown ok not-installed"),
              "%s after --purge: %s" % (p, status(p)))
    after = footprint(DEBS)
    changed = [p for p in set(before) | set(after) if before.get(p, False) != after.get(p, False)]
    check(not changed, "left behind or removed by install + purge: %s" % sorted(changed))


DEBS = {}


def main():
    if os.geteuid() != 0:
        h.skip("not root: the test installs packages")
    for t in ("dpkg", "dpkg-deb", "setpriv", "cc", "pkg-config"):
        if shutil.which(t) is None:
            h.skip("%s missing" % t)
    DEBS.update(debs())
    lock = open(LOCK if os.path.isdir(os.path.dirname(LOCK)) else "/tmp/" +
                os.path.basename(LOCK), "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    for p in PKGS:  # an interrupted run's
        if status(p) not in ("not-installed", "unknown ok not-installed"):
            print("note: purging %s (%s) left by an earlier run" % (p, status(p)), flush=True)
            drop_pki()
            dpkg("--purge", p)
    before = footprint(DEBS)
    env = h.Env("packages", nodes=(NODE,))
    step, failed = h.Steps("packages"), True

    try:
        t0 = time.monotonic()
        step("install", test_install, DEBS)
        if "install" not in step.passed:
            return 1
        step("pki", test_pki, env)
        cloud = step("cloudstream_unit", test_cloudstream, env)
        edge = step("edgestream_unit", test_edgestream, env, cloud) if cloud else None
        if cloud and edge:
            step("sigterm", test_stop, env, edge, cloud)
        step("systemd_analyze", test_units, env)
        step("libedgestream_dev", test_dev, env)
        env.close(keep=True)  # nothing may run from /usr/bin when it goes
        step("remove_purge", test_remove_purge, before)
        print("for the record: packages test %.1f s" % (time.monotonic() - t0), flush=True)
        want = ["install", "pki", "cloudstream_unit", "edgestream_unit", "sigterm",
                "systemd_analyze", "libedgestream_dev", "remove_purge"]
        failed = step.passed != want
        return 1 if failed else 0
    finally:
        h.close_env(env, failed)
        if any(status(p) not in ("not-installed", "unknown ok not-installed") for p in PKGS):
            drop_pki()
            dpkg("--purge", *PKGS, ok=False)
        lock.close()


if __name__ == "__main__":
    sys.exit(main())
