"""Recovery in place, verified checkpoints and exact resume for a Python training loop
(docs/python.md, "The elastic API"), over Cumulus's C++ `Elastic`.

    import cumulus
    elastic = cumulus.Elastic(model, optimizer, sampler=sampler, config="lr 0.05, batch 96")
    if not elastic.start():                       # a replacement the group finished without
        sys.exit(0)
    while elastic.step < steps:
        def step():                               # may run again after a peer's failure
            idx = torch.tensor(sampler.local_indices(elastic.rank, elastic.size))
            optimizer.zero_grad()
            elastic.backward(loss_sum(model(x[idx]), y[idx]) / global_batch)
            optimizer.step()                      # after the step's last collective
            sampler.advance()
        elastic.train(step)
        action = elastic.boundary()
        if action == cumulus.ElasticAction.LEAVE: sys.exit(cumulus.EXIT_PREEMPTED)
        ...
    elastic.at_end(final_evaluation)              # never skipped, even after a failure
    elastic.finish()

Under `cumulus-run --recovery in_place` a worker's SIGKILL leaves the other processes training:
they re-form, the step in flight is trained again, and a replacement joins at a step boundary
and takes the state from a live peer over the network. A preemption notice (SIGTERM) lets the
noticed worker leave at a step boundary (exit 75). Started any other way, the same loop runs as
plain data parallelism.

The state is the program's: the model's state_dict (model.pt, a dict of tensors that
torch.load reads), the optimizer's state_dict (optimizer.pt, torch.save's format), the
DistributedSampler's (epoch, cursor), torch's default CPU generator, and `extra`: tensors or
objects with state_dict()/load_state_dict() (a learning-rate scheduler, a GradScaler), in
extra.pt, and a cumulus.BatchShares' shares in force. Python's `random` and NumPy's generators
are not part of it: keep them in `extra` (an object whose state_dict() returns their state) or
draw from torch's.
"""

import io
import os
import sys

import torch

from . import _C

Checkpoint = _C.Checkpoint
CheckpointError = _C.CheckpointError
ElasticAction = _C.ElasticAction
Membership = _C.Membership
EXIT_PREEMPTED = _C.EXIT_PREEMPTED


