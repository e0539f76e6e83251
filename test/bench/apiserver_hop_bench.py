#!/usr/bin/python3
"""100 MiB of logs and of exec stdout through an apiserver-like TLS proxy hop, straight to the
kubelet side and through cloudstream → tunnel → edgestream, in one run.

    sudo test/bench/apiserver_hop_bench.py [--build build/release] [--mib 100] [--runs 5]

What kubectl's bytes cross in production is kube-apiserver's proxy hop and then the kubelet (or,
with DNAT, cloudstream and the tunnel). The hop here is nginx set up as the e2e tests' apiserver
stand-in does it (test/integration/peers/apiserver.py): TLS in with a client certificate
required, HTTP/1.1 out with `proxy_buffering off`, TLS with the apiserver's kubelet client
certificate toward the kubelet side, upgrades passed through. Two locations per kind, the same
hop and the same client:
  - logs: direct = the hop → nginx playing the node's kubelet (TLS, client certificate
          required, a file of --mib MiB); chain = the hop → cloudstream's stream port (Host names
          the node as the DNAT'd address would) → tunnel → edgestream → that same nginx.
  - exec stdout (websocket v4, `head -c N /dev/zero` in a real container): direct = the hop →
          containerd's streaming server (what a kubelet proxies exec to; plain HTTP on loopback,
          so the reference has one TLS leg less than a kubelet would); chain = the hop →
          cloudstream → tunnel → edgestream's CRI backend → the same containerd.
  - logs through the floor pair: the hop → tls_relay_floor → tls_relay_floor → the same nginx:
          two relays that terminate and originate TLS and do nothing else (test/bench/
          tls_relay_floor.c), the chain's shape at its cheapest; its ratio to the hop → kubelet
          is what any pair of TLS relays reaches on these cores (--no-floor leaves it out).
  - logs through the front door: the hop → egress_splice (test/bench/egress_splice.c: the
          EgressSelector `HTTPConnect` dial kube-apiserver makes itself, CONNECT on cloudstream's
          front-door unix socket, then splice(2)) → cloudstream → tunnel → edgestream → the same
          nginx, the hop's own TLS end to end to it (DESIGN D13); each daemon relays that
          ciphertext and does only the tunnel's TLS (--no-door leaves it out). The shim is one
          process more than kube-apiserver has: its CPU counts against this leg.
Clients: curl for logs; for exec a raw TLS reader that only walks the websocket frame headers
(neither is the bound: both read well over a GB/s alone). Runs alternate direct and chain;
medians are printed with the ratio chain ÷ direct beside the target (≥ 0.9). A program, not a
test: it asserts bytes and statuses, nothing about speed. Needs root (containerd).
"""
import base64
import os
import socket
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402

NODE_IP = "127.0.0.11"  # edge-1's address for the front door (front_door_test.py's)

KUBELET_LOCATIONS = """    location /containerLogs/ {{ root {d}; default_type text/plain; rewrite ^ /logs.txt break; }}
"""

