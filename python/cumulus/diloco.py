"""DiLoCo and Streaming DiLoCo from Python (docs/diloco.md), over Cumulus's C++ `DiLoCo`.

    elastic = cumulus.Elastic(model, optimizer, sampler=sampler, ...)
    diloco = cumulus.DiLoCo(elastic, model.parameters(), inner_steps=50)   # before start()
    def step():
        diloco.begin_step(elastic.step)       # the fragment due now: synced (overlap: started)
        optimizer.zero_grad()
        (loss_sum(model(x[idx]), y[idx]) / len(idx)).backward()   # this worker's own mean
        diloco.end_step()                     # overlap: the fragment lands
        optimizer.step()                      # the inner optimizer
        sampler.advance()
    elastic.train(step)
    ...
    elastic.at_end(diloco.sync_all)           # after the last step: every replica the same

Each worker trains its own replica for `inner_steps` steps without communicating; then the
workers average their outer gradients (the global parameters minus their replica's) over the
members taking part, and SGD with Nesterov momentum (outer_lr, outer_momentum) steps the global
parameters, which every replica takes. fragments > 1 syncs the parameters in that many parts
spread over the round; overlap runs a fragment's all-reduce during forward and backward;
outer_compression "bf16" or "int8" sends fewer bytes, with error feedback.

Do not call elastic.backward() with DiLoCo: it would all-reduce every gradient. The DiLoCo adds
itself to the Elastic's `extra` as "diloco", so its state_dict() (the global parameters and the
outer momentum) travels with a heal and a checkpoint; make it before elastic.start() and
elastic.resume(). A healed worker takes the sender's replica, and its error-feedback residual
starts at zero.

Exact resume: each member's replica differs from the others' mid-round, and so do its inner
optimizer's state, its residual and its torch generator. Before rank 0 saves a checkpoint, every
member runs

    while not elastic.at_boundary(diloco.gather_replicas): pass

which collects them all into rank 0's DiLoCo state (its checkpoint then holds one row per
member). A resume with as many workers puts each member's own row back before its first step, and
the run goes on bit for bit as if never stopped. With another number of workers, every member
starts the round from the global parameters; without rows (no gather), from the checkpoint's
replica, rank 0's.
"""

import torch

from . import _C
from .elastic import _from_bytes, _to_bytes


class DiLoCo:
    """Outer syncs over `elastic`'s current members (None: a world of one) for `params`.

    buffers: tensors averaged over the members once a round and in sync_all() (batch norm's
    running statistics); None: the buffers of the Elastic's model."""

    def __init__(self, elastic, params, *, inner_steps=50, outer_lr=0.7, outer_momentum=0.9,
                 nesterov=True, fragments=1, overlap=False, mix=0.0, outer_compression="none",
                 timeout=0.0, buffers=None):
        self._elastic = elastic
        self._params = [p for p in params if p.requires_grad]
        with torch.no_grad():
            self._core = _C.DiLoCoCore(self._params, int(inner_steps), float(outer_lr),
                                       float(outer_momentum), bool(nesterov), int(fragments),
                                       bool(overlap), float(mix), str(outer_compression),
                                       float(timeout))
        if buffers is None and elastic is not None:
            buffers = elastic.model.buffers()
        self._core.attach_buffers(list(buffers or []))
        self._gathered = None  # (step, [each member's row: bytes]) from gather_replicas()
        self._resumed_rows = None  # a checkpoint's rows, put back at the next begin_step()
        if elastic is not None:
            elastic.extra.setdefault("diloco", self)

    def _members(self):
        return None if self._elastic is None else self._elastic._core

    def _rank_and_size(self):
        return (0, 1) if self._elastic is None else (self._elastic.rank, self._elastic.size)

    def begin_step(self, step):
        """Before step `step`'s forward (0-based: the steps done so far)."""
        if self._resumed_rows is not None:
            self._put_back_own_row(self._resumed_rows)
            self._resumed_rows = None
        with torch.no_grad():
            self._core.begin_step(int(step), self._members())

    def end_step(self):
        """Before the inner optimizer's step."""
        with torch.no_grad():
            self._core.end_step()

    def sync_all(self):
        """Every fragment synced now: afterwards every replica holds the global parameters."""
        with torch.no_grad():
            self._core.sync_all(self._members())

    def due_at(self, step):
        """The fragment due before step `step`, or -1."""
        return self._core.due_at(int(step))

    @property
    def fragments(self):
        """Each fragment's parameter indices."""
        return self._core.fragments()

    @property
    def outer_lr(self):
        """The outer learning rate; set it between steps to follow a schedule of your own."""
        return self._core.outer_lr

    @outer_lr.setter
    def outer_lr(self, lr):
        self._core.outer_lr = float(lr)

    @property
    def stats(self):
        """rounds, wait_seconds and payload_bytes so far."""
        return self._core.stats()

    def _row(self):
        """This member's own state: replica, inner optimizer, residual, torch generator."""
        row = {"params": [p.detach().clone() for p in self._params],
               "residual": self._core.residual(), "rng": torch.get_rng_state()}
        optimizer = getattr(self._elastic, "optimizer", None)
        if optimizer is not None:
            row["optimizer"] = optimizer.state_dict()
        return _to_bytes(row)

    def gather_replicas(self):
        """On every member, before rank 0 saves a checkpoint (module docstring): each member's
        row (its replica, inner optimizer state, residual and generator) to every member, so
        that the checkpoint holds them all. A collective: run it in elastic.at_boundary()."""
        mine = self._row()
        _, size = self._rank_and_size()
        if size == 1:
            rows = [mine]
        else:
            lengths = self._elastic.all_gather(torch.tensor([len(mine)])).view(-1).tolist()
            padded = bytearray(-(-max(lengths) // 4) * 4)  # whole int32 words
            padded[:len(mine)] = mine
            table = self._elastic.all_gather(torch.frombuffer(padded, dtype=torch.int32))
            rows = [table[r].numpy().tobytes()[:lengths[r]] for r in range(size)]
        self._gathered = (None if self._elastic is None else self._elastic.step, rows)

    def state_dict(self):
        global_params, momentum = self._core.state()
        state = {"global": global_params, "momentum": momentum}
        step = None if self._elastic is None else self._elastic.step
        if self._gathered is not None and self._gathered[0] == step:
            state["replicas"] = self._gathered[1]
        return state

    def load_state_dict(self, state):
        with torch.no_grad():
            self._core.load_state(list(state["global"]), list(state["momentum"]))
            self._core.set_residual(torch.zeros_like(self._core.residual()))
        joining = self._elastic is not None and self._elastic.joining
        # Rank and size are known once the group has formed: the rows go back at the first step.
        self._resumed_rows = None if joining else state.get("replicas")

    def _put_back_own_row(self, rows):
        rank, size = self._rank_and_size()
        if len(rows) != size:
            if rank == 0:
                print(f"cumulus: the checkpoint holds the replicas of {len(rows)} members and the "
                      f"group has {size}: every member starts the round from the global "
                      "parameters", flush=True)
            with torch.no_grad():
                self._core.reset_replica()
            return
        row = _from_bytes(rows[rank], f"extra.pt: DiLoCo's row of rank {rank}")
        with torch.no_grad():
            for p, saved in zip(self._params, row["params"]):
                p.copy_(saved)
            self._core.set_residual(row["residual"])
        optimizer = getattr(self._elastic, "optimizer", None)
        if optimizer is not None and "optimizer" in row:
            optimizer.load_state_dict(row["optimizer"])
        torch.set_rng_state(row["rng"])
