"""Load the user's `package.module:function` targets named in the spec."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


class WorkerUsageError(Exception):
    """A mistake in what the worker was asked to run (exit 2: retrying cannot help)."""


def load_target(target: str) -> Callable[..., Any]:
    module_name, _, attr = target.partition(":")
    try:
        function = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as error:
        raise WorkerUsageError(f"cannot load {target!r}: {error}") from None
    if not callable(function):
        raise WorkerUsageError(f"{target!r} is not callable")
    return function
