#!/bin/bash
# The mlp (the shortest step) alone, 1000 steps, with glibc's own malloc thresholds and with the
# training setting, alternately, three times: per run the mean step time of steps 101..1000 from
# metrics.jsonl, and the worker's peak RSS.
set -u
here="$(cd "$(dirname "$0")" && pwd)"; root="$(cd "$here/../../.." && pwd)"
O=$(mktemp -d)
for i in 1 2 3; do
  order="default training"; [ $i = 2 ] && order="training default"
  for mode in $order; do
    d=$O/$mode-$i
    (cd "$root" && CUMULUS_MALLOC=$mode /usr/bin/python3 bench/peak_rss.py $d.rss -- \
      build/bin/cumulus-train configs/fashion_mnist.yaml --set trainer.max_steps=1000 \
      --set trainer.log_every_steps=100 --set trainer.run_dir=$d > $d.log 2>&1)
    /usr/bin/python3 - $d $mode $i <<'PY'
import json, sys
d, mode, i = sys.argv[1:]
t = [json.loads(l) for l in open(d + '/metrics.jsonl')]
tr = [r for r in t if r['type'] == 'train' and r['step'] > 100]
ms = sum(r['step_time_ms'] for r in tr) / len(tr)
print(f"round {i} {mode:8s} step ms {ms:.3f} peak rss MB {open(d + '.rss').read().strip()}")
PY
  done
done
rm -rf "$O"
