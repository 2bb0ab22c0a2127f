"""Which devices a worker trains on, and how its replicas all-reduce.

Must run before the strategy is built (and before any other TF op). GPU workers use every GPU
that CUDA_VISIBLE_DEVICES leaves them; CPU workers can split their CPU into several logical
devices to exercise multi-device mirroring without GPUs.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


def split_cpu(count: int) -> bool:
    """Give this CPU-only worker `count` logical CPU devices and make MWMS mirror over all of them.

    MultiWorkerMirroredStrategy only ever uses CPU:0 on a host without GPUs; the replica list is
    chosen in a private method, which is wrapped here. This serves CPU simulation only; returns
    False (and changes nothing) when GPUs are visible or count is 1.
    """
    import tensorflow as tf

    if count <= 1 or tf.config.list_physical_devices("GPU"):
        return False
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(count)])
    from tensorflow.python.distribute import collective_all_reduce_strategy as strategy_module

    extended = strategy_module.CollectiveAllReduceExtended
    original = extended._initialize_local_devices

    def local_devices(self: Any, cluster_resolver: Any, worker_device: str) -> tuple[tuple[str, ...], str]:
        devices, kind = original(self, cluster_resolver, worker_device)
        if kind == "CPU":
            devices = tuple(f"{worker_device}/device:CPU:{i}" for i in range(count))
        return devices, kind

    extended._initialize_local_devices = local_devices
    return True


def communication_options(collective: str) -> Any:
    """NCCL for GPU all-reduce and ring on CPU under 'auto'; an explicit choice is kept."""
    import tensorflow as tf

    implementations = tf.distribute.experimental.CommunicationImplementation
    if collective == "auto":
        chosen = implementations.NCCL if tf.config.list_physical_devices("GPU") else implementations.RING
    else:
        chosen = implementations.NCCL if collective == "nccl" else implementations.RING
    return tf.distribute.experimental.CommunicationOptions(implementation=chosen)
