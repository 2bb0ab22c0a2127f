"""--inject: parsed by the launcher, fired in the task (the built-in runtime, or a script's report)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from launcher.common.errors import UsageError
from launcher.supervise.faults import parse_fault, unfired
from launcher.supervise.gang import TaskResult
from tests.conftest import REPO
from tflaunch.faults import FaultInjector


def test_a_fault_reads_back_as_written() -> None:
    for text in ("kill:worker:1@step=50", "exit=3:chief:0@step=10", "hang:worker:0@step=0"):
        assert parse_fault(text).text == text
    with pytest.raises(UsageError, match="KIND:TASK@step=N"):
        parse_fault("kill:worker:1")


def test_an_injector_fires_once_at_the_first_step_at_or_past_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    fired: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "kill", lambda pid, signum: fired.append((pid, signum)))
    injector = FaultInjector("term:5:1")
    injector.at_step(4)
    assert fired == []
    injector.at_step(10)  # a script reporting every 10 steps still rehearses its fault
    injector.at_step(11)
    assert len(fired) == 1 and fired[0][0] == os.getpid()


@pytest.mark.parametrize("raw", ["", "nonsense", "kill:x:1", "boom:5:1", "exit:5"])
def test_a_value_the_injector_cannot_read_is_no_fault(raw: str) -> None:
    injector = FaultInjector(raw)
    injector.at_step(10**6)
    assert injector.kind is None


SCRIPT = """
import os, sys
from tflaunch import report
class Counter:  # as numpy's integers are: an index, not an int (a TensorFlow step's .numpy())
    def __init__(self, n): self.n = n
    def __index__(self): return self.n
for step in (1, 2, 3, 4):
    report("step", step=Counter(step), total=Counter(4))
    print(step, flush=True)
"""


def test_a_script_fires_its_fault_by_reporting_the_step() -> None:
    read, write = os.pipe()
    env = {**os.environ, "PYTHONPATH": str(REPO), "TFLAUNCH_EVENT_FD": str(write), "TFLAUNCH_FAULT": "exit:3:7"}
    try:
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT], env=env, pass_fds=(write,), capture_output=True, text=True, timeout=60
        )
    finally:
        os.close(write)
    assert done.returncode == 7, done.stderr
    assert done.stdout.split() == ["1", "2"]
    with os.fdopen(read, "rb") as events:
        sent = [json.loads(line) for line in events.read().splitlines()]
    assert [(e["step"], e["total"]) for e in sent] == [(1, 4), (2, 4), (3, 4)]
    assert "injected fault: exit at step 3" in done.stderr


def _ended(name: str, code: int | None, step: int | None) -> TaskResult:
    return TaskResult(name, "localhost", 1, code, None if code is not None else 9, 0.0, 1.0, True, step, "log")


def test_a_fault_that_could_not_fire_is_said() -> None:
    faults = [parse_fault("kill:worker:1@step=3"), parse_fault("kill:worker:0@step=3")]
    quiet = [_ended("worker:0", None, 3), _ended("worker:1", 0, None)]
    [said] = unfired(faults, quiet)
    assert said.startswith("--inject kill:worker:1@step=3 did not fire: worker:1 exited 0 and it reported no step")
    assert unfired(faults, [_ended("worker:1", 0, 2)])[0].count("the last step it reported was 2") == 1
    assert unfired(faults, [_ended("worker:0", 1, 1)]) == []  # ended by something else: said as a failure
    # a script resumed past step 3 says where it is ("done", step=200) and trains nothing: the fault never fires
    [resumed] = unfired(faults, [_ended("worker:1", 0, 200)])
    assert "worker:1 exited 0 and it trained no step from 3 on (it was at step 200" in resumed


def test_a_task_takes_one_fault() -> None:
    from launcher.cli.launch_command import faults_of as _faults
    from launcher.spec.load import parse_spec

    spec = parse_spec({"name": "f", "hosts": [{"address": "localhost", "workers": 2}]})
    assert len(_faults(spec, ["kill:worker:1@step=3", "exit=4:worker:0@step=5"])) == 2
    with pytest.raises(UsageError, match="more than one --inject for worker:1"):
        _faults(spec, ["exit=4:worker:1@step=3", "exit=5:worker:1@step=20"])
