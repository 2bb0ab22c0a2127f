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


def remote_command(python: str, stdlib_only: bool = False) -> str:
    """The fixed command line. A stdlib-only helper runs isolated and without site-packages (`-I -S`),
    which halves its start-up; the probe needs site-packages to find TensorFlow."""
    flags = ("-I", "-S", "-u") if stdlib_only else ("-u",)
    return " ".join(shlex.quote(part) for part in (python, *flags, "-c", BOOTSTRAP))


def source_line(module: ModuleType) -> bytes:
    """The first stdin line: the helper module's source as one JSON string."""
    return (json.dumps(Path(str(module.__file__)).read_text(encoding="utf-8")) + "\n").encode()
