"""What the failure report names as the root cause."""

from __future__ import annotations

from pathlib import Path

from launcher.agent.oom import oom_kills
from launcher.rundir.known_failures import known_failure
from launcher.rundir.report import failure_text, failures, final_step, success_text, summary
from launcher.supervise.gang import AttemptResult, LaunchState, RunResult, TaskResult
from launcher.transport.base import exit_status_of


def ended(name: str, host: str, at: float, **how: object) -> TaskResult:
    return TaskResult(name, host, 7, how.pop("exit_code", None), None, 0.0, at, True, 20, "/nonexistent.log", **how)  # type: ignore[arg-type]


def test_a_host_lost_while_being_stopped_is_the_root_cause_of_its_attempt() -> None:
    victim = ended("worker:0", "10.0.0.1", 8.0, exit_code=1, error={"type": "UnavailableError", "message": "aborted"})
    cut = ended("worker:1", "10.0.0.2", 15.0, stopped=True, lost="nothing from 10.0.0.2 for 15s")
    stopped = ended("worker:2", "10.0.0.3", 8.5, stopped=True, exit_code=-9)
    attempt = AttemptResult(0, "worker:0 exited", "worker:0", "retryable", (victim, cut, stopped), 0.0, 16.0)
    result = RunResult("r", "/tmp/r", LaunchState.FAILED, [attempt])
    assert [t.name for _, t in failures(result)] == ["worker:1", "worker:0"]  # the stopped one is not a failure
    assert "root cause: worker:1 on 10.0.0.2 (pid 7) lost: nothing from 10.0.0.2" in failure_text(result)


def test_a_task_killed_by_the_launchers_signal_says_so_and_no_other() -> None:
    def exited(name: str, **how: object) -> TaskResult:
        signal = how.pop("signal", None)
        return TaskResult(name, "localhost", 7, how.pop("exit_code", None), signal, 0.0, 8.0, True, 20, "/x.log", **how)  # type: ignore[arg-type]

    killed = exited("worker:0", signal=9, stopped=True, killed_by_launcher=True)
    assert killed.describe_exit == "killed by SIGKILL (stopped by the launcher)"
    assert exited("worker:1", signal=9).describe_exit == "killed by SIGKILL"  # the kernel's, say
    # stopped while it ran, but it left by itself (a preemption's save, or an exit already on its way)
    assert exited("worker:2", exit_code=42, stopped=True).describe_exit == "exit code 42"
    cut = exited("worker:3", stopped=True, killed_by_launcher=True, lost="nothing from 10.0.0.3 for 15s")
    assert "stopped by the launcher" not in cut.describe_exit  # a lost host is a failure of its own


def test_a_sigkill_says_whether_the_hosts_oom_killer_was_at_work_meanwhile() -> None:
    def killed(**how: object) -> TaskResult:
        return TaskResult("worker:1", "h", 7, None, 9, 0.0, 8.0, True, 20, "/x.log", **how)  # type: ignore[arg-type]

    assert killed(oom_kills=2).describe_exit.startswith("killed by SIGKILL (most likely out of memory: the kernel's")
    assert killed(oom_kills=0).describe_exit.startswith("killed by SIGKILL (not out of memory")
    assert killed().describe_exit == "killed by SIGKILL"  # the host could not say
    # the launcher's own SIGKILL is the launcher's, whatever else the OOM killer did meanwhile
    assert killed(oom_kills=1, killed_by_launcher=True).describe_exit == "killed by SIGKILL (stopped by the launcher)"
    known = known_failure(killed(oom_kills=1).describe_exit)
    assert known is not None and known.anchor == "killed-by-the-out-of-memory-killer"
    known = known_failure(killed(oom_kills=0).describe_exit)
    assert known is not None and known.anchor == "killed-by-sigkill-from-outside"


def test_an_oom_count_is_taken_only_when_it_is_a_count() -> None:
    assert exit_status_of({"signal": 9, "oom_kills": 3}).oom_kills == 3
    for bad in (True, -1, "2", 1.5, None):
        assert exit_status_of({"signal": 9, "oom_kills": bad}).oom_kills is None


def test_the_agent_reads_the_hosts_oom_kill_count(tmp_path: Path) -> None:
    table = tmp_path / "vmstat"
    table.write_text("nr_free_pages 10\noom_kill 17\nnr_foll_pin 0\n")
    assert oom_kills(str(table)) == 17
    table.write_text("nr_free_pages 10\n")  # a kernel older than 4.13
    assert oom_kills(str(table)) is None
    assert oom_kills(str(tmp_path / "absent")) is None
    assert isinstance(oom_kills(), int)  # this Linux has the count


