"""The contract between the launcher and every task: names, codes and files both sides agree on.

Defined once, here: the environment variables the launcher sets on a task (all `TFLAUNCH_*`),
the events a task reports on its event channel, the exit codes with a meaning, and the layout
of a run directory. The launcher writes a `TaskEnv` with `to_env()`; the worker reads it back
with `from_env()`. Standard library only: it is imported by the launcher, by the worker runtime
and by user scripts, none of which may pay for TensorFlow or pydantic here.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import signal
from collections.abc import Mapping, Sequence
from typing import Any, Final, NamedTuple

# A checkpoint_dir (or any path of a spec) in this form is an object-store location, handed to
# TensorFlow's file system untouched: the one test of the whole project, the host agent's included.
URL_SCHEME = r"[A-Za-z][A-Za-z0-9+.\-]*"  # gs, s3, hdfs, ...
_URL = re.compile(URL_SCHEME + r"://\S+")


def is_url(path: str) -> bool:
    """An object-store location such as gs://bucket/run, handed to TensorFlow's file system untouched."""
    return bool(_URL.fullmatch(path))


# A task's output line longer than this is shown cut (the log file keeps all of it), by the console
# as the task prints and by `launch logs` reading the file back, with the same marker.
MAX_LINE_BYTES = 64 * 1024
CUT_MARKER = " [... line cut at 64 KiB]"

ENV_PREFIX = "TFLAUNCH_"
TF_CONFIG = "TF_CONFIG"

# Environment variables the launcher sets on every task.
RUN_NAME_VAR = "TFLAUNCH_RUN_NAME"
RUN_DIR_VAR = "TFLAUNCH_RUN_DIR"
ATTEMPT_VAR = "TFLAUNCH_ATTEMPT"
TASK_VAR = "TFLAUNCH_TASK"
CHECKPOINT_DIR_VAR = "TFLAUNCH_CHECKPOINT_DIR"
RESULT_FILE_VAR = "TFLAUNCH_RESULT_FILE"
ERROR_FILE_VAR = "TFLAUNCH_ERROR_FILE"
METRICS_FILE_VAR = "TFLAUNCH_METRICS_FILE"
EXPORT_DIR_VAR = "TFLAUNCH_EXPORT_DIR"
TENSORBOARD_DIR_VAR = "TFLAUNCH_TENSORBOARD_DIR"
TRAINING_VAR = "TFLAUNCH_TRAINING"
PREEMPTION_EXIT_CODE_VAR = "TFLAUNCH_PREEMPTION_EXIT_CODE"
FAULT_VAR = "TFLAUNCH_FAULT"  # --inject rehearsals, first attempt only
# An elastic gang's (spec `elastic`): the training tasks (chief and workers) the spec gives, however many this
# attempt has (TF_CONFIG says those); the built-in runtime keeps the global batch of that many
SPEC_WORKERS_VAR = "TFLAUNCH_SPEC_WORKERS"
EVENT_FD_VAR = "TFLAUNCH_EVENT_FD"  # set by the host's agent, not by the plan
# Set by the host's agent: where the task's registered faulthandler writes every thread's stack on STACK_SIGNAL
# (tflaunch/stacks.py; first line: the registering pid and signal), for the agent to read when py-spy cannot.
# A real-time signal near the top, which programs leave alone (SIGUSR1 and SIGUSR2 are often their own).
STACK_FILE_VAR = "TFLAUNCH_STACK_FILE"
STACK_SIGNAL = int(signal.SIGRTMAX) - 3
SPARE_FDS_VAR = "TFLAUNCH_SPARE_FDS"  # set by the host's agent: a spare's pipes, for the runtime to fork one
ARGV_VAR = "TFLAUNCH_ARGV"  # JSON: a python command's arguments, when they hold a secret (see ARGV_TRAMPOLINE)
# Runs `python ARGS...` with ARGS taken from ARGV_VAR, so that a secret among them is never on the
# process's command line (world-readable in /proc); the script sees the same sys.argv and sys.path[0].
# `-c` puts the working directory first on sys.path: it is taken off before anything is imported
# (sys and os are loaded at start-up already), so a json.py there cannot run in the trampoline.
# The python's own options (-u, -W ignore, -P, ...) stay on its command line, before `-c`; with -P (or
# -I) nothing is put first on sys.path, as python itself would not. It registers the stack signal as
# tflaunch/stacks.py does (without the tracer: that needs ctypes).
ARGV_TRAMPOLINE = (
    "import sys, os\n"
    "p = getattr(sys.flags, 'safe_path', 0)\n"
    "if not p: del sys.path[0]\n"
    "import json, runpy; a = json.loads(os.environ.pop('TFLAUNCH_ARGV'))\n"
    "f = os.environ.get('TFLAUNCH_STACK_FILE')\n"
    "import signal; n = signal.SIGRTMAX - 3\n"
    "if f and os.getpid() == os.getpgrp() and signal.getsignal(n) == signal.SIG_DFL:\n"
    " try:\n"
    "  import faulthandler; h = open(f, 'a'); h.write('%d %d\\n' % (os.getpid(), n)); h.flush()\n"
    "  faulthandler.register(n, h, all_threads=True)\n"
    " except OSError: pass\n"
    "if a[0] == '-m':\n"
    " sys.argv = a[1:]\n"
    " if not p: sys.path.insert(0, os.getcwd())\n"
    " runpy.run_module(a[1], run_name='__main__', alter_sys=True)\n"
    "else:\n"
    " sys.argv = a\n"
    " if not p: sys.path.insert(0, os.path.dirname(os.path.abspath(a[0])))\n"
    " runpy.run_path(a[0], run_name='__main__')"
)
UMASK_VAR = "TFLAUNCH_UMASK"  # octal; the host's agent starts every task (and spare) with it
# Set on the pods of a job exported for Kubernetes (`launch export k8s`); `python -m worker.pod`
# turns them, with the pod's index, into TF_CONFIG and the variables above.
POD_LAYOUT_VAR = "TFLAUNCH_POD_LAYOUT"  # JSON: the exported job's shape (worker.pod.PodLayout)
POD_TASK_TYPE_VAR = "TFLAUNCH_POD_TASK_TYPE"  # the pod's task type: chief, worker or evaluator
JOB_COMPLETION_INDEX_VAR = "JOB_COMPLETION_INDEX"  # Kubernetes' own: a pod's index in its Indexed Job
# Files a task writes in its agent's scratch directory, sent back with its exit (set by the agent).
MIRRORED_FILE_VARS = (RESULT_FILE_VAR, ERROR_FILE_VAR)

