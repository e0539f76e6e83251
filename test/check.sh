#!/usr/bin/env bash
# The one test command (README "Testing", .ci/run): installs what is missing, builds with gcc +
# ASan + UBSan + -Werror, runs every ctest label, checks formatting and banned functions, runs the
# workq/integration tests under TSan, and gives every fuzz target a time-boxed libFuzzer run.
#
# Environment:
#   FUZZ_SECONDS   seconds per fuzz target (default 60 with CI=true, else 15; 0 skips fuzzing)
#   NEW_CORPUS     where the fuzz inputs found by this run that add coverage to the checked-in
#                  corpus are kept, one directory per target (default $BUILD_ROOT/fuzz/new-corpus;
#                  CI keeps it as an artifact)
#   BUILD_ROOT     where the build trees go (default ./build)
#   SKIP_INSTALL=1 do not call deploy/install-deps.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD_ROOT=${BUILD_ROOT:-$ROOT/build}
NEW_CORPUS=${NEW_CORPUS:-$BUILD_ROOT/fuzz/new-corpus}
JOBS=${JOBS:-$(nproc)}
if [ "${CI:-}" = true ]; then FUZZ_SECONDS=${FUZZ_SECONDS:-60}; else FUZZ_SECONDS=${FUZZ_SECONDS:-15}; fi

failures=()
step() { printf '\n==== %s ====\n' "$*"; }
fail() { failures+=("$1"); printf 'FAILED: %s\n' "$1"; }

[ "${SKIP_INSTALL:-0}" = 1 ] || "$ROOT/deploy/install-deps.sh"

step "static checks"
# Banned functions (STYLE B4.7); word-boundary match on calls, corpus files excluded.
if git ls-files '*.c' '*.h' | grep -v '^test/fuzz/corpus/' |
	xargs grep -nE '\b(sprintf|strcpy|strcat|strtok|atoi|atol|gets|alloca|system)[[:space:]]*\(' ; then
	fail "banned functions"
else
	echo "banned functions: none"
