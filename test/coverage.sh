#!/usr/bin/env bash
# Line coverage (README "Testing"): builds with gcc --coverage -O0 (ST_COVERAGE) in
# $BUILD_ROOT/coverage, runs the unit tests and the fuzz corpus replays from fresh counters, and
# prints line coverage per source directory (plain gcov, which comes with gcc).
#
#   test/coverage.sh                 unit + fuzz replay
#   test/coverage.sh --integration   also the integration and e2e labels (root for the CRI and
#                                    e2e parts; they skip or fail without it as in check.sh)
#
# Environment: BUILD_ROOT (default ./build), JOBS (default 2).
# Per-file figures go to $BUILD_ROOT/coverage/coverage-files.txt; `gcov -o <obj dir> <file>` in
# the build tree then shows a file line by line.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD_ROOT=${BUILD_ROOT:-$ROOT/build}
JOBS=${JOBS:-2}
labels='unit|fuzz'
case "${1:-}" in
--integration) labels='unit|fuzz|integration|e2e' ;;
"") ;;
*) echo "usage: $0 [--integration]" >&2; exit 2 ;;
esac
build=$BUILD_ROOT/coverage

cmake -S "$ROOT" -B "$build" -DCMAKE_C_COMPILER=gcc -DCMAKE_BUILD_TYPE=Debug -DST_COVERAGE=ON \
	-DST_WERROR=ON >/dev/null
cmake --build "$build" -j"$JOBS"
find "$build" -name '*.gcda' -delete # counts from this run only
rc=0
ctest --test-dir "$build" -L "$labels" -j"$JOBS" --output-on-failure || rc=$?

# Every object's notes file (.gcno), with or without counts (.gcda): code no test ran counts as
# not covered. A line is covered when any object compiled from it ran it.
/usr/bin/python3 - "$build" "$ROOT" "$labels" <<'PY'
import collections, json, os, subprocess, sys

build, root, labels = sys.argv[1:4]
notes = sorted(os.path.join(d, n) for d, _, names in os.walk(build) for n in names
               if n.endswith(".gcno"))
cover = collections.defaultdict(dict)  # source -> {line: covered}
for i in range(0, len(notes), 64):
    out = subprocess.run(["gcov", "--stdout", "--json-format"] + notes[i:i + 64], cwd=build,
                         capture_output=True, text=True, check=True).stdout
    for doc in out.splitlines():
        if not doc.startswith("{"):
            continue
        for f in json.loads(doc)["files"]:
            path = os.path.normpath(os.path.join(build, f["file"]))
            rel = os.path.relpath(path, root)
            if rel.startswith(("..", "build/", "test/")):
                continue  # system headers, generated files, the tests themselves
            seen = cover[rel]
            for ln in f["lines"]:
                seen[ln["line_number"]] = seen.get(ln["line_number"], False) or ln["count"] > 0

dirs = collections.defaultdict(lambda: [0, 0])
with open(os.path.join(build, "coverage-files.txt"), "w") as out:
    for rel in sorted(cover):
        lines = cover[rel]
        hit = sum(lines.values())
        d = os.path.dirname(rel)
        dirs[d][0] += hit
        dirs[d][1] += len(lines)
        out.write("%6.1f%% %6d/%-6d %s\n" % (100.0 * hit / max(len(lines), 1), hit, len(lines), rel))

print("\nline coverage, ctest -L '%s' (per file: %s)" % (
    labels, os.path.relpath(os.path.join(build, "coverage-files.txt"), root)))
print("%-24s %8s %15s" % ("directory", "lines", "covered"))
tot = [0, 0]
for d in sorted(dirs):
    hit, n = dirs[d]
    tot[0] += hit
    tot[1] += n
    print("%-24s %8d %8d %5.1f%%" % (d, n, hit, 100.0 * hit / max(n, 1)))
print("%-24s %8d %8d %5.1f%%" % ("total", tot[1], tot[0], 100.0 * tot[0] / max(tot[1], 1)))
PY
exit "$rc"
