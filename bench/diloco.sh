#!/usr/bin/env bash
# Every-step sync against DiLoCo and Streaming DiLoCo (docs/diloco.md), in two phases:
#
#   quality  the GPT `text` config with W workers on loopback (cumulus-run --nproc-per-node W), each
#            mode for --steps steps, evaluated every --eval-every steps: the validation curve,
#            and rank 0's bytes handed to the transport (comm_bytes_sent). The loss after a given
#            step does not depend on the link, only on the mode and the world size.
#   links    the same modes on the namespace cluster (launch/netns-cluster.sh), one host per
#            worker, for each --rates x --delays, a short run each (two rounds of the longest H):
#            the wall time per step (compute, syncs and the step boundary's agreement, from the
#            train records' times), with the compute time per step (step time minus the time
#            blocked in syncs) and the time per sync (every step: the comm wait of a step; DiLoCo:
#            outer_wait_s / outer_rounds) beside it.
#
# bench/diloco_report.py joins them: the wall time to reach the validation loss that every-step
# sync reaches after --target-step steps = the steps a mode needs to reach it (from its curve,
# interpolated between evaluations) x its time per step on that link (compute + the sync time
# spread over the steps between syncs).
#
#   bench/diloco.sh quality [--steps 1000] [--workers 4] [--eval-every 100] [--modes "..."]
#   bench/diloco.sh links [--rates "100mbit 20mbit"] [--delays "0ms 20ms"] [--hosts 4]
#       [--modes "..."] [--id K]
#   bench/diloco.sh kill [--steps 1000] [--workers 4] [--modes streaming] [--kill-at 310]
#       loopback, cumulus-train-faults: rank 1 SIGKILLed --kill-at steps in (mid-round),
#       cumulus-run starts a replacement that joins; the train records' loss around the kill
#       against the curve's own step-to-step noise, and every replica's final digest.
#   common: [--config configs/gpt_text.yaml] [--set KEY=VALUE]... [--out-dir bench/results/diloco]
#
# Modes: every_step, every_step_bf16 (comm.compression bf16), diloco_h20, diloco_h50 (H = 20, 50),
# streaming (H = 50, 4 fragments, overlap, int8 outer gradients). Appends one JSON line per run to
# OUT/quality.jsonl or OUT/links.jsonl. Needs the binaries built (cumulus-run, cumulus-train) and
# data/gpt/ (scripts/prepare_gpt.sh); links needs root (namespaces) and iproute2.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
python=${CUMULUS_PYTHON:-$ROOT/.venv/bin/python}  # the project environment, with torch
BIN=${BIN:-$ROOT/build/bin}
PHASE=${1:-}; shift || true
MODES="every_step every_step_bf16 diloco_h20 diloco_h50 streaming"
STEPS=1000; WORKERS=4; EVAL_EVERY=100; KILL_AT=310; RATES="100mbit 20mbit"; DELAYS="0ms 20ms"; HOSTS=4
ID=${CUMULUS_NETNS_ID:-12}; CONFIG=$ROOT/configs/gpt_text.yaml; OUT=$ROOT/bench/results/diloco
SETS=()
while (($#)); do
  case "$1" in
    --steps) STEPS=$2; shift 2 ;;
    --workers) WORKERS=$2; shift 2 ;;
    --eval-every) EVAL_EVERY=$2; shift 2 ;;
    --modes) MODES=$2; shift 2 ;;
    --kill-at) KILL_AT=$2; shift 2 ;;
    --rates) RATES=$2; shift 2 ;;
    --delays) DELAYS=$2; shift 2 ;;
    --hosts) HOSTS=$2; shift 2 ;;
    --id) ID=$2; shift 2 ;;
    --config) CONFIG=$2; shift 2 ;;
    --set) SETS+=(--set "$2"); shift 2 ;;
    --out-dir) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "diloco.sh: unknown flag $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $PHASE == quality || $PHASE == links || $PHASE == kill ]] ||
  { echo "diloco.sh: give the phase first: quality, links or kill (see --help)" >&2; exit 2; }
for b in cumulus-run cumulus-train; do
  [[ -x $BIN/$b ]] || { echo "diloco.sh: $BIN/$b missing: cmake --build build --target $b" >&2; exit 2; }
done
[[ -f $CONFIG ]] || { echo "diloco.sh: no config $CONFIG" >&2; exit 2; }

