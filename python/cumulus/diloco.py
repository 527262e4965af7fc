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
    elastic.at_boundary(diloco.sync_all)      # after the last step: every replica the same

Each worker trains its own replica for `inner_steps` steps without communicating; then the
workers average their outer gradients (the global parameters minus their replica's) over the
members taking part, and SGD with Nesterov momentum (outer_lr, outer_momentum) steps the global
parameters, which every replica takes. fragments > 1 syncs the parameters in that many parts
spread over the round; overlap runs a fragment's all-reduce during forward and backward;
outer_compression "bf16" or "int8" sends fewer bytes, with error feedback.

Do not call elastic.backward() with DiLoCo: it would all-reduce every gradient. The DiLoCo adds
itself to the Elastic's `extra` as "diloco", so its state_dict() (the global parameters and the
outer momentum) travels with a heal and a checkpoint; make it before elastic.start() and
elastic.resume(). A healed or resumed worker takes the sender's (or the checkpoint's) replica, and
its error-feedback residual starts at zero.
"""

import torch

from . import _C


class DiLoCo:
    """Outer syncs over `elastic`'s current members (None: a world of one) for `params`."""

    def __init__(self, elastic, params, *, inner_steps=50, outer_lr=0.7, outer_momentum=0.9,
                 nesterov=True, fragments=1, overlap=False, mix=0.0, outer_compression="none",
                 timeout=0.0):
        self._elastic = elastic
        self._params = [p for p in params if p.requires_grad]
        with torch.no_grad():
            self._core = _C.DiLoCoCore(self._params, int(inner_steps), float(outer_lr),
                                       float(outer_momentum), bool(nesterov), int(fragments),
                                       bool(overlap), float(mix), str(outer_compression),
                                       float(timeout))
        if elastic is not None:
            elastic.extra.setdefault("diloco", self)

    def _members(self):
        return None if self._elastic is None else self._elastic._core

    def begin_step(self, step):
        """Before step `step`'s forward (0-based: the steps done so far)."""
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

    def state_dict(self):
        global_params, momentum = self._core.state()
        return {"global": global_params, "momentum": momentum}

    def load_state_dict(self, state):
        with torch.no_grad():
            self._core.load_state(list(state["global"]), list(state["momentum"]))
            self._core.set_residual(torch.zeros_like(self._core.residual()))
