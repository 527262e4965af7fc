#!/bin/bash
# Before (9682a00, a worktree at /work/before) and after (this tree), alternately: compare_ddp
# --quick (mlp, convnet, gpt at 1 and 2 workers) three rounds a side, then the in-place goodput
# benchmark's scenario B once a side. Results in /tmp/te, copied here afterwards.
set -u
B=/work/before; A=/work/main; O=/tmp/te
for r in 1 2 3; do
  for side in before after; do
    T=$B; [ $side = after ] && T=$A
    echo "== ddp $side round $r $(date +%T) $(cut -d' ' -f1-3 /proc/loadavg)"
    (cd $T && bench/compare_ddp.sh --quick --experiments "mlp convnet gpt" --worlds "1 2" --bin-dir $T/build/bin \
       --out $O/ddp_${side}_$r.jsonl) > $O/ddp_${side}_$r.log 2>&1 || echo "failed: $O/ddp_${side}_$r.log"
  done
done
for side in after before; do
  T=$A; [ $side = before ] && T=$B
  echo "== ipg $side $(date +%T) $(cut -d' ' -f1-3 /proc/loadavg)"
  (cd $T && bench/in_place_goodput.sh --scenarios B --modes "none in_place" --bin-dir $T/build/bin \
     --out $O/ipg_$side.jsonl --logs $O/ipg_logs_$side) > $O/ipg_$side.log 2>&1 || echo "failed: $side"
done
echo "== done $(date +%T)"
