"""Training functions for `training.kind = "function"` tests."""

from __future__ import annotations

from typing import Any


def tiny(ctx: Any) -> dict[str, Any]:
    """Sum a per-replica value across the gang: proves the strategy spans every task."""
    import tensorflow as tf

    value = ctx.strategy.run(lambda: tf.constant(1.0))
    total = ctx.strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)
    ctx.report_step(ctx.steps)
    return {"step": ctx.steps, "replicas_summed": float(total.numpy()), "is_chief": ctx.cluster.is_chief}


def boom(ctx: Any) -> dict[str, Any]:
    if ctx.cluster.task_index == 1:
        raise ValueError("bad batch shape (7, 3)")
    return {"step": 0}


def fails_on_a_bad_host(ctx: Any) -> dict[str, Any]:
    """`tiny`, but a task on a host whose env says BAD_HOST=1 fails as a bad disk would, every time."""
    import os

    if os.environ.get("BAD_HOST") == "1":
        raise OSError(28, "No space left on device")
    return tiny(ctx)
