#!/bin/bash
set -u
for side in after before; do
  T=/work/main; [ $side = before ] && T=/work/before
  echo "== ipg $side $(date +%T) $(cut -d' ' -f1-3 /proc/loadavg)"
  (cd $T && bench/in_place_goodput.sh --scenarios B --modes "none in_place" --bin-dir $T/build/bin \
     --out /tmp/ba/ipg_$side.jsonl --logs /tmp/ba/ipg_logs_$side) > /tmp/ba/ipg_$side.log 2>&1 || echo "failed: $side"
done
echo "== done $(date +%T)"
