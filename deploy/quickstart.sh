#!/usr/bin/env bash
# The README's quick-start command. Installs what is missing, builds, and runs the chain that
# exists today on loopback, printing what happened:
#
#   curl (as kube-apiserver, with its kubelet client certificate)
#     -> cloudstream :stream port (TLS, client certificate required)
#     -> tunnel (wss + mTLS) -> a KubeEdge-protocol edge node (test/integration/peers)
#     -> a TLS kubelet stand-in
#
# edgestream (our edge daemon) and the CRI backend are the next issues; until they land, the edge
# here is the test edge that speaks exactly KubeEdge's protocol, which also shows cloudstream
# serving an unmodified KubeEdge edge. Everything started is stopped by PID at the end.
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

$PY "$PEERS/kubeedge_edge.py" --cloud "wss://127.0.0.1:$TUNNEL/v1/kubeedge/connect" \
	--cert "$PKI/node-edge-1.crt" --key "$PKI/node-edge-1.key" --ca "$PKI/tunnel-ca.crt" \
	--node-name edge-1 --backend "https://127.0.0.1:$(cat "$R/kubelet.ready")" \
	--backend-cert "$PKI/edgestream-kubelet-client.crt" \
	--backend-key "$PKI/edgestream-kubelet-client.key" --backend-ca "$PKI/kubelet-ca.crt" \
	--ready-file "$R/edge.ready" 2>"$R/edge.log" &
pids+=($!)
wait_file "$R/edge.ready" "the edge" "$R/edge.log"
echo "quickstart: cloudstream up (tunnel :$TUNNEL, stream :$STREAM, admin :$ADMIN); edge-1 connected"

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
echo "== a node with no tunnel: 503 with a Kubernetes Status"
curl -sS --cacert "$PKI/stream-ca.crt" --cert "$PKI/apiserver-kubelet-client.crt" \
	--key "$PKI/apiserver-kubelet-client.key" \
	-H "X-Forwarded-Uri: /api/v1/nodes/edge-9/proxy/metrics" "https://127.0.0.1:$STREAM/metrics"
echo
echo "== cloudstream metrics (admin port)"
curl -sS "http://127.0.0.1:$ADMIN/metrics" | grep -E '^cloudstream_(sessions|streams_total|request_errors_total)' | grep -v ' 0$'
echo
echo "quickstart: logs are in $R; stopping everything (by PID)."
[ "$bad" -eq 0 ]
