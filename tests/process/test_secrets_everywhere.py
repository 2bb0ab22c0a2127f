"""A run with a dozen kinds of secrets in env and argv, failing on purpose: no secret value in any file
of the run directory, in the bundle, on the console, or on a process command line."""

from __future__ import annotations

import json
import subprocess
import tarfile
import time
from pathlib import Path

import psutil

from tests.conftest import launch_cmd, run_launch, write_spec
from tests.unit.test_secrets import SECRETS

ARG_SECRET = "hf_" + "ZYXWVUTSRQPONMLKJIHGFEDCBA98"
# Secrets given as positional overrides and a flag with a colon: nothing in their form says secret.
OVERRIDES = {"TOKEN=": "plainword-one", "db.password=": "plainword-two", "--db-password:": "plainword-three"}
SCRIPT = """
import json, os, sys, time
secrets = json.loads(os.environ["SECRET_NAMES"])
for name in secrets:
    print(f"{name}={os.environ[name]}", flush=True)
print("argv", sys.argv[1:], flush=True)
open(sys.argv[-1], "w").write(str(os.getpid()))
time.sleep(float(os.environ["HOLD_S"]))
raise RuntimeError("cannot log in with " + os.environ["DB_PASS"] + " or " + sys.argv[1].split("=", 1)[1])
"""


def every_value() -> list[str]:
    return [*SECRETS.values(), ARG_SECRET, *OVERRIDES.values()]


def test_no_secret_reaches_a_file_the_console_or_a_command_line(work: Path) -> None:
    (work / "leak.py").write_text(SCRIPT)
    env = {**SECRETS, "SECRET_NAMES": json.dumps(sorted(SECRETS)), "HOLD_S": "3", "MY_THING": "declared-value-9"}
    spec = write_spec(
        work,
        {
            "name": "s",
            "run_root": str(work / "runs"),
            "hosts": [{"address": "localhost", "workers": 1}],
            "env": env,
            "secrets": ["MY_THING"],
            "restart": {"max_restarts": 0, "grace_period_s": 2},
        },
    )
    pid_file = work / "task.pid"
    overrides = [name + value for name, value in OVERRIDES.items()]
    argv = ["python3", "leak.py", f"--token={ARG_SECRET}", *overrides, str(pid_file)]
    proc = subprocess.Popen(
        launch_cmd("--cluster", str(spec), "--plain", "--", *argv),
        cwd=work,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text()):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    started = [p for p in psutil.process_iter() if p.pid != proc.pid and _mentions(p, str(work))]  # not launch itself
    cmdlines = [" ".join(p.cmdline()) for p in started]
    cmdlines.append(" ".join(psutil.Process(int(pid_file.read_text())).cmdline()))
    console = proc.communicate(timeout=60)[0]
    assert proc.returncode == 1, console
    assert "RuntimeError: cannot log in with ****" in console, console
    assert "argv ['--token=****', 'TOKEN=****', 'db.password=****', '--db-password:****'" in console, console
    dry = run_launch(["--cluster", str(spec), "--dry-run", "--", *argv], work)
    dry_json = run_launch(["--cluster", str(spec), "--dry-run", "--json", "--", *argv], work)
    bundle = run_launch(["bundle", str(work / "runs" / "s"), "-o", str(work / "b.tar.gz")], work)
    assert bundle.returncode == 0, bundle.stderr
    with tarfile.open(work / "b.tar.gz") as archive:
        packed = "".join(archive.extractfile(m).read().decode() for m in archive.getmembers() if m.isfile())
    status = run_launch(["status", str(work / "runs" / "s")], work)
    files = {str(p): p.read_text(errors="replace") for p in (work / "runs").rglob("*") if p.is_file()}
    shown = {
        "console": console,
        "dry-run": dry.stdout + dry.stderr,
        "dry-run --json": dry_json.stdout,
        "bundle": packed,
        "status": status.stdout + status.stderr,
        "command lines": "\n".join(cmdlines),
        **files,
    }
    leaks = [(where, value[:12]) for where, text in shown.items() for value in every_value() if value in text]
    assert not leaks, leaks
    assert "declared-value-9" not in console + "".join(files.values())
    assert "MY_THING=****" in dry.stdout