fi
# Pure code stays pure (STYLE B6.1): no lws, curl, sockets, unistd, threads, clocks, getenv or
# logging in the protocol code, the parsers and the option tables. Comments and string literals
# are ignored; each hit is reported as file:line.
pure_files() {
	git ls-files 'stream/src/*.[ch]' cri/src/{grpc,pb,logs,messages}.c certs/src/{identity,csr_read}.c \
		cloudstream/src/{route,config,exchange,relay,budget,registry,podcache,authz,authz_cache,denylist,hsgate,join,door_parse,events,dnat_rules,peerdir,recent,kwatch,h2answer}.c \
		edgestream/src/{es_route,answer,backoff,es_config,cri_plan,kubelet_url,h2msg}.c \
		'cloudstream/src/config_opts_*.h'
}
impure() {
	perl -w - "$@" <<'PERL'
my $inc = qr{^\s*#\s*include\s*[<"](libwebsockets\.h|curl/[^>"]*|sys/socket\.h|unistd\.h|pthread\.h|stream/(?:log|loop|workq|sandbox|admin)\.h|cri/client\.h)[>"]};
my $call = qr{(?:^|[^\w.>])(time|clock|clock_gettime|gettimeofday|getenv|secure_getenv|v?fprintf|v?printf|perror|syslog|read|write|st_log|st_(?:err|warn|info|dbg)(?:_ns)?)\s*\(|\b(ST_LOG_[A-Z_]+|stderr|stdout)\b};
for my $f (@ARGV) {
	open(my $fh, '<', $f) or die "$f: $!\n";
	local $/; my $src = <$fh>; close $fh;
	# comments out (newlines kept); then, per line, string and character literals emptied
	$src =~ s{("(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')|/\*.*?\*/|//[^\n]*}{defined $1 ? $1 : ($& =~ tr/\n//cdr)}gse;
	my $n = 0;
	for my $line (split /\n/, $src, -1) {
		$n++;
		my $code = $line;
		$code =~ s{"(?:\\.|[^"\\])*"}{""}g unless $line =~ /^\s*#\s*include/;
		$code =~ s{'(?:\\.|[^'\\])*'}{' '}g;
		print "$f:$n: $line\n" if $line =~ $inc || $code =~ $call;
	}
}
PERL
}
pure_hits=$(impure $(pure_files))
if [ -n "$pure_hits" ]; then
	echo "$pure_hits"; fail "pure code (STYLE B6.1: move I/O, clocks and logging to the glue)"
else
	echo "pure code: $(pure_files | wc -l) files clean"
fi
if git ls-files '*.c' '*.h' | xargs clang-format-14 --dry-run -Werror 2>/tmp/format.$$; then
	echo "clang-format: clean"
else
	head -40 /tmp/format.$$; fail "clang-format (run: clang-format-14 -i <file>)"
fi
rm -f /tmp/format.$$

step "gcc + ASan + UBSan + -Werror: build"
rm -f "$BUILD_ROOT/asan/ctest.log"
cmake -S "$ROOT" -B "$BUILD_ROOT/asan" -DCMAKE_C_COMPILER=gcc -DCMAKE_BUILD_TYPE=Debug \
	-DST_ASAN=ON -DST_UBSAN=ON -DST_WERROR=ON >/dev/null
if cmake --build "$BUILD_ROOT/asan" -j"$JOBS"; then
	step "gcc + ASan + UBSan: ctest (unit, integration, e2e, fuzz corpus replay)"
	export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
	export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
	ctest --test-dir "$BUILD_ROOT/asan" --output-on-failure -j"$JOBS" 2>&1 |
		tee "$BUILD_ROOT/asan/ctest.log" || fail "ctest (asan)"
	unset ASAN_OPTIONS UBSAN_OPTIONS
else
	fail "build (gcc asan)"
fi

step "TSan: worker pool and integration"
cmake -S "$ROOT" -B "$BUILD_ROOT/tsan" -DCMAKE_C_COMPILER=gcc -DCMAKE_BUILD_TYPE=Debug \
	-DST_TSAN=ON -DST_WERROR=ON >/dev/null
if cmake --build "$BUILD_ROOT/tsan" -j"$JOBS"; then
	# TSan and seccomp tests do not mix (the sanitizer runtime needs syscalls a daemon never makes).
	TSAN_OPTIONS=halt_on_error=1 ctest --test-dir "$BUILD_ROOT/tsan" --output-on-failure \
		-R 'workq|loop|integration' || fail "ctest (tsan)"
else
	fail "build (tsan)"
fi

if [ "$FUZZ_SECONDS" -gt 0 ] && command -v clang >/dev/null; then
	step "clang + libFuzzer: ${FUZZ_SECONDS}s per target"
	cmake -S "$ROOT" -B "$BUILD_ROOT/fuzz" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
		-DST_FUZZ=ON -DST_ASAN=ON -DST_UBSAN=ON -DST_WERROR=ON -DST_BUILD_TESTS=ON >/dev/null
	if cmake --build "$BUILD_ROOT/fuzz" -j"$JOBS" --target all; then
		work="$BUILD_ROOT/fuzz/work"
		rm -rf "$work" "$NEW_CORPUS"; mkdir -p "$work" "$NEW_CORPUS"
		export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
		# Two fuzzers at a time on 2 cores; each writes its new inputs to a scratch corpus so the
		# checked-in corpus only changes by hand (test/fuzz/corpus-add.sh).
		# keep_new: the scratch corpus is merged (-set_cover_merge=1) over a copy of the checked-in
		# one, and the small set of inputs that adds coverage to it goes to $NEW_CORPUS/<target>/
		# (named by sha1, as libFuzzer names them; corpus-add.sh renames them by sha256).
		keep_new() {
			local bin=$1 t=$2 tree="$ROOT/test/fuzz/corpus/$2" merged="$work/$2.merged" f
			rm -rf "$merged"; mkdir -p "$merged" "$NEW_CORPUS/$t"
			cp "$tree"/* "$merged"/
			if (cd "$work" && "$bin" -set_cover_merge=1 -timeout=10 -rss_limit_mb=2048 \
				"$merged" "$work/$t" >"$work/$t.merge.log" 2>&1); then
				for f in "$merged"/*; do
					[ -e "$tree/${f##*/}" ] || mv "$f" "$NEW_CORPUS/$t/"
				done
			else # keep everything rather than nothing
				find "$work/$t" -type f -exec cp {} "$NEW_CORPUS/$t/" \;
			fi
			rm -rf "$merged"
		}
		run_one() {
			local bin=$1 t
			t=$(basename "$bin"); t=${t#fuzz_}
			mkdir -p "$work/$t"
			local dict=()
			[ -f "$ROOT/test/fuzz/dict/$t.dict" ] && dict=(-dict="$ROOT/test/fuzz/dict/$t.dict")
			if (cd "$work" && "$bin" -max_total_time="$FUZZ_SECONDS" -max_len=65536 -timeout=10 \
				-rss_limit_mb=2048 -print_final_stats=1 "${dict[@]}" "$work/$t" \
				"$ROOT/test/fuzz/corpus/$t" >"$work/$t.log" 2>&1); then
				keep_new "$bin" "$t"
				echo "fuzz $t: ok ($(grep -m1 'stat::number_of_executed_units' "$work/$t.log" | awk '{print $2}') execs, $(find "$NEW_CORPUS/$t" -type f | wc -l) new inputs)"
			else
				echo "fuzz $t: FAILED"; tail -40 "$work/$t.log"; return 1
			fi
		}
		fuzz_failed=0
		bins=("$BUILD_ROOT"/fuzz/test/fuzz/fuzz_*)
		for ((i = 0; i < ${#bins[@]}; i += 2)); do
			pids=()
			for b in "${bins[@]:i:2}"; do run_one "$b" & pids+=($!); done
			for p in "${pids[@]}"; do wait "$p" || fuzz_failed=1; done
		done
		[ "$fuzz_failed" = 0 ] || fail "fuzzing (crash inputs in $work)"
		unset ASAN_OPTIONS
	else
		fail "build (clang fuzz)"
	fi
else
	echo "fuzzing skipped (FUZZ_SECONDS=$FUZZ_SECONDS or no clang)"
fi

step "summary"
# The fuzz inputs this run found that add coverage; the checked-in corpus is never changed here.
if [ -d "$NEW_CORPUS" ] && [ -n "$(find "$NEW_CORPUS" -type f -print -quit)" ]; then
	echo "new fuzz inputs, not in the tree (CI artifact):"
	for d in "$NEW_CORPUS"/*/; do
		n=$(find "$d" -type f | wc -l)
		[ "$n" = 0 ] || echo "  ${d%/} ($n)"
	done
	echo "  keep them: test/fuzz/corpus-add.sh <target> $NEW_CORPUS/<target>/*"
fi
if [ ${#failures[@]} -gt 0 ]; then
	for f in "${failures[@]}"; do echo "FAILED: $f"; done
else
	echo "all checks passed"
fi
# One plain closing line with the test counts of the main (ASan) run.
if [ -f "$BUILD_ROOT/asan/ctest.log" ]; then
	total=$(sed -n 's/.*tests failed out of \([0-9]*\).*/\1/p' "$BUILD_ROOT/asan/ctest.log" | tail -1)
	nfail=$(sed -n 's/.*tests passed, \([0-9]*\) tests failed.*/\1/p' "$BUILD_ROOT/asan/ctest.log" | tail -1)
	if [ -n "$total" ] && [ -n "$nfail" ]; then
		echo "ctest: $((total - nfail)) passed, $nfail failed"
	fi
fi
[ ${#failures[@]} -eq 0 ]