# Exit codes with a meaning.
PREEMPTION_EXIT_CODE = 42  # checkpointed and left on request: restart without counting a failure
USAGE_EXIT_CODE = 2  # what the task was asked to run is wrong: retrying cannot help

# Events, one JSON object per line on the event channel: {"event": NAME, ...}.
STARTING = "starting"  # the runtime is up, TensorFlow not yet imported
IMPORTED = "imported"  # TensorFlow imported; building the strategy (joining) comes next
JOINED = "joined"  # the strategy is built: every task of the gang has connected
RESTORED = "restored"  # {"step": n}: the model is built and the checkpoint (if any) restored; training is next
STEP = "step"  # {"step": n}: training advanced
DONE = "done"  # {"step": n}: training finished; the result file is written
PREEMPTED = "preempted"  # checkpoint written after a preemption notice
EVAL = "eval"  # the evaluator scored a checkpoint
RECORD = "record"  # {"stream": "metrics" | "eval", "row": {...}}: a row the launcher appends to the run's file
RECORD_STREAMS = ("metrics", "eval")
STARTED = "started"  # from the agent: {"pid": p}: the task's process (and process group) on its host
STOPPED = "stopped"  # from the agent: the task's process is held stopped (SIGSTOP, Ctrl-Z)
CONTINUED = "continued"  # from the agent: it runs again
EXIT = "exit"  # from the agent: {"code": c, "signal": s, "files": {var: contents}}
ALIVE: Final = "alive"  # from the agent, every liveness period: the host and the connection still work
WARM = "warm"  # from the agent: {"used": bool, "why": ...}: whether the task runs in a warm spare
USAGE = "usage"  # from the agent, a few times a minute: {"cpu": %, "rss": bytes, "gpu": %, "gpu_mem": bytes}
START_MILESTONES = (STARTING, IMPORTED, JOINED)
PROGRESS_EVENTS = (STEP, DONE)
AGENT_EVENTS = (STARTED, STOPPED, CONTINUED, EXIT, WARM, USAGE)  # what the agent itself reports about a task

_ATTEMPT_DIR = re.compile(r"attempt-(\d+)")


