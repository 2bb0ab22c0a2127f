"""How one step's global batch is shared among the replicas in sync. Pure: no TensorFlow.

Step s trains on examples s*G .. s*G+G-1 whatever the number of replicas R: replica g takes a
contiguous share of them, G/R each where that divides, else the first G mod R replicas one more.
An elastic gang (spec `elastic`) that lost hosts keeps the global batch G of the whole spec, so the
examples of step s, the loss (averaged over G) and the summed gradients are those of the full gang.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BatchShares:
    global_batch: int
    replicas: int
    micro: int  # micro-batches per step (gradient accumulation)
    kept: bool  # the global batch is the spec's, kept for a gang smaller than the spec's

    @property
    def even(self) -> bool:
        """Every replica takes as many examples, in micro-batches of one size."""
        per_replica, left = divmod(self.global_batch, self.replicas)
        return left == 0 and per_replica % self.micro == 0

    def share(self, replica: int) -> tuple[int, int]:
        """(first example within the step's batch, examples) of global replica `replica`."""
        base, left = divmod(self.global_batch, self.replicas)
        return replica * base + min(replica, left), base + (1 if replica < left else 0)


def batch_shares(
    batch_per_replica: int, micro: int, replicas: int, trainers: int, spec_workers: int | None
) -> BatchShares:
    """The step's shares. Without `spec_workers` (not elastic): batch_per_replica x micro per replica. With it: the
    global batch of the spec's `spec_workers` training tasks, each with as many replicas as this gang's have."""
    per_replica = batch_per_replica * micro
    if spec_workers is None or spec_workers == trainers:
        return BatchShares(per_replica * replicas, replicas, micro, False)
    per_task = max(replicas // max(trainers, 1), 1)
    return BatchShares(per_replica * per_task * spec_workers, replicas, micro, True)
