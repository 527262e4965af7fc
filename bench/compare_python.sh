#!/bin/bash
# Cumulus's torch.distributed backend against Gloo, both from Python (the project environment's
# torch), in the same run, alternately (cumulus, gloo, gloo, cumulus, …) so that background load
# hits both alike. Two measurements:
#
#   bench/compare_python.sh allreduce [--worlds "2 4"] [--sizes 4K:64M] [--factor 4]
#                                     [--rounds 3] [--out FILE]
#     torch.distributed.all_reduce of float32 zeros (bench/torch_allreduce.py: a checked
#     all-reduce, warm-up, a barrier, timed calls; a row's time is the slowest rank's mean).
#     Keeps each (backend, world, size)'s best time over the rounds and prints time and busbw
#     ratios (cumulus / gloo).
#
#   bench/compare_python.sh alltoall [--worlds "2 4"] [--sizes 16M] [--rounds 3] [--out FILE]
#     the same with torch.distributed.all_to_all_single (each rank sends `bytes` in all, an
#     equal block to every rank).
#
#   bench/compare_python.sh ddp [--experiments "mlp convnet gpt"] [--rounds 3] [--world 2]
#                               [--mlp-steps 300] [--convnet-steps 40] [--gpt-steps 100]
#                               [--wrap ddp|fsdp2] [--out FILE]
#     the same DDP script (bench/ddp_train.py: the experiment's model, data, optimizer and
#     schedule) with --backend gloo and --backend cumulus (--wrap fsdp2: FSDP2's fully_shard
#     instead of DDP, bench/ddp_train.py --wrap): median samples/s of each over the
#     rounds, their ratio, the median per-round ratio ("paired") and the test loss after the
#     last step (the same seed and data on both sides).
#
# Needs a built tree (build/python for the backend, build/bin/cumulus-config to resolve the
# experiment files); the GPT runs need scripts/prepare_gpt.sh's files. Results: every JSON line
# to --out (default bench/results/python_backend/<mode>.jsonl).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"; root="$(cd "$here/.." && pwd)"
python=${CUMULUS_PYTHON:-$root/.venv/bin/python}  # the project environment (its torch is the peer)
mode="${1:-}"; shift || true
case "$mode" in allreduce|alltoall|ddp) ;; *)
  echo "usage: compare_python.sh allreduce|alltoall|ddp [options] (see the head of this file)" >&2
  exit 2 ;;
esac
worlds="2 4"; sizes="4K:64M"; factor=4; rounds=3; world=2; experiments="mlp convnet gpt"
mlp_steps=300; convnet_steps=40; gpt_steps=100; wrap=ddp
out="$here/results/python_backend/$mode.jsonl"
while [ $# -gt 0 ]; do
  case "$1" in
    --worlds) worlds="$2"; shift 2 ;;
    --sizes) sizes="$2"; shift 2 ;;
    --factor) factor="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --world) world="$2"; shift 2 ;;
    --experiments) experiments="$2"; shift 2 ;;
    --mlp-steps) mlp_steps="$2"; shift 2 ;;
    --convnet-steps) convnet_steps="$2"; shift 2 ;;
    --gpt-steps) gpt_steps="$2"; shift 2 ;;
    --wrap) wrap="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "compare_python.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
