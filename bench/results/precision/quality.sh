#!/bin/bash
# Quality of bf16 against fp32, same build, same machine, one after the other: the GPT `text`
# preset to its 1000 steps and the convnet to 4 epochs, each on 2 workers under cumulus-run.
# Prints each run's last eval line and its final summary line.
#   bench/results/precision/quality.sh [OUT_DIR] [EXPERIMENTS]   (default "gpt_text fashion_mnist_convnet")
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
out="${1:-$(mktemp -d)}"
experiments="${2:-gpt_text fashion_mnist_convnet}"
cd "$root"
scripts/prepare_gpt.sh data/gpt >&2
for precision in fp32 bf16; do
  for exp in $experiments; do
    sets=(--set "trainer.precision=$precision" --set "trainer.run_dir=$out/$exp-$precision")
    [ "$exp" = fashion_mnist_convnet ] && sets+=(--set trainer.epochs=4)
    echo "== $exp $precision"
    build/bin/cumulus-run --nproc-per-node 2 --max-restarts 0 --log-dir "$out/logs-$exp-$precision" \
      -- build/bin/cumulus-train "configs/$exp.yaml" --resume none "${sets[@]}" 2>&1 |
      grep -E "^\[rank0\] (precision:|eval |test |trained )" | tail -5
  done
done
