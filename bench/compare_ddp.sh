#!/bin/bash
# Cumulus vs PyTorch DDP (Gloo backend, the project environment's torch): the same experiment
# (model, global batch, data, optimizer, schedule, step count), trained by cumulus-train and by
# bench/ddp_train.py, at each world size, alternately (cumulus, ddp, cumulus, ddp, …) so that
# the background load of a shared machine hits both alike. Per (experiment, world) it prints
# the median samples/s of each over the rounds, their ratio (cumulus / ddp, > 1 = we are
# faster), the median of the per-round ratios ("paired": a round's two runs ran back to back,
# so it cancels slow drifts of the load better) and the test accuracy each reached after the
# same steps, and writes every run and every summary as JSON lines to --out.
#
#   bench/compare_ddp.sh [--experiments "mlp convnet"] [--worlds "1 2"]
#                        [--rounds 3] [--mlp-steps 300] [--convnet-steps 40] [--gpt-steps 100]
#                        [--gpt-bench-steps 30] [--skip-steps 10] [--set KEY=VALUE]...
#                        [--precisions "fp32 bf16"] [--bin-dir build/bin] [--out FILE] [--quick]
#
# Experiments: mlp (configs/fashion_mnist.yaml), convnet (configs/fashion_mnist_convnet.yaml),
# gpt (configs/gpt_text.yaml) and gpt-bench (configs/gpt_bench.yaml), the last two not by default
# (--experiments "mlp convnet gpt gpt-bench" for all); the GPT ones train the same
# TorchScript file on the same token files, which scripts/prepare_gpt.sh makes first.
# samples/s, both sides: global batch x timed steps / their summed step time, on rank 0, steps
# 1..skip left out (warm-up), evaluation left out. Cumulus's side comes from the train records
# of rank 0's metrics.jsonl, written every --skip-steps steps so that the first skip steps fall
# in records of their own; each record carries its window's samples_per_sec and step_time_ms.
# test loss / accuracy: after the last step (the summary record), on the whole test split.
# peak RSS per worker, both sides: bench/peak_rss.py wraps the launch (cumulus-train or
# cumulus-run; ddp_train.py's launcher) and reads the largest ru_maxrss of the processes it
# started. optimizer ms, both sides: the median time of one optimizer step after the first skip
# steps on rank 0: Cumulus's "optimizer" spans of its --trace, DDP's optimizer.step().
# --precisions: trainer.precision for both sides (fp32, bf16, auto; DDP runs bf16 under
# torch.autocast("cpu", dtype=torch.bfloat16)), each in every round, so that a table of bf16 over
# fp32 speed-ups, paired by round, follows the comparison; default: the config's own.
# --quick: one round, mlp 150 steps, convnet 20, gpt 30, gpt-bench 12.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
experiments="mlp convnet"; worlds="1 2"; rounds=3; skip=10
mlp_steps=300; convnet_steps=40; gpt_steps=100; gpt_bench_steps=30
bin_dir="$root/build/bin"; out="$here/results/ddp.jsonl"; sets=(); precisions="config"
python=${CUMULUS_PYTHON:-$root/.venv/bin/python}  # the project environment (its torch is the peer)
while [ $# -gt 0 ]; do
  case "$1" in
    --experiments) experiments="$2"; shift 2 ;;
    --worlds) worlds="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --mlp-steps) mlp_steps="$2"; shift 2 ;;
    --convnet-steps) convnet_steps="$2"; shift 2 ;;
    --gpt-steps) gpt_steps="$2"; shift 2 ;;
    --gpt-bench-steps) gpt_bench_steps="$2"; shift 2 ;;
    --skip-steps) skip="$2"; shift 2 ;;
    --set) sets+=(--set "$2"); shift 2 ;;
    --precisions) precisions="$2"; shift 2 ;;
    --bin-dir) bin_dir="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --quick) rounds=1; mlp_steps=150; convnet_steps=20; gpt_steps=30; gpt_bench_steps=12; shift ;;
    -h|--help) sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
out=$(realpath "$out"); bin_dir=$(realpath "$bin_dir")
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cd "$root"  # the GPT experiments name their files relative to the checkout
case " $experiments " in *" gpt"*) scripts/prepare_gpt.sh data/gpt >&2 ;; esac

config_of() {
  case "$1" in
    mlp) echo "$root/configs/fashion_mnist.yaml" ;;
    convnet) echo "$root/configs/fashion_mnist_convnet.yaml" ;;
    gpt) echo "$root/configs/gpt_text.yaml" ;;
    gpt-bench) echo "$root/configs/gpt_bench.yaml" ;;
    *) echo "compare_ddp.sh: unknown experiment $1 (mlp, convnet, gpt, gpt-bench)" >&2; exit 2 ;;
  esac
}
steps_of() {
  case "$1" in
    mlp) echo "$mlp_steps" ;; convnet) echo "$convnet_steps" ;;
    gpt) echo "$gpt_steps" ;; gpt-bench) echo "$gpt_bench_steps" ;;
  esac
}

