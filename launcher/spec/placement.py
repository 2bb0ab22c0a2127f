"""Where each task's GPUs come from: a host's GPU list split evenly among its training tasks, or
each task's own list, and what is wrong with a placement (uneven, shared, idle, mixed counts).

Pure: plain data in (GPU ids, each task's type and own list), shares and problems out. The spec's
validators, the Slurm allocation and the Kubernetes layout all call it; it imports no model."""

from __future__ import annotations

GPU_SHARING = (
    "each TensorFlow process takes nearly all the memory of every GPU it sees, and NCCL does not run two ranks on one "
    "GPU"
)


def gpus_named(ids: list[int]) -> str:
    """'GPU 3' or 'GPUs 1, 2'."""
    return f"GPU{'s' if len(ids) != 1 else ''} {', '.join(str(i) for i in ids)}"


def either(values: list[int]) -> str:
    words = [str(v) for v in values]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


CHIEF_WITH_GPUS = (
    "the first node would run one training task more than the others, and every training task needs the same "
    "number of GPUs; leave chief out (worker 0 then leads the gang)"
)


def uneven_node_split(workers: int, gpus: int | None) -> str | None:
    """Why `workers` tasks per node cannot share a node's `gpus` GPUs evenly; None when they can."""
    if not gpus or gpus % workers == 0:
        return None
    return (
        f"{workers} task(s) per node do not split a node's {gpus} GPUs evenly (one would stay idle or be "
        f"shared); set slurm.tasks_per_node to a divisor of {gpus}, or slurm.worker_per_gpu: true"
    )
