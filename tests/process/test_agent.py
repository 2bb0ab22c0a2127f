"""A host's agent with real local processes: exit codes, signals, logs, groups, lifeline, bounds."""

from __future__ import annotations

import json
import os
import queue
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from launcher.common.errors import HostError
from launcher.plan import PlanInputs, TaskLaunch, build_plan
from launcher.spec.load import parse_spec
from launcher.spec.models import ClusterSpec
from launcher.transport.base import Event, OutputLine, TaskExited, WorkerReport
from launcher.transport.fleet import AgentTransport
from launcher.transport.hosts import host_transport
from tests.conftest import HELPERS, tasks_of

TASK = str(HELPERS / "task.py")


def command_spec(argv: list[str], tasks: int = 1, **host: Any) -> ClusterSpec:
    return parse_spec(
        {
            "name": "t",
            "training": {"kind": "command", "argv": argv},
            "hosts": [{"address": "localhost", "ports": list(range(41000, 41000 + tasks)), "workers": tasks, **host}],
        }
    )


def plan_of(work: Path, spec: ClusterSpec) -> list[TaskLaunch]:
    return list(build_plan(spec, PlanInputs(str(work / "run"), 0, sys.executable, str(work))).tasks)


@pytest.fixture
def agents() -> Iterator[list[AgentTransport]]:
    """Transports a test opened; closed at the end whatever happened."""
    opened: list[AgentTransport] = []
    yield opened
    for transport in opened:
        transport.close()


def start(work: Path, agents: list[AgentTransport], spec: ClusterSpec) -> tuple[Any, queue.Queue[Event]]:
    transport = host_transport(spec, [sys.executable])
    agents.append(transport)
    events: queue.Queue[Event] = queue.Queue()
    started = transport.start_all([(launch, events.put) for launch in plan_of(work, spec)])
    return (started[0] if len(started) == 1 else started), events


def wait_for(events: queue.Queue[Event], kind: type, timeout: float = 20) -> Event:
    deadline = time.monotonic() + timeout
    while True:
        event = events.get(timeout=max(0.01, deadline - time.monotonic()))
        if isinstance(event, kind):
            return event


def test_exit_code_output_and_log(work: Path, agents: list[AgentTransport]) -> None:
    task, events = start(work, agents, command_spec(["python", TASK, "fail-on", "worker:0", "3"]))
    line = wait_for(events, OutputLine)
    assert isinstance(line, OutputLine) and line.line == "ready worker:0" and line.task == "worker:0"
    exited = wait_for(events, TaskExited)
    assert isinstance(exited, TaskExited) and exited.exit.code == 3 and exited.exit.signal is None
    assert "worker:0 failing with 3" in Path(task.launch.log_path).read_text()
    assert task.gone()


def test_sigkill_reports_the_signal_and_empties_the_group(work: Path, agents: list[AgentTransport]) -> None:
    task, events = start(work, agents, command_spec(["python", TASK, "sleep", "--ignore-term", "--child"]))
    wait_for(events, OutputLine)
    group = [p for p in psutil.process_iter() if _pgid(p.pid) == task.pid]
    assert len(group) == 2, "the task and its grandchild share the task's own process group"
    task.signal(signal.SIGTERM)
    time.sleep(0.3)  # a SIGTERM the task ignores must not end it; nothing to await but its absence
    assert not any(isinstance(e, TaskExited) for e in list(events.queue))
    task.signal(signal.SIGKILL)
    exited = wait_for(events, TaskExited)
    assert isinstance(exited, TaskExited) and exited.exit.signal == signal.SIGKILL
    _, alive = psutil.wait_procs(group, timeout=10)
    assert not alive, "the grandchild survived the group kill"


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:  # exited meanwhile
        return None


def test_closing_the_channel_kills_every_task(work: Path, agents: list[AgentTransport]) -> None:
    tasks, events = start(work, agents, command_spec(["python", TASK, "sleep", "--ignore-term", "--child"], tasks=2))
    for _ in tasks:
        wait_for(events, OutputLine)
    doomed = [p for p in psutil.process_iter() if _pgid(p.pid) in {t.pid for t in tasks}]
    assert len(doomed) == 4
    agents.pop().close()  # what the kernel does when the launcher dies
    _, alive = psutil.wait_procs(doomed, timeout=10)
    assert not alive


def test_a_killed_agent_takes_its_tasks_with_it_and_they_are_lost(work: Path, agents: list[AgentTransport]) -> None:
    task, events = start(work, agents, command_spec(["python", TASK, "sleep", "--child"]))
    wait_for(events, OutputLine)
    agent = agents[0].agent(0)
    doomed = [p for p in psutil.process_iter() if _pgid(p.pid) == task.pid]
    os.kill(agent.info["pid"], signal.SIGKILL)
    exited = wait_for(events, TaskExited)
    assert isinstance(exited, TaskExited) and exited.exit.lost is not None and "localhost" in exited.exit.lost
    _, alive = psutil.wait_procs(doomed, timeout=10)
    assert not alive or all(p.status() == psutil.STATUS_ZOMBIE for p in alive)


