"""`python -m worker.pod [-- COMMAND ...]`: run one task of a job exported for Kubernetes.

Kubernetes gives a pod a stable host name and an index, nothing more. This entry point turns them,
with the job's layout (`TFLAUNCH_POD_LAYOUT`, written by `launch export k8s`), into what the launcher
gives a task everywhere else: `TF_CONFIG`, whose cluster is the one the plan computes for the same
layout, and the `TFLAUNCH_*` settings of `worker.contract.TaskEnv`. Then it runs the worker runtime
(`python -m worker`) or the user's command as its child and leaves with the child's exit code, so
the pod ends the way its task did (42: preempted, checkpoint saved) and Kubernetes can route it.

It is the container's first process, and a process with pid 1 receives no signal it has no handler
for: a task run directly would never see the kubelet's SIGTERM (it would die by SIGKILL at the end
of the grace period, with no chance to save). So this process handles the stop signals and passes
them on, and reaps whatever else ends up as its child.

Standard library only, like the contract: it never imports TensorFlow or pydantic.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from worker.contract import (
    ATTEMPT_VAR,
    JOB_COMPLETION_INDEX_VAR,
    POD_LAYOUT_VAR,
    POD_TASK_TYPE_VAR,
    TF_CONFIG,
    UMASK_VAR,
    USAGE_EXIT_CODE,
    TaskEnv,
    with_python,
)

TASK_TYPES = ("chief", "worker", "evaluator")
EVALUATOR = "evaluator"
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


class PodLayoutError(Exception):
    """The pod's environment does not describe a task of an exported job (a manifest edited by hand)."""


@dataclass(frozen=True)
class PodLayout:
    """The shape of an exported job, the same in every pod of it.

    `host` is a pod's stable host name with `{type}` and `{index}` left to fill in; every task
    listens on `port` in its own pod. `tasks` counts the tasks of each type. `umask` (octal) is the
    spec's: the task runs with it, as an agent starts it on a host."""

    run_name: str
    run_dir: str
    checkpoint_dir: str
    host: str
    port: int
    tasks: Mapping[str, int]
    training: Mapping[str, Any]
    preemption_exit_code: int
    umask: str

    def address(self, task_type: str, index: int) -> str:
        return f"{self.host.format(type=task_type, index=index)}:{self.port}"

    def tf_config(self, task_type: str, index: int) -> dict[str, Any]:
        """The task's TF_CONFIG. The evaluator is outside the trainers' coordination service: its
        TF_CONFIG lists only itself, and the trainers' cluster leaves it out."""
        if task_type == EVALUATOR:
            cluster = {EVALUATOR: [self.address(EVALUATOR, index)]}
        else:
            cluster = {
                kind: [self.address(kind, i) for i in range(self.tasks[kind])]
                for kind in TASK_TYPES
                if kind != EVALUATOR and self.tasks.get(kind)
            }
        return {"cluster": cluster, "task": {"type": task_type, "index": index}}

    def task_env(self, task_type: str, index: int, attempt: int) -> TaskEnv:
        return TaskEnv.for_task(
            run_name=self.run_name,
            run_dir=self.run_dir,
            attempt=attempt,
            task=f"{task_type}:{index}",
            checkpoint_dir=self.checkpoint_dir,
            training=self.training,
            preemption_exit_code=self.preemption_exit_code,
        )

    def to_json(self) -> str:
        data = {
            "run_name": self.run_name,
            "run_dir": self.run_dir,
            "checkpoint_dir": self.checkpoint_dir,
            "host": self.host,
            "port": self.port,
            "tasks": dict(self.tasks),
            "training": dict(self.training),
            "preemption_exit_code": self.preemption_exit_code,
            "umask": self.umask,
        }
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> PodLayout:
        try:
            data = json.loads(text)
            layout = cls(
                run_name=str(data["run_name"]),
                run_dir=str(data["run_dir"]),
                checkpoint_dir=str(data["checkpoint_dir"]),
                host=str(data["host"]),
                port=int(data["port"]),
                tasks={str(kind): int(count) for kind, count in data["tasks"].items()},
                training=dict(data["training"]),
                preemption_exit_code=int(data["preemption_exit_code"]),
                umask=str(data["umask"]),
            )
            layout.address(TASK_TYPES[0], 0)  # a host template with other fields than {type} and {index}
            int(layout.umask, 8)
        except (ValueError, KeyError, TypeError, AttributeError, IndexError) as error:
            raise PodLayoutError(f"{POD_LAYOUT_VAR} is not a job layout ({error!r}); export the job again") from None
        return layout