# The contract's records are NamedTuples, not dataclasses: the host agent runs this module on every
# host of a fleet, and dataclasses' import (inspect with it) was an eighth of the agent's start-up.


DEFAULT_RUN_ROOT = "runs"  # the spec's run_root unless it says; relative to the launcher's working directory


class RunLayout(NamedTuple):
    """Where everything of one run lives, under `<run_root>/<name>`. Paths only; creates nothing."""

    run_dir: str

    def attempt_dir(self, attempt: int) -> str:
        return posixpath.join(self.run_dir, f"attempt-{attempt}")

    def log_file(self, attempt: int, stem: str) -> str:
        return posixpath.join(self.attempt_dir(attempt), f"{stem}.log")

    def result_file(self, attempt: int, stem: str) -> str:
        return posixpath.join(self.attempt_dir(attempt), f"{stem}.result.json")

    def error_file(self, attempt: int, stem: str) -> str:
        return posixpath.join(self.attempt_dir(attempt), f"{stem}.error.json")

    @property
    def summary_file(self) -> str:
        return posixpath.join(self.run_dir, "summary.json")

    @property
    def status_file(self) -> str:
        return posixpath.join(self.run_dir, "status.json")

    @property
    def lock_file(self) -> str:
        """Held (flock) by the launcher running this run; holds its pid."""
        return posixpath.join(self.run_dir, "launch.lock")

    @property
    def stop_request_file(self) -> str:
        """Left by `launch stop` just before its SIGINT, so that the launcher can say who stopped it."""
        return posixpath.join(self.run_dir, "stop-request.json")

    @property
    def metrics_file(self) -> str:
        return posixpath.join(self.run_dir, "metrics.jsonl")

    @property
    def eval_file(self) -> str:
        return posixpath.join(self.run_dir, "eval.jsonl")

    @property
    def spec_file(self) -> str:
        """The spec of the latest launch of this run, secret values masked (for reading, not relaunching)."""
        return posixpath.join(self.run_dir, "spec.json")

    @property
    def preflight_file(self) -> str:
        """What the latest launch's preflight found on every host: versions, GPUs, checks passed."""
        return posixpath.join(self.run_dir, "preflight.json")

    def chief_outputs(self, checkpoint_dir: str) -> tuple[str, str]:
        """(model export dir, TensorBoard dir). In the run directory while the checkpoints are there;
        otherwise beside the checkpoints (inside that directory), on the storage every host shares, so
        a remote chief writes where the launcher and every other host can find them."""
        if checkpoint_dir == self.default_checkpoint_dir:
            return self.export_dir, self.tensorboard_dir
        return posixpath.join(checkpoint_dir, "model"), posixpath.join(checkpoint_dir, "tensorboard")

    def outputs(self, checkpoint_dir: str) -> dict[str, str]:
        """Where everything a run produces can be found; summary.json and `launch status` show it."""
        model, tensorboard = self.chief_outputs(checkpoint_dir)
        return {
            "metrics": self.metrics_file,
            "eval": self.eval_file,
            "checkpoints": checkpoint_dir,
            "model": model,
            "tensorboard": tensorboard,
            "logs": posixpath.join(self.run_dir, "attempt-*"),
        }

    def record_file(self, stream: str) -> str:
        """Where the launcher appends the rows of a record stream (see RECORD)."""
        return self.metrics_file if stream == "metrics" else self.eval_file

    @property
    def export_dir(self) -> str:
        return posixpath.join(self.run_dir, "model")

    @property
    def tensorboard_dir(self) -> str:
        return posixpath.join(self.run_dir, "tensorboard")

    @property
    def default_checkpoint_dir(self) -> str:
        return posixpath.join(self.run_dir, "checkpoints")

    @staticmethod
    def attempt_of(name: str) -> int | None:
        """The attempt number of a directory entry named like an attempt directory, else None."""
        match = _ATTEMPT_DIR.fullmatch(name)
        return int(match.group(1)) if match else None


BARE_PYTHON = frozenset({"python", "python3"})  # a command's program that means the project's interpreter


def with_python(argv: Sequence[str], python: str) -> list[str]:
    """`argv` with a bare `python` (or `python3`) as its program replaced by `python`: the interpreter
    that has the project, on a host as in a pod."""
    return [python if i == 0 and arg in BARE_PYTHON else arg for i, arg in enumerate(argv)]


def task_stem(task: str) -> str:
    """File name stem of a task: `worker:1` -> `worker-1`."""
    return task.replace(":", "-")


