#!/usr/bin/python3
"""The OCI images (deploy/build-images.sh, from the packages in $ST_PKG_DIR) imported into a
real containerd (peers/containerd.py) and run by it, as the manifests in deploy/kubernetes run
them.

Root only (skipped with 77 otherwise or when containerd, runc or umoci is missing; failed
instead under CI=true).

Checked:
- the images build twice to the same bytes (SOURCE_DATE_EPOCH), are named as the manifests'
  image fields say, and hold no shell; their entrypoint is the manifests' command, their user
  the Deployment's runAsUser (cloudstream) or root (edgestream); their files are exactly the
  tree `build-images.sh --rootfs` makes for the Dockerfiles;
- `ctr images import` takes both; then cloudstream runs as the Deployment says: its command and
  args, the ConfigMap's file at its mountPath, the Secret's keys (0440, group 65532 as fsGroup
  makes them), the service-account files; read-only root, no capabilities, no new privileges,
  containerd's default seccomp profile (RuntimeDefault), host network; only the listen addresses
  are moved to 127.0.0.1:0 and a --ready-file is added in a writable mount. /readyz 200;
- edgestream runs as the DaemonSet says (args with $(NODE_NAME), the edge host's pki directory,
  the CRI socket: this containerd's, /var/log/pods), plus --cloud-url toward that cloudstream,
  --kubelet-url toward a kubelet stand-in and a loopback admin port. Its tunnel comes up;
- through both containers: a kubelet request (the stand-in's /healthz) and containerLogs of a
  busybox container that this containerd runs in a pod made over CRI, served by the edgestream
  container from the runtime's log file (the pod's log directory is also mounted at its own
  path: the runtime writes this test's logs outside /var/log/pods);
- `ctr task kill` (SIGTERM) ends each with exit 0.

build_and_import() and wrapper() run the daemons from these images for e2e.kubectl_images
(test/e2e/kubectl_test.py, group images).
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))
sys.path.insert(0, os.path.join(HERE, "peers"))
sys.path.insert(0, HERE)
import harness as h  # noqa: E402
from harness import check  # noqa: E402
from containerd import Containerd  # noqa: E402
import images  # noqa: E402
from deploy_test import (CLOUD_SECRET_KEYS, EDGE_HOST_FILES, NODE, SA_DIR,  # noqa: E402
                         container_env, expand_vars, find, load_manifests, project_version)

PKG_DIR = os.environ.get("ST_PKG_DIR", os.path.join(h.BIN, "packages-release", "packages"))
BUILD_IMAGES = os.path.join(h.SRC, "deploy", "build-images.sh")
NONROOT = 65532
UID = "imgtest-uid-1"
HELLO = "hello from a pod, through both images"
# The capabilities a container gets by default (containerd's oci.defaultUnixCaps): dropping
# them all is `drop: ["ALL"]`.
DEFAULT_CAPS = ("CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
                "CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP",
                "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE")


def oci(tar_path):
    """(config, [layer member names]) of the one image in an OCI layout tar."""
    with tarfile.open(tar_path) as t:
        idx = json.load(t.extractfile("index.json"))
        (m,) = idx["manifests"]
        man = json.load(t.extractfile("blobs/sha256/" + m["digest"][7:]))
        cfg = json.load(t.extractfile("blobs/sha256/" + man["config"]["digest"][7:]))
        names = []
        for layer in man["layers"]:
            with tarfile.open(fileobj=t.extractfile("blobs/sha256/" + layer["digest"][7:]),
                              mode="r:gz") as lt:
                names += [n.lstrip("./") for n in lt.getnames()]
        return m["annotations"], cfg, names


def build(env):
    out = os.path.join(env.dir, "images")
    # One date for every build here (the default, the last commit's, may move between two).
    benv = dict(os.environ, SOURCE_DATE_EPOCH="1767225600")
    t0 = time.monotonic()
    r = subprocess.run([BUILD_IMAGES, "--debs", PKG_DIR, "--out", out], capture_output=True,
                       text=True, timeout=300, env=benv)
    check(r.returncode == 0, "build-images.sh: %s%s" % (r.stdout, r.stderr))
    print("for the record: build-images.sh %.1f s\n%s" % (time.monotonic() - t0, r.stdout),
          end="", flush=True)
    tars = {}
    for line in r.stdout.splitlines():
        name, path = line.split("\t")[:2]
        tars[name] = path
    digests = {n: hashlib.sha256(open(p, "rb").read()).hexdigest() for n, p in tars.items()}
    # Same inputs, same bytes: a second build (into another directory) matches.
    out2 = os.path.join(env.dir, "images2")
    r = subprocess.run([BUILD_IMAGES, "--debs", PKG_DIR, "--out", out2], capture_output=True,
                       text=True, timeout=300, env=benv)
    check(r.returncode == 0, "build-images.sh (again): %s" % r.stderr)
    for n, p in tars.items():
        p2 = os.path.join(out2, os.path.basename(p))
        check(hashlib.sha256(open(p2, "rb").read()).hexdigest() == digests[n],
              "%s: a second build gave other bytes" % n)
    shutil.rmtree(out2)
    # The file trees the Dockerfiles copy (--rootfs), for test_images to compare.
    r = subprocess.run([BUILD_IMAGES, "--debs", PKG_DIR, "--out", out2, "--rootfs",
                        os.path.join(env.dir, "rootfs")], capture_output=True, text=True,
                       timeout=300, env=benv)
    check(r.returncode == 0, "build-images.sh --rootfs: %s" % r.stderr)
    return tars


def tree(root):
    names = set()
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            names.add(os.path.relpath(os.path.join(d, n), root))
    return names


def test_images(env, tars, objs):
    ver = project_version()
    for kind, name, user in (("Deployment", "cloudstream", "%d:%d" % (NONROOT, NONROOT)),
                             ("DaemonSet", "edgestream", "0:0")):
        (c,) = find(objs, kind, name)["spec"]["template"]["spec"]["containers"]
        check(c["image"] in tars, "%s: manifest image %s, built %s" % (name, c["image"],
                                                                      sorted(tars)))
        check(c["image"] == "localhost/%s:%s" % (name, ver), "image %s" % c["image"])
        ann, cfg, names = oci(tars[c["image"]])
        check(ann.get("io.containerd.image.name") == c["image"], "annotations %s" % ann)
        conf = cfg["config"]
        check(conf["Entrypoint"] == c["command"], "%s entrypoint %s, manifest command %s" % (
            name, conf["Entrypoint"], c["command"]))
        check(conf["User"] == user, "%s user %s" % (name, conf["User"]))
        check(cfg["architecture"] == "amd64" and cfg["os"] == "linux", "platform")
        files = set(names) - {"", "."}
        check(files == tree(os.path.join(env.dir, "rootfs", name)),
              "%s: the image and build-images.sh --rootfs (the Dockerfile's) differ" % name)
        check("usr/bin/" + name in files, "%s: no binary in the image" % name)
        if name == "cloudstream":
            check("usr/bin/cloudstream-ctl" in files, "cloudstream: no cloudstream-ctl")
        check(not files & {"bin/sh", "usr/bin/sh", "bin/busybox", "usr/bin/dash"},
              "%s: a shell in a distroless image" % name)
        for p in ("libc6", "libssl3", "libwebsockets17", "libjson-c5", "libyaml-0-2", "libcurl4",
                  "libseccomp2", name):
            check("var/lib/dpkg/status.d/" + p in files, "%s: no status.d/%s" % (name, p))
        size = os.path.getsize(tars[c["image"]])
        check(size < 32 << 20, "%s: %d bytes" % (name, size))


def ctr(ctd, *args, timeout=60, ok=True):
    r = subprocess.run(["ctr", "-a", ctd.socket, "-n", "k8s.io"] + list(args),
                       capture_output=True, text=True, timeout=timeout)
    if ok:
        check(r.returncode == 0, "ctr %s: %s" % (" ".join(args[:3]), r.stderr))
    return r


def mounts_for(env, objs, pod, c, root, host_paths):
    """The container's volumes as the kubelet would make them, as `ctr run --mount` options.
    ConfigMap files and Secret keys are written under @root; hostPath volumes come from
    @host_paths (mountPath → this machine's path)."""
    vols = {v["name"]: v for v in pod.get("volumes", [])}
    out = []
    for m in c.get("volumeMounts", []):
        v, mp = vols[m["name"]], m["mountPath"]
        src = os.path.join(root, m["name"])
        if "configMap" in v:
            os.makedirs(src)
            for k, text in find(objs, "ConfigMap", v["configMap"]["name"])["data"].items():
                with open(os.path.join(src, k), "w") as f:
                    f.write(text)
        elif "secret" in v:
            os.makedirs(src)
            for k in CLOUD_SECRET_KEYS:  # fsGroup: group-owned, defaultMode 0440
                shutil.copy(env.path(k), os.path.join(src, k))
                os.chown(os.path.join(src, k), 0, pod["securityContext"]["fsGroup"])
                os.chmod(os.path.join(src, k), v["secret"]["defaultMode"])
        elif "hostPath" in v:
            src = host_paths[mp]
        else:
            raise h.Fail("volume %s: %s" % (m["name"], sorted(v)))
        out.append("type=bind,src=%s,dst=%s,options=rbind:%s" % (
            src, mp, "ro" if m.get("readOnly") else "rw"))
    if pod.get("automountServiceAccountToken", True) is not False:
        src = os.path.join(root, "serviceaccount")
        os.makedirs(src)
        for n, text in (("token", "test-token\n"), ("namespace", "cloudstream\n")):
            with open(os.path.join(src, n), "w") as f:
                f.write(text)
        shutil.copy(env.path("stream-ca.crt"), os.path.join(src, "ca.crt"))
        out.append("type=bind,src=%s,dst=%s,options=rbind:ro" % (src, SA_DIR))
    return out


def ctr_run(ctd, cid, image, mounts, env_vars=None):
    """The `ctr run` command line (without the container's command) for a container as the
    manifests' securityContexts make it: host network, read-only root, every capability
    dropped, no new privileges (ctr's default), containerd's default seccomp profile. In the
    foreground, ctr passes signals on to the container and exits with its status."""
    argv = ["ctr", "-a", ctd.socket, "-n", "k8s.io", "run", "--rm", "--net-host",
            "--read-only", "--seccomp"]
    for cap in DEFAULT_CAPS:  # ctr knows no ALL
        argv += ["--cap-drop", cap]
    for m in mounts:
        argv += ["--mount", m]
    for k, v in (env_vars or {}).items():
        argv += ["--env", "%s=%s" % (k, v)]
    return argv + [image, cid]


def build_and_import(ctd, out):
    """For e2e.kubectl_images: both images built from $ST_PKG_DIR's packages into @out and
    imported into @ctd. Returns {daemon: image name}."""
    r = subprocess.run([BUILD_IMAGES, "--debs", PKG_DIR, "--out", out], capture_output=True,
                       text=True, timeout=300)
    check(r.returncode == 0, "build-images.sh: %s%s" % (r.stdout, r.stderr))
    names = {}
    for line in r.stdout.splitlines():
        name, path = line.split("\t")[:2]
        ctr(ctd, "images", "import", path, timeout=120)
        names[name.rsplit("/", 1)[-1].split(":")[0]] = name
    check(sorted(names) == ["cloudstream", "edgestream"], "images %s" % names)
    return names


def wrapper(env, ctd, daemon, image):
    """A wrap= for harness.start_cloudstream/start_edgestream: the command line the harness
    made for the build tree's daemon, run by @ctd from @image instead (ctr_run), with every
    path of the run mounted at its own path (env.dir, the containerd socket's directory).
    cloudstream's image runs as 65532:65532 (the Deployment's runAsUser and fsGroup): the
    run's directory (where its ready file goes) and the certificates get group 65532 and group
    access, as fsGroup does for a Secret; they stay root's, whom edgestream's container, without
    capabilities, needs as owner."""
    if daemon == "cloudstream":
        os.chown(env.dir, 0, NONROOT)
        os.chmod(env.dir, 0o770)
        os.chown(env.pki, 0, NONROOT)
        os.chmod(env.pki, 0o750)
        for f in os.listdir(env.pki):
            p = os.path.join(env.pki, f)
            os.chown(p, 0, NONROOT)
            os.chmod(p, os.stat(p).st_mode & 0o777 | 0o040)
    mounts = ["type=bind,src=%s,dst=%s,options=rbind:rw" % (p, p)
              for p in (env.dir, os.path.dirname(ctd.socket))]

    def wrap(argv):
        return ctr_run(ctd, "e2e-%s-%d" % (daemon, os.getpid()), image, mounts) + [
            "/usr/bin/" + daemon] + argv[1:]
    return wrap


def run_container(env, ctd, name, image, c, mounts, extra_args, env_vars, uid):
    """`ctr run` (foreground: its exit status is the container's) with the container's
    securityContext; ready when the daemon writes its ready file in a writable mount."""
    run = os.path.join(env.dir, name + "-run")
    os.makedirs(run)
    os.chmod(run, 0o777)
    args = [expand_vars(a, env_vars) for a in c["args"]] + list(extra_args) + [
        "--ready-file", "/run/test/ready"]
    sc = c["securityContext"]
    check(sc["readOnlyRootFilesystem"] and sc["capabilities"] == {"drop": ["ALL"]} and
          sc["allowPrivilegeEscalation"] is False, "%s securityContext %s" % (name, sc))
    cid = "imgtest-%s-%d" % (name, os.getpid())
    argv = ctr_run(ctd, cid, image, mounts + [
        "type=bind,src=%s,dst=/run/test,options=rbind:rw" % run], env_vars) + c["command"] + args
    p, text = env.start(name, argv, os.path.join(run, "ready"), timeout=30)
    p.cid = cid
    p.ports = h.ready_ports(text.split("node=")[0])
    # What the kernel says about the daemon's process: the image's user, no capability at
    # all, no new privileges, seccomp filters (containerd's and the daemon's own).
    (line,) = [ln for ln in ctr(ctd, "task", "ls").stdout.splitlines()[1:]
               if ln.split()[0] == cid]
    st = dict(ln.split(":\t", 1) for ln in open("/proc/%s/status" % line.split()[1]))
    check(st["Uid"].split()[0] == str(uid) and st["Gid"].split()[0] == str(uid),
          "%s runs as %s/%s" % (name, st["Uid"], st["Gid"]))
    for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        check(int(st[k], 16) == 0, "%s %s %s" % (name, k, st[k].strip()))
    check(st["NoNewPrivs"].strip() == "1" and st["Seccomp"].strip() == "2" and
          int(st.get("Seccomp_filters", "2")) >= 2, "%s NoNewPrivs %s Seccomp %s/%s" % (
              name, st["NoNewPrivs"].strip(), st["Seccomp"].strip(),
              st.get("Seccomp_filters", "?").strip()))
    return p


def stop_container(env, ctd, p, grace):
    """SIGTERM through containerd, as the kubelet stops a pod; the foreground ctr exits with
    the container's status."""
    ctr(ctd, "task", "kill", "-s", "SIGTERM", p.cid)
    try:
        rc = p.wait(grace)
    except subprocess.TimeoutExpired:
        ctr(ctd, "task", "kill", "-s", "SIGKILL", p.cid, ok=False)
        p.wait(10)
        raise h.Fail("%s did not stop within %d s of SIGTERM" % (p.name, grace))
    check(rc == 0, "%s exit %s after SIGTERM:\n%s" % (p.name, rc, env.tail(p)))


def get(port, path):
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.request("GET", path)
    r = conn.getresponse()
    return r.status, r.read().decode(errors="replace")


def test_cloudstream(env, ctd, objs):
    dep = find(objs, "Deployment", "cloudstream")
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    psc = pod["securityContext"]
    check(psc["runAsUser"] == NONROOT and psc["fsGroup"] == NONROOT, "pod securityContext")
    m = mounts_for(env, objs, pod, c, os.path.join(env.dir, "cloud-vols"), {})
    os.chmod(env.dir, 0o711)  # uid 65532 reaches the volumes in it
    # One replica and no apiserver here: no peer membership (the manifests' peer-service is
    # checked by integration.deploy; replicas by integration.replicas_*), so it is ready at once.
    p = run_container(env, ctd, "cloudstream", c["image"], c, m, [
        "--tunnel-listen", "127.0.0.1:0", "--stream-listen", "127.0.0.1:0",
        "--admin-listen", "127.0.0.1:0", "--peer-service", ""], container_env(c), NONROOT)
    for probe in ("livenessProbe", "readinessProbe"):
        st, body = get(p.ports["admin"], c[probe]["httpGet"]["path"])
        check(st == 200, "cloudstream %s: %d %s" % (probe, st, body))
    p.grace = pod["terminationGracePeriodSeconds"]
    return p


def make_pod(env, ctd):
    """A host-network pod with a busybox container that prints HELLO, made over CRI."""
    tool = os.path.join(h.BIN, "cri", "stream-cri")
    logs = os.path.join(env.dir, "pod-logs")
    logdir = os.path.join(logs, "default_demo_" + UID)
    os.makedirs(logdir)

    def cri(*args):
        r = subprocess.run([tool, "--socket", ctd.socket] + list(args), capture_output=True,
                           text=True, timeout=30)
        check(r.returncode == 0, "stream-cri %s: %s" % (args[0], r.stderr))
        return r.stdout.strip()
    sandbox = cri("run-pod", "default", "demo", UID, logdir)
    cri("create-container", "default", "demo", UID, logdir, sandbox, "hello",
        images.BUSYBOX_IMAGE, "--", "sh", "-c", "echo '%s'; sleep 3600" % HELLO)
    log = os.path.join(logdir, "hello", "0.log")
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if os.path.exists(log) and HELLO in open(log).read():
            return logs
        time.sleep(0.05)
    raise h.Fail("the busybox container wrote no log line")


def test_edgestream(env, ctd, objs, cloud, kubelet, logs):
    ds = find(objs, "DaemonSet", "edgestream")
    pod = ds["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    check(pod["hostNetwork"] is True, "hostNetwork")
    host_pki = os.path.join(env.dir, "edge-host-pki")
    os.makedirs(host_pki, mode=0o700)
    for host_name, quick_name in EDGE_HOST_FILES.items():
        shutil.copy(env.path(quick_name), os.path.join(host_pki, host_name))
    host = {"/etc/edgestream/pki": host_pki, "/run/containerd/containerd.sock": ctd.socket,
            "/var/log/pods": logs}
    m = mounts_for(env, objs, pod, c, os.path.join(env.dir, "edge-vols"), host)
    m.append("type=bind,src=%s,dst=%s,options=rbind:ro" % (logs, logs))
    p = run_container(env, ctd, "edgestream", c["image"], c, m, [
        "--cloud-url", "wss://127.0.0.1:%d/v1/kubeedge/connect" % cloud.ports["tunnel"],
        "--cloud-server-name", "localhost", "--kubelet-url", "https://127.0.0.1:%d" % kubelet.port,
        "--admin-listen", "127.0.0.1:0"], container_env(c), 0)
    st, body = get(p.ports["admin"], "/readyz")
    check(st == 200, "edgestream /readyz %d %s" % (st, body))
    st, body = get(cloud.ports["admin"], "/metrics")
    check("cloudstream_sessions 1" in body, "the tunnel did not register: %s" % body[:300])
    p.grace = pod["terminationGracePeriodSeconds"]
    return p


def test_chain(env, cloud):
    api = h.Api(env, cloud.ports["stream"])
    host = [("Host", "%s:10250" % NODE)]
    st, _, body, s = api.request("GET", "/healthz", host)
    s.close()
    check(st == 200 and body == b"ok", "kubelet /healthz through the images: %d %r" % (st, body))
    st, _, body, s = api.request("GET", "/containerLogs/default/demo/hello", host)
    s.close()
    check(st == 200 and body == (HELLO + "\n").encode(),
          "containerLogs through the images: %d %r" % (st, body))


def main():
    if os.geteuid() != 0:
        h.skip("not root: the test runs containerd")
    for t in ("containerd", "ctr", "runc", "umoci", "dpkg-deb"):
        if shutil.which(t) is None:
            h.skip("%s missing (deploy/install-deps.sh)" % t)
    _, objs = load_manifests()
    env = h.Env("images", nodes=(NODE,))
    ctd = Containerd(env.dir)
    step, failed = h.Steps("images"), True
    conts = []

    try:
        t0 = time.monotonic()
        tars = step("build", build, env)
        if not tars:
            return 1
        step("contents", test_images, env, tars, objs)
        ctd.start()
        for path in tars.values():
            ctr(ctd, "images", "import", path, timeout=120)
        images.import_into(ctd, images.build(os.path.join(env.dir, "test-images")))
        listed = ctr(ctd, "images", "ls", "-q").stdout.split()
        check(set(tars) <= set(listed), "imported %s, listed %s" % (sorted(tars), listed))
        print("for the record: containerd up and images imported %.1f s" % (
            time.monotonic() - t0), flush=True)
        logs = step("pod", make_pod, env, ctd)
        kubelet = h.start_kubelet(env)
        cloud = step("cloudstream", test_cloudstream, env, ctd, objs)
        edge = None
        if cloud:
            conts.append(cloud)
        if cloud and logs:
            edge = step("edgestream", test_edgestream, env, ctd, objs, cloud, kubelet, logs)
        if edge:
            conts.insert(0, edge)
            step("chain", test_chain, env, cloud)

        def stop_all():
            while conts:
                p = conts.pop(0)
                stop_container(env, ctd, p, p.grace)
        step("sigterm", stop_all)
        print("for the record: images test %.1f s" % (time.monotonic() - t0), flush=True)
        want = ["build", "contents", "pod", "cloudstream", "edgestream", "chain", "sigterm"]
        failed = step.passed != want
        return 1 if failed else 0
    finally:
        for p in conts:
            if p.poll() is None:
                ctr(ctd, "task", "kill", "-s", "SIGKILL", p.cid, ok=False)
        ctd.stop()
        if failed:
            print("---- containerd (last lines) ----\n%s" % ctd.tail(), flush=True)
        h.close_env(env, failed)


if __name__ == "__main__":
    sys.exit(main())
