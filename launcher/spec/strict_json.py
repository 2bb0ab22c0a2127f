"""Read a cluster spec file as strict JSON: UTF-8 text, no duplicate keys, no NaN, sane sizes.

Python's json module is lenient where a spec must not be: the last of two equal keys silently
wins, NaN and Infinity are accepted, an integer may have thousands of digits, and very deep
nesting ends in a RecursionError. This step turns every such case into a SpecProblem with its
JSON path, so `load_spec` can refuse the file before anything is validated or started.
It only reads bytes it is given; it never touches the file system.
"""

from __future__ import annotations

import codecs
import json
import math
import re
from typing import Any

from launcher.common.errors import SpecProblem
from launcher.common.masking import looks_secret, secret_arguments
from launcher.common.secret_names import MASK, is_secret

# No spec nests deeper than $.hosts[i].tasks[j].port (5 levels); anything far deeper is not a spec.
MAX_DEPTH = 16
# Ports, counts and seconds fit in far fewer digits; 30 still admits any 64-bit number.
MAX_INT_DIGITS = 30
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_]+")


class JsonConstant:
    """Stands in for NaN, Infinity or -Infinity, which JSON does not have."""

    def __init__(self, text: str) -> None:
        self.text = text


class HugeInteger:
    """Stands in for an integer literal with more than MAX_INT_DIGITS digits."""

    def __init__(self, digits: int) -> None:
        self.digits = digits


class JsonObject(dict[str, Any]):
    """A decoded JSON object that remembers keys given more than once, with every value."""

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        super().__init__()
        self.duplicates: dict[str, list[Any]] = {}
        for key, value in pairs:
            if key in self:
                self.duplicates.setdefault(key, [self[key]]).append(value)
            self[key] = value


def _integer(text: str) -> int | HugeInteger:
    digits = len(text.lstrip("-"))
    return HugeInteger(digits) if digits > MAX_INT_DIGITS else int(text)


def decode_text(raw: bytes) -> tuple[str | None, list[SpecProblem]]:
    """The file's text (UTF-8, a leading BOM allowed), or the problem that stops reading it."""
    if not raw.strip():
        return None, [
            SpecProblem(
                "$",
                "the file is empty; write a JSON object such as "
                '{"name": "run", "hosts": [{"address": "localhost", "workers": 2}]}',
            )
        ]
    for bom, name in (
        (codecs.BOM_UTF32_LE, "UTF-32"),
        (codecs.BOM_UTF32_BE, "UTF-32"),
        (codecs.BOM_UTF16_LE, "UTF-16"),
        (codecs.BOM_UTF16_BE, "UTF-16"),
    ):
        if raw.startswith(bom):
            return None, [
                SpecProblem("$", f"the file is {name} text (as some Windows editors save it); save it as UTF-8")
            ]
    if b"\x00" in raw:
        return None, [
            SpecProblem("$", "the file contains NUL bytes (UTF-16 text, or not a text file); save it as UTF-8")
        ]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        byte = raw[error.start]
        return None, [
            SpecProblem(
                "$",
                f"the file is not UTF-8 (byte 0x{byte:02x} on line {line}, perhaps Latin-1 "
                "or Windows-1252 text); save it as UTF-8",
            )
        ]
    return text.removeprefix("\ufeff"), []


def decode_json(text: str) -> tuple[Any, list[SpecProblem]]:
    """The decoded document, or the syntax problem; markers stand in for NaN and huge integers."""
    try:
        return json.loads(text, object_pairs_hook=JsonObject, parse_constant=JsonConstant, parse_int=_integer), []
    except json.JSONDecodeError as error:
        said = (
            f"not valid JSON at line {error.lineno} column {error.colno}: {error.msg}"
            f"{_trailing_comma(error)}{_comment(error)}"
        )
        return None, [SpecProblem("$", said)]
    except RecursionError:
        return None, [
            SpecProblem("$", f"the JSON is nested far deeper than a spec can be (at most {MAX_DEPTH} levels)")
        ]


def _comment(error: json.JSONDecodeError) -> str:
    """Where a `//` or `/*` comment is the mistake (JSON has none), says so."""
    if error.doc[error.pos : error.pos + 2] not in ("//", "/*"):
        return ""
    return " (JSON has no comments: remove it)"


def _trailing_comma(error: json.JSONDecodeError) -> str:
    """Where a comma just before a closing bracket is the mistake (JSON allows none), says so."""
    before = error.doc[: error.pos].rstrip()
    if not before.endswith(",") or error.doc[error.pos : error.pos + 1] not in ("}", "]"):
        return ""
    line = before.count("\n") + 1
    column = len(before) - (before.rfind("\n") + 1)
    return f" (the comma at line {line} column {column} ends nothing: JSON allows no comma before a closing bracket)"


