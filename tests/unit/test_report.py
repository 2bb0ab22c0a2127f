"""What the failure report names as the root cause."""

from __future__ import annotations

from launcher.gang import AttemptResult, LaunchState, RunResult, TaskResult
from launcher.report import failure_text, failures


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