# The keys of each mode, and its H (the steps between two syncs of the whole model; 1 every step).
mode_sets() {
  case "$1" in
    every_step) echo "--set trainer.sync=every_step" ;;
    every_step_bf16) echo "--set trainer.sync=every_step --set comm.compression=bf16" ;;
    diloco_h20) echo "--set trainer.sync=diloco --set diloco.inner_steps=20" ;;
    diloco_h50) echo "--set trainer.sync=diloco --set diloco.inner_steps=50" ;;
    streaming) echo "--set trainer.sync=diloco --set diloco.inner_steps=50 --set diloco.fragments=4" \
                    "--set diloco.overlap=true --set diloco.outer_compression=int8" ;;
    *) echo "diloco.sh: unknown mode $1" >&2; exit 2 ;;
  esac
}

WORK=$(mktemp -d /tmp/cumulus-diloco.XXXXXX)
NS="$ROOT/launch/netns-cluster.sh --id $ID"
trap '[[ $PHASE == links ]] && $NS down >/dev/null 2>&1; rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM
mkdir -p "$OUT"
export CUMULUS_JOB_TOKEN=diloco-bench
COMMON=(--set "checkpoint.every_steps=0" --set "checkpoint.every_seconds=0" --set "trainer.threads=1"
        --set "trainer.log_every_steps=10")

# summarize RUN_DIR KEY=VALUE...: one JSON line from rank 0's metrics.jsonl.
summarize() {
  "$python" - "$@" <<'PY'
import json, sys
path, extra = sys.argv[1], dict(a.split("=", 1) for a in sys.argv[2:])
records = [json.loads(line) for line in open(path + "/metrics.jsonl")]
train = [r for r in records if r.get("type") == "train"]
summary = next(r for r in records if r.get("type") == "summary")
evals = [[r["step"], r["test_loss"]] for r in records if r.get("type") == "eval"]
steps = compute_ms = wait_ms = 0.0
prev = None
for r in train:
    if prev is not None:  # the first record holds start-up: left out
        n = r["step"] - prev
        steps += n
        compute_ms += (r["step_time_ms"] - r["comm_wait_ms"]) * n
        wait_ms += r["comm_wait_ms"] * n
    prev = r["step"]
# The wall time per step between the second train record and the last: compute, syncs and each
# step's boundary (the agreement), which step_time_ms leaves out.
timed = [(r["step"], r["time"]) for r in train[1:]]
wall_ms = (1000 * (timed[-1][1] - timed[0][1]) / (timed[-1][0] - timed[0][0])
           if len(timed) >= 2 and timed[-1][0] > timed[0][0] else None)
out = dict(extra)
out.update({"steps": summary["steps"], "test_loss": summary["test_loss"], "evals": evals,
            "wall_ms_per_step": wall_ms,
            "compute_ms": compute_ms / steps if steps else None,
            "comm_wait_ms": wait_ms / steps if steps else None,
            "comm_bytes_sent": summary.get("comm_bytes_sent"),
            "outer_rounds": summary.get("outer_rounds"), "outer_wait_s": summary.get("outer_wait_s"),
            "wall_seconds": summary.get("wall_seconds")})
print(json.dumps(out))
PY
}

quality() {
  local mode=$1 run_dir=$WORK/q-$1
  # shellcheck disable=SC2046
  "$BIN/cumulus-run" --nproc-per-node "$WORKERS" --max-restarts 0 --log-dir "$WORK/logs-q-$mode" -- \
    "$BIN/cumulus-train" "$CONFIG" --set "trainer.run_dir=$run_dir" \
    --set "trainer.max_steps=$STEPS" --set "eval.every_steps=$EVAL_EVERY" "${COMMON[@]}" \
    $(mode_sets "$mode") "${SETS[@]}" > "$WORK/q-$mode.log" 2>&1 ||
    { echo "diloco.sh: quality $mode failed; log:" >&2; tail -n 30 "$WORK/q-$mode.log" >&2; exit 1; }
  summarize "$run_dir" "phase=quality" "mode=$mode" "workers=$WORKERS" | tee -a "$OUT/quality.jsonl"
}

