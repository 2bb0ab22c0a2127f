"""`launch bundle` after a real launch (user commands, no TensorFlow): a crash, a restart, a success.

The spec's env carries NCCL settings, TF_FORCE_GPU_ALLOW_GROWTH and a secret; the tasks print the
first ones, so the same run shows them reaching every task unchanged and the secret staying out
of the archive.
"""

from __future__ import annotations

import json
import tarfile
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import run_launch, wait_until_gone, write_spec

SECRET = "tok-5f1c9a7e3b"
GPU_ENV = {
    "NCCL_SOCKET_IFNAME": "lo",
    "NCCL_DEBUG": "INFO",
    "NCCL_IB_DISABLE": "1",
    "TF_FORCE_GPU_ALLOW_GROWTH": "true",
}
SCRIPT = """
import json, os, sys
names = sorted(n for n in os.environ if n.startswith("NCCL_") or n == "TF_FORCE_GPU_ALLOW_GROWTH")
print("env " + " ".join(f"{n}={os.environ[n]}" for n in names), flush=True)
if os.environ["TFLAUNCH_TASK"] == "worker:1" and os.environ["TFLAUNCH_ATTEMPT"] == "0":
    with open(os.environ["TFLAUNCH_ERROR_FILE"], "w") as handle:
        json.dump({"type": "RuntimeError", "message": "rehearsed crash"}, handle)
    sys.exit(3)
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One launch: worker:1 crashes in attempt 0 (with an error file), attempt 1 succeeds."""
    work = tmp_path_factory.mktemp("bundle")
    script = work / "task.py"
    script.write_text(SCRIPT)
    spec = {
        "name": "b",
        "run_root": str(work / "runs"),
        "hosts": [{"address": "localhost", "workers": 2}],
        "env": {**GPU_ENV, "API_TOKEN": SECRET},
        "restart": {"max_restarts": 1, "backoff_s": 0, "warm_spares": False},
    }
    proc = run_launch(["--cluster", str(write_spec(work, spec)), "--", "python", str(script)], work, timeout=120)
    (work / "runs" / "b" / "checkpoints" / "ckpt-1.data").write_bytes(b"\0" * 4096)  # never packed
    try:
        yield {"work": work, "proc": proc, "run_dir": work / "runs" / "b"}
    finally:
        assert not wait_until_gone(str(work), timeout=15), "processes left behind"


def test_the_run_restarted_and_every_task_saw_the_gpu_settings(run: dict[str, Any]) -> None:
    proc = run["proc"]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    expected = "env " + " ".join(f"{k}={v}" for k, v in sorted(GPU_ENV.items()))
    # worker:0 of attempt 0 may be stopped before it prints (worker:1 crashes at once): not asked there
    for attempt, task in (("attempt-0", "worker-1"), ("attempt-1", "worker-0"), ("attempt-1", "worker-1")):
        assert expected in (run["run_dir"] / attempt / f"{task}.log").read_text()


def test_bundle_packs_logs_errors_summary_spec_and_preflight_but_no_secret(run: dict[str, Any]) -> None:
    work, run_dir = run["work"], run["run_dir"]
    output = work / "post-mortem.tar.gz"
    proc = run_launch(["bundle", str(run_dir), "-o", str(output)], work, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"bundle: {output} (") and " KiB, " in proc.stdout, proc.stdout
    assert "not packed: checkpoints/" in proc.stdout
    with tarfile.open(output) as archive:
        files = {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}  # type: ignore[union-attr]
    names = {name.removeprefix("b-bundle/") for name in files}
    # worker:0 of attempt 0 may be stopped before it prints (worker:1 crashes at once): packed if it left a log
    logs = {str(path.relative_to(run_dir)) for path in run_dir.glob("attempt-*/*.log")}
    assert {"attempt-0/worker-1.log", "attempt-1/worker-0.log", "attempt-1/worker-1.log"} <= logs
    for expected in (
        "summary.json",
        "status.json",
        "spec.json",
        "preflight.json",
        "bundle.json",
        "attempt-0/worker-1.error.json",
        *logs,
    ):
        assert expected in names, sorted(names)
    assert not any(name.startswith("checkpoints") for name in names)
    assert not any(SECRET.encode() in data for data in files.values()), "the secret reached the archive"
    spec = json.loads(files["b-bundle/spec.json"])
    assert spec["env"]["API_TOKEN"] == "****" and spec["env"]["NCCL_DEBUG"] == "INFO"
    preflight = json.loads(files["b-bundle/preflight.json"])
    assert preflight["passed"] and preflight["hosts"][0]["address"] == "localhost"
    assert json.loads(files["b-bundle/summary.json"])["state"] == "succeeded"
    assert b"rehearsed crash" in files["b-bundle/attempt-0/worker-1.error.json"]
    versions = json.loads(files["b-bundle/bundle.json"])["versions"]
    assert versions["launcher"] and versions["python"] and versions["hosts"][0]["python"]


def test_bundle_of_what_is_not_a_run_is_refused(run: dict[str, Any]) -> None:
    work = run["work"]
    missing = run_launch(["bundle", str(work / "absent")], work, timeout=60)
    assert missing.returncode == 2 and "no such directory" in missing.stderr, missing.stderr
    not_run = run_launch(["bundle", str(work)], work, timeout=60)
    assert not_run.returncode == 2 and "is it a run directory" in not_run.stderr, not_run.stderr
    usage = run_launch(["bundle"], work, timeout=60)
    assert usage.returncode == 2 and "usage: launch bundle" in usage.stderr, usage.stderr
    for proc in (missing, not_run, usage):
        assert "Traceback" not in proc.stderr