def _mentions(process: psutil.Process, marker: str) -> bool:
    try:
        return any(marker in part for part in process.cmdline()) or process.cwd().startswith(marker)
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):  # gone meanwhile, or not ours
        return False


def test_a_secret_in_a_non_python_command_is_refused(tmp_path: Path) -> None:
    proc = run_launch(["--local", "1", "--", "bash", "-c", f"echo {ARG_SECRET}"], tmp_path)
    assert proc.returncode == 2 and "The command after --, word 3: holds a secret" in proc.stderr
    assert "only a python command's arguments can be kept off" in proc.stderr and "python -c" not in proc.stderr
    assert ARG_SECRET not in proc.stderr
    for python in (["python3"], ["python3", "-u"]):  # its own options first too
        code = run_launch(["--local", "1", "--", *python, "-c", "print(1)", f"--token={ARG_SECRET}"], tmp_path)
        assert code.returncode == 2 and "a `python -c` command's arguments cannot be kept off" in code.stderr
        assert ARG_SECRET not in code.stderr


def test_a_secret_too_short_to_mask_is_named_when_the_spec_is_read(tmp_path: Path) -> None:
    spec = {
        "name": "short",
        "run_root": str(tmp_path / "runs"),
        "hosts": [{"address": "localhost", "workers": 1, "env": {"API_TOKEN": "t0k"}}],
        "env": {"DB_PASS": "pw1", "DB_HOST": "db", "ADMIN_PASSWORD": "long-enough-xyz", "USE_TOKEN": "1"},
    }
    path = tmp_path / "short.json"
    path.write_text(json.dumps(spec))
    proc = run_launch(["--cluster", str(path), "--dry-run", "--", "python3", "-c", "pass"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "[launch] env.DB_PASS, hosts[0].env.API_TOKEN: a secret's value shorter than 4 characters" in proc.stderr
    assert "DB_HOST" not in proc.stderr and "ADMIN_PASSWORD" not in proc.stderr and "pw1" not in proc.stderr
    assert "USE_TOKEN" not in proc.stderr  # a setting
    (tmp_path / "t.py").write_text("")
    args = ["--local", "1", "--run-root", str(tmp_path / "runs"), "--dry-run", "--", "python3", "t.py"]
    flags = run_launch([*args, "--token=abc", "--lr", "1", "--api-key", "k9z"], tmp_path)
    assert "[launch] training.argv[2], training.argv[6]: a secret's value shorter than 4 characters" in flags.stderr


def test_a_python_with_options_of_its_own_keeps_them_when_its_secret_arguments_are_hidden(tmp_path: Path) -> None:
    """`python3 -u -W ignore train.py --token=X`: the options stay the interpreter's, the script still runs."""
    (tmp_path / "opts.py").write_text(
        "import sys\nprint('argv', sys.argv[1:], 'warnings', sys.warnoptions, 'optimize', sys.flags.optimize)\n"
        "print('cmdline', open('/proc/self/cmdline').read().replace(chr(0), ' '))\n"
    )
    args = ["--local", "1", "--run-root", str(tmp_path / "runs"), "--plain", "--"]
    proc = run_launch([*args, "python3", "-u", "-O", "-W", "ignore", "opts.py", f"--token={ARG_SECRET}"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "argv ['--token=****'] warnings ['ignore'] optimize 1" in proc.stdout, proc.stdout
    assert " -u -O -W ignore -c " in proc.stdout and ARG_SECRET not in proc.stdout + proc.stderr


def test_a_secret_of_the_specs_env_passed_as_an_argument_stays_off_the_command_line(tmp_path: Path) -> None:
    (tmp_path / "cmd.py").write_text("print('cmdline', open('/proc/self/cmdline').read().replace(chr(0), ' '))\n")
    key = "wandbKEY0123456789"
    spec = {
        "name": "envarg",
        "run_root": str(tmp_path / "runs"),
        "hosts": [{"address": "localhost", "workers": 1}],
        "env": {"WANDB_API_KEY": key},
        "training": {"kind": "command", "argv": ["python3", "cmd.py", "--wandb", key]},
    }
    (tmp_path / "s.json").write_text(json.dumps(spec))
    proc = run_launch(["--cluster", str(tmp_path / "s.json"), "--plain"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " -c import sys" in proc.stdout and "cmd.py" not in proc.stdout.split("cmdline", 1)[1], proc.stdout