links() {
  local mode=$1 rate=$2 delay=$3 tag="l-$1-$2-$3" pids=() rc=0 i steps=40
  [[ $mode == diloco_h20 ]] && steps=50
  [[ $mode == diloco_h50 || $mode == streaming ]] && steps=110
  for ((i = 0; i < HOSTS; i++)); do
    # shellcheck disable=SC2046
    $NS run "$i" "$BIN/cumulus-run" --nnodes "$HOSTS" --node-rank "$i" \
      --rdzv-endpoint "$ADDR0:29500" --nproc-per-node 1 --max-restarts 0 \
      --log-dir "$WORK/logs-$tag" --run-id "$tag" -- \
      "$BIN/cumulus-train" "$CONFIG" --set "trainer.run_dir=$WORK/$tag" \
      --set "trainer.max_steps=$steps" --set "eval.every_steps=0" "${COMMON[@]}" \
      $(mode_sets "$mode") "${SETS[@]}" > "$WORK/$tag-n$i.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
  ((rc == 0)) || { echo "diloco.sh: $tag failed (exit $rc); logs:" >&2; tail -n 20 "$WORK/$tag"-n*.log >&2; exit 1; }
  summarize "$WORK/$tag" "phase=links" "mode=$mode" "rate=$rate" "delay=$delay" "hosts=$HOSTS" |
    tee -a "$OUT/links.jsonl"
}

kill_run() {
  local mode=$1 run_dir=$WORK/k-$1
  [[ -x $BIN/cumulus-train-faults ]] ||
    { echo "diloco.sh: $BIN/cumulus-train-faults missing: cmake --build build" >&2; exit 2; }
  # shellcheck disable=SC2046
  "$BIN/cumulus-run" --nproc-per-node "$WORKERS" --max-restarts 1 --recovery in_place \
    --log-dir "$WORK/logs-k-$mode" -- \
    "$BIN/cumulus-train-faults" --fault-kill "$KILL_AT@0.1.0+5" -- \
    "$CONFIG" --set "trainer.run_dir=$run_dir" \
    --set "trainer.max_steps=$STEPS" --set "eval.every_steps=$EVAL_EVERY" \
    --set "trainer.log_all_ranks=true" "${COMMON[@]}" \
    $(mode_sets "$mode") "${SETS[@]}" > "$WORK/k-$mode.log" 2>&1 ||
    { echo "diloco.sh: kill $mode failed; log:" >&2; tail -n 30 "$WORK/k-$mode.log" >&2; exit 1; }
  "$python" - "$run_dir/metrics.jsonl" "$WORK/k-$mode.log" "$mode" "$KILL_AT" <<'PY' |
import json, re, statistics, sys
path, log, mode, kill_at = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
records = [json.loads(line) for line in open(path)]
train = [(r["step"], r["loss"]) for r in records if r.get("type") == "train"]
diffs = [abs(b[1] - a[1]) for a, b in zip(train, train[1:])]
around = [abs(b[1] - a[1]) for a, b in zip(train, train[1:]) if a[0] <= kill_at + 10 and b[0] >= kill_at]
text = open(log).read()
digests = re.findall(r"final parameters sha256 ([0-9a-f]{64})", text)
print(json.dumps({"phase": "kill", "mode": mode, "kill_at": kill_at,
                  "steps": next(r["steps"] for r in records if r.get("type") == "summary"),
                  "test_loss": next(r["test_loss"] for r in records if r.get("type") == "summary"),
                  "reforms": [r["step"] for r in records if r.get("type") == "reform"],
                  "jump_at_kill": max(around) if around else None,
                  "median_step_to_step": statistics.median(diffs),
                  "p90_step_to_step": sorted(diffs)[int(0.9 * (len(diffs) - 1))],
                  "max_step_to_step_after_100": max(d for (a, _), d in zip(train, diffs) if a >= 100),
                  "replica_digests": sorted(set(digests)), "replicas": len(digests)}))
PY
    tee -a "$OUT/kill.jsonl"
}

if [[ $PHASE == kill ]]; then
  for mode in $MODES; do kill_run "$mode"; done
elif [[ $PHASE == quality ]]; then
  for mode in $MODES; do quality "$mode"; done
else
  for rate in $RATES; do
    for delay in $DELAYS; do
      $NS down >/dev/null 2>&1 || true
      $NS up "$HOSTS" --rate "$rate" --delay "$delay"
      ADDR0=$($NS addr 0)
      for mode in $MODES; do links "$mode" "$rate" "$delay"; done
      $NS down >/dev/null
    done
  done
fi
echo "diloco.sh: appended to $OUT/$PHASE.jsonl; bench/diloco_report.py $OUT makes the table"
