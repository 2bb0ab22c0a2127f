"""Load the user's `package.module:function` targets named in the spec.

The runtime starts as `python -P -m worker`, so no file in the working directory can stand in for
it; the user's modules are then found in the working directory as `python -m` would have found
them (it goes first on sys.path once the runtime's own packages are imported).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any


class WorkerUsageError(Exception):
    """A mistake in what the worker was asked to run (exit 2: retrying cannot help)."""


def _user_modules_importable() -> None:
    workdir = os.getcwd()
    if workdir not in sys.path:
        sys.path.insert(0, workdir)


def load_target(target: str) -> Callable[..., Any]:
    _user_modules_importable()
    module_name, _, attr = target.partition(":")
    try:
        function = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as error:
        raise WorkerUsageError(f"cannot load {target!r}: {error}{_shadowed(module_name)}") from error
    if not callable(function):
        raise WorkerUsageError(f"{target!r} is not callable")
    return function


def _shadowed(module_name: str) -> str:
    """Why a module of the user's own is not the one imported: a module of that name was imported
    already (Python's own, such as `time`, or one TensorFlow uses), and imports find that one first."""
    top = module_name.split(".")[0]
    mine = [os.path.join(os.getcwd(), top + ".py"), os.path.join(os.getcwd(), top, "__init__.py")]
    loaded = sys.modules.get(top)
    where = getattr(loaded, "__file__", None)
    if loaded is None or not any(os.path.exists(path) for path in mine) or where in mine:
        return ""
    return (
        f" (your {top}.py is not the {top!r} the task imports: a module of that name was imported first, "
        f"from {where or 'Python itself'}; rename yours)"
    )
