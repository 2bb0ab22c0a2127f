"""The training settings: what every task runs, as the user writes it in the spec's `training`.

One definition for both sides: the launcher validates the spec with these models, and the worker
runtime validates the settings it receives (`TFLAUNCH_TRAINING`) against the same models, so a
default lives in exactly one place and an unknown key is refused on either side. Imports pydantic,
never TensorFlow.
"""

from __future__ import annotations

from functools import cache
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

TARGET_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$"
_OWN_PACKAGES = ("worker", "tflaunch")  # the runtime's, imported by the task before any target: never a user's


def _not_our_package(target: str | None) -> str | None:
    """A target whose top-level module is one of the project's own packages names something a task
    never imports from the user's files (the runtime's own module of that name is loaded first)."""
    top = (target or "").partition(":")[0].split(".")[0]
    if top in _OWN_PACKAGES:
        raise ValueError(
            f"{target!r}: {top!r} is a package of this project's, which every task imports before its target, "
            f"so a module of yours named {top} is never loaded; rename your module"
        )
    return target


class StrictModel(BaseModel):
    """Frozen, unknown keys refused, no coercion: `true` is not a count, "2" and 2.0 are not integers.

    Validators and serializers are built on first use, not at import (`defer_build`): a launch
    validates one ClusterSpec, whose validator holds every nested model, so building each nested
    model's own at import would spend start-up time on models a launch rarely validates alone."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, defer_build=True)


class _ExampleTraining(StrictModel):
    """Settings shared by the built-in custom loop and tf-keras fit."""

    steps: int = Field(200, ge=1, le=10_000_000, description="Train until this global step.")
    batch_per_replica: int = Field(
        32,
        ge=1,
        le=65536,
        description="Examples per replica per step; the global batch is this times the replicas in sync.",
    )
    learning_rate: float = Field(0.01, gt=0, le=10, description="Optimizer learning rate.")
    optimizer: Literal["adam", "sgd"] = Field("adam", description="Optimizer: 'adam' or plain 'sgd'.")
    checkpoint_every: int = Field(
        50, ge=1, le=10_000_000, description="Save a checkpoint every this many steps (and always at the end)."
    )
    seed: int = Field(0, ge=0, le=2**31 - 1, description="Seed for the initial weights and the synthetic data.")
    features: int = Field(16, ge=1, le=65536, description="Input features of the synthetic data set.")
    hidden_units: int = Field(64, ge=1, le=65536, description="Width of each hidden layer of the example model.")


class BuiltinTraining(_ExampleTraining):
    """The built-in runtime: Keras 3 custom loop; the example model and data unless you name yours."""

    kind: Literal["builtin"] = Field("builtin", description="Train with the built-in Keras 3 custom loop.")
    log_every: int = Field(10, ge=1, le=10_000_000, description="Log the loss every this many steps.")
    accumulation_steps: int = Field(
        1,
        ge=1,
        le=1024,
        description="Sum the gradients of this many micro-batches (each batch_per_replica) before one all-reduce and "
        "update.",
    )
    devices_per_worker: int = Field(
        1,
        ge=1,
        le=64,
        description="On CPU hosts, split each worker's CPU into this many logical devices (multi-device mirroring "
        "without GPUs). GPU workers use every GPU they see.",
    )
    collective: Literal["auto", "ring", "nccl"] = Field(
        "auto", description="All-reduce implementation: 'auto' is NCCL on GPU workers and ring on CPU."
    )
    mixed_precision: Literal["mixed_float16", "mixed_bfloat16"] | None = Field(
        None, description="Keras mixed precision policy (float16 adds loss scaling); None trains in float32."
    )
    model: str | None = Field(
        None,
        pattern=TARGET_PATTERN,
        description="'pkg.module:function' returning a built Keras 3 model, called with the training settings as a "
        "dict; default: the example MLP.",
    )
    dataset: str | None = Field(
        None,
        pattern=TARGET_PATTERN,
        description="'pkg.module:function(context, start_step, config)' returning this input pipeline's "
        "tf.data.Dataset of (x, y) per-replica batches of batch_per_replica x accumulation_steps, starting at "
        "start_step; default: the synthetic example data.",
    )
    _targets_are_the_users = field_validator("model", "dataset")(_not_our_package)
    loss: Literal["mse", "sparse_categorical_crossentropy", "binary_crossentropy"] = Field(
        "mse", description="Per-example loss (from logits for the cross-entropies)."
    )
    tensorboard: bool = Field(
        True,
        description="The chief writes scalar summaries (loss, steps/s, learning rate, replicas) to <run "
        "dir>/tensorboard.",
    )
    eval_examples: int = Field(
        1024,
        ge=1,
        le=10_000_000,
        description="Held-out examples the evaluator side-car scores each checkpoint on (example data only).",
    )


class FitTraining(_ExampleTraining):
    """tf-keras `model.fit` under MWMS (Keras 3 `fit` is broken there), resumable through BackupAndRestore."""

    kind: Literal["fit"] = Field(
        description="Train with tf-keras model.fit (needs tf-keras: this project's 'fit' extra, pip install '.[fit]'); "
        "checkpoint_every is BackupAndRestore's save_freq."
    )
    model: str | None = Field(
        None,
        pattern=TARGET_PATTERN,
        description="'pkg.module:function' returning a compiled tf-keras model, called with the training settings as "
        "a dict; default: the example MLP.",
    )
    _model_is_the_users = field_validator("model")(_not_our_package)


class FunctionTraining(StrictModel):
    """A user function `module:function`, called by the worker runtime with a WorkerContext."""

    kind: Literal["function"] = Field(description="Call a user function inside the worker runtime.")
    target: str = Field(
        pattern=TARGET_PATTERN,
        description="'package.module:function' (a module of yours, found in the working directory first; not named "
        "worker or tflaunch, which are this project's); it receives a worker.WorkerContext after the strategy is "
        "built.",
    )
    _target_is_the_users = field_validator("target")(_not_our_package)
    steps: int = Field(200, ge=1, le=10_000_000, description="Passed to the function as context.steps.")
    checkpoint_every: int = Field(
        50, ge=1, le=10_000_000, description="Passed to the function as context.checkpoint_every."
    )


class CommandTraining(StrictModel):
    """A user command run as every task, e.g. ["python", "train.py"]; it reads TF_CONFIG itself."""

    kind: Literal["command"] = Field(description="Run a user command as every task.")
    argv: list[Annotated[str, Field(min_length=1)]] = Field(
        min_length=1, description="Command and arguments; a bare 'python' means this host's python."
    )


TrainingSpec = Annotated[
    Union[BuiltinTraining, FitTraining, FunctionTraining, CommandTraining], Field(discriminator="kind")
]

TRAINING_KINDS: dict[str, type[BaseModel]] = {
    "builtin": BuiltinTraining,
    "fit": FitTraining,
    "function": FunctionTraining,
    "command": CommandTraining,
}


@cache
def _adapter() -> TypeAdapter[Any]:
    """The union's validator, built when a worker first needs it; the launcher never does."""
    return TypeAdapter(TrainingSpec)


def build_validators(*models: type[BaseModel]) -> None:
    """Build the union's validator and `models`' own now rather than at first use: for a module that
    a warm spare imports ahead of its task, so that a restarted task does not spend ~0.2 s on them
    after the failure (a cold start builds them once either way)."""
    _adapter()
    for model in models:
        model.model_rebuild()


class TrainingSettingsError(ValueError):
    """The training settings a task received do not validate (a launcher and worker of different versions)."""


def parse_training(raw: Any) -> BuiltinTraining | FitTraining | FunctionTraining | CommandTraining:
    """The typed settings from decoded JSON; TrainingSettingsError names every problem."""
    try:
        return _adapter().validate_python(raw)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(str(p) for p in item['loc'])}: {item['msg']}" for item in error.errors())
        raise TrainingSettingsError(
            f"the training settings are not valid for this worker runtime ({problems}); "
            "install the same project version as the launcher's"
        ) from None
