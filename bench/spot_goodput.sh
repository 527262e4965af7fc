#!/bin/bash
# Goodput under spot preemptions (the targets in docs/spot.md), measured as a ratio in one run: for
# each seed, an uninterrupted run of the experiment and then the same run under cumulus-spot's
# seeded preemption trace, back to back, so that both see the same background load. Each spot run's
# goodput is its step count over its wall time, against the uninterrupted run just before it.
#
#   bench/spot_goodput.sh [--seeds "0 1 2"] [--steps 600] [--mean-interval 60] [--notice 10]
#                         [--relaunch-delay 1] [--checkpoint-seconds 60] [--nproc 2]
#                         [--config configs/fashion_mnist_convnet.yaml] [--set KEY=VALUE]...
#                         [--bin-dir build/bin] [--out FILE] [--logs DIR]
#
# Per seed it prints the uninterrupted wall time, the spot run's wall time, notices, steps lost,
# the goodput ratio, notice -> exit (mean, max), restart -> first step (mean, max) and the async
# checkpoint stall share, then the mean goodput over the seeds. On a shared machine two runs of
# the same job differ by up to +-10%, more than a preemption costs, so it also prints the
# downtime each preemption cost (notice -> exit + relaunch delay + restart -> first step + the
# steps lost) and the goodput that implies at one preemption per --mean-interval; odd seeds run
# the spot run first, so a drift of the machine's speed does not always favour one side; every spot report (cumulus-spot's
# JSON line plus the baseline) goes to --out as JSON lines. Each run gets a fresh run directory
# (so nothing resumes from the one before); the decompressed-data cache starts empty in each.
# --logs DIR keeps each run's console output there (base-SEED.log, spot-SEED.log).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
python=${CUMULUS_PYTHON:-$root/.venv/bin/python}  # the project environment, with torch
seeds="0 1 2"; steps=600; interval=60; notice=10; relaunch=1; ckpt_s=60; nproc=2
config="$root/configs/fashion_mnist_convnet.yaml"; bin_dir="$root/build/bin"
out="$here/results/spot.jsonl"; sets=(); cmd=(); logs=""
while [ $# -gt 0 ]; do
  case "$1" in
    --seeds) seeds="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --mean-interval) interval="$2"; shift 2 ;;
    --notice) notice="$2"; shift 2 ;;
    --relaunch-delay) relaunch="$2"; shift 2 ;;
    --checkpoint-seconds) ckpt_s="$2"; shift 2 ;;
    --nproc) nproc="$2"; shift 2 ;;
    --config) config="$2"; shift 2 ;;
    --set) sets+=(--set "$2"); shift 2 ;;
    --bin-dir) bin_dir="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --logs) logs="$2"; shift 2 ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "spot_goodput.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
for b in cumulus-run cumulus-train cumulus-spot; do
  [ -x "$bin_dir/$b" ] || { echo "spot_goodput.sh: $bin_dir/$b is missing; run make first" >&2; exit 2; }
done
work="$(mktemp -d /tmp/cumulus-spot-goodput.XXXXXX)"
trap 'rm -rf "$work"' EXIT
if [ -n "$logs" ]; then mkdir -p "$logs"; fi
mkdir -p "$(dirname "$out")"
global_batch=$(awk '/global_batch_size:/ {print $2; exit}' "$config")

job() {  # job RUN_DIR: sets cmd to the training command, as cumulus-spot and the baseline run it
  cmd=("$bin_dir/cumulus-run" --standalone "--nproc-per-node=$nproc" -- "$bin_dir/cumulus-train"
       "$config" --set "trainer.max_steps=$steps" --set "checkpoint.every_seconds=$ckpt_s"
       --set "trainer.run_dir=$1" "${sets[@]}")
}

printf '%-5s %10s %9s %8s %6s %9s %14s %16s %7s\n' seed base_s spot_s notices lost goodput \
  "notice->exit" "restart->step1" stall
sum=0; n=0
baseline() {  # baseline SEED: the uninterrupted run; sets base (seconds)
  local t0 t1
  t0=$(date +%s.%N)
  job "$work/base-$1"
  "${cmd[@]}" > "$work/base-$1.log" 2>&1 ||
    { echo "spot_goodput.sh: the uninterrupted run failed; see below" >&2; tail -20 "$work/base-$1.log" >&2; exit 1; }
  t1=$(date +%s.%N)
  base=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
}
spot() {  # spot SEED: the run under the trace (its goodput is filled in once base is known)
  job "$work/spot-$1"
  "$bin_dir/cumulus-spot" --quiet --seed "$1" --mean-interval "$interval" --notice "$notice" \
    --relaunch-delay "$relaunch" --global-batch "$global_batch" --baseline-seconds "${base:-0}" \
    --metrics "$work/spot-$1/metrics.jsonl" -- "${cmd[@]}" > "$work/spot-$1.log" 2>&1 ||
    { echo "spot_goodput.sh: the spot run failed; see below" >&2; tail -20 "$work/spot-$1.log" >&2; exit 1; }
}
for seed in $seeds; do
  base=""
  if (( seed % 2 )); then spot "$seed"; baseline "$seed"; else baseline "$seed"; spot "$seed"; fi
  json=$(grep '^{"completed"' "$work/spot-$seed.log" | tail -1)
  # The ratio against this seed's baseline (a spot run that went first saw no baseline yet).
  json=$("$python" -c 'import json,sys; r=json.loads(sys.argv[1]); r["goodput_ratio"]=float(sys.argv[2])/r["wall_s"] if r["completed"] else 0; print(json.dumps(r))' "$json" "$base")
  echo "{\"seed\":$seed,\"steps\":$steps,\"baseline_s\":$base,\"spot\":$json}" >> "$out"
  "$python" - "$seed" "$base" "$json" "$relaunch" "$steps" "$interval" <<'EOF'
import json, sys
seed, base, r = sys.argv[1], float(sys.argv[2]), json.loads(sys.argv[3])
relaunch, steps, interval = float(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
down = ""
if r["preemptions"] > 0:
    step_s = base / steps
    cost = (r["notice_to_exit_mean_s"] + relaunch + r["restart_to_first_step_mean_s"]
            + r["steps_lost"] / r["preemptions"] * step_s)
    down = "   downtime %.2f s per preemption -> %.1f%% at one per %.0f s" % (
        cost, 100 * (1 - cost / interval - r["stall_share"]), interval)
print("%-5s %10.2f %9.2f %8d %6d %8.1f%% %6.2f / %5.2f s %7.2f / %5.2f s %6.3f%%%s" % (
    seed, base, r["wall_s"], r["preemptions"], r["steps_lost"], 100 * r["goodput_ratio"],
    r["notice_to_exit_mean_s"], r["notice_to_exit_max_s"], r["restart_to_first_step_mean_s"],
    r["restart_to_first_step_max_s"], 100 * r["stall_share"], down))
if not r["completed"]:
    print("  (this run did not complete)")
EOF
  g=$("$python" -c 'import json,sys; print(json.loads(sys.argv[1])["goodput_ratio"])' "$json")
  if [ -n "$logs" ]; then cp "$work/base-$seed.log" "$work/spot-$seed.log" "$logs/"; fi
  sum=$(awk -v a="$sum" -v b="$g" 'BEGIN { print a + b }'); n=$((n + 1))
done
printf 'mean goodput over %d seed(s): %.1f%%  (%s; load average now: %s)\n' "$n" \
  "$(awk -v s="$sum" -v n="$n" 'BEGIN { print 100 * s / n }')" "$(date -u +%FT%TZ)" "$(cut -d' ' -f1-3 /proc/loadavg)"