# Rank 0's metrics.jsonl and trace -> one JSON line in the same form as ddp_train.py's.
cumulus_summary() {  # metrics.jsonl trace.json
  "$python" - "$1" "$skip" "$2" <<'PY'
import json, statistics, sys
path, skip, trace = sys.argv[1], int(sys.argv[2]), sys.argv[3]
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
with open(trace) as f:
    spans = [e["dur"] / 1000.0 for e in json.load(f)["traceEvents"] if e["name"] == "optimizer"]
summary["optimizer_step_ms"] = statistics.median(spans[skip:]) if spans[skip:] else None
print(json.dumps(summary))
PY
}

run_cumulus() {  # experiment world round precision
  local config run_dir world=$2
  config=$(config_of "$1"); run_dir="$tmp/cumulus-$1-$2-$3-$4"
  local args=("$config" "${common[@]}" --set "trainer.run_dir=$run_dir"
              --trace "$run_dir/trace.{rank}.json")
  local launch=("$bin_dir/cumulus-train")
  if [ "$world" != 1 ]; then
    launch=("$bin_dir/cumulus-run" --nproc-per-node "$world" --max-restarts 0
            --log-dir "$tmp/logs" -- "$bin_dir/cumulus-train")
  fi
  "$python" "$here/peak_rss.py" "$tmp/rss" -- "${launch[@]}" "${args[@]}" > "$tmp/log" 2>&1 ||
    { cat "$tmp/log" >&2; exit 1; }
  with_rss "$(cumulus_summary "$run_dir/metrics.jsonl" "$run_dir/trace.0.json")"
}

run_ddp() {  # experiment world round precision
  local line
  line=$("$python" "$here/peak_rss.py" "$tmp/rss" -- "$python" "$here/ddp_train.py" \
    "$tmp/$1-$4.yaml" --nproc "$2" --skip-steps "$skip" 2> "$tmp/log") ||
    { cat "$tmp/log" >&2; exit 1; }
  with_rss "$line"
}

# The summary line with worker_peak_rss_mb, bench/peak_rss.py's figure, added.
with_rss() {  # json-line
  "$python" -c 'import json,sys; r=json.loads(sys.argv[1]); r["worker_peak_rss_mb"]=float(
open(sys.argv[2]).read()); print(json.dumps(r))' "$1" "$tmp/rss"
}

echo "# uptime before: $(uptime)" >&2
for exp in $experiments; do
  steps=$(steps_of "$exp")
  base=(--set "trainer.max_steps=$steps" --set "trainer.log_every_steps=$skip" "${sets[@]}")
  # The resolved experiment (every key) is what ddp_train.py reads: no default can drift.
  for precision in $precisions; do
    common=("${base[@]}")
    [ "$precision" = config ] || common+=(--set "trainer.precision=$precision")
    "$bin_dir/cumulus-config" check "$(config_of "$exp")" "${common[@]}" > "$tmp/$exp-$precision.yaml"
  done
  for world in $worlds; do
    for round in $(seq 1 "$rounds"); do
      for precision in $precisions; do
        common=("${base[@]}")
        [ "$precision" = config ] || common+=(--set "trainer.precision=$precision")
        for impl in cumulus ddp; do
          echo "# $exp world $world round $round: $impl, precision $precision ($steps steps)" >&2
          start=$(date +%s.%N)
          line=$("run_$impl" "$exp" "$world" "$round" "$precision")
          "$python" -c 'import json,sys; r=json.loads(sys.argv[1]); r.update(experiment=sys.argv[2],
round=int(sys.argv[3]), run_seconds=float(sys.argv[4]), precision=sys.argv[5]); print(json.dumps(r))' \
            "$line" "$exp" "$round" "$(echo "$(date +%s.%N) - $start" | bc)" "$precision" >> "$out"
        done
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
    r.setdefault("precision", "config")
    if (r["experiment"], r["precision"], r["world_size"]) not in keys:
        keys.append((r["experiment"], r["precision"], r["world_size"]))


def median(side, key):
    values = [r[key] for r in side if r.get(key) is not None]
    return statistics.median(values) if values else float("nan")


print("%-9s %-6s %5s %5s %12s %12s %7s %7s %-16s %8s %8s %8s %8s %7s %7s %7s %7s" % (
    "exp", "prec", "world", "steps", "cumulus sa/s", "ddp sa/s", "ratio", "paired", "round ratios",
    "loss cum", "loss ddp", "acc cum", "acc ddp", "rss cum", "rss ddp", "opt cum", "opt ddp"))
