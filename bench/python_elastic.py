#!/usr/bin/env python3
"""Recovery in place from Python: examples/python/elastic.py under cumulus-run, 3 workers.

    PYTHONPATH=build/python .venv/bin/python bench/python_elastic.py [--rounds 2] [--kills 3]
        [--steps 3000] [--hidden 512] [--batch 384] [--out bench/results/python_backend/elastic.jsonl]

Each round runs the same training twice, in alternating order: once uninterrupted, once with
`--kills` SIGKILLs of a worker other than rank 0 (the member of rank 1 in the newest membership),
spread evenly over the steps. The example prints every step on rank 0 (--log-every 1); each line
is timestamped as it arrives through cumulus-run's pipe.

  kill -> next step: from the SIGKILL to the first step line past the last step seen before it
                     (the re-forming, the step trained again, one step on the survivors);
  goodput:           the uninterrupted run's wall time / the killed run's, same steps, same work
                     (the survivors train with fewer workers until the replacement is admitted;
                     --wait-for 0, the example's default).

Both runs must end with the three workers' parameters equal (checked).
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MEMBERSHIP = re.compile(r"\[rank\d\] membership: epoch (\d+), rank (\d+) of \d+, .*pid (\d+)")
STEP = re.compile(r"\[rank0\] step (\d+)/")
FINAL = re.compile(r"final parameters ([0-9a-f]+)")


def run(args, run_dir, kills):
    command = [os.path.join(ROOT, "build", "bin", "cumulus-run"), "--nproc-per-node", "3",
               "--max-restarts", str(kills + 1), "--", sys.executable,
               os.path.join(ROOT, "examples", "python", "elastic.py"), "--run-dir", run_dir,
               "--steps", str(args.steps), "--hidden", str(args.hidden), "--batch",
               str(args.batch), "--log-every", "1", "--checkpoint-every", str(args.steps)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.path.join(ROOT, "build", "python")
    start = time.monotonic()
    p = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    members = {}  # (epoch, rank) -> pid
    last_step, kill_at, pending, recoveries, finals = 0, [], None, [], []
    targets = [args.steps * (k + 1) // (kills + 1) for k in range(kills)]
    for line in p.stdout:
        now = time.monotonic()
        m = MEMBERSHIP.search(line)
        if m:
            members[(int(m[1]), int(m[2]))] = int(m[3])
        m = STEP.search(line)
        if m:
            step = int(m[1])
            if pending is not None and step > pending[1]:
                recoveries.append(now - pending[0])
                pending = None
            last_step = step
            if targets and step >= targets[0] and pending is None:
                epoch = max(e for e, _ in members)
                victim = members.get((epoch, 1))
                if victim:
                    os.kill(victim, signal.SIGKILL)
                    pending = (time.monotonic(), last_step)
                    kill_at.append(last_step)
                    targets.pop(0)
        m = FINAL.search(line)
        if m:
            finals.append(m[1])
    p.wait()
    wall = time.monotonic() - start
    if p.returncode != 0 or len(finals) != 3 or len(set(finals)) != 1:
        sys.exit(f"python_elastic.py: run failed (exit {p.returncode}, finals {finals})")
    return {"kills": len(kill_at), "killed_at_steps": kill_at, "wall_seconds": wall,
            "kill_to_next_step_seconds": recoveries, "digest": finals[0]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--batch", type=int, default=384)
    parser.add_argument("--out", default=os.path.join(HERE, "results", "python_backend",
                                                      "elastic.jsonl"))
    args = parser.parse_args()
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    rows = []
    with open(args.out, "w") as out, tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = [0, args.kills] if r % 2 == 0 else [args.kills, 0]
            for kills in order:
                row = run(args, os.path.join(tmp, f"r{r}k{kills}"), kills)
                row.update(round=r + 1, steps=args.steps, hidden=args.hidden, batch=args.batch)
                print(json.dumps(row), file=out, flush=True)
                print(f"# round {r + 1}: {kills} kills: {row['wall_seconds']:.2f} s, kill -> next "
                      f"step {[round(x, 3) for x in row['kill_to_next_step_seconds']]}",
                      file=sys.stderr, flush=True)
                rows.append(row)
    plain = [x for x in rows if x["kills"] == 0]
    killed = [x for x in rows if x["kills"] > 0]
    goodputs = [p["wall_seconds"] / k["wall_seconds"] for p, k in zip(plain, killed)]
    recoveries = [s for k in killed for s in k["kill_to_next_step_seconds"]]
    print(f"uninterrupted: {statistics.median(x['wall_seconds'] for x in plain):.2f} s; "
          f"with {args.kills} SIGKILLs: {statistics.median(x['wall_seconds'] for x in killed):.2f} s"
          f" (medians of {args.rounds} rounds)")
    print(f"goodput per round: {', '.join(f'{g:.1%}' for g in goodputs)}")
    print(f"kill -> next step: median {statistics.median(recoveries):.3f} s, max "
          f"{max(recoveries):.3f} s over {len(recoveries)} kills")


if __name__ == "__main__":
    main()
