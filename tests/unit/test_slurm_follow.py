"""What `launch slurm submit --wait` says while a requeued job waits in the queue and runs again."""

from __future__ import annotations

from launcher.slurm.submit import queue_change

HELD = {"JobState": "PENDING", "Reason": "BeginTime", "EligibleTime": "2026-11-26T15:25:00", "Restarts": "1"}


def test_a_requeued_job_held_by_slurm_says_why_and_until_when() -> None:
    said = queue_change("7", "RUNNING", HELD)
    assert said is not None
    assert said.startswith("job 7 is back in the queue (pending, reason BeginTime, eligible at 2026-11-26T15:25:00)")
    assert "cred_expire (120 s by default)" in said


def test_another_reason_is_named_without_the_hold_explained() -> None:
    held = {"JobState": "REQUEUE_HOLD", "Reason": "JobHeldAdmin", "EligibleTime": "Unknown"}
    said = queue_change("7", "COMPLETING", held)
    assert said == "job 7 is back in the queue (requeue_hold, reason JobHeldAdmin)"


def test_the_run_after_the_wait_names_its_nodes_and_requeues() -> None:
    running = {"JobState": "RUNNING", "NodeList": "n[1-2]", "Restarts": "1"}
    assert queue_change("7", "PENDING", running) == "job 7 is running again on n[1-2] (requeued 1x)"


def test_nothing_is_said_while_the_state_stays_or_the_job_ends() -> None:
    assert queue_change("7", "RUNNING", {"JobState": "RUNNING"}) is None
    assert queue_change("7", "PENDING", HELD) is None
    assert queue_change("7", "RUNNING", {"JobState": "COMPLETED"}) is None
