"""Only TensorFlow's exact known-harmless start-up lines are hidden; look-alikes and real errors are not."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.common.benign_lines import benign_lines, is_benign

# As TensorFlow 2.21 prints them on a CPU-only host (copied from a task log).
BENIGN = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1795417464.521002   21747 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU "
    "will not be used.",
    "E0000 00:00:1795417469.161697   21747 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: "
    "Failed call to cuInit: UNKNOWN ERROR (303)",
    "W0000 00:00:1795417470.312883   21747 dataset.cc:997] Input of GeneratorDatasetOp::Dataset will not be "
    "optimized because the dataset does not implement the AsGraphDefInternal() method needed to apply "
    "optimizations.",
]

NOT_BENIGN = [
    # cuInit failing for another reason than "no device" is a broken driver on a GPU host
    "E0000 00:00:1795417469.161697   21747 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: "
    "Failed call to cuInit: CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
    "E0000 00:00:1795417469.161697   21747 coordination_service_agent.cc:332] Coordination agent is in ERROR",
    "Traceback (most recent call last):",
    "[worker:0] WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "Could not find cuda drivers on your machine, GPU will not be used.",  # a user's own print
    # the join going wrong, or told at a level above INFO
    "I0000 00:00:1795757689.294601   18428 coordination_service.cc:1472] Barrier(WaitForAllTasks::1804799791162"
    "4706250::0) has passed with status: DEADLINE_EXCEEDED",
    "W0000 00:00:1795757689.257138   18428 coordination_service.cc:502] Waiting for 1/2 tasks to connect.",
    "/job:worker/replica:0/task:1 has been unhealthy",
]


@pytest.mark.parametrize("line", BENIGN)
def test_known_harmless(line: str) -> None:
    assert is_benign(line) and is_benign(line + "\n")


# The gang joining TensorFlow's coordination service, from the logs of both tasks of a 2-worker run.
JOINING = (Path(__file__).parent.parent / "data" / "tf-logs" / "joining.txt").read_text().splitlines()


def test_a_healthy_join_is_known_harmless_its_stragglers_list_included() -> None:
    assert all(benign_lines(JOINING)), [line for line, b in zip(JOINING, benign_lines(JOINING), strict=True) if not b]
    assert not is_benign("/job:worker/replica:0/task:1"), "a task name alone is hidden only inside that list"


def test_the_task_names_a_barrier_timeout_lists_are_shown() -> None:
    failure = [
        "tensorflow.python.framework.errors_impl.DeadlineExceededError: Barrier timed out. Id: WaitForAllTasks. "
        "This usually happens because a task triggered the barrier too early or too slowly. Please look at the "
        "task logs (both timed out and first task) to debug further.",
        "# of tasks that reached the barrier: 1/2.",
        "Some timed out task names:",
        "/job:worker/replica:0/task:1",
        "/job:worker/replica:0/task:2",
    ]
    assert not any(benign_lines(failure))
    stragglers = [JOINING[4], "/job:worker/replica:0/task:1", "/job:worker/replica:0/task:2", "next line"]
    assert benign_lines(stragglers) == [True, True, True, False]


@pytest.mark.parametrize("line", NOT_BENIGN)
def test_everything_else_reaches_the_console(line: str) -> None:
    assert not is_benign(line)
