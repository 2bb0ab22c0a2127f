"""Refused launches, as a user runs them: exit 2, one clear message, nothing started, nothing written.

Also `launch status` on what is not (or no longer) a healthy run, and a task frozen by SIGSTOP.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from launcher.common import exit_codes
from tests.conftest import HELPERS, launch_cmd, run_launch, wait_until_gone, write_spec

TASK = str(HELPERS / "task.py")


def snapshot(root: Path) -> dict[str, tuple[bool, int, int]]:
    """Every path under `root` with its kind, size and modification time."""
    found = {}
    for path in [root, *root.rglob("*")]:
        info = path.lstat()
        found[str(path.relative_to(root))] = (path.is_dir(), info.st_size, info.st_mtime_ns)
    return found


def good(work: Path, **changes: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": "r",
        "run_root": str(work / "runs"),
        "hosts": [{"address": "localhost", "workers": 2}],
        "restart": {"max_restarts": 0},
    }
    spec.update(changes)
    return spec


REFUSALS: list[tuple[str, Any, list[str], str]] = [
    ("spec error", lambda w: good(w, hosts=[{"address": "localhost", "workers": True}]), [], "$.hosts[0].workers"),
    ("python missing", lambda w: good(w, python="/no/such/python3"), [], "cannot run '/no/such/python3'"),
    ("workdir missing", lambda w: good(w, workdir=str(w / "absent")), [], "absent does not exist"),
    ("workdir a file", lambda w: good(w, workdir=str(w / "afile")), [], "afile is not a directory"),
    ("run root a dangling link", lambda w: good(w, run_root=str(w / "unmounted")), [], "which does not exist (a"),
    ("run root under a file", lambda w: good(w, run_root=str(w / "afile" / "runs")), [], "cannot be created"),
    ("checkpoints under a file", lambda w: good(w, checkpoint_dir=str(w / "afile" / "ck")), [], "checkpoint_dir"),
    (
        "checkpoints a dangling link",
        lambda w: good(w, checkpoint_dir=str(w / "unmounted")),
        [],
        "unmounted -> ",  # names the link and where it points, not "not writable"
    ),
    ("empty --name", lambda w: good(w), ["--name", ""], "empty --name"),
    ("empty --run-root", lambda w: good(w), ["--run-root", ""], "empty --run-root"),
    (
        "newline in argv",
        lambda w: good(w),
        ["--", "python", "a\nb"],
        "The command after --, word 2: contains a newline",
    ),
    ("nothing after --", lambda w: good(w), ["--"], "nothing follows '--'"),
    ("command missing", lambda w: good(w), ["--", "/no/such/binary"], "'/no/such/binary' cannot run there (no such"),
    ("command not on PATH", lambda w: good(w, env={"PATH": "/usr/bin"}), ["--", "no-tool"], "(not on PATH=/usr/bin)"),
    ("command not executable", lambda w: good(w), ["--", "./afile"], "'./afile' cannot run there (not an executable"),
    ("env breaks python", lambda w: good(w, env={"PYTHONHOME": "/nowhere"}), [], "does not start with the spec's env"),
    (
        "script missing",
        lambda w: good(w),
        ["--", "python", "missing.py"],
        "the tasks' script 'missing.py' cannot run there (no such file",
    ),
    ("script a directory", lambda w: good(w), ["--", "python", "adir"], "'adir' cannot run there (a directory without"),
    (
        "script after options",
        lambda w: good(w),
        ["--", "python3", "-u", "-W", "ignore", "d/t.py"],
        "'d/t.py' cannot run there",
    ),
]


@pytest.mark.parametrize("case, make, extra, needle", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_a_refused_launch_leaves_the_working_directory_as_it_was(
    case: str, make: Any, extra: list[str], needle: str, work: Path
) -> None:
    (work / "afile").write_text("not a directory")
    (work / "adir").mkdir()
    (work / "unmounted").symlink_to(work / "mnt" / "shared")  # a link to a file system not mounted
    spec = write_spec(work, make(work))
    before = snapshot(work)
    args = ["--cluster", str(spec), *extra]
    if "--" not in extra:
        args += ["--", "python", TASK, "sleep"]
    proc = run_launch(args, work, timeout=90)
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert snapshot(work) == before, "a refused launch wrote something"


def test_check_passes_and_leaves_no_directory(work: Path) -> None:
    spec = write_spec(work, good(work, checkpoint_dir=str(work / "shared" / "ck")))
    before = snapshot(work)
    proc = run_launch(["--cluster", str(spec), "--check", "--", "python", TASK, "sleep"], work, timeout=90)
    assert proc.returncode == 0, proc.stderr
    assert "preflight passed" in proc.stdout
    assert snapshot(work) == before


def test_object_store_checkpoints_reach_tensorflow_untouched(work: Path) -> None:
    spec = write_spec(work, good(work, checkpoint_dir="gs://bucket/run"))
    proc = run_launch(["--cluster", str(spec), "--dry-run", "--json"], work)
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["checkpoint_dir"] == "gs://bucket/run"
    assert {t["env"]["TFLAUNCH_CHECKPOINT_DIR"] for t in plan["tasks"]} == {"gs://bucket/run"}
    out = work / "out"
    out.mkdir()
    ran = run_launch(["--cluster", str(spec), "--", "python", TASK, "record", str(out)], work)
    assert ran.returncode == 0, ran.stderr
    assert not (work / "gs:").exists(), "the URL was taken for a local path"


def test_hundreds_of_local_tasks_with_a_small_open_file_limit(work: Path) -> None:
    spec = write_spec(
        work,
        {
            "name": "many",
            "run_root": str(work / "runs"),
            "hosts": [{"address": "localhost", "workers": 200} for _ in range(3)],
        },
    )

    def small_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (128, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    proc = subprocess.run(
        launch_cmd("--cluster", str(spec), "--dry-run", "--json"),
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=small_limit,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    ports = [task["port"] for task in json.loads(proc.stdout)["tasks"]]
    assert len(ports) == 600 and len(set(ports)) == 600


@pytest.mark.parametrize(
    "files, needle",
    [
        ({}, "has neither summary.json nor status.json"),
        ({"summary.json": '{"state": "succ'}, "summary.json: not valid JSON"),
        ({"summary.json": "[1, 2]"}, "summary.json: not a launch summary.json"),
        ({"summary.json": '{"name": "someone else\'s"}'}, "summary.json: field 'attempts' is missing"),
        ({"status.json": '{"launcher_pid": "x", "tasks": []}'}, "status.json: field"),
        ({"status.json": "\udcff"}, "status.json: cannot read it"),
    ],
)
def test_status_of_what_is_not_a_healthy_run(files: dict[str, str], needle: str, work: Path) -> None:
    run = work / "run"
    run.mkdir()
    for name, text in files.items():
        (run / name).write_bytes(text.encode("utf-8", "surrogateescape"))
    proc = run_launch(["status", str(run)], work)
    assert proc.returncode == 2, proc.stdout
    assert needle in proc.stderr and str(run) in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def start_sleepers(work: Path, spec: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """`launch` sleeping tasks in the background, output to a log file."""
    log = work / "launch.out"
    with open(log, "w") as handle:
        proc = subprocess.Popen(
            launch_cmd("--cluster", str(spec), "--", "python", TASK, "sleep"),
            cwd=work,
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
    return proc, log


def test_status_after_the_launcher_was_killed_says_stopped(work: Path) -> None:
    spec = write_spec(work, good(work))
    proc, log = start_sleepers(work, spec)
    status_file = work / "runs" / "r" / "status.json"
    deadline = time.monotonic() + 30
    while not status_file.exists():
        assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
        time.sleep(0.05)
    running = run_launch(["status", str(work / "runs" / "r")], work)
    assert running.returncode == exit_codes.RUNNING and ": running (launcher pid" in running.stdout, (
        running.stdout + running.stderr
    )
    proc.kill()
    proc.wait()
    assert not wait_until_gone(str(work), timeout=10)
    stopped = run_launch(["status", str(work / "runs" / "r")], work)
    assert stopped.returncode == exit_codes.STOPPED, stopped.stderr
    assert "stopped: its launcher" in stopped.stdout and "is gone" in stopped.stdout


def test_a_stopped_task_is_called_hung_within_seconds(work: Path) -> None:
    spec = write_spec(work, good(work, restart={"max_restarts": 0, "stopped_timeout_s": 2, "crash_grace_s": 0.1}))
    proc, log = start_sleepers(work, spec)
    deadline = time.monotonic() + 30
    while "ready worker:1" not in log.read_text():
        assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
        time.sleep(0.05)
    victim = next(
        p
        for p in psutil.Process(proc.pid).children(recursive=True)
        if p.environ().get("TFLAUNCH_TASK") == "worker:1" and p.cmdline()[1:2] == [TASK]
    )  # not its helper
    stopped_at = time.monotonic()
    os.kill(victim.pid, signal.SIGSTOP)
    assert proc.wait(timeout=30) == 1
    elapsed = time.monotonic() - stopped_at
    text = log.read_text()
    assert "worker:1 on localhost has been stopped (SIGSTOP or Ctrl-Z)" in text, text
    assert elapsed < 2 + 3, f"took {elapsed:.1f}s to call a stopped task hung"


def test_a_password_in_a_checkpoint_url_is_masked_by_the_check_and_the_dry_run(work: Path) -> None:
    spec = write_spec(work, good(work, checkpoint_dir="gs://user:pa55word-xyz@bucket/run"))
    checked = run_launch(["--cluster", str(spec), "--check", "--", "python", TASK, "sleep"], work, timeout=90)
    dry = run_launch(["--cluster", str(spec), "--dry-run", "--", "python", TASK, "sleep"], work)
    assert checked.returncode == 0 and dry.returncode == 0, checked.stderr + dry.stderr
    assert "object-store URL" in checked.stdout and "checkpoints gs://" in dry.stdout
    assert "pa55word" not in checked.stdout + checked.stderr + dry.stdout + dry.stderr


@pytest.mark.parametrize(
    "training, needle",
    [
        ({"kind": "function", "target": "nosuchmod:train"}, "training.target 'nosuchmod:train': no module 'nosuchmod'"),
        ({"kind": "builtin", "model": "models.nope:build"}, "training.model 'models.nope:build': no module"),
        ({"kind": "builtin", "dataset": "data_typo:make"}, "training.dataset 'data_typo:make': no module"),
        ({"kind": "function", "target": "models.py:build"}, "a target names a module, not its file: models:build"),
    ],
)
def test_a_target_whose_module_is_nowhere_is_refused_before_anything_starts(
    work: Path, training: dict[str, Any], needle: str
) -> None:
    (work / "models").mkdir()
    (work / "models" / "__init__.py").write_text("raise SystemExit('the preflight ran a package of yours')\n")
    spec = write_spec(work, good(work, training=training))
    before = snapshot(work)
    proc = run_launch(["--cluster", str(spec)], work, timeout=90)
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr and f"working directory {work}" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert snapshot(work) == before


def test_a_misspelt_function_in_a_module_that_is_there_is_refused_with_the_names_that_come_close(work: Path) -> None:
    (work / "trainer.py").write_text(
        "import sys\nsys.exit('the preflight ran a module of yours')\ndef train(ctx): ...\n"
    )
    spec = write_spec(work, good(work, training={"kind": "function", "target": "trainer:trian"}))
    before = snapshot(work)
    proc = run_launch(["--cluster", str(spec)], work, timeout=90)
    assert proc.returncode == 2, proc.stderr
    assert (
        "training.target 'trainer:trian': module 'trainer' has no top-level 'trian'; did you mean 'trainer:train'?"
    ) in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and "ran a module of yours" not in proc.stderr
    assert snapshot(work) == before


@pytest.mark.parametrize(
    "command, needle",
    [
        (["python3", "-m", "nosuchmod"], "runs python -m nosuchmod, and there is no module 'nosuchmod' there"),
        (
            ["python3", "-m", "trainer:train"],
            "-m takes a module, not a module:function; to run a function give training",
        ),
        (["python3", "-m", "trainer.py"], "-m takes a module's name, not its file's: -m trainer"),
        (["trainer.py"], "a Python script is run by a python: -- "),
        (["python3"], "python3 is given no script, -m module or -c code"),
        (["python3", "-m"], "-m is given nothing after it: python would refuse it"),
        (["python3", "-m", "pkg"], "runs python -m pkg, and 'pkg' is a package without a __main__.py"),
        (["./plain.sh"], "'./plain.sh' cannot run there (it has no #! line, so the kernel cannot run it"),
        (["./env.sh"], "its #! line runs 'no-such-interpreter' through env, and there is no no-such-interpreter"),
    ],
)
def test_a_command_that_could_only_fail_or_do_nothing_is_refused_before_anything_starts(
    work: Path, command: list[str], needle: str
) -> None:
    (work / "trainer.py").write_text("def train(ctx): ...\n")
    (work / "pkg").mkdir()
    (work / "pkg" / "__init__.py").write_text("")
    (work / "plain.sh").write_text("echo trained\n")
    (work / "plain.sh").chmod(0o755)
    (work / "env.sh").write_text("#!/usr/bin/env no-such-interpreter\necho trained\n")
    (work / "env.sh").chmod(0o755)
    spec = write_spec(work, good(work))
    before = snapshot(work)
    proc = run_launch(["--cluster", str(spec), "--", *command], work, timeout=90)
    assert proc.returncode == 2 and needle in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert snapshot(work) == before


def test_a_module_the_command_runs_with_dash_m_from_the_working_directory_passes(work: Path) -> None:
    (work / "trainer.py").write_text("raise SystemExit('the preflight ran a module of yours')\n")
    spec = write_spec(work, good(work))
    proc = run_launch(["--cluster", str(spec), "--check", "--", "python3", "-m", "trainer"], work, timeout=90)
    assert proc.returncode == 0 and "preflight passed" in proc.stdout, proc.stderr
    # another python's packages are not the agent's to read (a venv's, conda's): its -m module is not judged
    (work / "venv" / "bin").mkdir(parents=True)
    (work / "venv" / "bin" / "python3").symlink_to(sys.executable)
    other = ["--cluster", str(spec), "--check", "--", str(work / "venv" / "bin" / "python3"), "-m", "only_there"]
    proc = run_launch(other, work, timeout=90)
    assert proc.returncode == 0 and "preflight passed" in proc.stdout, proc.stderr


def test_targets_found_in_the_working_directory_and_pythonpath_pass_the_check(work: Path) -> None:
    (work / "models").mkdir()
    (work / "models" / "__init__.py").write_text("raise SystemExit('the preflight ran a package of yours')\n")
    (work / "models" / "net.py").write_text("def build(config): ...\n")
    (work / "lib").mkdir()
    (work / "lib" / "data.py").write_text("def make(ctx): ...\n")
    training = {"kind": "builtin", "model": "models.net:build", "dataset": "data:make"}
    spec = write_spec(work, good(work, training=training, env={"PYTHONPATH": "lib"}))
    proc = run_launch(["--cluster", str(spec), "--check"], work, timeout=90)
    assert proc.returncode == 0, proc.stderr
    assert "preflight passed" in proc.stdout


def test_a_spec_path_that_never_ends_is_refused_not_read_until_memory_runs_out(work: Path) -> None:
    proc = run_launch(["--cluster", "/dev/zero", "--dry-run"], work, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "/dev/zero: 1 problem in the cluster spec" in proc.stderr and "larger than 16 MiB" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_port_that_accepts_but_never_speaks_ssh_is_named_so(work: Path) -> None:
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.4", 0))
    listener.listen()
    held: list[socket.socket] = []
    done = threading.Event()

    def accept_and_say_nothing() -> None:
        listener.settimeout(0.2)
        while not done.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:  # timed out: look at `done` again
                continue

    thread = threading.Thread(target=accept_and_say_nothing, daemon=True)
    thread.start()
    try:
        port = listener.getsockname()[1]
        ssh = {"port": port, "connect_timeout_s": 2}
        spec = write_spec(work, good(work, hosts=[{"address": "127.0.0.4", "workers": 1, "ports": [1], "ssh": ssh}]))
        proc = run_launch(["--cluster", str(spec), "--check", "--", "python3", "-c", "pass"], work, timeout=60)
    finally:
        done.set()
        thread.join()
        for sock in [*held, listener]:
            sock.close()
    assert proc.returncode == 2, proc.stderr
    assert f"@127.0.0.4:{port} accepted the connection but said nothing SSH" in proc.stderr, proc.stderr
    assert "No existing session" not in proc.stderr


def test_start_up_variables_are_checked_only_for_the_python_the_tasks_run(work: Path) -> None:
    """Another program (a python of its own, say) may want a PYTHONHOME this host's python would not start with."""
    spec = write_spec(work, good(work, env={"PYTHONHOME": "/opt/other-python"}))
    proc = run_launch(["--cluster", str(spec), "--check", "--", "/bin/true"], work, timeout=90)
    assert proc.returncode == 0 and "preflight passed" in proc.stdout, proc.stderr


