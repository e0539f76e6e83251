#!/bin/sh
# The installed library is usable the way edgestream/README.md says: `cmake --install` into a
# temporary prefix, then the embedding example compiles and links with nothing but
# `pkg-config --cflags --libs edgestream`, and runs (without a configuration it must stop with
# the library's own error message).
#   pkgconfig_test.sh BUILD_DIR SOURCE_DIR CC [extra compile/link flags: the sanitizers in use]
set -eu
build=$1 src=$2 cc=$3
shift 3
tmp=$(mktemp -d "${ST_TEST_TMPDIR:-/tmp}/pkgconfig.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
flags=$(pkg-config --cflags --libs edgestream)
# shellcheck disable=SC2086 # word splitting of the flags is the point
"$cc" "$@" -o "$tmp/embed" "$src/edgestream/examples/embed.c" $flags
if "$tmp/embed" >"$tmp/out" 2>&1; then
	echo "the example ran without a configuration"; exit 1
fi
grep -q "cloud-url is required" "$tmp/out" || { cat "$tmp/out"; exit 1; }
echo "ok: built with pkg-config ($flags) and ran"
