"""The one place that reads TF_CONFIG; everything else gets a typed ClusterInfo.

Never builds a strategy or creates a TF op (TF must read TF_CONFIG before any op exists).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass


class ClusterConfigError(Exception):
    """TF_CONFIG is missing or malformed."""


@dataclass(frozen=True)
class ClusterInfo:
    """This task's view of the cluster."""

    task_type: str
    task_index: int
    cluster: dict[str, list[str]]

    @property
    def name(self) -> str:
        return f"{self.task_type}:{self.task_index}"

    @property
    def num_trainers(self) -> int:
        """Tasks that train together (chief and workers)."""
        return len(self.cluster.get("chief", [])) + len(self.cluster.get("worker", []))

    @property
    def is_chief(self) -> bool:
        """The task that writes checkpoints, metrics and the exported model."""
        if "chief" in self.cluster:
            return self.task_type == "chief"
        return self.task_type == "worker" and self.task_index == 0

    @property
    def trainer_id(self) -> int:
        """A unique number per training task: chief 0, then workers."""
        offset = len(self.cluster.get("chief", []))
        return self.task_index + (offset if self.task_type == "worker" else 0)


def read_cluster_info() -> ClusterInfo:
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        return ClusterInfo("worker", 0, {})  # single process, no cluster
    try:
        config = json.loads(raw)
        task = config["task"]
        cluster = {str(k): [str(a) for a in v] for k, v in config.get("cluster", {}).items()}
        return ClusterInfo(str(task["type"]), int(task["index"]), cluster)
    except (ValueError, KeyError, TypeError) as error:
        raise ClusterConfigError(f"TF_CONFIG is not usable ({error}): {raw[:200]}") from None
