#!/bin/bash
# The benchmarks before and after the refactoring of the launcher and the trainer (2026-11-24),
# alternately on one idle machine.
#   BEFORE: a worktree of 7fc47db (the tree before the refactoring), AFTER: this tree; each with a
#   Release build of cumulus-bench, cumulus-run, cumulus-train and cumulus-config in build/.
#   git worktree add ../before 7fc47db && (cd ../before && cmake -S . -B build -G Ninja \
#     -DCMAKE_BUILD_TYPE=Release && cmake --build build --target cumulus-bench cumulus-run \
#     cumulus-train cumulus-config)
#   BEFORE=../before AFTER=. OUT=/tmp/b12 bench/results/refactor_before_after/run.sh
# Each side runs its own tree's bench scripts (bench/compare_gloo.sh, bench/compare_ddp.sh), so
# the Gloo and DDP figures of the same run are the reference for each.
set -u
B=$(cd "${BEFORE:?}" && pwd); A=$(cd "${AFTER:?}" && pwd); O=${OUT:?}; mkdir -p "$O"
for r in 1 2; do
  for side in before after; do
    T=$B; [ $side = after ] && T=$A
    echo "== gloo $side round $r $(date +%T) $(cut -d' ' -f1-3 /proc/loadavg)"
    (cd $T && bench/compare_gloo.sh --bin $T/build/bin/cumulus-bench --worlds "2 4" \
       --sizes 64K:16M --rounds 1 --out $O/gloo_${side}_$r.jsonl) > $O/gloo_${side}_$r.log 2>&1 \
      || echo "failed: $O/gloo_${side}_$r.log"
  done
done
for r in 1 2 3; do
  for side in before after; do
    T=$B; [ $side = after ] && T=$A
    echo "== ddp $side round $r $(date +%T) $(cut -d' ' -f1-3 /proc/loadavg)"
    (cd $T && bench/compare_ddp.sh --quick --worlds "1 2" --bin-dir $T/build/bin \
       --out $O/ddp_${side}_$r.jsonl) > $O/ddp_${side}_$r.log 2>&1 \
      || echo "failed: $O/ddp_${side}_$r.log"
  done
done
echo "== done $(date +%T)"
