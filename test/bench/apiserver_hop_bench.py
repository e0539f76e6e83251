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
    cloud = h.start_cloudstream(env, extra=["--log-level", "warn"])
    edge1 = h.start_edgestream(env, cloud, kubelet, node="edge-1", extra=["--log-level", "warn"])
    h.start_edgestream(env, cloud, None, node="edge-2",
                       extra=["--cri-socket", pod.ctd.socket, "--log-level", "warn"])
    sport = cloud.ports["stream"]
    cport = int(pod.cri("exec-url", cid, "true").split(":")[2].split("/")[0])
    floor = None if args.no_floor else bl.start_floor_pair(env, kubelet.port)
    hport = bl.start_nginx(env, d, "hop", HOP_SERVER, http=HOP_HTTP, kport=kubelet.port,
                           sport=sport, cport=cport, fport=floor[0].port if floor else 1).port

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

    def exec_direct():
        url = pod.cri("exec-url", cid, "head", "-c", str(nbytes), "/dev/zero")
        return ws_stdout(hport, ctx, "/direct/exec/" + url.split("/exec/", 1)[1], nbytes)

    def exec_chain():
        return ws_stdout(hport, ctx, "/chain/exec/default/bench/app?" + cmd, nbytes)

    rows = []
    cpu = {}  # leg → [CPU-s per GiB of each watched relay] per run
    for name, direct, chain, flo in (
            ("%d MiB of logs" % args.mib, logs_direct, logs_chain, logs_floor if floor else None),
            ("%d MiB of exec stdout (websocket v4, containerd)" % args.mib, exec_direct,
             exec_chain, None)):
        legs = [direct, chain] + ([flo] if flo else [])
        # the relays whose CPU is read around the logs legs' runs: the chain's, the floor's
        watch = {chain: (cloud.pid, edge1.pid), flo: (floor[0].pid, floor[1].pid)} \
            if flo else {}
        for leg in legs:  # warm every path (TLS sessions, page cache, containerd)
            leg()
        times = [[] for _ in legs]
        for _ in range(args.runs):  # alternated, so drift hits every leg alike
            for i, leg in enumerate(legs):
                pids = watch.get(leg, ())
                before = [bl.cpu_seconds(p) for p in pids]
                times[i].append(leg())
                if pids:
                    cpu.setdefault(leg, []).append(
                        [(bl.cpu_seconds(p) - b) / (nbytes / float(1 << 30))
                         for p, b in zip(pids, before)])
        td, tc = times[0], times[1]
        tf = times[2] if flo else None
        rows.append((name, statistics.median(td), statistics.median(tc),
                     statistics.median(a / b for a, b in zip(td, tc)),
                     statistics.median(tf) if tf else None,
                     statistics.median(a / b for a, b in zip(td, tf)) if tf else None,
                     statistics.median(a / b for a, b in zip(tf, tc)) if tf else None))
    print("through an apiserver-like nginx TLS hop: straight to the kubelet side vs through "
          "cloudstream + edgestream, median of %d alternated runs (%s build)"
          % (args.runs, os.path.basename(os.path.abspath(args.build))))
    print("%-52s %12s %12s %7s %7s" % ("", "hop→kubelet", "hop→chain", "ratio", "target"))
    for name, td, tc, ratio, _, _, _ in rows:
        print("%-52s %7.0f MB/s %7.0f MB/s %7.2f %7s" % (name, nbytes / td / 1e6,
                                                      nbytes / tc / 1e6, ratio, "≥ 0.9"))
    for name, td, tc, ratio, tfl, f_ratio, c_f in rows:
        if tfl is None:
            continue
        print("floor pair (the hop → tls_relay_floor → tls_relay_floor → the kubelet nginx, "
              "TLS and nothing else in the two relays), %s:" % name)
        print("  %7.0f MB/s = %.2f of the hop → kubelet (the chain: %.2f); chain ÷ floor pair "
              "%.2f" % (nbytes / tfl / 1e6, f_ratio, ratio, c_f))
        med = lambda leg, i: statistics.median(r[i] for r in cpu[leg])  # noqa: E731
        print("  CPU per GiB (median; /proc ticks over %d MiB): cloudstream %.2f s, edgestream "
              "%.2f s; floor relays in %.2f s, out %.2f s" % (
                  args.mib, med(logs_chain, 0), med(logs_chain, 1), med(logs_floor, 0),
                  med(logs_floor, 1)))


if __name__ == "__main__":
    main()
