"""`launch` as a user runs it, with tiny helper tasks (no TensorFlow): TF_CONFIG per task,
failure teardown, signals, launcher death, port checks, dry run."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import HELPERS, launch_cmd, processes_mentioning, run_launch, wait_until_gone, write_spec
from tests.labs.waiting import wait_for_text

TASK = str(HELPERS / "task.py")


def spec_for(work: Path, workers: int = 2, **restart: object) -> Path:
    return write_spec(
        work,
        {
            "name": "p",
            "run_root": str(work / "runs"),
            "hosts": [{"address": "localhost", "workers": workers}],
            "restart": {"max_restarts": 0, "grace_period_s": 2, **restart},
        },
    )


def test_user_command_sees_its_own_tf_config(work: Path) -> None:
    out = work / "out"
    out.mkdir()
    proc = run_launch(["--cluster", str(spec_for(work, 3)), "--", "python", TASK, "record", str(out)], work)
    assert proc.returncode == 0, proc.stderr
    records = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
    assert sorted(records) == ["worker-0", "worker-1", "worker-2"]
    clusters = {json.dumps(r["TF_CONFIG"]["cluster"]) for r in records.values()}
    assert len(clusters) == 1
    for name, record in records.items():
        assert record["TF_CONFIG"]["task"] == {"type": "worker", "index": int(name[-1])}
        assert record["argv"][1:] == ["record", str(out)]
    assert "[worker:2] recorded worker:2" in proc.stdout
    assert "TF_CONFIG" not in os.environ  # the launcher never sets it on itself
    summary = json.loads((work / "runs" / "p" / "summary.json").read_text())
    assert summary["state"] == "succeeded" and len(summary["attempts"][0]["tasks"]) == 3


def test_local_quick_form(work: Path) -> None:
    out = work / "out"
    out.mkdir()
    proc = run_launch(
        ["--local", "2", "--run-root", str(work / "runs"), "--", "python", TASK, "record", str(out)], work
    )
    assert proc.returncode == 0, proc.stderr
    assert len(list(out.glob("*.json"))) == 2


def test_failed_task_stops_the_gang_and_is_named(work: Path) -> None:
    started = time.monotonic()
    proc = run_launch(
        ["--cluster", str(spec_for(work, 3)), "--", "python", TASK, "fail-on", "worker:1", "3", "--ignore-term"], work
    )
    elapsed = time.monotonic() - started
    assert proc.returncode == 1
    assert "root cause: worker:1 on localhost" in proc.stderr and "exit code 3" in proc.stderr
    assert "worker:1 failing with 3" in proc.stderr  # the log tail
    assert elapsed < 15
    assert not wait_until_gone(str(work), timeout=5)
    summary = json.loads((work / "runs" / "p" / "summary.json").read_text())
    assert summary["first_failure"]["task"] == "worker:1" and summary["first_failure"]["exit_code"] == 3


def start_sleepers(work: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """`launch` two tasks that ignore SIGTERM and have a grandchild; return once both are ready."""
    log = work / "launch.out"
    with open(log, "w") as handle:
        proc = subprocess.Popen(
            launch_cmd("--cluster", str(spec_for(work, 2)), "--", "python", TASK, "sleep", "--ignore-term", "--child"),
            cwd=work,
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
    wait_for_text(log, "ready worker:1")
    wait_for_text(log, "ready worker:0")
    return proc, log


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_to_launch_stops_every_task(work: Path, signum: int) -> None:
    proc, log = start_sleepers(work)
    proc.send_signal(signum)
    assert proc.wait(timeout=20) == 128 + signum
    assert not processes_mentioning(str(work)), "a task survived the stop"
    assert "every task was stopped" in log.read_text()


def test_sigkill_of_launch_leaves_no_task(work: Path) -> None:
    proc, log = start_sleepers(work)
    proc.kill()
    proc.wait()
    assert not wait_until_gone(str(work), timeout=5), "tasks outlived a SIGKILLed launcher"


def test_taken_port_is_reported_before_anything_starts(work: Path) -> None:
    holder = socket.socket()
    holder.bind(("", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        spec = write_spec(
            work,
            {
                "name": "p",
                "run_root": str(work / "runs"),
                "hosts": [{"address": "localhost", "workers": 2, "ports": [0, port]}],
            },
        )
        proc = run_launch(["--cluster", str(spec), "--", "python", TASK, "sleep"], work)
    finally:
        holder.close()
    assert proc.returncode == 2
    assert f"Port {port} on localhost (for worker:1) is already in use" in proc.stderr
    assert not (work / "runs" / "p").exists()


def test_dry_run_json_masks_secrets_and_starts_nothing(work: Path) -> None:
    spec = write_spec(
        work,
        {
            "name": "p",
            "run_root": str(work / "runs"),
            "env": {"WANDB_API_KEY": "s3cr3t", "PLAIN": "v"},
            "hosts": [{"address": "localhost", "workers": 2, "chief": True}],
        },
    )
    proc = run_launch(["--cluster", str(spec), "--dry-run", "--json"], work)
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert [t["name"] for t in plan["tasks"]] == ["chief:0", "worker:0", "worker:1"]
    assert all(t["env"]["WANDB_API_KEY"] == "****" and t["env"]["PLAIN"] == "v" for t in plan["tasks"])
    assert "s3cr3t" not in proc.stdout
    text = run_launch(["--cluster", str(spec), "--dry-run"], work)
    assert "TF_CONFIG=" in text.stdout and "s3cr3t" not in text.stdout
    assert text.stdout.rstrip().splitlines()[-1].startswith("dry run: nothing was started.")
    assert not (work / "runs").exists()


def test_the_command_line_loads_no_spec_machinery_until_it_validates() -> None:
    """`launch status`, `--help` and a refused argument answer without pydantic, rich or paramiko, and a
    launch starts its local agents before it pays for them."""
    code = (
        "import sys, launcher.cli.main;"
        "print(sorted(m for m in ('pydantic', 'rich', 'paramiko', 'launcher.plan') if m in sys.modules))"
    )
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "[]"


def test_launcher_never_imports_tensorflow() -> None:
    code = (
        "import sys, launcher.cli.main, launcher.supervise.supervisor, launcher.transport.fleet, launcher.agent.main;"
        "sys.exit('tensorflow' in sys.modules or 'keras' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_usage_errors_exit_2_without_traceback(work: Path) -> None:
    for args in (["--local", "0"], [], ["--json"], ["--cluster", "x.json", "--local", "2"]):
        proc = run_launch(args, work)
        assert proc.returncode == 2, args
        assert "Traceback" not in proc.stderr and proc.stderr.startswith("launch:"), proc.stderr


def test_live_table_on_a_terminal_and_launch_status(work: Path) -> None:
    import pty

    out = work / "out"
    out.mkdir()
    spec = spec_for(work, 2)
    main_fd, child_fd = pty.openpty()
    proc = subprocess.Popen(
        launch_cmd("--cluster", str(spec), "--", "python", TASK, "record", str(out)),
        cwd=work,
        stdin=child_fd,
        stdout=child_fd,
        stderr=child_fd,
        env={**os.environ, "COLUMNS": "200"},
    )
    os.close(child_fd)
    chunks = []
    while True:
        try:
            data = os.read(main_fd, 65536)
        except OSError:  # the terminal closed: the launcher has exited
            break
        if not data:
            break
        chunks.append(data)
    os.close(main_fd)
    assert proc.wait(timeout=30) == 0
    screen = b"".join(chunks).decode("utf-8", "replace")
    assert "steps/s" in screen and "recorded worker:1" in screen
    assert "[worker:1] recorded" not in screen, "a terminal gets the table, not prefixed lines"
    status = run_launch(["status", str(work / "runs" / "p")], work)
    assert status.returncode == 0
    assert "succeeded" in status.stdout and "worker:1" in status.stdout
    missing = run_launch(["status", str(work / "nowhere")], work)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr


def test_the_launch_command_loads_no_pydantic_plugin_and_a_library_user_keeps_theirs(tmp_path: Path) -> None:
    """Finding pydantic's plugins reads every installed distribution's metadata at each launch: the
    command skips it, in its own process only."""
    code = (
        "import sys; from launcher.cli import main as cli\n"
        "sys.argv = ['launch', '--local', '1', '--dry-run', '--', 'python3', '-c', 'pass']\n"
        "try:\n    cli.entry()\nexcept SystemExit:\n    pass\n"
        "print('metadata' if 'importlib.metadata' in sys.modules else 'none')\n"
    )
    ran = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert ran.stdout.strip().splitlines()[-1] == "none", ran.stdout + ran.stderr
    library = "import sys, launcher.spec.load as s; s.parse_spec({'name': 'a', 'hosts': [{'address': 'localhost'}]})\n"
    library += "print('metadata' if 'importlib.metadata' in sys.modules else 'none')"
    ran = subprocess.run([sys.executable, "-c", library], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert ran.stdout.strip() == "metadata", ran.stdout + ran.stderr


def test_a_launch_under_nohup_outlives_its_terminals_hang_up(work: Path) -> None:
    """`nohup launch ... &`, then the terminal closes: the shell sends SIGHUP to the job's process group.
    The launcher keeps ignoring it, as nohup asked, and the run ends as it would have."""
    log = work / "launch.out"
    code = "import time; print('ready', flush=True); time.sleep(2)"
    with open(log, "w") as handle:
        proc = subprocess.Popen(
            launch_cmd("--cluster", str(spec_for(work, 2)), "--", "python", "-c", code),
            cwd=work,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a job of its own, as a shell makes it
            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),  # what nohup does before exec
        )
    try:
        wait_for_text(log, "[worker:0] ready")
        wait_for_text(log, "[worker:1] ready")
        os.killpg(proc.pid, signal.SIGHUP)  # the hang-up, to the job's whole process group
        assert proc.wait(timeout=30) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "launch succeeded" in log.read_text()
    assert not wait_until_gone(str(work), timeout=5), "a process outlived the launch"