class TaskEnv(NamedTuple):
    """Everything the launcher tells a task besides TF_CONFIG, as typed values."""

    run_name: str
    run_dir: str
    attempt: int
    task: str
    checkpoint_dir: str
    result_file: str
    error_file: str
    metrics_file: str
    export_dir: str
    tensorboard_dir: str
    training: Mapping[str, Any]
    preemption_exit_code: int = PREEMPTION_EXIT_CODE
    fault: str | None = None
    spec_workers: int | None = None  # elastic: the training tasks of the whole spec

    @classmethod
    def for_task(
        cls,
        run_name: str,
        run_dir: str,
        attempt: int,
        task: str,
        checkpoint_dir: str,
        training: Mapping[str, Any],
        preemption_exit_code: int,
        fault: str | None = None,
        spec_workers: int | None = None,
    ) -> TaskEnv:
        """What the launcher (the plan) or a pod (`worker.pod`) tells one task: its files follow from
        the run directory's layout, the task's name and the attempt."""
        layout = RunLayout(run_dir)
        stem = task_stem(task)
        export_dir, tensorboard_dir = layout.chief_outputs(checkpoint_dir)
        return cls(
            run_name=run_name,
            run_dir=run_dir,
            attempt=attempt,
            task=task,
            checkpoint_dir=checkpoint_dir,
            result_file=layout.result_file(attempt, stem),
            error_file=layout.error_file(attempt, stem),
            metrics_file=layout.metrics_file,
            export_dir=export_dir,
            tensorboard_dir=tensorboard_dir,
            training=training,
            preemption_exit_code=preemption_exit_code,
            fault=fault,
            spec_workers=spec_workers,
        )

    def to_env(self) -> dict[str, str]:
        env = {
            RUN_NAME_VAR: self.run_name,
            RUN_DIR_VAR: self.run_dir,
            ATTEMPT_VAR: str(self.attempt),
            TASK_VAR: self.task,
            CHECKPOINT_DIR_VAR: self.checkpoint_dir,
            RESULT_FILE_VAR: self.result_file,
            ERROR_FILE_VAR: self.error_file,
            METRICS_FILE_VAR: self.metrics_file,
            EXPORT_DIR_VAR: self.export_dir,
            TENSORBOARD_DIR_VAR: self.tensorboard_dir,
            TRAINING_VAR: json.dumps(dict(self.training), sort_keys=True),
            PREEMPTION_EXIT_CODE_VAR: str(self.preemption_exit_code),
        }
        if self.fault is not None:
            env[FAULT_VAR] = self.fault
        if self.spec_workers is not None:
            env[SPEC_WORKERS_VAR] = str(self.spec_workers)
        return env

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> TaskEnv:
        """Read it back; without a launcher (a bare `python -m worker`) local defaults apply."""
        env = os.environ if env is None else env
        run_dir = env.get(RUN_DIR_VAR, os.path.abspath("worker-run"))
        layout = RunLayout(run_dir)
        task = env.get(TASK_VAR, "worker:0")
        attempt = int(env.get(ATTEMPT_VAR, "0"))
        stem = task_stem(task)
        return cls(
            run_name=env.get(RUN_NAME_VAR, "worker-run"),
            run_dir=run_dir,
            attempt=attempt,
            task=task,
            checkpoint_dir=env.get(CHECKPOINT_DIR_VAR, layout.default_checkpoint_dir),
            result_file=env.get(RESULT_FILE_VAR, layout.result_file(attempt, stem)),
            error_file=env.get(ERROR_FILE_VAR, layout.error_file(attempt, stem)),
            metrics_file=env.get(METRICS_FILE_VAR, layout.metrics_file),
            export_dir=env.get(EXPORT_DIR_VAR, layout.export_dir),
            tensorboard_dir=env.get(TENSORBOARD_DIR_VAR, layout.tensorboard_dir),
            training=json.loads(env.get(TRAINING_VAR, '{"kind": "builtin"}')),
            preemption_exit_code=int(env.get(PREEMPTION_EXIT_CODE_VAR, str(PREEMPTION_EXIT_CODE))),
            fault=env.get(FAULT_VAR) or None,
            spec_workers=_count(env.get(SPEC_WORKERS_VAR)),
        )


def _count(value: str | None) -> int | None:
    """A positive count the launcher wrote; None when unset (or not one)."""
    return int(value) if value is not None and value.isdigit() and int(value) > 0 else None