def _to_bytes(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def _from_bytes(data, what):
    # A full unpickling (an optimizer's state may hold any picklable value): these bytes are a
    # checkpoint this job wrote, or a peer's that holds the job token, and their SHA-256 matched.
    try:
        return torch.load(io.BytesIO(data), weights_only=False)
    except Exception as error:
        raise CheckpointError(f"{what}: does not load ({type(error).__name__}: {error})") from None


def _check_fits(tensors, model):
    """Raises CheckpointError naming the first tensor that is missing, extra or of another
    shape or dtype, before anything is copied."""
    own = model.state_dict()
    for name, tensor in own.items():
        if name not in tensors:
            raise CheckpointError(f"model.pt: no tensor '{name}' (the model has it)")
        got = tensors[name]
        if got.shape != tensor.shape or got.dtype != tensor.dtype:
            raise CheckpointError(
                f"model.pt: tensor '{name}' is {list(got.shape)} {got.dtype}, the model's "
                f"{list(tensor.shape)} {tensor.dtype}")
    for name in tensors:
        if name not in own:
            raise CheckpointError(f"model.pt: tensor '{name}' is not one of the model's")


def capture(model, optimizer=None, sampler=None, extra=None, step=0, config=""):
    """The state as a Checkpoint: deep copies, so training may go on while it is saved."""
    c = Checkpoint()
    c.step = step
    c.config = config
    c.model = type(model).__name__
    c.tensors = {name: t.detach().clone() for name, t in model.state_dict().items()}
    files = {}
    if optimizer is not None:
        c.optimizer = type(optimizer).__name__
        files["optimizer.pt"] = _to_bytes(optimizer.state_dict())
    if extra:
        files["extra.pt"] = _to_bytes({name: (value.detach().clone() if torch.is_tensor(value)
                                              else value.state_dict())
                                       for name, value in extra.items()})
    c.files = files
    if sampler is not None:
        c.sampler = sampler.state()
    c.capture_rng()
    return c


def restore(checkpoint, model, optimizer=None, sampler=None, extra=None):
    """Puts `checkpoint` back into the objects, after checking that it fits them all."""
    tensors = checkpoint.tensors
    _check_fits(tensors, model)
    files = checkpoint.files
    optimizer_state = extra_state = None
    if optimizer is not None:
        if "optimizer.pt" not in files:
            raise CheckpointError("optimizer.pt: missing (the checkpoint holds no optimizer)")
        optimizer_state = _from_bytes(files["optimizer.pt"], "optimizer.pt")
    if extra:
        if "extra.pt" not in files:
            raise CheckpointError("extra.pt: missing (the checkpoint holds no extra state)")
        extra_state = _from_bytes(files["extra.pt"], "extra.pt")
        missing = sorted(set(extra) - set(extra_state))
        if missing:
            raise CheckpointError(f"extra.pt: no entry {missing[0]!r}")
    with torch.no_grad():
        model.load_state_dict(tensors)
    if optimizer_state is not None:
        optimizer.load_state_dict(optimizer_state)
    if sampler is not None:
        sampler.restore(checkpoint.sampler)
    checkpoint.restore_rng()
    # `extra` last: an entry may put back more of its own (DiLoCo: each member's replica).
    if extra_state is not None:
        for name, value in extra.items():
            if torch.is_tensor(value):
                with torch.no_grad():
                    value.copy_(extra_state[name])
            else:
                value.load_state_dict(extra_state[name])


EXIT_USAGE = 2  # cumulus-run's "an error a restart would repeat": it ends the job


def _end_the_job_on_program_errors():
    """Under cumulus-run, an exception that leaves the program is the program's error, not a lost
    machine: after Python prints its traceback, one line `<script>: error: <Type>: <message>` and
    exit 2, so that cumulus-run ends the job with it (its last line names it) instead of starting
    a replacement that would fail the same way. A cumulus.CommError (a failure recovery in place
    could not mend) keeps Python's exit 1, which the launcher retries."""
    if not os.environ.get("CUMULUS_RUN_ID") or getattr(sys.excepthook, "_cumulus", False):
        return
    previous = sys.excepthook

    def hook(kind, value, traceback):
        previous(kind, value, traceback)
        if issubclass(kind, (_C.CommError, KeyboardInterrupt)):
            return
        script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
        print(f"{script}: error: {kind.__name__}: {value}", file=sys.stderr, flush=True)
        sys.exit(EXIT_USAGE)

    hook._cumulus = True
    sys.excepthook = hook


class Elastic:
    """A training loop that survives losing and gaining workers in place (module docstring).

    model, optimizer, sampler, extra: the state to heal and checkpoint (see capture()).
    config: what the state was built from (flags, hyperparameters): a member refuses a state
        captured under another, and a checkpoint of another is refused on resume.
    algorithm, compression: the gradient sum's ("auto", "ring", ...; "none" or "bf16").
    timeout: seconds for the rendezvous and each collective.
    wait_for_members: after losing a worker, wait at the next boundary (up to
        wait_for_members_seconds) until the group has this many again; 0: train on at once.
    """

    def __init__(self, model, optimizer=None, *, sampler=None, extra=None, config="",
                 algorithm="auto", compression="none", timeout=60.0, bucket_cap_mb=25.0,
                 wait_for_members=0, wait_for_members_seconds=120.0):
        _end_the_job_on_program_errors()
        self.model, self.optimizer, self.sampler = model, optimizer, sampler
        self.extra = dict(extra or {})
        self.config = config
        self._batch_shares = None  # a cumulus.BatchShares over this Elastic: its shares
        self._saved_shares = []    # the resumed checkpoint's batch shares
        self._core = _C.ElasticCore(algorithm, compression, float(timeout), float(bucket_cap_mb),
                                    int(wait_for_members), float(wait_for_members_seconds))
        self._core.set_state(self._capture, self._restore, config)
        # The buffers (batch norm's running statistics) are averaged over the members at every
        # step, so that every replica holds the same model.
        self._core.attach([p for p in model.parameters() if p.requires_grad],
                          list(model.buffers()))

    def _capture(self):
        c = capture(self.model, self.optimizer, self.sampler, self.extra)
        if self._batch_shares is not None:
            c.batch_shares = self._batch_shares.shares
        return c

    def _restore(self, checkpoint):
        restore(checkpoint, self.model, self.optimizer, self.sampler, self.extra)
        # A cumulus.BatchShares takes them for the launch's first membership only (a heal's
        # membership is a new one, whose shares are equal).
        self._saved_shares = list(checkpoint.batch_shares)
        if self._batch_shares is not None:
            self._batch_shares._core.restore(self._saved_shares)

    # The loop.
    def start(self, steps_done=0, prepare=None):
        """Before the first step; `steps_done` is the step of the state every launch member
        starts from (0, or a resumed checkpoint's; ValueError on every member when they differ).
        prepare(): collectives of the program's own before the first step; a peer lost during
        them (or during start()'s own) re-forms the group, every member takes one member's
        state, and they are not run again. A replacement waits here to be admitted and healed.
        False: the group finished before admitting it (exit 0)."""
        return self._core.start(int(steps_done), prepare)

    def train(self, fn):
        """Trains step `step + 1` with fn() and returns once it is committed. fn runs one whole
        step; its collectives (backward(), all_reduce()) come before it changes the state (the
        optimizer's step, the sampler's advance). After a peer's failure fn runs again for the
        same step on the re-formed group: read rank and size inside it."""
        self._core.train(fn)

    def backward(self, loss):
        """loss.backward(), with every gradient summed over the members (bucketed, overlapped
        with the backward pass): divide the loss by the global batch, not the local one."""
        self._core.backward(loss)

    def boundary(self):
        """After each step but the last: an ElasticAction agreed by every member. CHECKPOINT:
        rank 0 saves this step; STOP: rank 0 saves, every member calls wait_for_all() and exits
        75; LEAVE: this member got a notice and left, exit 75 now."""
        return self._core.boundary()

    def at_boundary(self, fn):
        """Runs fn, communicating work after a committed step (an evaluation's sums, a save's
        gather). A peer's failure in it re-forms the group and returns False: skip the rest of
        this boundary."""
        return self._core.at_boundary(fn)

    def at_end(self, fn):
        """After the last step, on every member: runs fn, the run's last boundary (a final
        evaluation, DiLoCo's sync_all, rank 0's save). Never skipped: a peer's failure in it
        re-forms the group and fn runs again, whole, on the new membership."""
        self._core.at_end(fn)

    def wait_for_all(self):
        self._core.wait_for_all()

    def finish(self):
        """After the last step, on every member: replacements still waiting give up."""
        self._core.finish()

    # Collectives over the current membership (inside train() or at_boundary()).
    def all_reduce(self, tensor, op="sum"):
        """In place over the current members: "sum", "avg", "min" or "max"."""
        self._core.all_reduce(tensor, op)

    def broadcast(self, tensor, root=0):
        self._core.broadcast(tensor, root)

    def all_gather(self, tensor):
        """Every member's `tensor` (the same shape and dtype on each) stacked in rank order: a
        new tensor of shape [size, *tensor.shape]."""
        return self._core.all_gather(tensor)

    # Checkpoints.
    def capture(self):
        """This member's state as a Checkpoint of step `step`, to save with Checkpoints.save()."""
        c = self._capture()
        c.step = self.step
        c.config = self.config
        c.world_size = self.size
        return c

    def resume(self, checkpoints):
        """Puts the newest valid checkpoint of `checkpoints` (a Checkpoints) back and returns its
        step, or 0 without one. A checkpoint of another config is refused (CheckpointError)."""
        latest, skipped = checkpoints.load_latest()
        for why in skipped:
            print(f"cumulus: skipped an invalid checkpoint: {why}", flush=True)
        if latest is None:
            return 0
        if latest.config != self.config:
            raise CheckpointError(
                f"{checkpoints.dir} holds checkpoints of another config: relaunch with the same "
                "one, or use another directory")
        self._restore(latest)
        return latest.step

    # Callbacks and notices.
    def on_membership_change(self, callback):
        """callback(Membership) after the group formed or changed, the state already in place."""
        self._core.on_membership_change(callback)

    def on_failure(self, callback):
        """callback(reason) on a member that saw a peer fail, before the group re-forms."""
        self._core.on_failure(callback)

    def notify(self):
        """A preemption notice for this member (a SIGTERM is one too)."""
        self._core.notify()

    def request_checkpoint(self):
        """Asks for a checkpoint at the next boundary (SIGUSR1 does too)."""
        self._core.request_checkpoint()

    @property
    def noticed(self):
        return self._core.noticed

    @property
    def leaving(self):
        """At a boundary that returned LEAVE, STOP or a leave's CONTINUE: the ranks that left."""
        return self._core.leaving()

    @property
    def times(self):
        """Where this member's time inside Elastic went so far, in seconds (<cumulus/elastic.h>
        ElasticTimes): start, train, comm_wait, redone, reform, boundary, member_wait,
        checkpoint, at_boundary, and the count of reforms."""
        return self._core.times()

    left = property(lambda self: self._core.left(), doc="this member left on a notice")
    rank = property(lambda self: self._core.rank)
    size = property(lambda self: self._core.size)
    step = property(lambda self: self._core.step, doc="steps committed")
    epoch = property(lambda self: self._core.epoch, doc="the membership's: one more per change")
    in_place = property(lambda self: self._core.in_place)
    member_id = property(lambda self: self._core.member_id)
    joining = property(lambda self: self._core.joining)
