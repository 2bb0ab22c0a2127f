"""Input pipeline helpers for user data sets: file sharding that fails loudly, not silently."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


class DataShardingError(ValueError):
    """A file-based data set cannot give every input pipeline its own files."""


def check_file_shards(files: Sequence[str], pipelines: int, pattern: str = "") -> None:
    """Raise when there are fewer files than input pipelines (workers).

    Under FILE sharding TF would error on one worker only and desynchronise the collectives
    (the others hang), so refuse up front with a message that says what to do.
    """
    if len(files) < pipelines:
        where = f" matching {pattern!r}" if pattern else ""
        raise DataShardingError(
            f"{len(files)} file(s){where} for {pipelines} workers: every worker needs at least one file. "
            f"Split the data into at least {pipelines} files, or shard by record instead "
            f"(dataset.shard(context.num_input_pipelines, context.input_pipeline_id) on a single file)."
        )


def file_dataset(pattern: str, context: Any, read: Callable[[Any], Any]) -> Any:
    """This pipeline's files of `pattern`, read with `read(filenames_dataset)`, in a stable order."""
    import tensorflow as tf

    files = sorted(tf.io.gfile.glob(pattern))
    check_file_shards(files, context.num_input_pipelines, pattern)
    mine = files[context.input_pipeline_id :: context.num_input_pipelines]
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF  # sharded above
    return read(tf.data.Dataset.from_tensor_slices(mine)).with_options(options).prefetch(tf.data.AUTOTUNE)
