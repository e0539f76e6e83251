#!/usr/bin/env bash
# Builds the Debian packages: cloudstream, edgestream, stream-tools, libedgestream-dev
# (deploy/CMakeLists.txt says what is in each).
#
#   deploy/build-packages.sh [BUILD_DIR]      default build/packages
#
# A Release build tree of its own (no tests, prefix /usr) with Debian's hardening flags
# (dpkg-buildflags: stack protector, _FORTIFY_SOURCE, relro; gcc makes PIE by default), then
# `cpack -G DEB`. The .deb files land in BUILD_DIR/packages/ and their paths are printed, one
# per line, at the end. JOBS sets the parallel build jobs (default 2).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build/packages}
mkdir -p "$build"
build=$(cd "$build" && pwd)
cd "$src"  # dpkg-buildflags maps the current directory away (-ffile-prefix-map)

# Optimisation and debug info come from the Release build type (-O3, no -g: the archives of
# libedgestream-dev stay small; the binaries are stripped anyway).
export DEB_CFLAGS_MAINT_STRIP="-g -O2"
cflags="$(dpkg-buildflags --get CPPFLAGS) $(dpkg-buildflags --get CFLAGS)"
ldflags=$(dpkg-buildflags --get LDFLAGS)

cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DST_BUILD_TESTS=OFF \
	-DCMAKE_INSTALL_PREFIX=/usr -DCMAKE_C_FLAGS="$cflags" \
	-DCMAKE_EXE_LINKER_FLAGS="$ldflags" >/dev/null
cmake --build "$build" -j"${JOBS:-2}"
rm -rf "$build/packages"
(cd "$build" && cpack -G DEB >/dev/null)
ls "$build"/packages/*.deb
