"""The preflight's table of host checks: every row finds its problem in answers that have it, words it
with the host and what to do, and stays silent on a healthy host."""

from __future__ import annotations

from typing import Any

import pytest

from launcher.preflight.host_checks import CHECKS, Seen, host_problems, version_problems

HEALTHY: dict[str, Any] = {
    "python": "3.11.7",
    "executable": "/usr/bin/python3",
    "tensorflow": "2.21.0",
    "worker_ok": True,
    "workdir_ok": True,
    "checkpoint_ok": True,
}

# (row, what the host answered beyond HEALTHY, the built-in runtime runs there, words the problem holds)
CASES: list[tuple[str, dict[str, Any], bool, str]] = [
    ("tensorflow-installed", {"tensorflow": None}, True, "h1: tensorflow is not installed for /usr/bin/python3"),
    ("runtime-python-version", {"python": "3.10.12"}, True, "needs python 3.11 or newer; /usr/bin/python3 is 3.10.12"),
    ("runtime-not-shadowed", {"runtime_shadowed": {"worker": "/w/worker"}}, True, "/w/worker would be imported"),
    ("worker-importable", {"worker_ok": False}, True, "the worker runtime (package 'worker') is not importable"),
    ("workdir-exists", {"workdir_ok": False}, False, "working directory /w does not exist; create it there"),
    ("programs-runnable", {"programs_missing": {"train.py": "not found"}}, False, "-- python3 train.py ..."),
    ("python-starts-with-env", {"startup_env_fails": "no encodings"}, True, "does not start with the spec's env"),
    ("command-modules-found", {"command_modules_missing": ["train.py"]}, False, "-m takes a module's name"),
    ("command-packages-runnable", {"command_packages_without_main": ["a.b"]}, False, "or add a/b/__main__.py"),
    ("scripts-runnable", {"scripts_unrunnable": {"t.py": "a directory"}}, False, "script 't.py' cannot run there"),
    ("checkpoints-safe", {"checkpoint_unsafe": "is writable by others"}, False, "/ck is writable by others: a"),
    (
        "checkpoints-not-dangling",
        {"checkpoint_ok": False, "checkpoint_dangling": "/ck"},
        False,
        "/ck is a symbolic link to nothing",
    ),
    ("checkpoints-writable", {"checkpoint_ok": False}, False, "it must be storage every host shares"),
]


def _seen(info: dict[str, Any], need_worker: bool) -> Seen:
    return Seen("h1", {**HEALTHY, **info}, "/w", "python3", "/ck", need_worker, shared=True)


def test_every_row_has_a_case() -> None:
    assert sorted(name for name, *_ in CASES) == sorted(check.name for check in CHECKS)


def test_a_healthy_host_passes_every_row() -> None:
    assert host_problems(_seen({}, True)) == []


@pytest.mark.parametrize("name, info, need_worker, says", CASES, ids=[case[0] for case in CASES])
def test_each_row_finds_its_problem(name: str, info: dict[str, Any], need_worker: bool, says: str) -> None:
    row = next(check for check in CHECKS if check.name == name)
    found = host_problems(_seen(info, need_worker), (row,))
    assert len(found) == 1 and says in found[0] and found[0].startswith("h1: "), found
    assert found[0] in host_problems(_seen(info, need_worker)), "the table walks every row"
    assert host_problems(_seen({}, need_worker), (row,)) == [], "silent on a healthy host"


def test_versions_that_differ_across_hosts_are_named_with_their_hosts() -> None:
    said = version_problems([("a", HEALTHY), ("b", {**HEALTHY, "python": "3.12.1"}), ("c", HEALTHY)])
    assert said == [
        "python versions differ across hosts (3.11 on a, c; 3.12 on b); install the same version everywhere"
    ]
    assert version_problems([("a", HEALTHY), ("b", {**HEALTHY, "python": "3.11.9"})]) == []


def test_a_relative_working_directory_is_named_with_where_it_is_on_the_host() -> None:
    from launcher.preflight.host_checks import Seen

    seen = Seen("h", {"workdir_ok": True, "workdir_path": "/home/u"}, ".", "python3", "/c", False, False)
    assert seen.fields()["workdir"] == ". (/home/u)"
    assert Seen("h", {"workdir_path": "/w"}, "/w", "python3", "/c", False, False).fields()["workdir"] == "/w"
