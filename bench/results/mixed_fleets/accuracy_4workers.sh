#!/bin/bash
# Test accuracy after 4 epochs, convnet, 4 workers on loopback, compression none vs bf16.
cd "$(dirname "$0")/../../.."  # the repository root
for mode in none bf16; do
  rd=/tmp/acc-$mode; rm -rf $rd
  build/bin/cumulus-run --standalone --nproc-per-node 4 -- build/bin/cumulus-train configs/fashion_mnist_convnet.yaml \
    --set trainer.epochs=4 --set comm.compression=$mode --set trainer.run_dir=$rd --set checkpoint.every_steps=0 > /tmp/acc-$mode.log 2>&1
  echo "$mode rc=$? $(grep '"summary"' $rd/metrics.jsonl | head -c 600)"
done
