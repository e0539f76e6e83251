"""Network namespaces a test makes for itself, and removes (issue 13's acceptance: "real
processes, in network namespaces").

    Lan(prefix, n): a switch namespace with a bridge; n member namespaces, each on its own veth
    to the bridge as 10.213.K.(i+1)/24; the test's own namespace on it too, as 10.213.K.254
    (a veth pair whose one end is here, named <prefix><pid>). K is a /24 no address here uses
    yet, chosen under a lock so concurrent runs (other checkouts, ctest -j) never share one.

Nothing else of this machine is touched: no forwarding, no bridge or rule here, no route but the
/24 the address brings. Everything goes with the namespaces (a veth goes with either end; the
rules of a member's iptables live in its namespace). close() removes them, also after a
failure; a run killed before its close() leaves names with its PID in them, and the next Lan
with the same prefix removes those whose process is gone.

Root only, with ip (iproute2) and iptables: `unavailable()` says why not, and a test skips (77)
or, under CI=true, fails (`require`).
"""
import fcntl
import os
import re
import shutil
import subprocess

LOCK = "/run/lock/cloudstream-test-lan.lock"
NET = "10.213"


class Error(Exception):
    pass


def sh(*args, ok=(0,)):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=30)
    if r.returncode not in ok:
        raise Error("%s: exit %d: %s%s" % (" ".join(map(str, args)), r.returncode, r.stdout,
                                          r.stderr))
    return r


def unavailable():
    """Why network namespaces and iptables cannot be used here, or None."""
    if os.geteuid() != 0:
        return "network namespaces and iptables need root"
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return "%s is not installed (iproute2, iptables)" % tool
    return None


def require():
    """None when namespaces can be used; else the exit status of a test that cannot run: 77
    (skipped), or 1 under CI=true (CI runs as root with both installed: a skip would hide a
    broken runner). Prints why."""
    why = unavailable()
    if why is None:
        return None
    if os.environ.get("CI") == "true":
        print("FAIL: %s (CI=true: not skipped)" % why, flush=True)
        return 1
    print("skipped: %s" % why, flush=True)
    return 77


def _alive(pid):
    return os.path.exists("/proc/%d" % pid)


