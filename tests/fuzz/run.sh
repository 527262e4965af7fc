#!/usr/bin/env bash
# Runs the fuzz targets built in BUILD_DIR (default build-fuzz; `make fuzz` builds it), all of them
# or the TARGETs named, each over a scratch copy of its seed corpus in tests/fuzz/corpus/<name>/.
#   run.sh [BUILD_DIR [TARGET...]]
# Two modes:
#  - Bounded (the default; `make fuzz`, CI): every committed input, then exactly RUNS inputs in all
#    (the target's RUNS in tests/fuzz/CMakeLists.txt) mutated from the fixed seed FUZZ_SEED
#    (default 1), with address randomization off and an empty environment. A count, not a time:
#    the same tree explores the same inputs on a fast or a slow machine, so CI's answer depends on
#    the tree alone. A target with RUNS 0 (coverage that depends on thread timing) runs its
#    corpus only.
#  - Long (FUZZ_SECONDS set; `make fuzz-long`): each target explores for FUZZ_SECONDS from a random
#    seed (printed), in FUZZ_FORK processes (default 1; libFuzzer's -fork), going on past crashes.
# libFuzzer adds what it finds to a scratch directory only, so a run never grows the committed
# corpus. Prints one line per target and exits non-zero if any target crashed, leaked, hung (> 5 s
# on one input) or broke an invariant; the input that did it is kept in
# BUILD_DIR/fuzz-artifacts/<target>/ and the log in BUILD_DIR/fuzz-logs/<target>.log. The bounded
# mode also writes the lines without timings to BUILD_DIR/fuzz-summary.txt: two runs of one tree
# give the same file.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${1:-build-fuzz}
shift || true
FUZZ_SECONDS=${FUZZ_SECONDS:-}
FUZZ_SEED=${FUZZ_SEED:-1}
FUZZ_FORK=${FUZZ_FORK:-1}
targets="$BUILD_DIR/fuzz_targets.txt"
[[ -f $targets ]] || { echo "fuzz: $targets missing; build with 'make fuzz'" >&2; exit 2; }
BUILD_DIR=$(cd "$BUILD_DIR" && pwd)
corpora=$(pwd)/tests/fuzz/corpus
[[ -z $FUZZ_SECONDS || $FUZZ_SECONDS =~ ^[1-9][0-9]*$ ]] ||
  { echo "fuzz: FUZZ_SECONDS=$FUZZ_SECONDS is not a number of seconds" >&2; exit 2; }
[[ $FUZZ_SEED =~ ^[1-9][0-9]*$ && $FUZZ_FORK =~ ^[1-9][0-9]*$ ]] ||
  { echo "fuzz: FUZZ_SEED and FUZZ_FORK must be positive integers" >&2; exit 2; }

