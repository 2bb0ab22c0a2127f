"""Which script a `python ...` command runs, as Python's own command line reads it."""

from __future__ import annotations

import pytest

from launcher.spec.python_script import (
    is_python,
    module_of,
    option_without_value,
    runs_nothing,
    script_of,
    split_python_command,
)


@pytest.mark.parametrize(
    "argv, script",
    [
        (["python", "train.py", "--lr", "1"], "train.py"),
        (["python3", "-u", "-W", "ignore", "t.py", "x"], "t.py"),
        (["python", "-Wignore", "t.py"], "t.py"),
        (["python", "-uB", "t.py"], "t.py"),
        (["python", "-uXdev", "t.py"], "t.py"),
        (["/opt/venv/bin/python3.11", "-X", "dev", "--", "t.py"], "t.py"),
        (["python", "--check-hash-based-pycs", "always", "t.py"], "t.py"),
        (["python", "-m", "pkg.train"], None),
        (["python", "-um", "pkg.train"], None),
        (["python", "-c", "print(1)"], None),
        (["python"], None),
        (["python", "-"], None),
        (["python", "--version"], None),
        (["bash", "train.py"], None),
        (["python-config", "x.py"], None),
        ([], None),
    ],
)
def test_the_script_is_the_first_word_after_the_options(argv: list[str], script: str | None) -> None:
    assert script_of(argv) == script


def test_only_pythons_are_read() -> None:
    assert is_python("python") and is_python("python3") and is_python("/usr/bin/python3.11")
    assert not is_python("pythonista") and not is_python("ipython") and not is_python("/usr/bin/env")


@pytest.mark.parametrize(
    "argv, module",
    [
        (["python3", "-m", "pkg.train", "--steps", "4"], "pkg.train"),
        (["python", "-um", "pkg.train"], "pkg.train"),
        (["python", "-mpkg"], "pkg"),
        (["python", "-m", "mymod:train"], "mymod:train"),  # not a module: the preflight says what -m takes
        (["python", "train.py", "-m", "x"], None),  # the script's own -m
        (["python", "-c", "import x", "-m", "y"], None),
        (["sh", "-m", "x"], None),
        (["python", "-m"], None),
    ],
)
def test_the_module_is_what_follows_dash_m(argv: list[str], module: str | None) -> None:
    assert module_of(argv) == module


@pytest.mark.parametrize(
    "argv, nothing",
    [
        (["python3"], True),
        (["python3", "-u", "-B"], True),
        (["python", "-"], True),
        (["python3", "-V"], False),  # prints its version and exits: nothing to read
        (["python3", "--help"], False),
        (["python3", "t.py"], False),
        (["python3", "-c", "pass"], False),
        (["python3", "-m", "x"], False),
        (["sh"], False),  # not ours to judge
    ],
)
def test_a_python_given_no_program_runs_nothing(argv: list[str], nothing: bool) -> None:
    assert runs_nothing(argv) is nothing


@pytest.mark.parametrize(
    "argv, bare",
    [
        (["python3", "-m"], "-m"),
        (["python3", "-u", "-c"], "-c"),
        (["python3", "-um"], "-m"),
        (["python3", "-m", "train"], None),
        (["python3", "-c", "pass"], None),
        (["python3", "train.py", "-m"], None),  # the script's own -m
        (["bash", "-c"], None),
    ],
)
def test_a_python_option_that_takes_a_value_given_none_is_named(argv: list[str], bare: str | None) -> None:
    assert option_without_value(argv) == bare


def test_a_spec_whose_python_is_given_a_bare_option_is_refused() -> None:
    from launcher.common.errors import SpecError
    from launcher.spec.load import parse_spec

    spec = {"name": "m", "hosts": [{"address": "localhost", "workers": 1}]}
    with pytest.raises(SpecError, match=r"\$\.training\.argv: -m is given nothing after it: python would refuse it"):
        parse_spec({**spec, "training": {"kind": "command", "argv": ["python3", "-m"]}})


@pytest.mark.parametrize(
    "argv, options, program",
    [
        (["python3", "-u", "train.py", "--lr", "1"], ["-u"], ["train.py", "--lr", "1"]),
        (
            ["python3", "-W", "ignore", "-X", "dev", "-Bm", "mod", "a"],
            ["-W", "ignore", "-X", "dev", "-B"],
            ["-m", "mod", "a"],
        ),
        (["python3", "-Wignore", "--", "t.py"], ["-Wignore"], ["t.py"]),
        (["python3", "-mmod", "x"], [], ["-m", "mod", "x"]),
        (["python3", "-I", "-c", "pass"], ["-I"], ["-c", "pass"]),
        (["python3", "-u"], ["-u"], []),
    ],
)
def test_a_python_commands_own_options_are_told_from_its_program(
    argv: list[str], options: list[str], program: list[str]
) -> None:
    assert split_python_command(argv) == (options, program)