export PYTHONPATH="$root/build/python${PYTHONPATH:+:$PYTHONPATH}"
"$python" -c "import cumulus" || { echo "compare_python.sh: build the Python package first (make build)" >&2; exit 1; }
mkdir -p "$(dirname "$out")"; : > "$out"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
free_port() { "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# The order of a round's two runs: cumulus first in odd rounds, gloo first in even ones.
order() { if [ $(($1 % 2)) -eq 1 ]; then echo "cumulus gloo"; else echo "gloo cumulus"; fi; }

op=all_reduce
[ "$mode" = alltoall ] && op=all_to_all
if [ "$mode" = allreduce ] || [ "$mode" = alltoall ]; then
  for w in $worlds; do
    for round in $(seq 1 "$rounds"); do
      for backend in $(order "$round"); do
        echo "# world $w round $round: $backend" >&2
        port=$(free_port); pids=()
        for rank in $(seq 0 $((w - 1))); do
          MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$rank WORLD_SIZE=$w OMP_NUM_THREADS=1 \
            GLOO_SOCKET_IFNAME=lo "$python" "$here/torch_allreduce.py" --backend "$backend" \
            --op "$op" --sizes "$sizes" --factor "$factor" > "$tmp/$backend.$rank" &
          pids+=($!)
        done
        for pid in "${pids[@]}"; do wait "$pid"; done
        grep '^{' "$tmp/$backend.0" | sed "s/}\$/, \"round\": $round}/" >> "$out"
      done
    done
  done
  "$python" - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
best = {}
for r in rows:
    k = (r["impl"], r["world"], r["bytes"])
    if k not in best or r["time_us"] < best[k]["time_us"]:
        best[k] = r
print("%5s %10s %12s %12s %8s %10s %10s %8s" % ("world", "bytes", "gloo us", "cumulus us",
      "time", "gloo GB/s", "cumulus", "busbw"))
for (impl, world, nbytes) in sorted(k for k in best if k[0] == "gloo"):
    g, c = best[("gloo", world, nbytes)], best.get(("cumulus", world, nbytes))
    if c is None:
        continue
    print("%5d %10d %12.1f %12.1f %7.3fx %10.3f %10.3f %7.2fx" % (
        world, nbytes, g["time_us"], c["time_us"], c["time_us"] / g["time_us"],
        g["busbw_GBps"], c["busbw_GBps"], c["busbw_GBps"] / g["busbw_GBps"]))
print("time: cumulus / gloo (< 1: cumulus is faster); busbw: cumulus / gloo (> 1: faster)")
PY
  exit 0
fi

# ddp
config_of() {
  case "$1" in
    mlp) echo "$root/configs/fashion_mnist.yaml" ;;
    convnet) echo "$root/configs/fashion_mnist_convnet.yaml" ;;
    gpt) echo "$root/configs/gpt_text.yaml" ;;
    *) echo "compare_python.sh: unknown experiment $1" >&2; exit 2 ;;
  esac
}
steps_of() {
  case "$1" in mlp) echo "$mlp_steps" ;; convnet) echo "$convnet_steps" ;; gpt) echo "$gpt_steps" ;; esac
}
for exp in $experiments; do
  "$root/build/bin/cumulus-config" check "$(config_of "$exp")" \
    --set "trainer.max_steps=$(steps_of "$exp")" > "$tmp/$exp.yaml"
  for round in $(seq 1 "$rounds"); do
    for backend in $(order "$round"); do
      echo "# $exp world $world round $round: $backend" >&2
      "$python" "$here/ddp_train.py" "$tmp/$exp.yaml" --nproc "$world" --backend "$backend" \
        --wrap "$wrap" \
        2> "$tmp/log" > "$tmp/summary" || { cat "$tmp/log" >&2; exit 1; }
      grep '^{' "$tmp/summary" | sed "s/}\$/, \"exp\": \"$exp\", \"round\": $round}/" >> "$out"
    done
  done
done
"$python" - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("%-8s %5s %6s %12s %12s %7s %7s %10s %10s" % ("exp", "world", "steps", "gloo sa/s",
      "cumulus sa/s", "ratio", "paired", "gloo loss", "cum. loss"))
for exp in dict.fromkeys(r["exp"] for r in rows):
    side = {b: [r for r in rows if r["exp"] == exp and r["backend"] == b] for b in ("gloo", "cumulus")}
    g = statistics.median(r["samples_per_sec"] for r in side["gloo"])
    c = statistics.median(r["samples_per_sec"] for r in side["cumulus"])
    paired = statistics.median(cr["samples_per_sec"] / gr["samples_per_sec"]
                               for gr, cr in zip(side["gloo"], side["cumulus"]))
    print("%-8s %5d %6d %12.1f %12.1f %6.2fx %6.2fx %10.4f %10.4f" % (
        exp, side["gloo"][0]["world_size"], side["gloo"][0]["steps"], g, c, c / g, paired,
        side["gloo"][-1]["test_loss"], side["cumulus"][-1]["test_loss"]))
print("ratio: cumulus / gloo samples/s (> 1: cumulus is faster); paired: median of per-round ratios")
PY
