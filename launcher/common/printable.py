"""Text that is safe on a terminal: nothing a task or a user wrote may act on the screen it reaches.

`printable` removes terminal control sequences (colours, cursor moves, title changes, bells) and
bidirectional overrides from a line a task or a file printed; `escaped` writes each control
character of a name or path the user gave as its escape, so that it is shown whole.
"""

from __future__ import annotations

import re

__all__ = ["escaped", "printable"]

# CSI (ESC [ ... final), OSC (ESC ] ... BEL or ESC \), other two-byte ESC sequences, then any
# remaining C0/C1 control character except tab.
_CONTROL = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]?|[\x00-\x08\x0a-\x1f\x7f-\x9f]"
    r"|[\u200e\u200f\u202a-\u202e\u2066-\u2069]"  # bidirectional overrides: text that shows other than it is
)
_UNSEEN = re.compile(r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(line: str) -> str:
    """`line` without terminal control sequences (colours, cursor moves, title changes, bells)."""
    return _CONTROL.sub("", line)


def escaped(text: str) -> str:
    """`text` (a name or path the user gave) with each control character written as its escape
    (`\\n`, `\\x1b`), so that what was typed is shown whole and nothing in it acts on the terminal."""
    return _UNSEEN.sub(lambda found: found.group().encode("unicode_escape").decode("ascii"), text)
