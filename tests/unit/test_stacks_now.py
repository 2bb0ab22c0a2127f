"""`launch stacks`' requests and answers in the run directory: what the launcher answers, and what it refuses."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from launcher.common.errors import UsageError
from launcher.plan import PlanInputs, build_plan
from launcher.rundir.stacks_now import StackRequests, _printable_answer, take_now
from launcher.spec.load import parse_spec
from launcher.supervise.gang import TaskStatus

PLAN = build_plan(
    parse_spec({"name": "c", "hosts": [{"address": "localhost", "workers": 2, "ports": [5000, 5001]}]}),
    PlanInputs("/runs/c", 0, "/py", "/work"),
)


class Agents:
    """Answers as the agents would: worker:1 stuck in read_shard (or, `in_step`, in TensorFlow), worker:0 in
    TensorFlow."""

    def __init__(self, in_step: bool = False) -> None:
        self.asked: list[list[str]] = []
        self.in_step = in_step

    def stacks(self, launches: list[Any]) -> dict[str, dict[str, Any]]:
        self.asked.append([launch.name for launch in launches])
        site = "/v/lib/python3.11/site-packages/tensorflow/python/eager/execute.py"
        frames = {
            "worker:0": [["quick_execute", site, 53, False]],
            "worker:1": [
                ["quick_execute", site, 53, False] if self.in_step else ["read_shard", "/u/data.py", 8, False]
            ],
        }
        return {
            launch.name: {
                "via": "py-spy",
                "processes": [
                    {"pid": 1, "threads": [{"name": "MainThread\x1b]0;owned\x07", "frames": frames[launch.name]}]}
                ],
            }
            for launch in launches
        }


def requests_in(
    tmp_path: Path, last_progress: float = 1.0, in_step: bool = False
) -> tuple[StackRequests, Agents, Path]:
    agents = Agents(in_step)
    requests = StackRequests(str(tmp_path), agents)
    statuses = [TaskStatus(t.name, "localhost", 1, True, 4, None, 0.0, last_progress) for t in PLAN.tasks]
    requests.publish(lambda: (list(PLAN.tasks), statuses, 31.0))
    folder = tmp_path / "stacks"
    folder.mkdir(mode=0o700)
    return requests, agents, folder


def test_a_request_is_answered_with_every_stack_and_the_task_behind(tmp_path: Path) -> None:
    requests, agents, folder = requests_in(tmp_path)
    (folder / "request-a1.json").write_text(json.dumps({"tasks": None}))
    (folder / "request-a2.json").write_text(json.dumps({"tasks": ["worker:1"]}))
    requests.poll()
    every = json.loads((folder / "a1.json").read_text())
    assert every["running"] == ["worker:0", "worker:1"] and sorted(every["tasks"]) == ["worker:0", "worker:1"]
    assert every["behind"].startswith("worker:1 at step 4 since 30 s, in data.py:8 read_shard")
    assert "\x1b" not in every["tasks"]["worker:0"], "a thread's name acts on no terminal"
    one = json.loads((folder / "a2.json").read_text())
    assert list(one["tasks"]) == ["worker:1"] and ["worker:1"] in agents.asked
    assert not list(folder.glob("request-*"))


def test_a_gang_that_steps_names_no_task_behind(tmp_path: Path) -> None:
    """Steps are reported at most every half second: the lowest of them trails by its last report, not a fault;
    but a task out of TensorFlow while the others wait in it is behind however recent its last step."""
    requests, _, folder = requests_in(tmp_path, last_progress=30.5, in_step=True)
    (folder / "request-b1.json").write_text(json.dumps({"tasks": None}))
    requests.poll()
    said = json.loads((folder / "b1.json").read_text())["behind"]
    assert said == "none: every task reported a step in the last 2 s (worker:0 at step 4, worker:1 at step 4)"
    (tmp_path / "stuck").mkdir()
    requests, _, folder = requests_in(tmp_path / "stuck", last_progress=30.5)
    (folder / "request-b2.json").write_text(json.dumps({"tasks": None}))
    requests.poll()
    said = json.loads((folder / "b2.json").read_text())["behind"]
    assert said.startswith("worker:1 at step 4 since 0 s, in data.py:8 read_shard"), said


@pytest.mark.parametrize(
    "request_text", ['{"tasks": 5}', '{"tasks": true}', '{"tasks": [1]}', "[" * 30000 + "]" * 30000]
)
def test_a_malformed_request_is_refused_and_never_ends_the_run(tmp_path: Path, request_text: str) -> None:
    requests, agents, folder = requests_in(tmp_path)
    (folder / "request-bad.json").write_text(request_text)
    requests.poll()
    assert json.loads((folder / "bad.json").read_text()) == {
        "error": "a malformed request (not written by `launch stacks`)"
    }
    assert agents.asked == []
    with pytest.raises(UsageError, match="refused the request"):
        _printable_answer(json.loads((folder / "bad.json").read_text()))


def test_a_stacks_directory_others_may_write_in_is_not_used(tmp_path: Path) -> None:
    requests, agents, folder = requests_in(tmp_path)
    (folder / "request-x.json").write_text(json.dumps({"tasks": None}))
    os.chmod(folder, 0o777)
    requests.poll()
    assert agents.asked == [] and not (folder / "x.json").exists()


def test_launch_stacks_refuses_what_is_no_running_run(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="is it a run directory"):
        take_now(str(tmp_path), None, 1.0, print)
    (tmp_path / "status.json").write_text(
        json.dumps(
            {
                "launcher_pid": 999_999_999,
                "launcher_started": 1.0,
                "updated": 2.0,
                "attempt": 0,
                "restarts": 0,
                "tasks": [],
            }
        )
    )
    with pytest.raises(UsageError, match="its launcher .* is gone and wrote no summary"):
        take_now(str(tmp_path), None, 1.0, print)
