#!/usr/bin/python3
"""1 GiB from the edge's kubelet through each of cloudstream's two entries, in the same run.

    test/bench/front_door_bench.py [--build build/rel] [--mib 1024] [--runs 3]

One cloudstream (stream port, front door on TLS and on a unix socket), one edgestream, nginx as
the node's kubelet (TLS, client certificate required) serving a sparse file, all on 127.0.0.1
from --build. Each run downloads the file:

  dnat       GET to the stream port (TLS with the apiserver's kubelet client certificate), as
             kube-apiserver does after the DNAT rule: cloudstream and edgestream each
             terminate and redo TLS, the request travels as a connect, the answer as DATA;
  door-uds   CONNECT on the unix socket, then TLS to the kubelet inside the tunnel and the GET:
             cloudstream and edgestream relay ciphertext;
  door-tls   the same over the front door's mTLS (TLS inside TLS on the client).

Prints each run's MB/s, the medians, and front door / DNAT. The client is the same Python
process for all three (recv_into 1 MiB, no copy kept), so its own cost is in every figure.
A program, not a test: it asserts nothing.
"""
import os
import socket
import ssl
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402


def main():
    ap = bl.parser(__doc__, "rel", mib=1024, runs=3)
    args = ap.parse_args()
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
        kubelet = start_download_nginx(env, args.mib << 20)
        sock_path = env.sock("front-door.sock")
        cloud = h.start_cloudstream(env, extra=[
            "--front-door-listen", "127.0.0.1:0", "--front-door-socket", sock_path,
            "--front-door-cert", env.path("front-door.crt"),
            "--front-door-key", env.path("front-door.key"),
            "--front-door-client-ca", env.path("egress-ca.crt"), "--log-level", "info"])
        h.start_edgestream(env, cloud, kubelet, extra=["--log-level", "info"])
        chain = type("C", (), {"env": env, "sock_path": sock_path,
                               "door_port": cloud.ports["front_door"]})()
        deadline = time.monotonic() + 10
        while True:
            status, _, _, s = fd.connect(chain, fd.NODE_IP, 10250, via="uds")
            s.close()
            if status == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.05)

        n = args.mib << 20
        # Host names the node by name: the stream port never takes a loopback address for a
        # node's (the apiserver forwards the client's Host on upgrades).
        req = b"GET /download HTTP/1.1\r\nHost: edge-1:10250\r\n\r\n"
        buf = bytearray(1 << 20)

        def drain(s):
            s.sendall(req)
            head = b""
            while b"\r\n\r\n" not in head:
                head += s.recv(4096)
            head, rest = head.split(b"\r\n\r\n", 1)
            if b" 200 " not in head.split(b"\r\n")[0]:
                raise SystemExit("download failed: %r" % head[:200])
            got = len(rest)
            view = memoryview(buf)
            while got < n:
                if isinstance(s, fd.InnerTLS):
                    k = len(s.recv(1 << 20))
                else:
                    k = s.recv_into(view)
                if k == 0:
                    raise SystemExit("cut at %d of %d bytes" % (got, n))
                got += k

        stream_ctx = bl.client_ctx(env.pki)
        kubelet_ctx = ssl.create_default_context(cafile=env.path("kubelet-ca.crt"))
        kubelet_ctx.load_cert_chain(env.path("apiserver-kubelet.crt"),
                                    env.path("apiserver-kubelet.key"))

        def dnat():
            raw = socket.create_connection(("127.0.0.1", cloud.ports["stream"]))
            return stream_ctx.wrap_socket(raw)

        def door_uds():
            status, reason, _, s = fd.connect(chain, fd.NODE_IP, 10250, via="uds")
            assert status == 200, reason
            return kubelet_ctx.wrap_socket(s, server_hostname=fd.NODE_IP)

        def door_tls():
            status, reason, _, s = fd.connect(chain, fd.NODE_IP, 10250, via="tls")
            assert status == 200, reason
            return fd.InnerTLS(kubelet_ctx, s, fd.NODE_IP)

        ways = [("dnat", dnat), ("door-uds", door_uds), ("door-tls", door_tls)]
        rates = {name: [] for name, _ in ways}
        for r in range(args.runs):
            for name, open_ in ways:  # interleaved, so drift hits all three alike
                s = open_()
                t0 = time.monotonic()
                drain(s)
                dt = time.monotonic() - t0
                s.close()
                rates[name].append(n / dt / 1e6)
                print("run %d %-9s %7.1f MB/s  (%d MiB in %.2f s)" % (
                    r + 1, name, rates[name][-1], args.mib, dt), flush=True)
        med = {k: statistics.median(v) for k, v in rates.items()}
        print("median: dnat %.1f MB/s, front door uds %.1f MB/s (%.2fx), front door tls "
              "%.1f MB/s (%.2fx)" % (med["dnat"], med["door-uds"], med["door-uds"] / med["dnat"],
                                     med["door-tls"], med["door-tls"] / med["dnat"]))


if __name__ == "__main__":
    main()
