#!/bin/bash
# Cumulus vs PyTorch DDP (Gloo backend, Debian's torch 1.13): the same experiment (model, global
# batch, data, optimizer, schedule, step count), trained by cumulus-train and by
# bench/ddp_train.py, at each world size, alternately (cumulus, ddp, cumulus, ddp, …) so that
# the background load of a shared machine hits both alike. Per (experiment, world) it prints
# the median samples/s of each over the rounds, their ratio (cumulus / ddp, > 1 = we are
# faster), the median of the per-round ratios ("paired": a round's two runs ran back to back,
# so it cancels slow drifts of the load better) and the test accuracy each reached after the
# same steps, and writes every run and every summary as JSON lines to --out.
#
#   bench/compare_ddp.sh [--experiments "mlp convnet"] [--worlds "1 2"] [--rounds 3]
#                        [--mlp-steps 300] [--convnet-steps 40] [--skip-steps 10]
#                        [--set KEY=VALUE]... [--bin-dir build/bin] [--out FILE] [--quick]
#
# samples/s, both sides: global batch x timed steps / their summed step time, on rank 0, steps
# 1..skip left out (warm-up), evaluation left out. Cumulus's side comes from the train records
# of rank 0's metrics.jsonl, written every --skip-steps steps so that the first skip steps fall
# in records of their own; each record carries its window's samples_per_sec and step_time_ms.
# --quick: one round, mlp 150 steps, convnet 20 steps.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
experiments="mlp convnet"; worlds="1 2"; rounds=3; mlp_steps=300; convnet_steps=40; skip=10
bin_dir="$root/build/bin"; out="$here/results/ddp.jsonl"; sets=()
python=/usr/bin/python3  # Debian's, with torch; the first python3 on PATH may lack it
while [ $# -gt 0 ]; do
  case "$1" in
    --experiments) experiments="$2"; shift 2 ;;
    --worlds) worlds="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --mlp-steps) mlp_steps="$2"; shift 2 ;;
    --convnet-steps) convnet_steps="$2"; shift 2 ;;
    --skip-steps) skip="$2"; shift 2 ;;
    --set) sets+=(--set "$2"); shift 2 ;;
    --bin-dir) bin_dir="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --quick) rounds=1; mlp_steps=150; convnet_steps=20; shift ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "compare_ddp.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
for b in cumulus-train cumulus-run cumulus-config; do
  [ -x "$bin_dir/$b" ] || {
    echo "compare_ddp.sh: $bin_dir/$b missing; build it: cmake --build build --target $b" >&2
    exit 1
  }
done
mkdir -p "$(dirname "$out")"; : > "$out"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

config_of() {
  case "$1" in
    mlp) echo "$root/configs/fashion_mnist.yaml" ;;
    convnet) echo "$root/configs/fashion_mnist_convnet.yaml" ;;
    *) echo "compare_ddp.sh: unknown experiment $1 (mlp, convnet)" >&2; exit 2 ;;
  esac
}
steps_of() { if [ "$1" = mlp ]; then echo "$mlp_steps"; else echo "$convnet_steps"; fi; }

# Rank 0's metrics.jsonl -> one JSON line in the same form as ddp_train.py's.
cumulus_summary() {  # metrics.jsonl
  "$python" - "$1" "$skip" <<'PY'
import json, sys
path, skip = sys.argv[1], int(sys.argv[2])
seconds = samples = steps = comm_wait = 0.0
summary, prev = None, 0
for line in open(path):
    r = json.loads(line)
    if r["type"] == "train":
        n = r["step"] - prev
        prev = r["step"]
        if r["step"] > skip:  # each record covers the steps since the previous one
            t = n * r["step_time_ms"] / 1000.0
            seconds += t; samples += r["samples_per_sec"] * t; steps += n
            comm_wait += n * r.get("comm_wait_ms", 0.0) / 1000.0
    elif r["type"] == "summary":
        summary = r
if summary is None:
    sys.exit("compare_ddp.sh: %s has no summary record; the run did not finish" % path)
summary.update(impl="cumulus", samples_per_sec=samples / seconds if seconds else None,
               timed_steps=int(steps), skip_steps=skip,
               step_time_ms=1000.0 * seconds / steps if steps else None,
               comm_wait_ms=1000.0 * comm_wait / steps if steps else None)
print(json.dumps(summary))
PY
}