scratch=$(mktemp -d -t cumulus-fuzz.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$BUILD_DIR/fuzz-logs"
summary="$BUILD_DIR/fuzz-summary.txt"
if [[ -z $FUZZ_SECONDS ]]; then
  echo "bounded: seed $FUZZ_SEED, each target's RUNS (set FUZZ_SECONDS to explore longer)"
  : >"$summary"
  # What a target covers depends on addresses too (pointer comparisons, pointer-ordered sets, the
  # operands libFuzzer's comparison-guided mutations reuse), and so does all that libFuzzer does
  # next. Measured: three runs of the manifest target over the same 700000 inputs ended with
  # 2298, 2378 and 2423 features. So a bounded run has address randomization off and an empty
  # environment, and names its binary, seeds and output with the same relative paths each time:
  # the stack, heap and libraries then sit at the same addresses, and one binary explores the
  # same inputs on every run. (The binary holds the checkout's path, in ASan's metadata: the same
  # tree cloned at a path of another length may explore differently, but again the same each time.)
  pinned=(env -i PATH=/usr/bin:/bin)
  if setarch "$(uname -m)" -R true 2>/dev/null; then
    pinned=(setarch "$(uname -m)" -R "${pinned[@]}")
  else
    echo "fuzz: cannot turn address randomization off here (setarch -R fails): two runs of the" \
         "same tree may explore differently" >&2
  fi
else
  echo "long: ${FUZZ_SECONDS} s per target, ${FUZZ_FORK} process(es) each, random seeds"
  pinned=()
fi
printf '%-18s %9s %6s %7s %7s %-10s %6s %s\n' target runs cov ft corpus seed seconds result
# The number after "<name>: " on the last status line of the log in $last.
field() { grep -oE "$1: [0-9]+" <<<"$last" | tail -n 1 | awk '{print $2}'; }
# run_target <name> <runs>: runs one target; leaves its table line in $scratch/<name>.line, its
# summary line in $scratch/<name>.summary, and $scratch/<name>.failed if it failed.
run_target() {
  local name=$1 runs=$2 work log result started seconds last done_runs seed cov ft corp line
  local mode
  # The run's folder, where libFuzzer writes (new/, art/) and where the target runs, so that
  # nothing a target writes lands in the tree; the seeds are only read.
  work="$scratch/$name"
  mkdir -p "$work/new" "$work/art" "$BUILD_DIR/fuzz-artifacts/$name"
  ln -s "$BUILD_DIR/bin/${name}_fuzz" "$work/fuzzer"
  ln -s "$corpora/$name" "$work/seeds"
  log="$BUILD_DIR/fuzz-logs/$name.log"
  if [[ -z $FUZZ_SECONDS ]]; then
    # Nothing that runs on a clock: no re-reading the corpus, no RSS thread, no allocator purges.
    # libFuzzer's thread that watches the process's memory takes heap chunks at moments that depend
    # on the machine's load, and so do its purges of the allocator's caches (every second once
    # that thread is off); either moves the addresses that the target compares and libFuzzer's
    # mutations reuse. Measured under two busy loops: 4 of 10 runs of the idx target explored
    # other inputs with the thread on; 4 runs of 4 differed from the idle run with it off but
    # purges on; with both off, 4 loaded runs and an idle one gave the same corpus. Each
    # allocation is still capped (the malloc limit), and ASan reports leaks.
    mode=(-seed="$FUZZ_SEED" -runs="$runs" -reload=0 -rss_limit_mb=0 -malloc_limit_mb=2048
          -purge_allocator_interval=-1)
  else
    mode=(-max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048)
    ((FUZZ_FORK == 1)) ||
      mode+=(-fork="$FUZZ_FORK" -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
  fi
  result=ok
  started=$SECONDS
  if ! (cd "$work" && "${pinned[@]}" ./fuzzer "${mode[@]}" -timeout=5 \
        -print_final_stats=1 -artifact_prefix=art/ new seeds) >"$log" 2>&1; then
    result="FAILED (log: $log)"
  fi
  # Fork mode goes on past a crash and exits 0: the artifacts it left say what it found.
  if [[ -n $(ls -A "$work/art") ]]; then
    mv "$work"/art/* "$BUILD_DIR/fuzz-artifacts/$name/"
    result="FAILED (inputs in $BUILD_DIR/fuzz-artifacts/$name/, log: $log)"
  fi
  [[ $result == ok ]] || : >"$scratch/$name.failed"
  seconds=$((SECONDS - started))
  last=$(grep -E '(DONE|cov:).*corp:' "$log" | tail -n 1 || true)
  done_runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  [[ -n $done_runs ]] || done_runs=$(sed -nE 's/^#([0-9]+).*/\1/p' <<<"$last")  # fork mode
  seed=$(sed -n 's/^INFO: Seed: *//p' "$log" | head -n 1)
  cov=$(field cov) ft=$(field ft) corp=$(field corp)
  # A corpus-only target's coverage varies with thread timing: not part of the summary.
  [[ -n $FUZZ_SECONDS || $runs != 0 ]] || cov=- ft=- corp=-
  line=$(printf '%-18s %9s %6s %7s %7s %-10s' "$name" "${done_runs:--}" "$cov" "$ft" "$corp" \
    "${seed:--}")
  printf '%s %6s %s\n' "$line" "$seconds" "$result" >"$scratch/$name.line"
  [[ -n $FUZZ_SECONDS ]] || printf '%s %s\n' "$line" "${result%% (*}" >"$scratch/$name.summary"
}

# FUZZ_JOBS targets at a time (default: one per core, or per FUZZ_FORK cores in the long mode).
# Each runs alone in its process with its own seed and inputs, so how many run beside it changes
# nothing in what it explores; the table and the summary keep the targets' order.
FUZZ_JOBS=${FUZZ_JOBS:-$(( $(nproc) / FUZZ_FORK > 0 ? $(nproc) / FUZZ_FORK : 1 ))}
[[ $FUZZ_JOBS =~ ^[1-9][0-9]*$ ]] ||
  { echo "fuzz: FUZZ_JOBS must be a positive integer" >&2; exit 2; }
names=()
while read -r name runs; do
  [[ -n $name ]] || continue
  (($# == 0)) || [[ " $* " == *" $name "* ]] || continue
  names+=("$name")
  while (($(jobs -rp | wc -l) >= FUZZ_JOBS)); do wait -n || true; done
  run_target "$name" "$runs" &
done <"$targets"
wait || true
failed=()
for name in "${names[@]}"; do
  if [[ -f $scratch/$name.line ]]; then
    cat "$scratch/$name.line"
  else
    printf '%-18s the runner itself failed (log: %s)\n' "$name" "$BUILD_DIR/fuzz-logs/$name.log"
    : >"$scratch/$name.failed"
  fi
  [[ ! -f $scratch/$name.summary ]] || cat "$scratch/$name.summary" >>"$summary"
  [[ ! -f $scratch/$name.failed ]] || failed+=("$name")
done

if ((${#failed[@]})); then
  for name in "${failed[@]}"; do
    echo "---- $name: the end of $BUILD_DIR/fuzz-logs/$name.log"
    tail -n 40 "$BUILD_DIR/fuzz-logs/$name.log"
  done
  cat >&2 <<EOF
fuzz: ${#failed[@]} target(s) failed: ${failed[*]}
Replay an input with $BUILD_DIR/bin/<target>_fuzz <file>. Once it is understood, copy it into
tests/fuzz/corpus/<target>/regress_<what> (every run replays the corpus), fix the bug, and add a
test to the ordinary suite that fails without the fix (docs/testing.md "Fuzzing").
EOF
  exit 1
fi
