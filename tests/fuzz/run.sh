#!/usr/bin/env bash
# Runs every fuzz target built in BUILD_DIR (default build-fuzz; `make fuzz` builds it) for
# FUZZ_SECONDS (default 20) each, over a scratch copy of its seed corpus in tests/fuzz/corpus/:
# libFuzzer adds what it finds to the scratch directory only, so a run never grows the committed
# corpus. Prints one line per target (execs/s, corpus size, result) and exits non-zero if any
# target crashed, leaked, hung (> 5 s on one input) or broke an invariant; the input that did it is
# kept in BUILD_DIR/fuzz-artifacts/<target>/ and the log in BUILD_DIR/fuzz-logs/<target>.log.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${1:-build-fuzz}
FUZZ_SECONDS=${FUZZ_SECONDS:-20}
targets="$BUILD_DIR/fuzz_targets.txt"
[[ -f $targets ]] || { echo "fuzz: $targets missing; build with 'make fuzz'" >&2; exit 2; }
BUILD_DIR=$(cd "$BUILD_DIR" && pwd)
corpora=$(pwd)/tests/fuzz/corpus

scratch=$(mktemp -d -t cumulus-fuzz.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$BUILD_DIR/fuzz-logs"
failed=()
printf '%-18s %10s %8s %s\n' target execs/s corpus result
while read -r name; do
  [[ -n $name ]] || continue
  mkdir -p "$scratch/$name" "$BUILD_DIR/fuzz-artifacts/$name"
  log="$BUILD_DIR/fuzz-logs/$name.log"
  result=ok
  # The scratch directory first: it is where libFuzzer writes; the seeds are only read.
  # Run from the scratch directory: nothing a target writes lands in the tree.
  if ! (cd "$scratch" && "$BUILD_DIR/bin/${name}_fuzz" -max_total_time="$FUZZ_SECONDS" \
        -timeout=5 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$BUILD_DIR/fuzz-artifacts/$name/" \
        "$scratch/$name" "$corpora/$name") >"$log" 2>&1; then
    result="FAILED (log: $log)"
    failed+=("$name")
  fi
  execs=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
  corpus=$(grep -o 'corp: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2 || true)
  printf '%-18s %10s %8s %s\n' "$name" "${execs:--}" "${corpus:--}" "$result"
done <"$targets"

if ((${#failed[@]})); then
  for name in "${failed[@]}"; do
    echo "---- $name: the end of $BUILD_DIR/fuzz-logs/$name.log"
    tail -n 40 "$BUILD_DIR/fuzz-logs/$name.log"
  done
  echo "fuzz: ${#failed[@]} target(s) failed: ${failed[*]}" >&2
  exit 1
fi
