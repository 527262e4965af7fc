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
    model: a line "model: ..." at the start.
    """

    def __init__(self, elastic, run_dir="", *, total_steps=0, steps_per_epoch=0,
                 log_every_steps=10, start_step=0, tensorboard=True, live=True, console=True,
                 model=""):
        core = getattr(elastic, "_core", elastic)
        try:
            self._core = _C.RecorderCore(core, str(run_dir), int(total_steps), int(steps_per_epoch),
                                         int(log_every_steps), int(start_step), bool(tensorboard),
                                         bool(live), bool(console), str(model))
        except TypeError:
            raise TypeError(f"cumulus.Recorder: {elastic!r} is not a cumulus.Elastic") from None
        self._elastic = elastic

    def step(self, loss, samples, lr=0.0, global_samples=0):
        """After each train() that committed a step, on every member: this member's mean loss
        (a number or a one-element tensor), its samples in the step, the learning rate, and the
        group's samples (0: samples times the group's size)."""
        self._core.step(_number(loss, "Recorder.step loss"), int(samples),
                        _number(lr, "Recorder.step lr"), int(global_samples))

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

    def preempted(self, checkpoint):
        """The launch stops at a notice (after a STOP boundary's save and wait_for_all(), on
        every member): a "preempted" record and this launch's trained and goodput records, which
        the next launch continues. It ends the records as finish() does, without the summary."""
        self._core.preempted(os.fspath(checkpoint))

    def note(self, text):
        self._core.note(str(text))

    def warning(self, text):
        self._core.warning(str(text))

    def finish(self):
        """The run's end: the trained, goodput and summary records. Once."""
        self._core.finish()

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
