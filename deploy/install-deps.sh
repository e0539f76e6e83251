#!/usr/bin/env bash
# Installs everything cloudstream/edgestream need to build and test on Debian 12.
# Idempotent and non-interactive: packages already present are skipped, so a second run costs one
# dpkg query. Used by the README's two commands and by .ci/run.
#
#   deploy/install-deps.sh            build dependencies + the real test peers
#   deploy/install-deps.sh --build    build dependencies only
set -euo pipefail

build_pkgs=(
  build-essential cmake pkg-config git ca-certificates
  libwebsockets-dev libwebsockets-evlib-ev libev-dev libssl-dev libjson-c-dev libyaml-dev libcurl4-openssl-dev libseccomp-dev libnghttp2-dev libcmocka-dev
  zlib1g-dev clang clang-format-14 libclang-rt-14-dev openssl
  file  # CPack's Debian packages: dpkg-shlibdeps finds the binaries with it (build-packages.sh)
)
# Real peers the integration and end-to-end tests start: nginx plays kube-apiserver, containerd +
# runc run real pods, busybox-static fills the test images, iproute2/iptables build the DNAT test's
# network namespaces, python3-kubernetes is a second real client (websocket v4 exec/port-forward),
# python3-yaml reads deploy/kubernetes in the deploy test, socat's OpenSSL server is the TLS front
# that refuses session resumption (edgestream_ops kubelet_refuses_resumption), python3-h2 lets the
# kubelet stand-in speak HTTP/2 (edgestream_h2, test/bench/edge_rss.py --kubelet-h2).
peer_pkgs=(
  nginx-light containerd runc busybox-static iproute2 iptables conntrack socat
  python3 python3-kubernetes python3-websocket python3-websockets python3-yaml python3-h2 curl procps psmisc
  libnginx-mod-http-js  # njs: the apiserver stand-in's pods/log errors (peers/apiserver_podlog.js)
  golang-go  # Go 1.19: edgestream/go and its example agent (integration.go_*, e2e.kubectl_goagent)
  umoci  # OCI image layouts without a registry or engine (build-images.sh, integration.images)
  prometheus  # promtool: the alert rules' unit tests and the /metrics lint (integration.promtool)
  haproxy  # the load balancer in front of 3 replicas (integration.ha_*)
)

want=("${build_pkgs[@]}")
[ "${1:-}" = "--build" ] || want+=("${peer_pkgs[@]}")

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#want[@]} packages present"
  exit 0
fi

SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Debian starts the packaged services on install; the tests run their own instances on their own
# ports and sockets, so stop the system copies to keep ports and CPU free.
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  $SUDO systemctl disable --now nginx containerd prometheus >/dev/null 2>&1 || true
fi
echo "install-deps: done"
