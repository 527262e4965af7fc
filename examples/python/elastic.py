"""A Python training loop that survives losing workers in place (cumulus.Elastic).

    PYTHONPATH=build/python build/bin/cumulus-run --nproc-per-node 3 -- \\
        .venv/bin/python examples/python/elastic.py --run-dir /tmp/elastic --steps 600 --wait-for 3

SIGKILL one worker: the other two go on as the same processes, the step in flight is trained
again, and cumulus-run's replacement joins at a step boundary, healed from a live peer. SIGTERM
to cumulus-run: every worker stops at one step boundary, rank 0 checkpoints, exit 75; the same
command resumes exactly. Each worker ends by printing a hash of its parameters: all the same.

The run's records (cumulus.Recorder) go to DIR/metrics.jsonl and DIR/tensorboard, and under
`cumulus-run --metrics-port P` to the live endpoint (http://localhost:P/metrics, the dashboard
at /): loss, samples/s, the goodput split with the time Elastic spent re-forming.

With --balance each worker takes a share of each global batch in proportion to its measured speed
(cumulus.BatchShares), so a worker on a busier machine no longer holds the others back; every
sample is still trained once, and a resume on as many workers takes the shares in force.

With --diloco H the workers train DiLoCo (cumulus.DiLoCo, docs/diloco.md): each its own replica for
H steps without communicating, then an outer sync; --fragments, --overlap and --outer-compression
give Streaming DiLoCo.

A Fashion-MNIST classifier (Debian's dataset-fashion-mnist) with a residual block and
LayerNorm, a label-smoothed cross entropy, SGD with momentum; Cumulus's DistributedSampler
splits each global batch over whoever the members are.
"""
import argparse
import gzip
import hashlib
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

import cumulus

DATA = "/usr/share/datasets/fashion-mnist"


def load(limit):
    with gzip.open(os.path.join(DATA, "train-images-idx3-ubyte.gz")) as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784)
    with gzip.open(os.path.join(DATA, "train-labels-idx1-ubyte.gz")) as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    if limit:
        images, labels = images[:limit], labels[:limit]
    return (torch.from_numpy(images.astype(np.float32) / 255.0),
            torch.from_numpy(labels.astype(np.int64)))


