#!/bin/bash
set -u
B=/work/before; A=/work/main; O=/tmp/ba
for r in 1 2 3; do
  for side in before after; do
    T=$B; [ $side = after ] && T=$A
    echo "== ddp $side round $r $(date +%T) $(cut -d' ' -f1-3 /proc/loadavg)"
    (cd $T && bench/compare_ddp.sh --quick --experiments "mlp convnet gpt" --worlds "1 2" --bin-dir $T/build/bin \
       --out $O/ddp_${side}_$r.jsonl) > $O/ddp_${side}_$r.log 2>&1 || echo "failed: $O/ddp_${side}_$r.log"
  done
done
echo "== done $(date +%T)"
