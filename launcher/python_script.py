"""Which file a `python ...` command runs: the script a preflight can look for before anything starts.

Python's own command line (`python [options] script [args]`): options come first and may be combined
(`-uB`); `-W` and `-X` take a value, attached (`-Wignore`) or as the next word; `-c` and `-m` run no
file; `-` (or nothing) reads standard input; `--` ends the options.
"""

from __future__ import annotations

import os
import re

_PYTHON = re.compile(r"python(\d+(\.\d+)*)?")
_TAKES_VALUE = set("WX")
_RUNS_NO_FILE = set("cm")
_LONG_TAKES_VALUE = {"--check-hash-based-pycs"}


def is_python(program: str) -> bool:
    """Whether `program` names a Python interpreter (`python`, `python3`, `/opt/venv/bin/python3.11`)."""
    return bool(_PYTHON.fullmatch(os.path.basename(program)))


def script_of(argv: list[str]) -> str | None:
    """The script file `argv` runs, when it is a python running one; None for anything else."""
    if not argv or not is_python(argv[0]):
        return None
    words = iter(argv[1:])
    for word in words:
        if word == "--":
            return next(words, None)
        if word in _LONG_TAKES_VALUE:
            next(words, None)
            continue
        if word.startswith("--"):
            if word in ("--help", "--version", "--help-all", "--help-env", "--help-xoptions"):
                return None
            continue
        if word == "-" or not word.startswith("-"):
            return None if word == "-" else word
        for at, flag in enumerate(word[1:], start=1):
            if flag in _RUNS_NO_FILE or flag in "hV?":
                return None
            if flag in _TAKES_VALUE:
                if at == len(word) - 1:
                    next(words, None)  # the value is the next word
                break
    return None
