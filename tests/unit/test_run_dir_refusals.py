"""The tables of run-directory and run_root refusals: every row refuses the path made to trip it, in
words that name the path and what to do, and lets a path of the user's own alone."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from launcher.common.errors import LaunchError, RunDirError, UsageError
from launcher.rundir.lock import lock_run
from launcher.rundir.refusals import (
    FOR_A_LAUNCH,
    RUN_ROOT_IN_A_RUN,
    RUN_ROOT_MOUNTED,
    SAFE_ANCESTRY,
    refuse_run_dir,
    refuse_run_root,
)
from launcher.spec.load import parse_spec
from launcher.spec.models import ClusterSpec


def _open_above(tmp: Path) -> Path:
    (tmp / "open").mkdir()
    (tmp / "open").chmod(0o777)  # others may rename what is in it: no sticky bit
    return tmp / "open" / "run"


def _too_long(tmp: Path) -> Path:
    return tmp / ("x" * 300)


def _link(tmp: Path) -> Path:
    (tmp / "real").mkdir()
    (tmp / "run").symlink_to(tmp / "real")
    return tmp / "run"


def _file(tmp: Path) -> Path:
    (tmp / "run").write_text("")
    return tmp / "run"


def _theirs(tmp: Path) -> Path:
    if os.geteuid() != 0:
        pytest.skip("giving a directory to another user needs root")
    (tmp / "run").mkdir()
    os.chown(tmp / "run", 65534, 65534)
    return tmp / "run"


def _group_writable(tmp: Path) -> Path:
    (tmp / "run").mkdir()
    (tmp / "run").chmod(0o770)
    return tmp / "run"


def _users_own(tmp: Path) -> Path:
    (tmp / "run").mkdir(mode=0o700)
    (tmp / "run" / "results.csv").write_text("precious")
    return tmp / "run"


def _running(tmp: Path) -> Path:
    (tmp / "run").mkdir(mode=0o700)
    lock_run(str(tmp / "run"))  # held by this process until the test ends: another launcher, for the table
    return tmp / "run"


# (row, makes the path that trips it, the exception, words the message holds)
RUN_DIR_CASES: list[tuple[str, Callable[[Path], Path], type[LaunchError], str]] = [
    ("safe-ancestry", _open_above, UsageError, "is writable by others (mode 0777) and not sticky"),
    ("can-be-looked-at", _too_long, UsageError, "cannot be used as the run directory (File name too long)"),
    ("not-a-symbolic-link", _link, UsageError, "is a symbolic link: the launcher writes only in a directory"),
    ("a-directory", _file, RunDirError, "it exists and is not a directory"),
    ("yours", _theirs, UsageError, "belongs to uid 65534, not to you"),
    ("yours-alone", _group_writable, UsageError, "is writable by others (mode 0770)"),
    ("not-another-directory", _users_own, UsageError, "holds files no launch wrote (results.csv)"),
    ("not-running", _running, UsageError, f"is being run by another launcher (pid {os.getpid()})"),
]


def test_every_run_dir_row_has_a_case() -> None:
    assert [name for name, *_ in RUN_DIR_CASES] == [row.name for row in FOR_A_LAUNCH]


@pytest.mark.parametrize("name, make, error, says", RUN_DIR_CASES, ids=[case[0] for case in RUN_DIR_CASES])
def test_each_run_dir_row_refuses_its_path(
    tmp_path: Path, name: str, make: Callable[[Path], Path], error: type[LaunchError], says: str
) -> None:
    path = make(tmp_path)
    row = next(row for row in FOR_A_LAUNCH if row.name == name)
    with pytest.raises(error) as caught:
        refuse_run_dir(str(path), (row,))
    assert says in str(caught.value) and caught.value.exit_code == 2
    assert isinstance(caught.value, RunDirError) or str(caught.value).endswith("Nothing was started.")
    with pytest.raises(error, match="."):
        refuse_run_dir(str(path))  # the whole table refuses it too
    refuse_run_dir(str(tmp_path / "fresh"), (row,))  # a run directory not made yet passes every row


def test_a_run_directory_of_a_launchs_own_passes_the_table(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    (run / "launch.lock").write_text("")
    (run / "summary.json").write_text("{}")
    refuse_run_dir(str(run))


def _spec(run_root: Path) -> ClusterSpec:
    return parse_spec({"name": "r", "run_root": str(run_root), "hosts": [{"address": "localhost", "workers": 1}]})


def test_a_run_root_through_a_symbolic_link_to_nothing_is_refused(tmp_path: Path) -> None:
    (tmp_path / "mnt").symlink_to(tmp_path / "not-mounted")
    with pytest.raises(UsageError, match="is a symbolic link to .*not-mounted, which does not exist"):
        refuse_run_root(_spec(tmp_path / "mnt" / "runs"), (RUN_ROOT_MOUNTED,))
    refuse_run_root(_spec(tmp_path / "runs"), (RUN_ROOT_MOUNTED, SAFE_ANCESTRY))


def test_a_run_root_inside_a_run_is_refused_naming_the_directory_above_the_run(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "mine"
    run.mkdir(parents=True)
    (run / "summary.json").write_text("{}")
    with pytest.raises(UsageError, match=r"is itself a run directory \(it holds summary.json\)") as caught:
        refuse_run_root(_spec(run), (RUN_ROOT_IN_A_RUN,))
    assert f"give the directory above the run ({tmp_path / 'runs'})" in str(caught.value)
    refuse_run_root(_spec(tmp_path / "runs"), (RUN_ROOT_IN_A_RUN,))