run_cumulus() {  # experiment world round
  local config run_dir world=$2
  config=$(config_of "$1"); run_dir="$tmp/cumulus-$1-$2-$3"
  local args=("$config" "${common[@]}" --set "trainer.run_dir=$run_dir")
  if [ "$world" = 1 ]; then
    "$bin_dir/cumulus-train" "${args[@]}" > "$tmp/log" 2>&1 || { cat "$tmp/log" >&2; exit 1; }
  else
    "$bin_dir/cumulus-run" --nproc-per-node "$world" --max-restarts 0 --log-dir "$tmp/logs" -- \
      "$bin_dir/cumulus-train" "${args[@]}" > "$tmp/log" 2>&1 || { cat "$tmp/log" >&2; exit 1; }
  fi
  cumulus_summary "$run_dir/metrics.jsonl"
}

run_ddp() {  # experiment world round
  "$python" "$here/ddp_train.py" "$tmp/$1.yaml" --nproc "$2" --skip-steps "$skip" \
    2> "$tmp/log" || { cat "$tmp/log" >&2; exit 1; }
}

echo "# uptime before: $(uptime)" >&2
for exp in $experiments; do
  steps=$(steps_of "$exp")
  common=(--set "trainer.max_steps=$steps" --set "trainer.log_every_steps=$skip" "${sets[@]}")
  # The resolved experiment (every key) is what ddp_train.py reads: no default can drift.
  "$bin_dir/cumulus-config" check "$(config_of "$exp")" "${common[@]}" > "$tmp/$exp.yaml"
  for world in $worlds; do
    for round in $(seq 1 "$rounds"); do
      for impl in cumulus ddp; do
        echo "# $exp world $world round $round: $impl ($steps steps)" >&2
        start=$(date +%s.%N)
        line=$("run_$impl" "$exp" "$world" "$round")
        "$python" -c 'import json,sys; r=json.loads(sys.argv[1]); r.update(experiment=sys.argv[2],
round=int(sys.argv[3]), run_seconds=float(sys.argv[4])); print(json.dumps(r))' \
          "$line" "$exp" "$round" "$(echo "$(date +%s.%N) - $start" | bc)" >> "$out"
      done
    done
  done
done
echo "# uptime after: $(uptime)" >&2

"$python" - "$out" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
keys = []
for r in runs:
    if (r["experiment"], r["world_size"]) not in keys:
        keys.append((r["experiment"], r["world_size"]))
print("%-8s %5s %5s %12s %12s %7s %7s %-20s %8s %8s" % (
    "exp", "world", "steps", "cumulus sa/s", "ddp sa/s", "ratio", "paired", "round ratios",
    "acc cum", "acc ddp"))
summaries = []
for exp, world in keys:
    mine = [r for r in runs if (r["experiment"], r["world_size"]) == (exp, world)]
    side = {i: [r for r in mine if r["impl"] == i] for i in ("cumulus", "ddp")}
    med = {i: statistics.median(r["samples_per_sec"] for r in side[i]) for i in side}
    acc = {i: statistics.median(r["test_accuracy"] for r in side[i]) for i in side}
    rounds = sorted({r["round"] for r in mine})
    per_round = []
    for k in rounds:
        c = [r["samples_per_sec"] for r in side["cumulus"] if r["round"] == k]
        d = [r["samples_per_sec"] for r in side["ddp"] if r["round"] == k]
        if c and d:
            per_round.append(c[0] / d[0])
    s = {"type": "comparison", "experiment": exp, "world_size": world,
         "steps": side["cumulus"][0]["steps"], "rounds": len(rounds),
         "cumulus_samples_per_sec": med["cumulus"], "ddp_samples_per_sec": med["ddp"],
         "ratio": med["cumulus"] / med["ddp"], "round_ratios": per_round,
         "median_round_ratio": statistics.median(per_round) if per_round else None,
         "cumulus_test_accuracy": acc["cumulus"], "ddp_test_accuracy": acc["ddp"]}
    summaries.append(s)
    print("%-8s %5d %5d %12.0f %12.0f %6.2fx %6.2fx %-20s %8.4f %8.4f" % (
        exp, world, s["steps"], med["cumulus"], med["ddp"], s["ratio"],
        s["median_round_ratio"] or 0, ",".join("%.2f" % x for x in per_round),
        acc["cumulus"], acc["ddp"]))
with open(sys.argv[1], "a") as f:
    for s in summaries:
        line = json.dumps(s)
        f.write(line + "\n")
        print(line)
PY