class Classifier(torch.nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.inp = torch.nn.Linear(784, hidden)
        self.block = torch.nn.Linear(hidden, hidden)
        self.norm = torch.nn.LayerNorm(hidden)
        self.out = torch.nn.Linear(hidden, 10)

    def forward(self, x):
        h = F.gelu(self.inp(x))
        return self.out(self.norm(h + F.gelu(self.block(h))))


def digest(model):
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def print_membership(m):
    line = (f"membership: epoch {m.epoch}, rank {m.rank} of {m.size}, step {m.step} "
            f"({m.cause} in {m.seconds:.3f} s), pid {os.getpid()}")
    if m.source >= 0:
        line += f", state from rank {m.source} to {','.join(map(str, m.healed))}"
    print(line, flush=True)
    if m.reason:
        print(f"re-formed after: {m.reason}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run-dir", required=True, help="checkpoints; the same DIR resumes")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--batch", type=int, default=96, help="global, split over the workers")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--smoothing", type=float, default=0.1)
    parser.add_argument("--checkpoint-every", type=int, default=100)
    parser.add_argument("--log-every", type=int, default=50)
    parser.add_argument("--limit", type=int, default=0, help="the first N images (0: all)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--wait-for", type=int, default=0,
                        help="after losing a worker, wait (up to 120 s) for N workers again")
    parser.add_argument("--balance", action="store_true",
                        help="batch shares by measured speed (cumulus.BatchShares)")
    parser.add_argument("--balance-every", type=int, default=20, metavar="N",
                        help="with --balance: steps between looks at the measured speeds")
    parser.add_argument("--diloco", type=int, default=0, metavar="H",
                        help="DiLoCo with H inner steps a round (0: every-step gradient sums)")
    parser.add_argument("--fragments", type=int, default=1)
    parser.add_argument("--overlap", action="store_true")
    parser.add_argument("--outer-compression", default="none", choices=["none", "bf16", "int8"])
    args = parser.parse_args()
    if args.balance_every < 1:
        parser.error(f"--balance-every must be >= 1, got {args.balance_every}")
    if args.balance and args.diloco:
        parser.error("--balance splits each global batch of the gradient sum; DiLoCo's replicas "
                     "train batches of their own: use one or the other")
    torch.set_num_threads(1)

    images, labels = load(args.limit)
    torch.manual_seed(args.seed)
    model = Classifier(args.hidden)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    sampler = cumulus.DistributedSampler(len(images), args.batch, seed=args.seed)
    config = (f"hidden {args.hidden}, batch {args.batch}, steps {args.steps}, lr {args.lr}, "
              f"smoothing {args.smoothing}, limit {args.limit}, seed {args.seed}, diloco "
              f"{args.diloco}/{args.fragments}/{args.overlap}/{args.outer_compression}")
    checkpoints = cumulus.Checkpoints(os.path.join(args.run_dir, "checkpoints"), keep=2)

    elastic = cumulus.Elastic(model, optimizer, sampler=sampler, config=config,
                              wait_for_members=args.wait_for)
    diloco = None
    if args.diloco:
        # Before resume() and start(): its state travels with checkpoints and heals.
        diloco = cumulus.DiLoCo(elastic, model.parameters(), inner_steps=args.diloco,
                                fragments=args.fragments, overlap=args.overlap,
                                outer_compression=args.outer_compression)
    elastic.on_membership_change(print_membership)
    # A launch member resumes from the newest checkpoint; a replacement takes a peer's state.
    resumed = 0 if elastic.joining else elastic.resume(checkpoints)
    if not elastic.start(resumed):
        print("the group finished before this worker was admitted", flush=True)
        return 0
    if resumed and elastic.rank == 0 and elastic.epoch == 0:
        print(f"resumed at step {resumed}", flush=True)
    # This script prints its own lines; the recorder writes the files and feeds the endpoint.
    # With DiLoCo its records carry the outer rounds and the time waited for them.
    recorder = cumulus.Recorder(elastic, args.run_dir, total_steps=args.steps,
                                log_every_steps=args.log_every, start_step=resumed,
                                console=False, diloco=diloco)
    shares = (cumulus.BatchShares(elastic, args.batch, every_steps=args.balance_every,
                                  recorder=recorder) if args.balance else None)
    if shares and shares.restored and elastic.rank == 0:
        print(f"batch shares {'/'.join(map(str, shares.shares))} from the checkpoint", flush=True)

    def save(preempted):
        c = elastic.capture()
        c.preempted = preempted
        return checkpoints.save(c)

    while elastic.step < args.steps:
        loss = [0.0]
        local = [0.0, 0]  # this worker's mean loss and samples, for the recorder

        def step():  # may run again, on the re-formed group, after a peer's failure
            idx = torch.tensor(shares.local_indices(sampler) if shares
                               else sampler.local_indices(elastic.rank, elastic.size),
                               dtype=torch.int64)
            if diloco:
                diloco.begin_step(elastic.step)  # the outer sync due before this step
            optimizer.zero_grad()
            logp = F.log_softmax(model(images[idx]), 1)
            per_sample = ((1 - args.smoothing) * -logp.gather(1, labels[idx, None]).squeeze(1)
                          - args.smoothing * logp.mean(1))
            local[0], local[1] = per_sample.mean().item(), len(idx)
            if diloco:
                (per_sample.sum() / len(idx)).backward()  # this worker's own mean, not summed
            else:
                elastic.backward(per_sample.sum() / args.batch)
            nxt = elastic.step + 1
            if nxt % args.log_every == 0 or nxt == args.steps:
                total = torch.tensor([per_sample.sum().item()], dtype=torch.float64)
                elastic.all_reduce(total)
                loss[0] = total.item() / args.batch
            if diloco:
                diloco.end_step()
            optimizer.step()  # after the step's last collective
            sampler.advance()

        elastic.train(step)
        done = elastic.step
        recorder.step(local[0], samples=local[1], lr=args.lr, global_samples=args.batch)
        if shares:
            shares.rebalance()
        if (done % args.log_every == 0 or done == args.steps) and elastic.rank == 0:
            print(f"step {done}/{args.steps} loss {loss[0]:.6f} workers {elastic.size}",
                  flush=True)
        if done == args.steps:
            break
        action = elastic.boundary()
        if action == cumulus.ElasticAction.LEAVE:
            print(f"preempted at step {done}: left the group, which trains on", flush=True)
            return cumulus.EXIT_PREEMPTED
        due = (done % args.checkpoint_every == 0 or
               action in (cumulus.ElasticAction.CHECKPOINT, cumulus.ElasticAction.STOP))
        while due and diloco and not elastic.at_boundary(diloco.gather_replicas):
            pass  # every member's replica into rank 0's checkpoint, for an exact resume
        stop = action == cumulus.ElasticAction.STOP
        # Timed by the recorder: its stall, and a mark on the dashboard's timeline.
        saved = recorder.checkpoint(lambda: save(stop)) if due and elastic.rank == 0 else ""
        if stop:
            elastic.wait_for_all()  # no worker exits before the checkpoint is durable
            recorder.preempted(saved)
            if elastic.rank == 0:
                print(f"preempted at step {done}, checkpoint {saved}", flush=True)
            return cumulus.EXIT_PREEMPTED
    # DiLoCo's last round, on whoever is left: every replica ends with the global parameters.
    # After a peer's failure part of the way it runs again on the re-formed group (sync_all
    # first agrees on what the cut-short round already landed).
    if diloco:
        elastic.at_end(diloco.sync_all)
    elastic.finish()
    if elastic.rank == 0:
        recorder.checkpoint(lambda: save(False))
    final = digest(model)
    recorder.finish(model=model, parameter_digest=final)  # the summary says both
    print(f"final parameters {final} at step {elastic.step}", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (cumulus.GroupError, cumulus.CheckpointError) as error:
        # A mistake a relaunch would repeat: exit 2 ends the job under cumulus-run, with this line.
        print(f"elastic.py: error: {error}", file=sys.stderr, flush=True)
        sys.exit(2)