def test_a_run_stopped_before_its_last_attempts_first_step_stands_at_the_step_before() -> None:
    trained = TaskResult("worker:0", "localhost", 7, None, 9, 0.0, 8.0, True, 322, "/x.log")
    restarted = TaskResult("worker:0", "localhost", 8, None, 2, 8.5, 9.0, False, None, "/x.log", stopped=True)
    first = AttemptResult(0, "worker:1 killed", "worker:1", "retryable", (trained,), 0.0, 8.0)
    second = AttemptResult(1, "interrupted", None, "none", (restarted,), 8.5, 9.0)
    assert final_step(RunResult("r", "/tmp/r", LaunchState.INTERRUPTED, [first, second])) == 322
    assert final_step(RunResult("r", "/tmp/r", LaunchState.INTERRUPTED, [second])) is None


def test_running_out_of_free_ports_is_not_called_a_port_in_use() -> None:
    from launcher.common.errors import PortInUseError

    said = str(PortInUseError("worker:6610", "localhost", 0))
    assert "No free port was left on localhost for worker:6610" in said and "set the port to 0" not in said
    assert "Port 8000 on h (for worker:0) is already in use" in str(PortInUseError("worker:0", "h", 8000))


def test_a_task_log_on_a_full_disk_says_so_once_and_writes_no_more() -> None:
    from launcher.transport.session import RedactedLog

    log = RedactedLog(lambda: open("/dev/full", "wb"))  # every write: ENOSPC, as a full disk answers
    assert log.write(b"a line\n") == "No space left on device"
    assert log.write(b"another\n") is None and log.failed == "No space left on device"
    log.write(b"an unfinished piece")
    log.close()  # the close does not raise either


def test_a_full_disk_is_its_own_known_cause_not_out_of_memory() -> None:
    said = "ResourceExhaustedError: /ck/ckpt-400_temp/part-00000.tempstate12; No space left on device"
    known = known_failure(said)
    assert known is not None and known.anchor == "a-file-system-is-full"


def test_a_root_cause_that_printed_nothing_says_so(tmp_path: Path) -> None:
    task = TaskResult("worker:1", "localhost", 7, 3, None, 0.0, 1.0, True, None, str(tmp_path / "worker-1.log"))
    attempt = AttemptResult(0, "worker:1 exited 3", "worker:1", "retryable", (task,), 0.0, 1.0)
    result = RunResult("r", str(tmp_path), LaunchState.FAILED, [attempt])
    assert "\n  no output of it reached the launcher (no log file)" in failure_text(result)
    written = summary(result)  # summary.json names no file that is not there
    assert written["first_failure"]["log"] is None and written["attempts"][0]["tasks"][0]["log_path"] is None
    (tmp_path / "worker-1.log").write_text("a line\n")
    said = failure_text(result)
    assert "no output" not in said and "    | a line" in said
    written = summary(result)
    assert written["first_failure"]["log"] == written["attempts"][0]["tasks"][0]["log_path"] == task.log_path


def test_a_restarted_run_says_how_long_each_restart_took_and_how_many_tasks_were_warm() -> None:
    first = AttemptResult(
        0, "worker:1 exited", "worker:1", "retryable", (ended("worker:1", "h", 5.0, exit_code=1),), 0, 5
    )
    warm = {"total_s": 1.754, "warm_tasks": 2, "tasks": 2, "phases_s": {"detect": 0.01}}
    hang = {"total_s": 3.2, "warm_tasks": 0, "tasks": 2, "phases_s": {"detect": None}}
    then = [AttemptResult(n, "done", None, "none", (), 5, 9, recovery=r) for n, r in ((1, warm), (2, hang))]
    text = success_text(RunResult("r", "/tmp/r", LaunchState.SUCCEEDED, [first, *then]))
    head, one, two = text.splitlines()
    assert head.startswith("launch succeeded: r finished") and "after 3 attempts" in head
    assert one == "  attempt 1: first step 1.75 s after the failure; 2 of 2 task(s) in warm spares"
    assert two == "  attempt 2: first step 3.20 s after the decision to restart; every task started cold"
    assert success_text(RunResult("r", "/tmp/r", LaunchState.SUCCEEDED, [first])).count("\n") == 0
