#!/usr/bin/env bash
# Funnel, tree and ring (and auto) measured across hosts joined by shaped links: one rank per
# network-namespace host (launch/netns-cluster.sh), one cumulus-run per host, the worker being
# build/bin/cumulus-allreduce-probe. Writes, under OUT (default bench/results):
#   multihost.tsv  every point: algorithm world bytes iters median_s min_s predicted_s auto_pick busbw
#   multihost.png  time vs size per world size, measured points over the cost model's lines
#   multihost.md   the table (measured vs predicted), the targets and who wins where
#   multihost-cost-pP.json  the cost model used at P hosts (α measured there)
#
#   sudo bench/multihost/run.sh [--hosts "2 4 8"] [--sizes "4096 …"] [--rate-gbit 1] [--burst 4kb] [--out DIR]
#
# Needs root (namespaces) and the binaries built (cumulus-run, cumulus-allreduce-probe). Installs
# gnuplot-nox with apt-get when gnuplot is missing. The cluster is removed on exit and Ctrl-C.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
python=${CUMULUS_PYTHON:-$ROOT/.venv/bin/python}  # the project environment, with torch
BIN=${BIN:-$ROOT/build/bin}
HOSTS="2 4 8"
SIZES="4096 16384 65536 262144 1048576 4194304 16777216 67108864"
RATE_GBIT=1
BURST=4kb
OUT=$ROOT/bench/results
ALGOS=funnel,tree,ring,auto
while (($#)); do
  case "$1" in
    --hosts) HOSTS=$2; shift 2 ;;
    --sizes) SIZES=$2; shift 2 ;;
    --rate-gbit) RATE_GBIT=$2; shift 2 ;;
    --burst) BURST=$2; shift 2 ;;
    --algorithms) ALGOS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "run.sh: unknown flag $1" >&2; exit 2 ;;
  esac
done
for b in cumulus-run cumulus-allreduce-probe; do
  [[ -x $BIN/$b ]] || { echo "run.sh: $BIN/$b missing: cmake --build build --target $b" >&2; exit 2; }
done
if ! command -v gnuplot >/dev/null; then
  apt-get install -y gnuplot-nox >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y gnuplot-nox >/dev/null; }
fi

NS="$ROOT/launch/netns-cluster.sh --id ${CUMULUS_NETNS_ID:-9}"
mkdir -p "$OUT"
TSV=$OUT/multihost.tsv
WORK=$(mktemp -d /tmp/cumulus-multihost.XXXXXX)
trap '$NS down >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM
: > "$TSV.new"
: > "$TSV.load"
export CUMULUS_JOB_TOKEN=multihost-bench
PORT=29500

# One job: a cumulus-run per host, the probe as the worker; fails the script if any host fails.
job() {
  local P=$1 tag=$2; shift 2
  local pids=() rc=0 i
  for ((i = 0; i < P; i++)); do
    $NS run "$i" "$BIN/cumulus-run" --nnodes "$P" --node-rank "$i" --rdzv-endpoint "$ADDR0:$PORT" \
      --max-restarts 0 --log-dir "$WORK/logs" --run-id "$tag" --parameter-server -- \
      "$BIN/cumulus-allreduce-probe" --link-gbit "$RATE_GBIT" "$@" > "$WORK/$tag-n$i.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
  grep "probe:" "$WORK/$tag-n0.log" || true
  if ((rc != 0)); then
    echo "run.sh: $tag failed (exit $rc); logs:" >&2
    tail -n 20 "$WORK/$tag"-n*.log >&2
    exit 1
  fi
}

for P in $HOSTS; do
  $NS down >/dev/null 2>&1 || true
  $NS up "$P" --rate "${RATE_GBIT}gbit" --burst "$BURST"
  ADDR0=$($NS addr 0)
  # α is measured on this cluster first (β is the link's, γ the built-in), then every point is
  # predicted, and auto decided, with that model.
  echo "$P $(cut -d' ' -f1 /proc/loadavg)" >> "$TSV.load"
  job "$P" "cal$P" --calibrate "$OUT/multihost-cost-p$P.json"
  job "$P" "p$P" --cost-model "$OUT/multihost-cost-p$P.json" --algorithms "$ALGOS" \
    --sizes "${SIZES// /,}" --target-seconds 1.0 --max-iters 10 --out "$TSV.new"
  $NS down >/dev/null
done
# The CPU ceiling: the ring at the largest P and size on links 100× faster, so only the cores
# (shared by all ranks) limit it. Tells a link-bound shortfall from a CPU-bound one.
PMAX=${HOSTS##* }
SMAX=${SIZES##* }
: > "$TSV.ceiling"
$NS up "$PMAX" --rate "$((RATE_GBIT * 100))gbit" --burst "$BURST"
ADDR0=$($NS addr 0)
job "$PMAX" "ceiling" --algorithms ring --sizes "$SMAX" --target-seconds 1.0 --max-iters 5 \
  --out "$TSV.ceiling"
$NS down >/dev/null
mv "$TSV.ceiling" "$OUT/multihost-ceiling.tsv"
mv "$TSV.new" "$TSV"
mv "$TSV.load" "$OUT/multihost-load.txt"
NPROC=$(nproc)
"$python" "${REPORT:-$ROOT/bench/multihost/report.py}" "$TSV" "$OUT" "$RATE_GBIT" "$NPROC"
echo "run.sh: wrote $TSV, $OUT/multihost.md, $OUT/multihost.png"
