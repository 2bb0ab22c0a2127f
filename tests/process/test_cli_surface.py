"""The command line as users of torchrun or kubectl expect it: help everywhere, a version, exit codes,
quick host lists, a fresh start, and the Python API (tiny helper tasks, no TensorFlow)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from launcher import __version__
from launcher.cli.arguments import SUBCOMMANDS, run_parser, sub_parsers
from launcher.common.exit_codes import TABLE
from tests.conftest import HELPERS, REPO, launch_cmd, run_launch, write_spec

TASK = str(HELPERS / "task.py")


@pytest.mark.parametrize("words", [[], *([name] for name in SUBCOMMANDS), ["export", "k8s"], ["slurm", "submit"]])
def test_help_on_every_command_exits_0_and_describes_it(tmp_path: Path, words: list[str]) -> None:
    proc = run_launch([*words, "--help"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: launch {words[0] if words else ''}".rstrip()) and not proc.stderr
    parser = sub_parsers()[words[0]] if words else run_parser()
    assert " ".join(str(parser.description).split())[:40] in " ".join(proc.stdout.split())


def test_the_main_help_lists_subcommands_and_the_exit_code_table(tmp_path: Path) -> None:
    out = run_launch(["--help"], tmp_path).stdout
    assert all(f"launch {name}" in out for name in SUBCOMMANDS)
    assert all(f"{code:>3}  {meaning[:30]}" in out for code, meaning in TABLE)


def test_version(tmp_path: Path) -> None:
    proc = run_launch(["--version"], tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == f"launch (tflaunch) {__version__}"


def test_schema_written_to_a_file_is_the_one_shipped_for_editors(tmp_path: Path) -> None:
    proc = run_launch(["schema", "-o", str(tmp_path / "s.json")], tmp_path)
    assert proc.returncode == 0, proc.stderr
    shipped = json.loads((REPO / "schema.json").read_text())
    assert json.loads((tmp_path / "s.json").read_text()) == shipped, (
        "schema.json is stale: launch schema -o schema.json"
    )
    assert json.loads((REPO / "cluster.example.json").read_text())["$schema"] == "./schema.json"
    again = run_launch(["schema", "-o", str(tmp_path / "s.json")], tmp_path)  # a schema it wrote is replaced
    assert again.returncode == 0, again.stderr


def test_schema_never_overwrites_a_file_it_did_not_write(tmp_path: Path) -> None:
    spec = tmp_path / "cluster.json"
    spec.write_text('{"name": "mine", "hosts": [{"address": "localhost", "workers": 2}]}')
    proc = run_launch(["schema", "-o", str(spec)], tmp_path)
    assert proc.returncode == 2 and "already exists and is not a schema this command wrote" in proc.stderr
    assert json.loads(spec.read_text())["name"] == "mine"
    empty = tmp_path / "made-by-mktemp.json"
    empty.write_text("")
    assert run_launch(["schema", "-o", str(empty)], tmp_path).returncode == 0 and json.loads(empty.read_text())
    to_stdout = run_launch(["schema", "-o", "-"], tmp_path)
    assert to_stdout.returncode == 0 and json.loads(to_stdout.stdout)["title"] == "ClusterSpec"
    assert not (tmp_path / "-").exists()


def test_conflicting_sources_are_a_usage_error(tmp_path: Path) -> None:
    proc = run_launch(["--local", "2", "-H", "localhost:2"], tmp_path)
    assert proc.returncode == 2 and "Give one of --local and -H" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "flags, said",
    [
        (["--check", "--dry-run"], "--dry-run prints the plan and --check runs the preflight: give one of them."),
        (["--quiet", "--show", "worker:0"], "--quiet echoes no task's output and --show echoes only some"),
        (
            ["--check", "--inject", "kill:worker:1@step=5"],
            "--inject rehearses a fault in a run, and --check starts none",
        ),
    ],
)
def test_flags_that_contradict_each_other_are_a_usage_error(tmp_path: Path, flags: list[str], said: str) -> None:
    proc = run_launch(["--local", "2", *flags, "--", "true"], tmp_path)
    assert proc.returncode == 2 and said in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "runs").exists()


def test_a_host_list_runs_without_a_spec_file(work: Path) -> None:
    out = work / "out"
    out.mkdir()
    args = ["-H", "localhost:2", "--run-root", str(work / "runs"), "--", "python3", TASK, "record", str(out)]
    proc = run_launch(args, work)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.stem for p in out.glob("*.json")) == ["worker-0", "worker-1"]
    assert (work / "runs" / "task" / "summary.json").exists()  # a run without a spec is named after its script
    by_name = run_launch(["status", "task"], work)  # a bare name is the run of that name under ./runs
    assert by_name.returncode == 0 and by_name.stdout.startswith("runs/task: succeeded"), by_name.stdout
    assert run_launch(["logs", "task"], work).returncode == 0
    (work / "task").mkdir()  # a stray directory of that name here is no run: the run's is still found
    assert run_launch(["status", "task"], work).stdout.startswith("runs/task: succeeded")
    unknown = run_launch(["status", "notask"], work)
    assert unknown.returncode == 2 and "notask: no such directory" in unknown.stderr and "./runs" in unknown.stderr
    elsewhere = work / "elsewhere"
    elsewhere.mkdir()  # from another directory, by its name and the run_root it was launched with
    rooted = run_launch(["status", "task", "--run-root", str(work / "runs")], elsewhere)
    assert rooted.returncode == 0 and rooted.stdout.startswith(f"{work / 'runs' / 'task'}: succeeded"), rooted.stdout
    assert run_launch(["logs", "--run-root", str(work / "runs"), "task"], elsewhere).returncode == 0
    assert "--run-root DIR for a run under DIR" in run_launch(["status", "task"], elsewhere).stderr


def test_show_echoes_only_the_tasks_named_and_logs_all(work: Path) -> None:
    args = ["--local", "2", "--run-root", str(work / "runs"), "--plain", "--show", "worker:1", "--"]
    proc = run_launch([*args, "python3", "-c", "import os; print('hello from', os.environ['TFLAUNCH_TASK'])"], work)
    assert proc.returncode == 0, proc.stderr
    assert "[worker:1] hello from" in proc.stdout and "[worker:0]" not in proc.stdout
    assert "hello from" in (work / "runs" / "local" / "attempt-0" / "worker-0.log").read_text()


@pytest.mark.parametrize(("code", "exit_code"), [(0, 0), (3, 1)])
def test_a_reader_that_leaves_neither_ends_the_run_nor_hides_its_outcome(work: Path, code: int, exit_code: int) -> None:
    """`launch ... | head -2`: the run goes on to its end, its summary is written, its exit code is the run's."""
    import subprocess

    from tests.conftest import launch_cmd

    task = f"import sys, time; [print(i, flush=True) or time.sleep(0.01) for i in range(300)]; sys.exit({code})"
    args = ["--local", "2", "--run-root", str(work / "runs"), "--plain", "--", "python3", "-c", task]
    proc = subprocess.Popen(launch_cmd(*args), cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # as `head -1` does once it has its line
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == exit_code, err
    assert first.startswith("[worker:") and "standard output was closed by its reader; the run goes on" in err
    summary = json.loads((work / "runs" / "local" / "summary.json").read_text())
    assert summary["state"] == ("succeeded" if code == 0 else "failed")
    logs = [path.read_text() for path in (work / "runs" / "local" / "attempt-0").glob("worker-*.log")]
    # every task's last line is logged after the reader left; when a task fails, the gang is stopped
    # as it exits, so only the failed one is sure to have printed its last line
    assert sum("299" in log for log in logs) >= (2 if code == 0 else 1), [log[-40:] for log in logs]


@pytest.mark.parametrize("unbuffered", ["", "1"])
def test_a_reader_gone_before_the_status_is_printed_keeps_its_exit_code(work: Path, unbuffered: str) -> None:
    """`launch status RUN | true`: the status of a failed run is still its exit code, not 0, whether
    the print or the last flush finds the reader gone."""
    import os
    import subprocess

    from tests.conftest import launch_cmd

    fail = ["python3", "-c", "raise SystemExit(3)"]
    failed = run_launch(["--local", "1", "--run-root", str(work / "runs"), "--", *fail], work)
    assert failed.returncode == 1, failed.stderr
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has left before the status is printed
    try:
        status = subprocess.run(
            launch_cmd("status", str(work / "runs" / "local")),
            cwd=work,
            stdout=write_end,
            stderr=subprocess.PIPE,
            timeout=60,
            env={**os.environ, "PYTHONUNBUFFERED": unbuffered},
        )
    finally:
        os.close(write_end)
    assert status.returncode == 1, status.stderr
    assert b"Traceback" not in status.stderr


def test_exit_codes_hold_with_both_streams_gone_closed_or_full(work: Path) -> None:
    """`launch ... 2>&1 | head`, `>&-`, a full disk: what the command says is lost, not its exit code."""
    import os
    import subprocess

    from tests.conftest import launch_cmd

    failed = run_launch(["--local", "1", "--run-root", str(work / "runs"), "--", "python3", "-c", "exit(3)"], work)
    assert failed.returncode == 1, failed.stderr
    cases = [(["status", str(work / "runs" / "local")], 1), (["status", "nowhere"], 2), (["--cluster", "no.json"], 2)]
    read_end, write_end = os.pipe()
    os.close(read_end)
    with open(write_end, "wb") as gone, open("/dev/full", "wb") as full:
        for args, code in cases:
            for out, err in ((gone, gone), (None, gone), (full, full)):
                outcome = subprocess.run(launch_cmd(*args), cwd=work, stdout=out, stderr=err, timeout=60)
                assert outcome.returncode == code, (args, out, err)
            closed = subprocess.run(
                launch_cmd(*args),
                cwd=work,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                timeout=60,
                preexec_fn=lambda: os.close(1),
            )
            assert closed.returncode == code and b"Traceback" not in closed.stderr, closed.stderr


def test_a_run_whose_output_cannot_be_written_or_whose_streams_are_closed_still_trains(work: Path) -> None:
    """`launch ... > out.log` on a full disk, `2>&-`, `>&-`: the run goes on to its end with its exit
    code; only `--dry-run`, whose output is all it does, fails (exit 1, no traceback)."""
    import os
    import subprocess

    from tests.conftest import launch_cmd

    args = ["--local", "1", "--run-root", str(work / "runs"), "--plain", "--fresh", "--", "python3", "-c"]
    with open("/dev/full", "wb") as full:
        for out, err, close in ((full, None, None), (None, None, 2), (None, None, 1)):
            run = subprocess.run(
                launch_cmd(*args, "print('x' * 100000)"),
                cwd=work,
                stdout=out,
                stderr=err if close != 2 else subprocess.DEVNULL,
                timeout=120,
                preexec_fn=(lambda fd=close: os.close(fd)) if close else None,  # type: ignore[misc]
            )
            assert run.returncode == 0, (out, close)
            summary = json.loads((work / "runs" / "local" / "summary.json").read_text())
            assert summary["state"] == "succeeded"
        dry = subprocess.run(
            launch_cmd("--local", "1", "--dry-run"), cwd=work, stdout=full, stderr=subprocess.PIPE, timeout=60
        )
    assert dry.returncode == 1 and b"cannot write its output: No space left on device" in dry.stderr, dry.stderr
    assert b"Traceback" not in dry.stderr


def test_show_refuses_a_task_that_does_not_exist(tmp_path: Path) -> None:
    proc = run_launch(["--local", "2", "--show", "worker:7", "--", "true"], tmp_path)
    assert proc.returncode == 2 and "no task worker:7" in proc.stderr


def test_a_rerun_says_it_resumes_and_fresh_starts_over(work: Path) -> None:
    spec = write_spec(
        work, {"name": "f", "run_root": str(work / "runs"), "hosts": [{"address": "localhost", "workers": 1}]}
    )
    run_dir = work / "runs" / "f"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "launch.lock").write_text("")  # an earlier launch's, as every launch leaves it
    (run_dir / "checkpoints" / "ckpt-1.index").write_text("old")
    (run_dir / "checkpoints" / "checkpoint").write_text(
        'model_checkpoint_path: "ckpt-1"\n'
    )  # as TensorFlow writes them
    again = run_launch(["--cluster", str(spec), "--plain", "--", "true"], work)
    assert again.returncode == 0 and "resuming from the checkpoints in" in again.stderr, again.stderr
    fresh = run_launch(["--cluster", str(spec), "--plain", "--fresh", "--", "true"], work)
    assert fresh.returncode == 0 and "--fresh: moved run directory" in fresh.stderr, fresh.stderr
    assert not (run_dir / "checkpoints" / "ckpt-1.index").exists()
    (aside,) = (work / "runs").glob("f.old-*")
    assert (aside / "checkpoints" / "ckpt-1.index").read_text() == "old"
    assert (aside / "attempt-0").is_dir() and (run_dir / "attempt-0").is_dir()


