"""What a Python training loop says about its run, as cumulus-train says it (docs/python.md,
"Metrics, goodput and TensorBoard"), over Cumulus's C++ `Recorder`.

    elastic = cumulus.Elastic(model, optimizer, sampler=sampler)
    recorder = cumulus.Recorder(elastic, run_dir="runs/a", total_steps=steps)
    while elastic.step < steps:
        elastic.train(step)                       # sets `loss` (this member's mean)
        recorder.step(loss, samples=local_batch, lr=lr)
        recorder.log(grad_norm=norm)              # any series of the program's own
        action = elastic.boundary()
        ...
    recorder.evaluation(test_loss, accuracy=acc, seconds=took)
    recorder.finish()

The records go to run_dir/metrics.jsonl and run_dir/tensorboard (the member that is rank 0),
to the console, and, under `cumulus-run --metrics-port`, to the job's live endpoint and
dashboard. Elastic accounts for the time it owns (each step's compute and its wait for the
gradient sum, re-forming and healing, attempts a failure threw away, the save after a
checkpoint boundary), and the recorder turns it into the goodput split (`recorder.goodput`).

Call step() on every member after each train(): at a record (step 1, every log_every_steps
steps, the last) it sums the loss over the members, as boundary work. A series named like a
built-in one (train/..., eval/..., goodput/..., checkpoint/..., loss, lr, ...) is a ValueError;
a NaN or infinite value is written as null in metrics.jsonl and left out of TensorBoard and
/metrics (counted in `dropped`); anything after finish() or preempted() is a RuntimeError. A
member that left on a notice records nothing more. Checkpoints: `saved =
recorder.checkpoint(lambda: checkpoints.save(state))` times the save and marks it on the
dashboard; `recorder.preempted(saved)` at a STOP boundary ends the launch's records.
"""

import os

import torch

from . import _C
from .diloco import DiLoCo


def _number(value, what):
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"{what}: a tensor of {value.numel()} elements; pass one number")
        value = value.detach().item()
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what}: {value!r} is not a number") from None


