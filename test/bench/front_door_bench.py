#!/usr/bin/python3
"""1 GiB from the edge's kubelet straight, and through each of cloudstream's two entries, in the
same run, with each daemon's CPU per GiB.

    test/bench/front_door_bench.py [--build build/rel] [--mib 1024] [--runs 3] [--congestion reno]

One cloudstream (stream port, front door on a unix socket), one edgestream, nginx as the node's
kubelet (TLS, client certificate required) serving a sparse file, all on 127.0.0.1 from --build.
The client is follow_burst --drain (C, OpenSSL, one 16 KiB read buffer, nothing kept: not the
bound). Each run downloads the file three ways, interleaved so drift hits all alike:

  direct     TLS straight to nginx with the apiserver's kubelet client certificate;
  dnat       GET to the stream port, as kube-apiserver does after the DNAT rule: cloudstream
             and edgestream each terminate and redo TLS (two AES-GCM passes each);
  door-uds   CONNECT on the front door's unix socket, as kube-apiserver's EgressSelector
             `HTTPConnect` egress over a unix socket does, then the client's own TLS to nginx
             inside the tunnel: each daemon relays that ciphertext and encrypts or decrypts only
             the tunnel's TLS (one pass each).

Prints each run's MB/s and each daemon's CPU-seconds per GiB (/proc/PID/stat before and after),
then the medians beside issue 12's relay targets. (The front door's mTLS listener, TLS inside
TLS on the client, is not measured here: the C client does not nest TLS.) A program, not a
test: it asserts nothing. Needs no root, except --congestion (a network namespace).
"""
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402

RELAY_TARGET = 0.8   # CPU-s per GiB, each relay (issue 12)
CHAIN_TARGET = 0.45  # throughput ÷ direct (issue 12)


def main():
    ap = bl.parser(__doc__, "rel", mib=1024, runs=3)
    bl.add_congestion(ap)
    args = ap.parse_args()
    bl.congestion_netns(args.congestion)
    h = bl.use_build(args.build)
    os.environ.setdefault("ST_TEST_TMPDIR", "/tmp")
    import front_door_test as fd
    from edge_stalled import start_download_nginx

    with bl.run_env("door-bench") as env:
        fd.mint_pki(env)
        # nginx serves the kubelet certificate valid for the node's IP.
        env.mint("server", "--ca", env.path("kubelet-ca"), "--out", env.path("kubelet"),
                 "--cn", "edge-1", "--ip", "127.0.0.1,%s" % fd.NODE_IP, "--dns", "localhost",
                 "--force")
        n = args.mib << 20
        kubelet = start_download_nginx(env, n)
        sock_path = env.sock("front-door.sock")
        cloud = h.start_cloudstream(env, extra=["--front-door-socket", sock_path,
                                                "--log-level", "warn"])
        edge = h.start_edgestream(env, cloud, kubelet, extra=["--log-level", "warn"])
        tool = os.path.join(h.BIN, "test", "bench", "follow_burst")
        kubelet_client = ["--ca", env.path("kubelet-ca.crt"),
                          "--cert", env.path("apiserver-kubelet.crt"),
                          "--key", env.path("apiserver-kubelet.key")]
        ways = {
            "direct": ["--port", str(kubelet.port), "--host-header", "127.0.0.1"]
            + kubelet_client,
            # Host names the node by name: the stream port never takes a loopback address
            # for a node's (the apiserver forwards the client's Host on upgrades).
            "dnat": ["--port", str(cloud.ports["stream"]), "--host-header", "edge-1:10250",
                     "--ca", env.path("stream-ca.crt"),
                     "--cert", env.path("apiserver-kubelet-client.crt"),
                     "--key", env.path("apiserver-kubelet-client.key")],
            "door-uds": ["--unix", sock_path, "--connect", "%s:10250" % fd.NODE_IP,
                         "--host-header", "%s:10250" % fd.NODE_IP] + kubelet_client,
        }

        def fetch(name):
            argv = [tool, "--n", "1", "--target", "/download", "--drain", "--timeout", "120"]
            c0, e0 = bl.cpu_seconds(cloud.pid), bl.cpu_seconds(edge.pid)
            out = subprocess.run(argv + ways[name], capture_output=True, text=True,
                                 timeout=300).stdout
            c1, e1 = bl.cpu_seconds(cloud.pid), bl.cpu_seconds(edge.pid)
            line = [x for x in out.splitlines() if x.startswith("drained ")]
            f = dict(kv.split("=") for kv in line[0].split()[1:]) if line else {}
            if int(f.get("bytes", 0)) != n:
                raise SystemExit("%s: %r" % (name, out))
            gib = n / (1 << 30)
            return n / float(f["seconds"]) / 1e6, (c1 - c0) / gib, (e1 - e0) / gib

        fetch("dnat")  # warm-up: the tunnel's and the kubelet's first connections
        fetch("door-uds")
        got = {k: [] for k in ways}
        for r in range(args.runs):
            for name in ways:
                mbs, cs, es = fetch(name)
                got[name].append((mbs, cs, es))
                relays = "" if name == "direct" else \
                    "  cloudstream %.2f, edgestream %.2f CPU-s/GiB" % (cs, es)
                print("run %d %-9s %7.1f MB/s%s" % (r + 1, name, mbs, relays), flush=True)
        med = {k: [statistics.median(x[i] for x in v) for i in range(3)]
               for k, v in got.items()}
        direct = med["direct"][0]
        print("%d MiB, median of %d runs, build %s" % (args.mib, args.runs, args.build))
        print("| way | MB/s | ÷ direct (target >= %.2f) | cloudstream CPU-s/GiB | edgestream "
              "CPU-s/GiB (target <= %.1f each) | edge ÷ cloud |" % (CHAIN_TARGET, RELAY_TARGET))
        print("|---|---|---|---|---|---|")
        print("| direct | %.0f | 1 | | | |" % direct)
        for name in ("dnat", "door-uds"):
            mbs, cs, es = med[name]
            print("| %s | %.0f | %.2f | %.2f | %.2f | %.2f |"
                  % (name, mbs, mbs / direct, cs, es, es / cs if cs else 0))


if __name__ == "__main__":
    main()
