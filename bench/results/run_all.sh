#!/bin/bash
# The exact sequence behind bench/results/allreduce.md (run from the repository root after
# `cmake --build build --target cumulus-bench`):
#   N=11 bench/results/run_all.sh > bench/results/raw_11.log 2>&1
#   bench/summarize.py bench/results/raw_11.log > bench/results/summary_11.md
# Writes bench/results/{cost_model.json, cost_model_tcp.json, compare_gloo_run$N.jsonl} and prints
# everything else.
#
# Transports: the ranks all live on this host, so CUMULUS_TRANSPORT=auto (the default) connects
# them over AF_UNIX sockets; the TCP figures are taken with CUMULUS_TRANSPORT=tcp and calibrated
# with their own cost model, so transport and algorithm effects can be told apart.
set -x
N=${N:-new}
B=build/bin/cumulus-bench
R=bench/results
date -u; uptime; nproc
$B calibrate --out $R/cost_model.json
CUMULUS_TRANSPORT=tcp $B calibrate --out $R/cost_model_tcp.json
bench/compare_gloo.sh --sizes 4K:64M --factor 4 --worlds "2 4" --rounds 2 \
  --algos "ring tree funnel" --transports "auto tcp" --cost-model $R/cost_model.json \
  --tcp-cost-model $R/cost_model_tcp.json --out $R/compare_gloo_run$N.jsonl
date -u; uptime
# Two rounds of the sweeps (auto included), one after the other; bench/summarize.py keeps the
# best of each configuration's runs.
for round in 1 2; do
  for p in 2 3 4 6 8; do
    for a in ring tree funnel; do
      $B allreduce --algo $a --world-size $p --sizes 1M:64M --factor 4 --cost-model $R/cost_model.json
    done
  done
  date -u; uptime
  for p in 2 4 8; do
    for a in ring tree; do
      CUMULUS_TRANSPORT=tcp $B allreduce --algo $a --world-size $p --sizes 1M:64M --factor 4 \
        --cost-model $R/cost_model_tcp.json
    done
  done
  $B allreduce --algo auto --world-size 4 --sizes 4K:64M --factor 4 --cost-model $R/cost_model.json
  date -u; uptime
done