# The apiserver-like hop (settings as in peers/apiserver.py's NGINX_CONF).
HOP_HTTP = """  map $http_upgrade $connection_upgrade {{ default Upgrade; '' close; }}
  proxy_http_version 1.1; proxy_buffering off; proxy_request_buffering off;
  proxy_read_timeout 600s; proxy_send_timeout 600s;
  proxy_ssl_protocols TLSv1.2 TLSv1.3;
"""
HOP_SERVER = """    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_certificate {pki}/cloudstream-stream.crt;
    ssl_certificate_key {pki}/cloudstream-stream.key;
    ssl_client_certificate {pki}/stream-ca.crt;
    ssl_verify_client on;
    location = /direct/logs {{
      proxy_pass https://127.0.0.1:{kport}/containerLogs/default/bench/app;
      proxy_ssl_certificate {pki}/edgestream-kubelet-client.crt;
      proxy_ssl_certificate_key {pki}/edgestream-kubelet-client.key;
      proxy_set_header Host "127.0.0.1:{kport}";
    }}
    location = /chain/logs {{
      proxy_pass https://127.0.0.1:{sport}/containerLogs/default/bench/app;
      proxy_ssl_certificate {pki}/apiserver-kubelet-client.crt;
      proxy_ssl_certificate_key {pki}/apiserver-kubelet-client.key;
      proxy_set_header Host "edge-1:10350";
    }}
    location = /door/logs {{
      proxy_pass https://127.0.0.1:{eport}/containerLogs/default/bench/app;
      proxy_ssl_certificate {pki}/edgestream-kubelet-client.crt;
      proxy_ssl_certificate_key {pki}/edgestream-kubelet-client.key;
      proxy_set_header Host "{node_ip}:10250";
    }}
    location = /floor/logs {{
      proxy_pass https://127.0.0.1:{fport}/containerLogs/default/bench/app;
      proxy_ssl_certificate {pki}/edgestream-kubelet-client.crt;
      proxy_ssl_certificate_key {pki}/edgestream-kubelet-client.key;
      proxy_set_header Host "127.0.0.1:{kport}";
    }}
    location ~ ^/direct(?<rest>/exec/.*)$ {{
      proxy_pass http://127.0.0.1:{cport}$rest;
      proxy_set_header Upgrade $http_upgrade; proxy_set_header Connection $connection_upgrade;
    }}
    location ~ ^/chain(?<rest>/exec/.*)$ {{
      proxy_pass https://127.0.0.1:{sport}$rest$is_args$args;
      proxy_ssl_certificate {pki}/apiserver-kubelet-client.crt;
      proxy_ssl_certificate_key {pki}/apiserver-kubelet-client.key;
      proxy_set_header Host "edge-2:10350";
      proxy_set_header Upgrade $http_upgrade; proxy_set_header Connection $connection_upgrade;
    }}
"""


def curl_logs(url, cert, key, nbytes):
    t, status, size = bl.curl(url, ["--cert", cert, "--key", key])
    if (status, size) != (200, nbytes):
        raise SystemExit("%s: %d %d, want 200 and %d bytes" % (url, status, size, nbytes))
    return t


