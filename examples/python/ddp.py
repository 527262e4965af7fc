"""A plain PyTorch DistributedDataParallel script, run on Cumulus's collectives.

The only Cumulus lines are `import cumulus` and the backend's name; the rest is what any DDP
script does (DistributedSampler, DDP, an optimizer). Start it with any torchrun-style launcher:

    PYTHONPATH=build/python build/bin/cumulus-run --nproc-per-node 2 -- \\
        .venv/bin/python examples/python/ddp.py --epochs 1

It trains a Fashion-MNIST classifier (Debian's dataset-fashion-mnist) and prints, on rank 0,
the test accuracy after each epoch and a hash of the parameters: every rank holds the same.
"""
import argparse
import gzip
import hashlib
import os

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import cumulus  # noqa: F401  registers the "cumulus" backend

DATA = "/usr/share/datasets/fashion-mnist"


def load(split):
    with gzip.open(os.path.join(DATA, f"{split}-images-idx3-ubyte.gz")) as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784)
    with gzip.open(os.path.join(DATA, f"{split}-labels-idx1-ubyte.gz")) as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    x = torch.from_numpy(images.astype(np.float32) / 255.0)
    return TensorDataset((x - 0.2860) / 0.3530, torch.from_numpy(labels.astype(np.int64)))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()

    dist.init_process_group("cumulus")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ.get("LOCAL_WORLD_SIZE", "1"))))
    torch.manual_seed(0)

    train, test = load("train"), load("t10k")
    sampler = DistributedSampler(train, shuffle=True, seed=0)
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)
    model = DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        # Each rank scores its share of the test set; the counts are summed.
        model.eval()
        correct = torch.zeros(2)
        with torch.no_grad():
            for x, y in DataLoader(test, batch_size=1000,
                                   sampler=DistributedSampler(test, shuffle=False)):
                correct += torch.tensor([(model(x).argmax(1) == y).sum().item(), len(y)])
        dist.all_reduce(correct)
        if rank == 0:
            print(f"epoch {epoch + 1}: test accuracy {correct[0] / correct[1]:.4f} "
                  f"({world} ranks, backend {dist.get_backend()})", flush=True)

    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters()))
    print(f"rank {rank}: parameters sha256 {digest.hexdigest()[:16]}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
