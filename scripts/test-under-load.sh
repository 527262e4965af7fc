#!/usr/bin/env bash
# `make test-under-load`: the whole suite (`make test`'s ctest run) with busy loops beside it, as
# on a user's or CI's machine that is never idle. HOGS processes (2) spin on the CPU at normal
# priority for as long as the tests run, RUNS times in a row (1); the first failing run stops it.
# The hogs go away however the script ends.
#
#   make test-under-load                 # build, then one run beside two busy loops
#   make test-under-load RUNS=3          # three runs in a row
#   HOGS=2 RUNS=1 scripts/test-under-load.sh -R trainer_test   # ctest arguments pass through
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
hogs=${HOGS:-2}
runs=${RUNS:-1}
jobs=${JOBS:-$(nproc)}

pids=()
stop_hogs() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap stop_hogs EXIT
for _ in $(seq "$hogs"); do
  # A shell loop with no system calls: it takes a whole CPU until killed.
  bash -c 'while :; do :; done' &
  pids+=("$!")
done
echo "test-under-load: ${#pids[@]} busy loop(s) running (pids ${pids[*]})"

for run in $(seq "$runs"); do
  echo "test-under-load: run $run of $runs"
  start=$(date +%s)
  (cd "$build" && ctest --output-on-failure -j "$jobs" --timeout 600 "$@")
  echo "test-under-load: run $run of $runs passed in $(($(date +%s) - start)) s"
done