def test_a_script_is_checked_whatever_its_secret_arguments_and_refusals_mask_secrets(work: Path) -> None:
    """Secret-holding arguments travel apart from the command line; the preflight reads the command as given,
    and a refusal quoting the spec (a path holding a secret's value) masks it."""
    argv = ["python", str(work / "nothere-hunter2" / "train.py"), "--pw", "hunter2"]
    spec = write_spec(work, good(work, env={"DB_PASS": "hunter2"}, training={"kind": "command", "argv": argv}))
    proc = run_launch(["--cluster", str(spec), "--check"], work, timeout=90)
    assert proc.returncode == 2 and "nothere-****/train.py' cannot run there (no such file" in proc.stderr, proc.stderr
    assert "hunter2" not in proc.stderr + proc.stdout
    url = write_spec(work, good(work, env={"DB_PASS": "hunter2"}, checkpoint_dir="s3://bucket/hunter2/ck"), "u.json")
    fresh = run_launch(["--cluster", str(url), "--fresh", "--", "python3", "-c", "pass"], work, timeout=90)
    assert fresh.returncode == 2 and "s3://bucket/****/ck (an object store)" in fresh.stderr, fresh.stderr
    assert "hunter2" not in fresh.stderr


@pytest.mark.parametrize("kind", ["builtin", "fit"])
def test_a_worker_py_that_pythonpath_puts_before_the_runtime_is_refused(work: Path, kind: str) -> None:
    """`export PYTHONPATH=$PYTHONPATH:/x` with none set leaves an empty entry: the working directory, whose
    worker.py every task of the runtime (`fit` too) would import as the runtime."""
    (work / "worker.py").write_text("raise SystemExit('not the runtime')\n")
    spec = write_spec(work, good(work, env={"PYTHONPATH": f":{work}/lib"}, training={"kind": kind, "steps": 5}))
    proc = run_launch(["--cluster", str(spec)], work, timeout=90)
    assert proc.returncode == 2, proc.stderr
    assert f"{work / 'worker.py'} would be imported as the built-in runtime's own package 'worker'" in proc.stderr
    assert not (work / "runs").exists()
