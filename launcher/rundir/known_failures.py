"""TensorFlow and Keras failures users hit, each with one line saying what it is and the fix.

The report matches the root-cause task's exception (its log's tail only when it left none, then how
it exited) against this table and prints the first entry that matches, with a link to its section of
docs/troubleshooting.md. Every pattern is the text TensorFlow 2.21 prints for it, measured with a
real script (tests/integration/test_known_failures.py runs each). Order matters: the more specific
entry comes first. Pure: no files, no processes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["KNOWN_FAILURES", "KnownFailure", "TROUBLESHOOTING", "known_failure"]

TROUBLESHOOTING = "docs/troubleshooting.md"


@dataclass(frozen=True)
class KnownFailure:
    anchor: str  # the section of docs/troubleshooting.md
    pattern: re.Pattern[str]
    says: str  # what it is and the fix, one line

    @property
    def see(self) -> str:
        return f"{TROUBLESHOOTING}#{self.anchor}"

    def line(self) -> str:
        return f"known cause: {self.says} (see {self.see})"


def _known(anchor: str, pattern: str, says: str) -> KnownFailure:
    return KnownFailure(anchor, re.compile(pattern), says)


KNOWN_FAILURES: tuple[KnownFailure, ...] = (
    _known(
        "an-injected-fault",
        r"injected fault: (?:exit|kill|term|hang) at step \d+",
        "`launch --inject` fired this fault in the task (a rehearsal): nothing is wrong with the task or its "
        "host; the run treats it as the real failure it stands for: restarted within restart.max_restarts, "
        "unless its exit code is one of restart.fatal_exit_codes",
    ),
    _known(
        "keras-3-modelfit-under-the-strategy",
        r"unsupported type \(<class 'tensorflow\.python\.distribute\.values\.PerReplica'>\) to a Tensor"
        r"|Invalid reduction dimension 0",
        "Keras 3 model.fit does not work under MultiWorkerMirroredStrategy; train with a custom loop (the "
        "built-in runtime does), or use tf-keras: pip install tf-keras and set TF_USE_LEGACY_KERAS=1 in the spec's env",
    ),
    _known(
        "the-tf-port-is-already-in-use",
        r"Failed to add port to server: No address added|Could not start gRPC server",
        "TensorFlow could not listen on the task's port: another process holds it (a leftover task, another "
        "program); find it with `ss -ltnp`, or give the host free `ports` in the spec",
    ),
    _known(
        "a-peer-left-the-coordination-service",
        r"Collective ops is aborted by|Failed to send RPC to coordination service|coordination service has stopped"
        r"|CoordinationService/Heartbeat|The following tasks are unhealthy|Socket closed",
        "another task of the gang left (it exited or was lost) while this one waited on it in a collective; every "
        "task must run the same collectives to the same step (a task that returns early leaves the others waiting)",
    ),
    _known(
        "a-file-system-is-full",
        r"No space left on device|Disk quota exceeded",
        "a file system the task writes to is full (the checkpoints, TensorBoard, the run directory, or /tmp): "
        "free space there (`df -h`), or point checkpoint_dir or run_root at a larger one; a restart meets the "
        "same full disk",
    ),
    _known(
        "out-of-memory",
        r"ResourceExhaustedError|OOM when allocating|RESOURCE_EXHAUSTED: Out of memory",
        "out of memory: a tensor did not fit on the device; lower the per-replica batch size or the model size",
    ),
    _known(
        "killed-by-the-out-of-memory-killer",
        r"^killed by SIGKILL \(most likely out of memory",
        "the kernel's out-of-memory killer ended the task (`dmesg | grep -i oom` on its host names what it killed): "
        "lower the memory each task uses (batch size, model, a cached data set), or run fewer tasks per host",
    ),
    _known(
        "killed-by-sigkill-from-outside",
        r"^killed by SIGKILL \(not out of memory",
        "the task was killed by SIGKILL from outside the launcher, and not by the kernel's out-of-memory killer (it "
        "ended nothing on that host while the task ran): a person, a job scheduler or a watchdog there sent it",
    ),
    _known(
        "killed-by-sigkill",
        r"^killed by SIGKILL$",
        "the task was killed by SIGKILL, and not by the launcher: most often the kernel's out-of-memory killer "
        "(`dmesg | grep -i oom` on its host says so); lower the memory each task uses, or run fewer per host",
    ),
    _known(
        "a-url-scheme-tensorflow-cannot-reach",
        r"File system scheme '[^']*' not implemented",
        "this TensorFlow has no file system for that URL scheme: the 2.21 wheel reaches gs:// only; s3:// and "
        "hdfs:// need a file-system plugin installed and imported on every host (tensorflow-io), or give "
        "checkpoint_dir a directory every host shares",
    ),
    _known(
        "tensorflow-is-not-installed",
        r"No module named '?tensorflow'?(?:$|\s)",
        "TensorFlow is not installed for the python this task runs: pip install 'tensorflow==2.21.*' (or this "
        "project's '.[tf]') for it on that host, or point the spec's `python` at an environment that has it",
    ),
    _known(
        "tf-keras-is-not-installed",
        r"No module named '?tf_keras'?|Keras cannot be imported",
        "TF_USE_LEGACY_KERAS=1 needs tf-keras, and tf.keras cannot load it: pip install '.[fit]' from this project (or "
        "tf-keras matching TensorFlow)",
    ),
    _known(
        "a-local-task-cannot-reach-a-service-on-localhost",
        r"\[Errno 111\] Connection refused|ConnectionRefusedError",
        "a connection was refused. If every task ran on this machine, they ran in a private network where "
        "localhost is their own: this machine's loopback is 10.0.2.2 there, or launch with --host-network "
        "(local_network: host) to keep localhost",
    ),
)


def known_failure(*texts: str) -> KnownFailure | None:
    """The first entry whose pattern occurs in any of `texts` (an exception, a log tail, an error)."""
    for failure in KNOWN_FAILURES:
        if any(failure.pattern.search(text) for text in texts if text):
            return failure
    return None
