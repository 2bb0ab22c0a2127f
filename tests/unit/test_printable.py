"""What reaches a screen from a task or a user: nothing that acts on the terminal, and names shown whole
(the control sequences a task prints: test_hygiene.py)."""

from __future__ import annotations

from launcher.common.printable import escaped, printable


def test_bidirectional_overrides_are_not_printed() -> None:
    assert printable("H\u202eevil\u202cI\u2066x\u2069") == "HevilIx"


def test_a_name_with_control_characters_is_shown_escaped_and_whole() -> None:
    assert escaped("runs/r\x1b[31mred\nline") == "runs/r\\x1b[31mred\\nline"
    assert escaped("H\u202eevil") == "H\\u202eevil" and escaped("plain/path") == "plain/path"
