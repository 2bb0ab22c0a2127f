"""Write manifests as YAML text: block style, plain words where YAML reads them back unchanged.

Only dicts, lists, strings, integers, booleans and None, which is all a manifest holds. A string
is written plain only when it cannot be read back as anything else (a number, a boolean, null, a
YAML 1.1 `on`/`yes`); otherwise quoted, and double-quoted with escapes when it holds anything
not printable (controls, and U+0085, U+2028, U+2029, which YAML readers take for line breaks).
Never writes a value that reads back different (tested against PyYAML), and never a comment line
that a reader could take for more than one line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

_PLAIN = re.compile(r"[A-Za-z_/][A-Za-z0-9_./\-]*")
_SPECIAL_WORDS = frozenset(
    word
    for base in ("y", "yes", "n", "no", "true", "false", "on", "off", "null")
    for word in (base, base.capitalize(), base.upper())
)


def scalar(value: Any) -> str:
    """One scalar as YAML."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if not isinstance(value, str):
        raise TypeError(f"cannot write {type(value).__name__} as YAML")
    if _PLAIN.fullmatch(value) and value not in _SPECIAL_WORDS:
        return value
    if value.isprintable() and "'" not in value:
        return f"'{value}'"
    return '"' + "".join(_escaped(char) for char in value) + '"'


def _escaped(char: str) -> str:
    """One character inside a double-quoted YAML string."""
    if char in '"\\':
        return "\\" + char
    if char.isprintable():
        return char
    code = ord(char)
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _is_block(value: Any) -> bool:
    return isinstance(value, (dict, list)) and bool(value)


def _inline(value: Any) -> str:
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[]"
    return scalar(value)


def _mapping(data: dict[str, Any], indent: int) -> list[str]:
    pad = " " * indent
    lines: list[str] = []
    for key, value in data.items():
        if isinstance(value, dict) and value:
            lines.append(f"{pad}{scalar(key)}:")
            lines += _mapping(value, indent + 2)
        elif isinstance(value, list) and value:
            lines.append(f"{pad}{scalar(key)}:")
            lines += _sequence(value, indent)  # Kubernetes style: items at the key's indent
        else:
            lines.append(f"{pad}{scalar(key)}: {_inline(value)}")
    return lines


def _sequence(items: Sequence[Any], indent: int) -> list[str]:
    pad = " " * indent
    lines: list[str] = []
    for item in items:
        if isinstance(item, dict) and item:
            body = _mapping(item, indent + 2)
            lines.append(f"{pad}- {body[0].lstrip()}")
            lines += body[1:]
        elif isinstance(item, list) and item:
            body = _sequence(item, indent + 2)
            lines.append(f"{pad}- {body[0].lstrip()}")
            lines += body[1:]
        else:
            lines.append(f"{pad}- {_inline(item)}")
    return lines


def document(data: dict[str, Any]) -> str:
    """One YAML document (no `---`), ending in a newline."""
    if not _is_block(data):
        return _inline(data) + "\n"
    return "\n".join(_mapping(data, 0)) + "\n"


def _comment(line: str) -> str:
    """One comment line, anything not printable escaped: a line break in it would end the comment
    and make the rest YAML. Values from a spec come here as `scalar`s already; this is the backstop."""
    return "".join(char if char.isprintable() else _escaped(char) for char in line)


def documents(docs: Iterable[dict[str, Any]], comments: Sequence[str] = ()) -> str:
    """Several documents in one stream, each started by `---`, after `# ` comment lines."""
    head = "".join(f"# {_comment(line)}\n" if line else "#\n" for line in comments)
    return head + "".join(f"---\n{document(doc)}" for doc in docs)