def ws_stdout(port, ctx, target, nbytes):
    """Runs one exec through the hop; returns the seconds from the request to the exit status.
    Walks frame headers only: payload bytes of channel 1 are counted, not copied."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=60)
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s = ctx.wrap_socket(raw)
    key = base64.b64encode(os.urandom(16)).decode()
    t0 = time.perf_counter()
    s.sendall(("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
               "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n"
               "Sec-WebSocket-Protocol: v4.channel.k8s.io\r\n\r\n" % (target, key)).encode())
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    have = 0  # unparsed bytes at buf[0:have]
    head_done = False
    skip = 0  # payload bytes of the current frame still to come (not kept)
    skip_channel = None
    stdout = 0
    status = None
    while status is None:
        n = s.recv_into(view[have:])
        if n == 0:
            break
        have += n
        pos = 0
        if not head_done:
            end = bytes(buf[:have]).find(b"\r\n\r\n")
            if end < 0:
                continue
            line = bytes(buf[:end]).split(b"\r\n", 1)[0]
            if b" 101 " not in line + b" ":
                raise SystemExit("%s: %s" % (target, bytes(buf[:have])[:300]))
            head_done = True
            pos = end + 4
        while True:
            if skip:
                take = min(skip, have - pos)
                if skip_channel == 1:
                    stdout += take
                skip -= take
                pos += take
                if skip:
                    break
                continue
            if have - pos < 2:
                break
            b1 = buf[pos + 1] & 0x7F
            hl = 2 + (2 if b1 == 126 else 8 if b1 == 127 else 0)
            if have - pos < hl + 1:
                break
            plen = b1 if b1 < 126 else int.from_bytes(buf[pos + 2:pos + hl], "big")
            channel = buf[pos + hl] if plen else None
            if channel == 3:  # the exit status: small, read it whole
                if have - pos < hl + plen:
                    break
                status = bytes(buf[pos + hl + 1:pos + hl + plen])
                pos += hl + plen
                break
            pos += hl + (1 if plen else 0)
            skip, skip_channel = max(plen - 1, 0), channel
        view[0:have - pos] = view[pos:have]
        have -= pos
    t = time.perf_counter() - t0
    s.close()
    if stdout != nbytes or status is None or b'"Success"' not in status:
        raise SystemExit("%s: %d stdout bytes of %d, status %r" % (target, stdout, nbytes,
                                                                   status))
    return t


def main():
    ap = bl.parser(__doc__, "release", mib=100, runs=5)
    ap.add_argument("--kubelet-h2", action="store_true",
                    help="the kubelet nginx offers HTTP/2 (ALPN h2) as well, as a real kubelet "
                         "does: edgestream's GETs then go over its HTTP/2 client; the hop's own "
                         "leg to the kubelet stays HTTP/1.1 (nginx proxies HTTP/1.1, and so "
                         "does kube-apiserver's kubelet client)")
    ap.add_argument("--no-floor", action="store_true",
                    help="leave out the logs leg through a pair of tls_relay_floor relays "
                         "instead of the chain (what two relays that only do TLS reach here)")
    ap.add_argument("--no-door", action="store_true",
                    help="leave out the logs leg through cloudstream's front door")
    bl.add_congestion(ap)
    args = ap.parse_args()
    bl.congestion_netns(args.congestion)
    h = bl.use_build(args.build)

    nbytes = args.mib << 20
    with bl.run_env("hop-bench", nodes=("edge-1", "edge-2")) as env, bl.Pod(env) as pod:
        run(args, h, env, pod, nbytes)


def run(args, h, env, pod, nbytes):
    d = os.path.join(env.dir, "www")
    os.makedirs(d)
    bl.write_lines(os.path.join(d, "logs.txt"), nbytes)
    pod.start()
    cid = pod.container("sleep", "3600")

    kubelet = bl.start_kubelet_nginx(env, d, KUBELET_LOCATIONS, http2=args.kubelet_h2)
    # The front door routes a CONNECT by the node's IP, an IP SAN of its tunnel certificate.
    env.mint("client", "--ca", env.path("tunnel-ca"), "--out", env.path("node-edge-1"),
             "--node", "edge-1", "--ip", NODE_IP, "--force")
    door_sock = env.sock("front-door.sock")
    cloud = h.start_cloudstream(env, extra=["--log-level", "warn", "--front-door-socket",
                                            door_sock])
    edge1 = h.start_edgestream(env, cloud, kubelet, node="edge-1", extra=["--log-level", "warn"])
    h.start_edgestream(env, cloud, None, node="edge-2",
                       extra=["--cri-socket", pod.ctd.socket, "--log-level", "warn"])
    sport = cloud.ports["stream"]
    cport = int(pod.cri("exec-url", cid, "true").split(":")[2].split("/")[0])
    floor = None if args.no_floor else bl.start_floor_pair(env, kubelet.port)
    eport = 1
    if not args.no_door:
        ready = os.path.join(env.dir, "egress.ready")
        _, text = env.start("egress", [os.path.join(h.BIN, "test", "bench", "egress_splice"),
                                       "--uds", door_sock, "--target", "%s:10250" % NODE_IP,
                                       "--ready-file", ready], ready)
        eport = int(text.strip())
    hport = bl.start_nginx(env, d, "hop", HOP_SERVER, http=HOP_HTTP, kport=kubelet.port,
                           sport=sport, cport=cport, fport=floor[0].port if floor else 1,
                           eport=eport, node_ip=NODE_IP).port

    cert, key = env.path("apiserver-kubelet-client.crt"), env.path(
        "apiserver-kubelet-client.key")
    ctx = bl.client_ctx(env.pki)
    base = "https://127.0.0.1:%d" % hport
    cmd = "command=head&command=-c&command=%d&command=/dev/zero&output=1" % nbytes

    def logs_direct():
        return curl_logs(base + "/direct/logs", cert, key, nbytes)

    def logs_chain():
        return curl_logs(base + "/chain/logs", cert, key, nbytes)

    def logs_floor():
        return curl_logs(base + "/floor/logs", cert, key, nbytes)

    def logs_door():
        return curl_logs(base + "/door/logs", cert, key, nbytes)

    def exec_direct():
        url = pod.cri("exec-url", cid, "head", "-c", str(nbytes), "/dev/zero")
        return ws_stdout(hport, ctx, "/direct/exec/" + url.split("/exec/", 1)[1], nbytes)

    def exec_chain():
        return ws_stdout(hport, ctx, "/chain/exec/default/bench/app?" + cmd, nbytes)

    # Each kind: its legs by name (direct first), and the relays whose CPU is read around a
    # leg's runs.
    kinds = [("%d MiB of logs" % args.mib, [("direct", logs_direct), ("chain", logs_chain)]
              + ([("floor", logs_floor)] if floor else [])
              + ([("door", logs_door)] if not args.no_door else [])),
             ("%d MiB of exec stdout (websocket v4, containerd)" % args.mib,
              [("direct", exec_direct), ("chain", exec_chain)])]
    watch = {logs_chain: (cloud.pid, edge1.pid), logs_door: (cloud.pid, edge1.pid)}
    if floor:
        watch[logs_floor] = (floor[0].pid, floor[1].pid)
    # (kind, {leg name: median seconds}, {leg name: median ratio to direct}, {leg name: runs})
    results = []
    cpu = {}  # leg → [CPU-s of each watched relay] per run
    for name, legs in kinds:
        for _, leg in legs:  # warm every path (TLS sessions, page cache, containerd)
            leg()
        times = {n: [] for n, _ in legs}
        for _ in range(args.runs):  # alternated, so drift hits every leg alike
            for n, leg in legs:
                pids = watch.get(leg, ())
                before = [bl.cpu_seconds(p) for p in pids]
                times[n].append(leg())
                if pids:
                    cpu.setdefault(leg, []).append(
                        [bl.cpu_seconds(p) - b for p, b in zip(pids, before)])
        td = times["direct"]
        results.append((name, {n: statistics.median(t) for n, t in times.items()},
                        {n: statistics.median(a / b for a, b in zip(td, t))
                         for n, t in times.items()}, times))
    # Summed over the runs: one /proc clock tick over 100 MiB alone is 0.1 s per GiB, so
    # per-run figures fall on a 0.1 s grid.
    gib = args.runs * nbytes / float(1 << 30)
    per_gib = lambda leg, i: sum(r[i] for r in cpu[leg]) / gib  # noqa: E731
    print("through an apiserver-like nginx TLS hop: straight to the kubelet side vs through "
          "cloudstream + edgestream, median of %d alternated runs (%s build)"
          % (args.runs, os.path.basename(os.path.abspath(args.build))))
    print("%-52s %12s %12s %7s %7s" % ("", "hop→kubelet", "hop→chain", "ratio", "target"))
    for name, t, ratio, _ in results:
        print("%-52s %7.0f MB/s %7.0f MB/s %7.2f %7s" % (name, nbytes / t["direct"] / 1e6,
                                                      nbytes / t["chain"] / 1e6,
                                                      ratio["chain"], "≥ 0.9"))
    name, t, ratio, runs = results[0]
    print("  chain CPU per GiB over the %d runs: cloudstream %.2f s, edgestream %.2f s (one "
          "clock tick: %.3f s)" % (args.runs, per_gib(logs_chain, 0), per_gib(logs_chain, 1),
                                   1.0 / bl.TCK / gib))
    if "door" in t:
        print("front door (the hop → egress_splice → CONNECT on the unix socket → cloudstream → "
              "tunnel → edgestream → the kubelet nginx, the hop's TLS end to end), %s:" % name)
        print("  %7.0f MB/s = %.2f of the hop → kubelet (target ≥ 0.9; the DNAT chain: %.2f)"
              % (nbytes / t["door"] / 1e6, ratio["door"], ratio["chain"]))
        print("  CPU per GiB over the runs: cloudstream %.2f s, edgestream %.2f s"
              % (per_gib(logs_door, 0), per_gib(logs_door, 1)))
    if "floor" in t:
        print("floor pair (the hop → tls_relay_floor → tls_relay_floor → the kubelet nginx, "
              "TLS and nothing else in the two relays), %s:" % name)
        print("  %7.0f MB/s = %.2f of the hop → kubelet (the chain: %.2f); chain ÷ floor pair "
              "%.2f (medians of the runs' ratios)" % (
                  nbytes / t["floor"] / 1e6, ratio["floor"], ratio["chain"],
                  statistics.median(f / c for f, c in zip(runs["floor"], runs["chain"]))))
        print("  CPU per GiB over the runs: floor relays in %.2f s, out %.2f s"
              % (per_gib(logs_floor, 0), per_gib(logs_floor, 1)))

if __name__ == "__main__":
    main()
