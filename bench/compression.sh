#!/usr/bin/env bash
# bf16 gradient compression against none on shaped links (docs/mixed_fleets.md, "bf16 gradient
# compression"): the convnet on the namespace cluster (launch/netns-cluster.sh), one host per
# rank, one cumulus-run per host, for each link rate and each comm.compression.
# Per run it reports, from rank 0's metrics.jsonl:
#   step_ms       mean step time over the steps after the first (train records' step_time_ms,
#                 weighted by the steps each record covers)
#   comm_wait_ms  mean time per step blocked in the gradient sync's finish() (comm_wait_ms, the
#                 same weighting): the part of the all-reduce that backward did not hide
#   test_accuracy the summary record's, after the last step
# Runs of one rate go back to back, the order of the modes reversed on odd repetitions so that a
# drift of the machine's speed does not always favour one mode.
#
#   bench/compression.sh [--rates "1gbit 100mbit"] [--modes "none bf16"] [--hosts 4] [--epochs 4]
#       [--max-steps N] [--reps 1] [--config configs/fashion_mnist_convnet.yaml] [--set KEY=VALUE]...
#       [--burst 4kb] [--id K] [--out-dir bench/results] [--tag compression]
#
# --max-steps N > 0 caps each run (a check of the script, not a measurement). trainer.threads is
# cores / hosts unless --set gives it. Writes OUT/TAG.jsonl (one line per run, appended) and
# OUT/TAG.md (the table of this invocation's runs); prints the table.
# Needs root (namespaces), iproute2 and the binaries built (cumulus-run, cumulus-train).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
python=${CUMULUS_PYTHON:-$ROOT/.venv/bin/python}  # the project environment, with torch
BIN=${BIN:-$ROOT/build/bin}
RATES="1gbit 100mbit"; MODES="none bf16"; HOSTS=4; EPOCHS=4; MAX_STEPS=0; REPS=1
CONFIG=$ROOT/configs/fashion_mnist_convnet.yaml; BURST=4kb; ID=${CUMULUS_NETNS_ID:-11}
OUT=$ROOT/bench/results; TAG=compression; SETS=()
while (($#)); do
  case "$1" in
    --rates) RATES=$2; shift 2 ;;
    --modes) MODES=$2; shift 2 ;;
    --hosts) HOSTS=$2; shift 2 ;;
    --epochs) EPOCHS=$2; shift 2 ;;
    --max-steps) MAX_STEPS=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --config) CONFIG=$2; shift 2 ;;
    --set) SETS+=(--set "$2"); shift 2 ;;
    --burst) BURST=$2; shift 2 ;;
    --id) ID=$2; shift 2 ;;
    --out-dir) OUT=$2; shift 2 ;;
    --tag) TAG=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "compression.sh: unknown flag $1 (see --help)" >&2; exit 2 ;;
  esac
done
for b in cumulus-run cumulus-train; do
  [[ -x $BIN/$b ]] || { echo "compression.sh: $BIN/$b missing: cmake --build build --target $b" >&2; exit 2; }
done
[[ -f $CONFIG ]] || { echo "compression.sh: no config $CONFIG" >&2; exit 2; }

NS="$ROOT/launch/netns-cluster.sh --id $ID"
WORK=$(mktemp -d /tmp/cumulus-compression.XXXXXX)
trap '$NS down >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM
mkdir -p "$OUT"
JSONL=$OUT/$TAG.jsonl
: > "$WORK/runs.jsonl"
export CUMULUS_JOB_TOKEN=compression-bench
PORT=29500
THREADS=$(( $(nproc) / HOSTS )); ((THREADS >= 1)) || THREADS=1

