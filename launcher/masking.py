"""Hide secrets wherever they are shown: values of secret-looking names, passwords inside URLs,
and terminal control sequences that a task's output could use to rewrite the operator's screen."""

from __future__ import annotations

import re

_SECRET = re.compile(
    r"(SECRET|TOKEN|PASSW|PASSPHRASE|CREDENTIAL|AUTH|PRIVATE|API_?KEY|ACCESS_?KEY|_KEY$)", re.IGNORECASE
)
MASK = "****"
_URL_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://[^/\s:@]*:)([^@\s/]+)@")
# CSI (ESC [ ... final), OSC (ESC ] ... BEL or ESC \), other two-byte ESC sequences, then any
# remaining C0/C1 control character except tab.
_CONTROL = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]?|[\x00-\x08\x0a-\x1f\x7f-\x9f]"
)


def is_secret(name: str) -> bool:
    return bool(_SECRET.search(name))


def mask_value(name: str, value: str) -> str:
    """The whole value for a secret-looking name; otherwise only a password inside a URL."""
    if is_secret(name):
        return MASK
    return _URL_PASSWORD.sub(rf"\g<1>{MASK}@", value)


def mask_env(env: dict[str, str]) -> dict[str, str]:
    return {key: mask_value(key, value) for key, value in env.items()}


def printable(line: str) -> str:
    """`line` without terminal control sequences (colours, cursor moves, title changes, bells)."""
    return _CONTROL.sub("", line)
