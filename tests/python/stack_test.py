"""What PyTorch users stack on a backend, on the cumulus backend, on CPU: DDP with static_graph,
find_unused_parameters, comm hooks (bf16 compression among them) and no_sync; FSDP2's
fully_shard; ZeroRedundancyOptimizer; a 2-D DeviceMesh with DTensor; torch.distributed.checkpoint
saved at one world size and loaded resharded at another; a torch.compile'd model under DDP. Each
runs in real processes of the project environment's Python (tests/python/stack_worker.py) and is
checked against one process computing the same thing alone.

    PYTHONPATH=build/python .venv/bin/python tests/python/stack_test.py [TestCase[.test]]
"""

import os
import sys
import tempfile
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from backend_test import PACKAGE_DIR, run_group  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
STACK_WORKER = os.path.join(HERE, "stack_worker.py")
BACKEND = os.environ.get("STACK_BACKEND", "cumulus")  # "gloo": the same tests on Gloo

sys.path.insert(0, PACKAGE_DIR)
import stack_worker as worker  # noqa: E402  the model and the data, for the one-process runs


def run(world, case, out):
    """Runs `case` on `world` ranks; every rank must exit 0."""
    results = run_group(world, case, BACKEND, out, worker=STACK_WORKER)
    for rank, (code, _, err) in enumerate(results):
        if code != 0:
            raise AssertionError(f"{case} rank {rank} exited {code}: {err[-3000:]}")
    return torch.load(out)


def alone(make_optimizer, accumulate=1):
    """Net trained in one process on the whole global batch: what data parallelism must match."""
    model = worker.Net()
    optimizer = make_optimizer(model.parameters())
    for x, y in worker.batches():
        worker.loss_of(model, x, y).backward()
        optimizer.step()
        optimizer.zero_grad()
    return dict(model.named_parameters())


def sgd(params):
    return torch.optim.SGD(params, lr=0.1)


def adam(params):
    return torch.optim.Adam(params, lr=0.01)


class Stack(unittest.TestCase):
    def assert_matches(self, got, want, prefix="", rtol=1e-5, atol=1e-6):
        for name, value in want.items():
            torch.testing.assert_close(got[prefix + name], value.detach(), rtol=rtol, atol=atol,
                                       msg=lambda m: f"{prefix}{name}: {m}")

    def test_ddp_static_graph_unused_parameters_comm_hooks_and_no_sync(self):
        with tempfile.TemporaryDirectory() as tmp:
            got = run(2, "ddp_variants", os.path.join(tmp, "out.pt"))
        want = alone(sgd)
        for variant in ("static_graph", "find_unused", "allreduce_hook", "no_sync"):
            self.assert_matches(got, want, variant + ".")
        # bfloat16 gradients: within bfloat16's rounding of the float32 answer, and not equal to
        # it (the hook did compress).
        self.assert_matches(got, want, "bf16_hook.", rtol=2e-2, atol=2e-3)
        self.assertFalse(torch.equal(got["bf16_hook.first.weight"], want["first.weight"]))

    def test_zero_redundancy_optimizer(self):
        with tempfile.TemporaryDirectory() as tmp:
            got = run(2, "zero", os.path.join(tmp, "out.pt"))
        self.assert_matches(got, alone(adam))

    def test_fsdp2_fully_shard(self):
        with tempfile.TemporaryDirectory() as tmp:
            got = run(2, "fsdp2", os.path.join(tmp, "out.pt"))
        self.assert_matches(got, alone(adam))

    def test_a_2d_device_mesh_with_dtensor(self):
        with tempfile.TemporaryDirectory() as tmp:
            got = run(4, "mesh_2d", os.path.join(tmp, "out.pt"))
        torch.manual_seed(9)
        a, b = torch.randn(8, 6), torch.randn(6, 4)
        torch.testing.assert_close(got["product"], a @ b, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(got["rows"], a.sum(dim=1), rtol=1e-5, atol=1e-6)
        self.assertTrue(torch.equal(got["tp_sum"], torch.full((3,), 1.0)))  # ranks 0 + 1

    def test_distributed_checkpoint_saved_by_two_loads_on_three(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "checkpoint")
            results = run_group(2, "dcp_save", BACKEND, path, worker=STACK_WORKER)
            for rank, (code, _, err) in enumerate(results):
                self.assertEqual(code, 0, f"save rank {rank}: {err[-3000:]}")
            results = run_group(3, "dcp_load", BACKEND, path, worker=STACK_WORKER)
            for rank, (code, _, err) in enumerate(results):
                self.assertEqual(code, 0, f"load rank {rank}: {err[-3000:]}")
            got = torch.load(path + ".loaded.pt")
        torch.manual_seed(21)
        self.assertTrue(torch.equal(got["weight"], torch.randn(12, 5)))
        self.assertEqual(int(got["step"]), 7)

    def test_a_compiled_model_under_ddp(self):
        with tempfile.TemporaryDirectory() as tmp:
            got = run(2, "compiled_ddp", os.path.join(tmp, "out.pt"))
        self.assert_matches(got, alone(sgd))


if __name__ == "__main__":
    unittest.main()
