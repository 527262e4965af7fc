#!/usr/bin/env bash
# The two-level all-reduce against the flat ring across hosts that hold several ranks each:
# HOSTS network-namespace hosts (launch/netns-cluster.sh) on shaped links, LOCAL ranks on each
# (cumulus-run --nproc-per-node LOCAL; ranks of one namespace share memory, hosts meet over TCP),
# the worker being build/bin/cumulus-allreduce-probe. Writes, under OUT (default bench/results):
#   hierarchical.tsv          every point, the probe's columns: algorithm world bytes iters
#                             median_s min_s predicted_s auto_pick busbw_MBps
#   hierarchical-summary.tsv  per size: each algorithm's measured median and predicted time, and
#                             ring / hierarchical measured and predicted
#   hierarchical-cost.json    the cost model used: α calibrated with one rank per host (the
#                             link's), β the link's rate, γ and the local α_l, β_l built in
#
#   sudo bench/multihost/hierarchical.sh [--hosts 4] [--local 2] [--sizes "4096 …"]
#        [--rate-gbit 1] [--burst 4kb] [--algorithms hierarchical,ring] [--out DIR]
#
# Needs root (namespaces) and the binaries built (cumulus-run, cumulus-allreduce-probe). The
# cluster is removed on exit and Ctrl-C.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${BIN:-$ROOT/build/bin}
HOSTS=4
LOCAL=2
SIZES="4096 16384 65536 262144 1048576 4194304 16777216 67108864"
RATE_GBIT=1
BURST=4kb
OUT=$ROOT/bench/results
ALGOS=hierarchical,ring
while (($#)); do
  case "$1" in
    --hosts) HOSTS=$2; shift 2 ;;
    --local) LOCAL=$2; shift 2 ;;
    --sizes) SIZES=$2; shift 2 ;;
    --rate-gbit) RATE_GBIT=$2; shift 2 ;;
    --burst) BURST=$2; shift 2 ;;
    --algorithms) ALGOS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "hierarchical.sh: unknown flag $1" >&2; exit 2 ;;
  esac
done
for b in cumulus-run cumulus-allreduce-probe; do
  [[ -x $BIN/$b ]] || { echo "hierarchical.sh: $BIN/$b missing: cmake --build build --target $b" >&2; exit 2; }
done

NS="$ROOT/launch/netns-cluster.sh --id ${CUMULUS_NETNS_ID:-9}"
mkdir -p "$OUT"
TSV=$OUT/hierarchical.tsv
COST=$OUT/hierarchical-cost.json
WORK=$(mktemp -d /tmp/cumulus-hierarchical.XXXXXX)
trap '$NS down >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM
export CUMULUS_JOB_TOKEN=hierarchical-bench
PORT=29500

# One job: a cumulus-run per host with NPROC probes each; fails the script if any host fails.
job() {
  local nproc=$1 tag=$2; shift 2
  local pids=() rc=0 i
  for ((i = 0; i < HOSTS; i++)); do
    $NS run "$i" "$BIN/cumulus-run" --nnodes "$HOSTS" --nproc-per-node "$nproc" --node-rank "$i" \
      --rdzv-endpoint "$ADDR0:$PORT" --max-restarts 0 --log-dir "$WORK/logs" --run-id "$tag" -- \
      "$BIN/cumulus-allreduce-probe" --link-gbit "$RATE_GBIT" "$@" > "$WORK/$tag-n$i.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
  grep "probe:" "$WORK/$tag-n0.log" || true
  if ((rc != 0)); then
    echo "hierarchical.sh: $tag failed (exit $rc); logs:" >&2
    tail -n 20 "$WORK/$tag"-n*.log >&2
    exit 1
  fi
}

$NS down >/dev/null 2>&1 || true
$NS up "$HOSTS" --rate "${RATE_GBIT}gbit" --burst "$BURST"
ADDR0=$($NS addr 0)
echo "hierarchical.sh: $HOSTS hosts x $LOCAL ranks, ${RATE_GBIT} Gbit/s, load $(cut -d' ' -f1 /proc/loadavg)"
# α of the link, with one rank per host (no local hops in the fit); then every point is
# predicted with it on the HOSTS x LOCAL topology the ranks find at their rendezvous.
job 1 "cal" --calibrate "$COST"
: > "$TSV.new"
job "$LOCAL" "measure" --cost-model "$COST" --algorithms "$ALGOS" --sizes "${SIZES// /,}" \
  --target-seconds 1.0 --max-iters 10 --out "$TSV.new"
mv "$TSV.new" "$TSV"

# Per size: measured median and prediction of each algorithm, and the ring/hierarchical ratios.
awk -F'\t' -v algos="$ALGOS" '
  BEGIN { n = split(algos, names, ","); }
  { med[$1, $3] = $5; pred[$1, $3] = $7; if (!($3 in seen)) { seen[$3] = 1; order[++sizes] = $3 } }
  END {
    printf "bytes";
    for (a = 1; a <= n; a++) printf "\t%s_median_s\t%s_predicted_s", names[a], names[a];
    has = (("ring", order[1]) in med) && (("hierarchical", order[1]) in med);
    if (has) printf "\tring/hier_measured\tring/hier_predicted";
    printf "\n";
    for (s = 1; s <= sizes; s++) {
      b = order[s]; printf "%s", b;
      for (a = 1; a <= n; a++) printf "\t%s\t%s", med[names[a], b], pred[names[a], b];
      if (has) printf "\t%.3f\t%.3f", med["ring", b] / med["hierarchical", b],
                                        pred["ring", b] / pred["hierarchical", b];
      printf "\n";
    }
  }' "$TSV" > "$OUT/hierarchical-summary.tsv"
column -t -s$'\t' "$OUT/hierarchical-summary.tsv" 2>/dev/null || cat "$OUT/hierarchical-summary.tsv"
echo "hierarchical.sh: wrote $TSV, $OUT/hierarchical-summary.tsv, $COST"
