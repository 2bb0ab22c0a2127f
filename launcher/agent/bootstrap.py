"""Run one of the launcher's stdlib-only helper modules on another host through a fixed command.

The remote command line is always the same short bootstrap (`python -u -c BOOTSTRAP`); the
helper's source and the task's environment follow on standard input. So nothing from the spec
but the python path reaches a command line, and that is shell-quoted.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from types import ModuleType

BOOTSTRAP = (
    "import sys,json;src=json.loads(sys.stdin.readline());g={'__name__':'tflaunch_helper'};"
    "exec(compile(src,'tflaunch_helper','exec'),g);sys.exit(g['remote_main']())"
)


def helper_argv(python: str, stdlib_only: bool = False) -> list[str]:
    """The fixed argv, always without site (`-S`: most of python's start-up on a host with many
    packages). A stdlib-only helper also runs isolated (`-I`); the probe keeps the login's
    PYTHONPATH and user site and runs site itself when a lookup needs what .pth files add."""
    flags = ["-I", "-S", "-u"] if stdlib_only else ["-S", "-u"]
    return [python, *flags, "-c", BOOTSTRAP]


def remote_command(python: str, stdlib_only: bool = False) -> str:
    """`helper_argv` as one shell-quoted command line (what an SSH session runs)."""
    return " ".join(shlex.quote(part) for part in helper_argv(python, stdlib_only))


def source_line(module: ModuleType) -> bytes:
    """The first stdin line: the helper module's source as one JSON string."""
    return (json.dumps(Path(str(module.__file__)).read_text(encoding="utf-8")) + "\n").encode()