def test_the_keeper_is_forked_before_the_agents_modules_load(work: Path, agents: list[AgentTransport]) -> None:
    """Every page a process maps costs its exit: the keeper maps the bare interpreter, not the agent's
    modules (forked from a loaded agent, it mapped ~78% of the agent; forked first, ~56%)."""
    task, events = start(work, agents, command_spec(["python", TASK, "sleep"]))
    wait_for(events, OutputLine)
    agent = psutil.Process(agents[0].agent(0).info["pid"])
    keepers = [p for p in agent.children() if p.pid != task.pid and p.cmdline() == agent.cmdline()]
    assert len(keepers) == 1
    assert keepers[0].memory_info().rss < 0.7 * agent.memory_info().rss


def test_what_a_killed_agent_left_is_removed_by_the_next_agent(work: Path, agents: list[AgentTransport]) -> None:
    task, events = start(work, agents, command_spec(["python", TASK, "sleep"]))
    wait_for(events, OutputLine)
    left = Path(psutil.Process(task.pid).environ()["TMPDIR"]).parent  # the task's TMPDIR is in the scratch
    assert left.name.startswith("tflaunch-agent-")
    os.kill(agents[0].agent(0).info["pid"], signal.SIGKILL)
    wait_for(events, TaskExited)
    assert left.is_dir(), "a killed agent cannot clean up after itself"
    start(work, agents, command_spec(["python", TASK, "fail-on", "none", "0"]))
    deadline = time.monotonic() + 20
    while left.exists() and time.monotonic() < deadline:  # the new agent sweeps on a thread of its own
        time.sleep(0.05)
    assert not left.exists()


