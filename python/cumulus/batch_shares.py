"""Each member's share of the global batch in proportion to its measured speed, for a Python loop
on cumulus.Elastic (docs/python.md, "Batch shares"), over Cumulus's C++ `BatchShares`: the policy
of cumulus-train's `trainer.balance: auto`.

    shares = cumulus.BatchShares(elastic, global_batch, recorder=recorder)
    while elastic.step < steps:
        def step():
            idx = torch.tensor(shares.local_indices(sampler))   # this member's slice
            ...
            elastic.backward(loss_sum / global_batch)           # divided by the global batch
            ...
        elastic.train(step)
        shares.rebalance()                                      # every member, before boundary()

The sampler decides each global batch and the shares only split it: every sample is trained once,
by one member, whatever the shares and the membership. A member's compute time is what Elastic
measured of its step less its wait for the gradient sum (measure() gives one of the program's
own). Every `every_steps` steps the members' rates are all-gathered and every member takes the
same new shares when they predict a step faster by more than `min_gain`; after a change of
membership the shares are equal again.

The shares in force travel with the Elastic's checkpoints (Checkpoint.batch_shares): a launch
that resumes on as many members takes them for its first steps, so its resume is bit-identical to
a run that never stopped; one of another size starts equal.
"""

from . import _C


class BatchShares:
    """Batch shares by measured speed over `elastic` (a cumulus.Elastic) for a global batch of
    `global_batch` samples; `recorder` (a cumulus.Recorder) writes a "balance" record at each
    change."""

    def __init__(self, elastic, global_batch, *, every_steps=20, min_gain=0.05, micro_batches=1,
                 recorder=None):
        core = getattr(elastic, "_core", elastic)
        self._core = _C.BatchSharesCore(core, int(global_batch), int(every_steps),
                                        float(min_gain), int(micro_batches),
                                        None if recorder is None else recorder._core)
        # The Elastic's checkpoints carry the shares, and a resume before this one was made
        # gives it the shares it read.
        if hasattr(elastic, "_core"):
            elastic._batch_shares = self
            self._core.restore(elastic._saved_shares)

    @property
    def shares(self):
        """The next step's shares, one per member, summing to the global batch."""
        return self._core.shares()

    @property
    def share(self):
        """This member's."""
        return self._core.share()

    def local_indices(self, sampler):
        """This member's indices of the sampler's current global batch (a cumulus
        DistributedSampler of the same global batch)."""
        return self._core.local_indices(sampler)

    def measure(self, samples, seconds):
        """This step's compute, `samples` in `seconds`, instead of what Elastic measured."""
        self._core.measure(int(samples), float(seconds))

    def rebalance(self):
        """After each train(), on every member; True when the shares changed (from the next
        step)."""
        return self._core.rebalance()

    @property
    def rate(self):
        """This member's samples per second of compute; 0 before one was measured."""
        return self._core.rate

    @property
    def restored(self):
        """Whether the shares in force are a resumed checkpoint's (until they first change)."""
        return self._core.restored