def test_a_rerun_of_a_finished_run_says_nothing_is_left_to_train(work: Path) -> None:
    run_dir = work / "runs" / "done"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "ckpt-20.index").write_text("saved")
    (run_dir / "checkpoints" / "checkpoint").write_text('model_checkpoint_path: "ckpt-20"\n')  # as TF writes it
    (run_dir / "summary.json").write_text(json.dumps({"state": "succeeded", "final_step": 20}))
    said = {}
    for steps in (20, 40):
        training = {"kind": "builtin", "steps": steps}
        hosts = [{"address": "localhost", "workers": 1}]
        spec = write_spec(work, {"name": "done", "run_root": str(work / "runs"), "hosts": hosts, "training": training})
        checked = run_launch(["--cluster", str(spec), "--check"], work)
        assert checked.returncode == 0, checked.stderr
        said[steps] = checked.stdout
    assert "the launch would start nothing: the run already trained all its training.steps=20" in said[20], said[20]
    dry = run_launch(["--cluster", str(work / "cluster.json"), "--dry-run"], work)  # the last spec written: 40 steps
    assert "the launch would resume from the checkpoints in" in dry.stdout, dry.stdout
    assert "already trained" not in said[40] and "would resume from the checkpoints" in said[40], said[40]
    training = {"kind": "builtin", "steps": 20}
    hosts = [{"address": "localhost", "workers": 1}]
    spec = write_spec(work, {"name": "done", "run_root": str(work / "runs"), "hosts": hosts, "training": training})
    again = run_launch(["--cluster", str(spec), "--plain"], work)
    assert again.returncode == 0, again.stderr
    assert "run done already trained all its training.steps=20" in again.stderr, again.stderr
    assert "nothing was started" in again.stderr and "starting" not in again.stderr
    assert sorted(p.name for p in run_dir.iterdir()) == ["checkpoints", "summary.json"]  # no attempt, no new files
    finished_dry = run_launch(["--cluster", str(spec), "--dry-run"], work)
    assert "the launch would start nothing: the run already trained all its" in finished_dry.stdout, finished_dry.stdout
    finished_json = run_launch(["--cluster", str(spec), "--dry-run", "--json"], work)
    assert finished_json.returncode == 0, finished_json.stderr
    would = json.loads(finished_json.stdout)["would"]
    assert would["do"] == "nothing" and would["says"].startswith("the launch would start nothing"), would
    # the summary alone does not say it: a checkpoint rolled back to step 10 has steps left to train
    (run_dir / "checkpoints" / "ckpt-20.index").rename(run_dir / "checkpoints" / "ckpt-10.index")
    (run_dir / "checkpoints" / "checkpoint").write_text('model_checkpoint_path: "ckpt-10"\n')
    rolled = run_launch(["--cluster", str(spec), "--check"], work)
    assert rolled.returncode == 0 and "already trained" not in rolled.stdout, rolled.stdout
    assert f"would resume from the checkpoints in {run_dir / 'checkpoints'} (latest: ckpt-10)" in rolled.stdout
    # a finished run whose training.steps was lowered since starts nothing either, and says where it stands
    (run_dir / "summary.json").write_text(json.dumps({"state": "succeeded", "final_step": 30}))
    (run_dir / "checkpoints" / "ckpt-30.index").write_text("saved")
    (run_dir / "checkpoints" / "checkpoint").write_text('model_checkpoint_path: "ckpt-30"\n')
    lowered = run_launch(["--cluster", str(spec), "--plain"], work)
    assert lowered.returncode == 0, lowered.stderr
    assert "run done is already at step 30, past its training.steps=20" in lowered.stderr, lowered.stderr
    assert "starting" not in lowered.stderr and not (run_dir / "attempt-0").exists()
    # one stopped after its last checkpoint, before its model was exported, is started (it restores and exports),
    # and so is one whose checkpoint index names no checkpoint there (TensorFlow would restore nothing)
    for state, named in (("interrupted", "ckpt-30"), ("succeeded", "ckpt-99")):
        (run_dir / "summary.json").write_text(json.dumps({"state": state, "final_step": 30}))
        (run_dir / "checkpoints" / "checkpoint").write_text(f'model_checkpoint_path: "{named}"\n')
        checked = run_launch(["--cluster", str(spec), "--check"], work)
        assert checked.returncode == 0 and "already" not in checked.stdout, checked.stdout


