"""A run directory that cannot be written: refused before any task starts, the transport closed.

`launch status RUN_DIR` of hand-made run directories: its text and its exit code by the run's state."""

from __future__ import annotations

import io
import json
import os
import time
from pathlib import Path

import psutil
import pytest

from launcher import run
from launcher.common import exit_codes
from launcher.common.errors import RunDirError
from launcher.console import Console
from launcher.preflight.check import PreflightReport
from launcher.rundir.place import place_of
from launcher.rundir.status import SUMMARY_EXIT_CODES, RunStatusError, describe_run
from launcher.spec.load import parse_spec
from tests.unit.fakes import FakeTransport
from worker.contract import RunLayout


def test_an_unwritable_run_dir_closes_the_transport_and_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # run_root below a file: every mkdir there fails (ENOTDIR), even as root
    spec = parse_spec(
        {
            "name": "r",
            "run_root": str(blocker),
            "hosts": [{"address": "localhost", "ports": [0]}],
            "training": {"kind": "command", "argv": ["python", "-c", "pass"]},
        }
    )
    transport = FakeTransport()
    monkeypatch.setattr(run, "make_transport", lambda spec, allocation, run_dir, network=None: transport)
    monkeypatch.setattr(run, "start_local_network", lambda spec, plan, allocation: None)  # no real namespaces
    monkeypatch.setattr(run, "preflight", lambda spec, plan, transport: PreflightReport())
    with pytest.raises(RunDirError) as caught:
        run.launch(spec, Console(out=io.StringIO(), err=io.StringIO()))
    message = str(caught.value)
    assert caught.value.exit_code == 2 and str(blocker) in message and "Nothing was started" in message
    assert transport.closed and transport.start_calls == 0


# `launch status RUN_DIR`: text and exit code from hand-made run directories.


def _layout(tmp_path: Path) -> RunLayout:
    return RunLayout(str(tmp_path / "runs" / "r"))


def _write(path: str, data: object) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(data, handle)


def _summary(layout: RunLayout, state: str, **fields: object) -> dict[str, object]:
    return {
        "run_dir": layout.run_dir,
        "state": state,
        "final_step": 40,
        "restarts": 0,
        "preemptions": 0,
        "first_failure": None,
        "outputs": {},
        "attempts": [{"attempt": 0, "reason": "r", "tasks": []}],
        **fields,
    }


def _status(pid: int, started: float | None, **fields: object) -> dict[str, object]:
    return {
        "launcher_pid": pid,
        "launcher_started": started,
        "updated": time.time(),
        "attempt": 1,
        "restarts": 1,
        "tasks": [{"task": "worker:0", "state": "running", "step": 12, "steps_per_s": 3.0, "last_line": "hi"}],
        **fields,
    }


def _own_status(**fields: object) -> dict[str, object]:
    """A status.json whose launcher is this very process: a live launcher."""
    return _status(os.getpid(), psutil.Process().create_time(), **fields)


