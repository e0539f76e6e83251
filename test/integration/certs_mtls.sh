#!/usr/bin/env bash
# The certificates stream-certs makes work in a real TLS stack, as the tunnel will use them:
# OpenSSL's s_server requiring a client certificate from the tunnel CA (like cloudstream :10004)
# and s_client verifying the server's CA and name (like edgestream).
#   - node certificate from the tunnel CA, server checked against the tunnel CA: handshake OK
#   - a client certificate from another CA (the stream CA): refused by the server
#   - the edge checks the server against the wrong CA or the wrong name: refused by the client
set -euo pipefail
: "${ST_BIN_DIR:?}"
tmp=$(mktemp -d "${ST_TEST_TMPDIR:-/tmp}/mtls.XXXXXX")
server_pid=
cleanup() {
	[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

"$ST_BIN_DIR/certs/stream-certs" quick --out "$tmp/pki" --node edge-1 >/dev/null
pki=$tmp/pki

# Starts an s_server for one connection; sets $port once it listens (read from its output).
start_server() {
	: >"$tmp/server.log"
	openssl s_server -accept 127.0.0.1:0 -naccept 1 -www \
		-cert "$pki/cloudstream-tunnel.crt" -key "$pki/cloudstream-tunnel.key" \
		-CAfile "$pki/tunnel-ca.crt" -Verify 1 -verify_return_error \
		>"$tmp/server.log" 2>&1 </dev/null &
	server_pid=$!
	port=
	for _ in $(seq 1 200); do
		port=$(sed -n 's/^ACCEPT 127.0.0.1:\([0-9]*\)$/\1/p' "$tmp/server.log")
		[ -n "$port" ] && return 0
		kill -0 "$server_pid" 2>/dev/null || break
		sleep 0.05
	done
	echo "s_server did not start:"; cat "$tmp/server.log"; return 1
}

stop_server() {
	kill "$server_pid" 2>/dev/null || true
	wait "$server_pid" 2>/dev/null || true
	server_pid=
}

# client CERT KEY CAFILE NAME -> prints s_client's output
client() {
	printf 'GET / HTTP/1.0\r\n\r\n' | timeout 20 openssl s_client -connect "127.0.0.1:$port" -brief -ign_eof \
		-cert "$1" -key "$2" -CAfile "$3" -verify_hostname "$4" -verify_return_error 2>&1 || true
}

fail=0
check() { # name expected-pattern output
	if grep -q "$2" <<<"$3"; then echo "ok   $1"; else echo "FAIL $1"; echo "$3"; fail=1; fi
}

start_server
out=$(client "$pki/node-edge-1.crt" "$pki/node-edge-1.key" "$pki/tunnel-ca.crt" localhost)
check "node cert accepted, server verified" "Verification: OK" "$out"
check "  TLS 1.3, ECDSA" "Protocol version: TLSv1.3" "$out"
stop_server
check "  server answered over the verified connection" "HTTP/1.0 200 ok" "$out"

start_server
out=$(client "$pki/apiserver-kubelet-client.crt" "$pki/apiserver-kubelet-client.key" \
	"$pki/tunnel-ca.crt" localhost)
stop_server
check "client cert from another CA refused" "verify error\|unable to get local issuer\|certificate verify failed" "$(cat "$tmp/server.log")"

start_server
out=$(client "$pki/node-edge-1.crt" "$pki/node-edge-1.key" "$pki/stream-ca.crt" localhost)
stop_server
check "server from another CA refused by the edge" "certificate verify failed" "$out"

start_server
out=$(client "$pki/node-edge-1.crt" "$pki/node-edge-1.key" "$pki/tunnel-ca.crt" wrong.example)
stop_server
check "server with the wrong name refused by the edge" "hostname mismatch" "$out"

exit $fail
