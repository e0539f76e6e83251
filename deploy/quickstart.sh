#!/usr/bin/env bash
# The README's quick-start command. Installs what is missing, builds, and runs the chain that
# exists today on loopback, printing what happened:
#
#   curl (as kube-apiserver, with its kubelet client certificate)
#     -> cloudstream :stream port (TLS, client certificate required)
#     -> tunnel (wss + mTLS) -> edgestream (the edge daemon, cloud certificate verified)
#     -> a TLS kubelet stand-in (test/integration/peers), and an allow-listed local HTTP port
#
# The CRI backend (containerd behind the edge) is the next issue. Everything started is stopped
# by PID at the end.
#
# Environment: QS_DIR (default /tmp/cloudstream-quickstart) holds everything it makes.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
QS_DIR=${QS_DIR:-/tmp/cloudstream-quickstart}
BUILD=$ROOT/build/release
PY=/usr/bin/python3
PEERS=$ROOT/test/integration/peers

"$ROOT/deploy/install-deps.sh"
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DST_BUILD_TESTS=OFF >/dev/null
cmake --build "$BUILD" -j"$(nproc)" >/dev/null
echo "quickstart: built into $BUILD"

rm -rf "$QS_DIR/run"
mkdir -p "$QS_DIR/run"
PKI=$QS_DIR/pki
"$BUILD/certs/stream-certs" quick --out "$PKI" --node edge-1 --force >/dev/null
bad=0
for crt in "$PKI"/*.crt; do
	case "$crt" in *-ca.crt) continue ;; esac
	ok=no
	for ca in "$PKI"/*-ca.crt; do
		openssl verify -CAfile "$ca" "$crt" >/dev/null 2>&1 && ok=yes && break
	done
	[ "$ok" = yes ] || { echo "quickstart: $crt does not verify"; bad=$((bad + 1)); }
done
echo "quickstart: certificates minted in $PKI and checked with openssl verify ($bad failed)"

pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

wait_file() {
	for _ in $(seq 1 200); do [ -s "$1" ] && return 0; sleep 0.05; done
	echo "quickstart: $2 did not start; its log:"; tail -20 "$3"; exit 1
}

R=$QS_DIR/run
$PY "$PEERS/fake_kubelet.py" --listen 127.0.0.1:0 --cert "$PKI/kubelet.crt" --key "$PKI/kubelet.key" \
	--client-ca "$PKI/kubelet-ca.crt" --ready-file "$R/kubelet.ready" 2>"$R/kubelet.log" &
pids+=($!)
wait_file "$R/kubelet.ready" "the kubelet stand-in" "$R/kubelet.log"

"$BUILD/cloudstream/cloudstream" --tunnel-listen 127.0.0.1:0 --stream-listen 127.0.0.1:0 \
	--admin-listen 127.0.0.1:0 \
	--tunnel-cert "$PKI/cloudstream-tunnel.crt" --tunnel-key "$PKI/cloudstream-tunnel.key" \
	--tunnel-ca "$PKI/tunnel-ca.crt" --stream-cert "$PKI/cloudstream-stream.crt" \
	--stream-key "$PKI/cloudstream-stream.key" --stream-client-ca "$PKI/stream-ca.crt" \
	--ready-file "$R/cloudstream.ready" 2>"$R/cloudstream.log" &
pids+=($!)
wait_file "$R/cloudstream.ready" cloudstream "$R/cloudstream.log"
TUNNEL=$(sed -n 's/^tunnel=//p' "$R/cloudstream.ready")
STREAM=$(sed -n 's/^stream=//p' "$R/cloudstream.ready")
ADMIN=$(sed -n 's/^admin=//p' "$R/cloudstream.ready")

# A local "node-exporter" on a free port, reachable only because it is on the allow-list.
$PY -c 'import http.server, socketserver, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = b"node_exporter_build_info{version=\"quickstart\"} 1\n"
        self.send_response(200); self.send_header("Content-Length", str(len(b))); self.end_headers()
        self.wfile.write(b)
    def log_message(self, *a): pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
open(sys.argv[1] + ".tmp", "w").write(str(s.server_port)); __import__("os").rename(sys.argv[1] + ".tmp", sys.argv[1])
s.serve_forever()' "$R/exporter.ready" 2>"$R/exporter.log" &
pids+=($!)
wait_file "$R/exporter.ready" "the local exporter" "$R/exporter.log"

"$BUILD/edgestream/edgestream" --cloud-url "wss://127.0.0.1:$TUNNEL/v1/kubeedge/connect" \
	--cloud-server-name localhost --tunnel-cert "$PKI/node-edge-1.crt" \
	--tunnel-key "$PKI/node-edge-1.key" --tunnel-ca "$PKI/tunnel-ca.crt" \
	--kubelet-url "https://127.0.0.1:$(cat "$R/kubelet.ready")" \
	--kubelet-cert "$PKI/edgestream-kubelet-client.crt" \
	--kubelet-key "$PKI/edgestream-kubelet-client.key" --kubelet-ca "$PKI/kubelet-ca.crt" \
	--local-port "node-exporter=$(cat "$R/exporter.ready")" --admin-listen 127.0.0.1:0 \
	--ready-file "$R/edge.ready" 2>"$R/edge.log" &
pids+=($!)
wait_file "$R/edge.ready" edgestream "$R/edge.log"
EDGE_ADMIN=$(sed -n 's/^admin=//p' "$R/edge.ready")
echo "quickstart: cloudstream up (tunnel :$TUNNEL, stream :$STREAM, admin :$ADMIN); edgestream connected as edge-1 (admin :$EDGE_ADMIN)"

api() {
	curl -sS --cacert "$PKI/stream-ca.crt" --cert "$PKI/apiserver-kubelet-client.crt" \
		--key "$PKI/apiserver-kubelet-client.key" -H "Host: edge-1:10350" "$@"
}
echo
echo "== logs: GET /containerLogs/default/demo/app?tailLines=3 (through the tunnel)"
api "https://127.0.0.1:$STREAM/containerLogs/default/demo/app?tailLines=3"
echo "== metrics: GET /metrics (first 3 lines)"
api "https://127.0.0.1:$STREAM/metrics" -o "$R/metrics.txt"
head -3 "$R/metrics.txt"
echo "   ... $(wc -l <"$R/metrics.txt") lines in all"
echo "== exec: an upgrade to /exec/default/demo/app, answered by the kubelet, relayed raw"
$PY - "$PKI" "$STREAM" <<'PYEOF'
import socket, ssl, sys
pki, port = sys.argv[1], int(sys.argv[2])
ctx = ssl.create_default_context(cafile=pki + "/stream-ca.crt")
ctx.load_cert_chain(pki + "/apiserver-kubelet-client.crt", pki + "/apiserver-kubelet-client.key")
ctx.check_hostname = False
s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)))
s.sendall(b"POST /exec/default/demo/app?command=greet HTTP/1.1\r\nHost: edge-1:10350\r\n"
          b"Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n")
buf = b""
while b"hello" not in buf:
    buf += s.recv(4096)
print(buf.decode().replace("\r\n", "\n  ").rstrip())
s.sendall(b"echo me\n")
print("  echoed back:", s.recv(4096).decode().strip())
PYEOF
echo "== an allow-listed local port: GET /ports/node-exporter/metrics"
api "https://127.0.0.1:$STREAM/ports/node-exporter/metrics"
echo "== a port that is not on the edge's allow-list: refused, nothing dialled"
api "https://127.0.0.1:$STREAM/ports/22/"
echo
echo "== a node with no tunnel: 503 with a Kubernetes Status"
curl -sS --cacert "$PKI/stream-ca.crt" --cert "$PKI/apiserver-kubelet-client.crt" \
	--key "$PKI/apiserver-kubelet-client.key" \
	-H "X-Forwarded-Uri: /api/v1/nodes/edge-9/proxy/metrics" "https://127.0.0.1:$STREAM/metrics"
echo
echo "== cloudstream metrics (admin port)"
curl -sS "http://127.0.0.1:$ADMIN/metrics" | grep -E '^cloudstream_(sessions|streams_total|request_errors_total)' | grep -v ' 0$'
echo "== edgestream metrics (admin port)"
curl -sS "http://127.0.0.1:$EDGE_ADMIN/metrics" | grep -E '^edgestream_(tunnel_connected|streams_total|streams_refused_total)'
echo
echo "quickstart: logs are in $R; stopping everything (by PID)."
[ "$bad" -eq 0 ]
