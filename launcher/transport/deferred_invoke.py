"""paramiko imports invoke at its own import, only to run ssh_config's `Match exec` commands; invoke
brings asyncio, yaml and unittest (about 7 MiB and 70 ms). Until paramiko uses it, a stand-in holds
its place in sys.modules; a `Match exec` loads the real invoke and runs as before. (importlib's
LazyLoader would load it at paramiko's `import invoke` already on Python 3.11.)

The stand-in answers questions about itself without loading anything: tools that walk sys.modules
(inspect.getmodule reads every module's `__file__`) get its spec's values or AttributeError. An
invoke that is installed but does not import fails the same way it did at paramiko's import: only
where paramiko uses it, with the ImportError.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types
from typing import Any

_LOCK = threading.Lock()
_LOADS_ON = ("__path__", "__all__")  # what `from invoke import x` and `import *` need: the real module


class _InvokeOnFirstUse(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        loaded = sys.modules.get("invoke")
        if loaded is not None and loaded is not self:  # the real one: it answers for everything now
            return getattr(loaded, name)
        if name.startswith("__") and name.endswith("__") and name not in _LOADS_ON:
            if name == "__file__" and self.__spec__ is not None and self.__spec__.has_location:
                return self.__spec__.origin
            raise AttributeError(name)
        return getattr(_real(self), name)


_failed: list[ImportError] = []


def _real(stand_in: types.ModuleType) -> types.ModuleType:
    with _LOCK:
        if _failed:
            raise _failed[0]
        if sys.modules.get("invoke") is stand_in:
            del sys.modules["invoke"]
        try:
            return importlib.import_module("invoke")
        except ImportError as error:
            _failed.append(error)
            sys.modules["invoke"] = stand_in  # asked again, it fails again, without a second import
            raise


def defer_invoke() -> None:
    """Put the stand-in in place, unless invoke is loaded already or not installed at all."""
    if "invoke" in sys.modules:
        return
    spec = importlib.util.find_spec("invoke")
    if spec is None:  # not installed: paramiko says so at a `Match exec`
        return
    stand_in = _InvokeOnFirstUse("invoke")
    stand_in.__spec__ = spec
    sys.modules["invoke"] = stand_in