def test_checkpoints_of_another_training_are_not_resumed(work: Path) -> None:
    """Every `--local` run is named `local`: a second command must not restore the first one's model."""
    args = ["--local", "1", "--run-root", str(work / "runs"), "--plain"]
    first = run_launch([*args, "--", "python3", "-c", "pass"], work)
    assert first.returncode == 0, first.stderr
    checkpoints = work / "runs" / "local" / "checkpoints"
    checkpoints.mkdir(exist_ok=True)
    (checkpoints / "ckpt-1.index").write_text("the first command's")
    (checkpoints / "checkpoint").write_text('model_checkpoint_path: "ckpt-1"\n')  # as TensorFlow writes them
    other = run_launch([*args, "--", "python3", "-c", "print('other')"], work)
    assert other.returncode == 2, other.stderr
    assert "holds the checkpoints of another training (command python3 -c pass; now command python3 -c" in other.stderr
    assert "--fresh" in other.stderr and "other" not in other.stdout
    checked = run_launch([*args, "--check", "--", "python3", "-c", "print('other')"], work)
    assert checked.returncode == 2 and "holds the checkpoints of another training" in checked.stderr, checked.stderr
    assert (checkpoints / "ckpt-1.index").exists()  # --check moves nothing aside
    same = run_launch([*args, "--check", "--", "python3", "-c", "pass"], work)
    assert same.returncode == 0, same.stderr
    assert f"  the launch would resume from the checkpoints in {checkpoints} (latest: ckpt-1)\n" in same.stdout, (
        same.stdout
    )
    same = run_launch([*args, "--", "python3", "-c", "pass"], work)
    assert same.returncode == 0 and "resuming from the checkpoints" in same.stderr, same.stderr
    assert "fresh=True" not in other.stderr and "arguments changed" not in same.stderr
    # the same program told something else (more steps, say) trains on from its checkpoints
    further = run_launch([*args, "--", "python", "-c", "pass", "--steps", "40"], work)
    assert further.returncode == 0 and "resuming from the checkpoints" in further.stderr, further.stderr
    assert (
        "the command's arguments changed since they were written (was: command python3 -c pass; "
        "now: command python -c pass --steps 40)" in further.stderr
    ), further.stderr


