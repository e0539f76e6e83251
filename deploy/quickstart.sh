#!/usr/bin/env bash
# The README's quick-start command. Installs what is missing, builds, and runs what the project
# has today on loopback, printing what happened.
#
# Today (foundation stage): the daemons are not written yet (issues "cloudstream" and
# "edgestream"), so this mints the full certificate set the chain will use, checks every
# certificate with `openssl verify`, and prints where everything is. When the daemons land, this
# script starts containerd with a demo pod, cloudstream, edgestream and nginx, and runs kubectl
# through the chain.
#
# Environment: QS_DIR (default /tmp/cloudstream-quickstart) holds everything it makes.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
QS_DIR=${QS_DIR:-/tmp/cloudstream-quickstart}
BUILD=$ROOT/build/release

"$ROOT/deploy/install-deps.sh" --build
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DST_BUILD_TESTS=OFF >/dev/null
cmake --build "$BUILD" -j"$(nproc)" >/dev/null
echo "quickstart: built into $BUILD"

mkdir -p "$QS_DIR"
CERTS=$BUILD/certs/stream-certs
"$CERTS" quick --out "$QS_DIR/pki" --node edge-1 --force
echo
echo "quickstart: checking every certificate against its CA with openssl verify"
ok=0 bad=0
for crt in "$QS_DIR"/pki/*.crt; do
	case "$crt" in *-ca.crt) continue ;; esac
	verified=no
	for ca in "$QS_DIR"/pki/*-ca.crt; do
		if openssl verify -CAfile "$ca" "$crt" >/dev/null 2>&1; then
			printf '  %-40s ok (issued by %s)\n' "$(basename "$crt")" "$(basename "$ca")"
			verified=yes
			break
		fi
	done
	if [ "$verified" = yes ]; then ok=$((ok + 1)); else bad=$((bad + 1)); echo "  $(basename "$crt"): NOT verified"; fi
done
echo
echo "quickstart: the tunnel's certificates in real mTLS handshakes (openssl s_server/s_client):"
ST_BIN_DIR=$BUILD ST_TEST_TMPDIR=/tmp "$ROOT/test/integration/certs_mtls.sh" | sed 's/^/  /' || bad=$((bad + 1))
echo
echo "quickstart: $ok certificate(s) verified, $bad failed; files in $QS_DIR/pki"
echo "quickstart: inspect one with: $CERTS show $QS_DIR/pki/node-edge-1.crt"
echo "quickstart: the cloudstream/edgestream daemons are not built yet at this stage; see README 'Status'."
echo "quickstart: stop/cleanup: nothing is left running; rm -rf $QS_DIR to remove the files."
[ "$bad" -eq 0 ]
