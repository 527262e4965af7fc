#!/bin/bash
# The in-place goodput benchmark's scenario B again, in_place only, before and after alternately.
set -u
for side in before after; do
  T=/work/main; [ $side = before ] && T=/work/before
  echo "== ipg2 $side $(date +%T) $(cut -d' ' -f1-3 /proc/loadavg)"
  (cd $T && bench/in_place_goodput.sh --scenarios B --modes "in_place" --bin-dir $T/build/bin \
     --out /tmp/te/ipg2_$side.jsonl --logs /tmp/te/ipg2_logs_$side) > /tmp/te/ipg2_$side.log 2>&1 || echo "failed: $side"
done
echo "== done $(date +%T)"
