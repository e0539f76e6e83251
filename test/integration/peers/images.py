"""Two tiny container images built without a registry, as docker-archive tarballs that
`ctr images import` reads (learned from ../shared/lab/images.sh):

  localhost/busybox:1.35   Debian's static busybox and one link per applet, Cmd ["sh"]
  localhost/pause:1        a static C pause that reaps children and exits on INT/TERM

build(dir) returns {"busybox": path, "pause": path}; import_into(ctd, paths) imports them into
the CRI namespace of a Containerd (containerd.py). Needs busybox-static, gcc and libc6-dev.
"""
import hashlib
import io
import json
import os
import subprocess
import tarfile

BUSYBOX_IMAGE = "localhost/busybox:1.35"
PAUSE_IMAGE = "localhost/pause:1"

PAUSE_C = r"""
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
static void quit(int s) { (void)s; _exit(0); }
static void reap(int s) { (void)s; while (waitpid(-1, 0, WNOHANG) > 0) {} }
int main(void) {
  struct sigaction q = {0}, r = {0};
  q.sa_handler = quit; r.sa_handler = reap; r.sa_flags = SA_NOCLDSTOP;
  sigaction(SIGINT, &q, 0); sigaction(SIGTERM, &q, 0); sigaction(SIGCHLD, &r, 0);
  for (;;) pause();
}
"""


def _add(tar, name, data=None, mode=0o644, link=None, is_dir=False):
    ti = tarfile.TarInfo(name)
    ti.mtime = 0
    ti.uid = ti.gid = 0
    ti.mode = mode
    if is_dir:
        ti.type = tarfile.DIRTYPE
        tar.addfile(ti)
    elif link is not None:
        ti.type = tarfile.SYMTYPE
        ti.linkname = link
        tar.addfile(ti)
    else:
        ti.size = len(data)
        tar.addfile(ti, io.BytesIO(data))


def _image(tag, layer, config, out):
    diff = hashlib.sha256(layer).hexdigest()
    cfg = json.dumps({"architecture": "amd64", "os": "linux", "config": config,
                      "rootfs": {"type": "layers", "diff_ids": ["sha256:" + diff]}}).encode()
    cfg_name = hashlib.sha256(cfg).hexdigest() + ".json"
    manifest = json.dumps([{"Config": cfg_name, "RepoTags": [tag],
                            "Layers": [diff + "/layer.tar"]}]).encode()
    with tarfile.open(out, "w") as t:
        _add(t, cfg_name, cfg)
        _add(t, diff, is_dir=True, mode=0o755)
        _add(t, diff + "/layer.tar", layer)
        _add(t, "manifest.json", manifest)


def _layer(entries):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for e in entries:
            _add(t, *e[:1], **e[1])
    return buf.getvalue()


def build(out_dir, busybox="/bin/busybox"):
    os.makedirs(out_dir, exist_ok=True)
    with open(busybox, "rb") as f:
        bb = f.read()
    applets = subprocess.run([busybox, "--list"], capture_output=True, check=True).stdout.split()
    entries = [(d, {"is_dir": True, "mode": 0o1777 if d == "tmp" else 0o755})
               for d in ("bin", "etc", "tmp", "proc", "sys", "dev", "root")]
    entries.append(("bin/busybox", {"data": bb, "mode": 0o755}))
    entries += [("bin/" + a.decode(), {"link": "busybox"}) for a in sorted(applets)
                if a != b"busybox"]
    entries.append(("etc/passwd", {"data": b"root:x:0:0:root:/root:/bin/sh\n"}))
    entries.append(("etc/group", {"data": b"root:x:0:\n"}))
    paths = {"busybox": os.path.join(out_dir, "busybox.tar"),
             "pause": os.path.join(out_dir, "pause.tar")}
    _image(BUSYBOX_IMAGE, _layer(entries),
           {"Env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"], "Cmd": ["sh"]}, paths["busybox"])
    src = os.path.join(out_dir, "pause.c")
    exe = os.path.join(out_dir, "pause")
    with open(src, "w") as f:
        f.write(PAUSE_C)
    subprocess.run(["gcc", "-O2", "-static", "-o", exe, src], check=True)
    with open(exe, "rb") as f:
        pause = f.read()
    _image(PAUSE_IMAGE, _layer([("pause", {"data": pause, "mode": 0o755})]),
           {"Entrypoint": ["/pause"]}, paths["pause"])
    return paths


def import_into(ctd, paths):
    for p in paths.values():
        subprocess.run(["ctr", "-a", ctd.socket, "-n", "k8s.io", "images", "import", p],
                       check=True, capture_output=True, timeout=120)
