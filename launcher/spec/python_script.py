"""What a `python ...` command runs, as Python's own command line reads it: its script (or `-m`
module, or `-c` code) whatever the python is called and its own flags. Options come first and may be
combined (`-uB`); `-W`, `-X` and `-Q` take a value, attached (`-Wignore`) or as the next word; `--`
ends the options; `-` reads standard input. Used for a training's identity (which program wrote
the checkpoints) and by the preflight (which script must be there).
"""

from __future__ import annotations

import os
import re

_PYTHON = re.compile(r"python(\d+(\.\d+)*)?")
_PYTHON_FLAGS_WITH_VALUE = "WXQ"  # python's short options that take a value


def is_python(program: str) -> bool:
    """Whether `program` names a Python interpreter (`python`, `python3`, `/opt/venv/bin/python3.11`)."""
    return bool(_PYTHON.fullmatch(os.path.basename(program)))


def program_of(argv: list[str]) -> list[str]:
    """What a command runs, not what it is told: for a python, its script (or `-m` module and the
    words after it up to an option, or `-c` code) whatever the python is called and its own flags, so
    `python3 train.py --steps 40` and `python ./train.py` run one program. Any other command counts
    whole: which of its words name its program is not ours to guess (`env`, `mpirun`, `sh -x`)."""
    if not argv or not is_python(argv[0]):
        return list(argv)
    program = split_python_command(argv)[1]
    if not program:
        return ["python"]
    if program[0] == "-c":
        return ["-c", program[1] if len(program) > 1 else ""]
    if program[0] == "-m":
        return ["-m", program[1] if len(program) > 1 else "", *_leading_words(program[2:])]
    return [program[0] if program[0] == "-" else os.path.normpath(program[0])]


def _leading_words(words: list[str]) -> list[str]:
    """The words before the first option: a module's own program words (`-m coverage run a.py`)."""
    leading = []
    for word in words:
        if word.startswith("-"):
            break
        leading.append(word)
    return leading


def script_of(argv: list[str]) -> str | None:
    """The script file `argv` runs, when it is a python running one; None for anything else."""
    if not argv or not is_python(argv[0]):
        return None
    program = program_of(argv)
    return None if program[0] in ("-c", "-m", "-", "python") else program[0]


def module_of(argv: list[str]) -> str | None:
    """The module `argv` runs, when it is a python running one with `-m`; None for anything else."""
    if not argv or not is_python(argv[0]):
        return None
    program = program_of(argv)
    return program[1] if program[0] == "-m" and len(program) > 1 and program[1] else None


def runs_nothing(argv: list[str]) -> bool:
    """Whether `argv` is a python given no script, `-m` or `-c` (nor told only to print its version or
    help): it would read its program from standard input, which a task does not have."""
    if not argv or not is_python(argv[0]) or program_of(argv) not in (["python"], ["-"]):
        return False
    return not any(arg in ("-V", "--version", "-h", "--help", "-?", "-VV") for arg in argv[1:])


def option_without_value(argv: list[str]) -> str | None:
    """`-m` or `-c` when a python is given one with nothing after it (python refuses it: exit 2); None otherwise."""
    if not argv or not is_python(argv[0]):
        return None
    program = program_of(argv)
    return program[0] if program[0] in ("-m", "-c") and len(program) > 1 and not program[1] else None


def split_python_command(argv: list[str]) -> tuple[list[str], list[str]]:
    """A python command's words after the interpreter, as (the interpreter's own options, the program
    and its arguments): `python3 -u -W ignore train.py --lr 1` gives (["-u", "-W", "ignore"],
    ["train.py", "--lr", "1"]); `-m` and `-c` start the program (`-um mod` gives (["-u"], ["-m", "mod"])).
    A `--` before the script is dropped. Empty program: the python is given none."""
    rest, index = argv[1:], 0
    options: list[str] = []
    while index < len(rest):
        arg = rest[index]
        if arg == "--":
            return options, rest[index + 1 :]
        if arg == "-" or not arg.startswith("-"):
            return options, rest[index:]
        index += 1
        if arg.startswith("--"):
            options.append(arg)
            if arg == "--check-hash-based-pycs" and index < len(rest):
                options.append(rest[index])
                index += 1
            continue
        for position, flag in enumerate(arg[1:], start=1):
            attached = arg[position + 1 :]
            if flag in "mc":
                if position > 1:
                    options.append(arg[:position])  # the flags combined before it: `-u` of `-um`
                return options, [f"-{flag}", *([attached] if attached else []), *rest[index:]]
            if flag in _PYTHON_FLAGS_WITH_VALUE:
                options.append(arg)
                if not attached and index < len(rest):
                    options.append(rest[index])
                    index += 1
                break
        else:
            options.append(arg)
    return options, []
