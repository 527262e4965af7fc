#!/bin/bash
# Cumulus vs torch.distributed/Gloo all-reduce on loopback, same sizes, same method
# (bench/torch_allreduce.py mirrors cumulus-bench allreduce), interleaved: for each world size
# and round, one cumulus sweep per algorithm, then one Gloo sweep, so that background load hits
# both alike. Each (impl, algo, world, size) keeps its best time over the rounds. Prints a table
# of our/Gloo time ratios (< 1 = we are faster) and busbw ratios, and keeps every JSON line.
#
#   bench/compare_gloo.sh [--sizes 4K:64M] [--factor 4] [--worlds "2 4"] [--rounds 2]
#                         [--algos "ring tree funnel"] [--bin build/bin/cumulus-bench]
#                         [--out bench/results/compare_gloo.jsonl] [--cost-model PATH]
#                         [--transports "auto tcp"] [--tcp-cost-model PATH]
# --transports runs every cumulus sweep once per CUMULUS_TRANSPORT value (auto|shm|unix|tcp;
# auto = shared memory between these same-host ranks, comm/transport.h); the tables show one
# column pair per (algorithm, transport actually used), so auto and shm land in the same column.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
sizes="4K:64M"; factor=4; worlds="2 4"; rounds=2; algos="ring tree funnel"
bin="$here/../build/bin/cumulus-bench"; out="$here/results/compare_gloo.jsonl"; model_args=()
transports="auto"; tcp_model_args=()
python=${CUMULUS_PYTHON:-$here/../.venv/bin/python}  # the project environment (its torch is the peer)
while [ $# -gt 0 ]; do
  case "$1" in
    --sizes) sizes="$2"; shift 2 ;;
    --factor) factor="$2"; shift 2 ;;
    --worlds) worlds="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --algos) algos="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --cost-model) model_args=(--cost-model "$2"); shift 2 ;;
    --tcp-cost-model) tcp_model_args=(--cost-model "$2"); shift 2 ;;
    --transports) transports="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "compare_gloo.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -x "$bin" ] || { echo "compare_gloo.sh: $bin missing; build cumulus-bench first" >&2; exit 1; }
mkdir -p "$(dirname "$out")"; : > "$out"

free_port() { "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

run_gloo() {  # world
  local world=$1 port pids=() rank
  port=$(free_port)
  for rank in $(seq 0 $((world - 1))); do
    MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$rank WORLD_SIZE=$world OMP_NUM_THREADS=1 \
      "$python" "$here/torch_allreduce.py" --sizes "$sizes" --factor "$factor" > "$tmp/gloo.$rank" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
  cat "$tmp/gloo.0"
}

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for world in $worlds; do
  for round in $(seq 1 "$rounds"); do
    for transport in $transports; do
      margs=("${model_args[@]}")
      [ "$transport" = tcp ] && [ ${#tcp_model_args[@]} -gt 0 ] && margs=("${tcp_model_args[@]}")
      for algo in $algos; do
        echo "# world $world round $round: cumulus $algo over $transport" >&2
        CUMULUS_TRANSPORT=$transport "$bin" allreduce --algo "$algo" --world-size "$world" \
          --sizes "$sizes" --factor "$factor" "${margs[@]}" | grep '^{' >> "$out"
      done
    done
    echo "# world $world round $round: gloo" >&2
    run_gloo "$world" | grep '^{' >> "$out"
  done
done

"$python" - "$out" <<'PY'
import json, sys
best = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    algo = r["algo"] if r["impl"] == "gloo" else f'{r["algo"]}/{r.get("transport", "tcp")}'
    key = (r["impl"], algo, r["world"], r["bytes"])
    if key not in best or r["time_us"] < best[key]["time_us"]:
        best[key] = r
worlds = sorted({k[2] for k in best}); sizes = sorted({k[3] for k in best})
algos = sorted({k[1] for k in best if k[0] == "cumulus"})
def fmt(n):
    for u, s in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << s and n % (1 << s) == 0: return f"{n >> s}{u}"
    return str(n)
for w in worlds:
    print(f"\n## world {w}: best time over rounds (us); ratio = ours / gloo time (< 1: faster)")
    head = f"| size | gloo us | " + " | ".join(f"{a} us | {a}/gloo" for a in algos) + " |"
    print(head); print("|" + "---|" * (2 + 2 * len(algos)))
    for n in sizes:
        g = best.get(("gloo", "gloo", w, n))
        if not g: continue
        cells = []
        for a in algos:
            c = best.get(("cumulus", a, w, n))
            cells += [f"{c['time_us']:.1f}", f"{c['time_us'] / g['time_us']:.2f}"] if c else ["-", "-"]
        print(f"| {fmt(n)} | {g['time_us']:.1f} | " + " | ".join(cells) + " |")
    g = best.get(("gloo", "gloo", w, 64 << 20))
    for a in algos:
        r = best.get(("cumulus", a, w, 64 << 20))
        if g and r and a.startswith("ring"):
            print(f"\n{a} busbw at 64M, world {w}: {r['busbw_GBps']:.3f} GB/s vs gloo "
                  f"{g['busbw_GBps']:.3f} GB/s = {r['busbw_GBps'] / g['busbw_GBps']:.2f}x")
PY
