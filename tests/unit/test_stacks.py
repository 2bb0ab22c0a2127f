"""Reading the agents' stacks, naming the task behind, and what the supervisor and the run's files say of a hang."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from launcher.agent.stacks import _within
from launcher.rundir.report import summary
from launcher.rundir.status import _hang_rows
from launcher.supervise.gang import TaskStatus
from launcher.supervise.hang import Hang, ignored_stop, named_in, where
from launcher.supervise.policy import Action, Decision, FailureKind
from launcher.supervise.stacks import laggards, name_the_hang, parse, render, stack_path
from tests.unit.test_supervisor import make

SITE = "/venv/lib/python3.11/site-packages"
TF_WAIT = [
    ["syscall", "/usr/lib/x86_64-linux-gnu/libc.so.6", 0, True],
    ["tensorflow::EagerExecute", f"{SITE}/tensorflow/libtensorflow_cc.so.2", 0, True],
    ["0x7fff72de8c10", "?", 0, False],  # an address py-spy could not name: no line, so not Python's
    ["quick_execute", f"{SITE}/tensorflow/python/eager/execute.py", 53, False],
    ["error_handler", f"{SITE}/tensorflow/python/util/traceback_utils.py", 164, False],
    ["<module>", "/home/u/train.py", 16, False],
]
IN_DATA = [
    ["clock_nanosleep", "/usr/lib/x86_64-linux-gnu/libc.so.6", 0, True],
    ["read_shard", "/home/u/data.py", 88, False],
    ["<module>", "/home/u/train.py", 15, False],
]


def py_spy(frames: list[list[Any]], pid: int = 100) -> dict[str, Any]:
    watcher = {"name": "Thread-1", "frames": [["wait", "/usr/lib/python3.11/threading.py", 320, False]]}
    threads = [watcher, {"name": "MainThread", "frames": frames}]
    return {"via": "py-spy", "processes": [{"pid": pid, "threads": threads}]}


def status(name: str, step: int | None, quiet_since: float) -> TaskStatus:
    return TaskStatus(name, "h", 1, True, step, None, 0.0, quiet_since)


def test_the_task_outside_tensorflow_is_named_with_its_innermost_user_frame() -> None:
    stacks = {"worker:0": parse("worker:0", py_spy(TF_WAIT)), "worker:1": parse("worker:1", py_spy(IN_DATA))}
    stacks["worker:2"] = parse("worker:2", py_spy(TF_WAIT))
    tasks = [status("worker:0", 140, 5.0), status("worker:1", 140, 5.0), status("worker:2", 141, 90.0)]
    assert [t.name for t in laggards(tasks, stacks)] == ["worker:1"]
    assert stacks["worker:0"].waits_in_tensorflow() and not stacks["worker:1"].waits_in_tensorflow()
    assert name_the_hang(tasks, stacks, now=100.0) == (
        "worker:1 at step 140 since 95 s, in data.py:88 read_shard; "
        "the others wait in TensorFlow (a collective): worker:0 at step 140, worker:2 at step 141"
    )


def test_without_stacks_or_with_every_task_in_tensorflow_the_furthest_behind_is_named() -> None:
    tasks = [status("worker:0", 12, 3.0), status("worker:1", 10, 7.0), status("worker:2", 10, 2.0)]
    assert [t.name for t in laggards(tasks, {})] == ["worker:2"]  # lowest step, quiet longest
    all_in_tf = {t.name: parse(t.name, py_spy(TF_WAIT)) for t in tasks}
    assert [t.name for t in laggards(tasks, all_in_tf)] == ["worker:2"]
    unjoined = [TaskStatus("worker:0", "h", 1, False, None, None, 0.0, 1.0, milestone="imported")]
    assert "worker:0 not joined (last reported 'imported', 9 s ago)" in name_the_hang(unjoined, {}, 10.0)


def test_faulthandler_text_is_read_and_its_main_thread_found() -> None:
    text = (
        "Thread 0x00007f37b8f5f6c0 (most recent call first):\n"
        '  File "/usr/lib/python3.11/threading.py", line 320 in wait\n'
        '  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap\n\n'
        "Current thread 0x00007f37b9c44b80 (most recent call first):\n"
        '  File "/srv/app/worker/data.py", line 61 in _read\n'
        '  File "/srv/app/worker/__main__.py", line 3 in <module>\n'
        '  File "<frozen runpy>", line 88 in _run_code\n'
        '  File "<frozen runpy>", line 198 in _run_module_as_main\n'
    )
    stacks = parse("worker:0", {"via": "faulthandler", "pid": 7, "text": text})
    assert [t.name for t in stacks.threads] == ["0x00007f37b8f5f6c0", "0x00007f37b9c44b80"]
    assert stacks.main is stacks.threads[1] and stacks.main.pid == 7
    frame = stacks.user_frame()
    assert frame is not None and frame.short() == "data.py:61 _read"
    assert render(stacks, "h", 0.0).endswith(text.rstrip("\n") + "\n")


def test_an_answer_of_the_wrong_shape_is_no_stack_not_a_crash() -> None:
    wrong = ({"via": "py-spy", "processes": "x"}, {"via": 3}, {"why": ["x"]}, {"via": "py-spy", "processes": [[]]})
    for answer in wrong:
        stacks = parse("worker:0", answer)
        assert stacks.threads == () and stacks.user_frame() is None
    missing = parse("worker:0", {"via": None, "why": "py-spy is not installed on the host"})
    assert "no stack taken" in render(missing, "h", 0.0) and "py-spy is not installed" in render(missing, "h", 0.0)


def test_a_stack_file_is_named_after_its_log() -> None:
    assert stack_path("/r/attempt-2/worker-1.log") == "/r/attempt-2/worker-1.stack.txt"


def test_an_answer_over_its_budget_drops_native_frames_first_then_outer_frames() -> None:
    answer = py_spy(TF_WAIT * 40)
    assert len(json.dumps(answer)) > 4000
    kept = _within(json.loads(json.dumps(answer)), 4000)
    frames = kept["processes"][0]["threads"][1]["frames"]
    assert not any(f[3] for f in frames) and len(json.dumps(kept)) <= 4000 and frames[0][0] == "0x7fff72de8c10"


def test_the_decision_names_the_task_behind_instead_of_the_one_quiet_longest() -> None:
    what = "the gang reported no step for 600s (stall_timeout_s); worker:0 was quiet longest"
    decision = Decision(Action.RESTART, FailureKind.STALLED, "worker:0", f"{what}; restart 1 of 3", None, what)
    hang = Hang(named="worker:1 at step 4 since 600 s, in data.py:6 read_shard", laggard="worker:1")
    named = named_in(decision, hang)
    assert named.cause == "worker:1"
    assert named.reason == (
        "the gang reported no step for 600s (stall_timeout_s): worker:1 at step 4 since 600 s, in data.py:6 "
        "read_shard; restart 1 of 3"
    )
    assert named_in(decision, Hang()) == decision


def test_a_stall_takes_every_running_task_s_stack_before_the_stop(tmp_path: Path) -> None:
    sup, transport, clock, notices = make(tmp_path, stall_timeout_s=60, max_restarts=0)
    transport.stack_answers = {"worker:0": py_spy(TF_WAIT), "worker:1": py_spy(IN_DATA)}
    for task in transport.current(2):
        task.say("joined")
        task.say("step", step=4)
    sup.step(0)
    clock.now += 61
    sup.step(0)
    assert transport.stacks_asked == [["worker:0", "worker:1"]]
    assert sup.result is not None
    attempt = sup.result.attempts[0]
    assert attempt.cause == "worker:1" and "in data.py:88 read_shard" in attempt.reason, attempt.reason
    assert attempt.hang is not None and sorted(attempt.hang["stack_files"]) == ["worker:0", "worker:1"]
    written = Path(attempt.hang["stack_files"]["worker:1"]).read_text()
    assert "read_shard (/home/u/data.py:88)" in written and written.startswith("worker:1 on ")
    said = [n for n in notices if "stacks, taken before the stop, are in" in n]
    assert len(said) == 1 and notices.index(said[0]) == notices.index(attempt.reason) + 1, notices  # after the why
    sup.shutdown(asked=False)
    summary_first = summary(sup.result)["first_failure"]
    assert summary_first["task"] == "worker:1" and summary_first["exit"].startswith("hung"), summary_first
    assert "read_shard" in summary_first["hang"]


def test_where_a_hang_s_stacks_are_says_when_none_could_be_taken() -> None:
    none = Hang(files={"worker:0": "/a/w0", "worker:1": "/a/w1"}, missing={"worker:0": "x", "worker:1": "x"})
    assert where(none, "/a") == "no task's stack could be taken: x"
    some = Hang(files={"worker:0": "/a/w0", "worker:1": "/a/w1"}, missing={"worker:1": "held stopped"})
    assert where(some, "/a").endswith("are in /a (*.stack.txt); none of worker:1: held stopped")


def test_a_task_that_ignored_sigterm_is_said_stuck_where_its_stack_shows() -> None:
    stuck = Hang(named="worker:1 in busy.py:46 spin")
    said = ignored_stop("worker:1", 3, stuck, trained=False, attempt_dir="/a")
    assert (
        "stuck worker:1 in busy.py:46 spin (its stack is in /a)" in said and "PreemptionCheckpointHandler" not in said
    )
    assert "what it trained" not in said
    assert "PreemptionCheckpointHandler" in ignored_stop("worker:1", 3, Hang(), trained=True, attempt_dir="/a")


def test_launch_status_shows_a_hang_and_never_trusts_its_fields() -> None:
    rows = _hang_rows({"attempt": 2, "named": "worker:1 at step 4", "stack_files": {"worker:1": "/r/a/w.stack.txt"}})
    assert rows[0] == "  hang in attempt 2: worker:1 at step 4" and "/r/a (*.stack.txt)" in rows[1]
    assert _hang_rows({"attempt": [], "named": 3, "stack_files": "x", "no_stack": 5})[0].startswith("  hang in")
    assert _hang_rows(None) == []


def test_a_task_held_stopped_or_least_far_in_start_up_is_behind_whatever_the_others_stacks_say() -> None:
    outside = {"worker:0": parse("worker:0", py_spy(IN_DATA)), "worker:1": parse("worker:1", {"why": "held"})}
    held = [
        status("worker:0", None, 1.0),
        TaskStatus("worker:1", "h", 2, True, None, None, 0.0, 1.0, stopped_since=3.0),
    ]
    assert [t.name for t in laggards(held, outside)] == ["worker:1"]
    assert "worker:1 before its first step (nothing for 9 s), held stopped (SIGSTOP)" in name_the_hang(
        held, outside, 10.0
    )
    starting = [
        TaskStatus("worker:0", "h", 1, False, None, None, 0.0, 1.0, reported=True, milestone="imported"),
        TaskStatus("worker:1", "h", 2, False, None, None, 0.0, 1.0, reported=True, milestone="starting"),
    ]
    assert [t.name for t in laggards(starting, outside)] == ["worker:1"]  # the least far, as the deadline judges
