#!/usr/bin/env python3
"""One optimizer step: Cumulus's flat optimizer against torch.optim, on the same shapes.

Run with the project environment's Python (it has torch), from the repository root after building:
  .venv/bin/python bench/optimizer_step.py [--rounds 3] [--threads 1 2] [--steps 50]

For each model (convnet: the built-in convnet's 8 tensors, 3.27M parameters; gpt: the 101
tensors, 25.5M parameters of models/gpt's "bench" preset), optimizer (SGD with Nesterov momentum
0.9 and weight decay 5e-4; AdamW lr 1e-3, weight decay 0.01) and thread count, each round runs,
one after the other, build/bin/cumulus-optimizer-bench (flat, then per-tensor) and torch.optim
in this process (foreach=False, then foreach=True), each timing --steps steps after --warmup.
The machine is shared and noisy, so the rounds alternate and the table shows the median over
rounds of each run's median step. ratio = Cumulus flat / the faster torch.optim variant.
"""
import argparse
import json
import statistics
import subprocess
import time

import torch


def convnet_shapes():
    return [[32, 1, 5, 5], [32], [64, 32, 5, 5], [64], [1024, 3136], [1024], [10, 1024], [10]]


def gpt_shapes(layers=8, dim=512, positions=128, vocab=256):
    shapes = [[vocab, dim], [positions, dim]]
    for _ in range(layers):
        shapes += [[dim], [dim], [3 * dim, dim], [3 * dim], [dim, dim], [dim], [dim], [dim],
                   [4 * dim, dim], [4 * dim], [dim, 4 * dim], [dim]]
    return shapes + [[dim], [dim], [vocab, dim]]


SHAPES = {"convnet": convnet_shapes, "gpt": gpt_shapes}


def make_optimizer(name, params, foreach):
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.01, momentum=0.9, nesterov=True, weight_decay=5e-4,
                               foreach=foreach)
    return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, foreach=foreach)


def time_torch(model, optimizer, threads, foreach, steps, warmup):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s) * 0.02) for s in SHAPES[model]()]
    for p in params:
        p.grad = torch.empty_like(p).normal_(0, 1e-3)
    opt = make_optimizer(optimizer, params, foreach)
    ms = []
    for s in range(warmup + steps):
        start = time.perf_counter()
        opt.step()
        end = time.perf_counter()
        if s >= warmup:
            ms.append((end - start) * 1000)
    return statistics.median(ms), sum(p.numel() for p in params), len(params)


def time_cumulus(binary, model, optimizer, threads, impl, steps, warmup):
    out = subprocess.run([binary, "--model", model, "--optimizer", optimizer, "--impl", impl,
                          "--threads", str(threads), "--steps", str(steps), "--warmup",
                          str(warmup)], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cumulus", default="build/bin/cumulus-optimizer-bench")
    parser.add_argument("--models", nargs="+", default=["convnet", "gpt"], choices=sorted(SHAPES))
    parser.add_argument("--optimizers", nargs="+", default=["sgd", "adamw"])
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()

    print("torch %s; median over %d rounds of the median of %d steps, in ms"
          % (torch.__version__, args.rounds, args.steps))
    print("| model | optimizer | threads | Cumulus flat | Cumulus per-tensor | "
          "torch.optim foreach=False | torch.optim foreach=True | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for model in args.models:
        for optimizer in args.optimizers:
            for threads in args.threads:
                runs = {"flat": [], "per-tensor": [], "torch": [], "torch foreach": []}
                for _ in range(args.rounds):
                    for impl in ("flat", "per-tensor"):
                        r = time_cumulus(args.cumulus, model, optimizer, threads, impl,
                                         args.steps, args.warmup)
                        runs[impl].append(r["median_ms"])
                        cumulus_numel = r["params"]
                    for key, foreach in (("torch", False), ("torch foreach", True)):
                        ms, numel, _ = time_torch(model, optimizer, threads, foreach,
                                                  args.steps, args.warmup)
                        runs[key].append(ms)
                    if numel != cumulus_numel:
                        raise SystemExit("shape lists differ: %d vs %d parameters"
                                         % (numel, cumulus_numel))
                med = {k: statistics.median(v) for k, v in runs.items()}
                ratio = med["flat"] / min(med["torch"], med["torch foreach"])
                print("| %s | %s | %d | %.2f | %.2f | %.2f | %.2f | %.2f |"
                      % (model, optimizer, threads, med["flat"], med["per-tensor"], med["torch"],
                         med["torch foreach"], ratio), flush=True)


if __name__ == "__main__":
    main()