def test_the_launchers_variables_come_from_the_launcher_alone(
    work: Path, agents: list[AgentTransport], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shell's stray TFLAUNCH_FAULT (or an outer launch's variables) must not reach the tasks."""
    monkeypatch.setenv("TFLAUNCH_FAULT", "exit:0:7")
    monkeypatch.setenv("TFLAUNCH_SOMETHING_ELSE", "x")
    monkeypatch.setenv("USERS_OWN_SETTING", "kept")
    task, events = start(work, agents, command_spec(["python", TASK, "sleep"]))
    wait_for(events, OutputLine)
    environ = psutil.Process(task.pid).environ()
    assert "TFLAUNCH_FAULT" not in environ and "TFLAUNCH_SOMETHING_ELSE" not in environ
    assert environ["USERS_OWN_SETTING"] == "kept" and environ["TFLAUNCH_TASK"] == "worker:0"


def test_a_missing_program_is_exit_127_with_a_message(work: Path, agents: list[AgentTransport]) -> None:
    task, events = start(work, agents, command_spec(["/no/such/program"]))
    exited = wait_for(events, TaskExited)
    assert isinstance(exited, TaskExited) and exited.exit.code == 127
    assert "cannot start '/no/such/program'" in Path(task.launch.log_path).read_text()


def test_an_executable_the_kernel_cannot_run_is_not_started(work: Path, agents: list[AgentTransport]) -> None:
    """An empty or shebang-less file is refused as exec refuses it, not run by /bin/sh (an empty
    one would exit 0: a training 'finished')."""
    empty = work / "empty-train"
    empty.write_text("")
    empty.chmod(0o700)
    task, events = start(work, agents, command_spec([str(empty)]))
    exited = wait_for(events, TaskExited)
    assert isinstance(exited, TaskExited) and exited.exit.code == 127
    assert "Exec format error" in Path(task.launch.log_path).read_text()


def test_one_host_runs_sixteen_tasks_on_one_agent(work: Path, agents: list[AgentTransport]) -> None:
    tasks, events = start(work, agents, command_spec(["python", TASK, "fail-on", "none", "0"], tasks=16))
    for _ in range(16):
        wait_for(events, OutputLine)
    agent = psutil.Process(agents[0].agent(0).info["pid"])
    keepers = [child for child in agent.children() if child.cmdline() == agent.cmdline()]
    assert len(keepers) == 1 and os.getsid(keepers[0].pid) == keepers[0].pid  # the agent's keeper, on its own
    children = tasks_of(agent)
    assert sorted(child.pid for child in children) == sorted(t.pid for t in tasks)
    assert {json.loads(p.environ()["TF_CONFIG"])["task"]["index"] for p in children} == set(range(16))


def test_an_endless_event_line_is_dropped_and_said(work: Path, agents: list[AgentTransport]) -> None:
    script = (
        "import os; fd = int(os.environ['TFLAUNCH_EVENT_FD']);"
        'os.write(fd, b\'{"event": "step", "step": 1, "pad": "\' + b\'x\' * (3 << 20) + b\'"}\\n\');'
        'os.write(fd, b\'{"event": "step", "step": 2}\\n\')'
    )
    task, events = start(work, agents, command_spec(["python", "-c", script]))
    seen: list[Event] = []
    while not isinstance(event := events.get(timeout=30), TaskExited):
        seen.append(event)
    assert [e.data["step"] for e in seen if isinstance(e, WorkerReport)] == [2]
    assert any(isinstance(e, OutputLine) and "over 1048576 bytes was dropped" in e.line for e in seen)


def test_an_agent_that_cannot_start_names_the_host_and_the_reason(work: Path, agents: list[AgentTransport]) -> None:
    spec = command_spec(["python", TASK, "sleep"], python="/no/such/python3")
    transport = host_transport(spec, ["/no/such/python3"])
    agents.append(transport)
    with pytest.raises(HostError) as raised:
        transport.agent(0)
    assert raised.value.host == "localhost" and "/no/such/python3" in str(raised.value)
    not_python = work / "not-python"
    not_python.write_text("#!/bin/sh\necho 'this is not python' >&2\nexit 3\n")
    not_python.chmod(0o755)
    transport = host_transport(spec, [str(not_python)])
    agents.append(transport)
    with pytest.raises(HostError) as raised:
        transport.agent(0)
    assert "this is not python" in str(raised.value) and str(not_python) in str(raised.value)


def test_a_task_cannot_forge_the_agents_reports_nor_break_it(work: Path, agents: list[AgentTransport]) -> None:
    script = (
        "import os; fd = int(os.environ['TFLAUNCH_EVENT_FD']);"
        "os.write(fd, b'[' * 100000 + b'\\n');"  # nested past any parser
        'os.write(fd, b\'{"event": "exit", "code": 0}\\n\');'
        'os.write(fd, b\'{"event": "started", "pid": 1}\\n\');'
        'os.write(fd, b\'{"event": "stopped", "pid": 1}\\n\');'
        "open(os.environ['TFLAUNCH_ERROR_FILE'], 'w').write('\\u00e9' * 200000);"  # over the bound once escaped
        "print('still here', flush=True); raise SystemExit(3)"
    )
    task, events = start(work, agents, command_spec(["python", "-c", script]))
    seen: list[Event] = []
    while not isinstance(event := events.get(timeout=30), TaskExited):
        seen.append(event)
    assert event.exit.code == 3, "the task's real exit, not the one it claimed"
    assert task.pid != 1
    assert not [e for e in seen if isinstance(e, WorkerReport)], "no forged report reached the supervisor"
    assert any(isinstance(e, OutputLine) and e.line == "still here" for e in seen)
    assert any(isinstance(e, OutputLine) and "not sent back" in e.line for e in seen)


def test_a_python_wrapper_that_prints_first_still_starts_the_agent(work: Path, agents: list[AgentTransport]) -> None:
    wrapper = work / "bannerpy"
    wrapper.write_text(f"#!/bin/sh\nprintf 'module env loaded; '\nexec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    spec = command_spec(["python", "-c", "print('ran')"], python=str(wrapper))
    transport = host_transport(spec, [str(wrapper)])
    agents.append(transport)
    events: queue.Queue[Event] = queue.Queue()
    launch = plan_of(work, spec)[0]
    transport.start_all([(launch, events.put)])
    exited = wait_for(events, TaskExited)
    assert isinstance(exited, TaskExited) and exited.exit.code == 0


def test_agents_started_early_serve_one_local_host_each_and_the_rest_are_closed() -> None:
    """A spec of several local hosts gets its agents started while the launcher validates (at most
    EARLY_AGENTS_MOST); each host takes one, and those no host took leave with the transport."""
    from launcher.agent.bootstrap import agent_line
    from launcher.transport import local

    line = agent_line(local.LOCAL_BEAT_S, False, False, False)
    local.start_early(sys.executable, line, 9)
    early = list(local._early[(sys.executable, line)])
    assert len(early) == local.EARLY_AGENTS_MOST
    taken = [local.open_local(address, sys.executable, line) for address in ("127.0.0.2", "127.0.0.3")]
    try:
        assert taken == [channel for _, channel in early[:2]]  # no host started an agent of its own
    finally:
        for channel in taken:
            channel.close()
        local.close_early()
    procs = [proc for proc, _ in early]
    for proc in procs:
        proc.wait(timeout=20)
    assert all(proc.poll() is not None for proc in procs) and not local._early


def test_an_exit_is_dated_when_the_task_ended_not_when_a_pipe_it_left_open_closed(
    work: Path, agents: list[AgentTransport]
) -> None:
    """A child that left the task's group keeps its output pipe open for 0.8 s: the agent reports the exit
    once the pipe closes, and says how long before that the task ended, so the root cause of a gang is
    the task that ended first, not the one whose report came first."""
    code = (
        "import subprocess, sys; "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(0.8)'], start_new_session=True); "
        "sys.exit(3)"
    )
    started = time.time()
    _, events = start(work, agents, command_spec(["python", "-c", code]))
    exited = wait_for(events, TaskExited)
    received = time.time()
    assert isinstance(exited, TaskExited) and exited.exit.code == 3
    assert received - started >= 0.8  # the report waited for the pipe
    assert exited.exit.time <= received - 0.6, (exited.exit.time - started, received - started)