def test_a_misspelt_script_is_named_before_the_checkpoints_and_fresh_moves_nothing_for_it(work: Path) -> None:
    """The preflight comes first: a typo in the script is not reported as another training's checkpoints,
    and `--fresh` (which that report suggests) moves the run's old files aside only once it passed."""
    (work / "train.py").write_text(
        "import os, pathlib\npathlib.Path(os.environ['TFLAUNCH_CHECKPOINT_DIR'], 'ckpt-1').touch()\n"
    )
    args = ["--local", "1", "--run-root", str(work / "runs"), "--plain", "--name", "local"]  # one run for both
    first = run_launch([*args, "--", "python3", "train.py"], work)
    assert first.returncode == 0, first.stderr
    before = sorted(p.name for p in (work / "runs").iterdir())
    for extra in ([], ["--check"], ["--fresh"]):
        typo = run_launch([*args, *extra, "--", "python3", "trian.py"], work)
        assert typo.returncode == 2, typo.stderr
        assert "the tasks' script 'trian.py' cannot run there (no such file" in typo.stderr, typo.stderr
        assert "another training" not in typo.stderr and "moved" not in typo.stderr
        assert sorted(p.name for p in (work / "runs").iterdir()) == before  # nothing moved aside
    assert (work / "runs" / "local" / "checkpoints" / "ckpt-1").exists()


