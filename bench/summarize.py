#!/usr/bin/env python3
"""Markdown tables from cumulus-bench JSON lines (a raw log of bench/results/run_all.sh):
  - scaling: time vs world size at fixed sizes, per algorithm and transport;
  - model: measured / predicted (cost model column) for every row from --min-bytes up, with the
    share within ±30% per transport and algorithm;
  - auto: at each (transport, world, size) measured with both ring and tree, whether the cost
    model's pick (the smaller prediction, which is what `auto` runs) was the faster one.
Every configuration (transport, algorithm, world, size) counts once, at the best of its runs in the
log: other load on a shared machine only ever slows a run down, so the fastest is the best estimate
of what the machine does (the same statistic `cumulus-bench calibrate` fits the model to).
Usage: bench/summarize.py RAW_LOG [--min-bytes 1048576]
"""
import argparse
import json
from collections import defaultdict


def fmt(n):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("log")
    parser.add_argument("--min-bytes", type=int, default=1 << 20)
    args = parser.parse_args()
    rows = [json.loads(l) for l in open(args.log) if l.startswith('{"bench":"allreduce"')]
    rows = [r for r in rows if r["impl"] == "cumulus"]
    for r in rows:
        r.setdefault("transport", "tcp")
    best = {}
    for r in rows:
        key = (r["transport"], r["algo"], r["ran"], r["world"], r["bytes"])
        if key not in best or r["time_us"] < best[key]["time_us"]:
            best[key] = r
    rows = sorted(best.values(), key=lambda r: (r["transport"] != "shm", r["algo"] == "auto",
                                                 r["world"], r["bytes"], r["algo"]))

    scale = {}
    for r in rows:
        scale.setdefault((r["transport"], r["algo"], r["bytes"], r["world"]), r)
    for transport in sorted({k[0] for k in scale}):
        worlds = sorted({k[3] for k in scale if k[0] == transport})
        print(f"### time (us) vs world size, {transport}\n")
        print("| algo | size | " + " | ".join(f"p={w}" for w in worlds) + " | t(p_max)/t(2) |")
        print("|---|---|" + "---|" * (len(worlds) + 1))
        for algo in ("funnel", "tree", "ring"):
            for n in (1 << 20, 16 << 20, 64 << 20):
                cells = [scale.get((transport, algo, n, w)) for w in worlds]
                if sum(c is not None for c in cells) < 3:
                    continue
                text = [f"{c['time_us']:.0f}" if c else "-" for c in cells]
                ratio = cells[-1]["time_us"] / cells[0]["time_us"] if cells[0] and cells[-1] else 0
                print(f"| {algo} | {fmt(n)} | " + " | ".join(text) + f" | {ratio:.1f} |")
        print()

    print(f"### measured / cost-model prediction, sizes >= {fmt(args.min_bytes)}\n")
    print("| transport | algo (ran) | world | size | measured us | model us | ratio | within ±30% |")
    print("|---|---|---|---|---|---|---|---|")
    inside = defaultdict(int)
    total = defaultdict(int)
    for r in rows:
        if r["bytes"] < args.min_bytes or r["model_us"] <= 0:
            continue
        ratio = r["time_us"] / r["model_us"]
        ok = 0.7 <= ratio <= 1.3
        key = (r["transport"], r["ran"])
        inside[key] += ok
        total[key] += 1
        print(f"| {r['transport']} | {r['algo']} ({r['ran']}) | {r['world']} | {fmt(r['bytes'])} | "
              f"{r['time_us']:.0f} | {r['model_us']:.0f} | {ratio:.2f} | {'yes' if ok else 'no'} |")
    print()
    for key in sorted(total):
        print(f"- {key[0]} {key[1]}: {inside[key]} of {total[key]} rows within ±30%")
    print(f"- all: {sum(inside.values())} of {sum(total.values())} rows within ±30%")

    # auto: the model's pick vs the measured winner, ring vs tree (auto has no funnel here).
    cells = {}
    for r in rows:
        if r["algo"] in ("ring", "tree"):
            cells.setdefault((r["transport"], r["world"], r["bytes"]), {}).setdefault(r["algo"], r)
    right = count = 0
    misses = []
    for key, c in sorted(cells.items()):
        if len(c) < 2:
            continue
        fastest = min(c, key=lambda a: c[a]["time_us"])
        picked = min(c, key=lambda a: c[a]["model_us"])
        count += 1
        if fastest == picked:
            right += 1
        else:
            loss = c[picked]["time_us"] / c[fastest]["time_us"]
            misses.append(f"{key[0]} p={key[1]} {fmt(key[2])}: picks {picked}, {fastest} was "
                          f"faster ({loss:.2f}x slower than the best)")
    print(f"\n### auto: the model picks the faster of ring and tree at {right} of {count} "
          f"measured points\n")
    for m in misses:
        print(f"- {m}")


if __name__ == "__main__":
    main()
