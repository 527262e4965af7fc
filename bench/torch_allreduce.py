#!/usr/bin/env python3
"""One rank of a torch.distributed all-reduce sweep from Python: Gloo's beside cumulus-bench
(bench/compare_gloo.sh), or Gloo's against Cumulus's torch.distributed backend
(bench/compare_python.sh, --backend cumulus with PYTHONPATH=build/python). With --op all_to_all,
the same sweep of all_to_all_single: each rank sends `bytes` in all, bytes/world to each rank
(nccl-tests' convention; busbw = algbw × (world−1)/world).

Started with the env:// variables MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE (by
bench/compare_gloo.sh or bench/compare_python.sh, which need no torchrun). Measures exactly what cumulus-bench allreduce does:
one checked all-reduce (rank r gives r+1), warm-up, a barrier, `iters` timed all-reduces of
zeros; a row's time is the slowest rank's mean. Rank 0 prints one JSON line per size, with the
same keys as cumulus-bench's ("impl" is the backend).
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist


def iters_for(nbytes):  # same rule as bench/options.cc itersFor()
    return max(3, min(200, int(512 * 2**20 / nbytes)))


def byte_counts(sizes, factor):
    """"4096,65536" as it is, or "MIN:MAX" (4K, 64M, ...) in x`factor` steps, as cumulus-bench
    expands --sizes."""
    def count(text):
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)
    if ":" not in sizes:
        return [count(s) for s in sizes.split(",")]
    low, high = (count(s) for s in sizes.split(":"))
    out = []
    while low <= high:
        out.append(low)
        low *= factor
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", required=True,
                        help="comma-separated byte counts, or MIN:MAX such as 4K:64M")
    parser.add_argument("--factor", type=int, default=4, help="the step of MIN:MAX (4)")
    parser.add_argument("--iters", type=int, default=0)
    parser.add_argument("--backend", default="gloo", choices=["gloo", "cumulus"])
    parser.add_argument("--op", default="all_reduce", choices=["all_reduce", "all_to_all"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.backend == "cumulus":
        import cumulus  # noqa: F401 (registers the backend)
    dist.init_process_group(args.backend, init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    for nbytes in byte_counts(args.sizes, args.factor):
        if args.op == "all_to_all":
            nbytes -= nbytes % (4 * world)
            out = torch.empty(nbytes // 4, dtype=torch.float32)
            # Block j of rank r's input holds r * world + j: each rank receives j * world + r.
            t = (torch.arange(world, dtype=torch.float32) + rank * world).repeat_interleave(
                nbytes // 4 // world)
            dist.all_to_all_single(out, t)
            want = (torch.arange(world, dtype=torch.float32) * world + rank).repeat_interleave(
                nbytes // 4 // world)
            if not torch.equal(out, want):
                raise SystemExit(f"{args.backend}: wrong all_to_all_single result for {nbytes} bytes")

            def call():
                dist.all_to_all_single(out, t)
        else:
            t = torch.full((nbytes // 4,), float(rank + 1), dtype=torch.float32)
            dist.all_reduce(t)
            want = world * (world + 1) / 2
            if not bool((t == want).all()):
                raise SystemExit(f"{args.backend}: wrong all-reduce result for {nbytes} bytes")
            t.zero_()

            def call():
                dist.all_reduce(t)
        iters = args.iters or iters_for(nbytes)
        for _ in range(max(2, iters // 10)):
            call()
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            call()
        seconds = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64)
        dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
        if rank == 0:
            s = seconds.item()
            algbw = nbytes / s / 1e9
            name = args.backend
            factor = 2 * (world - 1) / world if args.op == "all_reduce" else (world - 1) / world
            print(json.dumps({"bench": args.op.replace("_", ""), "impl": name, "algo": name,
                              "ran": name, "world": world, "bytes": nbytes, "count": nbytes // 4,
                              "dtype": "float32", "iters": iters, "time_us": round(s * 1e6, 2),
                              "algbw_GBps": round(algbw, 4),
                              "busbw_GBps": round(algbw * factor, 4)}),
                  flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