summaries = []
for exp, precision, world in keys:
    mine = [r for r in runs if (r["experiment"], r["precision"], r["world_size"]) ==
            (exp, precision, world)]
    side = {i: [r for r in mine if r["impl"] == i] for i in ("cumulus", "ddp")}
    m = {(i, k): median(side[i], k) for i in side
         for k in ("samples_per_sec", "test_loss", "test_accuracy", "worker_peak_rss_mb",
                   "optimizer_step_ms")}
    rounds = sorted({r["round"] for r in mine})
    per_round = []
    for k in rounds:
        c = [r["samples_per_sec"] for r in side["cumulus"] if r["round"] == k]
        d = [r["samples_per_sec"] for r in side["ddp"] if r["round"] == k]
        if c and d:
            per_round.append(c[0] / d[0])
    s = {"type": "comparison", "experiment": exp, "precision": precision, "world_size": world,
         "steps": side["cumulus"][0]["steps"], "rounds": len(rounds),
         "round_ratios": per_round,
         "median_round_ratio": statistics.median(per_round) if per_round else None}
    for (impl, key), value in m.items():
        s[impl + "_" + key] = value
    s["ratio"] = s["cumulus_samples_per_sec"] / s["ddp_samples_per_sec"]
    summaries.append(s)
    print("%-9s %-6s %5d %5d %12.0f %12.0f %6.2fx %6.2fx %-16s %8.4f %8.4f %8.4f %8.4f %7.0f %7.0f "
          "%7.2f %7.2f" % (
              exp, precision, world, s["steps"], s["cumulus_samples_per_sec"], s["ddp_samples_per_sec"],
              s["ratio"], s["median_round_ratio"] or 0, ",".join("%.2f" % x for x in per_round),
              s["cumulus_test_loss"], s["ddp_test_loss"], s["cumulus_test_accuracy"],
              s["ddp_test_accuracy"], s["cumulus_worker_peak_rss_mb"],
              s["ddp_worker_peak_rss_mb"], s["cumulus_optimizer_step_ms"],
              s["ddp_optimizer_step_ms"]))
print("# rss: peak RSS per worker, MiB; opt: median optimizer step, ms; loss and acc: test split "
      "after the last step")
# bf16 over fp32, each side, where both ran: the ratio of medians and the per-round ratios.
speedups = []
for exp, precision, world in keys:
    if precision != "bf16":
        continue
    base = [r for r in runs if (r["experiment"], r["precision"], r["world_size"]) ==
            (exp, "fp32", world)]
    fast = [r for r in runs if (r["experiment"], r["precision"], r["world_size"]) ==
            (exp, "bf16", world)]
    if not base:
        continue
    if not speedups:
        print("%-9s %5s %-7s %7s %7s %-20s %9s %9s %9s %9s" % (
            "exp", "world", "impl", "bf16/32", "paired", "round ratios", "loss fp32",
            "loss bf16", "rss fp32", "rss bf16"))
    for impl in ("cumulus", "ddp"):
        b = {r["round"]: r for r in base if r["impl"] == impl}
        f = {r["round"]: r for r in fast if r["impl"] == impl}
        per_round = [f[k]["samples_per_sec"] / b[k]["samples_per_sec"] for k in sorted(b) if k in f]
        s = {"type": "precision_speedup", "experiment": exp, "world_size": world, "impl": impl,
             "ratio": median(f.values(), "samples_per_sec") / median(b.values(), "samples_per_sec"),
             "round_ratios": per_round,
             "median_round_ratio": statistics.median(per_round) if per_round else None,
             "fp32_test_loss": median(b.values(), "test_loss"),
             "bf16_test_loss": median(f.values(), "test_loss"),
             "fp32_worker_peak_rss_mb": median(b.values(), "worker_peak_rss_mb"),
             "bf16_worker_peak_rss_mb": median(f.values(), "worker_peak_rss_mb")}
        speedups.append(s)
        print("%-9s %5d %-7s %6.2fx %6.2fx %-20s %9.4f %9.4f %9.0f %9.0f" % (
            exp, world, impl, s["ratio"], s["median_round_ratio"] or 0,
            ",".join("%.2f" % x for x in per_round), s["fp32_test_loss"], s["bf16_test_loss"],
            s["fp32_worker_peak_rss_mb"], s["bf16_worker_peak_rss_mb"]))
summaries += speedups
with open(sys.argv[1], "a") as f:
    for s in summaries:
        line = json.dumps(s)
        f.write(line + "\n")
        print(line)
PY
