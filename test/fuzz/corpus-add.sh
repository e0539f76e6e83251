#!/usr/bin/env bash
# Adds files to a fuzz target's corpus under their sha256 name (so duplicates collapse):
#   test/fuzz/corpus-add.sh <target> FILE...
# Also used to keep what a fuzzing run found: corpus-add.sh frame work/frame/*
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 <target> FILE..." >&2; exit 2; }
target=$1; shift
dir=$(dirname "$0")/corpus/$target
mkdir -p "$dir"
added=0
for f in "$@"; do
  [ -f "$f" ] || continue
  sum=$(sha256sum "$f" | cut -d' ' -f1)
  if [ ! -e "$dir/$sum" ]; then cp "$f" "$dir/$sum"; added=$((added + 1)); fi
done
echo "corpus-add: $added new file(s) in $dir"