def _age(path: str, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


@pytest.mark.parametrize(
    ("state", "code"),
    [
        ("succeeded", exit_codes.SUCCEEDED),
        ("failed", exit_codes.FAILED),
        ("preempted", exit_codes.PREEMPTED),
        ("interrupted", exit_codes.INTERRUPTED),
    ],
)
def test_a_finished_run_exits_by_its_state(tmp_path: Path, state: str, code: int) -> None:
    layout = _layout(tmp_path)
    _write(layout.summary_file, _summary(layout, state))
    shown = describe_run(layout.run_dir)
    assert shown.exit_code == code
    assert shown.text.startswith(f"{layout.run_dir}: {state} at step 40 after 1 attempt(s)")


def test_every_terminal_launch_state_has_its_exit_code() -> None:
    from launcher.supervise.gang import LaunchState

    assert set(SUMMARY_EXIT_CODES) == {state.value for state in LaunchState if state.is_terminal}


def _one_task(reported: bool, exit: str) -> list[dict[str, object]]:
    """The attempts of a summary whose one task never reported a step."""
    task = {"name": "worker:0", "host": "localhost", "exit": exit, "reported": reported, "step": None}
    return [{"attempt": 0, "reason": "r", "tasks": [task]}]


def test_a_run_that_failed_before_any_step_says_so_and_never_none(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    _write(layout.summary_file, _summary(layout, "failed", final_step=None, attempts=_one_task(True, "exit 1")))
    shown = describe_run(layout.run_dir)
    assert shown.exit_code == exit_codes.FAILED
    assert f"{layout.run_dir}: failed before any step after 1 attempt(s)" in shown.text
    assert "None" not in shown.text


def test_a_task_that_failed_shows_the_last_step_it_reported(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    attempts = _one_task(True, "killed by SIGKILL")
    attempts[0]["tasks"][0]["step"] = 10  # type: ignore[index]
    _write(layout.summary_file, _summary(layout, "failed", final_step=10, attempts=attempts))
    assert "    worker:0     on localhost        killed by SIGKILL step 10" in describe_run(layout.run_dir).text


def test_a_script_that_never_reported_a_step_is_not_said_to_have_stopped_before_one(tmp_path: Path) -> None:
    """A command that never calls `report`: it may have trained for hours; only its steps are unknown."""
    layout = _layout(tmp_path)
    _write(layout.summary_file, _summary(layout, "succeeded", final_step=None, attempts=_one_task(False, "exit 0")))
    shown = describe_run(layout.run_dir)
    assert f"{layout.run_dir}: succeeded with no step reported after 1 attempt(s)" in shown.text
    assert "before any step" not in shown.text


def test_a_running_run_exits_3_and_shows_step_of_total_and_loss(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    tasks = [
        {
            "task": "worker:0",
            "state": "running",
            "step": 12,
            "total": 60,
            "loss": 0.123456,
            "steps_per_s": 3.0,
            "eta_s": 16,
        },
        {"task": "worker:1", "state": "joining", "step": None, "steps_per_s": None},
    ]
    _write(layout.status_file, _own_status(tasks=tasks))
    shown = describe_run(layout.run_dir)
    assert shown.exit_code == exit_codes.RUNNING
    assert f": running (launcher pid {os.getpid()}, attempt 1, restarts 1" in shown.text
    header, first, second = shown.text.splitlines()[1:]
    assert "loss" in header and "12/60" in first and "0.1235" in first and "3.0" in first
    assert "ETA" in header and " 0:16 " in first
    for forged in (float("inf"), 1e308, -5, "soon", True, 10**400):
        _write(layout.status_file, _own_status(tasks=[{**tasks[0], "eta_s": forged, "loss": forged}]))
        shown_text = describe_run(layout.run_dir).text
        assert "12/60" in shown_text and "ETA" not in shown_text  # no ETA to show, and no traceback
    assert "worker:1" in second and "None" not in second
    _write(layout.status_file, _own_status(tasks=[{**tasks[0], "loss": "NaN"}]))  # a diverged loss (json_lines)
    assert " nan " in describe_run(layout.run_dir).text.splitlines()[2]


def test_a_running_run_without_total_or_loss_shows_the_step_alone(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    _write(layout.status_file, _own_status())
    shown = describe_run(layout.run_dir)
    header, row = shown.text.splitlines()[1:]
    assert "loss" not in header and " 12 " in row and "/" not in row


def test_a_launcher_killed_without_summary_exits_5(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    # this process's pid with another create time: a launcher that is gone, its pid given to another process
    _write(layout.status_file, _status(os.getpid(), psutil.Process().create_time() - 100))
    shown = describe_run(layout.run_dir)
    assert shown.exit_code == exit_codes.STOPPED
    assert "stopped: its launcher" in shown.text and "is gone and wrote no summary" in shown.text
    row = shown.text.splitlines()[-1]
    assert "was running" in row and "3.0" not in row  # last seen, not running now
    ended = [{"task": "worker:0", "state": "exited 0", "step": 12}, {"task": "worker:1", "state": "killed by SIGKILL"}]
    _write(layout.status_file, _status(os.getpid(), psutil.Process().create_time() - 100, tasks=ended))
    rows = describe_run(layout.run_dir).text.splitlines()[-2:]
    assert "exited 0" in rows[0] and "killed by SIGKILL" in rows[1] and "was " not in "".join(rows)


def test_a_launcher_stopping_its_tasks_says_so(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    _write(layout.status_file, _own_status(stopping=True))
    shown = describe_run(layout.run_dir)
    assert shown.exit_code == exit_codes.RUNNING
    assert f": stopping its tasks (launcher pid {os.getpid()}, attempt 1" in shown.text


def test_a_summary_of_an_earlier_launch_does_not_hide_a_killed_one(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    _write(layout.summary_file, _summary(layout, "succeeded"))
    _age(layout.summary_file, 300)  # from an earlier launch of this run
    _write(layout.status_file, _status(os.getpid(), time.time() - 100))  # a later launcher, gone now
    assert describe_run(layout.run_dir).exit_code == exit_codes.STOPPED


def test_the_summary_of_the_launch_that_wrote_the_status_wins(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    _write(layout.status_file, _own_status())
    _age(layout.status_file, 5)  # its last status came a little before the summary
    _write(layout.summary_file, _summary(layout, "interrupted"))
    shown = describe_run(layout.run_dir)
    assert shown.exit_code == exit_codes.INTERRUPTED and ": interrupted at step 40" in shown.text


def test_a_summary_written_just_before_a_relaunch_is_the_earlier_launchs(tmp_path: Path) -> None:
    """A create time is whole seconds of boot time plus ticks: up to a second early. When the run was
    taken is written precisely, and a summary from half a second before it is not this launch's."""
    layout = _layout(tmp_path)
    _write(layout.summary_file, _summary(layout, "succeeded"))
    _age(layout.summary_file, 0.5)
    taken = time.time() - 1.2  # the run was taken before the summary was written
    _write(layout.status_file, _status(os.getpid(), psutil.Process().create_time(), run_since=time.time()))
    assert describe_run(layout.run_dir).exit_code == exit_codes.RUNNING
    _write(layout.status_file, _status(os.getpid(), psutil.Process().create_time(), run_since=taken))
    assert describe_run(layout.run_dir).exit_code == exit_codes.SUCCEEDED  # written since: this launch's


def test_forged_times_in_status_json_are_not_believed_nor_a_traceback(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    _write(layout.summary_file, _summary(layout, "succeeded"))
    _age(layout.summary_file, 30)
    gone = psutil.Process().create_time() - 100  # a launcher that is gone
    for forged in (10**400, float("nan"), float("inf"), 1e300, -1.0, "soon", True):
        _write(layout.status_file, _status(os.getpid(), gone, run_since=forged))
        # an unbelievable time is as if absent: the create time decides, and the summary is newer
        assert describe_run(layout.run_dir).exit_code == exit_codes.SUCCEEDED, forged
        _write(layout.status_file, _status(os.getpid(), forged))
        describe_run(layout.run_dir)  # no create time to believe: the pid is trusted, as in older files
    _write(layout.status_file, _status(os.getpid(), gone, updated=10**400))
    with pytest.raises(RunStatusError, match="'updated' is not a time"):
        describe_run(layout.run_dir)


def test_only_outputs_that_exist_are_listed(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    os.makedirs(layout.default_checkpoint_dir)
    _write(os.path.join(layout.default_checkpoint_dir, "ckpt-1.index"), {})
    os.makedirs(layout.attempt_dir(0))
    _write(layout.metrics_file, {})
    outputs = {
        **layout.outputs(layout.default_checkpoint_dir),  # eval.jsonl, model and tensorboard never written
        "remote": "gs://bucket/model",
    }
    _write(layout.summary_file, _summary(layout, "succeeded", outputs=outputs))
    text = describe_run(layout.run_dir).text
    listed = text.split("  outputs:\n")[1].splitlines()
    names = [line.split()[0] for line in listed]
    assert names == ["metrics", "checkpoints", "logs", "remote"]
    assert f"checkpoints  {layout.default_checkpoint_dir}" in text and "gs://bucket/model" in text


def test_a_checkpoint_directory_holding_only_the_mark_is_not_an_output(tmp_path: Path) -> None:
    """Every run makes and marks its checkpoint directory: a script that saves nothing wrote none."""
    from launcher.rundir.checkpoint_mark import MARKER

    layout = _layout(tmp_path)
    os.makedirs(layout.default_checkpoint_dir)
    _write(os.path.join(layout.default_checkpoint_dir, MARKER), {})
    _write(layout.summary_file, _summary(layout, "succeeded", outputs=layout.outputs(layout.default_checkpoint_dir)))
    assert "outputs:" not in describe_run(layout.run_dir).text


def test_no_outputs_section_when_none_exists(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    outputs = layout.outputs(layout.default_checkpoint_dir)
    _write(layout.summary_file, _summary(layout, "failed", outputs=outputs))
    assert "outputs:" not in describe_run(layout.run_dir).text


def test_outputs_of_a_run_moved_aside_are_found_where_it_is_now(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    _write(layout.summary_file, _summary(layout, "succeeded", outputs=layout.outputs(layout.default_checkpoint_dir)))
    moved = RunLayout(layout.run_dir + ".old")
    os.rename(layout.run_dir, moved.run_dir)
    os.makedirs(moved.default_checkpoint_dir)
    _write(os.path.join(moved.default_checkpoint_dir, "ckpt-1.index"), {})
    text = describe_run(moved.run_dir).text
    assert f"checkpoints  {moved.default_checkpoint_dir}" in text


@pytest.mark.parametrize(
    ("files", "needle"),
    [
        ({}, "has neither summary.json nor status.json"),
        ({"summary.json": '{"state": "succ'}, "summary.json: not valid JSON"),
        ({"summary.json": "[1, 2]"}, "summary.json: not a launch summary.json"),
        ({"summary.json": '{"name": "x"}'}, "summary.json: field 'attempts' is missing"),
        ({"summary.json": '{"state": "sideways", "attempts": []}'}, "state 'sideways' is not one launch writes"),
        ({"status.json": '{"launcher_pid": "x", "tasks": []}'}, "status.json: field"),
        ({"status.json": '{"launcher_pid": 1, "tasks": [3]}'}, "status.json: a task entry has no name"),
        ({"status.json": b"\xff"}, "status.json: cannot read it"),
    ],
)
def test_status_of_what_is_not_a_healthy_run_is_a_usage_error(
    tmp_path: Path, files: dict[str, str | bytes], needle: str
) -> None:
    for name, text in files.items():
        (tmp_path / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(RunStatusError) as caught:
        describe_run(str(tmp_path))
    assert needle in str(caught.value) and caught.value.exit_code == exit_codes.USAGE


def test_status_of_a_missing_directory_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(RunStatusError, match="no such directory"):
        describe_run(str(tmp_path / "nowhere"))
    (tmp_path / "afile").write_text("")
    with pytest.raises(RunStatusError, match="afile: not a directory"):
        describe_run(str(tmp_path / "afile"))


def test_a_status_naming_pid_0_is_never_a_live_launcher(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    _write(layout.status_file, _status(0, None))
    assert describe_run(layout.run_dir).exit_code == exit_codes.STOPPED


def test_a_resume_refuses_checkpoints_of_another_model_or_optimizer_but_not_other_steps() -> None:
    from launcher.rundir.training_identity import what_trains

    def trains(**changed: object) -> object:
        training = {"kind": "builtin", "steps": 200, "optimizer": "adam", "hidden_units": 64, "features": 16}
        return what_trains({"training": {**training, **changed}})

    assert trains(steps=400, log_every=5) == trains()  # training further resumes
    for changed in ({"optimizer": "sgd"}, {"hidden_units": 32}, {"features": 8}, {"mixed_precision": "mixed_float16"}):
        assert trains(**changed) != trains(), changed


def test_a_command_resumes_whatever_its_own_arguments_but_not_another_program() -> None:
    from launcher.rundir.training_identity import what_trains

    def trains(*argv: str) -> object:
        return what_trains({"training": {"kind": "command", "argv": list(argv)}})

    same = trains("python3", "train.py")
    for argv in (
        ("python3", "train.py", "--steps", "40"),
        ("python", "./train.py"),
        ("/usr/bin/python3.11", "-u", "-X", "dev", "-Wignore", "train.py", "--lr", "0.1"),
        ("python3", "-u", "--", "train.py"),
        ("python3", "--check-hash-based-pycs", "always", "train.py"),
    ):
        assert trains(*argv) == same, argv
    assert trains("python3", "-m", "pkg.train", "--steps", "9") == trains("python", "-um", "pkg.train")
    assert trains("python3", "-uc", "pass") == trains("python3", "-c", "pass", "--steps", "3")
    for argv in (
        ("python3", "other.py"),
        ("python3", "-m", "train"),
        ("python3", "-c", "pass"),
        ("python3", "--check-hash-based-pycs", "always", "other.py"),
        ("bash", "train.py"),
        ("./train", "--steps", "4"),
    ):
        assert trains(*argv) != same, argv
    assert trains("python3", "-m", "coverage", "run", "a.py") != trains("python3", "-m", "coverage", "run", "b.py")
    # any other command counts whole: its program may be any of its words
    for first, second in (
        (("bash", "-c", "python3 a.py"), ("bash", "-c", "python3 b.py")),
        (("sh", "-x", "run.sh"), ("sh", "-x", "other.sh")),
        (("env", "-u", "X", "python3", "a.py"), ("env", "-u", "X", "python3", "b.py")),
        (("mpirun", "-np", "2", "python3", "a.py"), ("mpirun", "-np", "2", "python3", "b.py")),
        (("./train", "--steps", "4"), ("./train", "--steps", "8")),
    ):
        assert trains(*first) != trains(*second), (first, second)


def test_a_checkpoint_mark_is_believed_only_as_a_plain_file_of_ours(tmp_path: Path) -> None:
    import json

    from launcher.rundir.checkpoint_mark import MARKER, marked_writer

    mark = tmp_path / MARKER
    mark.write_text(json.dumps({"run_dir": "/runs/x"}))
    assert marked_writer(str(tmp_path)) == "/runs/x"
    for run_dir in ("runs/x", "/runs/\x1b[2Jx", 7, ""):
        mark.write_text(json.dumps({"run_dir": run_dir}))
        assert marked_writer(str(tmp_path)) is None, run_dir
    mark.write_text("[" * 100_000 + "]" * 100_000)
    assert marked_writer(str(tmp_path)) is None
    mark.unlink()
    (tmp_path / "elsewhere.json").write_text(json.dumps({"run_dir": "/runs/x"}))
    mark.symlink_to(tmp_path / "elsewhere.json")
    assert marked_writer(str(tmp_path)) is None
    if os.geteuid() == 0:  # another user's file (made so by root)
        mark.unlink()
        mark.write_text(json.dumps({"run_dir": "/runs/x"}))
        os.chown(mark, 12345, 12345)
        assert marked_writer(str(tmp_path)) is None


def test_a_launch_waits_out_another_launchs_check_of_the_mark_but_not_a_launch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A check holds the mark's lock shared for an instant: a launch taking it then is not refused as
    'being written by another launch'; a launch that holds it for its run still refuses the next one."""
    import fcntl
    import os

    from launcher.common.errors import UsageError
    from launcher.rundir import checkpoint_mark

    spec = parse_spec({"name": "m", "hosts": [{"address": "localhost"}]})
    (tmp_path / checkpoint_mark.MARKER).write_text("{}")
    checking = os.open(tmp_path / checkpoint_mark.MARKER, os.O_RDONLY)
    fcntl.flock(checking, fcntl.LOCK_SH | fcntl.LOCK_NB)
    waits: list[float] = []

    def check_ends(seconds: float) -> None:  # the launch waits once: the check is over by then
        waits.append(seconds)
        if len(waits) == 1:
            os.close(checking)  # the check's lock goes with its descriptor

    monkeypatch.setattr(checkpoint_mark.time, "sleep", check_ends)
    lock = checkpoint_mark.mark_checkpoints(spec, "/runs/m", str(tmp_path))
    assert lock is not None and len(waits) == 1
    try:
        with pytest.raises(UsageError, match="being written by another launch now"):
            checkpoint_mark.mark_checkpoints(spec, "/runs/other", str(tmp_path))
    finally:
        lock.release()
    # a check that holds the mark longer, for the run that wrote it: said as what it is, not a launch
    checking = os.open(tmp_path / checkpoint_mark.MARKER, os.O_RDONLY)
    try:
        fcntl.flock(checking, fcntl.LOCK_SH | fcntl.LOCK_NB)
        with pytest.raises(UsageError, match="locked by another process .* not by a run writing there: try again"):
            checkpoint_mark.mark_checkpoints(spec, "/runs/m", str(tmp_path))
    finally:
        os.close(checking)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_fresh_does_not_move_another_users_checkpoint_dir(tmp_path: Path) -> None:
    """Root's `--fresh` would rename another user's directory and make its own in its place."""
    from launcher.common.errors import UsageError
    from launcher.rundir.checkpoint_mark import refuse_if_unsafe

    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    with pytest.raises(UsageError, match="belongs to uid 65534, not to you"):
        refuse_if_unsafe(str(theirs), to_move=True)
    refuse_if_unsafe(str(tmp_path / "missing"), to_move=True)  # nothing there: nothing to refuse


def test_a_run_directory_named_with_escapes_is_shown_as_plain_text(tmp_path: Path) -> None:
    from launcher.rundir.status import RunStatusError

    with pytest.raises(RunStatusError) as caught:
        describe_run(str(tmp_path / "r\x1b[31mred\nline"))
    assert "\x1b" not in str(caught.value) and "\n" not in str(caught.value)
    assert "r\\x1b[31mred\\nline: no such directory" in str(caught.value), "shown whole, escaped"


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a symbolic link to another user needs root")
def test_a_run_root_through_another_users_symbolic_link_is_refused_before_it_is_resolved(tmp_path: Path) -> None:
    from launcher.common.errors import UsageError

    (tmp_path / "mine").mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "mine")
    spec = parse_spec({"name": "r", "run_root": str(link), "hosts": [{"address": "localhost", "workers": 1}]})
    assert Path(place_of(spec).run_dir) == (tmp_path / "mine" / "r").resolve()  # our own link: followed
    os.lchown(link, 65534, 65534)
    with pytest.raises(UsageError, match="is a symbolic link of uid 65534"):
        Path(place_of(spec).run_dir)


def test_the_checkpoint_a_resume_restores_is_the_one_tensorflows_index_names_when_it_is_there(tmp_path: Path) -> None:
    from launcher.rundir.checkpoint_mark import latest_checkpoint

    assert latest_checkpoint(str(tmp_path)) is None  # no index file
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "ckpt-7"\nall_model_checkpoint_paths: "ckpt-7"\n')
    assert latest_checkpoint(str(tmp_path)) is None  # it names a checkpoint that is not there
    (tmp_path / "ckpt-7.index").write_text("")
    assert latest_checkpoint(str(tmp_path)) == "ckpt-7"
    (tmp_path / "checkpoint").write_text(f'model_checkpoint_path: "{tmp_path}/ckpt-7"\n')  # absolute, as some write
    assert latest_checkpoint(str(tmp_path)) == "ckpt-7"


def test_a_checkpoint_directory_is_resumed_from_only_when_checkpoints_were_written_there(tmp_path: Path) -> None:
    from launcher.rundir.checkpoint_mark import MARKER, resumable

    project = tmp_path / "project"  # `checkpoint_dir: "."`: a first launch finds the user's files there
    project.mkdir()
    (project / "train.py").write_text("")
    (project / "data.csv").write_text("")
    run_dir = project / "runs" / "r"
    assert not resumable(str(project), str(run_dir))
    (project / MARKER).write_text(json.dumps({"found": ["data.csv", "train.py"]}))  # as its first launch marked it
    assert not resumable(str(project), str(run_dir)), "the files that were there before do not count"
    (project / "model.keras").write_text("")  # the script wrote its own format since
    assert resumable(str(project), str(run_dir))
    (project / "model.keras").unlink()
    (project / MARKER).write_text("{}")  # a mark without the list (an older launch's): every file counts
    assert resumable(str(project), str(run_dir))
    run_dir.mkdir(parents=True)  # `checkpoint_dir` the run directory itself: the launch's own files do not count
    for name in ("spec.json", "summary.json", "status.json", "launch.lock", "metrics.jsonl", MARKER):
        (run_dir / name).write_text("")
    (run_dir / "attempt-0").mkdir()
    assert not resumable(str(run_dir), str(run_dir))
    (run_dir / "model.keras").write_text("")
    assert resumable(str(run_dir), str(run_dir))
    other = tmp_path / "other"  # what TensorFlow would restore counts without a mark (written by hand, or by a tool)
    other.mkdir()
    assert not resumable(str(other), str(run_dir))
    (other / "ckpt-3.index").write_text("")
    assert not resumable(str(other), str(run_dir)), "an index alone: TensorFlow's latest_checkpoint finds nothing"
    (other / "checkpoint").write_text('model_checkpoint_path: "ckpt-3"\n')
    assert resumable(str(other), str(run_dir))


def test_the_mark_keeps_what_its_first_launch_found_in_the_directory(tmp_path: Path) -> None:
    from launcher.rundir.checkpoint_mark import mark_checkpoints, read_mark, resumable

    spec = parse_spec({"name": "m", "hosts": [{"address": "localhost", "workers": 1}]})
    (tmp_path / "notes.txt").write_text("")
    lock = mark_checkpoints(spec, str(tmp_path / "runs" / "m"), str(tmp_path))
    assert lock is not None
    lock.release()
    assert (read_mark(str(tmp_path)) or {}).get("found") == ["notes.txt"]
    (tmp_path / "weights.h5").write_text("")  # what the training wrote
    again = mark_checkpoints(spec, str(tmp_path / "runs" / "m"), str(tmp_path))
    assert again is not None
    again.release()
    assert (read_mark(str(tmp_path)) or {}).get("found") == ["notes.txt"], "a later launch keeps the first list"
    assert resumable(str(tmp_path), str(tmp_path / "runs" / "m"))


def test_what_counts_as_checkpoints_follows_what_tensorflow_or_the_training_wrote(tmp_path: Path) -> None:
    from launcher.rundir.checkpoint_mark import MARKER, mark_checkpoints, resumable

    run_dir = str(tmp_path / "runs" / "m")
    (tmp_path / "vectors.index").write_text("")  # a *.index of the user's own, not a CheckpointManager's
    (tmp_path / "checkpoint").mkdir()  # a directory named checkpoint is not TensorFlow's index file
    (tmp_path / "model.pt").write_text("by hand, before any launch")
    old = time.time() - 60
    os.utime(tmp_path / "model.pt", (old, old))
    assert not resumable(str(tmp_path), run_dir)
    spec = parse_spec({"name": "m", "hosts": [{"address": "localhost", "workers": 1}]})
    lock = mark_checkpoints(spec, run_dir, str(tmp_path))
    assert lock is not None
    lock.release()
    assert not resumable(str(tmp_path), run_dir)
    (tmp_path / "model.pt").write_text("overwritten by the training")  # a name that was there, written since
    assert resumable(str(tmp_path), run_dir)
    (tmp_path / MARKER).write_text("")  # a mark cut short (a full disk): nothing tells what was there before
    assert resumable(str(tmp_path), run_dir)
    (tmp_path / MARKER).write_text(json.dumps({"found": [{"odd": 1}], "found_at": 1.0}))  # edited by hand
    assert resumable(str(tmp_path), run_dir)
    lock = mark_checkpoints(spec, run_dir, str(tmp_path))  # a mark that was there keeps saying it cannot tell
    assert lock is not None
    lock.release()
    assert json.loads((tmp_path / MARKER).read_text())["found"] is None


def test_checkpoints_no_launch_wrote_are_named_and_fresh_moves_them_only_when_they_are_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another tool's TensorFlow checkpoints, with no mark: a launch says that no launch wrote them, and
    `--fresh` moves the directory aside only when it holds nothing but TensorFlow's files."""
    from launcher.common.errors import UsageError
    from launcher.rundir.checkpoint_mark import mark_checkpoints
    from launcher.rundir.fresh import start_over
    from launcher.rundir.resume import resume_notice

    monkeypatch.chdir(tmp_path)
    foreign = tmp_path / "foreign"
    foreign.mkdir(mode=0o700)
    (foreign / "checkpoint").write_text('model_checkpoint_path: "ckpt-3"\n')
    (foreign / "ckpt-3.index").write_text("")
    (foreign / "ckpt-3.data-00000-of-00001").write_text("")
    (foreign / "train.py").write_text("")  # the user's own file beside them
    spec = parse_spec(
        {
            "name": "f",
            "run_root": str(tmp_path / "runs"),
            "checkpoint_dir": str(foreign),
            "hosts": [{"address": "localhost", "workers": 1}],
            "training": {"kind": "command", "argv": ["python3", "train.py"]},
        }
    )
    resuming = resume_notice(spec, place_of(spec))
    assert resuming is not None and resuming.latest == "ckpt-3"
    assert "no launch wrote them (they were there before this run's first launch)" in resuming.would()
    with pytest.raises(UsageError, match=r"holds files that no launch wrote .* \(train\.py\)"):
        start_over(spec, place_of(spec, str(tmp_path)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["foreign"] and (foreign / "train.py").exists()
    (foreign / "train.py").unlink()  # TensorFlow's files alone
    lock = mark_checkpoints(spec, str(tmp_path / "runs" / "f"), str(foreign))  # as a launch that resumed them
    assert lock is not None
    lock.release()
    resuming = resume_notice(spec, place_of(spec))
    assert resuming is not None and "no launch wrote them" in resuming.would(), "still said after a launch"
    moved = start_over(spec, place_of(spec, str(tmp_path)))  # and still moved aside
    assert len(moved) == 1 and moved[0].startswith(f"checkpoints {foreign} -> {foreign}.old-"), moved
    assert not foreign.exists()


def test_status_of_an_attempt_directory_names_the_run_it_lies_in(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    _write(layout.summary_file, _summary(layout, "succeeded"))
    os.makedirs(layout.attempt_dir(0))
    with pytest.raises(RunStatusError) as caught:
        describe_run(layout.attempt_dir(0))
    assert str(caught.value).endswith(f"It lies inside the run {layout.run_dir}: give that.")
    with pytest.raises(RunStatusError) as caught:
        describe_run(str(tmp_path))  # no run above it: no run named
    assert "It lies inside" not in str(caught.value)
    deeper = os.path.join(layout.attempt_dir(0), "a", "b")
    os.makedirs(deeper)
    log = os.path.join(layout.attempt_dir(0), "worker-0.log")
    _write(log, {})
    for inside in (deeper, log):  # a directory three levels down, a log file: the run is named too
        with pytest.raises(RunStatusError) as caught:
            describe_run(inside)
        assert str(caught.value).endswith(f"It lies inside the run {layout.run_dir}: give that."), caught.value


@pytest.mark.parametrize(
    ("cause", "fix"),
    [
        ("No space left on device", "Free space there, or give another place"),
        ("Disk quota exceeded", "Free space there, or give another place"),
        ("Permission denied", "Fix its permissions, or give another place"),
        ("Read-only file system", "Fix its permissions, or give another place"),
        ("No such file or directory", ": No such file or directory. Give another place"),
    ],
)
def test_a_run_directory_that_cannot_be_written_is_told_the_fix_its_cause_asks(cause: str, fix: str) -> None:
    said = str(RunDirError("/proc/nope", cause))
    assert fix in said and said.endswith("the spec's run_root, or --run-root. Nothing was started."), said
