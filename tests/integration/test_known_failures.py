"""Failures users hit, each reproduced by a real script under the real launcher: the root cause shows
the exception from the task's log (type and message) and, for a known one, what it is and the fix."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import HELPERS, run_launch, write_spec

pytestmark = pytest.mark.tf

SCRIPTS = HELPERS / "failing"

CASES = [
    # script, workers, the exception shown (None: none), the known cause's section (None: a user's own error)
    ("keras3_fit.py", 2, "ValueError: Attempt to convert a value (PerReplica:", "keras-3-modelfit-under-the-strategy"),
    ("peer_left.py", 2, "UnavailableError: Collective ops is aborted by: ", "a-peer-left-the-coordination-service"),
    ("port_in_use.py", 1, "UnknownError: Could not start gRPC server", "the-tf-port-is-already-in-use"),
    ("oom.py", 1, "ResourceExhaustedError: OOM when allocating tensor with shape[1048576,1048576]", "out-of-memory"),
    ("user_error.py", 1, "ValueError: bad batch: expected 32 rows, got 31", None),
    ("sigkill.py", 2, None, "killed-by-sigkill-from-outside"),
    (
        "no_s3.py",
        1,
        "UnimplementedError: File system scheme 's3' not implemented",
        "a-url-scheme-tensorflow-cannot-reach",
    ),
    ("no_tensorflow.py", 1, "ModuleNotFoundError: No module named 'tensorflow'", "tensorflow-is-not-installed"),
    (
        "localhost_refused.py",
        1,
        "ConnectionRefusedError: [Errno 111] Connection refused",
        "a-local-task-cannot-reach-a-service-on-localhost",
    ),
    (
        "no_tf_keras.py",
        1,
        "ImportError: Keras cannot be imported. Check that it is installed.",
        "tf-keras-is-not-installed",
    ),
]


@pytest.mark.parametrize(
    ("script", "workers", "exception", "section"), CASES, ids=[c[0].removesuffix(".py") for c in CASES]
)
def test_the_root_cause_names_the_exception_and_the_known_cause(
    work: Path, script: str, workers: int, exception: str | None, section: str | None
) -> None:
    spec = {
        "name": "failing",
        "run_root": str(work / "runs"),
        "hosts": [{"address": "localhost", "workers": workers}],
        "restart": {"max_restarts": 0, "grace_period_s": 5, "stall_timeout_s": 60, "warm_spares": False},
    }
    path = write_spec(work, spec)
    python = ["python3", "-S"] if script == "no_tensorflow.py" else ["python3"]
    proc = run_launch(["--cluster", str(path), "--plain", "--", *python, str(SCRIPTS / script)], work)
    assert proc.returncode == 1, proc.stderr[-3000:]
    report = proc.stderr[proc.stderr.index("root cause:") :].splitlines()
    first = json.loads((work / "runs" / "failing" / "summary.json").read_text())["first_failure"]
    if exception is None:
        assert "exception" not in first
    else:
        assert report.pop(1).startswith(f"  {exception}"), "\n".join(report[:4])
        assert exception.split(":")[0] == first["exception"]["type"].rsplit(".", 1)[-1]
    if section is None:
        assert "known cause" not in "\n".join(report) and "known_cause" not in first
    else:
        assert report[1].startswith("  known cause: ") and report[1].endswith(f"#{section})"), report[1]
        assert first["known_cause"]["see"] == f"docs/troubleshooting.md#{section}"


def _own_memory_cgroup() -> Path | None:
    """This process's memory cgroup directory (cgroup v1's memory controller, else cgroup v2)."""
    lines = Path("/proc/self/cgroup").read_text().splitlines()
    mounts = [line.split(" - ") for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    for hierarchy, controllers, path in (line.split(":", 2) for line in lines):
        for head, tail in mounts:
            kind, _, options = tail.split(" ", 2)
            point = head.split(" ")[4]
            v1 = kind == "cgroup" and "memory" in controllers.split(",") and "memory" in options.split(",")
            v2 = kind == "cgroup2" and hierarchy == "0"
            if v1 or v2:
                return Path(point + path)
    return None


@pytest.fixture
def memory_cgroup() -> Iterator[Path]:
    """A child memory cgroup of 64 MiB (no swap), removed after the test; skips where none can be made."""
    parent = _own_memory_cgroup()
    if parent is None or not os.access(parent, os.W_OK):
        pytest.skip("no writable memory cgroup here")
    child = parent / f"tflaunch-oom-{uuid.uuid4().hex[:8]}"
    try:
        child.mkdir()
    except OSError as error:
        pytest.skip(f"cannot make a memory cgroup: {error}")
    try:
        limits = ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "memory.max", "memory.swap.max"]
        for name in limits:
            if (child / name).exists():
                (child / name).write_text("0" if name == "memory.swap.max" else str(64 * 2**20))
        if not any((child / name).exists() for name in ("memory.limit_in_bytes", "memory.max")):
            pytest.skip("the memory controller is not enabled for a child cgroup here")
        yield child
    finally:
        child.rmdir()  # its one process was killed; fails loudly if anything still lives there


def test_a_task_the_kernels_oom_killer_ended_is_named_so(work: Path, memory_cgroup: Path) -> None:
    spec = {
        "name": "oom",
        "run_root": str(work / "runs"),
        "hosts": [{"address": "localhost", "workers": 2}],
        "env": {"OOM_TEST_CGROUP": str(memory_cgroup)},
        "restart": {"max_restarts": 0, "grace_period_s": 5, "warm_spares": False},
    }
    proc = run_launch(
        ["--cluster", str(write_spec(work, spec)), "--plain", "--", "python3", str(SCRIPTS / "oom_killed.py")], work
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    report = proc.stderr[proc.stderr.index("root cause:") :].splitlines()
    assert (
        "worker:1" in report[0] and "killed by SIGKILL (most likely out of memory: the kernel's OOM killer" in report[0]
    )
    first = json.loads((work / "runs" / "oom" / "summary.json").read_text())["first_failure"]
    assert first["known_cause"]["see"] == "docs/troubleshooting.md#killed-by-the-out-of-memory-killer"
    assert "still alive" not in proc.stderr
