#!/bin/bash
# The side-by-side benchmarks rerun on torch 2.15 (the project environment's), one after another
# on an otherwise idle machine, each peer in the same run as Cumulus. Writes <name>.log (the
# table the script prints) and <name>.jsonl (every run) here, and machine.txt (CPU, torch, load).
#   bench/results/torch2.15/run.sh [NAME...]   (default: all, in the order below)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"; bench="$(cd "$here/../.." && pwd)"
python="$bench/../.venv/bin/python"
declare -A cmd=(
  [compare_gloo]="$bench/compare_gloo.sh"
  [ddp]="$bench/compare_ddp.sh --experiments 'mlp convnet gpt' --worlds '1 2' --rounds 2 --precisions 'fp32 bf16'"
  [python_allreduce]="$bench/compare_python.sh allreduce --worlds '2 4' --rounds 2"
  [python_alltoall]="$bench/compare_python.sh alltoall --worlds '2 4' --sizes 16M --rounds 3"
  [python_ddp_p2]="$bench/compare_python.sh ddp --experiments 'mlp convnet gpt' --world 2 --rounds 2"
  [python_fsdp2_p2]="$bench/compare_python.sh ddp --wrap fsdp2 --experiments gpt --world 2 --rounds 2 --gpt-steps 60"
  [python_ddp_p4]="$bench/compare_python.sh ddp --experiments 'mlp convnet gpt' --world 4 --rounds 2 --mlp-steps 150 --convnet-steps 20 --gpt-steps 40"
  [python_fsdp2_p4]="$bench/compare_python.sh ddp --wrap fsdp2 --experiments gpt --world 4 --rounds 2 --gpt-steps 30"
)
order=(compare_gloo ddp python_allreduce python_alltoall python_ddp_p2 python_fsdp2_p2 python_ddp_p4 python_fsdp2_p4)
[ $# -gt 0 ] && order=("$@")
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, flags: $(grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "torch: $("$python" -c 'import torch; print(torch.__version__)')"
} > "$here/machine.txt"
for name in "${order[@]}"; do
  echo "== $name: $(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$here/machine.txt"
  eval "${cmd[$name]} --out '$here/$name.jsonl'" > "$here/$name.log" 2> "$here/$name.err"
  echo "   done $(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$here/machine.txt"
done
