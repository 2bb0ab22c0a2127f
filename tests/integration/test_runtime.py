"""Worker runtime depth with real TensorFlow: numerical equivalence of data parallelism, gradient
accumulation, multi-device workers, tf-keras fit with resume, TensorBoard, the evaluator, mixed
precision and a user model."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from tests.conftest import REPO, local_spec, run_launch, write_spec
from tests.integration.test_train_local import assert_agree, results

pytestmark = pytest.mark.tf

B, STEPS = 8, 30


def final_weights(run_dir: Path) -> list[np.ndarray]:
    """The chief's exported weights, read from model.keras without TensorFlow."""
    with zipfile.ZipFile(run_dir / "model" / "model.keras") as archive:
        data = archive.read("model.weights.h5")
    arrays: list[np.ndarray] = []
    with h5py.File(io.BytesIO(data), "r") as weights:
        weights.visititems(lambda name, node: arrays.append(np.array(node)) if isinstance(node, h5py.Dataset) else None)
    return arrays


def train(work: Path, name: str, workers: int, **training: Any) -> Path:
    settings = {
        "kind": "builtin",
        "steps": STEPS,
        "optimizer": "sgd",
        "learning_rate": 0.05,
        "checkpoint_every": 1000,
        "log_every": 10,
        "tensorboard": True,
        **training,
    }
    proc = run_launch(
        ["--cluster", str(write_spec(work, local_spec(name, workers, work / "runs", **settings), f"{name}.json"))], work
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return work / "runs" / name


def assert_same(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    assert len(a) == len(b) and len(a) >= 6
    for x, y in zip(a, b, strict=False):
        np.testing.assert_allclose(x, y, rtol=2e-5, atol=2e-6)


@pytest.fixture(scope="module")
def work_module(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("runtime")


@pytest.fixture(scope="module")
def one_process_2b(work_module: Path) -> list[np.ndarray]:
    return final_weights(train(work_module, "ref2b", 1, batch_per_replica=2 * B))


def test_two_workers_compute_what_one_process_with_twice_the_batch_does(
    work: Path, one_process_2b: list[np.ndarray]
) -> None:
    run_dir = train(work, "dp", 2, batch_per_replica=B)
    assert_same(final_weights(run_dir), one_process_2b)
    assert not np.allclose(final_weights(run_dir)[0], final_weights(run_dir)[0] * 0)  # trained, not zeros
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util.tensor_util import make_ndarray

    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"tensors": 0})
    events.Reload()
    assert {"loss", "steps_per_s", "learning_rate", "replicas"} <= set(events.Tags()["tensors"])
    losses = [(e.step, float(make_ndarray(e.tensor_proto))) for e in events.Tensors("loss")]
    assert losses[-1][0] == STEPS and losses[-1][1] < losses[0][1]
    assert float(make_ndarray(events.Tensors("replicas")[-1].tensor_proto)) == 2.0
    assert float(make_ndarray(events.Tensors("learning_rate")[-1].tensor_proto)) == pytest.approx(0.05)


def test_one_worker_with_two_logical_devices_matches_too(work: Path, one_process_2b: list[np.ndarray]) -> None:
    run_dir = train(work, "dev", 1, batch_per_replica=B, devices_per_worker=2)
    assert_same(final_weights(run_dir), one_process_2b)
    assert results(run_dir, 0)["worker-0"]["replicas_in_sync"] == 2


def test_gradient_accumulation_matches_the_bigger_batch(work: Path, one_process_2b: list[np.ndarray]) -> None:
    run_dir = train(work, "acc", 1, batch_per_replica=B, accumulation_steps=2)
    assert_same(final_weights(run_dir), one_process_2b)
    assert results(run_dir, 0)["worker-0"]["global_batch"] == 2 * B


def test_two_workers_times_two_devices(work: Path) -> None:
    reference = final_weights(train(work, "ref4b", 1, batch_per_replica=4 * B))
    run_dir = train(work, "mesh", 2, batch_per_replica=B, devices_per_worker=2)
    found = results(run_dir, 0)
    assert_agree(found, 2, STEPS)
    assert {r["replicas_in_sync"] for r in found.values()} == {4}
    assert_same(final_weights(run_dir), reference)


def test_fit_mode_resumes_at_the_saved_step_after_a_kill(work: Path) -> None:
    spec = local_spec("fit", 2, work / "runs", kind="fit", steps=60, checkpoint_every=20, batch_per_replica=16)
    spec["restart"]["max_restarts"] = 1
    spec["restart"]["backoff_s"] = 0
    proc = run_launch(["--cluster", str(write_spec(work, spec)), "--inject", "kill:worker:1@step=30"], work)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = work / "runs" / "fit"
    first = results(run_dir, 0)
    assert not first, "attempt 0 was killed before any result"
    found = results(run_dir, 1)
    assert_agree(found, 2, 60)
    assert {r["start_step"] for r in found.values()} == {20}, "fit did not resume at the saved step"


def test_evaluator_scores_checkpoints_and_never_fails_the_run(work: Path) -> None:
    spec = local_spec("eval", 2, work / "runs", kind="builtin", steps=60, checkpoint_every=20, log_every=20)
    spec["hosts"][0]["evaluator"] = True
    proc = run_launch(["--cluster", str(write_spec(work, spec))], work)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = work / "runs" / "eval"
    scored = [json.loads(line) for line in (run_dir / "eval.jsonl").read_text().splitlines()]
    assert scored and scored[-1]["step"] == 60 and all(r["eval_loss"] > 0 for r in scored)
    assert_agree({k: v for k, v in results(run_dir, 0).items() if k.startswith("worker")}, 2, 60)
    assert "[evaluator:0]" in proc.stdout


SHADOW = "import sys; open(__file__ + '.imported', 'w').close(); sys.exit('a file in the workdir shadowed {}')\n"


def test_user_model_and_dataset_with_mixed_precision(work: Path) -> None:
    """The user's modules come from the working directory, and files there named like the project's
    packages (worker.py, launcher.py, tflaunch.py) change nothing."""
    shutil.copy(REPO / "examples" / "my_model.py", work / "my_model.py")
    for name in ("worker", "launcher", "tflaunch"):
        (work / f"{name}.py").write_text(SHADOW.format(name))
    spec = local_spec(
        "user",
        2,
        work / "runs",
        kind="builtin",
        steps=60,
        log_every=10,
        learning_rate=0.05,
        model="my_model:build_model",
        dataset="my_model:make_dataset",
        loss="sparse_categorical_crossentropy",
        mixed_precision="mixed_bfloat16",
    )
    del spec["env"]["PYTHONPATH"]
    launch = Path(sys.executable).parent / "launch"  # as a user runs it: `python -m launcher` would read launcher.py
    proc = subprocess.run(
        [str(launch), "--cluster", str(write_spec(work, spec))], cwd=work, capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not list(work.glob("*.imported")), "a workdir file was imported in place of the project's"
    found = results(work / "runs" / "user", 0)
    assert_agree(found, 2, 60)
    assert found["worker-0"]["loss"] < found["worker-0"]["first_loss"]
