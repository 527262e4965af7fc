#!/bin/bash
# The exact sequence behind bench/results/allreduce.md (run from the repository root after
# `cmake --build build --target cumulus-bench`). Writes bench/results/{cost_model.txt,
# compare_gloo.jsonl} and prints everything else; keep its output as raw_<n>.log.
set -x
B=build/bin/cumulus-bench
R=bench/results
date -u; uptime; nproc
$B calibrate --out $R/cost_model.txt
bench/compare_gloo.sh --sizes 4K:64M --factor 4 --worlds "2 4" --rounds 3 \
  --algos "ring tree funnel" --cost-model $R/cost_model.txt --out $R/compare_gloo.jsonl
date -u; uptime
for p in 2 3 4 6 8; do
  for a in ring funnel tree; do
    $B allreduce --algo $a --world-size $p --sizes 1M:16M --factor 16 --cost-model $R/cost_model.txt
  done
done
date -u; uptime
for a in ring tree funnel auto; do
  $B allreduce --algo $a --world-size 4 --sizes 4K:256M --factor 4 --cost-model $R/cost_model.txt
done
date -u; uptime