class Lan:
    def __init__(self, prefix, n):
        self.prefix = prefix
        self.tag = "%s%d" % (prefix, os.getpid())
        self.sw = self.tag + "sw"
        self.members = ["%s%s" % (self.tag, chr(ord("a") + i)) for i in range(n)]
        self.host_link = self.tag  # <= 15 bytes: prefix of at most 8 and a PID
        if len(self.host_link) > 15:
            raise Error("interface name %r too long" % self.host_link)
        self.made = []
        self.k = None
        try:
            self._sweep()
            self._build()
        except BaseException:
            self.close()
            raise

    def _sweep(self):
        """Names left by runs of this prefix that were killed before their close()."""
        pat = re.compile(r"^%s(\d+)" % re.escape(self.prefix))
        for line in sh("ip", "netns", "list").stdout.splitlines():
            name = line.split()[0] if line.split() else ""
            m = pat.match(name)
            if m and not _alive(int(m.group(1))):
                sh("ip", "netns", "del", name, ok=(0, 1))
        for line in sh("ip", "-o", "link", "show").stdout.splitlines():
            parts = line.split(":")
            if len(parts) < 2:
                continue
            name = parts[1].strip().split("@")[0]
            m = pat.match(name)
            if m and name == m.group(0) and not _alive(int(m.group(1))):
                sh("ip", "link", "del", name, ok=(0, 1))

    def _ns(self, name):
        sh("ip", "netns", "add", name)
        self.made.append(name)
        sh("ip", "-n", name, "link", "set", "lo", "up")

    def _build(self):
        self._ns(self.sw)
        sh("ip", "-n", self.sw, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.sw, "link", "set", "br0", "up")
        for i, ns in enumerate(self.members):
            self._ns(ns)
            port = "p%d" % i
            sh("ip", "-n", self.sw, "link", "add", port, "type", "veth", "peer", "name", "eth0",
               "netns", ns)
            sh("ip", "-n", self.sw, "link", "set", port, "master", "br0", "up")
        os.makedirs(os.path.dirname(LOCK), exist_ok=True)
        with open(LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            used = set(int(m) for m in re.findall(
                r"inet %s\.(\d+)\." % re.escape(NET), sh("ip", "-4", "-o", "addr").stdout))
            start = os.getpid() % 250
            for d in range(250):
                k = (start + d) % 250 + 1
                if k not in used:
                    break
            else:
                raise Error("no free %s.K.0/24 here" % NET)
            self.k = k
            sh("ip", "link", "add", self.host_link, "type", "veth", "peer", "name", "host",
               "netns", self.sw)
            sh("ip", "-n", self.sw, "link", "set", "host", "master", "br0", "up")
            sh("ip", "addr", "add", self.host_addr() + "/24", "dev", self.host_link)
            sh("ip", "link", "set", self.host_link, "up")
        for i, ns in enumerate(self.members):
            sh("ip", "-n", ns, "addr", "add", self.addr(i) + "/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")

    def addr(self, i):
        return "%s.%d.%d" % (NET, self.k, i + 1)

    def host_addr(self):
        return "%s.%d.254" % (NET, self.k)

    def prefix_of(self, i):
        """The command prefix that runs a program in member @i (ip netns exec execs it: the
        PID is the program's)."""
        return ["ip", "netns", "exec", self.members[i]]

    def iptables(self, i, *args):
        return sh("ip", "netns", "exec", self.members[i], "iptables", "-w", *args)

    def close(self):
        """Removes every namespace (with its veths and rules) and the link here. Stop the
        processes inside first: a namespace lives on while a process is in it."""
        for ns in reversed(self.made):
            sh("ip", "netns", "del", ns, ok=(0, 1, 2))
        self.made = []
        if os.path.exists("/sys/class/net/" + self.host_link):
            sh("ip", "link", "del", self.host_link, ok=(0, 1, 2))


CLONE_NEWNET = 0x40000000


def ns_exec(ns, *args):
    """The command line that runs @args in network namespace @ns (ip netns exec execs it: the
    PID is the program's)."""
    return ["ip", "netns", "exec", ns] + list(args)


def in_netns(ns, fn):
    """Runs @fn with this thread in network namespace @ns: sockets made meanwhile stay there."""
    import ctypes
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open("/var/run/netns/" + ns, os.O_RDONLY)
    try:
        if libc.setns(target, CLONE_NEWNET) != 0:
            raise Error("setns: errno %d" % ctypes.get_errno())
        try:
            return fn()
        finally:
            libc.setns(own, CLONE_NEWNET)
    finally:
        os.close(own)
        os.close(target)


class Pair:
    """Two namespaces on one veth, as the DNAT tests want them: A, <prefix>A<PID> at 10.231.0.1,
    the apiserver's host, which routes the node network 10.232.0.0/24 via B, <prefix>B<PID> at
    10.231.0.2, cloudstream's host. @node_net_local: B takes the node network as its own (a
    route to its loopback), for connections B itself makes to a node address (OUTPUT DNAT).
    The veth ends are <veth>a<PID> and <veth>b<PID>. close() removes both namespaces (and the
    veth with them); stop the processes in them first."""

    def __init__(self, prefix, veth, node_net_local=False):
        tag = "%d" % os.getpid()
        self.a, self.b = prefix + "A" + tag, prefix + "B" + tag
        self.made = []
        try:
            for ns in (self.a, self.b):
                sh("ip", "netns", "add", ns)
                self.made.append(ns)
                sh(*ns_exec(ns, "ip", "link", "set", "lo", "up"))
            va, vb = veth + "a" + tag, veth + "b" + tag
            sh("ip", "link", "add", va, "type", "veth", "peer", "name", vb)
            sh("ip", "link", "set", va, "netns", self.a)
            sh("ip", "link", "set", vb, "netns", self.b)
            sh(*ns_exec(self.a, "ip", "addr", "add", "10.231.0.1/24", "dev", va))
            sh(*ns_exec(self.b, "ip", "addr", "add", "10.231.0.2/24", "dev", vb))
            sh(*ns_exec(self.a, "ip", "link", "set", va, "up"))
            sh(*ns_exec(self.b, "ip", "link", "set", vb, "up"))
            sh(*ns_exec(self.a, "ip", "route", "add", "10.232.0.0/24", "via", "10.231.0.2"))
            if node_net_local:
                sh(*ns_exec(self.b, "ip", "route", "add", "10.232.0.0/24", "dev", "lo"))
        except BaseException:
            self.close()
            raise

    def close(self):
        for ns in self.made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.made = []
