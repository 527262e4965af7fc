"""Cumulus from Python (docs/python.md): a torch.distributed backend, and the elastic API.

Importing this package registers a torch.distributed backend named "cumulus": an unchanged
PyTorch script, DistributedDataParallel included, runs Cumulus's collectives with

    import cumulus
    torch.distributed.init_process_group("cumulus")

The backend meets its peers through the store torch.distributed makes (env://, tcp://, file://),
so any torchrun-style launcher works, cumulus-run included. Its options, per group or from the
environment:

    torch.distributed.init_process_group(
        "cumulus", pg_options=cumulus.BackendOptions(algorithm="ring", compression="bf16"))

    CUMULUS_ALGORITHM=auto|ring|tree|hierarchical|funnel   (default auto: the cost model picks)
    CUMULUS_COMPRESSION=none|bf16                          (float32 all-reduces as bfloat16)
    CUMULUS_COST_MODEL=FILE                                (a `cumulus-bench calibrate` file)
"""

import atexit
import os
import sys
import threading
import time

import torch
import torch.distributed

from . import _build


def _major_minor(version):
    return tuple(version.split("+")[0].split(".")[:2])


if _major_minor(torch.__version__) != _major_minor(_build.TORCH_VERSION):
    raise ImportError(
        f"cumulus was built for torch {_build.TORCH_VERSION}, but this Python's torch is "
        f"{torch.__version__} ({os.path.dirname(torch.__file__)}); rebuild Cumulus against this "
        f"torch (cmake -DCUMULUS_PYTHON={sys.executable}), or run the Python it was built "
        f"for ({_build.PYTHON})")

try:
    from . import _C
except ImportError as error:
    raise ImportError(
        f"cumulus's extension does not load into torch {torch.__version__} "
        f"({os.path.dirname(torch.__file__)}); it was built for torch {_build.TORCH_VERSION}: "
        f"{error}") from error

__version__ = _C.__version__
CommError = _C.CommError
GroupError = _C.GroupError
PermanentError = _C.PermanentError
ProcessGroupCumulus = _C.ProcessGroupCumulus
Checkpoints = _C.Checkpoints
DistributedSampler = _C.DistributedSampler
use_training_allocator = _C.use_training_allocator
choose_precision = _C.choose_precision

from .elastic import (EXIT_PREEMPTED, Checkpoint, CheckpointError, Elastic,  # noqa: E402
                      ElasticAction, Membership, capture, restore)
from .diloco import DiLoCo  # noqa: E402
from .recorder import Recorder  # noqa: E402
from .batch_shares import BatchShares  # noqa: E402

BACKEND = "cumulus"


class BackendOptions:
    """The cumulus backend's options, passed as init_process_group(..., pg_options=...).

    algorithm: "auto" (the cost model picks per size), "ring", "tree", "hierarchical" or "funnel".
    compression: "none", or "bf16" to all-reduce float32 tensors as bfloat16 (half the bytes).
    cost_model: a calibration file written by `cumulus-bench calibrate`, or "" for the built-in.
    A value left as None comes from CUMULUS_ALGORITHM, CUMULUS_COMPRESSION, CUMULUS_COST_MODEL.
    """

    def __init__(self, algorithm=None, compression=None, cost_model=None):
        env = os.environ
        self.algorithm = algorithm if algorithm is not None else env.get("CUMULUS_ALGORITHM") or "auto"
        self.compression = (compression if compression is not None
                            else env.get("CUMULUS_COMPRESSION") or "none")
        self.cost_model = cost_model if cost_model is not None else env.get("CUMULUS_COST_MODEL", "")

    def __repr__(self):
        return (f"cumulus.BackendOptions(algorithm={self.algorithm!r}, "
                f"compression={self.compression!r}, cost_model={self.cost_model!r})")


# init_process_group's timeout is the whole init's. Before it makes the backend, torch builds the
# group's store (env://, tcp://), and the rank that hosts a TCPStore waits there for every other
# rank to connect, up to that whole timeout: with a rank absent, the backend's own rendezvous then
# waited the timeout again (21 s for 10). So the time the rendezvous started is noted here, and
# the backend gets what is left. torch calls its rendezvous through this module attribute; where
# a torch has none, the backend waits the whole timeout, as before.
_init = threading.local()


def _noting_the_start(rendezvous):
    def rendezvous_noted(*args, **kwargs):
        _init.started = time.monotonic()
        return rendezvous(*args, **kwargs)
    return rendezvous_noted


_c10d = torch.distributed.distributed_c10d
if hasattr(_c10d, "rendezvous") and not hasattr(_c10d.rendezvous, "_cumulus"):
    _c10d.rendezvous = _noting_the_start(_c10d.rendezvous)
    _c10d.rendezvous._cumulus = True


def _init_seconds_left(backend_options):
    """What is left of the timeout for the default group that init_process_group is making;
    -1 (the whole timeout) for a new_group, or when no rendezvous of this thread was noted."""
    started, _init.started = getattr(_init, "started", None), None
    timeout = backend_options.timeout.total_seconds()
    if started is None or len(backend_options.global_ranks_in_group) > 0:
        return -1.0
    elapsed = time.monotonic() - started
    # Older than a store's wait can be (torch oversteps the timeout by about a second): the note
    # of an earlier init, whose group another backend made.
    return -1.0 if elapsed > timeout + 5 else max(0.0, timeout - elapsed)


def _create_process_group(backend_options, pg_options):
    options = BackendOptions() if pg_options is None else pg_options
    if not isinstance(options, BackendOptions):
        raise TypeError("the cumulus backend takes pg_options=cumulus.BackendOptions(...), got "
                        f"{type(options).__name__}")
    return _C.ProcessGroupCumulus(
        backend_options.store, backend_options.group_rank, backend_options.group_size,
        backend_options.timeout.total_seconds(), options.algorithm, options.compression,
        options.cost_model, init_timeout_seconds=_init_seconds_left(backend_options))


# The backends' threads end before the interpreter does, whether or not the program destroyed
# its process groups (a DDP module keeps its group alive to the end).
atexit.register(_C._stop_backends)

if not hasattr(torch.distributed.Backend, BACKEND.upper()):
    torch.distributed.Backend.register_backend(BACKEND, _create_process_group, extended_api=True,
                                               devices=["cpu"])