class Recorder:
    """The run's records for the loop over `elastic` (a cumulus.Elastic or cumulus.DiLoCo's).

    run_dir: where metrics.jsonl and tensorboard/ go ("" for neither: console and live only).
    total_steps, steps_per_epoch: for the progress line, epochs and the last record.
    log_every_steps: a train record every this many steps (and at 1 and the last).
    start_step: the step a resumed launch starts from (its checkpoint's): metrics.jsonl is
        continued after it, and the goodput account of the launches before it taken over.
    tensorboard, live, console: each output on (True) or off.
    log_all_ranks: every member prints its progress lines, not rank 0 alone.
    model: a line "model: ..." at the start.
    diloco: a cumulus.DiLoCo whose outer rounds, and the time waited for them, each train record
        and the summary carry; Recorder(diloco, ...) is Recorder(its elastic, diloco=diloco).
    """

    def __init__(self, elastic, run_dir="", *, total_steps=0, steps_per_epoch=0,
                 log_every_steps=10, start_step=0, tensorboard=True, live=True, console=True,
                 model="", log_all_ranks=False, diloco=None):
        if diloco is None and isinstance(elastic, DiLoCo):
            diloco, elastic = elastic, elastic._elastic
        core = getattr(elastic, "_core", elastic)
        if diloco is not None and not isinstance(diloco, DiLoCo):
            raise TypeError(f"cumulus.Recorder: diloco={diloco!r} is not a cumulus.DiLoCo")
        diloco_core = None if diloco is None else diloco._core
        try:
            self._core = _C.RecorderCore(core, str(run_dir), int(total_steps), int(steps_per_epoch),
                                         int(log_every_steps), int(start_step), bool(tensorboard),
                                         bool(live), bool(console), str(model),
                                         bool(log_all_ranks), diloco_core)
        except TypeError:
            raise TypeError(f"cumulus.Recorder: {elastic!r} is not a cumulus.Elastic") from None
        self._elastic = elastic

    def step(self, loss, samples, lr=0.0, global_samples=0, seconds=None,
             comm_wait_seconds=None):
        """After each train() that committed a step, on every member: this member's mean loss
        (a number or a one-element tensor), its samples in the step, the learning rate, and the
        group's samples (0: samples times the group's size). `seconds` and `comm_wait_seconds`:
        the step's time and its wait for the gradients' sum, for a loop that timed them itself
        (its own all-reduce); None: Elastic's."""
        self._core.step(_number(loss, "Recorder.step loss"), int(samples),
                        _number(lr, "Recorder.step lr"), int(global_samples),
                        -1.0 if seconds is None else float(seconds),
                        -1.0 if comm_wait_seconds is None else float(comm_wait_seconds))

    def scalar(self, name, value):
        """A series of the program's own at the current step: metrics.jsonl's "scalar" record,
        the TensorBoard tag `name`, cumulus_scalar{name=...} at /metrics."""
        self._core.scalar(str(name), _number(value, f"Recorder.scalar {name!r}"))

    def log(self, **values):
        """Several scalars at once, as Lightning's log_dict: recorder.log(grad_norm=n, tokens=t)."""
        for name, value in values.items():
            self.scalar(name, value)

    def evaluation(self, loss, accuracy=None, seconds=0.0):
        """An evaluation on held-out data at the current step (its seconds are the goodput's
        evaluation time)."""
        self._core.evaluation(_number(loss, "Recorder.evaluation loss"),
                              None if accuracy is None else _number(accuracy, "accuracy"),
                              float(seconds))

    def checkpoint(self, save):
        """Runs `save` (no arguments; it returns where the checkpoint went) and records it: a
        "checkpoint" record with its stall, which the dashboard marks, and its time in the
        goodput's checkpoint_s (once, also after a CHECKPOINT boundary). Returns save's path. A
        save that raises writes a "checkpoint_failed" record, and the exception goes on.

            saved = recorder.checkpoint(lambda: checkpoints.save(state))
        """
        return self._core.checkpoint(lambda: os.fspath(save()))

    def checkpoint_saved(self, step, path, stall_seconds, encode_seconds=0.0, write_seconds=0.0,
                         bytes=0):
        """A save the program ran and timed itself (a background write that finished after
        training went on, say): a "checkpoint" record, its stall counted once."""
        self._core.checkpoint_saved(int(step), os.fspath(path), float(stall_seconds),
                                    float(encode_seconds), float(write_seconds), int(bytes))

    def checkpoint_failed(self, step, error, max_failures=0, newest_valid=""):
        """A save that failed at `step`: a "checkpoint_failed" record with the failures in a row,
        the program's limit and the newest checkpoint known whole ("": the last one seen saved)."""
        self._core.checkpoint_failed(int(step), str(error), int(max_failures),
                                     os.fspath(newest_valid))

    def membership_changed(self):
        """From Elastic's membership callback: the re-forming's record and line now, rather
        than at the next call."""
        self._core.membership_changed()

    def preempted(self, checkpoint):
        """The launch stops at a notice (after a STOP boundary's save and wait_for_all(), on
        every member): a "preempted" record and this launch's trained and goodput records, which
        the next launch continues. It ends the records as finish() does, without the summary."""
        self._core.preempted(os.fspath(checkpoint))

    def note(self, text):
        self._core.note(str(text))

    def warning(self, text):
        self._core.warning(str(text))

    def finish(self, model=None, parameter_digest=""):
        """The run's end: the trained, goodput and summary records. Once. `model` (a
        torch.nn.Module): the summary says its parameter count; `parameter_digest`: a hash of the
        final parameters it says too."""
        parameters = 0 if model is None else sum(p.numel() for p in model.parameters())
        self._core.finish(int(parameters), str(parameter_digest))

    @property
    def goodput(self):
        """The split of the wall time so far, in seconds: wall_s, startup_s, training_s,
        comm_wait_s, evaluation_s, checkpoint_s, reform_s, restart_s, redone_s, other_s, and
        productive_ratio."""
        return self._core.goodput

    @property
    def dropped(self):
        """Values dropped from TensorBoard and /metrics as NaN or infinite."""
        return self._core.dropped


__all__ = ["Recorder"]
