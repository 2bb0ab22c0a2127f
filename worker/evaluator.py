"""The evaluator side-car: score every new checkpoint in the shared directory on held-out data.

It runs outside the training gang (its TF_CONFIG lists only itself; it builds no
MultiWorkerMirroredStrategy), writes one JSON line per checkpoint to <run dir>/eval.jsonl and
leaves once it has scored the checkpoint of the last step. Polls the directory: checkpoints on
shared storage give no event to wait on.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

import tensorflow as tf

from worker import example
from worker.contract import EVAL, RunLayout, TaskEnv
from worker.events import record as record_row
from worker.events import report
from worker.loop import build_model, per_example_loss
from worker.training_spec import BuiltinTraining

log = logging.getLogger(__name__)
EVAL_OFFSET = 10**9  # held-out example indices: training never reaches them
_POLL_S = 0.5


def _step_of(path: str) -> int:
    match = re.search(r"-(\d+)$", path)
    return int(match.group(1)) if match else -1


def run_evaluator(settings: TaskEnv) -> dict[str, Any]:
    config = BuiltinTraining.model_validate(settings.training)
    model = build_model(config)
    checkpoint = tf.train.Checkpoint(model=model)
    x, y = example.examples(
        tf.range(EVAL_OFFSET, EVAL_OFFSET + config.eval_examples, dtype=tf.int64), config.features, config.seed
    )
    loss_fn = per_example_loss(config.loss)
    out_path = RunLayout(settings.run_dir).eval_file
    scored: list[dict[str, Any]] = []
    last = None
    log.info("evaluator: watching %s", settings.checkpoint_dir)
    while True:
        latest = tf.train.latest_checkpoint(settings.checkpoint_dir)
        if latest is not None and latest != last:
            last = latest
            checkpoint.restore(latest).expect_partial()
            loss = float(tf.reduce_mean(loss_fn(y, tf.cast(model(x, training=False), tf.float32))).numpy())
            record = {
                "step": _step_of(latest),
                "eval_loss": loss,
                "checkpoint": latest,
                "time": time.time(),
                "attempt": settings.attempt,
            }
            record_row("eval", record, out_path)
            scored.append(record)
            log.info("evaluator: step %d eval_loss %.5f", record["step"], loss)
            report(EVAL, step=record["step"], eval_loss=loss)
            if record["step"] >= config.steps:
                break
        time.sleep(_POLL_S)
    return {"step": scored[-1]["step"], "evaluated": [r["step"] for r in scored], "eval_loss": scored[-1]["eval_loss"]}
