"""JSON for the files a launch rewrites as it goes (status.json, summary.json): a key per line, and an
object per line in a list of objects (a task, an attempt), nested as deep as such lists go; every
line of plain values is written by the C encoder.

`json.dumps(..., indent=2)` runs Python's own encoder, 3-4 times slower than the C one: about 7 ms for
a thousand tasks' status, which the supervisor's thread spent at every rewrite. The text still reads
line by line, and parses as the same data. A number that is not finite (a loss of NaN: training
that diverged) is written as the string "NaN", "Infinity" or "-Infinity": strict JSON parsers refuse
Python's bare NaN, and null would hide that training diverged."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

__all__ = ["dumps"]


def dumps(data: Any, default: Any = None) -> str:
    """`data` as JSON text: a dict a key per line, a list of objects an object per line."""
    encode = json.JSONEncoder(default=default, allow_nan=False).encode
    try:
        return _text(data, 0, encode, top=True)
    except ValueError:  # NaN or an infinity somewhere: rare, so looked for only then
        return _text(_finite(data), 0, encode, top=True)


NOT_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _finite(value: Any) -> Any:
    """`value` with every float that is not finite replaced by its name (NOT_FINITE)."""
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def _key(key: Any) -> str:
    """As json writes a key: None as "null", True as "true", a number as its digits."""
    return key if isinstance(key, str) else json.dumps(key)


def _objects(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(item, dict) for item in value)


def _text(value: Any, indent: int, encode: Callable[[Any], str], top: bool = False) -> str:
    pad, inner = " " * indent, " " * (indent + 2)
    if isinstance(value, dict) and value and (top or any(map(_objects, value.values()))):
        lines = [f"{inner}{encode(_key(key))}: {_text(item, indent + 2, encode)}" for key, item in value.items()]
        return "{\n" + ",\n".join(lines) + f"\n{pad}}}"
    if _objects(value):
        if any(map(_objects, value[0].values())):  # attempts holding tasks: each laid out in turn
            items = [_text(item, indent + 2, encode) for item in value]
        else:  # tasks: as the first one goes, each on its line whole
            items = list(map(encode, value))
        return "[\n" + ",\n".join(inner + item for item in items) + f"\n{pad}]"
    return encode(value)