def pod_environment(env: Mapping[str, str]) -> dict[str, str]:
    """What this pod's task gets on top of the pod's environment: TF_CONFIG and the contract's
    variables, from the layout, the pod's task type and its index in its Indexed Job."""
    if POD_LAYOUT_VAR not in env:
        raise PodLayoutError(f"{POD_LAYOUT_VAR} is not set: run this in a pod of a job written by `launch export k8s`")
    layout = PodLayout.from_json(env[POD_LAYOUT_VAR])
    task_type = env.get(POD_TASK_TYPE_VAR, "")
    count = layout.tasks.get(task_type, 0)
    if task_type not in TASK_TYPES or count == 0:
        raise PodLayoutError(
            f"{POD_TASK_TYPE_VAR}={task_type!r}: the job has {dict(layout.tasks)} task(s); expected one of those types"
        )
    raw_index = env.get(JOB_COMPLETION_INDEX_VAR, "")
    if not raw_index.isdigit() or int(raw_index) >= count:
        raise PodLayoutError(
            f"{JOB_COMPLETION_INDEX_VAR}={raw_index!r}: a {task_type} index is 0..{count - 1} (Kubernetes sets it in "
            f"the pods of an Indexed Job)"
        )
    index = int(raw_index)
    raw_attempt = env.get(ATTEMPT_VAR) or "0"
    attempt = int(raw_attempt) if raw_attempt.isdigit() else 0
    additions = {TF_CONFIG: json.dumps(layout.tf_config(task_type, index), sort_keys=True)}
    additions.update(layout.task_env(task_type, index, attempt).to_env())
    additions[UMASK_VAR] = layout.umask
    return additions


def _exit_code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code  # killed by signal N: 128 + N, as a shell reports it


def run_child(command: Sequence[str], env: Mapping[str, str], sidecar: bool) -> int:
    """Run `command`, pass stop signals on, reap every child; the command's exit code.

    The side-car (the evaluator) ignores SIGTERM, itself and in its child: when training ends,
    Kubernetes deletes it with the finished job, and like the launcher it lets the evaluator score
    the last checkpoint until the grace period ends (SIGKILL) instead of interrupting it."""
    if sidecar:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # inherited by the child: SIG_IGN survives exec
    forwarded = [signum for signum in _FORWARDED if not (sidecar and signum == signal.SIGTERM)]
    # Held back from the spawn until the handlers are in place: as pid 1, a signal without a handler
    # is dropped, and the kubelet's SIGTERM may come at once. The child starts with none blocked.
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, forwarded)
    try:
        try:
            # SIGPIPE and SIGXFSZ back to their defaults: Python ignores them, a user's command may not.
            pid = os.posix_spawnp(
                command[0], list(command), dict(env), setsigmask=(), setsigdef=(signal.SIGPIPE, signal.SIGXFSZ)
            )
        except OSError as error:
            print(f"worker.pod: cannot run {command[0]!r}: {error.strerror}", file=sys.stderr, flush=True)
            return USAGE_EXIT_CODE

        def forward(signum: int, frame: object) -> None:
            try:
                os.kill(pid, signum)
            except ProcessLookupError:  # it has just ended; its exit is reaped below
                pass

        for signum in forwarded:
            signal.signal(signum, forward)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)  # what arrived meanwhile is forwarded now
    while True:
        done, status = os.waitpid(-1, 0)  # as pid 1, orphans of the task become ours to reap
        if done == pid:
            return _exit_code(status)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--"]:
        args = args[1:]
    try:
        additions = pod_environment(os.environ)
    except PodLayoutError as error:
        print(f"worker.pod: {error}", file=sys.stderr, flush=True)
        return USAGE_EXIT_CODE
    env = {**os.environ, **additions}
    os.umask(int(additions[UMASK_VAR], 8))  # inherited by the task, as an agent gives it on a host
    # A bare `python` is the image's own interpreter, the one that has the project, as on a host.
    command = with_python(args, sys.executable)
    command = command or [sys.executable, "-m", "worker"]
    task = TaskEnv.from_env(additions).task
    print(f"worker.pod: {task}, TF_CONFIG {additions[TF_CONFIG]}; running {' '.join(command)}", file=sys.stderr)
    sys.stderr.flush()
    return run_child(command, env, sidecar=task.startswith(f"{EVALUATOR}:"))


if __name__ == "__main__":
    raise SystemExit(main())