def test_two_runs_sharing_a_checkpoint_dir_are_told_apart(work: Path) -> None:
    """The checkpoint directory says which run and training wrote it: another run's name does not hide
    another training's checkpoints, nor does --fresh move them while that run writes them."""
    import subprocess
    import time

    from tests.conftest import launch_cmd

    save = "import os, pathlib; pathlib.Path(os.environ['TFLAUNCH_CHECKPOINT_DIR'], 'ckpt-1').write_text('x')"
    for name in ("x", "y"):
        spec = {"name": name, "run_root": str(work / "runs"), "checkpoint_dir": str(work / "shared")}
        write_spec(work, {**spec, "hosts": [{"address": "localhost", "workers": 1}]}, f"{name}.json")
    first = run_launch(["--cluster", str(work / "x.json"), "--", "python3", "-c", save], work)
    assert first.returncode == 0, first.stderr
    other = run_launch(["--cluster", str(work / "y.json"), "--", "python3", "-c", "print('other')"], work)
    assert other.returncode == 2 and f"{work / 'shared'} holds the checkpoints of another training" in other.stderr
    assert "or another checkpoint_dir to keep both" in other.stderr, other.stderr
    same = run_launch(["--cluster", str(work / "y.json"), "--", "python3", "-c", save], work)
    assert same.returncode == 0 and f"they were written by the run in {work / 'runs' / 'x'}" in same.stderr
    # y wrote there last: x's --fresh does not move y's checkpoints from under it; moved by hand, x starts over
    sleeper = ["python3", "-c", "import time; time.sleep(60)"]
    refused = run_launch(["--cluster", str(work / "x.json"), "--fresh", "--", *sleeper], work)
    assert refused.returncode == 2 and "holds the checkpoints of the run in" in refused.stderr, refused.stderr
    assert (work / "shared" / "ckpt-1").exists()
    (work / "shared").rename(work / "shared.old-by-hand")
    # while a run writes there, another run is refused, checkpoints or none yet, and --fresh moves nothing
    running = subprocess.Popen(
        launch_cmd("--cluster", str(work / "x.json"), "--", *sleeper),
        cwd=work,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        mark = work / "shared" / ".tflaunch-training.json"
        deadline = time.monotonic() + 60
        while "time.sleep(60)" not in (mark.read_text() if mark.exists() else ""):
            assert time.monotonic() < deadline and running.poll() is None
            time.sleep(0.05)
        aside = sorted(work.glob("shared.old-*"))  # what was moved by hand
        for extra in ([], ["--fresh"]):
            busy = run_launch(["--cluster", str(work / "y.json"), *extra, "--", "python3", "-c", save], work)
            assert busy.returncode == 2, busy.stderr
            assert f"{work / 'shared'} is being written by another launch now (the run in {work / 'runs' / 'x'})" in (
                busy.stderr
            )
        assert sorted(work.glob("shared.old-*")) == aside and mark.exists()
    finally:
        running.send_signal(signal.SIGINT)
        assert running.wait(30) == 130
    # once that run has ended, its mark is a record only: the same training resumes, whoever's run
    (work / "shared" / "ckpt-1").write_text("x")
    after = run_launch(["--cluster", str(work / "y.json"), "--", *sleeper[:2], "pass"], work)
    assert after.returncode == 2 and "holds the checkpoints of another training" in after.stderr, after.stderr
    assert "being written" not in after.stderr


def test_a_checkpoint_dir_another_user_could_write_is_refused_before_resuming_or_moving(work: Path) -> None:
    """A launch says it resumes, and --fresh moves old files aside, only where no other user could plant a
    checkpoint: the preflight would refuse it anyway, after the words and the move."""
    opened = work / "opened"
    opened.mkdir()
    (opened / "ckpt-1.index").write_text("anybody's")
    opened.chmod(0o777)
    spec = {"name": "o", "run_root": str(work / "runs"), "checkpoint_dir": str(opened)}
    write_spec(work, {**spec, "hosts": [{"address": "localhost", "workers": 1}]}, "o.json")
    for extra in ([], ["--check"]):
        refused = run_launch(["--cluster", str(work / "o.json"), *extra, "--", "python3", "-c", "pass"], work)
        assert refused.returncode == 2, refused.stderr
        assert f"checkpoint_dir {opened} is writable by anybody (mode 0777)" in refused.stderr
        assert "resum" not in refused.stdout + refused.stderr
    below = work / "open-parent"
    below.mkdir()
    (below / "ckpt").mkdir(mode=0o700)
    (below / "ckpt" / "ckpt-1.index").write_text("ours, in a directory anybody may rename")
    below.chmod(0o777)
    spec = {**spec, "name": "b", "checkpoint_dir": str(below / "ckpt")}
    write_spec(work, {**spec, "hosts": [{"address": "localhost", "workers": 1}]}, "b.json")
    fresh = run_launch(["--cluster", str(work / "b.json"), "--fresh", "--", "python3", "-c", "pass"], work)
    assert fresh.returncode == 2, fresh.stderr
    assert f"checkpoint_dir {below / 'ckpt'} is not safe: {below} is writable by others" in fresh.stderr
    assert "--fresh: moved" not in fresh.stderr and sorted(p.name for p in below.iterdir()) == ["ckpt"]
    assert (below / "ckpt" / "ckpt-1.index").exists()


def test_the_python_api_leaves_a_callers_broken_stdout_as_it_was(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run goes on when the caller's stdout cannot be written, and the caller's descriptor is not
    sent to /dev/null behind its back (the command line does that to its own)."""
    import contextlib
    import os
    import stat

    import tflaunch

    monkeypatch.chdir(work)
    read_end, write_end = os.pipe()
    os.close(read_end)
    broken = open(write_end, "w", encoding="utf-8")  # noqa: SIM115 - closed below
    monkeypatch.setattr(sys, "stdout", broken)
    spec = {"name": "p", "run_root": str(work / "runs"), "hosts": [{"address": "localhost", "workers": 1}]}
    try:
        result = tflaunch.launch(spec, command=["python3", "-c", "print('x' * 100_000)"])
        assert result.succeeded, result.message
        assert stat.S_ISFIFO(os.fstat(write_end).st_mode)
    finally:
        monkeypatch.undo()
        with contextlib.suppress(OSError):
            broken.close()


@pytest.mark.parametrize("stdout", ["none", "closed"])
def test_the_python_api_runs_without_a_stdout(work: Path, monkeypatch: pytest.MonkeyPatch, stdout: str) -> None:
    """A caller started with fd 1 closed has sys.stdout None; one may have closed it: the run goes on."""
    import io

    import tflaunch

    monkeypatch.chdir(work)
    closed = io.StringIO()
    closed.close()
    monkeypatch.setattr(sys, "stdout", None if stdout == "none" else closed)
    spec = {"name": "q", "run_root": str(work / "runs"), "hosts": [{"address": "localhost", "workers": 1}]}
    result = tflaunch.launch(spec, command=["python3", "-c", "print('x')"])
    monkeypatch.undo()
    assert result.succeeded, result.message


def test_the_python_api_refuses_another_trainings_checkpoints_too(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tflaunch
    from tflaunch import UsageError

    monkeypatch.chdir(work)
    spec = {"name": "api", "run_root": str(work / "runs"), "hosts": [{"address": "localhost", "workers": 1}]}
    assert tflaunch.launch(spec, command=["python3", "-c", "pass"], echo=False).succeeded
    checkpoints = work / "runs" / "api" / "checkpoints"
    checkpoints.mkdir(exist_ok=True)
    (checkpoints / "ckpt-1.index").write_text("the first command's")
    (checkpoints / "checkpoint").write_text('model_checkpoint_path: "ckpt-1"\n')  # as TensorFlow writes them
    saved = (work / "runs" / "api" / "spec.json").read_text()
    with pytest.raises(UsageError, match="holds the checkpoints of another training.*fresh=True"):
        tflaunch.launch(spec, command=["python3", "-c", "print('other')"], echo=False)
    assert (work / "runs" / "api" / "spec.json").read_text() == saved  # nothing started, nothing rewritten
    assert not (work / "runs" / "api" / "attempt-1").exists()
    assert tflaunch.launch(spec, command=["python3", "-c", "print('other')"], fresh=True, echo=False).succeeded


def test_the_python_api_returns_the_result_and_restores_signal_handlers(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tflaunch

    monkeypatch.chdir(work)

    def mine(signum: int, frame: object) -> None:
        raise AssertionError("not expected")

    before = {s: signal.signal(s, mine) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        spec = {"name": "api", "run_root": str(work / "runs"), "hosts": [{"address": "localhost", "workers": 2}]}
        result = tflaunch.launch(spec, command=[sys.executable, "-c", "pass"], echo=False)
        assert result.succeeded and result.exit_code == 0 and result.run_dir == work / "runs" / "api"
        assert result.summary["state"] == "succeeded" and result.restarts == 0
        failed = tflaunch.launch(spec, command=[sys.executable, "-c", "raise SystemExit(3)"], echo=False)
        assert failed.state == "failed" and failed.exit_code == 1
        assert failed.message.startswith("launch failed: ") and "root cause: worker:" in failed.message
        assert result.message.startswith("launch succeeded: api finished")
        assert all(signal.getsignal(s) is mine for s in before)
        from launcher.common.errors import SpecError

        with pytest.raises(SpecError, match="did you mean"):
            tflaunch.launch({**spec, "nmae": "x"})
        assert all(signal.getsignal(s) is mine for s in before)
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


def test_the_python_api_echoes_only_the_tasks_shown(
    work: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import tflaunch
    from launcher.common.errors import UsageError

    monkeypatch.chdir(work)
    spec = {"name": "shown", "run_root": str(work / "runs"), "hosts": [{"address": "localhost", "workers": 2}]}
    hello = [sys.executable, "-c", "import os; print('hello from', os.environ['TFLAUNCH_TASK'])"]
    assert tflaunch.launch(spec, command=hello, show="worker:0").succeeded  # a string, as --show takes it
    out = capsys.readouterr().out
    assert "[worker:0] hello from" in out and "[worker:1]" not in out
    with pytest.raises(UsageError, match="no task worker:5"):
        tflaunch.launch(spec, command=hello, show=["worker:5"])


def test_a_python_without_tensorflow_runs_a_command_but_not_the_built_in_runtime(work: Path) -> None:
    """The launcher alone (no TensorFlow) starts a command, which may bring its own interpreter; the
    built-in runtime is refused by the preflight, naming the host and the python."""
    import subprocess

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(work / "bare")], check=True, timeout=120)
    bare = str(work / "bare" / "bin" / "python")
    spec = {"name": "bare", "run_root": str(work / "runs"), "python": bare, "hosts": [{"address": "localhost"}]}
    path = write_spec(work, spec)
    checked = run_launch(["--cluster", str(path), "--check", "--", "python3", "-c", "pass"], work)
    assert checked.returncode == 0, checked.stderr
    assert "tensorflow not installed for this python (the command must bring its own)" in checked.stdout
    ran = run_launch(
        ["--cluster", str(path), "--plain", "--", "python3", "-c", "import sys; print(sys.executable)"], work
    )
    assert ran.returncode == 0 and f"[worker:0] {bare}" in ran.stdout, ran.stderr
    built_in = run_launch(["--cluster", str(path), "--check"], work)
    assert built_in.returncode != 0 and f"localhost: tensorflow is not installed for {bare}" in built_in.stderr


def test_a_command_given_without_the_double_dash_is_told_where_it_goes(tmp_path: Path) -> None:
    proc = run_launch(["--local", "2", "python", "train.py"], tmp_path)
    assert proc.returncode == 2, proc.stderr
    said = "unrecognized arguments: python train.py (a command for every task goes after --: launch ... -- python"
    assert said in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    script = run_launch(["--local", "2", "train.py", "--lr", "1"], tmp_path)  # the python forgotten too
    assert "goes after --: launch ... -- python3 train.py --lr 1)" in script.stderr, script.stderr
    other = run_launch(["status", "runs/x", "extra"], tmp_path)
    assert other.returncode == 2 and "goes after --" not in other.stderr, other.stderr


@pytest.mark.parametrize("timeout", ["-5", "nan", "inf", "soon"])
def test_stop_refuses_a_wait_that_is_no_number_of_seconds(tmp_path: Path, timeout: str) -> None:
    proc = run_launch(["stop", "runs/x", f"--timeout={timeout}"], tmp_path)
    assert proc.returncode == 2 and f"--timeout: '{timeout}' is not a number of seconds (0 or more)" in proc.stderr


def test_a_command_after_the_double_dash_says_it_replaces_the_specs_own_training(tmp_path: Path) -> None:
    base = {"name": "r", "run_root": str(tmp_path / "runs"), "hosts": [{"address": "localhost", "workers": 1}]}
    said = {}
    for case, training in (
        ("builtin", {"kind": "builtin", "steps": 60}),
        ("other command", {"kind": "command", "argv": ["python3", "own.py", "--password=hunter2-xyz"]}),
        ("same command", {"kind": "command", "argv": ["python3", "-c", "pass"]}),
        ("none", None),
    ):
        spec = write_spec(tmp_path, {**base, **({"training": training} if training else {})})
        proc = run_launch(["--cluster", str(spec), "--dry-run", "--", "python3", "-c", "pass"], tmp_path)
        assert proc.returncode == 0, proc.stderr
        said[case] = proc.stderr
    assert "[launch] the command after -- replaces the spec's training (kind 'builtin')" in said["builtin"]
    assert "replaces the spec's training (its own command)" in said["other command"]
    assert "hunter2" not in said["other command"]
    assert "replaces" not in said["same command"] + said["none"]


def test_a_dry_run_of_a_launch_that_would_be_refused_exits_as_the_launch_would(work: Path) -> None:
    """A run directory holding the user's own files: the launch exits 2, and so does its dry run (text and JSON)."""
    (work / "runs" / "mine").mkdir(parents=True)
    (work / "runs" / "mine" / "notes.txt").write_text("mine")
    hosts = [{"address": "localhost", "workers": 1}]
    spec = write_spec(work, {"name": "mine", "run_root": str(work / "runs"), "hosts": hosts})
    dry = run_launch(["--cluster", str(spec), "--dry-run", "--", "true"], work)
    assert dry.returncode == 2 and "the launch would be refused:" in dry.stdout, (dry.returncode, dry.stdout)
    as_json = run_launch(["--cluster", str(spec), "--dry-run", "--json", "--", "true"], work)
    assert as_json.returncode == 2, as_json.stderr
    would = json.loads(as_json.stdout)["would"]
    assert would["do"] == "refused" and would["says"].startswith("the launch would be refused:"), would
    new = write_spec(work, {"name": "new", "run_root": str(work / "runs"), "hosts": hosts})
    fresh = run_launch(["--cluster", str(new), "--dry-run", "--json", "--", "true"], work)
    assert fresh.returncode == 0 and json.loads(fresh.stdout)["would"]["do"] == "start", fresh.stdout
    assert sorted(p.name for p in (work / "runs").iterdir()) == ["mine"]  # nothing was made


def test_a_task_that_printed_nothing_has_no_log_file_and_logs_still_knows_it(work: Path) -> None:
    """A log file is made at a task's first line: a thousand silent tasks cost no thousand empty files."""
    code = "import json, os; print('from zero') if json.loads(os.environ['TF_CONFIG'])['task']['index'] == 0 else None"
    done = run_launch(["--local", "2", "--run-root", str(work / "runs"), "--plain", "--", "python3", "-c", code], work)
    assert done.returncode == 0, done.stderr
    attempt = work / "runs" / "local" / "attempt-0"
    assert (attempt / "worker-0.log").read_text() == "from zero\n"
    assert not (attempt / "worker-1.log").exists()
    shown = run_launch(["logs", str(work / "runs" / "local")], work)
    assert shown.returncode == 0 and shown.stdout == "[worker:0] from zero\n", shown
    assert "[launch] worker:1 has printed nothing in attempt 0" in shown.stderr, shown
    quiet = run_launch(["logs", str(work / "runs" / "local"), "--task", "worker:1", "--attempt", "0"], work)
    assert quiet.returncode == 0 and quiet.stdout == "", quiet
    assert quiet.stderr == "[launch] worker:1 has printed nothing in attempt 0\n", quiet


def test_check_and_dry_run_say_a_run_without_checkpoints_would_start_from_the_beginning(work: Path) -> None:
    args = ["--local", "1", "--run-root", str(work / "runs")]
    checkpoints = work / "runs" / "local" / "checkpoints"
    said = f"the launch would start from the beginning: no checkpoints in {checkpoints} to resume from"
    checked = run_launch([*args, "--check", "--", "python3", "-c", "pass"], work)
    assert checked.returncode == 0 and f"  {said}\n" in checked.stdout, checked
    dry = run_launch([*args, "--dry-run", "--", "python3", "-c", "pass"], work)
    assert dry.returncode == 0 and f"\n{said}\n" in dry.stdout, dry
    as_json = run_launch([*args, "--dry-run", "--json", "--", "python3", "-c", "pass"], work)
    assert json.loads(as_json.stdout)["would"] == {"do": "start", "says": said}
    assert not (work / "runs" / "local").exists()  # neither made the run


def test_a_spec_read_from_a_pipe_launches(work: Path) -> None:
    """`launch --cluster /dev/stdin < c.json` (or `<(...)`): the guess of local hosts made before the
    spec is read must not drain the pipe."""
    spec = {
        "name": "piped",
        "run_root": str(work / "runs"),
        "hosts": [{"address": "localhost", "workers": 1}],
        "training": {"kind": "command", "argv": ["python3", "-c", "print('ran')"]},
    }
    done = subprocess.run(
        launch_cmd("--cluster", "/dev/stdin", "--plain"),
        input=json.dumps(spec),
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "[worker:0] ran" in done.stdout, done


def test_show_refuses_an_empty_value_and_quotes_an_escape(tmp_path: Path) -> None:
    empty = run_launch(["--local", "2", "--show", " , ", "--", "true"], tmp_path)
    assert empty.returncode == 2 and "Got an empty --show" in empty.stderr, empty.stderr
    escaped = run_launch(["--local", "2", "--show", "worker:0\x1b[2J", "--", "true"], tmp_path)
    assert escaped.returncode == 2 and "no task 'worker:0\\x1b[2J'" in escaped.stderr, escaped.stderr
    assert "(tasks: worker:0, worker:1)" in escaped.stderr
    assert not (tmp_path / "runs").exists() and "Traceback" not in empty.stderr + escaped.stderr


def test_fresh_with_a_dry_run_or_a_check_is_refused_naming_the_run_directory(work: Path) -> None:
    spec = write_spec(work, {"name": "f", "run_root": str(work / "runs"), "hosts": [{"address": "localhost"}]})
    (work / "runs" / "f").mkdir(parents=True)
    (work / "runs" / "f" / "launch.lock").write_text("")
    for extra in ("--dry-run", "--check"):
        proc = run_launch(["--cluster", str(spec), "--fresh", extra, "--", "true"], work)
        assert proc.returncode == 2, proc.stderr
        assert f"renames the run directory {work}/runs/f (and" in proc.stderr, proc.stderr
        assert f"to {work}/runs/f.old-<time>" in proc.stderr and proc.stdout == ""
    assert sorted(os.listdir(work / "runs")) == ["f"]  # nothing moved aside


def test_fresh_with_a_dry_run_before_any_run_says_there_is_nothing_to_move(work: Path) -> None:
    proc = run_launch(["--local", "1", "--run-root", str(work / "runs"), "--fresh", "--dry-run", "--", "true"], work)
    assert proc.returncode == 2 and "--fresh starts a run over: there is no run directory " in proc.stderr, proc.stderr
    assert "yet, so it would move nothing aside" in proc.stderr and not (work / "runs").exists()
