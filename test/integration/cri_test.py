#!/usr/bin/python3
"""The CRI client (cri/, through the stream-cri tool) against a real containerd started for the
test: Version, empty lists, NOT_FOUND with the runtime's message, no runtime on the socket.
Skipped (77) when containerd is not installed or the test is not root."""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
import harness as h  # noqa: E402
from harness import check  # noqa: E402
from containerd import Containerd  # noqa: E402

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


def main():
    if os.geteuid() != 0 or shutil.which("containerd") is None:
        print("skipped: needs root and containerd")
        return 77
    base = tempfile.mkdtemp(prefix="cri.", dir=os.environ.get("ST_TEST_TMPDIR", "/tmp"))
    ctd = Containerd(base)
    rc = 1
    try:
        ctd.start()
        tests = []
        for fn in (version, empty_lists, not_found, no_runtime):
            t = (lambda f: lambda: f(ctd))(fn)
            t.__name__ = "cri." + fn.__name__
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
