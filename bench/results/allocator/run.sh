#!/bin/bash
# The allocator A/B: one build, cumulus-train with glibc's own malloc thresholds
# (CUMULUS_MALLOC=default) and with the training setting (unset: cumulus-train's default), each
# against PyTorch DDP in the same compare_ddp.sh run; two rounds, alternating which goes first.
# Then the resident memory of one long convnet run per setting, sampled every second (rss.sh).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"; root="$(cd "$here/../../.." && pwd)"
cd "$root"
for round in 1 2; do
  order="default training"; [ "$round" = 2 ] && order="training default"
  for mode in $order; do
    echo "# round $round: CUMULUS_MALLOC=$mode $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)" >&2
    CUMULUS_MALLOC=$mode bench/compare_ddp.sh --quick --experiments "mlp convnet gpt" \
      --worlds "1 2" --out "$here/$mode-$round.jsonl" > "$here/$mode-$round.txt" 2>/dev/null
  done
done
