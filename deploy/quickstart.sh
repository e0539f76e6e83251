#!/usr/bin/env bash
# The README's quick-start command. Installs what is missing, builds (Release), then brings up the
# whole chain on loopback with real peers and leaves it running:
#
#   kubectl 1.32 -> nginx playing kube-apiserver (TLS, client certificates, the kubelet rewrite)
#     -> cloudstream (stream server, TLS; the pod's node found through that apiserver)
#     -> tunnel (wss + mTLS) -> edgestream (CRI backend)
#     -> a real containerd with pod default/demo (host network, busybox)
#
# It runs kubectl exec (stdout, stderr, exit code), exec -i, logs and port-forward through the
# chain and prints what happened, then tells you where the kubeconfig is.
#
#   ./deploy/quickstart.sh          start (as root)
#   ./deploy/quickstart.sh stop     stop everything it started, by PID, and remove the pod
#
# Environment: QS_DIR (default /tmp/cloudstream-quickstart) holds everything it makes.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
QS_DIR=${QS_DIR:-/tmp/cloudstream-quickstart}
BUILD=$ROOT/build/release

if [ "${1:-start}" = stop ]; then
	exec /usr/bin/python3 "$ROOT/deploy/quickstart.py" stop "$QS_DIR" "$BUILD"
fi
"$ROOT/deploy/install-deps.sh"
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DST_BUILD_TESTS=OFF >/dev/null
cmake --build "$BUILD" -j"$(nproc)" >/dev/null
echo "quickstart: built into $BUILD"
exec /usr/bin/python3 "$ROOT/deploy/quickstart.py" start "$QS_DIR" "$BUILD"