def json_child(path: str, key: str | int) -> str:
    """`path` extended by one key or index, as a user would write it: $.env.A, $.env["A B"], $.hosts[0]."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if _PLAIN_KEY.fullmatch(key) else f"{path}[{json.dumps(key)}]"


# Control characters (C0, DEL, C1) and the Unicode line and paragraph separators. YAML readers end
# a line at U+0085, U+2028 and U+2029 too (PyYAML, and the Go reader kubectl uses), so any of them
# in a string could cut a line of a manifest, a log or a command and change what is read after it.
# A lone UTF-16 surrogate (JSON's "\ud800" without its pair) is no character at all: it cannot be
# encoded as UTF-8, and YAML readers refuse the escape that would stand for it.
_BAD_CHARACTER = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_CHARACTER_NAMES = {
    "\x00": "a NUL byte",
    "\n": "a newline",
    "\r": "a carriage return",
    "\t": "a tab",
    "\x85": "a next-line character (U+0085)",
    "\u2028": "a line separator (U+2028)",
    "\u2029": "a paragraph separator (U+2029)",
}


def _bad_characters(text: str) -> str | None:
    """The first character of `text` that no spec string may hold, named; None when there is none.

    Refused: every control character (C0, DEL, C1: NUL, tab, newline, escape, U+0085 ...), the
    line and paragraph separators U+2028 and U+2029, and lone surrogates."""
    found = _BAD_CHARACTER.search(text)
    if found is None:
        return None
    char = found.group()
    if "\ud800" <= char <= "\udfff":
        return f"a lone surrogate (U+{ord(char):04X}), which is not a character"
    return _CHARACTER_NAMES.get(char, f"the control character U+{ord(char):04X}")


def _shown(value: Any, path: str = "") -> str:
    """What the user wrote, briefly; a secret (by the name at `path`, or by its form) as a mask."""
    name = ([part for part in re.split(r"[.\[\]\"$]+", path) if part] or [""])[-1]
    if (is_secret(name) and not isinstance(value, (dict, list))) or (
        isinstance(value, str) and (looks_secret(value) or secret_arguments([value]))  # `--password=X` too
    ):
        return json.dumps(MASK)
    text = json.dumps(value, default=lambda v: type(v).__name__)
    return text if len(text) <= 40 else text[:37] + "..."


def raw_problems(data: Any, path: str = "$", depth: int = 0) -> list[SpecProblem]:
    """Problems visible before validation: depth, duplicate keys, NaN, huge integers, control characters.

    Control characters and line separators are refused in every string and key (see
    `_bad_characters`): each string ends up as a path, an argument, an environment variable, a host,
    a user or a line of a manifest, where they cut a line or a C string.
    """
    if depth > MAX_DEPTH:
        return [SpecProblem(path, f"nested more than {MAX_DEPTH} levels deep; no spec field goes this deep")]
    problems: list[SpecProblem] = []
    if isinstance(data, dict):
        for key, values in getattr(data, "duplicates", {}).items():
            shown = ", then ".join(_shown(v, json_child(path, key)) for v in values)
            problems.append(
                SpecProblem(
                    json_child(path, key),
                    f"given {len(values)} times in one object ({shown}); "
                    "keep one: JSON readers disagree on which one wins",
                )
            )
        for key, value in data.items():
            bad = _bad_characters(key)
            if bad:
                problems.append(SpecProblem(json_child(path, key), f"the key contains {bad}; remove it"))
            problems += raw_problems(value, json_child(path, key), depth + 1)
    elif isinstance(data, list):
        for index, value in enumerate(data):
            problems += raw_problems(value, json_child(path, index), depth + 1)
    elif isinstance(data, str):
        bad = _bad_characters(data)
        if bad:
            problems.append(
                SpecProblem(
                    path,
                    f"contains {bad} ({_shown(data, path)}); remove it: every string here becomes a path, "
                    "argument, environment value, host, user or line of a manifest, where control "
                    "characters and line separators cannot appear",
                )
            )
    elif isinstance(data, JsonConstant):
        problems.append(SpecProblem(path, f"got {data.text}, which JSON does not allow"))
    elif isinstance(data, HugeInteger):
        problems.append(
            SpecProblem(path, f"got an integer with {data.digits} digits; no setting needs more than {MAX_INT_DIGITS}")
        )
    elif isinstance(data, float) and not math.isfinite(data):  # 1e999, or NaN handed in by a caller
        problems.append(SpecProblem(path, f"got {data}, which is not a finite number"))
    return problems
