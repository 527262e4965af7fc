"""A small cumulus.Elastic loop for elastic_test.py's faults that the example does not have: a
model with batch norm (buffers), an exception raised by the step on chosen ranks, and ranks that
build different models. Synthetic data from a fixed seed, so it needs no dataset.

    cumulus-run --nproc-per-node 3 -- python3 elastic_worker.py --steps 60 [--raise-at S@R] ...

With --balance the members take shares by measured speed (cumulus.BatchShares); --slow R:MS makes
rank R a slower machine (MS ms more per sample of its share), and --ledger DIR has each rank write
the indices it trained, a line per step, to DIR/rank<R>.txt. --rates gives BatchShares rank R's
compute as 256 / (R + 1) samples per second instead of the measured one, so that its decisions do
not depend on the machine. --checkpoints DIR resumes from DIR's newest checkpoint, and --stop-at S
saves one there after step S and ends the launch. --run-dir DIR gives the loop a cumulus.Recorder
writing there (and BatchShares its balance records).

Prints `final parameters <sha256 of every parameter and buffer> at step N` on every rank.
"""
import argparse
import hashlib
import os
import sys
import time

import torch
import torch.nn.functional as F

import cumulus


def model_for(args, rank):
    hidden = args.hidden + (rank if args.differ else 0)
    layers = [torch.nn.Linear(16, hidden)]
    if args.batch_norm:
        layers.append(torch.nn.BatchNorm1d(hidden))
    layers += [torch.nn.ReLU(), torch.nn.Linear(hidden, 4)]
    return torch.nn.Sequential(*layers)


def digest(model):
    h = hashlib.sha256()
    for name, t in model.state_dict().items():
        h.update(name.encode())
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=48)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--batch-norm", action="store_true")
    parser.add_argument("--differ", action="store_true", help="each rank's model is wider")
    parser.add_argument("--print-membership", action="store_true")
    parser.add_argument("--wait-for", type=int, default=0,
                        help="after losing a worker, wait for N workers again")
    parser.add_argument("--raise-at", default="", metavar="STEP@RANK",
                        help="the step raises ValueError on that rank (RANK 'all': every rank)")
    parser.add_argument("--balance", action="store_true", help="batch shares by measured speed")
    parser.add_argument("--slow", default="", metavar="RANK:MS",
                        help="RANK takes MS ms more per sample (a slower machine)")
    parser.add_argument("--ledger", default="", metavar="DIR")
    parser.add_argument("--rates", action="store_true", help="rank R computes 256/(R+1) samples/s")
    parser.add_argument("--checkpoints", default="", metavar="DIR")
    parser.add_argument("--stop-at", type=int, default=0, metavar="STEP")
    parser.add_argument("--run-dir", default="", metavar="DIR")
    args = parser.parse_args()
    if args.stop_at and not args.checkpoints:
        parser.error("--stop-at saves a checkpoint: give --checkpoints DIR")
    torch.set_num_threads(1)
    rank = int(os.environ.get("RANK", "0"))

    generator = torch.Generator().manual_seed(7)
    x = torch.randn(960, 16, generator=generator)
    y = (x[:, :4].sum(1) > 0).long() + 2 * (x[:, 4:8].sum(1) > 0).long()
    torch.manual_seed(1)
    model = model_for(args, rank)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sampler = cumulus.DistributedSampler(len(x), args.batch, seed=1)
    config = f"hidden {args.hidden}, batch norm {args.batch_norm}, steps {args.steps}"
    elastic = cumulus.Elastic(model, optimizer, sampler=sampler, config=config,
                              wait_for_members=args.wait_for)
    recorder = (cumulus.Recorder(elastic, args.run_dir, total_steps=args.steps, console=False)
                if args.run_dir else None)

    def membership_changed(m):
        if args.print_membership:
            print(f"membership: epoch {m.epoch}, rank {m.rank} of {m.size}, step {m.step} "
                  f"({m.cause} in {m.seconds:.3f} s), pid {os.getpid()}", flush=True)
        if recorder:
            recorder.membership_changed()  # the re-forming's record now

    elastic.on_membership_change(membership_changed)
    raise_step, _, raise_rank = args.raise_at.partition("@")
    slow_rank, _, slow_ms = args.slow.partition(":")
    shares = (cumulus.BatchShares(elastic, args.batch, every_steps=10, recorder=recorder)
              if args.balance else None)
    ledger = open(os.path.join(args.ledger, f"rank{rank}.txt"), "w") if args.ledger else None
    checkpoints = cumulus.Checkpoints(args.checkpoints) if args.checkpoints else None
    resumed = elastic.resume(checkpoints) if checkpoints else 0
    if not elastic.start(resumed):
        return 0
    if shares and shares.restored:
        print(f"shares {'/'.join(map(str, shares.shares))} from the checkpoint", flush=True)
    while elastic.step < args.steps:
        trained = [0]

        def step():
            nxt = elastic.step + 1
            if raise_step and nxt == int(raise_step) and raise_rank in ("all", str(elastic.rank)):
                raise ValueError(f"the step's own bug at step {nxt} on rank {elastic.rank}")
            local = (shares.local_indices(sampler) if shares
                     else sampler.local_indices(elastic.rank, elastic.size))
            idx = torch.tensor(local, dtype=torch.int64)
            trained[0] = len(local)
            optimizer.zero_grad()
            if slow_rank == str(elastic.rank):
                time.sleep(len(local) * float(slow_ms) / 1000)  # the slower machine's compute
            elastic.backward(F.cross_entropy(model(x[idx]), y[idx], reduction="sum") / args.batch)
            if ledger:
                print(nxt, " ".join(map(str, local)), file=ledger, flush=True)
            optimizer.step()
            sampler.advance()

        elastic.train(step)
        if recorder:
            recorder.step(0.0, samples=trained[0], global_samples=args.batch)
        if shares and args.rates:
            shares.measure(trained[0], trained[0] * (elastic.rank + 1) / 256)
        if shares and shares.rebalance():
            print(f"shares {'/'.join(map(str, shares.shares))} after step {elastic.step}",
                  flush=True)
        if elastic.step == args.stop_at:
            if elastic.rank == 0:
                checkpoints.save(elastic.capture())
            elastic.wait_for_all()  # no rank ends the launch before the checkpoint is durable
            print(f"stopped at step {elastic.step}", flush=True)
            return 0
        if elastic.step < args.steps:
            elastic.boundary()
    elastic.finish()
    if recorder:
        recorder.finish(model=model, parameter_digest=digest(model))
    print(f"final parameters {digest(model)} at step {elastic.step}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
