"""A short hash of a model's weights, equal across replicas exactly when their weights are."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

import numpy as np


def weights_fingerprint(variables: Iterable[Any]) -> str:
    digest = hashlib.sha256()
    for variable in variables:
        value = np.asarray(variable.numpy() if hasattr(variable, "numpy") else variable)
        digest.update(str(value.shape).encode())
        digest.update(np.ascontiguousarray(value).tobytes())
    return digest.hexdigest()[:16]
