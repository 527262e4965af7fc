"""One rank of a test of what users stack on a backend (tests/python/stack_test.py starts
WORLD_SIZE of them): DDP's options and hooks, FSDP2, ZeroRedundancyOptimizer, a 2-D DeviceMesh
with DTensor, torch.distributed.checkpoint, and a torch.compile'd model under DDP.

    stack_worker.py CASE BACKEND OUT

Each case trains or computes on the backend BACKEND ("cumulus" or "gloo") and writes what rank 0
ends with to OUT (torch.save of a dict of tensors); the driver compares it with one process
computing the same thing alone, and with Gloo.
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

import cumulus  # noqa: F401  registers the backend

GLOBAL_BATCH = 24
STEPS = 4


class Net(nn.Module):
    """Two layers and a branch that forward never uses (find_unused_parameters)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(5)
        self.first = nn.Linear(16, 32)
        self.second = nn.Linear(32, 8)
        self.unused = nn.Linear(4, 4)

    def forward(self, x):
        return self.second(torch.relu(self.first(x)))


def batches(steps=STEPS):
    g = torch.Generator().manual_seed(17)
    for _ in range(steps):
        yield torch.randn(GLOBAL_BATCH, 16, generator=g), torch.randint(0, 8, (GLOBAL_BATCH,),
                                                                        generator=g)


def shard(x, y):
    """This rank's equal slice of a global batch."""
    r, w = dist.get_rank(), dist.get_world_size()
    n = GLOBAL_BATCH // w
    return x[r * n:(r + 1) * n], y[r * n:(r + 1) * n]


def loss_of(model, x, y):
    return nn.functional.cross_entropy(model(x), y)


def save(out, tensors):
    if dist.get_rank() == 0:
        torch.save({k: v.detach().clone() for k, v in tensors.items()}, out)


def train_ddp(make_ddp, make_optimizer=lambda p: torch.optim.SGD(p, lr=0.1), accumulate=1):
    """DDP over this rank's shards; `accumulate` micro-batches per step, all but the last under
    no_sync(). Returns the module's parameters."""
    model = Net()
    ddp = make_ddp(model)
    optimizer = make_optimizer(ddp.parameters())
    for x, y in batches():
        x, y = shard(x, y)
        micro = x.shape[0] // accumulate
        for k in range(accumulate):
            xs, ys = x[k * micro:(k + 1) * micro], y[k * micro:(k + 1) * micro]
            if k + 1 < accumulate:
                with ddp.no_sync():
                    (loss_of(ddp, xs, ys) / accumulate).backward()
            else:
                (loss_of(ddp, xs, ys) / accumulate).backward()
        optimizer.step()
        optimizer.zero_grad()
    return dict(model.named_parameters())


def ddp_variants(out):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP
    results = {}
    for name, make in {
        "static_graph": lambda m: DDP(m, static_graph=True),
        "find_unused": lambda m: DDP(m, find_unused_parameters=True),
        "bf16_hook": lambda m: hooked(DDP(m, find_unused_parameters=True),
                                      default_hooks.bf16_compress_hook),
        "allreduce_hook": lambda m: hooked(DDP(m, find_unused_parameters=True),
                                           default_hooks.allreduce_hook),
    }.items():
        for k, v in train_ddp(make).items():
            results[f"{name}.{k}"] = v
    for k, v in train_ddp(lambda m: DDP(m, find_unused_parameters=True), accumulate=2).items():
        results[f"no_sync.{k}"] = v
    save(out, results)


def hooked(ddp, hook):
    ddp.register_comm_hook(None, hook)
    return ddp


def zero(out):
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP
    params = train_ddp(
        lambda m: DDP(m, find_unused_parameters=True),
        make_optimizer=lambda p: ZeroRedundancyOptimizer(p, optimizer_class=torch.optim.Adam,
                                                         lr=0.01))
    save(out, params)


def fsdp2(out):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    model = Net()
    fully_shard(model.first, mesh=mesh)
    fully_shard(model.second, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for x, y in batches():
        x, y = shard(x, y)
        loss_of(model, x, y).backward()
        optimizer.step()
        optimizer.zero_grad()
    # The parameters are DTensors sharded over the mesh: gather each whole.
    save(out, {k: p.full_tensor() for k, p in model.named_parameters()})


def mesh_2d(out):
    """A 2 × 2 mesh: a matrix sharded by rows over one dimension and by columns over the other,
    redistributed and multiplied; full_tensor() is what one process computes."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    mesh = init_device_mesh("cpu", (2, dist.get_world_size() // 2), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(9)
    a, b = torch.randn(8, 6), torch.randn(6, 4)
    da = distribute_tensor(a, mesh, [Shard(0), Shard(1)])
    db = distribute_tensor(b, mesh, [Replicate(), Shard(0)])
    product = (da @ db).redistribute(mesh, [Replicate(), Replicate()])
    rows = da.redistribute(mesh, [Replicate(), Replicate()]).sum(dim=1)
    tp_group = mesh.get_group("tp")
    t = torch.full((3,), float(dist.get_rank()))
    dist.all_reduce(t, group=tp_group)  # a collective on the mesh's sub-group
    save(out, {"product": product.to_local(), "rows": rows.to_local(), "tp_sum": t})


def dcp_save(out):
    """A sharded state saved by torch.distributed.checkpoint from this world size."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    torch.manual_seed(21)
    weight = distribute_tensor(torch.randn(12, 5), mesh, [Shard(0)])
    dcp.save({"weight": weight, "step": torch.tensor(7)}, checkpoint_id=out)


def dcp_load(out):
    """The checkpoint loaded by another world size, resharded to it."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    state = {"weight": distribute_tensor(torch.zeros(12, 5), mesh, [Shard(0)]),
             "step": torch.tensor(0)}
    dcp.load(state, checkpoint_id=out)
    save(out + ".loaded.pt", {"weight": state["weight"].full_tensor(), "step": state["step"]})


def compiled_ddp(out):
    from torch.nn.parallel import DistributedDataParallel as DDP

    def make(model):
        return torch.compile(DDP(model, find_unused_parameters=True), backend="aot_eager")
    save(out, train_ddp(make))


if __name__ == "__main__":
    case, backend, out = sys.argv[1:4]
    torch.set_num_threads(1)
    dist.init_process_group(backend)
    {"ddp_variants": ddp_variants, "zero": zero, "fsdp2": fsdp2, "mesh_2d": mesh_2d,
     "dcp_save": dcp_save, "dcp_load": dcp_load, "compiled_ddp": compiled_ddp}[case](out)
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {os.environ['RANK']}: ok", flush=True)
