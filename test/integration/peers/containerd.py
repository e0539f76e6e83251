"""A real containerd (Debian's 1.6, CRI plugin) for the tests, entirely under one directory:
its own config, root, state and runc root; host-network pods only (no CNI); started with
PR_SET_PDEATHSIG and stopped by PID, with what it left behind swept away (runc containers,
shims, mounts). Learned from the lab recipe in ../shared/lab/containerd.sh.

Its sockets (containerd.sock and containerd.sock.ttrpc) are the exception: they go to a short
directory of their own, /tmp/ctd.XXXXXXXX, removed by stop(), because a unix socket's path holds
at most 108 bytes and a checkout (so the build tree the tests run in) can be deeper than that.

    ctd = Containerd(dir).start()      # ctd.socket, ctd.stream_port
    ...
    ctd.stop()
"""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

CONFIG = """version = 2
root = "{d}/root"
state = "{d}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{sock}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/pause:1"
  stream_server_address = "127.0.0.1"
  stream_server_port = "{port}"
  enable_tls_streaming = false
  max_container_log_line_size = 16384
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        Root = "{d}/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{d}/cni-conf"
"""


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# Not $TMPDIR: the point is a short path.
RUN_BASE = "/tmp"


class Containerd:
    def __init__(self, base):
        self.dir = os.path.join(base, "containerd")
        # The socket directory's name is recorded under self.dir, so a later Containerd(base)
        # (the quick start's stop, in another process) finds the socket again.
        self.rundir_file = os.path.join(self.dir, "rundir")
        self.rundir = None
        if os.path.exists(self.rundir_file):
            with open(self.rundir_file) as f:
                self.rundir = f.read().strip() or None
        self.socket = os.path.join(self.rundir, "containerd.sock") if self.rundir else None
        legacy = os.path.join(self.dir, "run", "containerd.sock")  # a quick start from before
        if self.socket is None and os.path.exists(legacy):
            self.socket = legacy
        self.stream_port = free_port()
        self.proc = None

    def start(self, timeout=30.0, keep=False):
        """@keep: containerd outlives this process (the quick start); stop it with stop()."""
        for sub in ("root", "state", "runc", "cni-conf", "opt"):
            os.makedirs(os.path.join(self.dir, sub), exist_ok=True)
        if self.rundir is None:
            self.rundir = tempfile.mkdtemp(prefix="ctd.", dir=RUN_BASE)
            with open(self.rundir_file, "w") as f:
                f.write(self.rundir + "\n")
            self.socket = os.path.join(self.rundir, "containerd.sock")
        with open(os.path.join(self.dir, "config.toml"), "w") as f:
            f.write(CONFIG.format(d=self.dir, sock=self.socket, port=self.stream_port))
        self.log = open(os.path.join(self.dir, "containerd.log"), "wb")

        def child():
            import ctypes
            os.setsid()
            if not keep:
                ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)  # dies with the test

        self.proc = subprocess.Popen(["containerd", "--config",
                                      os.path.join(self.dir, "config.toml")],
                                     stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, preexec_fn=child)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("containerd exited: " + self.tail())
            if os.path.exists(self.socket) and self.cri_ready():
                return self
            time.sleep(0.2)
        raise RuntimeError("containerd not ready: " + self.tail())

    def cri_ready(self):
        r = subprocess.run(["ctr", "-a", self.socket, "plugins", "ls"], capture_output=True,
                           timeout=10)
        return any(line.split()[:2] == [b"io.containerd.grpc.v1", b"cri"] and b"ok" in line
                   for line in r.stdout.splitlines())

    def tail(self, n=20):
        try:
            with open(os.path.join(self.dir, "containerd.log"), "rb") as f:
                return b"\n".join(f.read().splitlines()[-n:]).decode(errors="replace")
        except OSError:
            return ""

    def stop(self):
        if self.proc is None:
            self.drop_rundir()
            return
        ctr = ["ctr", "-a", self.socket, "-n", "k8s.io"]
        if self.proc.poll() is None:
            tasks = subprocess.run(ctr + ["tasks", "ls", "-q"], capture_output=True,
                                   timeout=20).stdout.split()
            if tasks:
                subprocess.run(ctr + ["tasks", "delete", "-f"] + [t.decode() for t in tasks],
                               capture_output=True, timeout=30)
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        runc_root = os.path.join(self.dir, "runc", "k8s.io")
        if os.path.isdir(runc_root):
            ids = subprocess.run(["runc", "--root", runc_root, "list", "-q"],
                                 capture_output=True).stdout.split()
            for i in ids:
                subprocess.run(["runc", "--root", runc_root, "delete", "-f", i.decode()],
                               capture_output=True)
        state = os.path.join(self.dir, "state") + "/"
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                if (open("/proc/%s/comm" % pid).read().strip() == "containerd-shim" and
                        os.readlink("/proc/%s/cwd" % pid).startswith(state)):
                    os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass
        mounts = [line.split()[4] for line in open("/proc/self/mountinfo")
                  if line.split()[4].startswith(self.dir + "/")]
        for m in sorted(mounts, reverse=True):
            if subprocess.run(["umount", m], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", m], capture_output=True)
        # containerd 1.6 always puts shim sockets in /run/containerd/s: drop those nobody
        # listens on, then the directories if empty (they did not exist before the test).
        shim_dir = "/run/containerd/s"
        if os.path.isdir(shim_dir):
            live = subprocess.run(["ss", "-xlnH"], capture_output=True).stdout.decode()
            for name in os.listdir(shim_dir):
                path = os.path.join(shim_dir, name)
                if path not in live:
                    try:
                        os.unlink(path)
                    except OSError:
                        pass
            for d in (shim_dir, "/run/containerd"):
                try:
                    os.rmdir(d)
                except OSError:
                    pass
        self.proc = None
        self.drop_rundir()

    def drop_rundir(self):
        """Removes the socket directory (containerd is gone) and its record."""
        if self.rundir and os.path.basename(self.rundir).startswith("ctd."):
            shutil.rmtree(self.rundir, ignore_errors=True)
        try:
            os.unlink(self.rundir_file)
        except OSError:
            pass
        self.rundir = None
