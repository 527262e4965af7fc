#!/usr/bin/env python3
"""Batch shares by measured speed from Python (cumulus.BatchShares): examples/python/elastic.py
under cumulus-run, 2 workers, rank 0 pinned to core 0 and rank 1 to core 1, which it shares with
--hogs busy loops (`yes`, pinned there too), so rank 1 computes at a fraction of rank 0's speed.
Each repetition runs the same training twice, back to back, the order alternating: equal shares,
and --balance.

    PYTHONPATH=build/python .venv/bin/python bench/python_balance.py [--reps 2] [--steps 600]
        [--hidden 512] [--batch 384] [--hogs 1] [--balance-every 20]
        [--out bench/results/python_balance.jsonl]

What it reports per run (a JSON line to --out and a table on stdout):
  samples_per_s  the mean of the train records' samples_per_sec over the last two thirds of the
                 steps (metrics.jsonl, written by the example's cumulus.Recorder): after the
                 shares settled
  ratio          balanced / equal, of the same repetition
  whole_run_ratio  the same of global samples / the loop's seconds (the "trained" record), every
                 step included: the first ones, at equal shares, before the first look
  shares         the balanced run's shares after each change (its balance records)
Both runs must end with the two workers' parameters equal (checked).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FINAL = re.compile(r"final parameters ([0-9a-f]+)")


def run(args, run_dir, balance):
    # Each worker pinned to the core of its local rank; the hogs share core 1 with rank 1.
    worker = 'exec taskset -c "$LOCAL_RANK" "$0" "$@"'
    command = [os.path.join(ROOT, "build", "bin", "cumulus-run"), "--nproc-per-node", "2", "--",
               "sh", "-c", worker, sys.executable,
               os.path.join(ROOT, "examples", "python", "elastic.py"), "--run-dir", run_dir,
               "--steps", str(args.steps), "--hidden", str(args.hidden), "--batch",
               str(args.batch), "--log-every", "10", "--checkpoint-every", str(args.steps)]
    if balance:
        command += ["--balance", "--balance-every", str(args.balance_every)]
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.path.join(ROOT, "build", "python"))
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=3600)
    finals = FINAL.findall(out.stdout)
    if out.returncode != 0 or len(finals) != 2 or finals[0] != finals[1]:
        sys.exit(f"python_balance: the run failed or the replicas differ:\n{out.stdout[-3000:]}"
                 f"\n{out.stderr[-2000:]}")
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    trains = [r for r in records if r["type"] == "train" and r["step"] > args.steps // 3]
    shares = [f"{r['step']}:{'/'.join(map(str, r['shares']))}" for r in records
              if r["type"] == "balance"]
    trained = next(r for r in records if r["type"] == "trained")
    whole = args.steps * args.batch / trained["seconds"]
    return statistics.mean(r["samples_per_sec"] for r in trains), shares, whole


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--batch", type=int, default=384)
    parser.add_argument("--hogs", type=int, default=1)
    parser.add_argument("--balance-every", type=int, default=20,
                        help="the balanced run's steps between looks (the example's default 20)")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "python_balance.jsonl"))
    args = parser.parse_args()
    hogs = [subprocess.Popen(["taskset", "-c", "1", "yes"], stdout=subprocess.DEVNULL)
            for _ in range(args.hogs)]
    rows = []
    try:
        for rep in range(args.reps):
            order = [False, True] if rep % 2 == 0 else [True, False]
            result = {}
            for balance in order:
                with tempfile.TemporaryDirectory() as tmp:
                    result[balance] = run(args, tmp, balance)
            row = {"rep": rep, "equal_samples_per_s": round(result[False][0], 1),
                   "balanced_samples_per_s": round(result[True][0], 1),
                   "ratio": round(result[True][0] / result[False][0], 3),
                   "whole_run_ratio": round(result[True][2] / result[False][2], 3),
                   "shares": result[True][1], "steps": args.steps, "hidden": args.hidden,
                   "batch": args.batch, "hogs": args.hogs, "balance_every": args.balance_every}
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "a") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    print("\n| rep | equal samples/s | balanced samples/s | ratio | whole run | shares |\n"
          "|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['rep']} | {r['equal_samples_per_s']} | {r['balanced_samples_per_s']} | "
              f"{r['ratio']}x | {r['whole_run_ratio']}x | {', '.join(r['shares'][:4])} |")


if __name__ == "__main__":
    main()