# run RATE MODE REP: one job, a cumulus-run per host; appends its JSON line.
run() {
  local rate=$1 mode=$2 rep=$3 tag="$1-$2-$3" pids=() rc=0 i
  local run_dir=$WORK/$tag limit=()
  ((MAX_STEPS > 0)) && limit=(--set "trainer.max_steps=$MAX_STEPS")
  local start=$(date +%s.%N)
  for ((i = 0; i < HOSTS; i++)); do
    $NS run "$i" "$BIN/cumulus-run" --nnodes "$HOSTS" --node-rank "$i" \
      --rdzv-endpoint "$ADDR0:$PORT" --nproc-per-node 1 --max-restarts 0 \
      --log-dir "$WORK/logs-$tag" --run-id "$tag" -- \
      "$BIN/cumulus-train" "$CONFIG" --set "trainer.run_dir=$run_dir" \
      --set "comm.compression=$mode" --set "trainer.epochs=$EPOCHS" \
      --set "checkpoint.every_steps=0" --set "checkpoint.every_seconds=0" \
      --set "trainer.threads=$THREADS" "${limit[@]}" "${SETS[@]}" \
      > "$WORK/$tag-n$i.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
  local wall=$("$python" -c "print($(date +%s.%N) - $start)")
  if ((rc != 0)); then
    echo "compression.sh: $tag failed (exit $rc); logs:" >&2
    tail -n 20 "$WORK/$tag"-n*.log >&2
    exit 1
  fi
  "$python" - "$run_dir/metrics.jsonl" "$rate" "$mode" "$rep" "$HOSTS" "$wall" \
    >> "$WORK/runs.jsonl" <<'PY'
import json, sys
path, rate, mode, rep, hosts, wall = sys.argv[1:]
records = [json.loads(line) for line in open(path)]
train = [r for r in records if r.get("type") == "train"]
summary = next(r for r in records if r.get("type") == "summary")
steps = step_ms = wait_ms = 0.0
prev = None
for r in train:
    if prev is not None:  # the first record is step 1 alone: start-up, left out
        n = r["step"] - prev
        steps += n
        step_ms += r["step_time_ms"] * n
        wait_ms += r["comm_wait_ms"] * n
    prev = r["step"]
print(json.dumps({
    "rate": rate, "compression": mode, "rep": int(rep), "hosts": int(hosts),
    "steps": summary["steps"], "epochs": summary["epochs"],
    "step_ms": step_ms / steps if steps else None,
    "comm_wait_ms": wait_ms / steps if steps else None,
    "test_accuracy": summary.get("test_accuracy"), "test_loss": summary["test_loss"],
    "recorded_compression": summary.get("compression", "none"),
    "wall_seconds": round(float(wall), 1)}))
PY
  tail -n 1 "$WORK/runs.jsonl"
}

for rate in $RATES; do
  $NS down >/dev/null 2>&1 || true
  $NS up "$HOSTS" --rate "$rate" --burst "$BURST"
  ADDR0=$($NS addr 0)
  for ((rep = 0; rep < REPS; rep++)); do
    order=$MODES
    ((rep % 2 == 1)) && order=$(echo "$MODES" | tr ' ' '\n' | tac | tr '\n' ' ')
    for mode in $order; do run "$rate" "$mode" "$rep"; done
  done
  $NS down >/dev/null
done
cat "$WORK/runs.jsonl" >> "$JSONL"
"$python" - "$WORK/runs.jsonl" "$HOSTS" "$EPOCHS" "$MAX_STEPS" > "$OUT/$TAG.md" <<'PY'
import json, sys
path, hosts, epochs, max_steps = sys.argv[1:]
runs = [json.loads(l) for l in open(path)]
cap = ", max_steps %s" % max_steps if max_steps != "0" else ""
print("Convnet (configs/fashion_mnist_convnet.yaml), %s hosts x 1 rank on the namespace cluster, "
      "%s epochs%s; means over the steps after the first.\n" % (hosts, epochs, cap))
print("| link | compression | rep | steps | step ms | comm wait ms | test accuracy | wall s |")
print("|---|---|---|---|---|---|---|---|")
fmt = lambda v, f: "-" if v is None else f % v
for r in runs:
    print("| %s | %s | %d | %d | %s | %s | %s | %.1f |" % (
        r["rate"], r["compression"], r["rep"], r["steps"], fmt(r["step_ms"], "%.1f"),
        fmt(r["comm_wait_ms"], "%.1f"), fmt(r["test_accuracy"], "%.4f"), r["wall_seconds"]))
PY
cat "$OUT/$TAG.md"
echo "compression.sh: wrote $OUT/$TAG.md, appended $JSONL"
