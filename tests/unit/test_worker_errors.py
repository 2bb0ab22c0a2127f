"""A mistake in what the worker was asked to run is recorded with the user's own frames only."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from worker.errors import write_error_file
from worker.targets import WorkerUsageError, load_target


@pytest.fixture
def user_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    for name in [n for n in sys.modules if n.startswith("user_mod_")]:
        del sys.modules[name]


def _recorded(error: WorkerUsageError, tmp_path: Path) -> dict[str, str]:
    write_error_file(str(tmp_path / "error.json"), "worker:0", error, usage=True)
    return json.loads((tmp_path / "error.json").read_text())


def test_an_import_failing_inside_the_users_module_shows_their_line_not_the_runtime(user_dir: Path) -> None:
    (user_dir / "user_mod_a.py").write_text("import os\nimport no_such_lib_xyz\ndef train(ctx): ...\n")
    with pytest.raises(WorkerUsageError) as caught:
        load_target("user_mod_a:train")
    recorded = _recorded(caught.value, user_dir)
    assert "No module named 'no_such_lib_xyz'" in recorded["message"]
    trace = recorded["traceback"]
    assert f'File "{user_dir / "user_mod_a.py"}", line 2' in trace and "import no_such_lib_xyz" in trace, trace
    assert "targets.py" not in trace and "importlib" not in trace and "<frozen" not in trace, trace


def test_a_misspelt_function_has_no_traceback_at_all(user_dir: Path) -> None:
    (user_dir / "user_mod_b.py").write_text("def train(ctx): ...\n")
    with pytest.raises(WorkerUsageError) as caught:
        load_target("user_mod_b:trian")
    recorded = _recorded(caught.value, user_dir)
    assert recorded["message"] == "cannot load 'user_mod_b:trian': module 'user_mod_b' has no attribute 'trian'"
    assert recorded["traceback"] == ""


def test_other_errors_keep_their_whole_traceback(tmp_path: Path) -> None:
    try:
        raise RuntimeError("inside the runtime")
    except RuntimeError as error:
        write_error_file(str(tmp_path / "error.json"), "worker:0", error)
    trace = json.loads((tmp_path / "error.json").read_text())["traceback"]
    assert "test_worker_errors.py" in trace and "RuntimeError: inside the runtime" in trace


def test_where_tensorflow_ran_the_op_is_left_out_of_the_message(tmp_path: Path) -> None:
    error = RuntimeError(
        "{{function_node __wrapped__CreateSummaryFileWriter_device_/job:worker/replica:0/task:0/device:CPU:0}} "
        "File system scheme 's3' not implemented (file: 's3://bucket/run/tb') [Op:CreateSummaryFileWriter]"
    )
    write_error_file(str(tmp_path / "error.json"), "worker:0", error)
    message = json.loads((tmp_path / "error.json").read_text())["message"]
    assert message.startswith("File system scheme 's3' not implemented"), message


def test_a_users_module_named_like_one_imported_already_is_said_to_be_shadowed(user_dir: Path) -> None:
    (user_dir / "json.py").write_text("def train(ctx): ...\n")  # the runtime imported Python's json long before
    with pytest.raises(WorkerUsageError) as caught:
        load_target("json:train")
    assert "module 'json' has no attribute 'train' (your json.py is not the 'json' the task imports" in str(
        caught.value
    ), caught.value
    assert "rename yours" in str(caught.value)
    (user_dir / "user_mod_c.py").write_text("def train(ctx): ...\n")
    with pytest.raises(WorkerUsageError) as caught:
        load_target("user_mod_c:trian")
    assert "your" not in str(caught.value), "a module of the user's own that was loaded is not called shadowed"
