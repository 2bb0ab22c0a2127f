"""Checkpoints on shared storage: the chief writes the real directory, everyone restores from it.

Every worker must call save() (reading distributed values takes collectives); non-chief workers
write to a private temporary directory that is deleted right after each save and at close.
"""

from __future__ import annotations

import shutil
import tempfile

import tensorflow as tf

MAX_TO_KEEP = 3


class RestoredManager(tf.train.CheckpointManager):
    """A manager whose checkpoint the store has already restored (and checked).

    PreemptionCheckpointHandler attaches its run counter to the checkpoint and then calls
    restore_or_initialize(), a second full restore of the same files (about 0.5 s of a
    recovery). It is not needed: an object attached after a restore gets its saved value
    from that restore (deferred restoration), the handler's counter included when the
    checkpoint has one, and stays at its initial value when it has none.
    """

    def restore_or_initialize(self) -> None:
        return None


class CheckpointStore:
    """Lifecycle: restore() once before training and before the preemption handler is made,
    save(step) as often as wanted, close()."""

    def __init__(self, checkpoint: tf.train.Checkpoint, shared_dir: str, is_chief: bool, task: str) -> None:
        self.checkpoint = checkpoint
        self.shared_dir = shared_dir
        self.is_chief = is_chief
        self.temp_dir = None if is_chief else tempfile.mkdtemp(prefix=f"tflaunch-ckpt-{task.replace(':', '-')}-")
        write_dir = shared_dir if is_chief else self.temp_dir
        self.manager = RestoredManager(checkpoint, write_dir, max_to_keep=MAX_TO_KEEP)

    def restore(self) -> str | None:
        """Restore the newest checkpoint in the shared directory; None when there is none."""
        latest = tf.train.latest_checkpoint(self.shared_dir)
        if latest is not None:
            self.checkpoint.restore(latest).assert_existing_objects_matched()
        return latest

    def save(self, step: int) -> None:
        self.manager.save(checkpoint_number=step)
        if self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)

    def close(self) -> None:
        if self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
