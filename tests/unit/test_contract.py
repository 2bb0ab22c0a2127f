"""The launcher-worker contract: defined once, read back as written, shipped to hosts as it is."""

from __future__ import annotations

import base64
import marshal
import os
import re
import zlib
from pathlib import Path

from launcher.agent.bootstrap import agent_line
from tests.conftest import REPO
from worker import contract
from worker.contract import RunLayout, TaskEnv


def test_task_env_round_trips() -> None:
    env = TaskEnv(
        run_name="r",
        run_dir="/runs/r",
        attempt=3,
        task="worker:1",
        checkpoint_dir="gs://b/r",
        result_file="/runs/r/attempt-3/worker-1.result.json",
        error_file="/e",
        metrics_file="/m",
        export_dir="/x",
        tensorboard_dir="gs://b/r/tensorboard",
        training={"kind": "builtin", "steps": 5},
        preemption_exit_code=43,
        fault="kill:5:1",
    )
    assert TaskEnv.from_env(env.to_env()) == env
    assert all(key.startswith(contract.ENV_PREFIX) for key in env.to_env())


def test_task_env_without_a_launcher_has_local_defaults(tmp_path: Path) -> None:
    env = TaskEnv.from_env({contract.RUN_DIR_VAR: str(tmp_path)})
    assert env.task == "worker:0" and env.attempt == 0 and env.fault is None
    assert env.result_file == f"{tmp_path}/attempt-0/worker-0.result.json"
    assert env.preemption_exit_code == contract.PREEMPTION_EXIT_CODE


def test_layout_names_and_parses_attempts() -> None:
    layout = RunLayout("/runs/x")
    assert layout.attempt_dir(4) == "/runs/x/attempt-4"
    assert RunLayout.attempt_of("attempt-4") == 4
    assert RunLayout.attempt_of("attempt-4.tmp") is None and RunLayout.attempt_of("summary.json") is None


def test_the_agent_ships_the_contract_itself_rather_than_a_copy() -> None:
    """The agent runs on hosts with nothing but python: the bootstrap ships worker/contract.py as
    it is, and every agent module takes the contract's names from it."""
    bundle = marshal.loads(zlib.decompress(base64.b64decode(agent_line(15.0))))
    shipped = dict(bundle["modules"])
    assert shipped["worker.contract"] == (REPO / "worker" / "contract.py").read_text()
    order = list(shipped)
    importers = [name for name, source in shipped.items() if "from worker.contract import" in source]
    assert importers, "agent modules take the contract's names from it"
    assert all(order.index("worker.contract") < order.index(name) for name in importers), (
        "the contract is registered before anything imports it"
    )
    assert "from worker.contract import" in shipped["launcher.agent.tasks"]
    assert set(contract.AGENT_EVENTS) <= {
        contract.STARTED,
        contract.STOPPED,
        contract.CONTINUED,
        contract.EXIT,
        contract.WARM,
        contract.USAGE,
    }


def test_no_second_definition_of_a_contract_name() -> None:
    """Every TFLAUNCH_* name is written out only in the contract."""
    allowed = {REPO / "worker" / "contract.py"}
    offenders = []
    for path in [*(REPO / "launcher").rglob("*.py"), *(REPO / "worker").rglob("*.py")]:
        if path in allowed:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#")[0]
            if re.search(r"[\"']TFLAUNCH_[A-Z_]*[\"']", code):
                offenders.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_chief_outputs_live_beside_the_checkpoints_every_host_shares() -> None:
    layout = RunLayout("/runs/r")
    assert layout.chief_outputs(layout.default_checkpoint_dir) == ("/runs/r/model", "/runs/r/tensorboard")
    assert layout.chief_outputs("/shared/ckpt/r") == ("/shared/ckpt/r/model", "/shared/ckpt/r/tensorboard")
    outputs = layout.outputs("gs://bucket/r")
    assert outputs["metrics"] == "/runs/r/metrics.jsonl" and outputs["model"] == "gs://bucket/r/model"


def test_tflaunchs_own_copies_of_the_contract_names_and_version_agree() -> None:
    """tflaunch imports nothing of `worker` or `launcher` (a user's worker.py could stand in for them),
    so it keeps copies; they must not drift."""
    import tomllib

    import launcher
    import tflaunch
    import tflaunch.events
    import tflaunch.faults
    import tflaunch.stacks
    from tests.conftest import REPO
    from worker import contract

    assert (tflaunch.events.EVENT_FD_VAR, tflaunch.events.RECORD) == (contract.EVENT_FD_VAR, contract.RECORD)
    assert tflaunch.faults.FAULT_VAR == contract.FAULT_VAR
    assert (tflaunch.stacks.STACK_FILE_VAR, tflaunch.stacks.STACK_SIGNAL) == (
        contract.STACK_FILE_VAR,
        contract.STACK_SIGNAL,
    )
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert tflaunch.__version__ == launcher.__version__ == version


def test_tflaunch_offers_the_errors_launch_raises_without_loading_the_launcher_for_report() -> None:
    import subprocess
    import sys

    from tests.conftest import REPO

    code = (
        "import sys, tflaunch\n"
        "loaded_by_import = 'launcher' in sys.modules\n"
        "from tflaunch import LaunchError, SpecError, UsageError\n"
        "import launcher.common.errors as errors\n"
        "assert (LaunchError, SpecError, UsageError) == (errors.LaunchError, errors.SpecError, errors.UsageError)\n"
        "print(loaded_by_import, hasattr(tflaunch, 'Nope'), 'UsageError' in dir(tflaunch))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["False", "False", "True"], out.stderr


def test_a_users_launcher_py_does_not_break_tflaunch_star_imports(tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.conftest import REPO

    (tmp_path / "launcher.py").write_text("print('the user launcher ran')\n")
    code = "from tflaunch import *\nimport tflaunch\nprint(report.__name__, hasattr(tflaunch, 'UsageError'))\n"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{REPO}"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "report False" and "Traceback" not in out.stderr


def test_a_sigterm_before_the_preemption_handler_listens_is_kept_and_sent_again() -> None:
    """Run in a child interpreter: it changes the process's SIGTERM handler."""
    import subprocess
    import sys

    code = (
        "import os, signal\n"
        "from worker import early_sigterm\n"
        "assert early_sigterm.pass_on() is False\n"
        "early_sigterm.hold()\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "assert early_sigterm._held == [signal.SIGTERM]\n"  # handled at the next bytecode: kept, and alive
        "got = []\n"
        "signal.signal(signal.SIGTERM, lambda s, f: got.append(s))\n"  # the handler that listens later
        "assert early_sigterm.pass_on() is True\n"
        "assert got == [signal.SIGTERM], got\n"
        "assert early_sigterm.pass_on() is False\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr
