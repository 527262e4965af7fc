#!/usr/bin/python3
"""Markdown tables from cumulus-bench JSON lines (a raw log of bench/results/run_all.sh):
  - scaling: time vs world size at fixed sizes, per algorithm;
  - model: measured / predicted (cost model column) for every row from --min-bytes up.
Usage: bench/summarize.py RAW_LOG [--min-bytes 1048576]
"""
import argparse
import json


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

    # Scaling: the 1M:16M sweeps at several world sizes (the first row per key: run_all.sh runs
    # them before the p = 4 full sweep).
    scale = {}
    for r in rows:
        scale.setdefault((r["algo"], r["bytes"], r["world"]), r)
    worlds = sorted({k[2] for k in scale})
    print("### time (us) vs world size\n")
    print("| algo | size | " + " | ".join(f"p={w}" for w in worlds) + " | t(p_max)/t(2) |")
    print("|---|---|" + "---|" * (len(worlds) + 1))
    for algo in ("funnel", "tree", "ring"):
        for n in (1 << 20, 16 << 20):
            cells = [scale.get((algo, n, w)) for w in worlds]
            if sum(c is not None for c in cells) < 3:
                continue
            text = [f"{c['time_us']:.0f}" if c else "-" for c in cells]
            ratio = (cells[-1]["time_us"] / cells[0]["time_us"]) if cells[0] and cells[-1] else 0
            print(f"| {algo} | {fmt(n)} | " + " | ".join(text) + f" | {ratio:.1f} |")

    print(f"\n### measured / cost-model prediction, sizes >= {fmt(args.min_bytes)}\n")
    print("| algo (ran) | world | size | measured us | model us | ratio | within ±30% |")
    print("|---|---|---|---|---|---|---|")
    inside = total = 0
    for r in rows:
        if r["bytes"] < args.min_bytes or r["model_us"] <= 0:
            continue
        ratio = r["time_us"] / r["model_us"]
        ok = 0.7 <= ratio <= 1.3
        inside += ok
        total += 1
        print(f"| {r['algo']} ({r['ran']}) | {r['world']} | {fmt(r['bytes'])} | "
              f"{r['time_us']:.0f} | {r['model_us']:.0f} | {ratio:.2f} | {'yes' if ok else 'no'} |")
    print(f"\n{inside} of {total} rows within ±30%.")


if __name__ == "__main__":
    main()
